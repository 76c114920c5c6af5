"""Flexible windows: a job's daily run placed at the least-loaded second of a window.

A job may say `window: {start: "01:00", end: "05:00"}` (in its zone) instead of an exact time.
Its schedule is day-granular: the committed cron is the window's start on the days the user's
cron picks (schedd.core.model.window_schedule), so its instants, the ledger's keys, are the
windows' starts, and calendars, pause, overlap and catch-up read them as they read any instant.
What the window adds is *when* an instant's run may start: its due time, the placed second,
somewhere in [start, end), and its deadline: the window's end, an SLA like `sla.by` (schedd.core.sla).

Where the choice is made, and why it is the same on every replica: the leader makes it
(schedd.leader.placer), from the herd forecast, and records it in the log (`place` entry,
feature level 9) before the window opens; apply stores it verbatim (`Tables.placements`, job ->
(instant, placed second)) and `firing.record` sets the instant's due time from it. A placement
is never moved: a second `place` for an instant already placed is a no-op. Computing it inside
apply instead would put a forecast of the whole job table (tens of milliseconds at 100,000 jobs)
on the apply thread for each instant; recorded in the log, every replica holds the leader's
answer whatever its own indexes say. An instant recorded with no placement (the leader was down
from the instant becoming next until the window opened) gets a fallback every replica computes
alike: the window's second given by a hash of the job's name, said in its event.

The choice itself (`choose`) is pure and deterministic: the seconds of the window with the
fewest runs due, counting exact-time jobs by the forecast (schedd.core.forecast) and window
instants already placed or recorded, in the job's pool (a job without a pool counts with the
others without one, as `schedctl forecast --by pool` groups them); among equally loaded seconds,
the first at or after an offset hashed from the job's name, so a herd of jobs created together
spreads evenly, each second taking at most one more than the least-loaded one.

Pure: no clock (time comes in the entry), no I/O.
"""

from __future__ import annotations

import hashlib
from itertools import islice
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from sortedcontainers import SortedList

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core import schedule as sched
from schedd.core.model import Job
from schedd.core.results import ApplyResult, Code, ok, reject
from schedd.core.specs import WINDOW_MARK
from schedd.core.tables import MIN_MS, Tables

WINDOW_LEVEL = 9                    # schedd.core.commands Level 9: `place`, and specs with `window`
MAX_PLACE_ITEMS = 500               # placements in one `place` entry


# ------------------------------------------------------------------ the window of an instant


@lru_cache(maxsize=256)
def _wall(hhmm: str, tz: str) -> sched.Schedule:
    hh, _, mm = hhmm.partition(":")
    # every occurrence of the wall time (fold both), a skipped one at the end of its gap (shift)
    return sched.parse(f"0 {int(mm)} {int(hh)} * * *", tz, gap="shift", fold="both")


@lru_cache(maxsize=8192)
def bounds(window: tuple[str, ...], tz: str, t_ms: int) -> tuple[int, int]:
    """[open, close) of the window whose instant (its start, as the job's cron placed it, DST
    included) is `t_ms`: the close is the first time at or after it that the job's wall clock
    reads the window's end (an end before the start is the next day's; an end skipped by
    spring-forward is the end of the gap; a repeated one counts at its first pass). Cached: a
    herd shares its windows, and a pure function of its arguments may be."""
    close = sched.next_after(_wall(window[1], tz), t_ms)
    return t_ms, close if close is not None else t_ms + 1000


def of(st: Tables, job: Job) -> tuple[str, ...]:
    """The job's window, () when it has none or the cluster is below the window level (an older
    build ignores the key: every replica must)."""
    if st.feature_level < WINDOW_LEVEL or WINDOW_MARK not in job.spec_t:
        return ()
    return st.policy(job).window


def hash_offset(name: str, n: int) -> int:
    """A second in [0, n) fixed per job name: where its search for the least-loaded second starts."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % max(n, 1)


def describe(window: tuple[str, ...], tz: str, t_ms: int) -> str:
    """"2026-12-08 01:00–05:00 Europe/Berlin" (the window of instant `t_ms`)."""
    lo, hi = bounds(window, tz, t_ms)
    return f"{sched.format_ms(lo, tz)[:16].replace('T', ' ')}–{sched.format_ms(hi, tz)[11:16]} {tz}"


def clock(t_ms: int, tz: str) -> str:
    """"02:13:07": a placed second on the job's wall clock."""
    return sched.format_ms(t_ms, tz)[11:19]


