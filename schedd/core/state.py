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

from schedd.core import commands as C
from schedd.core import schedule as sched
from schedd.core.model import (
    CANCELLED, DEFAULT_HISTORY_LIMIT, FAILED, LOST, MAX_ERROR_CHARS, MAX_OUTPUT_TAIL_CHARS, REJECTED,
    RETRY_WAIT, RUNNING, SCHEDULED, SUCCEEDED, TERMINAL_STATES, TIMED_OUT, Attempt, Execution, Job,
    ValidationError, dump_spec, load_committed_spec,
)
from schedd.core.retry import RetryPolicy
from schedd.core.wheel import TimingWheel

DEDUP_TTL_MS = 15 * 60 * 1000
AUDIT_KEEP = 10_000
CATCHUP_MARK_MS = 2_000        # an instant recorded this late is labelled "catchup"
LOST_RETRY_LIMIT = 5           # re-runs of attempts lost with their worker (at_least_once)
MIN_MS = -(2 ** 62)
SNAPSHOT_FORMAT = ("schedd-state", 2)
JOB_FIELDS = tuple(f.name for f in fields(Job))
EXEC_FIELDS = tuple(f.name for f in fields(Execution))
AUDIT_FIELDS = ("time_ms", "principal", "action", "target", "result", "log_index")
# Smaller tables, pickled as they are (dicts of slotted dataclasses or plain values).
EXTRA_FIELDS = ("dags", "dag_runs", "quotas")

