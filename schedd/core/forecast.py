"""The herd forecast: how many instants fall due per second and per minute in a window, the
peaks, which jobs make them, and how each peak compares with the worker slots and the quota
that serve it. Computed from the replicated job table, without firing anything.

Why it is fast: most jobs repeat on a schedule many others share (every minute, hourly, a
nightly batch at 00:00). Jobs are grouped into *classes* of identical instants
(`schedule.instant_key`: the compiled cron, zone and DST policy; hashed `H` crons landing on
the same values share one), and each class's instants are enumerated once, however many jobs
it holds. Jitter moves each job's due time by an offset fixed per job (`policy.jitter_offset_ms`),
so a class keeps its jobs in buckets by offset and adds each bucket's count at every instant
plus the offset: the cost is instants x distinct offsets per class, never instants x jobs.

Due seconds are exact: a job is due at its instant plus its jitter offset, counted in the
second (and minute) that holds that moment. The forecast counts the jobs as the table holds
them now (paused jobs and on-demand ones left out; a window job at the second its next instant
was placed, schedd.core.windows, and not at all before); it does not know how long runs take, so
"due in one second" is compared with the slots and the quota as the burst the cluster must
start at once.

Calendars and blackouts: an instant a calendar or a blackout skips is not counted, one moved to
the next allowed instant (`on_skip: next_allowed`) adds no run of its own (it runs as that
instant, which is counted at its time), one deferred (`on_blackout: defer`) is counted when the
blackout ends; each kind is counted in `skipped`, `moved`, `deferred`, so an operator sees why a
peak is lower. The decision is schedd.core.calendars.decide, the one firing records: it is made
once per class instant, for the classes whose jobs have a calendar or a blackout selects in the
window (jobs whose rules decide alike share a class); the other classes cost what they did.
An instant deferred from more than LOOKBACK_MS before the window is not looked for.

Pure: rows come from the caller (`rows`, under the node lock, with the calendar and blackout
tables, `calendars.book_of`), time from the request.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schedd.core import calendars as cal
from schedd.core import schedule as sched
from schedd.core.policy import jitter_offset_ms
from schedd.core.specs import WINDOW_FEATURE_LEVEL as WINDOW_LEVEL
from schedd.core.tables import Tables

if TYPE_CHECKING:
    from schedd.core.model import Job

MAX_WINDOW_MS = 7 * 86_400_000
MAX_TOP = 100
DEFAULT_TOP = 5
GROUPINGS = ("", "team", "pool")
EXAMPLES = 3                     # job names shown per contributor
CONTRIBUTORS = 5                 # contributors shown per peak
ANY_POOL = ""                    # a job without a pool runs on any worker
LOOKBACK_MS = MAX_WINDOW_MS      # how far before the window instants a blackout defers into it are looked for
NO_BOOK = cal.Tablet()

#: One job as the forecast reads it: (name, team, pool, schedule, tz, dst, jitter_ms, rules).
JobRow = tuple[str, str, str, str, str, str, int, cal.Rules]


class ForecastError(ValueError):
    """A window or grouping that cannot be forecast; the message says why."""


@dataclass(slots=True, frozen=True)
class Capacity:
    """What serves the runs: worker slots per pool (None: this node does not know its workers,
    it is not the leader) and the quotas ("pool:<p>", "team:<t>" -> max running)."""

    slots: Mapping[str, int] | None = None
    quotas: Mapping[str, int] = field(default_factory=dict)

    def slots_for(self, pool: str | None) -> int | None:
        """Slots that may run a job of `pool` (None or ANY_POOL: any worker's)."""
        if self.slots is None:
            return None
        if not pool:
            return sum(self.slots.values())
        return self.slots.get(pool, 0)


@dataclass(slots=True, frozen=True)
class Contributor:
    """Jobs of one schedule due in a peak."""

    schedule: str
    tz: str
    jobs: int
    examples: tuple[str, ...]


@dataclass(slots=True, frozen=True)
class Peak:
    at_ms: int                   # start of the second (or minute)
    width_ms: int                # 1000 or 60000
    due: int                     # runs due in it
    over: bool                   # more than the slots that serve it (False when unknown)
    contributors: tuple[Contributor, ...]


@dataclass(slots=True)
class GroupForecast:
    """One group's forecast (the whole table, a team or a pool: `Forecast.by`)."""

    key: str
    jobs: int
    instants: int                # runs due in the window
    slots: int | None            # worker slots serving it; None: unknown
    quota_key: str               # "" when no quota applies
    quota: int | None
    peak_seconds: list[Peak]
    peak_minutes: list[Peak]
    series: list[int] = field(repr=False, default_factory=list)   # runs due per second of the window
    left: Counter[str] = field(default_factory=Counter)          # skipped | moved | deferred: instants due in it


@dataclass(slots=True)
class Forecast:
    from_ms: int
    to_ms: int
    by: str
    jobs: int
    instants: int
    groups: list[GroupForecast]

    @property
    def left(self) -> Counter[str]:
        """Instants due in the window that calendars and blackouts skip, move or defer."""
        out: Counter[str] = Counter()
        for g in self.groups:
            out.update(g.left)
        return out

    def group(self, key: str) -> GroupForecast | None:
        return next((g for g in self.groups if g.key == key), None)


@dataclass(slots=True)
class _Class:
    """Jobs of one group whose schedules name the same instants, by jitter offset."""

    group: str
    schedule: sched.Schedule
    text: str                                    # the schedule as the first job wrote it
    buckets: dict[int, list[str]] = field(default_factory=dict)  # offset key (ms) -> job names
    instants: Sequence[int] = ()                 # its instants the window needs, oldest first (those that run)
    rules: cal.Rules | None = None               # None: no calendar nor blackout touches it in the window
    deferred: list[tuple[int, int]] = field(default_factory=list)   # (instant, blackout end)
    dropped: list[tuple[int, str]] = field(default_factory=list)    # (instant, skip | move)

    @property
    def jobs(self) -> int:
        return sum(len(names) for names in self.buckets.values())


def rows(st: Tables, names: Iterable[str] | None = None) -> list[JobRow]:
    """The jobs the forecast counts (all, or those of `names` still there), as plain tuples
    (call under the node lock; then compute off it): unpaused jobs with a schedule of their own."""
    policy = st.policy
    out: list[JobRow] = []
    jobs = st.jobs.values() if names is None else (st.jobs.get(name) for name in names)
    windowed = getattr(st, "windowed", ())
    by_policy: dict[int, tuple[object, cal.Rules]] = {}     # id(policy) -> (policy, its rules): jobs share policies
    shared: dict[cal.Rules, cal.Rules] = {}
    for job in jobs:
        if job is None or job.paused or job.next_fire is None:
            continue
        p = policy(job)
        hit = by_policy.get(id(p))
        if hit is None or hit[0] is not p or hit[1].team != job.team:
            rules = cal.Rules(job.team, p.calendar_skip, p.calendar_only, p.on_skip, p.on_blackout, p.labels)
            hit = by_policy[id(p)] = (p, shared.setdefault(rules, rules))
        if job.name in windowed and p.window and st.feature_level >= WINDOW_LEVEL:
            out.extend(_placed_row(st, job, p.pool, hit[1]))
            continue
        out.append((job.name, job.team, p.pool, job.schedule, job.tz, job.dst, p.jitter_ms, hit[1]))
    return out


def _placed_row(st: Tables, job: Job, pool: str, rules: cal.Rules) -> list[JobRow]:
    """A window job counts once, at the second its next instant was placed (schedd.core.windows);
    not placed yet: not at all (where it will run is not known). Its calendars decide the
    instant (the window's day), here; its blackouts the placed second, in `compute`."""
    placed = st.placements.get(job.name)
    if placed is None or placed[0] != job.next_fire:
        return []
    if (rules.skip or rules.only) and cal.calendar_reason(st, rules.skip, rules.only, placed[0], job.tz):
        return []
    at_placed = cal.Rules(rules.team, (), (), rules.on_skip, rules.on_blackout, rules.labels)
    return [(job.name, job.team, pool, f"at {sched.format_ms(placed[1])}", "UTC", "", 0, at_placed)]


def check_window(from_ms: int, to_ms: int, by: str, top: int) -> None:
    if to_ms <= from_ms:
        raise ForecastError("the window is empty: --to must be after --from")
    if to_ms - from_ms > MAX_WINDOW_MS:
        raise ForecastError(f"the window is longer than {MAX_WINDOW_MS // 86_400_000} days; forecast it in parts")
    if by not in GROUPINGS:
        raise ForecastError(f"by must be team or pool, not {by!r}")
    if not 0 < top <= MAX_TOP:
        raise ForecastError(f"top must be between 1 and {MAX_TOP}")


def compute(job_rows: Iterable[JobRow], from_ms: int, to_ms: int, *, by: str = "", top: int = DEFAULT_TOP,
            capacity: Capacity = Capacity(), book: cal.Book = NO_BOOK) -> Forecast:
    """The forecast of [from_ms, to_ms) (whole seconds: from is rounded down, to up), with the
    calendars and blackouts of `book`. Raises ForecastError for a bad window."""
    check_window(from_ms, to_ms, by, top)
    base, end = from_ms // 1000, -(-to_ms // 1000)
    classes, jobs_by_group = _classes(job_rows, by, _Touch(book, base * 1000, end * 1000))
    n = end - base
    series: dict[str, list[int]] = {g: [0] * n for g in jobs_by_group}
    left: dict[str, Counter[str]] = {g: Counter() for g in jobs_by_group}
    decisions = _Decisions(book)
    for c in classes:
        _fill(c, series[c.group], base, end, decisions, left[c.group])
    by_group: dict[str, list[_Class]] = {}
    for c in classes:
        by_group.setdefault(c.group, []).append(c)
    groups = [_group(key, jobs_by_group[key], series[key], by_group.get(key, []), by, base, top, capacity)
              for key in sorted(jobs_by_group)]
    for g in groups:
        g.left = left[g.key]
    return Forecast(base * 1000, end * 1000, by, sum(jobs_by_group.values()), sum(g.instants for g in groups),
                    groups)


@dataclass(slots=True)
class _Touch:
    """Which jobs' instants calendars and blackouts may decide in a window: those with a calendar,
    and those a blackout selects that holds instants due in it (or defers some into it)."""

    book: cal.Book
    from_ms: int
    to_ms: int
    _seen: dict[cal.Rules, tuple[object, ...] | None] = field(default_factory=dict)

    def key(self, rules: cal.Rules) -> tuple[object, ...] | None:
        """What of `rules` a class is keyed by: None when nothing decides the job's instants in
        the window; else what makes jobs decide alike (the calendars, what becomes of a skipped
        or held instant, and the names of the blackouts selecting them in the window)."""
        if rules in self._seen:
            return self._seen[rules]
        lo = self.from_ms - LOOKBACK_MS               # a jitter longer than that would be absurd
        hit = tuple(sorted(b.name for b in self.book.blackouts.values()
                           if b.end_ms > lo and b.start_ms < self.to_ms and b.matches(rules.team, rules.labels)))
        out = None if not hit and not rules.skip and not rules.only else (
            rules.skip, rules.only, rules.on_skip, rules.on_blackout if hit else "", hit)
        self._seen[rules] = out
        return out


def _classes(job_rows: Iterable[JobRow], by: str, touch: _Touch) -> tuple[list[_Class], dict[str, int]]:
    """Group jobs by (group, schedule text, zone, DST policy, jitter, rules) first, which costs
    a dict lookup per job, then parse each distinct text once (per job only for hashed `H`
    texts) and merge texts naming the same instants (and decided alike)."""
    first: dict[tuple[str, str, str, str, int, int], list[str]] = {}
    decides = bool(touch.book.calendars or touch.book.blackouts)
    way_of: dict[int, int] = {}               # id(rules) -> how its jobs are decided (0: not at all): ints hash fast
    ways: list[tuple[tuple[object, ...] | None, cal.Rules | None]] = [(None, None)]   # (touch key, rules for it)
    alive: list[cal.Rules] = []               # the rules whose ids way_of holds (rows share them: `rows`)
    jobs_by_group: dict[str, int] = {}
    for name, team, pool, spec, tz, dst, jitter, rules in job_rows:
        group = team if by == "team" else pool if by == "pool" else ""
        jobs_by_group[group] = jobs_by_group.get(group, 0) + 1
        way = 0
        if decides:
            way = way_of.get(id(rules), -1)
            if way < 0:
                way = way_of[id(rules)] = _way(touch.key(rules), rules, ways)
                alive.append(rules)
        key = (group, spec, tz, dst, jitter, way)
        names = first.get(key)
        if names is None:
            first[key] = [name]
        else:
            names.append(name)
    merged: dict[tuple[object, ...], _Class] = {}
    parsed: dict[tuple[str, str, str, tuple[str, ...] | None], sched.Schedule | None] = {}
    for (group, spec, tz, dst, jitter, way), names in first.items():
        kept, decider = ways[way]
        for fields, members in _same_instants(spec, names):
            known = (spec, tz, dst, fields)  # texts whose `H` land alike name the same instants: parsed once
            s = parsed[known] if known in parsed else parsed.setdefault(known, _parse(spec, tz, dst, members[0]))
            if s is None or s.kind == "none":
                continue
            same = (group, sched.instant_key(s), kept, s.tz if kept is not None else "")   # calendars read local days
            c = merged.get(same)
            if c is None:
                c = merged[same] = _Class(group, s, spec, rules=decider)
            if not jitter:
                c.buckets.setdefault(0, []).extend(members)
                continue
            for member in members:
                c.buckets.setdefault(jitter_offset_ms(member, jitter), []).append(member)
    return [_coarsen(c) for c in merged.values()], jobs_by_group


def _way(kept: tuple[object, ...] | None, rules: cal.Rules, ways: list[tuple[tuple[object, ...] | None,
                                                                           cal.Rules | None]]) -> int:
    """The index in `ways` of touch key `kept` (0: None, not decided), added with `rules` (the
    first rules of that key: they decide for every job of it) when new."""
    if kept is None:
        return 0
    for i, (k, _) in enumerate(ways):
        if k == kept:
            return i
    ways.append((kept, rules))
    return len(ways) - 1


def _same_instants(spec: str, names: list[str]) -> Iterable[tuple[tuple[str, ...] | None, list[str]]]:
    """The jobs of one schedule text split by where their `H` fields land (one part, fields
    None, when the text has none)."""
    if not sched.uses_hash(spec):
        return [(None, names)]
    parts: dict[tuple[str, ...] | None, list[str]] = {}
    for name in names:
        parts.setdefault(sched.hashed_fields(spec, name), []).append(name)
    parts.pop(None, None)                 # a text parse refuses: it names no instants
    return parts.items()


def _parse(spec: str, tz: str, dst: str, hash_key: str) -> sched.Schedule | None:
    gap, _, fold = dst.partition("/")
    try:
        return sched.parse(spec, tz, hash_key=hash_key, gap=gap, fold=fold)
    except sched.ScheduleError:
        return None


def _coarsen(c: _Class) -> _Class:
    """Whole-second schedules (every cron, most `@every`) are due in the second of instant plus
    the offset's whole seconds: offsets within one second share a bucket (60 buckets for a
    minute of jitter, not one per job)."""
    s = c.schedule
    if s.kind == "cron" or (s.kind == "every" and s._period_ms % 1000 == 0) or (s.kind == "at" and s._at_ms % 1000 == 0):
        coarse: dict[int, list[str]] = {}
        for offset, names in c.buckets.items():
            coarse.setdefault(offset - offset % 1000, []).extend(names)
        c.buckets = coarse
    return c


def walk(job_rows: Iterable[JobRow], from_ms: int, to_ms: int, book: cal.Book = NO_BOOK,
         left: Counter[str] | None = None) -> Counter[int]:
    """Runs due per second in [from_ms, to_ms), every job's instants walked one by one, each
    decided by the calendars and blackouts of `book` (`left`, when given, counts the instants
    due in the window they skip, move or defer): the definition `compute`'s grouped count must
    equal (the tests' oracle, the bench's baseline), far too slow for a large table."""
    out: Counter[int] = Counter()
    lo, hi = from_ms // 1000, -(-to_ms // 1000)
    decides = bool(book.calendars or book.blackouts)
    for name, _team, _pool, spec, tz, dst, jitter, rules in job_rows:
        gap, _, fold = dst.partition("/")
        s = sched.parse(spec, tz, hash_key=name, gap=gap, fold=fold)
        off = jitter_offset_ms(name, jitter)
        start = lo * 1000 - off
        if decides and rules.on_blackout == "defer":
            start = _deferred_from(book, rules, lo * 1000, start)
        x = sched.next_after(s, start - 1)
        while x is not None and (x + off) // 1000 < hi:
            v = cal.decide(book, rules, s, x, locate=False) if decides else None
            due = (x + off) // 1000
            if v is None:
                if due >= lo:
                    out[due] += 1
            else:
                if left is not None and due >= lo:
                    left[_LEFT[v.action]] += 1
                fire = max(x + off, v.until_ms) // 1000
                if v.action == "defer" and lo <= fire < hi:
                    out[fire] += 1
            x = sched.next_after(s, x)
    return out


_LEFT = {"skip": "skipped", "move": "moved", "defer": "deferred"}


def _deferred_from(book: cal.Book, rules: cal.Rules, from_ms: int, start: int) -> int:
    """Where to begin looking for a job's instants that a blackout selecting it defers into the
    window: the start of the earliest such blackout ending in or after it (at most LOOKBACK_MS
    before the window), or `start` when that is earlier."""
    edge = start
    for b in book.blackouts.values():
        if b.end_ms > edge and b.start_ms < start and b.matches(rules.team, rules.labels):
            start = max(b.start_ms, min(edge, from_ms - LOOKBACK_MS))
    return start


def instants_between(s: sched.Schedule, lo_ms: int, hi_ms: int) -> Iterator[int]:
    """Instants of `s` in [lo_ms, hi_ms), oldest first."""
    if s.kind == "every":
        period = s._period_ms
        yield from range(-(-lo_ms // period) * period, hi_ms, period)
        return
    x = sched.next_after(s, lo_ms - 1)
    while x is not None and x < hi_ms:
        yield x
        x = sched.next_after(s, x)


def _fill(c: _Class, series: list[int], base: int, end: int, decisions: _Decisions, left: Counter[str]) -> None:
    """Add the class's runs due in [base, end) seconds: instants plus each bucket's offset."""
    reach = max(c.buckets)
    s = c.schedule
    if c.rules is not None:
        _fill_decided(c, series, base, end, decisions, left)
        return
    if s.kind == "every" and s._period_ms % 1000 == 0:
        period = s._period_ms
        c.instants = range(-(-(base * 1000 - reach) // period) * period, end * 1000, period)
        _fill_periodic(c, series, base, period // 1000)
        return
    c.instants = list(instants_between(s, base * 1000 - reach, end * 1000))
    n = end - base
    for offset, names in c.buckets.items():
        count = len(names)
        for t in c.instants:
            i = (t + offset) // 1000 - base
            if 0 <= i < n:
                series[i] += count


@dataclass(slots=True)
class _Decisions:
    """`calendars.decide` of instants, each asked once per way of deciding: without looking for
    where a moved instant goes, the decision reads only the rules, the zone and the instant, so
    classes of one way and zone (other schedules, other groups) share it."""

    book: cal.Book
    _known: dict[tuple[int, str, int], cal.Verdict | None] = field(default_factory=dict)

    def of(self, rules: cal.Rules, s: sched.Schedule, t: int) -> cal.Verdict | None:
        key = (id(rules), s.tz, t)                # a class's rules object stands for its way (`_way`)
        if key in self._known:
            return self._known[key]
        v = self._known[key] = cal.decide(self.book, rules, s, t, locate=False)
        return v


def _fill_decided(c: _Class, series: list[int], base: int, end: int, decisions: _Decisions,
                  left: Counter[str]) -> None:
    """`_fill` for a class whose instants calendars or blackouts decide: each instant decided
    once (schedd.core.calendars.decide) for all the class's jobs; those that run are counted as
    usual, deferred ones at the blackout's end (or their own due time when later), and each
    bucket's skipped, moved and deferred instants due in the window are counted in `left`."""
    rules = c.rules
    assert rules is not None
    s = c.schedule
    start = base * 1000 - max(c.buckets)
    if rules.on_blackout == "defer":
        start = _deferred_from(decisions.book, rules, base * 1000, start)
    runs: list[int] = []
    for t in instants_between(s, start, end * 1000):
        v = decisions.of(rules, s, t)
        if v is None:
            runs.append(t)
        elif v.action == "defer":
            c.deferred.append((t, v.until_ms))
        else:
            c.dropped.append((t, v.action))
    c.instants = runs
    n = end - base
    for offset, names in c.buckets.items():
        count = len(names)
        for t in runs:
            i = (t + offset) // 1000 - base
            if 0 <= i < n:
                series[i] += count
        for t, until in c.deferred:
            if 0 <= (t + offset) // 1000 - base < n:
                left["deferred"] += count
            i = max(t + offset, until) // 1000 - base
            if 0 <= i < n:
                series[i] += count
        for t, action in c.dropped:
            if 0 <= (t + offset) // 1000 - base < n:
                left[_LEFT[action]] += count


def _fill_periodic(c: _Class, series: list[int], base: int, step: int) -> None:
    """`@every` whole seconds from the epoch: a job is due in every second congruent to its
    offset modulo the period, so the buckets fold into one count per residue and the window is
    walked once (a thousand per-second jobs with a minute of jitter: 86,400 steps a day, not
    60 times that)."""
    per_residue = [0] * step
    for offset, names in c.buckets.items():
        per_residue[(offset // 1000) % step] += len(names)
    for i in range(len(series)):
        due = per_residue[(base + i) % step]
        if due:
            series[i] += due


def _group(key: str, jobs: int, series: list[int], classes: list[_Class], by: str, base: int, top: int,
           capacity: Capacity) -> GroupForecast:
    slots, quota_key, quota = _frame(key, by, capacity)
    minutes = _minutes(series, base)
    first_minute = base // 60
    peak_s = [_peak(classes, (base + i) * 1000, 1000, due, slots)
              for i, due in _top(series, top)]
    peak_m = [_peak(classes, (first_minute + i) * 60_000, 60_000, due, None)
              for i, due in _top(minutes, top)]
    return GroupForecast(key, jobs, sum(series), slots, quota_key, quota, peak_s, peak_m, series)


def _frame(key: str, by: str, capacity: Capacity) -> tuple[int | None, str, int | None]:
    """A group's slots, quota key and quota (what serves it)."""
    slots = capacity.slots_for(key if by == "pool" else None)
    quota_key = f"pool:{key}" if by == "pool" and key else f"team:{key}" if by == "team" else ""
    return slots, quota_key, capacity.quotas.get(quota_key) if quota_key else None


def merge(parts: Sequence[Forecast], top: int, capacity: Capacity = Capacity(),
          listed: int = MAX_TOP) -> tuple[Forecast, bool]:
    """One forecast of the window from forecasts of disjoint sets of jobs over it (the shard
    groups' own, each asked for its `listed` busiest seconds and minutes per group), and
    whether its peaks may fall short. Jobs, instants and what calendars and blackouts leave
    out add up exactly. A peak's runs are the sum of what each part lists for that second (or
    minute), its contributors merged by schedule (each part names its CONTRIBUTORS largest).
    A part whose list is not full lists every second with a run due; one whose list is full
    leaves out seconds holding at most its smallest listed count. So a second holds at most its
    merged count plus the smallest counts of the full lists it is missing from; the peaks are
    exact (and the busiest there are) unless that bound exceeds a peak shown's own count, or,
    for a second not shown (listed somewhere or nowhere), the smallest peak shown: then the
    flag is True, and a peak still never counts more than is due. Slots and quotas are `capacity`'s (the
    answering node's), as `compute` gives them."""
    if not parts:
        raise ForecastError("nothing to merge")
    first = parts[0]
    if any((p.from_ms, p.to_ms, p.by) != (first.from_ms, first.to_ms, first.by) for p in parts):
        raise ForecastError("the forecasts cover different windows or groupings")
    by_key: dict[str, list[GroupForecast]] = {}
    for p in parts:
        for g in p.groups:
            by_key.setdefault(g.key, []).append(g)
    short = False
    groups = []
    for key in sorted(by_key):
        gs = by_key[key]
        slots, quota_key, quota = _frame(key, first.by, capacity)
        left: Counter[str] = Counter()
        for g in gs:
            left.update(g.left)
        seconds, short_s = _merge_peaks([g.peak_seconds for g in gs], top, slots, listed)
        minutes, short_m = _merge_peaks([g.peak_minutes for g in gs], top, None, listed)
        short = short or short_s or short_m
        groups.append(GroupForecast(key, sum(g.jobs for g in gs), sum(g.instants for g in gs), slots, quota_key,
                                    quota, seconds, minutes, [], left))
    return Forecast(first.from_ms, first.to_ms, first.by, sum(p.jobs for p in parts),
                    sum(p.instants for p in parts), groups), short


def _merge_peaks(lists: Sequence[Sequence[Peak]], top: int, slots: int | None,
                 listed: int) -> tuple[list[Peak], bool]:
    """The `top` busiest of the parts' peaks, each second's (or minute's) runs and
    contributors added up, the earliest first on a tie as `_top` orders them; and whether
    they may fall short (`merge`)."""
    due: dict[int, int] = {}
    width = 1000
    by: dict[int, dict[tuple[str, str], tuple[int, set[str]]]] = {}
    for peaks in lists:
        for p in peaks:
            width = p.width_ms
            due[p.at_ms] = due.get(p.at_ms, 0) + p.due
            seen = by.setdefault(p.at_ms, {})
            for c in p.contributors:
                jobs, names = seen.get((c.schedule, c.tz), (0, set()))
                seen[(c.schedule, c.tz)] = (jobs + c.jobs, names | set(c.examples))
    best = sorted(due, key=lambda at: (-due[at], at))[:top]
    full = [({p.at_ms for p in peaks}, min(p.due for p in peaks)) for peaks in lists if len(peaks) >= listed]

    def most(at: int | None) -> int:
        """The most runs second `at` may hold (None: a second no part lists)."""
        return (due[at] if at is not None else 0) + sum(m for seen, m in full if at not in seen)
    floor = min(due[at] for at in best) if len(best) == top else 0
    short = any(most(at) > due[at] for at in best) or any(most(at) > floor for at in due if at not in best) \
        or most(None) > floor
    out = []
    for at in best:
        found = sorted(by[at].items(), key=lambda kv: (-kv[1][0], kv[0][0]))[:CONTRIBUTORS]
        contributors = tuple(Contributor(s, tz, jobs, tuple(sorted(names)[:EXAMPLES]))
                             for (s, tz), (jobs, names) in found)
        over = slots is not None and width == 1000 and due[at] > slots
        out.append(Peak(at, width, due[at], over, contributors))
    return out, short


def _minutes(series: list[int], base: int) -> list[int]:
    """Runs due per minute (clock minutes; the first and last may be partly outside the window)."""
    out = [0] * ((base + len(series) - 1) // 60 - base // 60 + 1) if series else []
    first = base // 60
    for i, due in enumerate(series):
        if due:
            out[(base + i) // 60 - first] += due
    return out


def _top(series: list[int], top: int) -> list[tuple[int, int]]:
    """The `top` busiest places (index, count), busiest first, the earliest on a tie; none empty."""
    best = heapq.nlargest(top, ((due, -i) for i, due in enumerate(series) if due))
    return [(-neg, due) for due, neg in best]


def _peak(classes: list[_Class], at_ms: int, width_ms: int, due: int, slots: int | None) -> Peak:
    found: list[tuple[int, str, Contributor]] = []
    for c in classes:
        names: list[str] = []
        count = 0
        for offset, members in c.buckets.items():
            k = _count_in(c.instants, at_ms - offset, at_ms + width_ms - offset)
            if c.deferred:
                k += sum(1 for t, until in c.deferred if at_ms <= max(t + offset, until) < at_ms + width_ms)
            if k:
                count += k * len(members)
                if len(names) < EXAMPLES:
                    names.extend(members[:EXAMPLES - len(names)])
        if count:
            found.append((count, c.text, Contributor(c.text, c.schedule.tz, count, tuple(sorted(names)))))
    found.sort(key=lambda f: (-f[0], f[1]))
    over = slots is not None and width_ms == 1000 and due > slots
    return Peak(at_ms, width_ms, due, over, tuple(f[2] for f in found[:CONTRIBUTORS]))


def _count_in(instants: Sequence[int], lo: int, hi: int) -> int:
    return bisect.bisect_left(instants, hi) - bisect.bisect_left(instants, lo)


def crowding(fc: Forecast, written: Forecast, capacity: Capacity, since_ms: int, *,
             counted: bool = False) -> list[str]:
    """The warnings for jobs just written (`written`: their forecast by pool over `fc`'s window):
    per pool, the busiest second from `since_ms` on that holds one of their runs, when it holds
    more runs than the slots serving the pool (none where no slot does). `fc` is the table's
    forecast by pool; `counted`: it was read after the write, so it counts them already."""
    if (written.from_ms, written.to_ms) != (fc.from_ms, fc.to_ms):
        raise ForecastError("the two forecasts cover different windows")
    first = max(0, (since_ms - fc.from_ms) // 1000)
    out: list[str] = []
    for g in written.groups:
        slots = capacity.slots_for(g.key)
        if not slots:
            continue
        table = fc.group(g.key)
        base = table.series if table is not None else [0] * len(g.series)
        busiest, at = 0, 0
        for i in range(first, len(g.series)):
            if g.series[i]:
                due = base[i] + (0 if counted else g.series[i])
                if due > busiest:
                    busiest, at = due, i
        if busiest > slots:
            where = f"pool {g.key}" if g.key else "no pool (any worker)"
            out.append(f"{busiest:,} jobs due at {sched.format_ms(fc.from_ms + at * 1000)} in {where}, "
                       f"{slots:,} slots: add `jitter` or a window")
    return out


def count_in(fc: Forecast, written: Forecast) -> None:
    """Add the runs of jobs just written (their forecast over the same window) to a forecast by
    pool read before them: until it is read again, they count for the next write's warning."""
    for g in written.groups:
        table = fc.group(g.key)
        if table is None:
            fc.groups.append(GroupForecast(g.key, g.jobs, g.instants, None, "", None, [], [], list(g.series)))
            continue
        series = table.series
        for i, due in enumerate(g.series):
            if due:
                series[i] += due
        table.jobs += g.jobs
        table.instants += g.instants
        table.left.update(g.left)
