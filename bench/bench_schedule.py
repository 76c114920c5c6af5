"""Benchmark schedd.core.schedule against croniter (which it uses only to place H fields).

Prints microseconds per call. apply() calls next_after for every fire and every job
registration, and parse (cached) for both, so these are the numbers that bound how many jobs
one replica can register and fire per second.

Run: python bench/bench_schedule.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from datetime import datetime, timedelta, UTC
from pathlib import Path
from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from croniter import croniter

from schedd.core import schedule as S

CRON = "*/15 9-17 * * MON-FRI"
START_MS = S.parse_time("2026-03-24T10:07:31.250Z")  # a Tuesday, inside the window


def per_call_us(fn: Callable[[int], object], n: int, repeat: int = 5) -> float:
    """Best of `repeat` runs of n calls (best-of filters noise from other processes)."""
    best = float("inf")
    for _ in range(repeat):
        gc.disable()
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        took = time.perf_counter() - t0
        gc.enable()
        best = min(best, took)
    return best / n * 1e6


def walk(s: S.Schedule) -> Callable[[int], object]:
    """next_after from a moving start, as apply does (each fire advances the job)."""
    state = [START_MS]

    def step(_: int) -> object:
        t = S.next_after(s, state[0])
        state[0] = t if t is not None else START_MS
        return t

    return step


def croniter_walk(expr: str, tz: str) -> Callable[[int], object]:
    it = croniter(expr, datetime.fromtimestamp(START_MS / 1000, S._zone(tz) if tz != "UTC"
                                               else UTC))
    return lambda _: it.get_next(float)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    n = 2_000 if ap.parse_args().quick else 20_000

    rows: list[tuple[str, float]] = []
    utc = S.parse(CRON, "UTC")
    berlin = S.parse(CRON, "Europe/Berlin")
    rows.append((f"next_after  cron UTC            {CRON!r}", per_call_us(walk(utc), n)))
    rows.append((f"next_after  cron Europe/Berlin  {CRON!r}", per_call_us(walk(berlin), n)))
    secs = S.parse("*/10 * * * * *", "America/New_York")
    rows.append(("next_after  cron America/New_York '*/10 * * * * *'", per_call_us(walk(secs), n)))
    hashed = S.parse("H H(0-5) * * *", "UTC", hash_key="job-1")
    rows.append(("next_after  cron UTC            'H H(0-5) * * *'", per_call_us(walk(hashed), n)))
    rows.append(("next_after  @every 30s", per_call_us(walk(S.parse("@every 30s")), n)))
    rows.append(("next_after  at (future)", per_call_us(
        lambda _: S.next_after(S.parse("at 2030-01-01T00:00:00Z"), START_MS), n)))

    rows.append(("parse cached (same spec, tz, key)", per_call_us(
        lambda _: S.parse(CRON, "Europe/Berlin", hash_key="job-1"), n)))
    counter = iter(range(10 ** 9))
    rows.append(("parse new job id, plain spec (key dropped, cache hit)", per_call_us(
        lambda _: S.parse(CRON, "UTC", hash_key=f"job-{next(counter)}"), n, repeat=1)))
    rows.append(("parse new job id, 'H H * * *' (field caches warm)", per_call_us(
        lambda _: S.parse("H H * * *", "UTC", hash_key=f"job-{next(counter)}"), n, repeat=1)))
    cold_specs = [f"{m} {h} * * 1-{d}" for m in range(60) for h in range(24) for d in (2, 3, 4)]

    def cold(i: int) -> object:
        S._parse_cached.cache_clear()
        S._cron_for.cache_clear()
        S._field_set.cache_clear()
        S._plain_field.cache_clear()
        return S.parse(cold_specs[i % len(cold_specs)], "UTC")

    rows.append(("parse cold (all caches cleared; fields expanded)", per_call_us(
        cold, max(n // 40, 50), repeat=1)))

    rows.append((f"croniter get_next UTC            {CRON!r}",
                 per_call_us(croniter_walk(CRON, "UTC"), n // 4)))
    rows.append((f"croniter get_next Europe/Berlin  {CRON!r}",
                 per_call_us(croniter_walk(CRON, "Europe/Berlin"), n // 4)))
    rows.append((f"croniter construction            {CRON!r}", per_call_us(
        lambda _: croniter(CRON, datetime(2026, 3, 24, 10, 7, 31)), n // 20, repeat=3)))
    rows.append(("croniter.expand 'H H * * *' with hash_id", per_call_us(
        lambda i: croniter.expand("H H * * *", hash_id=f"job-{i}".encode()), n // 20, repeat=3)))

    width = max(len(label) for label, _ in rows)
    print(f"schedd.core.schedule bench ({n} calls per row, best of 5 unless cold)")
    for label, us in rows:
        print(f"  {label:<{width}}  {us:9.2f} us/call")
    # Sanity: our answer equals croniter's for the benchmarked expression.
    ours = S.next_after(utc, START_MS)
    theirs = croniter(CRON, datetime(1970, 1, 1) + timedelta(milliseconds=START_MS)).get_next(
        datetime)
    assert ours == (theirs - datetime(1970, 1, 1)) // timedelta(milliseconds=1)


if __name__ == "__main__":
    main()
