#!/usr/bin/env python
"""The scaling curve of a sharded cluster on this machine: per shard count S, what registration,
memory, snapshots, a node's restart, a herd and a steady fire rate cost.

    python bench/bench_shards.py [--shards 1,2,4,8] [--jobs 200000] [--herd 20000]
                                 [--rates 250,500,1000,2000,4000,8000] [--window 10] [--quick] [--keep]

Per S, a fresh 3-node LocalCluster (TLS, mTLS, ACL on, fsync always, no rate limit; `shards = S`:
every node hosts a replica of every shard). Every node runs through bench/_shard_agent.py, which
reads each shard group inside the node (a sharded node's /metrics shows shard 0 only). No worker
runs: a fire is measured where the leader dispatches it (the dispatcher's launch, which observes
`schedd_fire_lateness_seconds`: dispatch time minus due time); its intent (the execution record)
exists once the fire entry commits. Phases:

1. idle: RSS of each node once every shard has a leader.
2. register: `--jobs` daily jobs (`M H * * *`, H twelve hours away: none fires during the run)
   in PutJobs calls of 1,000 from 4 client threads (a call is split by shard on the node);
   jobs/s at the acks, then the time until every replica of every shard has applied them.
3. memory: RSS of each node after registration minus idle, per job it holds (every node holds
   one replica of every shard: all N jobs), once caught up.
4. snapshot: per node and shard, pysyncobj's forced log compaction (fork, pickle, gzip level 1,
   fsync): the parent's fork pause, the child's time (to the tick that reaps it), the dump's size.
5. failover and restart: SIGKILL of the node leading the most shards; per shard it led, the time
   until a survivor leads with its epoch applied; 3 s later it restarts: per shard, the time its
   dump took to load (in the group's build, one shard after another on the main thread) and
   until that replica has applied the commit index its leader had at the restart. A probe thread
   per shard writes one small job every 100 ms throughout: commit latency p50/p99/max and the
   longest gap between acks, before the kill and while the node restarts.
6. herd: `--herd` one-off jobs `at T`, registered more than the burst lookahead (15 s) before T:
   when the leaders recorded the first and the last of their intents (the execution records
   exist; relative to T, negative: ahead) and so at what rate, when the last was dispatched,
   dispatch lateness p50/p99, and the RSS each SCHEDULED execution added.
7. steady: for each rate R of `--rates` (until two steps in a row do not keep up: 98% of the
   window's fires dispatched in it, p50 <= 10 ms), R x 10 jobs
   `H/10 * * * * *` (the previous step's jobs kept): over a `--window` s window, dispatch
   lateness p50/p99/max over every shard's leader, each node's CPU; the highest R with p99 <=
   10 ms is the steady fire rate (p99 is about the window's worst instant: an instant's fires
   are dispatched in one pass), and the highest R kept up is the throughput.

Prints one table (a figure per row, an S per column) and appends one JSON line to
bench/results/<date>-<host>.jsonl. Every process is started here and stopped by its pid.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from collections.abc import Iterator, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._metrics import code_version, percentile, rss_bytes, scrape
from bench.cli import machine, results_file
from schedd.core.shards import routing_key, shard_of
from schedd.runtime.cluster import LocalCluster
from schedd_client import job_spec

HERE = Path(__file__).resolve().parent
AGENT = HERE / "_shard_agent.py"
PER_CALL = 1000
THREADS = 4
TARGET_P99_MS = 10.0


def say(text: str) -> None:
    print(text, flush=True)


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------ the agents


def ask(c: LocalCluster, nid: str, req: dict, timeout: float = 30.0) -> Any:
    path = c.root / f"{nid}.agent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def try_ask(c: LocalCluster, nid: str, req: dict, timeout: float = 5.0) -> Any | None:
    try:
        return ask(c, nid, req, timeout)
    except (OSError, ValueError):
        return None


def all_stats(c: LocalCluster) -> dict[str, dict]:
    out = {}
    for nid, p in c.nodes.items():
        if p.alive() and (st := try_ask(c, nid, {"op": "stats"})) is not None:
            out[nid] = st
    return out


def leaders(stats: dict[str, dict]) -> dict[int, str]:
    """shard -> the node that leads it with its epoch applied (the highest term)."""
    best: dict[int, tuple[int, str]] = {}
    for nid, st in stats.items():
        for k, sh in st["shards"].items():
            if sh.get("leads_epoch") and sh["term"] >= best.get(int(k), (-1, ""))[0]:
                best[int(k)] = (sh["term"], nid)
    return {k: nid for k, (_, nid) in best.items()}


def wait_applied(c: LocalCluster, jobs: dict[int, int] | None, timeout: float = 900.0) -> float:
    """Until every live replica of every shard has applied its leader's commit index (and holds
    `jobs[k]` jobs when given); seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = all_stats(c)
        lead = leaders(st)
        if len(st) == sum(p.alive() for p in c.nodes.values()) and len(lead) == c.shards:
            ok = True
            for k, ln in lead.items():
                commit = st[ln]["shards"][str(k)]["commit"]
                for s in st.values():
                    sh = s["shards"].get(str(k))
                    if sh is None or sh.get("applied", -1) < commit or (jobs and sh["jobs"] < jobs[k]):
                        ok = False
            if ok:
                return time.monotonic() - t0
        time.sleep(0.25)
    raise TimeoutError(f"replicas not caught up within {timeout:g} s")


