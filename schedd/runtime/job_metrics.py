"""Per-job and per-worker Prometheus series, bounded, and computed off the fire path.

Per job: runs by outcome, the last success, attempt durations, queue wait (due to start), the
schedule's period (for "not succeeded in N periods" alerts) and SLA misses. Per worker: connected,
slots busy and free, the handler kinds it runs; per pool: workers that can serve it and jobs
that need it.

Why bounded: a label per job is a series per job, and a cluster holds up to a million jobs. At
most `[metrics] job_series_limit` jobs get series of their own (first come; a deleted job frees its
place); past the limit only the jobs of `job_series_teams` do, and every other job counts under
job_name="_other" of its team, so totals stay right while the series count stays capped.

Why off the fire path: the apply hook (`on_applied`, on the Raft tick thread) only keeps the
results of entries that ended attempts: an isinstance check per entry and a deque append per
finish (the fire path's entries are never kept). The scrape (the Prometheus HTTP thread) decodes
what was kept, reads those executions under the node lock in short holds (READ_SLICE attempts
each, so apply never waits long), and updates the series; bench/README.md ("metrics cost") has the measurement. Every node applies the same
entries, so every node has the same per-job series: alerts take the max over nodes.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core import schedule as sched
from schedd.core.attempts import NOT_READY
from schedd.core.model import ROW_SPECS, SUCCEEDED, TERMINAL_STATES
from schedd.settings import MetricsSettings

OTHER = "_other"                 # the job_name label of the jobs past the limit
# The label is job_name, not job: Prometheus sets `job` on every series it scrapes (the scrape
# job), and would rename a `job` of ours to exported_job.
QUEUE_MAX = 200_000              # kept results between two scrapes; past it the oldest are dropped
READ_SLICE = 256                 # ended attempts read per hold of the node lock (apply waits for it)
DURATION_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 15, 60, 300, 1800)
POOLS_EVERY_S = 30.0             # the jobs' pools are counted at most this often (a pass over the jobs)
ANY_POOL = "(any)"               # the pool label of jobs without a pool: any worker serves them


class JobLabels:
    """Which jobs have series of their own (see the module doc). Used from the scrape thread and
    the event loop (SLA misses): a lock keeps the set and the limit consistent."""

    def __init__(self, settings: MetricsSettings) -> None:
        self.limit = settings.job_series_limit
        self.teams = frozenset(settings.job_series_teams)
        self.labelled: set[str] = set()
        self._lock = threading.Lock()

    def of(self, job: str, team: str) -> str:
        with self._lock:
            if job in self.labelled:
                return job
            if len(self.labelled) < self.limit or team in self.teams:
                self.labelled.add(job)
                return job
            return OTHER

    def forget(self, jobs: Iterable[str]) -> None:
        with self._lock:
            self.labelled.difference_update(jobs)


@dataclass(slots=True)
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts or [0] * (len(self.bounds) + 1)):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


@dataclass(frozen=True, slots=True)
class _Ended:
    """One attempt ended, as read from the state at the scrape."""

    job: str
    team: str
    state: str                   # the execution's state after the entry
    attempt_state: str
    duration_s: float | None
    wait_s: float | None
    ended_s: float


_ENDING = (R.Finished, R.FinishedMany)


class RunSeries:
    """The per-job series and the hand-off from apply (see the module doc)."""

    def __init__(self, node: Any, labels: JobLabels) -> None:
        self._node = node
        self.labels = labels
        self._pending: deque[tuple[str, R.ApplyResult]] = deque()
        self.dropped = 0
        self._lock = threading.Lock()            # two scrapes at once take turns (families)
        self.runs: dict[tuple[str, str, str], int] = {}
        self.last_success: dict[tuple[str, str], float] = {}
        self.durations: dict[tuple[str, str], _Histogram] = {}
        self.waits: dict[tuple[str, str], _Histogram] = {}
        self._periods: dict[str, tuple[int, float | None]] = {}    # job -> (version, period)

    def on_applied(self, entry: str, result: R.ApplyResult) -> None:
        """The tick thread's part: keep the entries that ended attempts, nothing else."""
        if result.ok and not result.deduplicated and isinstance(result.payload, _ENDING):
            if len(self._pending) >= QUEUE_MAX:
                self._pending.popleft()
                self.dropped += 1
            self._pending.append((entry, result))

    # ------------------------------------------------------------ at the scrape

    def update(self) -> None:
        """Fold what apply kept since the last scrape into the series (the caller holds _lock)."""
        taken = []
        while self._pending:
            taken.append(self._pending.popleft())
        ends = [end for entry, result in taken for end in _ends(entry, result)]
        for e in self._read(ends):
            self._count(e)
        self._forget_deleted()

    def _read(self, ends: list[tuple[str, int, Any, str]]) -> list[_Ended]:
        out: list[_Ended] = []
        for i in range(0, len(ends), READ_SLICE):
            out += self._read_slice(ends[i:i + READ_SLICE])
        return out

    def _read_slice(self, ends: list[tuple[str, int, Any, str]]) -> list[_Ended]:
        out = []
        with self._node.lock:                    # a short hold: dict lookups only, then apply goes on
            st = self._node.state
            for job, t, token, state in ends:
                row = st.jobs.get(job)
                ex = st.execs.get((job, t))
                attempt = next((a for a in reversed(ex.attempts) if a.fencing_token == token), None) \
                    if ex is not None else None
                if attempt is None:
                    continue
                started, ended = attempt.started_ms, attempt.ended_ms
                out.append(_Ended(job, row.team if row is not None else "", state, attempt.state,
                                  (ended - started) / 1000 if started and ended else None,
                                  max(0, started - ex.due) / 1000 if started else None,
                                  (ended or 0) / 1000))
        return out

    def _count(self, e: _Ended) -> None:
        key = (self.labels.of(e.job, e.team), e.team)
        if e.state in TERMINAL_STATES:
            runs = (*key, e.state)
            self.runs[runs] = self.runs.get(runs, 0) + 1
        if e.state == SUCCEEDED and e.ended_s:
            self.last_success[key] = max(self.last_success.get(key, 0.0), e.ended_s)
        if e.attempt_state == NOT_READY:          # a sensor's poll: no run time to speak of
            return
        if e.duration_s is not None:
            self.durations.setdefault(key, _Histogram(DURATION_BUCKETS)).observe(e.duration_s)
        if e.wait_s is not None:
            self.waits.setdefault(key, _Histogram(WAIT_BUCKETS)).observe(e.wait_s)

    def _forget_deleted(self) -> None:
        """A deleted job's series go, and its place under the limit is free again."""
        with self._node.lock:
            jobs = self._node.state.jobs
            gone = [name for name in list(self.labels.labelled) if name not in jobs]
        if not gone:
            return
        self.labels.forget(gone)
        dead = set(gone)
        tables: tuple[dict[Any, Any], ...] = (self.runs, self.last_success, self.durations, self.waits)
        for table in tables:
            for key in [k for k in table if k[0] in dead]:
                del table[key]
        for name in gone:
            self._periods.pop(name, None)

    def periods(self) -> list[tuple[str, str, float]]:
        """(job, team, seconds between its next two fires) of the labelled jobs with a repeating
        schedule; computed once per job version."""
        now = int(time.time() * 1000)
        with self._node.lock:
            rows = [(name, row.team, row.version, row.schedule, row.tz) for name in list(self.labels.labelled)
                    if (row := self._node.state.jobs.get(name)) is not None]
        out = []
        for name, team, version, schedule, tz in rows:
            cached = self._periods.get(name)
            if cached is None or cached[0] != version:
                cached = self._periods[name] = (version, _period(name, schedule, tz, now))
            if cached[1]:
                out.append((name, team, cached[1]))
        return out

    def families(self) -> Iterator[Any]:
        """The families of one scrape, built whole under _lock: two scrapes at once (the HTTP
        server is threaded) take turns instead of one reading a table the other changes."""
        with self._lock:
            self.update()
            return iter(list(self._families()))

    def _families(self) -> Iterator[Any]:
        runs = CounterMetricFamily("schedd_job_runs", "Runs ended, by job and final state (on every node: "
                                   "each applies the same results)", labels=["job_name", "team", "outcome"])
        for (job, team, outcome), n in sorted(self.runs.items()):
            runs.add_metric([job, team, outcome], n)
        yield runs
        last = GaugeMetricFamily("schedd_job_last_success_timestamp_seconds",
                                 "When the job's last successful attempt ended (since this node started)",
                                 labels=["job_name", "team"])
        for (job, team), at in sorted(self.last_success.items()):
            last.add_metric([job, team], at)
        yield last
        for name, doc, table in (
            ("schedd_job_run_duration_seconds", "How long each attempt ran, start to end", self.durations),
            ("schedd_job_queue_wait_seconds", "From a run's due time to its attempt's start", self.waits),
        ):
            hist = HistogramMetricFamily(name, doc, labels=["job_name", "team"])
            for (job, team), h in sorted(table.items()):
                hist.add_metric([job, team], h.buckets(), h.total)
            yield hist
        period = GaugeMetricFamily("schedd_job_period_seconds", "Seconds between the job's next two fires "
                                   "(labelled jobs with a repeating schedule)", labels=["job_name", "team"])
        for job, team, seconds in self.periods():
            period.add_metric([job, team], seconds)
        yield period
        for name, doc, value in (
            ("schedd_job_series_labelled", "Jobs with series of their own", len(self.labels.labelled)),
            ("schedd_job_series_limit", "[metrics] job_series_limit", self.labels.limit),
        ):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            yield g
        dropped = CounterMetricFamily("schedd_job_results_dropped", "Ended attempts not counted: more than "
                                      f"{QUEUE_MAX} between two scrapes")
        dropped.add_metric([], self.dropped)
        yield dropped