# ------------------------------------------------------------------ apply


def place(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """The leader's placements: items [job, instant, placed_ms]. Each is stored only for the
    job's next instant, inside its window, and only once: a placement is never moved."""
    if cmd.term != st.epoch:
        return reject(Code.STALE_TERM, f"place from term {cmd.term}, but the leader epoch is {st.epoch}")
    items = cmd.args.get("items")
    if not isinstance(items, list) or len(items) > MAX_PLACE_ITEMS:
        return reject(Code.INVALID, f"items must be a list of at most {MAX_PLACE_ITEMS} [job, instant, placed_ms]")
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and all(type(x) is int for x in item[1:])):
            return reject(Code.INVALID, "an item is [job, instant, placed_ms]")
        name, t, at = item
        out.append([name, t, at, _place_one(st, name, t, at)])
    return ok(R.Items(out))


def _place_one(st: Tables, name: str, t: int, at: int) -> str:
    job = st.jobs.get(name)
    if job is None:
        return "unknown_job"
    window = of(st, job)
    if not window:
        return "no_window"
    if job.next_fire != t:
        return "not_due"
    lo, hi = bounds(window, job.tz, t)
    if not lo <= at < hi:
        return "outside"
    have = st.placements.get(name)
    if have is not None and have[0] == t and lo <= have[1] < hi:
        return "duplicate"
    st.placements[name] = (t, at)
    return "placed"


def placed(st: Tables, job: Job, t: int, window: tuple[str, ...]) -> int | None:
    """The second recorded for instant `t` of the job, if it lies in its window as the job
    says it now (a window changed since is placed again)."""
    have = st.placements.get(job.name)
    if have is None or have[0] != t:
        return None
    lo, hi = bounds(window, job.tz, t)       # a window changed since: placed again
    return have[1] if lo <= have[1] < hi else None


