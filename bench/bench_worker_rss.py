#!/usr/bin/env python
"""Whether a worker's memory stays flat over a long run at a steady rate: the yardstick's cluster
(3 nodes with TLS and access control, the recording worker, bench/_schedd.py) runs `--jobs` jobs
due every `--period` seconds (1,000 fires/s by default) for `--minutes`, and prints every
`--every` seconds the worker's and each node's RSS, the fires so far and the fires per second.

    python bench/bench_worker_rss.py                       # 10,000 jobs every 10 s, 30 minutes
    python bench/bench_worker_rss.py --minutes 2 --every 20  # a short look

What to read: the worker's RSS after the first minutes (its buffers and the Python heap's
high-water mark settle once every job has fired a few times) against its RSS at the end. The
recording handler appends each fire to a list that a thread writes to a file every 0.2 s, so
recording does not hold memory. The nodes grow with the executions they retain (history_limit
per job), which is what the history store is for, not what this measures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere

from bench._schedd import periodic_specs, running


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def fires(records: Path) -> int:
    if not records.exists():
        return 0
    with open(records, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--period", type=int, default=10)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--every", type=float, default=60, help="seconds between two samples")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="schedd-worker-rss-"))
    with running(root) as s:
        s.put(periodic_specs(s, args.jobs, args.period))
        pids = s.pids()
        names = sorted(n for n in pids if n != "worker")
        print(f"{args.jobs:,} jobs every {args.period} s ({args.jobs / args.period:,.0f} fires/s), "
              f"{args.minutes:g} minutes; RSS in MiB")
        print(f"{'minute':>7} {'fires':>10} {'fires/s':>8} {'worker':>7} " + " ".join(f"{n:>7}" for n in names))
        t0 = last_t = time.monotonic()
        last_n = fires(s.records)
        while True:
            now = time.monotonic()
            n = fires(s.records)
            rate = (n - last_n) / (now - last_t) if now > last_t else 0.0
            print(f"{(now - t0) / 60:7.1f} {n:10,} {rate:8.0f} {rss_mib(pids['worker']):7.1f} "
                  + " ".join(f"{rss_mib(pids[x]):7.1f}" for x in names), flush=True)
            last_t, last_n = now, n
            if now - t0 >= args.minutes * 60:
                break
            time.sleep(min(args.every, max(0.0, t0 + args.minutes * 60 - now)) or args.every)


if __name__ == "__main__":
    main()
