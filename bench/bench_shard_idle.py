#!/usr/bin/env python
"""What a real sharded schedd node costs idle: CPU, threads and memory per node, per shard count.

    python bench/bench_shard_idle.py [--shards 1,8,32] [--seconds 30] [--settle 5] [--json F]
                                     [--raft-ports shared|per_group]

Per S, a fresh 3-node LocalCluster (`schedd serve`, TLS, mTLS, ACL on: as tests and production
run it; `shards = S`, so every node hosts one replica of each of the S groups). Once every shard
has a leader and `--settle` seconds passed, over `--seconds` with nothing proposed: each node's
CPU (utime + stime from /proc, in % of one core), split into its main (asyncio) thread, its
busiest other thread (the tick loop, or one group's tick thread) and the rest (per thread from
/proc/<pid>/task); its thread count and RSS at the end; how far the groups' terms grew
("terms+", as node n1's replicas see them: elections, and the leader balancer's hand-overs).
What it decides: whether a node hosts its groups with a pysyncobj tick thread each or one tick
loop for all of them (schedd/replication/ticker.py; bench/README.md "Idle sharded nodes"), and
whether its groups listen on one shared Raft port or a port each (`--raft-ports`).

Every process is started here (LocalCluster) and stopped by its pid on exit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._metrics import cpu_seconds, rss_bytes
from schedd.runtime.cluster import LocalCluster

CLK_TCK = os.sysconf("SC_CLK_TCK")


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def task_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process (utime + stime of /proc/<pid>/task/<tid>/stat)."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue                                   # the thread ended meanwhile
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def split(pid: int, before: dict[int, float], after: dict[int, float], seconds: float) -> dict[str, float]:
    """% of a core: the main (asyncio) thread, the busiest other thread (the tick loop, or one
    group's tick thread), and all the others together."""
    used = {t: 100 * (v - before.get(t, 0.0)) / seconds for t, v in after.items()}
    main = used.pop(pid, 0.0)
    return {"main": round(main, 1), "busiest": round(max(used.values(), default=0.0), 1),
            "others": round(sum(used.values()), 1)}


def terms(c: LocalCluster) -> int:
    with c.client(timeout=10) as cl:
        return sum(s.term for s in cl.list_shards().items)


def one_run(shards: int, a: argparse.Namespace, root: Path) -> dict[str, Any]:
    c = LocalCluster(root / f"s{shards}", size=3, shards=shards, raft_ports=a.raft_ports)
    try:
        t0 = time.monotonic()
        c.start()
        c.wait_leader(timeout=120)
        c.wait_shards(timeout=120 + shards)
        elected = time.monotonic() - t0
        time.sleep(a.settle)
        pids = {n: p.pid for n, p in c.nodes.items() if p.pid}
        term0 = terms(c)
        tasks0 = {n: task_cpu(p) for n, p in pids.items()}
        cpu0, w0 = {n: cpu_seconds(p) or 0.0 for n, p in pids.items()}, time.monotonic()
        time.sleep(a.seconds)
        cpu1, w1 = {n: cpu_seconds(p) or 0.0 for n, p in pids.items()}, time.monotonic()
        tasks1 = {n: task_cpu(p) for n, p in pids.items()}
        return {"shards": shards, "raft_ports": a.raft_ports or "shared", "elect_s": round(elected, 1),
                "cpu_pct": {n: round(100 * (cpu1[n] - cpu0[n]) / (w1 - w0), 1) for n in pids},
                "threads": {n: threads_of(p) for n, p in pids.items()},
                "thread_cpu_pct": {n: split(p, tasks0[n], tasks1[n], w1 - w0) for n, p in pids.items()},
                "rss_mib": {n: round((rss_bytes(p) or 0) / 2**20, 1) for n, p in pids.items()},
                "elections": terms(c) - term0, "load": round(os.getloadavg()[0], 1)}
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", default="1,8,32")
    ap.add_argument("--seconds", type=float, default=30.0, help="the idle window")
    ap.add_argument("--settle", type=float, default=5.0, help="wait after every shard has a leader")
    ap.add_argument("--json", help="also append each run as a JSON line to this file")
    ap.add_argument("--raft-ports", default="", choices=["", "shared", "per_group"],
                    help="the sharded nodes' Raft port mode (default: the nodes' own default, shared)")
    a = ap.parse_args()
    print(f"{'S':>4} {'elect s':>7} {'CPU % per node':>17} {'main/busiest thread %':>24} {'threads':>11} "
          f"{'RSS MiB':>17} {'terms+':>6} {'load':>5}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-shard-idle-") as tmp:
        for s in (int(x) for x in a.shards.split(",")):
            r = one_run(s, a, Path(tmp))
            split_text = " ".join(f"{v['main']}/{v['busiest']}" for v in r["thread_cpu_pct"].values())
            print(f"{s:>4} {r['elect_s']:>7.1f} {'/'.join(str(v) for v in r['cpu_pct'].values()):>17} "
                  f"{split_text:>24} {'/'.join(str(v) for v in r['threads'].values()):>11} "
                  f"{'/'.join(str(v) for v in r['rss_mib'].values()):>17} {r['elections']:>6} {r['load']:>5}",
                  flush=True)
            if a.json:
                with open(a.json, "a", encoding="utf-8") as f:
                    f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
