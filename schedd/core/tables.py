"""The one table and index layer every part of the state machine shares.

`Tables` holds what is replicated (jobs, executions, the leader epoch, DAGs and their runs,
quotas, staged batches) and the indexes derived from it (names, by team, by job, by state, the
ready queue, overlap and quota counters, the timing wheel over next_fire, the DAG run index).
The deciding modules (schedd.core.jobs, firing, attempts, dags, sla, batches) change the tables
only through the methods here, so every index stays in line with what it indexes.

Contract: derived indexes are never serialized; `rebuild_indexes` makes them from the tables in
bulk (after a restore). Nothing here decides anything: no refusals beyond "not found", no time
but the entry's.
"""

from __future__ import annotations

import bisect
from typing import Any

from sortedcontainers import SortedList

from schedd.core.acl import AclTable
from schedd.core.audit import AuditTrail
from schedd.core import commands as C
from schedd.core import schedule as sched
from schedd.core.model import RETRY_WAIT, RUNNING, SCHEDULED, TERMINAL_STATES, Execution, Job
from schedd.core.naming import dag_of_job, refuse_job_op
from schedd.core.policy import JobPolicy, policy_cache
from schedd.core.results import ApplyResult, Code, reject
from schedd.core.rows import Batch, DagDef, DagRun
from schedd.core.specs import WINDOW_MARK, JobHead
from schedd.core.wheel import TimingWheel

ExecKey = tuple[str, int]
MIN_MS = -(2 ** 62)

READY_STATES = frozenset({SCHEDULED, RETRY_WAIT})     # waiting for a claim
ACTIVE_STATES = frozenset({RUNNING, RETRY_WAIT})      # a run under way, for overlap policies


def ready_key(ex: Execution) -> tuple[int, str, int]:
    """(when it may start, job, scheduled_ms): the claim order of the `ready` index."""
    due = ex.due
    if ex.state == RETRY_WAIT and ex.retry_at is not None:
        due = max(due, ex.retry_at)
    return (due, ex.job, ex.scheduled_ms)


def _bump(counts: dict[str, int], key: str, sign: int) -> None:
    n = counts.get(key, 0) + sign
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)


def schedule_of(job: Job) -> sched.Schedule:
    gap, _, fold = job.dst.partition("/")          # DST policy; "" = the defaults
    return sched.parse(job.schedule, job.tz, hash_key=job.name, gap=gap, fold=fold)


def next_fire_for(s: sched.Schedule, now: int, last_fire: int | None) -> int | None:
    """The next instant to fire for a (re)configured or resumed job: after `now` (instants missed
    while paused are not caught up) and never at or before the last instant already recorded.
    A one-off `at` fires once even when its time is already past at creation."""
    floor = last_fire if last_fire is not None else MIN_MS
    if s.kind != "at":
        floor = max(floor, now - 1)
    return sched.next_after(s, floor)


class Outbox:
    """What one apply hands to the node's history store (schedd.history): the executions that left
    memory and the jobs whose history ends (deleted). Filled by apply, drained by the shell after
    each entry (schedd.replication.node), cleared at the start of the next apply. Not replicated:
    every replica fills its own with the same content."""

    __slots__ = ("executions", "forgotten")

    def __init__(self) -> None:
        self.executions: list[Execution] = []
        self.forgotten: list[str] = []

    def clear(self) -> None:
        if self.executions or self.forgotten:
            self.executions, self.forgotten = [], []

    def __bool__(self) -> bool:
        return bool(self.executions or self.forgotten)


