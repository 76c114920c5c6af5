"""Benchmark the herd forecast (schedd.core.forecast) against a naive count in the same run.

A table of `--jobs` jobs (default 1,000,000) in a realistic mix: most repeat on a schedule many
others share (every minute, every 5 minutes, hourly, nightly in a few zones, `@every 30s`),
some with a jitter window, some with hashed `H` fields (each job's own minute), over 50 teams
and 5 pools. The forecast of one day is timed; the naive count (every job's instants walked
one by one, as the forecast would without schedule classes) is timed on a sample of
`--sample` jobs, checked equal to the forecast of that sample, and scaled to the whole table.

`--calendars`: the day is Christmas; a third of the jobs skip a holiday calendar (a tenth of
them move to the next allowed instant instead), a tenth run only on business days, and two
blackouts select a tenth of the jobs each (one team's, skipped; one label's, deferred to its end).

Run: python bench/bench_forecast.py [--jobs N] [--sample N] [--by pool] [--calendars]
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
from schedd.core import calendars as K
from schedd.core import forecast as F
from schedd.core import schedule as sched
from schedd.core.model import Job, spec_template, validate_spec
from schedd.core.policy import policy_cache
from schedd.core.tables import Tables

DAY_MS = 86_400_000
FROM_MS = sched.parse_time("2026-12-07T00:00:00Z")
XMAS_MS = sched.parse_time("2026-12-25T00:00:00Z")
#: (every how many jobs, rules without the team): the calendars mix
CALENDAR_MIX = [(30, K.Rules(skip=("holidays",), on_skip="next_allowed")), (3, K.Rules(skip=("holidays",))),
                (10, K.Rules(only=("business",))), (7, K.Rules(labels=(("tier", "batch"),), on_blackout="defer"))]


def book() -> K.Tablet:
    """The calendars and blackouts of `--calendars`: Christmas, business days, two blackouts."""
    holidays = K.Calendar("holidays", "", "", (("2026-12-24", "Christmas Eve"), ("2026-12-25", "Christmas Day"),
                                               ("2026-12-26", "Boxing Day")), (), (), (), 1, 0, "bench")
    business = K.Calendar("business", "", "", (), (), (0, 1, 2, 3, 4), (), 1, 0, "bench")
    h = 3_600_000
    blackouts = [K.Blackout("release", XMAS_MS + 9 * h, XMAS_MS + 11 * h, "team-3", (), "release", 0, "bench"),
                 K.Blackout("backup", XMAS_MS + 2 * h, XMAS_MS + 2 * h + 1_800_000, "", (("tier", "batch"),),
                            "backup", 0, "bench")]
    return K.Tablet({c.name: c for c in (holidays, business)}, {b.name: b for b in blackouts})


def rules_for(i: int, team: str, calendars: bool) -> K.Rules:
    if calendars:
        for every, r in CALENDAR_MIX:
            if i % every == 0:
                return K.Rules(team, r.skip, r.only, r.on_skip, r.on_blackout, r.labels)
    return K.Rules(team)
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


def table(n: int, calendars: bool = False) -> list[F.JobRow]:
    rows: list[F.JobRow] = []
    i = 0
    shared: dict[K.Rules, K.Rules] = {}
    for share, spec, tz, jitter in MIX:
        for _ in range(int(n * share)):
            team = f"team-{i % 50}"
            r = rules_for(i, team, calendars)
            rows.append((f"job-{i:07d}", team, f"pool-{i % 5}", spec, tz, "", jitter, shared.setdefault(r, r)))
            i += 1
    while len(rows) < n:
        rows.append((f"job-{i:07d}", "team-0", "pool-0", "* * * * *", "UTC", "", 0, K.Rules("team-0")))
        i += 1
    return rows


def job_table(rows: list[F.JobRow]) -> Tables:
    """The same jobs as rows of a state's job table (what the API reads under the node lock)."""
    st = Tables()
    st._policies = policy_cache()
    texts: dict[tuple[object, ...], str] = {}
    for name, team, pool, spec, tz, _dst, jitter, rules in rows:
        key = (team, pool, spec, jitter, tz, rules)
        text = texts.get(key)
        if text is None:
            doc = {"name": "bench-placeholder", "team": team, "pool": pool, "schedule": spec, "timezone": tz,
                   "jitter_seconds": jitter / 1000, "handler": {"shell": {"command": "true"}}}
            if rules.skip or rules.only:
                doc["calendar"] = {"skip": list(rules.skip), "only": list(rules.only), "on_skip": rules.on_skip}
            if rules.on_blackout != "skip":
                doc["on_blackout"] = rules.on_blackout
            if rules.labels:
                doc["labels"] = dict(rules.labels)
            text = texts[key] = validate_spec(doc).text()
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
    ap.add_argument("--calendars", action="store_true", help="Christmas, with calendars and blackouts (doc)")
    args = ap.parse_args()
    rows = table(args.jobs, args.calendars)
    the_book = book() if args.calendars else F.NO_BOOK
    start = XMAS_MS if args.calendars else FROM_MS
    to_ms = start + DAY_MS
    st = job_table(rows)
    read, rwall, rcpu = timed(F.rows, st)
    assert sorted(r[:7] + (repr(r[7]),) for r in read) == sorted(r[:7] + (repr(r[7]),) for r in rows), \
        "the rows read from the job table differ from the table's"
    del st
    fc, wall, cpu = timed(F.compute, rows, start, to_ms, by=args.by, top=5, book=the_book)
    step = max(1, len(rows) // args.sample)
    sample = rows[::step][:args.sample]
    left: Counter[str] = Counter()
    slow, nwall, ncpu = timed(F.walk, sample, start, to_ms, the_book, left)
    small = F.compute(sample, start, to_ms, by=args.by, book=the_book)
    assert per_second(small) == slow and small.left == left, "the forecast and the naive count disagree on the sample"
    scale = len(rows) / len(sample)
    top = fc.groups[0].peak_seconds[0] if fc.groups and fc.groups[0].peak_seconds else None
    print(f"forecast of one day, {len(rows):,} jobs ({fc.instants:,} runs due, by {args.by or 'none'}): "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU"
          + (f"; left out by calendars and blackouts: {dict(fc.left)}" if args.calendars else ""))
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
