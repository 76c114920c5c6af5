"""The herd forecast and explain at the API: what they read of the node, and their messages.

The forecast (schedd.core.forecast) is computed from rows copied out of the job table under the
node lock, then off the lock and off the event loop. A table of up to READ_CHUNK jobs is read in
one hold of the lock, at one applied index (a consistent view); a larger one in parts, so that
apply never waits long, and the answer's note says between which indexes it was read. Worker slots are the leader's connected workers (`WorkerHub`), so only the leader
knows them; a stale read on a follower says so in its note.

`LoadCache` keeps a forecast by pool of the next 24 h for the warning PutJob and PutJobs return
when a job lands on a second that already holds more runs than its pool's slots. It is read
from the table at most every MAX_AGE_MS (a table of more than SYNC_JOBS jobs in the background,
so a write never waits for a million-job forecast) and each job written through this node is
counted into it meanwhile (a write costs the job's own instants, not the table's). A pause,
resume or delete through this node drops it (`forget`); a job changed since the last read
counts as it was until the next: the warning is advice, never a refusal, and may lag the table
by that much. Nothing is computed while no connected
worker serves the written jobs' pools.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import Any

from schedd.core import calendars as K
from schedd.core import explain as E
from schedd.core import forecast as F
from schedd.core.policy import JobPolicy
from schedd.core.specs import JobSpec
from schedd_proto import scheduler_pb2 as pb

DAY_MS = 86_400_000
WINDOW_MS = DAY_MS + 3_600_000    # a day ahead, and an hour more: the cache ages up to MAX_AGE_MS
MAX_AGE_MS = 30_000
SYNC_JOBS = 20_000
MAX_WARNINGS = 10
READ_CHUNK = 50_000               # jobs read per hold of the node lock
CATCH_UP_S = 2.0                 # a sharded forecast waits this long at most for a replica to catch up


def capacity(hub: Any, quotas: dict[str, int], now_ms: int) -> F.Capacity:
    """Slots per pool of the live workers connected here (None without a hub: not the leader)."""
    if hub is None:
        return F.Capacity(None, quotas)
    slots: dict[str, int] = {}
    for conn in list(hub.conns.values()):
        if conn.closed or conn.draining or not hub.live(conn, now_ms):
            continue
        slots[conn.pool] = slots.get(conn.pool, 0) + (conn.total_slots or conn.slots)
    return F.Capacity(slots, quotas)


@dataclass(slots=True)
class Rows:
    rows: list[F.JobRow]
    quotas: dict[str, int]
    first_index: int              # the applied index the read began at
    last_index: int               # ... and ended at: equal for a read in one part
    book: K.Tablet = F.NO_BOOK    # the calendars and blackouts, as the read began

    def note(self) -> str:
        if self.first_index == self.last_index:
            return ""
        return (f"a table this large is read in parts of {READ_CHUNK:,} jobs, so that apply never waits long: "
                f"read while the log moved from index {self.first_index} to {self.last_index}")


def read_rows(node: Any, visible: Container[str] | None) -> Rows:
    """The forecast's rows and the quotas, read under the node lock: at one applied index for a
    table of up to READ_CHUNK jobs; a larger one in parts of that many, the lock released between
    them (reading a million rows at once held apply for most of a second)."""
    with node.lock:
        st = node.state
        quotas, first, book = dict(st.quotas), st.last_index, K.book_of(st)
        names = list(st.jobs) if len(st.jobs) > READ_CHUNK else None
        rows = F.rows(st) if names is None else []
    last = first
    for i in range(0, len(names or ()), READ_CHUNK):
        with node.lock:
            rows += F.rows(node.state, names[i:i + READ_CHUNK] if names else ())
            last = node.state.last_index
    if visible is not None:
        rows = [r for r in rows if r[1] in visible]
    return Rows(rows, quotas, first, last, book)


def read_groups(nodes: list[Any], visible: Container[str] | None) -> Rows:
    """`read_rows` over every shard group's replica on this node (a sharded cluster: each group
    holds its own jobs; the quotas, calendars and blackouts are group 0's, which every group
    follows), each once it has applied what its group's leader had committed when asked, as
    this replica last heard (within CATCH_UP_S). Runs in a thread: it waits. A group this node
    holds no replica of is forecast by its leader and merged in (SchedulerService.Forecast,
    schedd.core.forecast.merge)."""
    marks = [node.status().leader_commit_index for node in nodes]
    deadline = time.monotonic() + CATCH_UP_S
    for node, mark in zip(nodes, marks):       # each replica caught up with what its leader had committed
        while node.status().applied_index < mark and time.monotonic() < deadline:
            time.sleep(0.01)
    parts = [read_rows(node, visible) for node in nodes]
    first = parts[0]                           # its indexes: the note on a read in parts
    return Rows([r for part in parts for r in part.rows], first.quotas, first.first_index, first.last_index,
                first.book)


def forecast_to_pb(fc: F.Forecast, note: str) -> pb.ForecastResponse:
    left = fc.left
    return pb.ForecastResponse(from_ms=fc.from_ms, to_ms=fc.to_ms, by=fc.by, jobs=fc.jobs, instants=fc.instants,
                               groups=[_group_pb(g) for g in fc.groups], note=note, skipped=left["skipped"],
                               moved=left["moved"], deferred=left["deferred"])


def _group_pb(g: F.GroupForecast) -> pb.ForecastGroup:
    return pb.ForecastGroup(key=g.key, jobs=g.jobs, instants=g.instants, slots=-1 if g.slots is None else g.slots,
                            quota_key=g.quota_key, quota=g.quota or 0,
                            peak_seconds=[_peak_pb(p) for p in g.peak_seconds],
                            peak_minutes=[_peak_pb(p) for p in g.peak_minutes], skipped=g.left["skipped"],
                            moved=g.left["moved"], deferred=g.left["deferred"])


def _peak_pb(p: F.Peak) -> pb.ForecastPeak:
    return pb.ForecastPeak(at_ms=p.at_ms, width_ms=p.width_ms, due=p.due, over=p.over, contributors=[
        pb.ForecastContributor(schedule=c.schedule, timezone=c.tz, jobs=c.jobs, examples=list(c.examples))
        for c in p.contributors])


def forecast_of_pb(r: pb.ForecastResponse) -> F.Forecast:
    """A forecast another node answered (a shard group this node holds no replica of), to
    merge with this node's (`F.merge`)."""
    return F.Forecast(r.from_ms, r.to_ms, r.by, r.jobs, r.instants, [
        F.GroupForecast(g.key, g.jobs, g.instants, None if g.slots < 0 else g.slots, g.quota_key, g.quota or None,
                        [_peak_of(p) for p in g.peak_seconds], [_peak_of(p) for p in g.peak_minutes], [],
                        Counter({k: v for k, v in (("skipped", g.skipped), ("moved", g.moved),
                                                   ("deferred", g.deferred)) if v}))
        for g in r.groups])


