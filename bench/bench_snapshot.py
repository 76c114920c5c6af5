"""1,000,000 jobs: how long registration (apply), snapshot and restore take, and memory per job.

    python bench/bench_snapshot.py [--jobs 1000000] [--baseline-jobs 100000]

Registration is measured at the state machine (apply of `put_many` entries of 100 jobs, as the
API proposes them), i.e. the per-node CPU cost that bounds cluster-wide batched registration.
Snapshot is what pysyncobj's forked child does with our state (pickle protocol 2 into gzip at
level 1, our setting); restore is what a follower or a restarted node does in its tick thread
(gunzip, unpickle, rebuild the indexes and the timing wheel). The baseline, in the same run, is
pysyncobj's stock gzip level 9 on `--baseline-jobs` jobs (extrapolated to the full count).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pysyncobj import pickle as ps_pickle

from schedd.core import commands as C
from schedd.core.model import validate_spec
from schedd.core.state import SchedulerState
from schedd.runtime.daemon import tune_gc

T0 = 1_800_000_000_000
SCHEDULES = [("@every 1h", "UTC"), ("0 2 * * *", "Europe/Berlin"), ("H H * * *", "UTC"),
             ("*/15 9-17 * * MON-FRI", "America/New_York")]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def specs(n: int):
    for i in range(n):
        sched, tz = SCHEDULES[i % len(SCHEDULES)]
        yield {"name": f"job-{i:07d}", "schedule": sched, "timezone": tz, "team": f"team-{i % 50}",
               "handler": {"shell": {"command": f"/usr/local/bin/task --id {i}"}}}


def register(n: int) -> tuple[SchedulerState, float, float]:
    """Apply put_many entries as the API proposes them (canonical spec texts, 100 per entry).
    The proposer's validation is timed apart: it runs on the leader only, in the gRPC thread."""
    started = time.perf_counter()
    texts = [validate_spec(s).text() for s in specs(n)]
    validate_s = time.perf_counter() - started
    print(f"  (proposer-side validation of {n:,} specs: {validate_s:.1f} s = {n / validate_s:,.0f}/s)")
    st = SchedulerState()
    st.apply(C.encode(C.EPOCH, rid="", now=T0, term=1), 1)
    gc.collect()
    before = rss_mb()
    batch, index = [], 2
    started = time.perf_counter()
    for text in texts:
        batch.append(text)
        if len(batch) == 100:
            r = st.apply(C.encode(C.PUT_MANY, rid=f"r{index}", now=T0, term=1, specs=batch), index)
            assert r.ok, r
            batch, index = [], index + 1
    if batch:
        st.apply(C.encode(C.PUT_MANY, rid=f"r{index}", now=T0, term=1, specs=batch), index)
    del texts
    elapsed = time.perf_counter() - started
    st.dedup.clear()        # as after the 15-minute dedup TTL; the table is not per-job state
    gc.collect()
    return st, elapsed, (rss_mb() - before) * 1024 * 1024 / n


def snapshot(st: SchedulerState, path: str, level: int) -> tuple[float, int]:
    data = [{}, st.snapshot()]            # the shape pysyncobj gives a consumer's data
    started = time.perf_counter()
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=level) as g:
        ps_pickle.dump((data, None, None, None), g)
    return time.perf_counter() - started, os.path.getsize(path)


def restore(path: str) -> tuple[float, SchedulerState]:
    started = time.perf_counter()
    with open(path, "rb") as f, gzip.GzipFile(fileobj=f) as g:
        data = ps_pickle.load(g)
    st = SchedulerState()
    st.restore(data[0][1])
    return time.perf_counter() - started, st


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--baseline-jobs", type=int, default=100_000)
    a = ap.parse_args()
    print(f"# {' '.join(sys.argv)}  (python {sys.version.split()[0]}, {os.cpu_count()} cpus)")
    tune_gc()                                # as the daemon does
    tmp = tempfile.mkdtemp(prefix="schedd-bench-snap-")
    try:
        st, reg_s, per_job = register(a.jobs)
        print(f"register {a.jobs:,} jobs via apply(put_many x100): {reg_s:.1f} s = "
              f"{a.jobs / reg_s:,.0f} jobs/s per node; memory {per_job:,.0f} B/job (RSS delta)")
        snap_s, size = snapshot(st, os.path.join(tmp, "dump1"), 1)
        print(f"snapshot (pickle p2 + gzip level 1, in the fork child): {snap_s:.1f} s, {size / 1e6:.1f} MB "
              f"({size / a.jobs:.0f} B/job)")
        t0 = time.perf_counter()
        st.snapshot()
        print(f"snapshot cost in the Raft tick thread (references only): {(time.perf_counter() - t0) * 1e3:.3f} ms")
        del st
        gc.collect()
        rest_s, st2 = restore(os.path.join(tmp, "dump1"))
        print(f"restore (gunzip + unpickle + reindex + wheel, in the tick thread): {rest_s:.1f} s; "
              f"{len(st2.jobs):,} jobs, wheel {len(st2.wheel):,}")
        del st2
        gc.collect()
        if a.baseline_jobs:
            small, _, _ = register(a.baseline_jobs)
            b1, _ = snapshot(small, os.path.join(tmp, "b1"), 1)
            b9, size9 = snapshot(small, os.path.join(tmp, "b9"), 9)
            scale = a.jobs / a.baseline_jobs
            print(f"baseline, {a.baseline_jobs:,} jobs: stock gzip level 9 {b9:.2f} s vs level 1 {b1:.2f} s "
                  f"(x{b9 / b1:.1f}); level 9 extrapolated to {a.jobs:,} jobs: {b9 * scale:.0f} s")
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
