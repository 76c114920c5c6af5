"""The replicated state machine: `apply(entry, index) -> result`.

Contract (DESIGN.md "The replicated state machine"):
- deterministic: the result and the new state depend only on the old state, the entry text and
  its log index. No clock (time comes in the entry), no I/O, no randomness, no iteration over sets
  of strings.
- total: apply never raises. A malformed or refused entry is a deterministic rejection result;
  an unexpected exception is caught and reported as `internal` (and the state is unchanged for
  commands that validate before they mutate).
- idempotent where it matters: an execution key (job, scheduled_ms) is unique, so a duplicate fire
  is a no-op; a request id seen within DEDUP_TTL_MS returns the first result again.

Indexes beside the state (names, by team, by job, by state, and the timing wheel over
next_fire) are derived: rebuilt on restore, never serialized.
"""

from __future__ import annotations

import gc
import hashlib
import sys
from collections import deque
from dataclasses import dataclass, fields
from itertools import starmap
from operator import attrgetter

from sortedcontainers import SortedList

from schedd.core import batches as B
from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core import schedule as sched
from schedd.core import sla as sla_index
from schedd.core.digest import state_digest
from schedd.core.model import (
    CANCELLED, DEFAULT_HISTORY_LIMIT, FAILED, LOST, MAX_ERROR_CHARS, MAX_OUTPUT_TAIL_CHARS, REJECTED,
    RETRY_WAIT, RUNNING, SCHEDULED, SKIPPED, SUCCEEDED, TERMINAL_STATES, TIMED_OUT, Attempt, Execution,
    Job, ValidationError, dst_policy, dump_spec, execution_id, load_committed_spec,
)
from schedd.core.policy import BACKFILL, QUOTA_KINDS, JobPolicy, blocked, jitter_offset_ms, policy_cache
from schedd.core.retry import RetryPolicy
from schedd.core.wheel import TimingWheel

DEDUP_TTL_MS = 15 * 60 * 1000
AUDIT_KEEP = 10_000
MISSED_GRACE_MS = 10_000       # later than this, an instant was missed: the catch-up policy decides
                               # (and it is labelled "catchup"); sooner, it was only delayed
GAPS_KEEP = 50                 # ledger gaps kept per job
OPEN_END = 2 ** 62             # the end of a gap still open (a job paused now)
MAX_BACKFILL_PER_ENTRY = 1000
LOST_RETRY_LIMIT = 5           # re-runs of attempts lost with their worker (at_least_once)
MIN_MS = -(2 ** 62)
SNAPSHOT_FORMAT = ("schedd-state", 3)
# Images this version still reads: version 1 had no DAGs, quotas or per-execution policy fields,
# version 2 no job incarnations (rows of older versions are shorter; the fields added since have
# defaults at the end).
READABLE_FORMATS = (("schedd-state", 1), ("schedd-state", 2), SNAPSHOT_FORMAT)
JOB_FIELDS = tuple(f.name for f in fields(Job))
EXEC_FIELDS = tuple(f.name for f in fields(Execution))
AUDIT_FIELDS = ("time_ms", "principal", "action", "target", "result", "log_index")
# Smaller tables, pickled as they are (dicts of slotted dataclasses or plain values).
EXTRA_FIELDS = ("dags", "dag_runs", "quotas", "batches")

ExecKey = tuple[str, int]


READY_STATES = frozenset({SCHEDULED, RETRY_WAIT})     # waiting for a claim
ACTIVE_STATES = frozenset({RUNNING, RETRY_WAIT})      # a run under way, for overlap policies


def _ready_key(ex: Execution) -> tuple[int, str, int]:
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


def _newest(s: sched.Schedule, lo: int, hi: int, n: int) -> list[int]:
    """The newest `n` instants of `s` in [lo, hi], oldest first, without walking from `lo`: the
    window looked at grows backwards from `hi` until it holds n instants or reaches lo."""
    span = 60_000
    while True:
        start = max(lo, hi - span)
        found: deque[int] = deque(maxlen=n)
        x = sched.next_after(s, start - 1)
        while x is not None and x <= hi:
            found.append(x)
            x = sched.next_after(s, x)
        if len(found) >= n or start == lo:
            return list(found)
        span *= 8


def _reject(code: str, msg: str, **extra) -> dict:
    return {"ok": False, "code": code, "msg": msg, **extra}


def _ok(**extra) -> dict:
    return {"ok": True, "code": "ok", **extra}


def next_fire_for(s: sched.Schedule, now: int, last_fire: int | None) -> int | None:
    """The next instant to fire for a (re)configured or resumed job: after `now` (instants missed
    while paused are not caught up) and never at or before the last instant already recorded.
    A one-off `at` fires once even when its time is already past at creation."""
    floor = last_fire if last_fire is not None else MIN_MS
    if s.kind != "at":
        floor = max(floor, now - 1)
    return sched.next_after(s, floor)


def schedule_of(job: Job) -> sched.Schedule:
    gap, _, fold = job.dst.partition("/")          # DST policy; "" = the defaults
    return sched.parse(job.schedule, job.tz, hash_key=job.name, gap=gap, fold=fold)


@dataclass(slots=True)
class AuditRecord:
    time_ms: int
    principal: str
    action: str
    target: str
    result: str
    log_index: int


class _SnapshotImage:
    """What `SchedulerState.snapshot()` hands pysyncobj. It costs nothing to make; the columnar
    copy is built when it is pickled, which happens in pysyncobj's forked child, so the Raft
    tick thread never waits for it. Rows of plain tuples pickle and load several times faster
    than a million objects do."""

    __slots__ = ("state",)

    def __init__(self, state: "SchedulerState") -> None:
        self.state = state

    def __reduce__(self):
        s = self.state
        return (_from_image, (SNAPSHOT_FORMAT, _GcPause(), list(map(attrgetter(*JOB_FIELDS), s.jobs.values())),
                              list(map(attrgetter(*EXEC_FIELDS), s.execs.values())), s.epoch, s.dedup,
                              list(map(attrgetter(*AUDIT_FIELDS), s.audit)), s.hash, s.last_index,
                              s.clock_ms, {key: getattr(s, key) for key in EXTRA_FIELDS}))


