#!/usr/bin/env python
"""What `state_digest` costs (schedd.core.digest: the content hash the fault suite compares
across replicas and NodeInfo(with_digest) returns), beside bench_snapshot.py.

    python bench/bench_digest.py [--sizes 20000,100000] [--rounds 3]

For each size: a state filled as the API fills it (bench_snapshot.register: put_many entries of
100 jobs through apply), then, alternating `--rounds` times so machine load hits all alike:
state_digest (uncached, the function itself), and two same-run baselines over the same state:
pickling the snapshot (what a snapshot's writer does to walk it) and one sha256 over every job's
canonical spec text (a floor: hashing the bytes with no canonical walk). Median CPU seconds
(process time) and µs per job.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench_snapshot import register

from schedd.core.digest import state_digest
from schedd.runtime.daemon import tune_gc


def timed(fn) -> float:
    """CPU seconds of this process (not wall time: on a shared machine the wall clock measures
    the other tenants too; the digest is single-threaded CPU work)."""
    t = time.process_time()
    fn()
    return time.process_time() - t


def spec_hash(st) -> str:
    h = hashlib.sha256()
    for name in sorted(st.jobs):
        h.update(st.jobs[name].spec_text.encode())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="20000,100000")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"# {' '.join(sys.argv)}  (python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f})")
    tune_gc()
    for n in (int(x) for x in a.sizes.split(",")):
        st, _, _ = register(n)
        runs: dict[str, list[float]] = {"state_digest": [], "baseline: pickle the snapshot": [],
                                        "baseline: sha256 of spec texts": []}
        for _ in range(a.rounds):
            runs["state_digest"].append(timed(lambda: state_digest(st)))
            runs["baseline: pickle the snapshot"].append(timed(lambda: pickle.dumps(st.snapshot(), protocol=2)))
            runs["baseline: sha256 of spec texts"].append(timed(lambda: spec_hash(st)))
        d = statistics.median(runs["state_digest"])
        for name, xs in runs.items():
            m = statistics.median(xs)
            print(f"{n:>8,} jobs  {name:<32} {m * 1e3:9.1f} ms CPU  {m / n * 1e6:6.1f} us/job  "
                  f"[{min(xs) * 1e3:.1f}..{max(xs) * 1e3:.1f}]  digest/this x{d / m:.2f}")
        st = None                        # frees the state before the next size


if __name__ == "__main__":
    main()
