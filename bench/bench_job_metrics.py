"""What the per-job series cost (schedd.runtime.job_metrics): the apply hook on the Raft tick
thread, against the apply of the same entries, and the scrape that folds the ended attempts in.

A herd of one-off jobs goes through fire, claim and result as in bench_apply.py; every entry's
(entry, result) is then handed to the hook (`RunSeries.on_applied`) and timed per entry, beside
the apply of the same entries measured in the same run (the baseline: what the hook adds to). Then
one scrape folds every ended attempt in (decode, one lock hold reading the executions, the series
update) and renders the families; its time per ended attempt and its lock hold are printed. With
`--labelled` jobs at most get series of their own ([metrics] job_series_limit).

Run: python bench/bench_job_metrics.py [--jobs 20000] [--labelled 500]
"""

from __future__ import annotations

import argparse
import gc
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_apply import DUE, T0, Feed

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.model import validate_spec
from schedd.leader.planner import plan_fires
from schedd.runtime.job_metrics import JobLabels, RunSeries
from schedd.settings import MetricsSettings


class TimedLock:
    """The node lock, with how long the scrape held it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.held = 0.0
        self.longest = 0.0
        self._at = 0.0

    def __enter__(self) -> None:
        self._lock.acquire()
        self._at = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        took = time.perf_counter() - self._at
        self.held += took
        self.longest = max(self.longest, took)
        self._lock.release()


class Node:
    def __init__(self, state) -> None:
        self.state, self.lock = state, TimedLock()


def entries_of(n: int) -> tuple[Feed, list[tuple[str, R.ApplyResult]], float]:
    """The herd's fire, claim and result entries applied, with their results and the apply time."""
    feed = Feed()
    specs = [validate_spec({"name": f"h{i}", "team": "t", "schedule": f"at {DUE}",
                            "handler": {"python": {"name": "rec"}}}).text() for i in range(n)]
    for i in range(0, n, 200):
        assert feed.apply(C.PUT_MANY, now=T0, specs=specs[i:i + 200]).ok
    due = T0 + 60_000
    keys = plan_fires(feed.state, due - 1000, 2000, limit=n)
    applied: list[tuple[str, R.ApplyResult]] = []
    took = 0.0

    def apply(kind: str, now: int, **args) -> R.ApplyResult:
        nonlocal took
        feed.index += 1
        entry = C.encode(kind, rid="", now=now, term=1, by="bench", **args)
        t = time.perf_counter()
        result = feed.state.apply(entry, feed.index)
        took += time.perf_counter() - t
        applied.append((entry, result))
        return result

    for i in range(0, n, 500):
        apply(C.FIRE, due - 1000, items=[list(k) for k in keys[i:i + 500]])
    created = {k: feed.state.execs[k].log_index for k in keys}
    tokens = []
    for i in range(0, n, 256):
        r = apply(C.START_MANY, due, claims=[{"job": j, "scheduled_ms": t, "attempt": 1, "worker": "w1",
                                              "worker_incarnation": "x", "created": created[(j, t)]}
                                             for j, t in keys[i:i + 256]])
        tokens += [c.of(R.Claimed).token for c in r.of(R.ClaimedMany).claims]
    for i in range(0, n, 256):
        apply(C.FINISH_MANY, due + 5, results=[
            {"job": j, "scheduled_ms": t, "token": tok, "state": "SUCCEEDED", "worker": "w1", "started_ms": due + 1,
             "ended_ms": due + 2} for (j, t), tok in zip(keys[i:i + 256], tokens[i:i + 256])])
    return feed, applied, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--labelled", type=int, default=500)
    a = ap.parse_args()
    feed, applied, apply_s = entries_of(a.jobs)
    node = Node(feed.state)
    series = RunSeries(node, JobLabels(MetricsSettings(job_series_limit=a.labelled)))
    fires = [(e, r) for e, r in applied if '"k":"fire"' in e]
    gc.collect()
    t = time.perf_counter()
    for entry, result in applied:
        series.on_applied(entry, result)
    hook_s = time.perf_counter() - t
    t = time.perf_counter()
    for entry, result in fires:
        series.on_applied(entry, result)
    fire_hook_s = time.perf_counter() - t
    t = time.perf_counter()
    families = list(series.families())
    scrape_s = time.perf_counter() - t
    runs = sum(s.value for f in families if f.name == "schedd_job_runs" for s in f.samples)
    assert runs == a.jobs, runs
    print(f"{a.jobs:,} executions: {len(applied)} entries (fire, start_many, finish_many), "
          f"{len(fires)} of them fire entries")
    print(f"apply (baseline)        {apply_s * 1e3:9.1f} ms   {apply_s / len(applied) * 1e6:9.1f} µs per entry")
    print(f"hook, every entry       {hook_s * 1e3:9.3f} ms   {hook_s / len(applied) * 1e6:9.3f} µs per entry "
          f"({hook_s / apply_s * 100:.2f}% of apply)")
    print(f"hook, fire entries only {fire_hook_s * 1e3:9.3f} ms   {fire_hook_s / len(fires) * 1e6:9.3f} µs per entry")
    print(f"scrape (fold + render)  {scrape_s * 1e3:9.1f} ms   {scrape_s / a.jobs * 1e6:9.1f} µs per ended attempt; "
          f"node lock held {node.lock.held * 1e3:.1f} ms in all, "
          f"{node.lock.longest * 1e3:.2f} ms at most at once")


if __name__ == "__main__":
    main()