def _ends(entry: str, result: R.ApplyResult) -> list[tuple[str, int, Any, str]]:
    """(job, scheduled_ms, token, state after) of each attempt an entry ended."""
    try:
        cmd = C.decode(entry)
    except (ValueError, KeyError, TypeError):
        return []
    if cmd.kind in (C.FINISH, C.EXPIRE) and isinstance(result.payload, R.Finished):
        items = [(cmd.args, result)]
    elif cmd.kind == C.FINISH_MANY and isinstance(result.payload, R.FinishedMany):
        items = list(zip(cmd.args.get("results") or [], result.payload.results))
    else:
        return []
    out = []
    for args, r in items:
        job, t = args.get("job"), args.get("scheduled_ms")
        if r.ok and not r.deduplicated and isinstance(r.payload, R.Finished) and not r.payload.never_started \
                and isinstance(job, str) and isinstance(t, int):
            out.append((job, t, args.get("token"), r.payload.state))
    return out


def _period(name: str, schedule: str, tz: str, now_ms: int) -> float | None:
    if not schedule or schedule.startswith("at "):
        return None
    try:
        s = sched.parse(schedule, tz, hash_key=name)
        first = sched.next_after(s, now_ms)
        second = sched.next_after(s, first) if first is not None else None
    except Exception:  # noqa: BLE001 - a schedule this node cannot read has no period to show
        return None
    return (second - first) / 1000 if first is not None and second is not None else None


