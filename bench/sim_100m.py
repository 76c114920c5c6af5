#!/usr/bin/env python
"""100,000,000 jobs and 10,000,000 executions a day: what N machines of a given size would carry,
computed from the per-shard figures bench/bench_shards.py measured on this machine.

    python bench/sim_100m.py [--from bench/results/<date>-<host>.jsonl] [--machines 3,6,12,24,48]
                             [--shards-per-node 1,4,16] [--cores 16] [--gib 64] [--peak 20] ...

Inputs (the newest full `bench_shards` JSON line in bench/results unless --from names a file; any
figure can be given by its flag instead, e.g. when no run exists):

- bytes per job and per execution per replica (RSS growth over the idle node), the idle RSS of a
  node and what each more shard replica adds to it, and the idle CPU each replica costs;
- the steady fire rate one shard's leader keeps up with (the S = 1 row: one leader; every fire
  dispatched in the window, p50 <= 10 ms) and the CPU seconds a fire costs its three replicas
  (the slope of the nodes' CPU over the rate steps);
- the registration (apply) rate of one group, snapshot seconds and dump bytes per job (the fork
  child), the fork's pause per GiB of the node's RSS, the dump load seconds per job (restart),
  and the time the killed leader's shards took to elect again.

The model (each assumption is a flag): every machine runs ONE node process (one Python
interpreter: one GIL, so what a node does in Python is at most `--gil-core` of one core whatever
the machine's cores); a cluster of G shards places each shard's three replicas on three machines
round-robin, so a machine holds 3G/N replicas and leads G/N shards; jobs spread evenly (the
shard hash); the day's executions arrive at `--peak` times their mean rate at the busiest second
(cron favours round minutes) and a herd of `--herd-share` of all jobs is due at one instant
(midnight); an execution stays in memory for `--exec-minutes` before it leaves for the history
store. What is not modelled: the worker side (claims, results: each fire's result is another
log entry, so the CPU per fire here is a lower bound), network and disk bandwidth beyond the
snapshot, and skewed shards.

For each (N, shards per node) it prints memory, CPU, the busiest leader's fire rate against the
measured bound, snapshot and restart times, the blast radius of one machine dying, and the
resource that binds first.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DAY = 86_400


@dataclass(slots=True)
class Measured:
    """Per-replica and per-shard figures of one bench_shards run (or flags)."""

    bytes_per_job: float
    bytes_per_exec: float
    idle_rss_mib: float               # a node with one shard, no jobs
    rss_per_replica_mib: float        # what each more shard replica adds to an idle node
    idle_cpu_per_replica: float       # % of a core
    leader_fires_per_s: float         # one leader keeping up (p50 dispatch lateness <= 10 ms)
    leader_records_per_s: float       # a herd's intents one leader records (fire entries committed)
    cpu_s_per_fire: float             # the three replicas together, over the idle cost
    apply_jobs_per_s: float           # registration through one group
    snapshot_s_per_job: float
    dump_bytes_per_job: float
    fork_ms_per_gib: float
    load_s_per_job: float             # restart: dump load
    reelect_s: float
    led_share: float = 0.0            # the shards the killed node led / S (the largest S run)
    leader_cpu_share: float = 0.5     # the leader's part of a fire's CPU (S = 1: its node / all three)
    source: str = "flags"


def newest_run(folder: Path) -> dict | None:
    best = None
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("bench") == "shards" and not r.get("quick"):
                best = r if best is None or r["date"] >= best["date"] else best
    return best


def from_run(r: dict) -> Measured:
    rows = {row["shards"]: row for row in r["rows"]}
    one, top = rows[min(rows)], rows[max(rows)]
    s_top = max(rows)

    def worst(d: dict) -> float:
        return float(max(d.values()))
    replicas_more = max(1, s_top - min(rows))
    snaps = [s for s in one["snapshots"] if s.get("child_s")]
    fork_gib = [s["fork_s"] * 1000 / (worst(one["rss_mib"]) / 1024) for s in snaps if s.get("fork_s")]
    fork_gib.sort()
    # A leader's fire rate: the highest step of the S = 1 row (one leader) that kept up (every fire
    # of the window dispatched in it, p50 <= 10 ms; p99 there is the window's worst instant, one
    # hiccup of a shared machine, so it is shown apart). A lower bound when the last step kept up.
    kept = [st["rate"] for st in one["steady"] if _kept_up(st, r.get("window_s", 10))]
    # CPU per fire: the slope of the three nodes' CPU between a row's lowest and highest step
    # (the idle cost falls out), the steepest row's.
    slopes = []
    for row in rows.values():
        st = row["steady"]
        if len(st) >= 2 and st[-1]["rate"] > st[0]["rate"]:
            d = sum(st[-1]["cpu_pct_per_node"].values()) - sum(st[0]["cpu_pct_per_node"].values())
            slopes.append(max(0.0, d / 100 / (st[-1]["rate"] - st[0]["rate"])))
    shares = []
    for st in one["steady"]:
        lead = (st.get("leaders") or {}).get("0")
        cpu = st.get("cpu_pct_per_node") or {}
        if lead in cpu and sum(cpu.values()) > 0:
            shares.append(cpu[lead] / sum(cpu.values()))
    load = [v["dump_load_s"] for v in one["restart"]["per_shard"].values() if v.get("dump_load_s")]
    jobs_one = one["jobs_per_shard"][0]
    return Measured(
        bytes_per_job=max(worst(row["bytes_per_job"]) for row in rows.values()),
        bytes_per_exec=max(1.0, max(worst(row.get("bytes_per_exec") or {"-": 0}) for row in rows.values())),
        idle_rss_mib=worst(one["idle_rss_mib"]),
        rss_per_replica_mib=max(0.0, (worst(top["idle_rss_mib"]) - worst(one["idle_rss_mib"])) / replicas_more),
        idle_cpu_per_replica=max(0.0, (worst(top["idle_cpu_pct"]) - worst(one["idle_cpu_pct"])) / replicas_more),
        leader_fires_per_s=float(max(kept, default=0)),
        leader_records_per_s=float(one["herd"].get("record_per_s") or 0),
        cpu_s_per_fire=max(slopes) if slopes else 0.0,
        apply_jobs_per_s=float(one["register_jobs_per_s"]),
        snapshot_s_per_job=max(s["child_s"] for s in snaps) / jobs_one if snaps else 0.0,
        dump_bytes_per_job=max(s["dump_bytes"] for s in snaps) / jobs_one if snaps else 0.0,
        fork_ms_per_gib=fork_gib[len(fork_gib) // 2] if fork_gib else 0.0,
        load_s_per_job=max(load) / jobs_one if load else 0.0,
        reelect_s=max(max(row["failover"]["reelect_s"].values(), default=0) for row in rows.values()),
        led_share=len(top["failover"]["shards_led"]) / s_top if s_top > 1 else 0.0,
        leader_cpu_share=max(shares) if shares else 0.5,
        source=f"bench_shards {r['date']} ({r['code']}), {r['jobs']:,} jobs, S = {sorted(rows)}")


def _kept_up(step: dict, window_s: float) -> bool:
    if "kept_up" in step:
        return bool(step["kept_up"])
    return step["p50_ms"] is not None and step["p50_ms"] <= 10 and step["fires"] >= 0.98 * step["rate"] * window_s


@dataclass(slots=True)
class Plan:
    machines: int
    shards: int
    replicas_per_node: float
    ram_gib: float
    ram_use: float
    cpu_cores: float
    gil_use: float
    leader_fires: float
    leader_use: float
    herd_per_leader: float
    herd_s: float
    shard_jobs: float
    snapshot_s: float
    dump_gb: float
    fork_ms: float
    restart_s: float
    load_h: float
    lost_jobs: float
    lost_fires: float
    binds: str


def simulate(m: Measured, a: argparse.Namespace, n: int, per_node: int) -> Plan:
    g = n * per_node // 3 if per_node * n >= 3 else 1         # shards: a node holds 3G/N replicas
    g = max(1, g)
    replicas = 3 * g / n
    leads = g / n
    shard_jobs = a.jobs / g
    fires_mean = a.execs_per_day / DAY
    fires_peak = fires_mean * a.peak
    execs_mem = a.execs_per_day * a.exec_minutes / (24 * 60)
    ram = (m.idle_rss_mib + m.rss_per_replica_mib * max(0.0, replicas - 1)) / 1024 \
        + replicas * (shard_jobs * m.bytes_per_job + execs_mem / g * m.bytes_per_exec) / 2**30
    cpu_fire = fires_peak * m.cpu_s_per_fire / n                 # the day's peak second, every replica
    cpu_idle = replicas * m.idle_cpu_per_replica / 100
    cores = cpu_fire + cpu_idle
    leader_fires = fires_peak / g
    herd = a.jobs * a.herd_share / g                              # one leader's part of the herd
    herd_s = herd / m.leader_records_per_s if m.leader_records_per_s else float("inf")
    snap = shard_jobs * m.snapshot_s_per_job
    fork = ram * m.fork_ms_per_gib
    restart = replicas * shard_jobs * m.load_s_per_job           # a node's replicas load one after another
    # Loading every job once: each node applies all of its replicas' jobs in its one process. The
    # measured rate is three processes sharing this machine's two cores (2/3 of a core each).
    per_process = m.apply_jobs_per_s * a.gil_core / (2 / 3)
    load_h = replicas * shard_jobs / per_process / 3600 if per_process else 0.0
    uses = {
        "RAM": ram / (a.gib * a.ram_headroom),
        "GIL (one process)": cores / a.gil_core,
        "cores": cores / a.cores,
        "leader fire rate": leader_fires / m.leader_fires_per_s if m.leader_fires_per_s else float("inf"),
        "herd recording": herd_s / a.burst_s,
        "snapshot time": snap / a.compaction_s,
        "restart time": restart / a.restart_budget_s,
        "replicas per process": replicas / a.max_replicas,
    }
    ranked = sorted(uses.items(), key=lambda kv: -kv[1])[:2]
    binds = ", ".join(f"{name} {use * 100:.0f}%" + (" OVER" if use > 1 else "") for name, use in ranked)
    return Plan(n, g, replicas, ram, uses["RAM"], cores, uses["GIL (one process)"], leader_fires,
                uses["leader fire rate"], herd, herd_s, shard_jobs, snap, shard_jobs * m.dump_bytes_per_job / 1e9,
                fork, restart, load_h, a.jobs * leads / g, fires_peak * leads / g, binds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", type=Path, default=None, help="a bench_shards JSON lines file")
    ap.add_argument("--jobs", type=float, default=100e6)
    ap.add_argument("--execs-per-day", type=float, default=10e6)
    ap.add_argument("--machines", default="3,6,12,24,48")
    ap.add_argument("--shards-per-node", default="1,4,16", help="replicas per node; shards G = N x this / 3")
    ap.add_argument("--cores", type=float, default=16, help="cores per machine")
    ap.add_argument("--gib", type=float, default=64, help="GiB of RAM per machine")
    ap.add_argument("--ram-headroom", type=float, default=0.6,
                    help="share of RAM the node may hold (the rest: the snapshot fork's copy-on-write, the OS)")
    ap.add_argument("--gil-core", type=float, default=0.8, help="cores one Python process can use")
    ap.add_argument("--peak", type=float, default=20, help="busiest second's fires / the mean")
    ap.add_argument("--herd-share", type=float, default=0.01, help="share of all jobs due at one instant")
    ap.add_argument("--exec-minutes", type=float, default=60, help="minutes an execution stays in memory")
    ap.add_argument("--burst-s", type=float, default=15,
                    help="[scheduler] burst_lookahead_ms / 1000: how early a herd's intents are recorded")
    ap.add_argument("--compaction-s", type=float, default=600, help="[raft] compaction_seconds")
    ap.add_argument("--restart-budget-s", type=float, default=300, help="what a node's restart may take")
    ap.add_argument("--max-replicas", type=float, default=100,
                    help="replicas one process hosts well (a tick thread each: bench_multiraft_idle)")
    for f in Measured.__dataclass_fields__:
        if f != "source":
            ap.add_argument("--" + f.replace("_", "-"), type=float, default=None)
    a = ap.parse_args()
    run = None
    if a.src is not None:
        run = newest_run_in(a.src)
    else:
        run = newest_run(HERE / "results")
    given = {f: getattr(a, f) for f in Measured.__dataclass_fields__ if f != "source" and getattr(a, f) is not None}
    if run is not None:
        m = from_run(run)
        for f, v in given.items():
            setattr(m, f, v)
            m.source += f"; {f} from the flag"
    else:
        missing = [f for f in Measured.__dataclass_fields__ if f != "source" and f not in given]
        if missing:
            sys.exit(f"no bench_shards run in bench/results and no flag for: {', '.join(missing)}")
        m = Measured(**given)
    print(f"# {a.jobs:,.0f} jobs, {a.execs_per_day:,.0f} executions/day (mean {a.execs_per_day / DAY:,.0f}/s, "
          f"busiest second x{a.peak:g} = {a.execs_per_day / DAY * a.peak:,.0f}/s), herd {a.herd_share:.1%} of jobs "
          f"at one instant; machines of {a.cores:g} cores, {a.gib:g} GiB; one node process each")
    print(f"# measured: {m.source}")
    print("#   " + ", ".join(f"{f} {getattr(m, f):.4g}" for f in Measured.__dataclass_fields__ if f != "source"))
    head = ("N", "G", "repl/node", "RAM/node GiB", "CPU/node cores", "peak fires/s/leader", "herd/leader (record s)",
            "jobs/shard", "snapshot s (GB)", "fork ms", "restart s", "load 100M h", "1 machine dies: jobs, fires/s",
            "binds first")
    rows = []
    for n in [int(x) for x in a.machines.split(",")]:
        for per in [int(x) for x in a.shards_per_node.split(",")]:
            p = simulate(m, a, n, per)
            rows.append((str(n), str(p.shards), f"{p.replicas_per_node:g}", f"{p.ram_gib:,.1f} ({p.ram_use:.0%})",
                         f"{p.cpu_cores:.2f} ({p.gil_use:.0%} GIL)", f"{p.leader_fires:,.0f} ({p.leader_use:.0%})",
                         f"{p.herd_per_leader:,.0f} ({p.herd_s:,.0f})", f"{p.shard_jobs:,.0f}",
                         f"{p.snapshot_s:,.0f} ({p.dump_gb:.1f})", f"{p.fork_ms:,.0f}", f"{p.restart_s:,.0f}",
                         f"{p.load_h:.1f}", f"{p.lost_jobs:,.0f}, {p.lost_fires:,.0f} ({m.reelect_s:.1f} s)",
                         p.binds))
    if m.led_share > 1 / 3 + 0.01:
        fires_peak = a.execs_per_day / DAY * a.peak
        print(f"# leader placement as measured: one node of three led {m.led_share:.0%} of the shards (nothing "
              f"balances leaders); if that holds at N machines, one machine's death takes the leaders of "
              f"{m.led_share:.0%} of the jobs ({a.jobs * m.led_share:,.0f}, {fires_peak * m.led_share:,.0f} "
              f"fires/s at the peak) for {m.reelect_s:.1f} s, not 1/N as the table assumes; and that node's one "
              f"process does every leader's part of the fires: {fires_peak * m.cpu_s_per_fire * m.leader_cpu_share:.2f} "
              f"cores at the peak against {a.gil_core:g} for its GIL")
    print(f"# every replica's compaction forks the whole node process: a node with R replicas pauses R times per "
          f"compaction round ('fork ms' each, {m.fork_ms_per_gib:.0f} ms/GiB measured on a 0.2 GiB process: "
          f"linear extrapolation, an upper bound); restart s: dump loads only, one replica after another")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(x.ljust(w) for x, w in zip(r, widths)))
    return 0


def newest_run_in(path: Path) -> dict | None:
    return newest_run(path) if path.is_dir() else _newest_in_file(path)


def _newest_in_file(path: Path) -> dict | None:
    best = None
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("bench") == "shards" and (best is None or r["date"] >= best["date"]):
            best = r
    return best


if __name__ == "__main__":
    sys.exit(main())