class _GcPause:
    """Unpickled first in an image: it turns the cyclic garbage collector off while millions of
    rows and objects are built (collections triggered every few hundred allocations would
    rescan them over and over: 2x slower). `SchedulerState.restore` turns it back on."""

    __slots__ = ()

    def __reduce__(self):
        return (gc.disable, ())


def _from_image(fmt, _gc_paused, job_rows, exec_rows, epoch, dedup, audit_rows, digest, last_index,
                clock_ms, extra=None):
    if tuple(fmt) not in READABLE_FORMATS:
        gc.enable()
        raise ValueError(f"unsupported snapshot format {fmt!r}")
    jobs = {job.name: job for job in starmap(Job, job_rows)}
    execs = {(ex.job, ex.scheduled_ms): ex for ex in starmap(Execution, exec_rows)}
    audit = list(starmap(AuditRecord, audit_rows))
    return (SNAPSHOT_FORMAT, jobs, execs, epoch, dedup, audit, digest, last_index, clock_ms, extra or {})


class SchedulerState:
    """Jobs, executions, leader epoch, dedup table and audit trail, plus derived indexes."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.execs: dict[ExecKey, Execution] = {}
        self.epoch = 0
        self.dedup: dict[str, tuple[int, dict]] = {}
        self.audit: deque[AuditRecord] = deque(maxlen=AUDIT_KEEP)
        self.hash = b"\0" * 16
        self.last_index = 0
        self.clock_ms = 0             # the newest leader time seen in an entry; seeds the wheel
        self.dags: dict = {}          # DAG name -> definition (schedd.core.dags)
        self.dag_runs: dict = {}      # (DAG name, logical_ms) -> run (schedd.core.dags)
        self.quotas: dict[str, int] = {}   # "team:<t>" | "pool:<p>" | "lane:backfill" -> max running
        self.batches: dict[str, B.Batch] = {}   # batch id -> staged chunks or outcome (schedd.core.batches)
        self._digest: tuple | None = None  # ((last_index, hash), state_digest()): a read cache
        self._reindex()

    # ------------------------------------------------------------ indexes

    def _reindex(self) -> None:
        """Rebuild every derived index from jobs and execs, in bulk (one sort per index)."""
        self.names = SortedList(self.jobs)
        teams: dict[str, list[str]] = {}
        for name, job in self.jobs.items():
            teams.setdefault(job.team, []).append(name)
        self.by_team = {team: SortedList(names) for team, names in teams.items()}
        self.paused_names = SortedList(name for name, job in self.jobs.items() if job.paused)
        self.wheel = TimingWheel(start_ms=self.clock_ms)
        self.wheel.load((name, job.next_fire) for name, job in self.jobs.items()
                        if job.next_fire is not None and not job.paused)
        by_job: dict[str, list[int]] = {}
        by_state: dict[str, list[tuple[int, str]]] = {}
        for (name, t), ex in self.execs.items():
            by_job.setdefault(name, []).append(t)
            by_state.setdefault(ex.state, []).append((t, name))
        self.by_job = {name: SortedList(times) for name, times in by_job.items()}
        self.by_state = {st: SortedList(keys) for st, keys in by_state.items()}
        self.by_time = SortedList((t, name) for name, t in self.execs)
        self.ready = SortedList(_ready_key(ex) for ex in self.execs.values() if ex.state in READY_STATES)
        self.active: dict[str, int] = {}      # job -> executions RUNNING or RETRY_WAIT (overlap)
        self.pending: dict[str, int] = {}     # job -> executions SCHEDULED (queue bound)
        self.held: dict[str, int] = {}        # quota counter -> running attempts holding it
        self._policies = policy_cache()       # job -> its JobPolicy, per version
        self.batch_checked: dict = {}         # (batch, seq) -> parsed staged chunk (schedd.core.batches)
        for ex in self.execs.values():
            self._count_in(ex, +1)
        D.reindex(self)                       # DAG run index; clears the DAG settle queue
        sla_index.rebuild(self)               # SLA due index (schedd.core.sla)

    def _index_exec(self, ex: Execution) -> None:
        name, t = ex.job, ex.scheduled_ms
        times = self.by_job.get(name)
        if times is None:
            times = self.by_job[name] = SortedList()
        times.add(t)
        self.by_time.add((t, name))
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
                self.ready.add(_ready_key(ex))
            if ":" in ex.job:                 # a DAG row: settled at the end of this apply
                self.dag_pending.append((ex.job, ex.scheduled_ms))
        else:
            if keys is not None:
                keys.discard(key)
            if ex.state in READY_STATES:
                self.ready.discard(_ready_key(ex))
        self._count_in(ex, sign)

    def _count_in(self, ex: Execution, sign: int) -> None:
        if ex.state in ACTIVE_STATES:
            _bump(self.active, ex.job, sign)
        elif ex.state == SCHEDULED:
            _bump(self.pending, ex.job, sign)
        if ex.state == RUNNING:
            for key in ex.holds:
                _bump(self.held, key, sign)

    def _set_state(self, ex: Execution, state: str, now: int) -> None:
        """Move an execution to `state`, keeping every state-derived index in line. Set
        `retry_at` (RETRY_WAIT) or `holds` (RUNNING) before the call."""
        self._index_state(ex, -1)
        ex.state, ex.updated_ms = state, now
        if state != RETRY_WAIT:
            ex.retry_at = None
        if state != RUNNING:
            ex.holds = ()
        self._index_state(ex, +1)

    def _unindex_exec(self, ex: Execution) -> None:
        name, t = ex.job, ex.scheduled_ms
        times = self.by_job.get(name)
        if times is not None:
            times.discard(t)
            if not times:
                del self.by_job[name]
        self.by_time.discard((t, name))
        self._index_state(ex, -1)

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

    def _add_job_index(self, job: Job) -> None:
        self.names.add(job.name)
        team = self.by_team.get(job.team)
        if team is None:
            team = self.by_team[job.team] = SortedList()
        team.add(job.name)

    def _remove_job_index(self, job: Job) -> None:
        self.names.discard(job.name)
        team = self.by_team.get(job.team)
        if team is not None:
            team.discard(job.name)
            if not team:
                del self.by_team[job.team]
        self.wheel.discard(job.name)
        self.paused_names.discard(job.name)

    def _schedule_wheel(self, job: Job) -> None:
        """Bring the due index and the paused index in line with the job."""
        if job.paused:
            if job.name not in self.paused_names:
                self.paused_names.add(job.name)
        else:
            self.paused_names.discard(job.name)
        if job.paused or job.next_fire is None:
            self.wheel.discard(job.name)
        else:
            self.wheel.set(job.name, job.next_fire)

    # ------------------------------------------------------------ snapshot

    def snapshot(self) -> _SnapshotImage:
        """O(1): pysyncobj forks right after this returns and the child pickles the image from a
        copy-on-write view of the state, so the tick thread never waits for serialization."""
        return _SnapshotImage(self)

    def restore(self, data: tuple) -> None:
        """Load what unpickling a snapshot image produced, then rebuild the indexes. The restored
        objects are frozen out of the garbage collector's generations (gc.freeze): they live as
        long as the state, and full collections would otherwise rescan them all, stalling the
        Raft tick thread for a second per million jobs."""
        gc.disable()
        try:
            fmt, jobs, execs, epoch, dedup, audit, digest, last_index, clock_ms, extra = data
            if tuple(fmt) != SNAPSHOT_FORMAT:
                raise ValueError(f"unsupported snapshot format {fmt!r}")
            self.jobs, self.execs, self.epoch, self.dedup = jobs, execs, epoch, dedup
            self.audit = deque(audit, maxlen=AUDIT_KEEP)
            self.hash, self.last_index, self.clock_ms = digest, last_index, clock_ms
            self._digest = None
            for key in EXTRA_FIELDS:
                setattr(self, key, extra.get(key, {}))
            D.upgrade(self)                   # DAGs pickled before a field existed
            self._reindex()
            gc.freeze()
        finally:
            gc.enable()

    # ------------------------------------------------------------ apply

    def apply(self, entry: str, index: int) -> dict:
        """Apply one committed entry at Raft log index `index`. Never raises."""
        self.hash = hashlib.blake2b(self.hash + entry.encode(), digest_size=16).digest()
        self.last_index = index
        try:
            cmd = C.decode(entry)
        except (ValueError, KeyError, TypeError) as e:
            return _reject("invalid", f"malformed entry: {e}")
        if cmd.now > self.clock_ms:
            self.clock_ms = cmd.now
        B.forget_finished(self, cmd.now)
        if cmd.rid:
            self._expire_dedup(cmd.now)
            seen = self.dedup.get(cmd.rid)
            if seen is not None:
                return {**seen[1], "deduplicated": True}
        try:
            result = self._HANDLERS[cmd.kind](self, cmd, index)
            if self.dag_pending:
                D.settle(self, cmd, index)    # DAG runs move on (schedd.core.dags)
        except Exception as e:  # noqa: BLE001 - apply must be total (research F1)
            result = _reject("internal", f"{type(e).__name__}: {e}")
        if cmd.rid and result.get("code") != "stale_term":
            # A refusal for a stale term says who proposed, not what became of the request: a
            # deposed leader's entry committed late must not answer the new leader's proposal
            # of the same request id (an expiry, a claim, an SLA miss) for DEDUP_TTL_MS.
            self.dedup[cmd.rid] = (cmd.now, result)
        if cmd.kind not in (C.FIRE, C.NOOP, C.EPOCH, C.START, C.FINISH, C.EXPIRE, C.SKIP, C.SLA):
            self.audit.append(AuditRecord(cmd.now, cmd.by, cmd.kind, self._target(cmd),
                                          result.get("code", "ok"), index))
        return result

    @staticmethod
    def _target(cmd: C.Command) -> str:
        if cmd.kind == C.PUT:
            return str(cmd.args.get("name", ""))
        if cmd.kind == C.PUT_MANY:
            return f"{len(cmd.args.get('specs') or [])} jobs"
        if cmd.kind in (C.BATCH_STAGE, C.BATCH_COMMIT, C.BATCH_ABORT):
            return f"batch {cmd.args.get('batch')}"
        if cmd.kind == C.CANCEL:
            return f"{cmd.args.get('job')}@{cmd.args.get('scheduled_ms')}"
        return str(cmd.args.get("name") or cmd.args.get("key") or "")

    def _expire_dedup(self, now: int) -> None:
        horizon = now - DEDUP_TTL_MS
        while self.dedup:
            rid = next(iter(self.dedup))
            if self.dedup[rid][0] >= horizon:
                break
            del self.dedup[rid]

    # -- leadership

    def _epoch(self, cmd: C.Command, index: int) -> dict:
        if cmd.term > self.epoch:
            self.epoch = cmd.term
        return _ok(epoch=self.epoch)

    def _noop(self, cmd: C.Command, index: int) -> dict:
        return _ok(epoch=self.epoch)

    # -- jobs

    @staticmethod
    def _committed_spec(text: object) -> tuple[dict, str, sched.Schedule]:
        spec = load_committed_spec(text)
        try:
            s = sched.parse(spec["schedule"], spec["timezone"], hash_key=spec["name"],
                            gap=spec.get("dst_gap", ""), fold=spec.get("dst_fold", ""))
        except sched.ScheduleError as e:
            raise ValidationError(str(e)) from None
        return spec, text, s

    def _put(self, cmd: C.Command, index: int) -> dict:
        try:
            spec, text, s = self._committed_spec(cmd.args.get("spec"))
        except ValidationError as e:
            return _reject("invalid", str(e))
        current = self.jobs.get(spec["name"])
        if current is not None and cmd.args.get("create_only"):
            return _reject("exists", f"job {spec['name']!r} already exists")
        expected = cmd.args.get("expected_version") or 0
        if expected and (current is None or current.version != expected):
            have = "absent" if current is None else f"at version {current.version}"
            return _reject("conflict", f"job {spec['name']!r} is {have}, not at version {expected}")
        over = B.team_overflow(self, [(spec["name"], spec["team"])], self._team_cap(cmd))
        if over:
            return _reject("exhausted", over)
        created = self._upsert(spec, text, s, cmd, index)
        job = self.jobs[spec["name"]]
        return _ok(created=created, name=job.name, version=job.version)

    @staticmethod
    def _team_cap(cmd: C.Command) -> int:
        """The proposer's limits.max_jobs_per_team, carried in the entry (0 = none)."""
        cap = cmd.args.get("team_cap") or 0
        return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else 0

    def _put_many(self, cmd: C.Command, index: int) -> dict:
        """A batch that fits one entry; with a batch id, refused if its proposer aborted it."""
        refused = B.record_single(self, cmd)
        if refused is not None:
            return refused
        texts = cmd.args.get("specs")
        if not isinstance(texts, list):
            return _reject("invalid", "specs must be a list")
        checked = self.check_specs(texts)
        if isinstance(checked, dict):
            return checked
        result = self.put_specs(checked, cmd, index)
        B.single_done(self, cmd, result)
        return result

    def check_specs(self, texts: list, first: int = 1) -> list | dict:
        """Parse committed spec texts (the costly half of registering a job), or the refusal of
        the first bad one, named with its 1-based `position` in the batch (`first` = position of
        texts[0])."""
        checked = []
        for i, text in enumerate(texts, first):
            try:
                checked.append(self._committed_spec(text))
            except ValidationError as e:
                return _reject("invalid", f"job #{i}: {e}", position=i)
        return checked

    def put_specs(self, checked: list, cmd: C.Command, index: int) -> dict:
        """Create or update every job of a checked batch, or none: all are checked against the
        table (duplicates, create_only, the team cap) before the first is written."""
        names: dict[str, int] = {}
        for i, (spec, _, _) in enumerate(checked, 1):
            name = spec["name"]
            if name in names:
                return _reject("invalid", f"job {name!r} (#{i}) appears more than once in the batch "
                                          f"(first at #{names[name]})", position=i)
            names[name] = i
            if cmd.args.get("create_only") and name in self.jobs:
                return _reject("exists", f"job {name!r} (#{i}) already exists", position=i)
        over = B.team_overflow(self, [(spec["name"], spec["team"]) for spec, _, _ in checked],
                               self._team_cap(cmd))
        if over:
            return _reject("exhausted", over)
        created = sum(self._upsert(spec, text, s, cmd, index) for spec, text, s in checked)
        return _ok(created=created, updated=len(checked) - created)

    def _upsert(self, spec: dict, text: str, s: sched.Schedule, cmd: C.Command, index: int) -> bool:
        """Create or update a job from a checked spec. A new job's incarnation is `index`, the
        entry that created it. Repeated strings (team, schedule, zone) are interned: a million
        jobs share a handful of them."""
        intern = sys.intern
        paused = bool(spec.get("paused"))
        team, schedule, tz = intern(spec["team"]), intern(spec["schedule"]), intern(spec["timezone"])
        limit = spec.get("history_limit") or DEFAULT_HISTORY_LIMIT
        dst = intern(dst_policy(spec))
        job = self.jobs.get(spec["name"])
        if job is None:
            job = Job(name=spec["name"], team=team, schedule=schedule, tz=tz, spec=text, version=1,
                      paused=paused, next_fire=next_fire_for(s, cmd.now, None), created_ms=cmd.now,
                      updated_ms=cmd.now, created_by=cmd.by, history_limit=limit, dst=dst,
                      incarnation=index)
            self.jobs[job.name] = job
            self._add_job_index(job)
            self._schedule_wheel(job)
            return True
        timing_changed = (job.schedule, job.tz, job.dst) != (schedule, tz, dst)
        job.dst = dst
        resumed = job.paused and not paused
        if job.team != team:
            self._remove_job_index(job)
            job.team = team
            self._add_job_index(job)
        job.schedule, job.tz, job.spec, job.paused = schedule, tz, text, paused
        job.history_limit = limit
        job.version += 1
        job.updated_ms = cmd.now
        if timing_changed or resumed:
            job.next_fire = next_fire_for(s, cmd.now, job.last_fire)
        self._schedule_wheel(job)
        self._prune_history(job, cmd.now)
        return False

    def _job_or_reject(self, cmd: C.Command) -> Job | dict:
        name = cmd.args.get("name")
        job = self.jobs.get(name) if isinstance(name, str) else None
        if job is None:
            return _reject("not_found", f"job {name!r} not found")
        if D.dag_of_job(name) is not None:
            return D.refuse_job_op(name, cmd.kind)
        return job

    def _delete(self, cmd: C.Command, index: int) -> dict:
        job = self._job_or_reject(cmd)
        if isinstance(job, dict):
            return job
        self._remove_job_index(job)
        del self.jobs[job.name]
        for t in list(self.by_job.get(job.name, ())):
            self._unindex_exec(self.execs.pop((job.name, t)))
        self._policies.forget(job.name)
        return _ok(name=job.name)

    def _set_paused(self, cmd: C.Command, paused: bool) -> dict:
        job = self._job_or_reject(cmd)
        if isinstance(job, dict):
            return job
        if job.paused != paused:
            spec = job.spec_dict()
            if paused:
                spec["paused"] = True
                self._skip_pending(job, f"paused by {cmd.by or 'a user'}", cmd.now)
                self._add_gap(job, cmd.now, OPEN_END, "paused", f"paused by {cmd.by or 'a user'}")
            else:
                spec.pop("paused", None)
                job.next_fire = self._resume_from(job, cmd)
            job.paused, job.spec = paused, dump_spec(spec)
            job.version += 1
            job.updated_ms = cmd.now
            self._schedule_wheel(job)
        return _ok(name=job.name, version=job.version)

    def _resume_from(self, job: Job, cmd: C.Command) -> int | None:
        """Close the pause's gap in the ledger. With `catch_up`, the instants missed while paused
        are handed to the job's catch-up policy (the fire path) instead of being recorded paused."""
        s = schedule_of(job)
        gaps = list(job.gaps)
        since = None
        if gaps and gaps[-1][1] == OPEN_END:
            since = gaps[-1][0]
            if cmd.args.get("catch_up"):
                gaps.pop()
            else:
                gaps[-1] = (since, cmd.now, *gaps[-1][2:])
            job.gaps = tuple(gaps)
        if cmd.args.get("catch_up") and since is not None:
            floor = since - 1 if job.last_fire is None else max(job.last_fire, since - 1)
            return sched.next_after(s, floor)
        return next_fire_for(s, cmd.now, job.last_fire)

    def _skip_pending(self, job: Job, reason: str, now: int) -> None:
        """Pausing: intents already recorded (within the lookahead) end SKIPPED, not forgotten."""
        if not self.pending.get(job.name):
            return
        for t in list(self.by_job.get(job.name, ())):
            ex = self.execs[(job.name, t)]
            if ex.state == SCHEDULED and not ex.attempts and ex.trigger in ("schedule", "catchup"):
                ex.reason = f"paused: {reason}"
                self._set_state(ex, SKIPPED, now)

    def _add_gap(self, job: Job, start: int, end: int, disposition: str, detail: str) -> None:
        """Record instants [start, end) that were not run, and why: the ledger of dispositions
        for instants that have no execution of their own (a day of a per-second job paused is one
        record, not 86,400)."""
        if end <= start:
            return
        job.gaps = (*job.gaps[-(GAPS_KEEP - 1):], (start, end, disposition, detail[:MAX_ERROR_CHARS]))

    def _pause(self, cmd: C.Command, index: int) -> dict:
        return self._set_paused(cmd, True)

    def _resume(self, cmd: C.Command, index: int) -> dict:
        return self._set_paused(cmd, False)

    # -- executions

    def _record(self, job: Job, t: int, trigger: str, cmd: C.Command, index: int, *,
                lane: str = "") -> Execution:
        policy = self.policy(job)
        due = t + jitter_offset_ms(job.name, policy.jitter_ms) if trigger in ("schedule", "catchup") else t
        ex = Execution(job=job.name, scheduled_ms=t, state=SCHEDULED, trigger=trigger,
                       created_ms=cmd.now, term=cmd.term, log_index=index, updated_ms=cmd.now,
                       due_ms=due if due != t else 0, lane=lane)
        if (policy.overlap == "queue" and trigger in ("schedule", "catchup", "manual")
                and self.active_count(job.name) and self.pending.get(job.name, 0) >= policy.queue_limit):
            ex.state = SKIPPED
            ex.reason = (f"overlap queue full: {self.pending[job.name]} run(s) already waiting behind "
                         f"{self.active_desc(job.name)}")
        self.execs[(job.name, t)] = ex
        self._index_exec(ex)
        job.fired_total += 1
        self._prune_history(job, cmd.now)
        sla_index.on_record(self, job, ex, cmd.now)
        return ex

    def _prune_history(self, job: Job, now: int) -> None:
        """Keep the newest `history_limit` executions of a job and none finished longer than its
        `history_max_age_seconds` ago, deterministically. Only finished executions are pruned:
        work that has not run yet is never dropped to make room."""
        times = self.by_job.get(job.name)
        if times is None:
            return
        if self.pending.get(job.name, 0) > job.history_limit:
            self._skip_backlog(job, times, now)
        excess = len(times) - job.history_limit
        max_age = self.policy(job).max_age_ms
        if excess <= 0 and not max_age:
            return
        horizon = now - max_age if max_age else MIN_MS
        victims = []
        for t in times:
            if len(victims) >= excess and t >= horizon:
                break
            ex = self.execs[(job.name, t)]
            if ex.state in TERMINAL_STATES and (len(victims) < excess or ex.updated_ms < horizon):
                victims.append(ex)
        for ex in victims:
            self._unindex_exec(ex)
            del self.execs[(ex.job, ex.scheduled_ms)]

    def _skip_backlog(self, job: Job, times, now: int) -> None:
        """A job whose runs nobody starts (no worker for its pool) must not grow without bound:
        past `history_limit` waiting runs, the oldest is recorded SKIPPED, saying why."""
        excess = self.pending[job.name] - job.history_limit
        for t in list(times):
            if excess <= 0:
                break
            ex = self.execs[(job.name, t)]
            if ex.state == SCHEDULED and not ex.attempts:
                ex.reason = (f"backlog: never started while {job.history_limit} newer runs were waiting "
                             "(history_limit)")
                self._set_state(ex, SKIPPED, now)
                excess -= 1

    def _trigger(self, cmd: C.Command, index: int) -> dict:
        job = self._job_or_reject(cmd)
        if isinstance(job, dict):
            return job
        t = cmd.now
        while (job.name, t) in self.execs:
            t += 1
        ex = self._record(job, t, "forced" if cmd.args.get("force") else "manual", cmd, index)
        return _ok(name=job.name, scheduled_ms=t, state=ex.state,
                   items=[[job.name, t, "created" if ex.state == SCHEDULED else "skipped"]])

    def _fire(self, cmd: C.Command, index: int) -> dict:
        if cmd.term != self.epoch:
            return _reject("stale_term", f"fire from term {cmd.term}, but the leader epoch is {self.epoch}")
        items = []
        for name, t in cmd.args.get("items") or []:
            for when, code in self._fire_one(name, t, cmd, index):
                items.append([name, when, code])
        return _ok(items=items)

    def _fire_one(self, name: str, t: int, cmd: C.Command, index: int) -> list[tuple[int, str]]:
        job = self.jobs.get(name)
        if job is None:
            return [(t, "unknown_job")]
        if job.paused:
            return [(t, "paused")]
        due = job.next_fire == t
        if due and (name, t) not in self.execs and t < cmd.now - MISSED_GRACE_MS:
            return self._catch_up(job, t, cmd, index)
        if due:
            job.next_fire = sched.next_after(schedule_of(job), t)
            job.last_fire = t
            self._schedule_wheel(job)
        if (name, t) in self.execs:
            return [(t, "duplicate")]
        if not due:
            return [(t, "not_due")]
        # Late by less than the missed grace (an outage, a failover): delayed, not missed. It is a
        # plain scheduled run, never throttled by the catch-up rate, whatever the number of them.
        ex = self._record(job, t, "schedule", cmd, index)
        return [(t, "created" if ex.state == SCHEDULED else "skipped")]

    def _catch_up(self, job: Job, t: int, cmd: C.Command, index: int) -> list[tuple[int, str]]:
        """The job's catch-up policy over the instants it missed, from `t` (its next_fire) to
        `now - MISSED_GRACE_MS` (an instant late by less than that is a failover's delay, and runs).
        Runs are recorded as executions; every other missed instant gets a disposition in the
        ledger (a gap): outside the window, past the starting deadline, coalesced, over the cap,
        or policy none. With `all` and no cap, one instant is recorded per call and the planner
        feeds the rest, rate-limited by the assigner."""
        s, p, now = schedule_of(job), self.policy(job), cmd.now
        horizon = now - MISSED_GRACE_MS
        out: list[tuple[int, str]] = []
        cut, disposition, detail = MIN_MS, "", ""
        if p.catchup_window_ms:
            cut, disposition = now - p.catchup_window_ms, "skipped-window"
            detail = f"older than the catch-up window of {p.catchup_window_ms / 1000:g}s"
        if p.deadline_ms and now - p.deadline_ms > cut:
            cut, disposition = now - p.deadline_ms, "skipped-deadline"
            detail = f"its starting deadline of {p.deadline_ms / 1000:g}s had passed"
        lo: int | None = t
        if t < cut:
            lo = sched.next_after(s, min(cut, horizon + 1) - 1)
            end = lo if lo is not None and lo <= horizon else horizon + 1
            self._add_gap(job, t, end, disposition, f"missed while no leader ran it; {detail}")
            out.append((t, "skipped"))
        if lo is None or lo > horizon:
            job.next_fire, job.last_fire = lo, horizon
            self._schedule_wheel(job)
            return out
        if p.catchup == "all" and not p.catchup_max:
            job.next_fire, job.last_fire = sched.next_after(s, lo), lo
            self._schedule_wheel(job)
            self._record(job, lo, "catchup", cmd, index)
            return out + [(lo, "created")]
        if p.catchup == "none":
            keep: list[int] = []
            self._add_gap(job, lo, horizon + 1, "skipped-catchup",
                          "missed while no leader ran it; catch-up policy none")
        else:
            n = 1 if p.catchup == "latest" else p.catchup_max
            if p.catchup == "all" and p.catchup_order == "oldest":
                keep = sched.next_n(s, lo - 1, n)
                keep = [x for x in keep if x <= horizon]
                self._add_gap(job, keep[-1] + 1, horizon + 1, "skipped-cap",
                              f"missed; over the catch-up cap of {n} (oldest first)")
            else:
                keep = _newest(s, lo, horizon, n)
                if p.catchup == "latest":
                    self._add_gap(job, lo, keep[0], "coalesced",
                                  f"missed; coalesced into {execution_id(job.name, keep[-1])} (catch-up latest)")
                else:
                    self._add_gap(job, lo, keep[0], "skipped-cap",
                                  f"missed; over the catch-up cap of {n} (newest first)")
        job.next_fire, job.last_fire = sched.next_after(s, horizon), horizon
        self._schedule_wheel(job)
        for x in keep:
            if (job.name, x) not in self.execs:
                self._record(job, x, "catchup", cmd, index)
                out.append((x, "created"))
        if not keep:
            out.append((t, "skipped"))
        return out

    def _skip(self, cmd: C.Command, index: int) -> dict:
        """The leader's decision that executions due now will not run (overlap skip, starting
        deadline): recorded SKIPPED with the reason, never dropped silently."""
        if cmd.term != self.epoch:
            return _reject("stale_term", f"skip from term {cmd.term}, but the leader epoch is {self.epoch}")
        items = []
        for name, t, reason in cmd.args.get("items") or []:
            ex = self.execs.get((name, t))
            if ex is None or ex.state != SCHEDULED or ex.attempts:
                items.append([name, t, "conflict"])
                continue
            ex.reason = str(reason)[:MAX_ERROR_CHARS]
            self._set_state(ex, SKIPPED, cmd.now)
            items.append([name, t, "skipped"])
        return _ok(items=items)

    def _backfill(self, cmd: C.Command, index: int) -> dict:
        """Executions for past instants of a job's schedule, on the backfill lane: served after
        today's runs, under their own quota. Instants already recorded are left as they are."""
        job = self._job_or_reject(cmd)
        if isinstance(job, dict):
            return job
        times = cmd.args.get("times")
        if not isinstance(times, list) or len(times) > MAX_BACKFILL_PER_ENTRY \
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in times):
            return _reject("invalid", f"times must be a list of at most {MAX_BACKFILL_PER_ENTRY} integers")
        s = schedule_of(job)
        created = duplicates = 0
        for x in times:
            if sched.next_after(s, x - 1) != x:
                return _reject("invalid", f"{sched.format_ms(x)} is not an instant of {job.name}'s schedule")
        for x in times:
            if (job.name, x) in self.execs:
                duplicates += 1
                continue
            self._record(job, x, BACKFILL, cmd, index, lane=BACKFILL)
            created += 1
        return _ok(name=job.name, created=created, duplicates=duplicates)

    def _quota(self, cmd: C.Command, index: int) -> dict:
        key, limit = cmd.args.get("key"), cmd.args.get("limit")
        kind, _, name = key.partition(":") if isinstance(key, str) else ("", "", "")
        if kind not in QUOTA_KINDS or not name:
            return _reject("invalid", f"bad quota key {key!r}: expected team:<name>, pool:<name> or lane:backfill")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            return _reject("invalid", "limit must be a whole number >= 0 (0 removes the quota)")
        if limit:
            self.quotas[key] = limit
        else:
            self.quotas.pop(key, None)
        return _ok(key=key, limit=limit)

    # -- attempts: claim, result, lease loss, cancel

    def _exec_or_reject(self, cmd: C.Command) -> Execution | dict:
        name, t = cmd.args.get("job"), cmd.args.get("scheduled_ms")
        ex = self.execs.get((name, t)) if isinstance(name, str) and isinstance(t, int) else None
        if ex is None:
            return _reject("not_found", f"execution {name}@{t} not found")
        return ex

    def _start(self, cmd: C.Command, index: int) -> dict:
        """The leader's claim. The attempt's fencing token is this entry's log index: unique and
        increasing across the whole cluster, and known to every replica."""
        if cmd.term != self.epoch:
            return _reject("stale_term", f"claim from term {cmd.term}, but the leader epoch is {self.epoch}")
        ex = self._exec_or_reject(cmd)
        if isinstance(ex, dict):
            return ex
        if ex.state not in (SCHEDULED, RETRY_WAIT):
            return _reject("conflict", f"execution {ex.id} is {ex.state}")
        created = cmd.args.get("created")
        if created is not None and created != ex.log_index:
            # a claim decided for an execution that was deleted (with its job) since, and
            # recorded again under the same key by the job's successor: not this one's claim
            return _reject("conflict", f"execution {ex.id} was recorded again at index {ex.log_index} "
                                       f"(the claim is for the one recorded at {created})")
        number = cmd.args.get("attempt")
        if number != len(ex.attempts) + 1:
            return _reject("conflict", f"execution {ex.id} expects attempt {len(ex.attempts) + 1}, not {number}")
        job = self.jobs.get(ex.job)
        if job is None:
            return _reject("not_found", f"job {ex.job!r} not found")
        policy = self.policy(job)
        why = blocked(self, ex, policy)
        if why:
            return _reject("blocked", why)
        ex.holds = policy.holds(ex.lane)
        ex.attempts.append(Attempt(number=number, worker=str(cmd.args.get("worker", ""))[:128],
                                   fencing_token=index, started_ms=cmd.now,
                                   worker_incarnation=str(cmd.args.get("worker_incarnation") or "")[:64]))
        self._set_state(ex, RUNNING, cmd.now)
        return _ok(token=index, attempt=number)

    def _current(self, ex: Execution, token) -> Attempt | None:
        cur = ex.attempts[-1] if ex.attempts else None
        if ex.state == RUNNING and cur is not None and cur.fencing_token == token:
            return cur
        return None

    def _refuse_stale(self, ex: Execution, token, what: str, cmd: C.Command) -> dict:
        """Fencing: a result for an attempt that is no longer current (a zombie worker, a retry
        already under way) is refused, and the refusal is kept on that attempt for the history."""
        for a in ex.attempts:
            if a.fencing_token == token and not a.rejected:
                a.rejected = f"{what} reported at {sched.format_ms(cmd.now)} refused: token {token} is not current"
        return _reject("stale", f"token {token} is not the current attempt of {ex.id} ({ex.state})")

    def _finish(self, cmd: C.Command, index: int) -> dict:
        ex = self._exec_or_reject(cmd)
        if isinstance(ex, dict):
            return ex
        outcome, token = cmd.args.get("state"), cmd.args.get("token")
        if outcome == D.NOT_READY:                # a sensor's poll: wait, don't fail
            return D.sensor_not_ready(self, ex, cmd)
        if outcome not in (SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, REJECTED):
            return _reject("invalid", f"bad outcome {outcome!r}")
        attempt = self._current(ex, token)
        if attempt is None:
            return self._refuse_stale(ex, token, outcome, cmd)
        attempt.state = outcome
        if cmd.args.get("started_ms"):           # the worker's own start, after the claim
            attempt.started_ms = int(cmd.args["started_ms"])
        attempt.ended_ms = int(cmd.args.get("ended_ms") or cmd.now)
        attempt.exit_code = int(cmd.args.get("exit_code") or 0)
        attempt.http_status = int(cmd.args.get("http_status") or 0)
        attempt.error = str(cmd.args.get("error") or "")[:MAX_ERROR_CHARS]
        attempt.output_tail = str(cmd.args.get("output_tail") or "")[-MAX_OUTPUT_TAIL_CHARS:]
        if outcome == SUCCEEDED:
            self._set_state(ex, SUCCEEDED, cmd.now)
        elif outcome == CANCELLED:
            ex.reason = "cancelled"
            self._set_state(ex, CANCELLED, cmd.now)
        elif outcome == REJECTED:                 # never started: back in line, not a failure
            self._set_state(ex, SCHEDULED, cmd.now)
        else:
            self._after_failure(ex, outcome, attempt.error, cmd.now)
        return _ok(state=ex.state, retry_at=ex.retry_at)

    def _expire(self, cmd: C.Command, index: int) -> dict:
        """The leader lost an attempt's worker (no heartbeat for a lease, or past its timeout).
        Its fate is unknown: at_most_once jobs end LOST and never run again; others retry."""
        if cmd.term != self.epoch:
            return _reject("stale_term", f"expiry from term {cmd.term}, but the leader epoch is {self.epoch}")
        ex = self._exec_or_reject(cmd)
        if isinstance(ex, dict):
            return ex
        token = cmd.args.get("token")
        attempt = self._current(ex, token)
        if attempt is None:
            return _reject("stale", f"token {token} is not the current attempt of {ex.id} ({ex.state})")
        reason = str(cmd.args.get("reason") or "worker lost")[:MAX_ERROR_CHARS]
        outcome = TIMED_OUT if cmd.args.get("outcome") == TIMED_OUT else LOST
        attempt.state, attempt.ended_ms, attempt.error = outcome, cmd.now, reason
        job = self.jobs.get(ex.job)
        never_started = outcome == LOST and cmd.args.get("never_started") is True
        if (outcome == LOST and job is not None and job.spec_dict().get("delivery") == "at_most_once"
                and not ex.cancel_requested):
            ex.reason = f"at_most_once: attempt {attempt.number} lost ({reason}); not run again"
            self._set_state(ex, LOST, cmd.now)
        elif never_started and not ex.cancel_requested:
            # Its worker reconnected to a new leader without it (schedd.leader.assigner,
            # inherited_claim_fate): like an assignment the worker declined, it goes back in line
            # at once, counted neither as a failure nor as a lost attempt.
            attempt.state = REJECTED
            ex.reason = f"attempt {attempt.number} never started: {reason}"[:MAX_ERROR_CHARS]
            self._set_state(ex, SCHEDULED, cmd.now)
            return _ok(state=ex.state, retry_at=None, never_started=True)
        else:
            self._after_failure(ex, outcome, reason, cmd.now)
        return _ok(state=ex.state, retry_at=ex.retry_at)

    def _after_failure(self, ex: Execution, outcome: str, error: str, now: int) -> None:
        if ex.cancel_requested:
            ex.reason = "cancelled"
            self._set_state(ex, CANCELLED, now)
            return
        job = self.jobs.get(ex.job)
        policy = RetryPolicy.from_spec(job.spec_dict()) if job is not None else RetryPolicy()
        if outcome == LOST:
            # At least once: an attempt lost with its worker did not fail, it may never have run;
            # it is run again whatever the retry policy, up to LOST_RETRY_LIMIT times (so a job
            # that kills its worker every time cannot loop forever).
            lost = sum(1 for a in ex.attempts if a.state == LOST)
            if lost <= LOST_RETRY_LIMIT:
                ex.retry_at = now + policy.delay_ms(ex.id, lost)
                ex.reason = f"attempt {ex.attempts[-1].number} lost: {error}"[:MAX_ERROR_CHARS]
                self._set_state(ex, RETRY_WAIT, now)
            else:
                ex.reason = f"gave up after {lost} lost attempts: {error}"[:MAX_ERROR_CHARS]
                self._set_state(ex, FAILED, now)
            return
        failures = sum(1 for a in ex.attempts if a.state in (FAILED, TIMED_OUT))
        if failures < policy.max_attempts:
            ex.retry_at = now + policy.delay_ms(ex.id, failures)
            ex.reason = f"attempt {ex.attempts[-1].number} {outcome.lower()}: {error}"[:MAX_ERROR_CHARS]
            self._set_state(ex, RETRY_WAIT, now)
        else:
            ex.reason = f"gave up after {failures} failed attempt(s): {error}"[:MAX_ERROR_CHARS]
            self._set_state(ex, TIMED_OUT if outcome == TIMED_OUT else FAILED, now)

    def _cancel(self, cmd: C.Command, index: int) -> dict:
        ex = self._exec_or_reject(cmd)
        if isinstance(ex, dict):
            return ex
        if ex.state in TERMINAL_STATES:
            return _reject("conflict", f"execution {ex.id} already ended {ex.state}")
        if ex.state == RUNNING:
            ex.cancel_requested = True
            ex.updated_ms = cmd.now
            return _ok(state=RUNNING, token=ex.attempts[-1].fencing_token, cancel_requested=True)
        ex.reason = "cancelled before it ran"
        self._set_state(ex, CANCELLED, cmd.now)
        return _ok(state=CANCELLED)

    _HANDLERS = {
        C.EPOCH: _epoch, C.NOOP: _noop, C.PUT: _put, C.PUT_MANY: _put_many, C.DELETE: _delete,
        C.PAUSE: _pause, C.RESUME: _resume, C.TRIGGER: _trigger, C.FIRE: _fire,
        C.START: _start, C.FINISH: _finish, C.EXPIRE: _expire, C.CANCEL: _cancel,
        C.SKIP: _skip, C.BACKFILL: _backfill, C.QUOTA: _quota, C.SLA: sla_index.apply,
        **D.HANDLERS, **B.HANDLERS,
    }

    # ------------------------------------------------------------ reads (caller holds the lock)

    def state_hash(self) -> str:
        return self.hash.hex()

    def state_digest(self) -> str:
        """The digest of the state's content (schedd.core.digest): equal on replicas holding the
        same state, however they got it. Cached per (index, chained hash): every apply changes
        the chained hash, a restore clears the cache."""
        key = (self.last_index, self.hash)
        if self._digest is None or self._digest[0] != key:
            self._digest = (key, state_digest(self))
        return self._digest[1]

    def in_state_since(self, state: str, t: int) -> list[tuple[int, str]]:
        """(scheduled_ms, job) of executions in `state` scheduled at or after t, oldest first."""
        index = self.by_state.get(state)
        return list(index.irange((t, ""), None)) if index else []

    def last_execution(self, name: str) -> Execution | None:
        times = self.by_job.get(name)
        return self.execs[(name, times[-1])] if times else None

    def list_jobs(self, *, team: str = "", state: str = "", after: str = "",
                  limit: int = 100) -> tuple[list[Job], str, int]:
        """A page of jobs ordered by name, starting after `after`; returns (jobs, next_after, total).
        Costs O(page) except when both team and state filter (then O(jobs in the team))."""
        empty = SortedList()
        if state == "paused":
            names = self.paused_names
            keep = (lambda job: job.team == team) if team else None
        else:
            names = self.by_team.get(team, empty) if team else self.names
            keep = (lambda job: not job.paused) if state == "active" else None
        start = names.bisect_right(after) if after else 0
        page: list[Job] = []
        i = start
        while i < len(names) and len(page) < limit:
            job = self.jobs[names[i]]
            if keep is None or keep(job):
                page.append(job)
            i += 1
        more = i < len(names) and (keep is None or any(keep(self.jobs[n]) for n in names.islice(i)))
        if keep is None:
            total = len(names)
        elif not team:
            total = len(self.names) - len(self.paused_names)
        else:
            total = sum(1 for n in names if keep(self.jobs[n]))
        return page, (page[-1].name if page and more else ""), total

    def list_executions(self, *, job: str = "", state: str = "", after: tuple[int, str] | None = None,
                        limit: int = 100, oldest_first: bool = False) -> tuple[list[Execution], tuple | None, int]:
        """A page of executions ordered by (scheduled_ms, job), newest first unless asked."""
        if job:
            index = SortedList((t, job) for t in self.by_job.get(job, ()))
        else:
            index = self.by_time
        if state:
            index_state = self.by_state.get(state, SortedList())
            index = index_state if not job else SortedList(k for k in index if k in index_state)
        total = len(index)
        if oldest_first:
            lo = index.bisect_right(after) if after else 0
            keys = list(index.islice(lo, lo + limit))
        else:
            hi = index.bisect_left(after) if after else len(index)
            keys = list(index.islice(max(0, hi - limit), hi))[::-1]
        page = [self.execs[(name, t)] for t, name in keys]
        more = bool(keys) and (index.bisect_right(keys[-1]) < len(index) if oldest_first
                               else index.bisect_left(keys[-1]) > 0)
        return page, (keys[-1] if more else None), total
