#!/usr/bin/env python
"""What moving a shard's replica to a new node costs, and what the shard's users see meanwhile.

    python bench/bench_shard_move.py [--shards 4] [--jobs 100000] [--ticking 20] [--keep]

A 3-node LocalCluster (TLS, mTLS, ACL on, fsync always) with `shards = S` and `--jobs` daily jobs
(none fires during the run) spread over the shards; `--ticking` jobs of the moved shard fire
every second throughout. A fourth node joins (`schedd serve --join`), then `schedctl shard move`
moves the moved shard's replica held by its leader's node to it. A probe thread writes one job of
the moved shard every 100 ms through the whole run: commit latency p50/p99/max and the longest gap
between acknowledgements, in the 10 s before the join (the baseline, same run) and during the
move. Then: the join's and the move's seconds, the old holder's RSS before and after it dropped
its replica, the new node's RSS, and whether any instant of the ticking jobs was missed or
recorded twice. Every process is started here and stopped by its pid.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._metrics import code_version, percentile, rss_bytes
from bench.bench_shards import daily_calls, register
from bench.cli import machine, results_file
from schedd.core.shards import routing_key, shard_of
from schedd.runtime.cluster import LocalCluster
from schedd_client import job_spec

HERE = Path(__file__).resolve().parent
MOVED = 1


def say(text: str) -> None:
    print(text, flush=True)


class Probe:
    """Writes one job of the moved shard every 100 ms; (time, latency s or None) per write."""

    def __init__(self, c: LocalCluster, name: str) -> None:
        self.c, self.name = c, name
        self.samples: list[tuple[float, float | None]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        with self.c.client(timeout=10) as cl:
            while not self.stop.is_set():
                t = time.monotonic()
                try:
                    cl.put_job(job_spec(self.name, schedule="@daily", command=f"echo {i}"))
                    self.samples.append((t, time.monotonic() - t))
                except Exception:  # noqa: BLE001 - counted as a failed write
                    self.samples.append((t, None))
                i += 1
                self.stop.wait(max(0.0, 0.1 - (time.monotonic() - t)))

    def window(self, t0: float, t1: float) -> dict[str, float | int | None]:
        rows = [(t, v) for t, v in self.samples if t0 <= t < t1]
        ok = [v * 1000 for _, v in rows if v is not None]
        acks = [t + v for t, v in rows if v is not None]
        gaps = [b - a for a, b in zip(acks, acks[1:])]
        return {"writes": len(rows), "failed": sum(v is None for _, v in rows),
                "p50_ms": percentile(ok, 0.5), "p99_ms": percentile(ok, 0.99), "max_ms": max(ok, default=None),
                "max_gap_s": max(gaps, default=None)}


def names_in(shard: int, shards: int, prefix: str, n: int) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        name = f"{prefix}{i}"
        if shard_of(routing_key(name), shards) == shard:
            out.append(name)
        i += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--ticking", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory")
    a = ap.parse_args()
    S = a.shards
    root = Path(tempfile.mkdtemp(prefix="bench-move-"))
    c = LocalCluster(root / "c", size=3, shards=S, acl_settings={"rate_per_second": 0},
                     limits={"max_jobs_per_call": 5000, "max_jobs_per_team": 0})
    out: dict[str, object] = {"bench": "shard_move", "shards": S, "jobs": a.jobs, "machine": machine(),
                              "version": code_version()}
    try:
        c.start()
        c.wait_leader(timeout=120)
        c.wait_shards(timeout=120)
        t = time.monotonic()
        register(c, daily_calls("job", a.jobs))
        say(f"registered {a.jobs} jobs in {time.monotonic() - t:.1f} s")
        ticking = names_in(MOVED, S, "tick", a.ticking)
        with c.client(timeout=60) as cl:
            cl.put_jobs([job_spec(n, schedule="@every 1s", command="true") for n in ticking])
            moved_jobs = next(s.jobs for s in cl.list_shards().items if s.shard == MOVED)
            probe = Probe(c, names_in(MOVED, S, "probe", 1)[0])
            probe.thread.start()
            time.sleep(10)                                     # the baseline window
            t_join = time.monotonic()
            c.new_node("n4")
            c.start_node("n4")
            while "n4" not in {m.id for m in cl.cluster_status().members}:
                time.sleep(0.2)
            joined_s = time.monotonic() - t_join
            src = next(s.leader_id for s in cl.list_shards().items if s.shard == MOVED)
            src_pid = c.nodes[src].pid
            rss_src_before = rss_bytes(src_pid) if src_pid else None
            t_move = time.monotonic()
            answer = cl.move_shard(MOVED, from_node=src, to_node="n4")
            move_s = time.monotonic() - t_move
            time.sleep(3)
            probe.stop.set()
            probe.thread.join(timeout=30)
            gone = root / "c" / src / "shards" / str(MOVED)
            t_gone = time.monotonic()
            while gone.exists() and time.monotonic() - t_gone < 60:
                time.sleep(0.2)
            log = c.nodes[src].log
            while time.monotonic() - t_gone < 90 and not any(
                    w in log.read_text() for w in ("dropped replica's memory is freed", "still referenced")):
                time.sleep(0.5)
            freed_line = next((ln for ln in log.read_text().splitlines() if "dropped replica" in ln), "")
            out["drop"] = freed_line.partition("schedd: ")[2]
            rss_src_after = rss_bytes(src_pid) if src_pid else None
            n4_pid = c.nodes["n4"].pid
            missed = doubled = 0
            for n in ticking:
                times = [e.scheduled_ms for e in cl.list_executions(job=n, oldest_first=True)]
                doubled += len(times) - len(set(times))
                missed += sum((b - a) // 1000 - 1 for a, b in zip(times, times[1:]) if b - a > 1000)
        out.update({
            "moved_shard_jobs": moved_jobs, "join_s": joined_s, "move_s": move_s, "steps": list(answer.steps),
            "probe_before": probe.window(t_join - 10, t_join), "probe_during": probe.window(t_move, t_move + move_s),
            "rss_src_before_mb": (rss_src_before or 0) / 2**20, "rss_src_after_mb": (rss_src_after or 0) / 2**20,
            "rss_n4_mb": (rss_bytes(n4_pid) or 0) / 2**20 if n4_pid else None,
            "ticking_missed": missed, "ticking_doubled": doubled})
    finally:
        c.stop(timeout=15)
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    say(json.dumps(out, indent=2, default=str))
    with results_file(HERE / "results").open("a") as f:
        f.write(json.dumps(out, default=str) + "\n")


if __name__ == "__main__":
    main()
