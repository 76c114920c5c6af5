#!/usr/bin/env python
"""History through the real apply path: what one replica's memory, apply time and disk cost per
retained execution, with finished runs kept in memory (feature level 6, as every build before
the history store: each job keeps its newest `history_limit`) against the history store (level 7:
finished runs leave for the node's SQLite store, handed over as the Raft shell does).

Workload: `--jobs` jobs firing every second; each instant is one `fire` entry for every job, one
`start_many` and one `finish_many` (batches of 256), as the leader proposes them; every run
succeeds with a short output. The executions are recorded through SchedulerState.apply and each
entry's outbox is handed to a HistoryStore (writer thread on, as in the daemon). RSS is the
process's (state + store), after a full collection; retained = executions one could list.
At the end: `run list JOB --limit 50` and `run get` latencies over the merged reads, and the time
to export the whole store to a peer (what a new node's copy reads) and import it.

    python bench/bench_history_apply.py                             # 1M executions, both levels
    python bench/bench_history_apply.py --executions 10000000 --only-store
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedd.api import history_reads
from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.model import validate_spec
from schedd.core.state import SchedulerState
from schedd.history import HistoryStore, Retention

T0 = 1_800_000_000_000
BATCH = 256


def rss_mib() -> float:
    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Replica:
    """One replica: a state at `level` and, from the history level, a store fed by the outbox."""

    def __init__(self, level: int, store: HistoryStore | None) -> None:
        self.state, self.index, self.store = SchedulerState(), 0, store
        self.apply_s = 0.0
        self.apply(C.EPOCH, now=1)
        self.apply(C.FEATURE_LEVEL, now=1, level=level)

    def apply(self, kind: str, *, now: int, **args) -> R.ApplyResult:
        self.index += 1
        entry = C.encode(kind, rid="", now=now, term=1, by="bench", **args)
        t = time.perf_counter()
        result = self.state.apply(entry, self.index)
        out = self.state.outbox
        if out and self.store is not None:
            teams = {ex.job: j.team for ex in out.executions if (j := self.state.jobs.get(ex.job)) is not None}
            self.store.add(out.executions, self.index, teams, out.forgotten)
        self.apply_s += time.perf_counter() - t
        return result


def one_second(r: Replica, names: list[str], t: int) -> None:
    items = [[n, t] for n in names]
    for i in range(0, len(items), 500):
        r.apply(C.FIRE, now=t, items=items[i:i + 500])
    idx = {n: r.state.execs[(n, t)].log_index for n in names}
    for i in range(0, len(names), BATCH):
        part = names[i:i + BATCH]
        res = r.apply(C.START_MANY, now=t + 10, claims=[
            {"job": n, "scheduled_ms": t, "attempt": 1, "worker": "w1", "worker_incarnation": "x", "created": idx[n]}
            for n in part])
        tokens = [c.of(R.Claimed).token for c in res.of(R.ClaimedMany).claims]
        r.apply(C.FINISH_MANY, now=t + 20, results=[
            {"job": n, "scheduled_ms": t, "token": tok, "state": "SUCCEEDED", "worker": "w1", "started_ms": t + 11,
             "ended_ms": t + 19, "output": "ok\n"} for n, tok in zip(part, tokens)])


def run(level: int, jobs: int, executions: int, keep: int, marks: list[int], workdir: Path) -> dict:
    store = None
    if level >= 7:
        store = HistoryStore(workdir / f"history-{level}.sqlite", retention=Retention(keep=keep, max_age_ms=0))
    r = Replica(level, store)
    names = [f"etl-orders-{j:05d}" for j in range(jobs)]
    specs = [validate_spec({"name": n, "schedule": "@every 1s", "handler": {"shell": {"command": "true"}},
                            "history_limit": keep}).text() for n in names]
    for i in range(0, jobs, 200):
        assert r.apply(C.PUT_MANY, now=T0 - 1000, specs=specs[i:i + 200]).ok
    base = rss_mib()
    print(f"\nlevel {level} ({'history store' if store else 'in memory'}): {jobs:,} jobs every 1 s, "
          f"history_limit {keep:,}; RSS {base:.0f} MiB with no executions")
    print(f"{'executions':>12s} {'retained':>10s} {'in memory':>10s} {'RSS MiB':>8s} {'B/retained':>11s} "
          f"{'apply µs/exec':>13s} {'store MB':>9s} {'B/row disk':>10s}")
    done, t, out = 0, r.state.jobs[names[0]].next_fire, {}
    assert all(r.state.jobs[n].next_fire == t for n in names)
    seconds = executions // jobs
    started = time.perf_counter()
    for s in range(seconds):
        one_second(r, names, t)
        t += 1000
        done += jobs
        if done in marks or s == seconds - 1:
            if store is not None:
                store.flush()
            rows = store.count() if store is not None else 0
            retained = rows + len(r.state.execs)
            rss = rss_mib()
            disk = sum(f.stat().st_size for f in workdir.glob(f"history-{level}.sqlite*")) if store else 0
            per = (rss - base) * 2**20 / retained if retained else 0
            print(f"{done:12,d} {retained:10,d} {len(r.state.execs):10,d} {rss:8.0f} {per:11.1f} "
                  f"{r.apply_s / done * 1e6:13.1f} {disk / 1e6:9.1f} {disk / rows if rows else 0:10.1f}", flush=True)
            out[done] = {"rss": rss, "per": per}
    print(f"  {done:,} executions through apply in {time.perf_counter() - started:.0f} s "
          f"(apply alone {r.apply_s:.0f} s: {done / r.apply_s:,.0f} executions/s)")
    reads(r, names)
    if store is not None:
        copy(store, workdir)
        store.close()
    return out


def reads(r: Replica, names: list[str], n: int = 500) -> None:
    lock = threading.RLock()
    lists, gets = [], []
    rng = random.Random(7)
    for _ in range(n):
        job = rng.choice(names)
        t = time.perf_counter()
        page = history_reads.list_executions(r.state, lock, r.store, job=job, state_filter="", after=None,
                                             limit=50, oldest_first=False, visible=None)
        lists.append(time.perf_counter() - t)
        assert len(page.executions) == 50, len(page.executions)
        key = (job, page.executions[rng.randrange(1, 50)].scheduled_ms)
        t = time.perf_counter()
        assert history_reads.get_execution(r.state, lock, r.store, key) is not None
        gets.append(time.perf_counter() - t)
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] * 1000   # noqa: E731
    print(f"  run list JOB --limit 50: p50 {q(lists, 50):.2f} ms, p99 {q(lists, 99):.2f} ms;   "
          f"run get: p50 {q(gets, 50):.3f} ms, p99 {q(gets, 99):.3f} ms   ({n} of each)")


def copy(store: HistoryStore, workdir: Path) -> None:
    """What a new node's gap copy costs: the peer exports every row, the new node imports them."""
    peer = HistoryStore(workdir / "copy.sqlite")
    t = time.perf_counter()
    rows = 0
    for chunk, teams in store.export(0, store.applied_index):
        rows += peer.fill(chunk, teams)
    took = time.perf_counter() - t
    assert peer.digest() == store.digest()
    print(f"  copy to a new node (export + import, same machine): {rows:,} rows in {took:.1f} s "
          f"({rows / took:,.0f} rows/s); digests equal")
    peer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--executions", type=int, default=1_000_000)
    ap.add_argument("--keep", type=int, default=None, help="history_limit (default: all the run's executions per job)")
    ap.add_argument("--only-store", action="store_true", help="skip the in-memory baseline")
    ap.add_argument("--dir", default="", help="where the store goes (default: a temporary dir)")
    a = ap.parse_args()
    keep = a.keep or min(100_000, a.executions // a.jobs)
    marks = sorted({m for m in (100_000, 1_000_000, 3_000_000, 10_000_000) if m < a.executions})
    workdir = Path(a.dir or tempfile.mkdtemp(prefix="bench-history-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if not a.only_store:
            run(6, a.jobs, a.executions, keep, marks, workdir)
        run(7, a.jobs, a.executions, keep, marks, workdir)
    finally:
        if not a.dir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