def _peak_of(p: pb.ForecastPeak) -> F.Peak:
    return F.Peak(p.at_ms, p.width_ms, p.due, p.over, tuple(
        F.Contributor(c.schedule, c.timezone, c.jobs, tuple(c.examples)) for c in p.contributors))


def explanation_to_pb(x: E.Explanation) -> pb.Explanation:
    return pb.Explanation(id=x.id, job=x.job, instant_ms=x.instant_ms, disposition=x.disposition,
                          summary=x.summary, index=x.index, findings=[
                              pb.ExplainFinding(kind=f.kind, text=f.text, at_ms=f.at_ms,
                                                details={k: v for k, v in f.details if v})
                              for f in x.findings])


class LoadCache:
    """The forecast by pool that put warnings read (module doc): read afresh from the table when
    it is older than MAX_AGE_MS (at once for a small table, in the background for a large one),
    and in between kept current by counting in each job written through this node."""

    def __init__(self) -> None:
        self._fc: F.Forecast | None = None
        self._book: K.Tablet = F.NO_BOOK      # the calendars and blackouts `_fc` was computed with
        self._built_ms = 0
        self._task: asyncio.Future[None] | None = None
        self._lock = threading.Lock()

    async def warnings(self, node: Any, specs: list[JobSpec], cap: F.Capacity, now_ms: int) -> list[str]:
        """The crowding warnings for jobs just written (schedd.core.forecast.crowding: per pool,
        its busiest second); nothing when no worker slot serves their pools. Their own runs are
        forecast by schedule class, so a batch of a thousand jobs costs about what one costs."""
        if cap.slots is None or not any(cap.slots_for(spec.policies.pool) for spec in specs):
            return []
        fresh = False
        if self._fc is None or now_ms - self._built_ms > MAX_AGE_MS:
            with node.lock:
                small = len(node.state.jobs) <= SYNC_JOBS
            if small:
                await asyncio.to_thread(self._build, node, now_ms)
                fresh = True
            elif self._task is None or self._task.done():
                self._task = asyncio.ensure_future(asyncio.to_thread(self._build, node, now_ms))
        fc = self._fc
        if fc is None:
            return []
        written = list(_rows_of(specs))
        if not written:
            return []
        theirs = await asyncio.to_thread(F.compute, written, fc.from_ms, fc.to_ms, by="pool", top=1, book=self._book)
        lines = F.crowding(fc, theirs, cap, now_ms, counted=fresh)
        if not fresh:
            F.count_in(fc, theirs)
        if len(lines) > MAX_WARNINGS:
            lines = lines[:MAX_WARNINGS] + [f"... and {len(lines) - MAX_WARNINGS} more pools"]
        return lines

    def forget(self) -> None:
        """A job was paused, resumed or deleted: the next write reads the table again (a small
        one at once), rather than counting that job as it was."""
        self._fc = None

    def _build(self, node: Any, now_ms: int) -> None:
        with self._lock:
            read = read_rows(node, None)
            fc = F.compute(read.rows, now_ms, now_ms + WINDOW_MS, by="pool", top=1, book=read.book)
            self._fc, self._book, self._built_ms = fc, read.book, now_ms


def _rows_of(specs: Iterable[JobSpec]) -> Iterable[F.JobRow]:
    """Forecast rows of specs just written (the unpaused ones; those without a schedule count
    for nothing, and so do window jobs: the leader places them where the load is least,
    schedd.core.windows), with the rules their calendars and blackouts are decided by."""
    for spec in specs:
        if not spec.paused and spec.window is None:
            p = JobPolicy.from_spec(spec)
            yield (spec.name, spec.team, p.pool, spec.schedule, spec.timezone, spec.dst_policy, p.jitter_ms,
                   K.Rules(spec.team, p.calendar_skip, p.calendar_only, p.on_skip, p.on_blackout, p.labels))
