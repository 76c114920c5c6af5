"""Benchmark the herd forecast (schedd.core.forecast) against a naive count in the same run.

A table of `--jobs` jobs (default 1,000,000) in a realistic mix: most repeat on a schedule many
others share (every minute, every 5 minutes, hourly, nightly in a few zones, `@every 30s`),
some with a jitter window, some with hashed `H` fields (each job's own minute), over 50 teams
and 5 pools. The forecast of one day is timed; the naive count (every job's instants walked
one by one, as the forecast would without schedule classes) is timed on a sample of
`--sample` jobs, checked equal to the forecast of that sample, and scaled to the whole table.

Run: python bench/bench_forecast.py [--jobs N] [--sample N] [--by pool]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedd.api.forecasts import READ_CHUNK
from schedd.core import forecast as F
from schedd.core import schedule as sched
from schedd.core.model import Job, spec_template, validate_spec
from schedd.core.policy import policy_cache
from schedd.core.tables import Tables

DAY_MS = 86_400_000
FROM_MS = sched.parse_time("2026-12-07T00:00:00Z")
#: (share of the table, schedule, zone, jitter ms)
MIX = [
    (0.30, "* * * * *", "UTC", 0),
    (0.10, "* * * * *", "UTC", 30_000),
    (0.15, "*/5 * * * *", "UTC", 0),
    (0.10, "0 * * * *", "UTC", 0),
    (0.05, "0 * * * *", "UTC", 600_000),
    (0.05, "H * * * *", "UTC", 0),
    (0.05, "H H * * *", "Europe/Berlin", 0),
    (0.05, "0 0 * * *", "UTC", 0),
    (0.05, "0 0 * * *", "America/New_York", 0),
    (0.05, "30 2 * * *", "Europe/Berlin", 0),
    (0.05, "@every 30s", "UTC", 0),
]


def table(n: int) -> list[F.JobRow]:
    rows: list[F.JobRow] = []
    i = 0
    for share, spec, tz, jitter in MIX:
        for _ in range(int(n * share)):
            rows.append((f"job-{i:07d}", f"team-{i % 50}", f"pool-{i % 5}", spec, tz, "", jitter))
            i += 1
    while len(rows) < n:
        rows.append((f"job-{i:07d}", "team-0", "pool-0", "* * * * *", "UTC", "", 0))
        i += 1
    return rows


def job_table(rows: list[F.JobRow]) -> Tables:
    """The same jobs as rows of a state's job table (what the API reads under the node lock)."""
    st = Tables()
    st._policies = policy_cache()
    texts: dict[tuple[str, str, str, int, str], str] = {}
    for name, team, pool, spec, tz, _dst, jitter in rows:
        key = (team, pool, spec, jitter, tz)
        text = texts.get(key)
        if text is None:
            text = texts[key] = validate_spec({"name": "bench-placeholder", "team": team, "pool": pool, "schedule": spec,
                                               "timezone": tz, "jitter_seconds": jitter / 1000,
                                               "handler": {"shell": {"command": "true"}}}).text()
        st.jobs[name] = Job(name=name, team=team, schedule=spec, tz=tz,
                            spec_t=spec_template(text.replace('"bench-placeholder"', f'"{name}"'), name), version=1,
                            paused=False, next_fire=FROM_MS, created_ms=0, updated_ms=0, created_by="bench")
    return st



def per_second(fc: F.Forecast) -> Counter[int]:
    out: Counter[int] = Counter()
    base = fc.from_ms // 1000
    for g in fc.groups:
        for i, due in enumerate(g.series):
            if due:
                out[base + i] += due
    return out


def timed(fn, *args, **kw):
    gc.collect()
    gc.disable()
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        out = fn(*args, **kw)
    finally:
        gc.enable()
    return out, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--sample", type=int, default=2_000)
    ap.add_argument("--by", default="", choices=F.GROUPINGS)
    args = ap.parse_args()
    rows = table(args.jobs)
    to_ms = FROM_MS + DAY_MS
    st = job_table(rows)
    read, rwall, rcpu = timed(F.rows, st)
    assert sorted(read) == sorted(rows), "the rows read from the job table differ from the table's"
    del st
    fc, wall, cpu = timed(F.compute, rows, FROM_MS, to_ms, by=args.by, top=5)
    step = max(1, len(rows) // args.sample)
    sample = rows[::step][:args.sample]
    slow, nwall, ncpu = timed(F.walk, sample, FROM_MS, to_ms)
    fast = per_second(F.compute(sample, FROM_MS, to_ms, by=args.by))
    assert fast == slow, "the forecast and the naive count disagree on the sample"
    scale = len(rows) / len(sample)
    top = fc.groups[0].peak_seconds[0] if fc.groups and fc.groups[0].peak_seconds else None
    print(f"forecast of one day, {len(rows):,} jobs ({fc.instants:,} runs due, by {args.by or 'none'}): "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU")
    parts = max(1, -(-len(rows) // READ_CHUNK))
    print(f"reading the rows from the job table: {rwall:.2f} s wall, {rcpu:.2f} s CPU in all; the API reads "
          f"{READ_CHUNK:,} jobs per hold of the node lock, about {rcpu / parts * 1000:.0f} ms CPU each")
    print(f"naive walk of every job's instants: {nwall:.2f} s wall for {len(sample):,} jobs "
          f"({sum(slow.values()):,} runs), about {nwall * scale:,.0f} s for {len(rows):,} "
          f"(x{nwall * scale / wall:,.0f}); counts equal on the sample")
    if top is not None:
        print(f"busiest second: {sched.format_ms(top.at_ms)} with {top.due:,} runs due "
              f"({'; '.join(f'{c.jobs:,} x {c.schedule} {c.tz}' for c in top.contributors[:3])})")


if __name__ == "__main__":
    main()
