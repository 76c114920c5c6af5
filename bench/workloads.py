"""The yardstick's workloads, each run the same way against every system (schedd; APScheduler
with a memory store; APScheduler with a SQLite store), each returning one flat dict of figures.

Sizes come from `SIZES[mode]` (tiny: the test suite's smoke run; quick; full): the same code path
at every size. Scoring is bench/_score.py's, for every system alike.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import _peers
from bench._metrics import percentile, put_jobs_in_calls, put_jobs_one_each, rss_bytes, wait_caught_up
from bench._schedd import Schedd, periodic_specs, running
from bench._score import periodic_expected, read_fires, score
from schedd_client import job_spec

SYSTEMS = ("schedd", *_peers.PEERS)

# name -> mode -> parameters. A workload absent from a mode's table does not run in that mode.
SIZES: dict[str, dict[str, dict]] = {
    "steady-100": {"tiny": dict(jobs=20, period=2, duration=2, settle=1.5),
                   "quick": dict(jobs=1000, period=10, duration=10), "full": dict(jobs=1000, period=10, duration=60)},
    "steady-1000": {"tiny": dict(jobs=40, period=2, duration=2, settle=1.5),
                    "quick": dict(jobs=10000, period=10, duration=10),
                    "full": dict(jobs=10000, period=10, duration=60)},
    "steady-shell": {"tiny": dict(jobs=10, period=2, duration=2, settle=1.5, shell=True),
                     "quick": dict(jobs=1000, period=10, duration=10, shell=True),
                     "full": dict(jobs=1000, period=10, duration=60, shell=True)},
    "herd-10k": {"tiny": dict(jobs=50, settle=10), "quick": dict(jobs=10000, settle=20),
                 "full": dict(jobs=10000, settle=30)},
    "herd-100k": {"full": dict(jobs=100000, settle=60)},
    "sustained": {"tiny": dict(jobs=20, period=1, duration=2, settle=1.5),
                  "quick": dict(jobs=3000, period=1, duration=10), "full": dict(jobs=3000, period=1, duration=60)},
    "register": {"tiny": dict(single=50, batched=200), "quick": dict(single=2000, batched=20000),
                 "full": dict(single=10000, batched=50000)},
    "memory-100k": {"tiny": dict(jobs=200), "quick": dict(jobs=20000), "full": dict(jobs=100000)},
    "memory-1m": {"full": dict(jobs=1000000)},
    "failover": {"tiny": dict(trials=1), "quick": dict(trials=3), "full": dict(trials=20)},
}
# What a peer cannot do at all, or in reasonable time: (workload, peer) -> why, shown in its cell.
# A SQLite job store commits (and fsyncs) every add and every run's update: on this shared
# machine it adds about 50-350 jobs/s, so its 10,000-job runs take minutes and --quick skips them.
PEER_LIMITS = {
    ("failover", "aps-memory"): "n/a: one process",
    ("failover", "aps-sqlite"): "n/a: one process",
    ("memory-1m", "aps-sqlite"): "skipped: ~1 h at its add rate",
    ("herd-100k", "aps-sqlite"): "skipped: ~10 min at its add rate",
}
QUICK_LIMITS = {
    ("steady-1000", "aps-sqlite"): "skipped in --quick (slow adds)",
    ("herd-10k", "aps-sqlite"): "skipped in --quick (slow adds)",
    ("sustained", "aps-sqlite"): "skipped in --quick (slow adds)",
}
SQLITE_CAP = {"register": 1000, "memory": 2000}   # per-job figures: the SQLite peer registers at most this many


def peer_limit(workload: str, system: str, mode: str) -> str | None:
    """Why `system` does not run `workload` in `mode` (None: it does)."""
    return PEER_LIMITS.get((workload, system)) or (QUICK_LIMITS.get((workload, system)) if mode == "quick" else None)


RUNS = {"tiny": 1, "quick": 1, "full": 3}
PEER_TIMEOUT_S = {"tiny": 150, "quick": 240, "full": 1200}   # a peer run that takes longer is an error cell


def say(text: str = "") -> None:
    print(text, flush=True)


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def until(t: float) -> None:
    while (d := t - time.time()) > 0:
        time.sleep(min(d, 0.5))


def leader_term(s: Schedd) -> int:
    """The highest Raft term any live node reports (a leaderless moment still has one): the
    difference over a workload is how many elections it saw."""
    terms = [i.term for n, p in s.c.nodes.items() if p.alive() and (i := s.c.node_info(n, timeout=5.0))]
    return max(terms, default=0)


# ------------------------------------------------------------------------------------------ schedd


def schedd_periodic(s: Schedd, p: dict) -> dict:
    n, period, duration = p["jobs"], p["period"], p["duration"]
    shell = bool(p.get("shell"))
    reg = s.put(periodic_specs(s, n, period, shell))
    a = math.ceil(time.time()) + 3.0             # past the lookahead: intents already committed
    b = a + duration
    term0 = leader_term(s)
    until(a)
    c0 = s.cpu(children=shell)
    until(a + duration * 0.75)
    shown: dict = {}
    asking = threading.Thread(target=lambda: shown.update(overload_shown(s)), daemon=True)
    asking.start()                               # an answer slower than the window ends must not
    until(b)                                     # stretch the CPU window
    c1 = s.cpu(children=shell)
    expected = periodic_expected({s.name(i): float(i % period) for i in range(n)}, period, a, b)
    fires = wait_started(s, expected, b + p.get("settle", 3.0), b + p.get("grace", LATE_GRACE_S))
    out = score(fires, expected)
    asking.join(STATUS_WAIT_S)
    out.update(overload_shown=shown.get("text", f"(no answer within {STATUS_WAIT_S:g}s)"),
               status_s=shown.get("seconds"))
    if s.prefix:                                 # a shared cluster: stop them for the next workload
        for i in range(n):
            s.client.delete_job(s.name(i))
    cpu = {k: c1[k] - c0.get(k, 0.0) for k in c1}
    out.update(register_s=reg, cpu_s=sum(cpu.values()), cpu_by_process=cpu, window_s=duration,
               elections=leader_term(s) - term0)
    return out


STATUS_WAIT_S = 60.0


def overload_shown(s: Schedd) -> dict:
    """What `schedctl cluster status` says of the dispatch backlog three quarters into the window
    ("" when it says nothing), and how long it took to answer: past capacity the overload must
    be visible, and soon, not only late."""
    t0 = time.monotonic()
    try:
        st = s.client.cluster_status()
    except Exception as e:  # noqa: BLE001 - a figure, not a failure of the workload
        return {"text": f"(cluster status failed: {e})", "seconds": time.monotonic() - t0}
    return {"text": next((w for w in st.warnings if "dispatch is behind" in w), ""),
            "seconds": time.monotonic() - t0}


LATE_GRACE_S = 20.0     # how long past the window a late instant may still start (late, not missed)


def wait_started(s: Schedd, expected: set, at_least: float, at_most: float) -> list:
    """The fires of this turn, read once every expected instant has started (or at `at_most`)."""
    until(at_least)
    while True:
        fires, _ = read_fires(s.records, s.offset)
        started = {(f.job, round(f.scheduled, 3)) for f in fires}
        if expected <= started or time.time() >= at_most:
            return fires
        time.sleep(0.5)


def schedd_herd(s: Schedd, p: dict) -> dict:
    n = p["jobs"]
    due = math.ceil(time.time() + 5 + n / 1000)   # registration (about 1,500-13,000 jobs/s here) ends before
    term0 = leader_term(s)
    reg = s.put([job_spec(s.name(i), schedule=f"at {rfc3339(due)}", python="rec") for i in range(n)])
    before = due - time.time()
    offset = s.offset
    fires: list = []
    end = due + p["settle"]
    while time.time() < end:
        got, offset = read_fires(s.records, offset)
        fires += got
        if len({f.job for f in fires}) >= n:
            break
        time.sleep(0.2)
    out = score(fires, {(s.name(i), float(due)) for i in range(n)})
    out.update(register_s=reg, registered_before_due_s=before, elections=leader_term(s) - term0, due=due)
    if before < 0:
        out["error"] = f"registration ended {-before:.1f} s after the due time: not a herd"
    return out


def schedd_register(s: Schedd, p: dict) -> dict:
    s.client.put_job(job_spec(s.name("warm"), command="true"))
    one = [job_spec(s.name(f"a{i}"), command="true") for i in range(p["single"])]
    cpu0, client0, lead = s.cpu(), time.process_time(), s.c.leader()
    el, lat, errors = asyncio.run(put_jobs_one_each(s.addrs(), s.c.security(), one, 64, warm=s.name("warm")))
    cpu1, client1 = s.cpu(), time.process_time()
    # What bounds single calls: CPU per call in each process (the leader's, the followers', the
    # client's: this process runs it), on the machine's cores.
    per_job = {n: round((cpu1[n] - cpu0.get(n, 0.0)) / p["single"] * 1e6) for n in cpu1}
    per_job["client"] = round((client1 - client0) / p["single"] * 1e6)
    batch = [job_spec(s.name(f"b{i}"), command="true") for i in range(p["batched"])]
    t = time.perf_counter()
    put_jobs_in_calls(s.client, batch)
    el_b = time.perf_counter() - t
    return {"single_per_s": p["single"] / el, "single_p99_s": percentile(lat, 0.99),
            "single_cpu_us_per_job": per_job, "leader": lead,
            "errors": sum(errors.values()), "batched_per_s": p["batched"] / el_b}


def schedd_memory(s: Schedd, p: dict) -> dict:
    n = p["jobs"]
    wait_caught_up(s.c)
    time.sleep(1.0)
    pids = s.pids(with_worker=False)
    r0 = {k: rss_bytes(pid) or 0 for k, pid in pids.items()}
    specs = [job_spec(s.name(f"d{i}"), schedule=f"{i % 60} 3 * * *", python="rec") for i in range(n)]
    reg = s.put(specs)
    time.sleep(1.0)
    per = {k: ((rss_bytes(pid) or 0) - r0[k]) / n for k, pid in pids.items()}
    return {"rss_per_job_max": max(per.values()), "rss_per_job_by_node": per, "register_s": reg,
            "baseline_rss": r0}


def schedd_failover(s: Schedd, p: dict) -> dict:
    rng = random.Random()
    tick = s.name("tick")
    s.put([job_spec(tick, schedule="* * * * * *", python="rec")])
    until(time.time() + 3)
    a = math.ceil(time.time())
    gaps: list[float] = []
    offset = read_fires(s.records, s.offset)[1]
    for _ in range(p["trials"]):
        until(time.time() + 2.5)
        leader = s.c.wait_leader(timeout=60)
        until(math.floor(time.time()) + 1 + rng.random())
        kill = time.time()
        s.c.kill_node(leader)
        got = None
        end = time.monotonic() + 30
        while got is None and time.monotonic() < end:
            fires, offset = read_fires(s.records, offset)
            got = next((f.start for f in fires if f.start > kill and f.job == tick), None)
            time.sleep(0.02)
        gaps.append(got - kill if got is not None else math.inf)
        s.c.start_node(leader)
        s.c.wait_leader(timeout=60)
        wait_caught_up(s.c, timeout=60)
    b = math.floor(time.time())
    until(b + 3)
    out = score(read_fires(s.records, s.offset)[0], periodic_expected({tick: 0.0}, 1, a, b))
    out.update(kill_to_start_p50_s=statistics.median(gaps), kill_to_start_p99_s=percentile(gaps, 0.99),
               kill_to_start_max_s=max(gaps), trials=len(gaps), gaps_s=gaps)
    return out


SCHEDD = {"steady": schedd_periodic, "herd": schedd_herd, "sustained": schedd_periodic,
          "register": schedd_register, "memory": schedd_memory, "failover": schedd_failover}


# ------------------------------------------------------------------------------------------ peers


def peer_run(peer: str, kind: str, p: dict, tmp: Path, timeout: float) -> dict:
    store = peer.split("-", 1)[1]
    records = tmp / "records.txt"
    base = {"store": store, "db": str(tmp / "jobs.sqlite"), "records": str(records)}
    if kind in ("steady", "sustained"):
        r = _peers.run({**base, "kind": "periodic", **p}, timeout)
        a, b = r["window"]
        out = score(read_fires(records)[0],
                    periodic_expected({f"j{i}": float(i % p["period"]) for i in range(p["jobs"])}, p["period"], a, b))
        out.update(register_s=r["register_s"], cpu_s=r["cpu_s"], window_s=p["duration"])
        return out
    if kind == "herd":
        r = _peers.run({**base, "kind": "oneoff", **p}, timeout)
        out = score(read_fires(records)[0], {(f"j{i}", float(r["due"])) for i in range(p["jobs"])})
        out.update(registered_before_due_s=r["registered_before_due_s"], due=r["due"])
        return out
    if kind == "register":
        n = min(p["single"], SQLITE_CAP["register"]) if store == "sqlite" else p["batched"]
        r = _peers.run({**base, "kind": "register", "jobs": n}, timeout)
        return {"single_per_s": r["jobs_per_s"], "batched_per_s": r["jobs_per_s"], "jobs": n, "note": "add_job loop"}
    if kind == "memory":
        n = p["jobs"] if store == "memory" else min(p["jobs"], SQLITE_CAP["memory"])
        r = _peers.run({**base, "kind": "memory", "jobs": n}, timeout)
        return {"rss_per_job_max": r["rss_per_job"], "db_bytes_per_job": r.get("db_bytes_per_job"), "jobs": n}
    raise ValueError(kind)


# ------------------------------------------------------------------------------------------ one run


def kind_of(workload: str) -> str:
    return workload.split("-", 1)[0]


def run_one(workload: str, system: str, mode: str, work: Path, shared: Schedd | None = None) -> dict:
    """One run of `workload` on `system`: its figures (or {"error": ...}). schedd runs on a fresh
    cluster, or on `shared` (the smoke run: each workload in its own turn)."""
    p = SIZES[workload][mode]
    kind = kind_of(workload)
    t0 = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"{workload}-{system}-", dir=work))
    try:
        if system == "schedd" and shared is not None:
            shared.turn(workload.replace("-", "") + "-")
            out = SCHEDD[kind](shared, p)
        elif system == "schedd":
            with running(root) as s:
                out = SCHEDD[kind](s, p)
        else:
            out = peer_run(system, kind, p, root, timeout=PEER_TIMEOUT_S[mode])
    except Exception as e:  # noqa: BLE001 - one failed run is reported, the others go on
        out = {"error": f"{type(e).__name__}: {e}"}
    out["elapsed_s"] = time.monotonic() - t0
    return out