class Tables:
    """The replicated tables and their derived indexes (see the module docstring)."""

    # Derived indexes, made by rebuild_indexes (declared for readers and type checkers).
    names: SortedList[str]
    by_team: dict[str, SortedList[str]]
    paused_names: SortedList[str]
    wheel: TimingWheel
    by_job: dict[str, list[int]]                        # job -> scheduled_ms of its executions, sorted
    by_state: dict[str, SortedList[tuple[int, str]]]     # state -> (scheduled_ms, job)
    by_time: SortedList[tuple[int, str]]                 # (scheduled_ms, job) of every execution
    ready: SortedList[tuple[int, str, int]]              # ready_key of SCHEDULED and RETRY_WAIT ones
    active: dict[str, int]
    pending: dict[str, int]
    held: dict[str, int]
    batch_checked: dict[tuple[str, int], Any]
    dag_run_times: dict[str, list[int]]
    dag_pending: list[ExecKey]
    settled: list[str]
    sla_watch: SortedList[tuple[int, str, int]]         # (deadline_ms, job or dag/<dag>, t)
    sla_jobs: dict[str, Any]
    windowed: SortedList[str]                            # jobs whose spec has a window (schedd.core.windows)
    instants: dict[int, int]                             # next_fire -> the one int object of it (same_instant)
    _instants_kept: int
    window_moves: int

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.execs: dict[ExecKey, Execution] = {}
        self.epoch = 0
        self.clock_ms = 0             # the newest leader time seen in an entry; seeds the wheel
        self.dags: dict[str, DagDef] = {}           # DAG name -> definition (schedd.core.dags)
        self.dag_runs: dict[tuple[str, int], DagRun] = {}   # (DAG name, logical_ms) -> run
        self.quotas: dict[str, int] = {}   # "team:<t>" | "pool:<p>" | "lane:backfill" -> max running
        self.batches: dict[str, Batch] = {}   # batch id -> staged chunks or outcome (schedd.core.batches)
        self.acl = AclTable()                 # policies, roles, token hashes (schedd.core.access)
        self.audit = AuditTrail()             # the hash-chained audit trail (schedd.core.audit)
        self.feature_level = 1                # the cluster's feature level (schedd.core.features)
        self.members: dict[str, tuple[str, str]] = {}   # node id -> (raft, gRPC address) (schedd.core.members)
        # job -> (floor, index): the newest scheduled time of the job's executions that left
        # memory for the nodes' history stores, and the log index of the last one that left
        # (schedd.core.history). Every execution of the job after `floor` is in `execs`.
        self.archived: dict[str, tuple[int, int]] = {}
        self.calendars: dict[str, Any] = {}   # name -> Calendar (schedd.core.calendars)
        self.blackouts: dict[str, Any] = {}   # name -> Blackout (schedd.core.calendars)
        # job -> (instant, placed ms): the leader's placement of a window job's next instant
        # (schedd.core.windows), kept until its next instant is placed or the job is deleted
        self.placements: dict[str, tuple[int, int]] = {}
        # Sharded clusters (schedd.core.quota_shares): this group's share of each cluster quota
        # (key -> (allocation version, share)), and in group 0 the allocation over the groups.
        self.shares: dict[str, tuple[int, int]] = {}
        self.allocations: dict[str, tuple[int, tuple[int, ...]]] = {}
        # Group 0 of a sharded cluster (schedd.core.shards): the shard map's document
        # (`ShardMap.to_dict`), empty until the first is recorded.
        self.shard_map: dict[str, Any] = {}
        self.outbox = Outbox()        # what this apply handed to the history stores (not replicated)

    # ------------------------------------------------------------ bulk rebuild

    def rebuild_indexes(self) -> None:
        """Rebuild every derived index but the SLA one from jobs, execs and DAG runs, in bulk
        (one sort per index). The SLA index is the SLA module's (schedd.core.sla.rebuild)."""
        self.names = SortedList(self.jobs)
        teams: dict[str, list[str]] = {}
        for name, job in self.jobs.items():
            teams.setdefault(job.team, []).append(name)
        self.by_team = {team: SortedList(names) for team, names in teams.items()}
        self.paused_names = SortedList(name for name, job in self.jobs.items() if job.paused)
        self.windowed = SortedList(name for name, job in self.jobs.items() if WINDOW_MARK in job.spec_t)
        self.window_moves = 0                 # bumped when a window job may need a placement (schedd.leader.placer)
        instants: dict[int, int] = {}
        for job in self.jobs.values():
            if (t := job.next_fire) is not None:
                job.next_fire = instants.setdefault(t, t)
        self.instants, self._instants_kept = instants, len(instants)
        self.wheel = TimingWheel(start_ms=self.clock_ms)
        self.wheel.load((name, job.next_fire) for name, job in self.jobs.items()
                        if job.next_fire is not None and not job.paused)
        by_job: dict[str, list[int]] = {}
        by_state: dict[str, list[tuple[int, str]]] = {}
        for (name, t), ex in self.execs.items():
            by_job.setdefault(name, []).append(t)
            by_state.setdefault(ex.state, []).append((t, name))
        self.by_job = {name: sorted(times) for name, times in by_job.items()}
        self.by_state = {st: SortedList(keys) for st, keys in by_state.items()}
        self.by_time = SortedList((t, name) for name, t in self.execs)
        self.ready = SortedList(ready_key(ex) for ex in self.execs.values() if ex.state in READY_STATES)
        self.active = {}       # job -> executions RUNNING or RETRY_WAIT (overlap)
        self.pending = {}      # job -> executions SCHEDULED (queue bound)
        self.held = {}         # quota counter -> running attempts holding it
        self._policies = policy_cache()       # job -> its JobPolicy, per version
        self.batch_checked = {}               # (batch, seq) -> parsed staged chunk (schedd.core.batches)
        for ex in self.execs.values():
            self._count_in(ex, +1)
        run_times: dict[str, list[int]] = {}
        for (dag, t), run in self.dag_runs.items():
            run_times.setdefault(dag, []).append(t)
            if getattr(run, "events", None) is None:     # a run from a snapshot older than the field
                run.events = ()
        self.dag_run_times = {dag: sorted(ts) for dag, ts in run_times.items()}
        self.dag_pending = []                 # DAG rows touched by this apply (schedd.core.dags.settle)
        self.settled = []                     # jobs whose executions finished in this apply (schedd.core.history)

    # ------------------------------------------------------------ executions

    def add_exec(self, ex: Execution) -> None:
        """Put a new execution in the table and every index."""
        self.execs[(ex.job, ex.scheduled_ms)] = ex
        name, t = ex.job, ex.scheduled_ms
        times = self.by_job.get(name)
        if times is None:
            self.by_job[name] = [t]
        elif t > times[-1]:
            times.append(t)             # the usual case: a job's newest instant
        else:
            bisect.insort(times, t)
        self.by_time.add((t, name))
        self._index_state(ex, +1)

    def drop_exec(self, ex: Execution) -> None:
        """Take an execution out of the table and every index."""
        name, t = ex.job, ex.scheduled_ms
        times = self.by_job.get(name)
        if times is not None:
            i = bisect.bisect_left(times, t)
            if i < len(times) and times[i] == t:
                del times[i]
            if not times:
                del self.by_job[name]
        self.by_time.discard((t, name))
        self._index_state(ex, -1)
        del self.execs[(name, t)]

    def set_state(self, ex: Execution, state: str, now: int) -> None:
        """Move an execution to `state`, keeping every state-derived index in line. Set
        `retry_at` (RETRY_WAIT) or `holds` (RUNNING) before the call."""
        self._index_state(ex, -1)
        if state in TERMINAL_STATES:
            self.settled.append(ex.job)
        ex.state, ex.updated_ms = state, now
        if state != RETRY_WAIT:
            ex.retry_at = None
        if state != RUNNING:
            ex.holds = ()
        self._index_state(ex, +1)

    def _index_state(self, ex: Execution, sign: int) -> None:
        """Add (+1) or remove (-1) `ex` in the indexes that depend on its state."""
        key = (ex.scheduled_ms, ex.job)
        keys = self.by_state.get(ex.state)
        if sign > 0:
            if keys is None:
                keys = self.by_state[ex.state] = SortedList()
            keys.add(key)
            if ex.state in READY_STATES:
                self.ready.add(ready_key(ex))
            if ":" in ex.job:                 # a DAG row: settled at the end of this apply
                self.dag_pending.append((ex.job, ex.scheduled_ms))
        else:
            if keys is not None:
                keys.discard(key)
            if ex.state in READY_STATES:
                self.ready.discard(ready_key(ex))
        self._count_in(ex, sign)

    def _count_in(self, ex: Execution, sign: int) -> None:
        if ex.state in ACTIVE_STATES:
            _bump(self.active, ex.job, sign)
        elif ex.state == SCHEDULED:
            _bump(self.pending, ex.job, sign)
        if ex.state == RUNNING:
            for key in ex.holds:
                _bump(self.held, key, sign)

    def active_count(self, name: str) -> int:
        return self.active.get(name, 0)

    def active_desc(self, name: str) -> str:
        """The newest active execution of a job, for messages."""
        for t in reversed(self.by_job.get(name, ())):
            ex = self.execs[(name, t)]
            if ex.state in ACTIVE_STATES:
                return f"{ex.id} ({ex.state})"
        return "a run"

    def policy(self, job: Job) -> JobPolicy:
        return self._policies.get(job)

    def seed_policy(self, job: Job, head: JobHead) -> None:
        """The policy of a job just written from `head` (schedd.core.policy.TemplateCache.seed)."""
        self._policies.seed(job, head)

    # ------------------------------------------------------------ jobs

    def add_job(self, job: Job) -> None:
        """Put a new job in the table and its indexes (the wheel included)."""
        self.jobs[job.name] = job
        self.index_job(job)
        self.schedule_wheel(job)

    def drop_job(self, job: Job) -> None:
        """Take a job and all its executions out of the tables and every index."""
        self.unindex_job(job)
        del self.jobs[job.name]
        for t in list(self.by_job.get(job.name, ())):
            self.drop_exec(self.execs[(job.name, t)])
        self._policies.forget(job.name)
        self.placements.pop(job.name, None)
        if self.archived.pop(job.name, None) is not None:
            self.outbox.forgotten.append(job.name)

    def recorded_floor(self, job: Job) -> int | None:
        """The newest instant of `job` that may have a record: the last scheduled instant, or a
        later one whose record left memory (schedd.core.history). A (re)computed next_fire is
        after it, so the fire path never meets an instant whose record is only on disk."""
        floor = self.archived.get(job.name, (MIN_MS, 0))[0]
        if job.last_fire is None:
            return floor if floor != MIN_MS else None
        return max(job.last_fire, floor)

    def set_team(self, job: Job, team: str) -> None:
        if job.team != team:
            self.unindex_job(job)
            job.team = team
            self.index_job(job)

    def index_job(self, job: Job) -> None:
        self.names.add(job.name)
        team = self.by_team.get(job.team)
        if team is None:
            team = self.by_team[job.team] = SortedList()
        team.add(job.name)

    def unindex_job(self, job: Job) -> None:
        self.names.discard(job.name)
        team = self.by_team.get(job.team)
        if team is not None:
            team.discard(job.name)
            if not team:
                del self.by_team[job.team]
        self.wheel.discard(job.name)
        self.paused_names.discard(job.name)
        self.windowed.discard(job.name)

    def schedule_wheel(self, job: Job) -> None:
        """Bring the due index, the paused index and the window index in line with the job."""
        if WINDOW_MARK in job.spec_t:
            if job.name not in self.windowed:
                self.windowed.add(job.name)
            self.window_moves += 1
        else:
            self.windowed.discard(job.name)
        if job.paused:
            if job.name not in self.paused_names:
                self.paused_names.add(job.name)
        else:
            self.paused_names.discard(job.name)
        if job.next_fire is not None:
            job.next_fire = self.same_instant(job.next_fire)
        if job.paused or job.next_fire is None:
            self.wheel.discard(job.name)
        else:
            self.wheel.set(job.name, job.next_fire)

    def same_instant(self, t: int) -> int:
        """The one int object of instant `t` that every job's next_fire holds: jobs due at the
        same instant (a schedule shared by many jobs, cron's round minutes) share one 32-byte
        int instead of holding one each; the wheel holds that one too. Only object identity
        depends on it, never an answer. Instants the clock has passed are forgotten whenever the
        table has doubled since the last time (amortized O(1) per instant)."""
        same = self.instants.get(t)
        if same is not None:
            return same
        if len(self.instants) > 2 * self._instants_kept + 1024:
            now = self.clock_ms
            self.instants = {k: v for k, v in self.instants.items() if k >= now}
            self._instants_kept = len(self.instants)
        self.instants[t] = t
        return t

    # ------------------------------------------------------------ DAG runs

    def add_run_time(self, dag: str, t: int) -> None:
        ts = self.dag_run_times.setdefault(dag, [])
        if not ts or ts[-1] < t:
            ts.append(t)
        else:
            bisect.insort(ts, t)

    def runs_of(self, dag: str) -> list[int]:
        """Logical times of a DAG's runs, oldest first (the list itself: do not keep it)."""
        return self.dag_run_times.get(dag, [])


# ------------------------------------------------------------------ lookups that refuse


def job_or_reject(st: Tables, cmd: C.Command) -> Job | ApplyResult:
    """The job an entry names (args.name), or the refusal: not found, or one of a DAG's rows."""
    name = cmd.args.get("name")
    job = st.jobs.get(name) if isinstance(name, str) else None
    if job is None:
        return reject(Code.NOT_FOUND, f"job {name!r} not found")
    if dag_of_job(job.name) is not None:
        return refuse_job_op(job.name, cmd.kind)
    return job


def exec_or_reject(st: Tables, cmd: C.Command) -> Execution | ApplyResult:
    """The execution an entry names (args.job, args.scheduled_ms), or the refusal."""
    name, t = cmd.args.get("job"), cmd.args.get("scheduled_ms")
    ex = st.execs.get((name, t)) if isinstance(name, str) and isinstance(t, int) else None
    if ex is None:
        return reject(Code.NOT_FOUND, f"execution {name}@{t} not found")
    return ex