def take_lateness(c: LocalCluster, clear: bool = True) -> dict[int, list[tuple[float, float]]]:
    out: dict[int, list[tuple[float, float]]] = {}
    for nid, p in c.nodes.items():
        if p.alive() and (ans := try_ask(c, nid, {"op": "lateness", "clear": clear}, timeout=60)):
            for k, vals in ans.items():
                out.setdefault(int(k), []).extend((t, v) for t, v in vals)
    return out


# ------------------------------------------------------------------ registering


def names_by_shard(prefix: str, n: int, shards: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for i in range(n):
        k = shard_of(routing_key(f"{prefix}{i:07d}"), shards)
        counts[k] = counts.get(k, 0) + 1
    return counts


def name_in_shard(prefix: str, k: int, shards: int) -> str:
    """The first `prefix`N that lives in shard k."""
    return next(f"{prefix}{i}" for i in range(1 << 20) if shard_of(routing_key(f"{prefix}{i}"), shards) == k)


def register(c: LocalCluster, specs: Sequence | Iterator[list], threads: int = THREADS) -> float:
    """PutJobs calls of PER_CALL from `threads` clients at once; seconds until the last ack.
    `specs` is a list of specs, or the calls' lists made as they are sent (`daily_calls`: ten
    million specs held at once would be gigabytes of the bench's own memory)."""
    it = iter([specs[i:i + PER_CALL] for i in range(0, len(specs), PER_CALL)]) \
        if isinstance(specs, Sequence) else specs
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run() -> None:
        with c.client(timeout=300) as cl:
            while True:
                with lock:
                    batch = next(it, None)
                if batch is None:
                    return
                try:
                    cl.put_jobs(batch)
                except BaseException as e:  # noqa: BLE001 - reported after the join
                    errors.append(e)
                    return
    t = time.perf_counter()
    ths = [threading.Thread(target=run) for _ in range(threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        raise RuntimeError(f"registration failed: {errors[0]!r}")
    return time.perf_counter() - t


def daily_calls(prefix: str, n: int, by_shard: int = 0) -> Iterator[list]:
    """N daily jobs (`M H * * *`, H twelve hours away: none fires during the run) in lists of
    PER_CALL, each made when a client thread asks for it. `by_shard` = S: each list holds one
    shard's jobs (a client that batches by shard: the SDK sends such a call to its shard's
    leader, and the node neither splits nor checks it across groups)."""
    hour = (datetime.now(UTC).hour + 12) % 24
    held: dict[int, list] = {}
    for i in range(n):
        name = f"{prefix}{i:07d}"
        k = shard_of(routing_key(name), by_shard) if by_shard > 1 else 0
        batch = held.setdefault(k, [])
        batch.append(job_spec(name, schedule=f"{i % 60} {hour} * * *", command="true"))
        if len(batch) == PER_CALL:
            yield held.pop(k)
    yield from held.values()


# ------------------------------------------------------------------ probes


class Probes:
    """One writer per shard: a small job of that shard put every `period` s, its latency kept."""

    def __init__(self, c: LocalCluster, period: float = 0.1) -> None:
        self.c, self.period = c, period
        self.stop = threading.Event()
        self.rows: dict[int, list[tuple[float, float, bool]]] = {k: [] for k in range(c.shards)}
        self.names = {}
        i = 0
        while len(self.names) < c.shards:
            k = shard_of(routing_key(f"probe-{i}"), c.shards)
            self.names.setdefault(k, f"probe-{i}")
            i += 1
        self.threads = [threading.Thread(target=self.run, args=(k,), daemon=True) for k in range(c.shards)]

    def start(self) -> None:
        for th in self.threads:
            th.start()

    def run(self, k: int) -> None:
        name, rows = self.names[k], self.rows[k]
        hour = (datetime.now(UTC).hour + 12) % 24
        n = 0
        with self.c.client(timeout=10) as cl:
            while not self.stop.is_set():
                n += 1
                t = time.time()
                try:
                    cl.put_job(job_spec(name, schedule=f"0 {hour} * * *", command=f"true {n}"))
                    rows.append((t, time.time() - t, True))
                except Exception:  # noqa: BLE001 - a failed write is a row too
                    rows.append((t, time.time() - t, False))
                self.stop.wait(max(0.0, self.period - (time.time() - t)))

    def close(self) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(timeout=30)

    def window(self, k: int, t0: float, t1: float) -> dict[str, Any]:
        rows = [r for r in self.rows[k] if t0 <= r[0] < t1]
        ok = [lat * 1000 for _, lat, good in rows if good]
        acks = sorted(t + lat for t, lat, good in rows if good)
        gaps = [b - a for a, b in zip([t0] + acks, acks + [t1])] if rows else []
        return {"writes": len(rows), "failed": len(rows) - len(ok), "p50_ms": percentile(ok, .5),
                "p99_ms": percentile(ok, .99), "max_ms": max(ok) if ok else None,
                "longest_gap_s": max(gaps) if gaps else None}


# ------------------------------------------------------------------ one shard count


def run_one(S: int, a: argparse.Namespace, root: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"shards": S}
    wrap = {f"n{i + 1}": [sys.executable, str(AGENT)] for i in range(3)}
    c = LocalCluster(root / f"s{S}", size=3, shards=S, wrap=wrap, acl_settings={"rate_per_second": 0},
                     limits={"max_jobs_per_call": 5000, "max_jobs_per_team": 0},
                     **({"raft": {"compaction_bytes": a.compaction_mib << 20}} if a.compaction_mib else {}))
    row["compaction_mib"] = a.compaction_mib or None
    probes: Probes | None = None
    t_phase = time.monotonic()

    def phase(name: str) -> None:
        nonlocal t_phase
        now = time.monotonic()
        row.setdefault("phase_s", {})[name] = round(now - t_phase, 1)
        say(f"  [S={S}] {name} done in {now - t_phase:.1f} s (load {os.getloadavg()[0]:.1f})")
        t_phase = now
    try:
        c.start()
        c.wait_leader(timeout=120)
        c.wait_shards(timeout=120)
        wait_applied(c, None, timeout=120)
        time.sleep(3.0)
        pids = {n: p.pid for n, p in c.nodes.items()}
        idle = {n: rss_bytes(pid) or 0 for n, pid in pids.items()}
        row["idle_rss_mib"] = {n: round(v / 2**20, 1) for n, v in idle.items()}
        cpu0 = _cpu(pids, c)
        time.sleep(a.idle_window)
        cpu1 = _cpu(pids, c)
        row["idle_cpu_pct"] = {n: round(100 * (cpu1[n] - cpu0[n]) / a.idle_window, 1) for n in cpu0}
        phase("start")

        # 2. register
        per_shard = names_by_shard("d-", a.jobs, S)
        took = register(c, daily_calls("d-", a.jobs, S if a.by_shard else 0), threads=a.threads)
        row["register_threads"], row["register_by_shard"] = a.threads, a.by_shard
        row["register_s"] = round(took, 2)
        row["register_jobs_per_s"] = round(a.jobs / took)
        row["apply_wait_s"] = round(wait_applied(c, per_shard), 2)
        phase("register")

        # 3. memory
        time.sleep(2.0)
        rss = {n: rss_bytes(pid) or 0 for n, pid in pids.items()}
        row["rss_mib"] = {n: round(v / 2**20, 1) for n, v in rss.items()}
        row["bytes_per_job"] = {n: round((rss[n] - idle[n]) / a.jobs) for n in rss}
        row["jobs_per_shard"] = [per_shard.get(k, 0) for k in range(S)]

        # 4. snapshots, one (node, shard) at a time
        snaps = []
        for nid in list(c.nodes)[:a.snapshot_nodes]:
            for k in range(S):
                # one entry the group's last dump lacks: a group whose log was compacted on its
                # own since its last write (millions of jobs pass the threshold) would find
                # nothing new to dump, and a forced compaction would fork nothing
                with c.client(timeout=60) as cl:
                    cl.put_job(job_spec(name_in_shard(f"snap-{nid}-", k, S), schedule="0 0 1 1 *", command="true"))
                wait_applied(c, None, timeout=300)
                ans = ask(c, nid, {"op": "compact", "shard": k}, timeout=900)
                ans["node"] = nid
                snaps.append(ans)
        row["snapshots"] = snaps
        forks = sorted((s["fork_s"] or 0) * 1000 for s in snaps)
        row["snapshot_child_s_max"] = max((s["child_s"] or 0 for s in snaps), default=None)
        row["snapshot_fork_ms_max"] = forks[-1] if forks else None
        row["snapshot_fork_ms_p50"] = percentile(forks, .5) if forks else None
        row["dump_mb_per_shard_max"] = max((s["dump_bytes"] for s in snaps), default=0) / 1e6 or None
        phase("snapshot")

        # 5. failover and restart
        probes = Probes(c)
        probes.start()
        time.sleep(1.0 + a.probe_before)        # the first second: channels and TLS handshakes
        st = all_stats(c)
        lead = leaders(st)
        counts: dict[str, int] = {}
        for nid in lead.values():
            counts[nid] = counts.get(nid, 0) + 1
        victim = max(c.nodes, key=lambda n: (counts.get(n, 0), n == "n1"))
        led = sorted(k for k, n in lead.items() if n == victim)
        log_at_kill = log_bytes(c, victim)           # what its restart replays after its dumps
        t_kill = time.time()
        c.kill_node(victim)
        reelect: dict[int, float] = {}
        while len(reelect) < len(led) and time.time() - t_kill < 60:
            now_lead = leaders(all_stats(c))
            for k in led:
                if k not in reelect and now_lead.get(k) not in (None, victim):
                    reelect[k] = time.time() - t_kill
            time.sleep(0.05)
        row["failover"] = {"node": victim, "shards_led": led,
                           "jobs_led": sum(per_shard.get(k, 0) for k in led),
                           "reelect_s": {str(k): round(v, 3) for k, v in reelect.items()}}
        time.sleep(max(0.0, t_kill + 3.0 - time.time()))
        st = all_stats(c)
        lead = leaders(st)
        target = {k: st[n]["shards"][str(k)]["commit"] for k, n in lead.items()}
        t_restart = time.time()
        c.start_node(victim)
        applied: dict[int, float] = {}
        agent_st: dict = {}
        while len(applied) < S and time.time() - t_restart < 600:
            ans = try_ask(c, victim, {"op": "stats"}, timeout=2)
            if ans is not None:
                agent_st = ans
                for k, sh in ans["shards"].items():
                    if int(k) not in applied and sh.get("applied", -1) >= target.get(int(k), 1 << 62):
                        applied[int(k)] = time.time() - t_restart
            time.sleep(0.05)
        t_back = time.time()
        restore = {}
        for k, sh in agent_st.get("shards", {}).items():
            b = sh.get("build") or [t_restart, 0]
            rs = sh.get("restores") or []
            restore[k] = {"dump_load_s": round(rs[0][1], 3) if rs else None,
                          "built_at_s": round(b[0] + b[1] - t_restart, 3),
                          "applied_at_s": round(applied[int(k)], 3) if int(k) in applied else None}
        row["restart"] = {"node": victim, "per_shard": restore, "log_mib_at_kill": log_at_kill,
                          "all_applied_s": round(max(applied.values()), 3) if len(applied) == S else None}
        time.sleep(1.0)
        t_end = time.time()
        probes.close()
        base = t_kill - a.probe_before
        row["probes"] = {str(k): {"before": probes.window(k, base, t_kill),
                                  "kill_to_restart": probes.window(k, t_kill, t_restart),
                                  "restart": probes.window(k, t_restart, max(t_back, t_restart + 1))}
                         for k in range(S)}
        probes = None
        del t_end
        phase("failover+restart")

        # 6. herd
        wait_applied(c, None, timeout=300)
        take_lateness(c)
        base_execs = {k: 0 for k in range(S)}
        st = all_stats(c)
        lead = leaders(st)
        for k, n in lead.items():
            base_execs[k] = st[n]["shards"][str(k)]["execs"]
        time.sleep(1.0)
        rss_before_herd = {n: rss_bytes(p.pid) or 0 for n, p in c.nodes.items()}
        # registered before T - burst lookahead (15 s), so the leaders record the herd's intents
        # in one go from then: the recording rate is measured, not the registration's
        lead_s = a.herd / max(1.0, row["register_jobs_per_s"]) * 1.5 + a.herd_lead
        T = math.ceil(time.time() + lead_s)
        herd_specs = [job_spec(f"h-{i:07d}", schedule=f"at {rfc3339(T)}", command="true") for i in range(a.herd)]
        herd_per_shard = names_by_shard("h-", a.herd, S)
        marks: dict[str, float] = {}
        done = threading.Event()

        def watch_intents() -> None:
            while not done.is_set():
                st = all_stats(c)
                lead = leaders(st)
                if len(lead) == S:
                    got = [st[lead[k]]["shards"][str(k)]["execs"] - base_execs[k] for k in range(S)]
                    if "first" not in marks and any(x > 0 for x in got):
                        marks["first"] = time.time() - T
                    if all(got[k] >= herd_per_shard.get(k, 0) for k in range(S)):
                        marks["all"] = time.time() - T
                        return
                time.sleep(0.05)
        watcher = threading.Thread(target=watch_intents, daemon=True)
        watcher.start()
        reg = register(c, herd_specs)
        del herd_specs
        left = T - time.time()
        while time.time() < T + a.herd_settle:
            if "all" in marks and time.time() > T:
                lat = take_lateness(c, clear=False)
                if sum(len(v) for v in lat.values()) >= a.herd:
                    break
            time.sleep(0.1)
        done.set()
        watcher.join(timeout=10)
        recorded_at, first_at = marks.get("all"), marks.get("first")
        lat = take_lateness(c)
        wait_applied(c, None, timeout=300)
        time.sleep(1.0)
        rss_herd = {n: rss_bytes(p.pid) or 0 for n, p in c.nodes.items()}
        job_b = row["bytes_per_job"]
        # what a SCHEDULED execution (and its intent's share of the log) adds, its job's bytes taken off
        row["bytes_per_exec"] = {n: round((rss_herd[n] - rss_before_herd[n]) / a.herd - job_b[n]) for n in rss_herd}
        vals = sorted(v for vs in lat.values() for _, v in vs)
        last_t = max((t for vs in lat.values() for t, _ in vs), default=None)
        row["herd"] = {"size": a.herd, "register_s": round(reg, 2), "T_minus_now_after_register_s": round(left, 1),
                       "all_recorded_at_s": None if recorded_at is None else round(recorded_at, 2),
                       "first_recorded_at_s": None if first_at is None else round(first_at, 2),
                       # intents per second the leaders recorded (all shards; polled every 50 ms or so)
                       "record_per_s": round(a.herd / max(0.05, recorded_at - first_at))
                       if recorded_at is not None and first_at is not None else None,
                       "dispatched": len(vals),
                       "last_dispatched_at_s": None if last_t is None else round(last_t - T, 3),
                       "lateness_p50_ms": _ms(percentile(vals, .5)), "lateness_p99_ms": _ms(percentile(vals, .99)),
                       "lateness_max_ms": _ms(vals[-1] if vals else None),
                       "per_shard_max_ms": {str(k): _ms(max((v for _, v in vs), default=None)) for k, vs in lat.items()}}
        phase("herd")

        # 7. steady
        steps = []
        have = misses = 0
        for rate in a.rates:
            want = rate * 10
            specs = [job_spec(f"s-{i:07d}", schedule="H/10 * * * * *", command="true") for i in range(have, want)]
            register(c, specs)
            have = want
            del specs
            wait_applied(c, None, timeout=300)
            w0 = math.ceil(time.time()) + a.steady_settle
            w1 = w0 + a.window
            while time.time() < w0 - 0.5:          # an instant's dispatch is a few ms after it
                time.sleep(0.1)
            take_lateness(c)
            cpu0 = _cpu(pids, c)
            while time.time() < w1 + 2.0:
                time.sleep(0.1)
            cpu1 = _cpu(pids, c)
            lat = take_lateness(c)
            inside = {k: [v for t, v in vs if w0 <= t - v < w1] for k, vs in lat.items()}
            vals = sorted(v for vs in inside.values() for v in vs)
            step = {"rate": rate, "jobs": want, "fires": len(vals), "fires_per_s": round(len(vals) / a.window),
                    "p50_ms": _ms(percentile(vals, .5)), "p99_ms": _ms(percentile(vals, .99)),
                    "max_ms": _ms(vals[-1] if vals else None),
                    "per_shard_p99_ms": {str(k): _ms(percentile(sorted(vs), .99)) for k, vs in inside.items() if vs},
                    "cpu_pct_per_node": {n: round(100 * (cpu1[n] - cpu0[n]) / (a.window + 2), 1) for n in cpu0},
                    "leaders": {str(k): n for k, n in leaders(all_stats(c)).items()},
                    "cpu_s_per_1000_fires": round(1000 * sum(cpu1[n] - cpu0[n] for n in cpu0) / max(1, len(vals)), 3),
                    "load": round(os.getloadavg()[0], 1)}
            steps.append(step)
            say(f"  [S={S}] steady {rate}/s: {step['fires_per_s']} fires/s, lateness p50 {step['p50_ms']} ms, "
                f"p99 {step['p99_ms']} ms, max {step['max_ms']} ms; CPU % {step['cpu_pct_per_node']}")
            # p99 is close to the worst instant's lateness (an instant's fires go out in one pass),
            # so one hiccup of a shared machine misses it: the steps go on while the leaders keep up
            # (98% of the fires dispatched in the window, p50 <= 10 ms), two steps that do not end it
            kept = step["p50_ms"] is not None and step["p50_ms"] <= TARGET_P99_MS and len(vals) >= 0.98 * rate * a.window
            step["kept_up"] = kept
            misses = 0 if kept else misses + 1
            if misses >= 2:
                break
        row["steady"] = steps
        good = [s["rate"] for s in steps if s["p99_ms"] is not None and s["p99_ms"] <= TARGET_P99_MS
                and s["fires"] >= 0.98 * s["rate"] * a.window]
        row["steady_rate_p99_10ms"] = max(good) if good else 0
        row["steady_rate_kept_up"] = max((s["rate"] for s in steps if s["kept_up"]), default=0)
        phase("steady")
        return row
    finally:
        if probes is not None:
            probes.close()
        c.stop()


def _cpu(pids: dict[str, int], c: LocalCluster) -> dict[str, float]:
    from bench._metrics import cpu_seconds
    return {n: cpu_seconds(p.pid) or 0.0 for n, p in c.nodes.items() if p.pid}


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 2)


# ------------------------------------------------------------------ the table


def table(rows: list[dict[str, Any]]) -> str:
    def worst(d: dict) -> Any:
        return max(d.values()) if d else None

    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    def probe(r: dict, part: str, key: str) -> Any:
        vals = [p[part][key] for p in r["probes"].values() if p[part][key] is not None]
        return max(vals) if vals else None

    lines = [
        ("registration, jobs/s (PutJobs x1000)", lambda r: r["register_jobs_per_s"]),
        ("  client threads, calls", lambda r: f"{r.get('register_threads', THREADS)}, "
                                              f"{'one shard each' if r.get('register_by_shard') else 'every shard'}"),
        ("  registration s / then all replicas applied s", lambda r: f"{r['register_s']:.1f} / {r['apply_wait_s']:.1f}"),
        ("idle RSS per node, MiB (max)", lambda r: worst(r["idle_rss_mib"])),
        ("RSS per node after N jobs, MiB (max)", lambda r: worst(r["rss_mib"])),
        ("bytes per job per replica (max node)", lambda r: worst(r["bytes_per_job"])),
        ("bytes per execution per replica (herd's, max node)", lambda r: worst(r["bytes_per_exec"])),
        ("idle CPU % of a core per node (max)", lambda r: worst(r["idle_cpu_pct"])),
        ("snapshot: child s per shard (max)", lambda r: r["snapshot_child_s_max"]),
        ("snapshot: fork pause ms (p50 / max)", lambda r: f"{r['snapshot_fork_ms_p50']:.1f} / "
                                                         f"{r['snapshot_fork_ms_max']:,.1f}"),
        ("snapshot: dump MB per shard (max)", lambda r: r["dump_mb_per_shard_max"]),
        ("kill: shards led / jobs in them", lambda r: f"{len(r['failover']['shards_led'])} / "
                                                     f"{r['failover']['jobs_led']:,}"),
        ("kill: re-elected, s (max shard)", lambda r: worst(r["failover"]["reelect_s"])),
        ("restart: dump load s per shard (max)", lambda r: worst({k: v["dump_load_s"] or 0 for k, v in
                                                                   r["restart"]["per_shard"].items()})),
        ("restart: last shard built at s", lambda r: worst({k: v["built_at_s"] for k, v in
                                                             r["restart"]["per_shard"].items()})),
        ("restart: log MiB to replay per shard (max / sum)", lambda r: "{:.1f} / {:.1f}".format(
            max(r["restart"]["log_mib_at_kill"].values()), sum(r["restart"]["log_mib_at_kill"].values()))),
        ("restart: all replicas applied at s", lambda r: r["restart"]["all_applied_s"]),
        ("probe commit p99 ms, before (worst shard)", lambda r: probe(r, "before", "p99_ms")),
        ("probe commit p99 ms, kill->restart", lambda r: probe(r, "kill_to_restart", "p99_ms")),
        ("probe commit p99 ms, during restart", lambda r: probe(r, "restart", "p99_ms")),
        ("probe longest ack gap s, kill->restart", lambda r: probe(r, "kill_to_restart", "longest_gap_s")),
        ("probe longest ack gap s, during restart", lambda r: probe(r, "restart", "longest_gap_s")),
        ("herd: intents recorded from / to T+ s", lambda r: f"{r['herd']['first_recorded_at_s']:.1f} / "
                                                          f"{r['herd']['all_recorded_at_s']:.1f}"),
        ("herd: intents recorded per s (all leaders)", lambda r: r["herd"]["record_per_s"]),
        ("herd: last dispatched at T+ s", lambda r: r["herd"]["last_dispatched_at_s"]),
        ("herd: dispatched / size", lambda r: f"{r['herd']['dispatched']:,} / {r['herd']['size']:,}"),
        ("herd: lateness p99 ms", lambda r: r["herd"]["lateness_p99_ms"]),
        ("steady: highest fires/s with p99 <= 10 ms", lambda r: r["steady_rate_p99_10ms"]),
        ("steady: highest fires/s kept up (p50 <= 10 ms)", lambda r: r["steady_rate_kept_up"]),
        ("steady: p50 ms per rate step", lambda r: " ".join(f"{s['rate']}:{fmt(s['p50_ms'])}" for s in r["steady"])),
        ("steady: p99 ms per rate step", lambda r: " ".join(f"{s['rate']}:{fmt(s['p99_ms'])}" for s in r["steady"])),
    ]
    head = ["figure"] + [f"S={r['shards']}" for r in rows]
    body = [[name] + [fmt(_safe(f, r)) for r in rows] for name, f in lines]
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    out = [" | ".join(h.ljust(w) for h, w in zip(head, widths))]
    out.append("-+-".join("-" * w for w in widths))
    out += [" | ".join(x.ljust(w) for x, w in zip(b, widths)) for b in body]
    return "\n".join(out)


def log_bytes(c: Any, nid: str) -> dict[str, float]:
    """MiB of Raft log each of node `nid`'s groups holds since its last snapshot (its
    schedd_raft_log_bytes per shard): what a restart replays after loading its dumps."""
    return {dict(labels)["shard"]: round(v / 2**20, 2)
            for (name, labels), v in scrape(c.nodes[nid].metrics, ca=c.metrics_ca).items()
            if name == "schedd_raft_log_bytes" and "shard" in dict(labels)}


def _safe(f: Any, r: dict) -> Any:
    try:
        return f(r)
    except (KeyError, TypeError, ValueError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", default=None, help="shard counts, comma-separated (default 1,2,4,8; --quick 1,2)")
    ap.add_argument("--jobs", type=int, default=None, help="daily jobs registered (default 200,000; --quick 5,000)")
    ap.add_argument("--herd", type=int, default=None, help="one-offs due at one instant (default 20,000; --quick 2,000)")
    ap.add_argument("--rates", default=None, help="steady fires/s steps (default 250,500,1000,2000,4000,8000; --quick 200)")
    ap.add_argument("--window", type=int, default=None, help="steady window s (default 10; --quick 4)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: small sizes, S = 1,2 (under 2 minutes)")
    ap.add_argument("--threads", type=int, default=THREADS, help=f"client threads registering (default {THREADS})")
    ap.add_argument("--by-shard", action="store_true",
                    help="register in calls of one shard's jobs each (default: calls of every shard's jobs, split by the node)")
    ap.add_argument("--snapshot-nodes", type=int, default=3,
                    help="nodes whose every shard is compacted one at a time (default 3: all; 1 at millions of jobs)")
    ap.add_argument("--compaction-mib", type=int, default=0,
                    help="[raft] compaction_bytes of the nodes, in MiB (default: the nodes' default)")
    ap.add_argument("--keep", action="store_true", help="keep the clusters' folders")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    a = ap.parse_args()
    q = a.quick
    a.shards = [int(x) for x in (a.shards or ("1,2" if q else "1,2,4,8")).split(",")]
    a.jobs = a.jobs if a.jobs is not None else (5_000 if q else 200_000)
    a.herd = a.herd if a.herd is not None else (1_500 if q else 20_000)
    a.rates = [int(x) for x in (a.rates or ("200" if q else "250,500,1000,2000,4000,8000")).split(",")]
    a.window = a.window or (4 if q else 10)
    a.probe_before = 2.0 if q else 4.0
    a.idle_window = 3.0 if q else 10.0
    a.herd_lead, a.herd_settle = (4.0, 15.0) if q else (18.0, 60.0)
    a.steady_settle = 3 if q else 5
    host = machine()                           # the load average at the start
    say(f"# {' '.join(sys.argv)}  ({host}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC)")
    root = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    rows = []
    started = time.monotonic()
    try:
        for S in a.shards:
            t = time.monotonic()
            rows.append(run_one(S, a, root))
            rows[-1]["total_s"] = round(time.monotonic() - t, 1)
            say(f"S={S}: {rows[-1]['total_s']:.0f} s")
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            say(f"kept {root}")
    say("")
    say(table(rows))
    rec = {"bench": "shards", "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": host,
           "load_at_end": round(os.getloadavg()[0], 1),
           "code": code_version(), "quick": q, "jobs": a.jobs, "herd": a.herd, "rates": a.rates,
           "window_s": a.window, "nodes": 3, "total_s": round(time.monotonic() - started, 1), "rows": rows}
    out = results_file(a.results)
    with out.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    say(f"\n{out} (+1 line); {rec['total_s']:.0f} s in all")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
