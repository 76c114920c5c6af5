"""The ledger of instants: what became of every nominal instant of a job's schedule.

Every instant the schedule named in a window has one disposition: it ran (or runs, or waits to),
it was skipped (overlap, starting deadline, paused, a backlog, a calendar, a blackout) or moved to
the next instant its calendars allow, with the reason on its execution,
or it has no execution of its own and a gap of the job says why (paused, coalesced into a later
run, over the catch-up cap, outside the catch-up window, policy none). An instant with neither
is reported `missing`: the scheduler promises there are none, and the fault suite checks it.
Executions that are not instants of the current schedule (manual triggers, backfills, instants
of an older schedule) are listed too. Pure: reads the state, never changes it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from schedd.core import schedule as sched
from schedd.core.tables import Tables, schedule_of
from schedd.core.model import (
    CANCELLED, FAILED, LOST, RETRY_WAIT, RUNNING, SCHEDULED, SKIPPED, SUCCEEDED, TIMED_OUT,
    UPSTREAM_FAILED, Execution, Gap, Job,
)

MAX_INSTANTS = 10_000
MOVED = "; moved to the next allowed instant"     # schedd.core.calendars: on_skip next_allowed

_SKIP_PREFIXES = (("overlap", "skipped-overlap"), ("deadline", "skipped-deadline"),
                  ("paused", "paused"), ("backlog", "skipped-backlog"), ("calendar", "skipped-calendar"),
                  ("blackout", "skipped-blackout"))
_STATE_DISPOSITION = {
    SUCCEEDED: "ran", FAILED: "ran", TIMED_OUT: "ran", LOST: "ran", RUNNING: "running",
    SCHEDULED: "pending", RETRY_WAIT: "pending", CANCELLED: "cancelled",
    UPSTREAM_FAILED: "upstream-failed",
}


@dataclass(slots=True)
class Instant:
    instant_ms: int
    disposition: str      # ran running pending cancelled upstream-failed paused coalesced pruned
    detail: str           #   missing skipped-{overlap,deadline,backlog,window,catchup,cap,calendar,blackout}
                          #   moved (calendar next_allowed)
    execution: Execution | None = None


def disposition_of(ex: Execution) -> str:
    if ex.state == SKIPPED:
        if ex.reason.startswith("calendar") and MOVED in ex.reason:
            return "moved"
        for prefix, name in _SKIP_PREFIXES:
            if ex.reason.startswith(prefix):
                return name
        return "skipped"
    return _STATE_DISPOSITION.get(ex.state, ex.state.lower())


def instants(state: Tables, job: Job, since_ms: int, until_ms: int, limit: int = 1000,
             on_disk: Mapping[int, Execution] | None = None) -> list[Instant]:
    """Instants of `job` in [since_ms, until_ms], oldest first, at most `limit`. `until_ms` is
    clamped to the job's next fire (instants after it have not happened yet). `on_disk`: the
    job's executions in the window that left the tables for the node's history store
    (schedd.core.history), by scheduled time; an instant at or before the job's floor with
    none there was pruned by the history's retention."""
    on_disk = on_disk or {}
    floor = state.archived.get(job.name)
    limit = max(1, min(limit, MAX_INSTANTS))
    times = state.by_job.get(job.name, ())
    oldest_kept = times[0] if times else None
    s = schedule_of(job)                  # with the job's DST policy
    horizon = until_ms if job.next_fire is None else min(until_ms, job.next_fire - 1)
    nominal: list[int] = []
    x = sched.next_after(s, max(since_ms, job.created_ms - 1) - 1) if s.kind != "none" else None
    while x is not None and x <= horizon and len(nominal) < limit:
        nominal.append(x)
        x = sched.next_after(s, x)
    recorded = times[bisect.bisect_left(times, since_ms):bisect.bisect_right(times, until_ms)]
    out: list[Instant] = []
    for t in sorted(set(nominal).union(recorded, on_disk))[:limit]:
        ex = state.execs.get((job.name, t)) or on_disk.get(t)
        if ex is not None:
            out.append(Instant(t, disposition_of(ex), ex.reason, ex))
            continue
        gap = _gap_of(job, t)
        if gap is not None:
            out.append(Instant(t, gap[2], gap[3]))
        elif (t <= floor[0]) if floor is not None else (oldest_kept is None or t < oldest_kept):
            out.append(Instant(t, "pruned", "older than the history kept for this job"))
        else:
            out.append(Instant(t, "missing", "no execution and no recorded reason"))
    return out


def _gap_of(job: Job, t: int) -> Gap | None:
    for gap in reversed(job.gaps):
        if gap[0] <= t < gap[1]:
            return gap
    return None