class SlaMisses:
    """`schedd_sla_missed_total{job_name,team}`, recorded by the leader's SLA driver (the port's
    `sla_missed.labels(job)`), with the job label bounded like the per-job series."""

    def __init__(self, counter: Counter, labels: JobLabels, team_of: Callable[[str], str]) -> None:
        self._counter = counter
        self._labels = labels
        self._team_of = team_of

    def labels(self, *values: str) -> Any:
        job = values[0]
        team = self._team_of(job)
        return self._counter.labels(self._labels.of(job, team), team)


def team_of(node: Any) -> Callable[[str], str]:
    """A job's team, or a DAG's ("" for neither): what the SLA driver's misses are labelled by."""
    def read(name: str) -> str:
        st = node.state
        row = st.jobs.get(name)
        if row is not None:
            return str(row.team)
        dag = getattr(st, "dags", {}).get(name)
        return str(getattr(dag, "team", "") or "")
    return read


class WorkerSeries:
    """The leader's workers (the hub's streams) and pools, read at the scrape; a follower has none."""

    def __init__(self, node: Any, hub: Any) -> None:
        self._node = node
        self._hub = hub
        self._pools: tuple[float, dict[str, int]] = (0.0, {})

    def families(self) -> Iterator[Any]:
        conns = _copy(self._hub.conns) if self._node.is_leader() else []
        live = [c for c in conns if not c.closed]
        connected = GaugeMetricFamily("schedd_workers_connected", "Workers with a stream to this node "
                                      "(the leader's; 0 on a follower)")
        connected.add_metric([], len(live))
        yield connected
        slots = GaugeMetricFamily("schedd_worker_slots", "A worker's slots by state: busy (running or "
                                  "reserved) or free", labels=["worker", "pool", "state"])
        kinds = GaugeMetricFamily("schedd_worker_handler_kind", "1 for each handler kind a worker runs",
                                  labels=["worker", "kind"])
        for c in sorted(live, key=lambda c: c.name):
            free = max(0, c.free_slots())
            slots.add_metric([c.name, c.pool, "busy"], c.slots - free)
            slots.add_metric([c.name, c.pool, "free"], free)
            for kind in sorted(c.kinds):
                kinds.add_metric([c.name, kind], 1)
        yield slots
        yield kinds
        if not self._node.is_leader():
            return
        needed = self._job_pools()
        workers = GaugeMetricFamily("schedd_pool_workers", "Connected, not draining workers that serve "
                                    f"the pool ({ANY_POOL}: jobs without a pool, served by any)", labels=["pool"])
        jobs = GaugeMetricFamily("schedd_pool_jobs", "Active jobs that need the pool", labels=["pool"])
        serving = [c for c in live if not c.draining]
        for pool in sorted(set(needed) | {c.pool or ANY_POOL for c in serving}):
            n = len(serving) if pool == ANY_POOL else sum(1 for c in serving if c.pool == pool)
            workers.add_metric([pool], n)
            jobs.add_metric([pool], needed.get(pool, 0))
        yield workers
        yield jobs

    def _job_pools(self) -> dict[str, int]:
        """Active jobs per pool: a pass over the jobs, so at most every POOLS_EVERY_S, and outside
        the lock (which is held only to copy the list of rows, at C speed); a pool is read once
        per spec template (jobs that differ only by name share one)."""
        at, pools = self._pools
        if time.monotonic() - at < POOLS_EVERY_S:
            return pools
        with self._node.lock:
            rows = list(self._node.state.jobs.values())
        counts: dict[str, int] = {}
        pool_of: dict[str, str] = {}
        for row in rows:
            if row.paused:
                continue
            pool = pool_of.get(row.spec_t)
            if pool is None:
                pool = pool_of[row.spec_t] = ROW_SPECS.get(row.spec_t, row.name).policies.pool or ANY_POOL
            counts[pool] = counts.get(pool, 0) + 1
        self._pools = (time.monotonic(), counts)
        return counts


def _copy(conns: dict[str, Any]) -> list[Any]:
    """The hub's streams, copied from another thread than the loop that changes them."""
    for _ in range(5):
        try:
            return list(conns.values())
        except RuntimeError:              # changed size during the copy: try again
            continue
    return []


def audit_pruned(node: Any) -> int:
    """Audit records pruned since the trail began: the ones before its anchor."""
    with node.lock:
        anchor = getattr(node.state.audit, "anchor", None)     # a stand-in state may have no trail
        return max(0, int(anchor.next_seq) - 1) if anchor is not None else 0


__all__ = ["OTHER", "JobLabels", "RunSeries", "SlaMisses", "WorkerSeries", "audit_pruned", "team_of"]