ExecKey = tuple[str, int]


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
    return sched.parse(job.schedule, job.tz, hash_key=job.name)


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
                clock_ms, extra):
    if tuple(fmt) != SNAPSHOT_FORMAT:
        gc.enable()
        raise ValueError(f"unsupported snapshot format {fmt!r}")
    jobs = {job.name: job for job in starmap(Job, job_rows)}
    execs = {(ex.job, ex.scheduled_ms): ex for ex in starmap(Execution, exec_rows)}
    audit = list(starmap(AuditRecord, audit_rows))
    return (fmt, jobs, execs, epoch, dedup, audit, digest, last_index, clock_ms, extra)


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
        self.retry_due = SortedList((ex.retry_at, name, t) for (name, t), ex in self.execs.items()
                                    if ex.state == RETRY_WAIT and ex.retry_at is not None)

    def _index_exec(self, name: str, t: int, state: str) -> None:
        times = self.by_job.get(name)
        if times is None:
            times = self.by_job[name] = SortedList()
        times.add(t)
        self.by_time.add((t, name))
        keys = self.by_state.get(state)
        if keys is None:
            keys = self.by_state[state] = SortedList()
        keys.add((t, name))

    def _set_state(self, ex: Execution, state: str, now: int) -> None:
        """Move an execution to `state`, keeping the by-state and retry indexes in line."""
        key = (ex.scheduled_ms, ex.job)
        if ex.state == RETRY_WAIT and ex.retry_at is not None:
            self.retry_due.discard((ex.retry_at, ex.job, ex.scheduled_ms))
        old = self.by_state.get(ex.state)
        if old is not None:
            old.discard(key)
        ex.state, ex.updated_ms = state, now
        if state != RETRY_WAIT:
            ex.retry_at = None
        keys = self.by_state.get(state)
        if keys is None:
            keys = self.by_state[state] = SortedList()
        keys.add(key)
        if state == RETRY_WAIT and ex.retry_at is not None:
            self.retry_due.add((ex.retry_at, ex.job, ex.scheduled_ms))

    def _unindex_exec(self, name: str, t: int, state: str) -> None:
        times = self.by_job.get(name)
        if times is not None:
            times.discard(t)
            if not times:
                del self.by_job[name]
        self.by_time.discard((t, name))
        by_state = self.by_state.get(state)
        if by_state is not None:
            by_state.discard((t, name))
        ex = self.execs.get((name, t))
        if ex is not None and ex.retry_at is not None:
            self.retry_due.discard((ex.retry_at, name, t))

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
            for key in EXTRA_FIELDS:
                setattr(self, key, extra.get(key, {}))
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
        if cmd.rid:
            self._expire_dedup(cmd.now)
            seen = self.dedup.get(cmd.rid)
            if seen is not None:
                return {**seen[1], "deduplicated": True}
        try:
            result = self._HANDLERS[cmd.kind](self, cmd, index)
        except Exception as e:  # noqa: BLE001 - apply must be total (research F1)
            result = _reject("internal", f"{type(e).__name__}: {e}")
        if cmd.rid:
            self.dedup[cmd.rid] = (cmd.now, result)
        if cmd.kind not in (C.FIRE, C.NOOP, C.EPOCH, C.START, C.FINISH, C.EXPIRE):
            self.audit.append(AuditRecord(cmd.now, cmd.by, cmd.kind, self._target(cmd),
                                          result.get("code", "ok"), index))
        return result

    @staticmethod
    def _target(cmd: C.Command) -> str:
        if cmd.kind == C.PUT:
            return str(cmd.args.get("name", ""))
        if cmd.kind == C.PUT_MANY:
            return f"{len(cmd.args.get('specs') or [])} jobs"
        if cmd.kind == C.CANCEL:
            return f"{cmd.args.get('job')}@{cmd.args.get('scheduled_ms')}"
        return str(cmd.args.get("name", ""))

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
            s = sched.parse(spec["schedule"], spec["timezone"], hash_key=spec["name"])
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
        created = self._upsert(spec, text, s, cmd)
        job = self.jobs[spec["name"]]
        return _ok(created=created, name=job.name, version=job.version)

    def _put_many(self, cmd: C.Command, index: int) -> dict:
        checked = []
        texts = cmd.args.get("specs")
        if not isinstance(texts, list):
            return _reject("invalid", "specs must be a list")
        try:
            for text in texts:
                checked.append(self._committed_spec(text))
        except ValidationError as e:
            return _reject("invalid", f"job #{len(checked) + 1}: {e}")
        names = [c[0]["name"] for c in checked]
        if len(set(names)) != len(names):
            return _reject("invalid", "the batch names a job more than once")
        created = sum(self._upsert(spec, text, s, cmd) for spec, text, s in checked)
        return _ok(created=created, updated=len(checked) - created)

    def _upsert(self, spec: dict, text: str, s: sched.Schedule, cmd: C.Command) -> bool:
        """Create or update a job from a checked spec. Repeated strings (team, schedule, zone) are
        interned: a million jobs share a handful of them."""
        intern = sys.intern
        paused = bool(spec.get("paused"))
        team, schedule, tz = intern(spec["team"]), intern(spec["schedule"]), intern(spec["timezone"])
        limit = spec.get("history_limit") or DEFAULT_HISTORY_LIMIT
        job = self.jobs.get(spec["name"])
        if job is None:
            job = Job(name=spec["name"], team=team, schedule=schedule, tz=tz, spec=text, version=1,
                      paused=paused, next_fire=next_fire_for(s, cmd.now, None), created_ms=cmd.now,
                      updated_ms=cmd.now, created_by=cmd.by, history_limit=limit)
            self.jobs[job.name] = job
            self._add_job_index(job)
            self._schedule_wheel(job)
            return True
        timing_changed = (job.schedule, job.tz) != (schedule, tz)
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
        self._prune_history(job)
        return False

    def _job_or_reject(self, cmd: C.Command) -> Job | dict:
        name = cmd.args.get("name")
        job = self.jobs.get(name) if isinstance(name, str) else None
        if job is None:
            return _reject("not_found", f"job {name!r} not found")
        return job

    def _delete(self, cmd: C.Command, index: int) -> dict:
        job = self._job_or_reject(cmd)
        if isinstance(job, dict):
            return job
        self._remove_job_index(job)
        del self.jobs[job.name]
        for t in list(self.by_job.get(job.name, ())):
            ex = self.execs[(job.name, t)]
            self._unindex_exec(job.name, t, ex.state)
            del self.execs[(job.name, t)]
        return _ok(name=job.name)

    def _set_paused(self, cmd: C.Command, paused: bool) -> dict:
        job = self._job_or_reject(cmd)
        if isinstance(job, dict):
            return job
        if job.paused != paused:
            spec = job.spec_dict()
            if paused:
                spec["paused"] = True
            else:
                spec.pop("paused", None)
                job.next_fire = next_fire_for(schedule_of(job), cmd.now, job.last_fire)
            job.paused, job.spec = paused, dump_spec(spec)
            job.version += 1
            job.updated_ms = cmd.now
            self._schedule_wheel(job)
        return _ok(name=job.name, version=job.version)

    def _pause(self, cmd: C.Command, index: int) -> dict:
        return self._set_paused(cmd, True)

    def _resume(self, cmd: C.Command, index: int) -> dict:
        return self._set_paused(cmd, False)

    # -- executions

    def _record(self, job: Job, t: int, trigger: str, cmd: C.Command, index: int) -> Execution:
        ex = Execution(job=job.name, scheduled_ms=t, state=SCHEDULED, trigger=trigger,
                       created_ms=cmd.now, term=cmd.term, log_index=index, updated_ms=cmd.now)
        self.execs[(job.name, t)] = ex
        self._index_exec(job.name, t, ex.state)
        job.fired_total += 1
        self._prune_history(job)
        return ex

    def _prune_history(self, job: Job) -> None:
        """Keep the newest `history_limit` executions of a job, deterministically. An attempt in
        flight (RUNNING, RETRY_WAIT) is never pruned; a SCHEDULED one that a thousand newer
        instants have overtaken is (no worker took it for that long)."""
        times = self.by_job.get(job.name)
        if times is None or len(times) <= job.history_limit:
            return
        excess = len(times) - job.history_limit
        victims = []
        for t in times:
            if len(victims) == excess:
                break
            if self.execs[(job.name, t)].state not in (RUNNING, RETRY_WAIT):
                victims.append(t)
        for t in victims:
            ex = self.execs[(job.name, t)]
            self._unindex_exec(job.name, t, ex.state)
            del self.execs[(job.name, t)]

    def _trigger(self, cmd: C.Command, index: int) -> dict:
        job = self._job_or_reject(cmd)
        if isinstance(job, dict):
            return job
        t = cmd.now
        while (job.name, t) in self.execs:
            t += 1
        self._record(job, t, "manual", cmd, index)
        return _ok(name=job.name, scheduled_ms=t)

    def _fire(self, cmd: C.Command, index: int) -> dict:
        if cmd.term != self.epoch:
            return _reject("stale_term", f"fire from term {cmd.term}, but the leader epoch is {self.epoch}")
        items = []
        for name, t in cmd.args.get("items") or []:
            items.append([name, t, self._fire_one(name, t, cmd, index)])
        return _ok(items=items)

    def _fire_one(self, name: str, t: int, cmd: C.Command, index: int) -> str:
        job = self.jobs.get(name)
        if job is None:
            return "unknown_job"
        if job.paused:
            return "paused"
        due = job.next_fire == t
        if due:
            job.next_fire = sched.next_after(schedule_of(job), t)
            job.last_fire = t
            self._schedule_wheel(job)
        if (name, t) in self.execs:
            return "duplicate"
        if not due:
            return "not_due"
        trigger = "catchup" if t < cmd.now - CATCHUP_MARK_MS else "schedule"
        self._record(job, t, trigger, cmd, index)
        return "created"

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
        number = cmd.args.get("attempt")
        if number != len(ex.attempts) + 1:
            return _reject("conflict", f"execution {ex.id} expects attempt {len(ex.attempts) + 1}, not {number}")
        ex.attempts.append(Attempt(number=number, worker=str(cmd.args.get("worker", ""))[:128],
                                   fencing_token=index, started_ms=cmd.now))
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
        if (outcome == LOST and job is not None and job.spec_dict().get("delivery") == "at_most_once"
                and not ex.cancel_requested):
            ex.reason = f"at_most_once: attempt {attempt.number} lost ({reason}); not run again"
            self._set_state(ex, LOST, cmd.now)
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
    }

    # ------------------------------------------------------------ reads (caller holds the lock)

    def state_hash(self) -> str:
        return self.hash.hex()

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