def due(st: Tables, job: Job, t: int, window: tuple[str, ...]) -> tuple[int, str]:
    """When instant `t` of a window job runs, and the event that says why (firing.record)."""
    at = placed(st, job, t, window)
    where = describe(window, job.tz, t)
    if at is not None:
        return at, f"window {where}, placed {clock(at, job.tz)} (the least-loaded second by the forecast)"
    lo, hi = bounds(window, job.tz, t)
    at = lo + hash_offset(job.name, (hi - lo) // 1000) * 1000
    return at, (f"window {where}, placed {clock(at, job.tz)} by the hash of its name (no placement "
                "was recorded before the window opened)")


def preview(st: Tables, job: Job, t: int) -> tuple[int, str]:
    """What `job get --next` shows for a coming instant: (placed second or 0, note); (0, "") for
    a job without a window."""
    window = of(st, job)
    if not window:
        return 0, ""
    at = placed(st, job, t, window)
    where = describe(window, job.tz, t)
    if at is None:
        return 0, f"window {where}, not placed yet"
    return at, f"window {where}, placed {clock(at, job.tz)}"


def deadline(st: Tables, job: Job, t: int) -> int | None:
    """The window's end for instant `t` (the run's deadline), or None for a job without one."""
    window = of(st, job)
    return bounds(window, job.tz, t)[1] if window else None


HANDLERS = {C.PLACE: place}


# ------------------------------------------------------------------ the leader's choice


@dataclass(frozen=True, slots=True)
class Want:
    """A window instant to place: job, instant, pool, and the window [lo, hi) in ms."""

    name: str
    t: int
    pool: str
    lo: int
    hi: int


def unplaced(st: Tables, limit: int, after: str = "", scan: int = 10_000) -> tuple[list[Want], str]:
    """Window jobs whose next instant has no placement (call under the node lock), by name: at
    most `limit` of them, looking at no more than `scan` window jobs named after `after`. Returns
    them and the last name looked at ("" when the look reached the end), where the next look goes
    on: a table of 100,000 window jobs is looked through in steps, never under one long lock."""
    if st.feature_level < WINDOW_LEVEL or not st.windowed:
        return [], ""
    out: list[Want] = []
    last = ""
    for last in islice(st.windowed.irange(minimum=after or None, inclusive=(False, False)), scan):
        job = st.jobs.get(last)
        if job is None or job.paused or job.next_fire is None:
            continue
        have = st.placements.get(last)
        if have is not None and have[0] == job.next_fire and placed(st, job, job.next_fire, of(st, job)) is not None:
            continue
        window = of(st, job)
        if not window:
            continue
        lo, hi = bounds(window, job.tz, job.next_fire)
        out.append(Want(last, job.next_fire, st.policy(job).pool, lo, hi))
        if len(out) >= limit:
            return out, last
    return out, (last if last != st.windowed[-1] else "")


def taken(st: Tables, keys: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int, int], dict[int, int]]:
    """Window runs due per second (epoch s) in each (pool, lo, hi) of `keys`: placements recorded,
    and window runs already recorded and waiting (call under the node lock; one pass over the
    placements)."""
    wanted = sorted(set(keys))
    out: dict[tuple[str, int, int], dict[int, int]] = {key: {} for key in wanted}
    if not wanted:
        return out
    by_pool: dict[str, list[tuple[str, int, int]]] = {}
    for key in wanted:
        by_pool.setdefault(key[0], []).append(key)
    first, last = min(k[1] for k in wanted), max(k[2] for k in wanted)

    def count(name: str, at: int) -> None:
        job = st.jobs.get(name)
        keys_of = by_pool.get(st.policy(job).pool) if job is not None else None
        for key in keys_of or ():
            if key[1] <= at < key[2]:
                counts = out[key]
                counts[at // 1000] = counts.get(at // 1000, 0) + 1

    seen: set[tuple[str, int]] = set()
    for name, (t, at) in st.placements.items():
        if first <= at < last:
            count(name, at)
            seen.add((name, t))
    for due_ms, name, t in st.ready.irange((first, "", MIN_MS), (last, "", MIN_MS), inclusive=(True, False)):
        if (name, t) not in seen and name in st.windowed:
            count(name, due_ms)
    return out


def choose(load: list[int], names: Sequence[str]) -> list[int]:
    """For each job of `names`, in that order, the index of its second in `load` (runs due per
    second of one window): a least-loaded one, the first at or after the job's hash offset
    (wrapping), each choice counted before the next. Deterministic; O(W + n log W): the seconds at
    each load are kept in a sorted list."""
    if not load:
        return [0 for _ in names]
    by_load: dict[int, list[int]] = {}
    for i, k in enumerate(load):
        by_load.setdefault(k, []).append(i)          # ascending i: each list is sorted
    level = {k: SortedList(seconds) for k, seconds in by_load.items()}
    low = min(level)
    out: list[int] = []
    for name in names:
        seconds = level[low]
        j = seconds.bisect_left(hash_offset(name, len(load)))
        i = seconds.pop(j if j < len(seconds) else 0)
        out.append(i)
        above = level.get(low + 1)
        if above is None:
            above = level[low + 1] = SortedList()
        above.add(i)
        if not seconds:
            del level[low]
            low += 1
    return out


def plan(wants: Iterable[Want], exact: Mapping[tuple[str, int, int], Sequence[int]],
         window_taken: Mapping[tuple[str, int, int], Mapping[int, int]]) -> list[list[object]]:
    """The `place` items for `wants`: per (pool, lo, hi), the load of each second is the
    exact-time runs due (`exact`, per second from lo; missing: none) plus the window runs taken
    (`window_taken`, epoch second -> runs), and the jobs are placed in name order by `choose`."""
    groups: dict[tuple[str, int, int], list[Want]] = {}
    for w in wants:
        groups.setdefault((w.pool, w.lo, w.hi), []).append(w)
    items: list[list[object]] = []
    for key in sorted(groups):
        _pool, lo, hi = key
        n = max(1, (hi - lo) // 1000)
        base = exact.get(key) or ()
        load = [base[i] if i < len(base) else 0 for i in range(n)]
        first = lo // 1000
        for second, k in (window_taken.get(key) or {}).items():
            if 0 <= second - first < n:
                load[second - first] += k
        members = sorted(groups[key], key=lambda w: w.name)
        for w, i in zip(members, choose(load, [w.name for w in members])):
            items.append([w.name, w.t, lo + i * 1000])
    return items
