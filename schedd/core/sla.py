"""SLAs: a deadline per execution, and whether an execution missed it. Pure and deterministic.

A job's spec may carry ``sla: {within_seconds, by, timezone, webhook}`` (validated by
`schedd.core.model.canonical_spec`):

- ``within_seconds``: done within that long of the scheduled time;
- ``by`` "HH:MM": done by the first time the wall clock of ``timezone`` (default: the job's zone)
  reads HH:MM at or after the scheduled instant. A time skipped by spring-forward is the end of
  the gap (the transition instant); a time repeated by fall-back counts at whichever occurrence
  comes first at or after the scheduled instant (so a run scheduled between the two passes gets
  the second one).
- both: the earlier of the two deadlines (both must hold).
- a job with a flexible ``window`` (schedd.core.windows) has the window's end as a deadline too,
  with or without ``sla``: the first time its wall clock reads the end after the window opened.

A miss: the execution has not SUCCEEDED by the deadline: still SCHEDULED / RUNNING / RETRY_WAIT at
the deadline, ended FAILED / TIMED_OUT / LOST / UPSTREAM_FAILED (failures count once the deadline
passes), or SUCCEEDED after it (its last attempt's end). CANCELLED and SKIPPED executions were
deliberately not run, and backfilled ones (lane "backfill") are past instants run on purpose:
never a miss. Every other run has the SLA: scheduled, caught-up and manual ones. A miss is recorded once per execution, through the log (entry
kind ``sla``, proposed by the leader's detector, `schedd.leader.sla`), as an event of kind
``sla_missed`` on the execution.

The due index: `Tables.sla_watch`, a SortedList of (deadline_ms, job, scheduled_ms) of
executions whose SLA is undecided. It is derived (rebuilt on restore, never serialized) and only
steers the leader's detector: apply never decides anything from it, so a replica whose index
differs (a restore after the job's SLA changed) still applies every entry identically. It grows by
one entry per execution of a job with an SLA (`on_record`) and shrinks as deadlines pass
(`collect`: a few entries per recorded execution on every node, more per step on the leader)
and misses are recorded. Since it is advisory, any node may drop entries whose verdict is final.
Jobs without an SLA cost one substring test per recorded execution. DAG tasks (or any execution)
join with `watch`.

DAG runs: a DAG's document may carry the same ``sla`` object (validated by the same code; ``by``
defaults to the DAG's zone). A run's deadline counts from its logical time; the run misses it when
it has not SUCCEEDED by then: still RUNNING at the deadline, ended FAILED, or SUCCEEDED late (its
`ended_ms`). Its due index entries are named ``dag/<dag>`` (`dag_key`: no job or DAG row name has
a slash), indexed when the run starts (`on_run`), and the miss is the same ``sla`` entry with
args ``dag, logical_ms`` instead of ``job, scheduled_ms``; the event goes to `DagRun.events`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sortedcontainers import SortedList

from schedd.core import schedule as sched
from schedd.core.model import (
    CANCELLED, SKIPPED, SPEC_NAME_MARK, SUCCEEDED, TERMINAL_STATES, Execution, ExecutionEvent, Job,
)
from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code, SlaMissed, ok, reject
from schedd.core.rows import DagDef, DagRun
from schedd.core.specs import WINDOW_MARK, DagSpec, JobSpec
from schedd.core.tables import Tables

MISSED = "sla_missed"                # the ExecutionEvent kind
EXEMPT_STATES = frozenset({CANCELLED, SKIPPED})
BACKFILL_LANE = "backfill"           # past instants created on purpose: no SLA (schedd.core.policy)
MAX_MESSAGE_CHARS = 512
_COLLECT_BATCH = 16                  # index entries looked at per recorded execution, at most
_MAX_KEY = "\U0010ffff"

Judge = Callable[[Any, int, int], tuple[str, str]]     # verdict or run_verdict
DAG_KEY = "dag/"                     # due index names of DAG runs: "dag/<dag>" (see `dag_key`)


@dataclass(slots=True, frozen=True)
class Sla:
    within_ms: int = 0               # 0 = no relative deadline
    by: str = ""                     # "HH:MM" or ""
    tz: str = "UTC"                  # zone of `by`
    webhook: str = ""
    window_end: str = ""             # "HH:MM": a window job's deadline, its window's end (schedd.core.windows)
    window_tz: str = "UTC"           # the job's zone

    def describe(self) -> str:
        parts = []
        if self.within_ms:
            parts.append(f"within {_duration(self.within_ms)}")
        if self.by:
            parts.append(f"by {self.by} {self.tz}")
        if self.window_end:
            parts.append(f"by the window's end {self.window_end} {self.window_tz}")
        return " and ".join(parts)


def sla_of_spec(spec: JobSpec | DagSpec, owner_tz: str = "UTC") -> Sla | None:
    """The SLA of a spec, or None. Never raises: one that is not in canonical form reads as none
    (schedd.core.specs), and so does one with neither deadline. `by` counts in the SLA's zone,
    else the spec's, else `owner_tz`."""
    sla = spec.sla
    within = max(sla.within_seconds, 0) if sla is not None else 0
    window = getattr(spec, "window", None)
    end = window.end if window is not None and window.end else ""
    if not end and (sla is None or (not within and not sla.by)):
        return None
    zone = spec.timezone or owner_tz or "UTC"
    window_tz = zone if end else "UTC"
    if sla is None:
        return Sla(window_end=end, window_tz=window_tz)
    return Sla(within_ms=int(round(within * 1000)), by=sla.by,
               tz=sla.timezone or zone, webhook=sla.webhook, window_end=end, window_tz=window_tz)


def deadline_ms(sla: Sla, scheduled_ms: int) -> int | None:
    """The deadline of an execution scheduled at `scheduled_ms` (epoch ms), or None if the `by`
    time cannot be computed (a zone this build does not know) and there is no `within`."""
    out: list[int | None] = []
    if sla.within_ms:
        out.append(scheduled_ms + sla.within_ms)
    if sla.by:
        try:
            out.append(_next_wall_time(sla.by, sla.tz, scheduled_ms))
        except (sched.ScheduleError, ValueError):
            pass
    if sla.window_end:               # the window's end: strictly after its start (windows.bounds)
        try:
            out.append(_next_wall_time(sla.window_end, sla.window_tz, scheduled_ms + 1))
        except (sched.ScheduleError, ValueError):
            pass
    known = [t for t in out if t is not None]
    return min(known) if known else None


def _next_wall_time(hhmm: str, tz: str, at_or_after_ms: int) -> int | None:
    hh, _, mm = hhmm.partition(":")
    # every occurrence of the wall time (fold both), a skipped one at the end of its gap (shift)
    s = sched.parse(f"0 {int(mm)} {int(hh)} * * *", tz, gap="shift", fold="both")
    return sched.next_after(s, at_or_after_ms - 1)


def finished_ms(ex: Execution) -> int:
    """When a finished execution finished: its last attempt's end, else its last update."""
    if ex.attempts and ex.attempts[-1].ended_ms:
        return ex.attempts[-1].ended_ms
    return ex.updated_ms


def has_missed(ex: Execution | DagRun) -> bool:
    """Whether an execution (or a DAG run) has its miss recorded."""
    return any(e.kind == MISSED for e in ex.events)


def verdict(ex: Execution, deadline: int, now: int) -> tuple[str, str]:
    """("missed", message) | ("met" | "exempt" | "recorded", why) — final; or ("pending", why):
    not decidable yet at `now`."""
    if has_missed(ex):
        return "recorded", "the miss is already recorded"
    if ex.state in EXEMPT_STATES:
        return "exempt", f"{ex.state.lower()} executions have no SLA"
    if getattr(ex, "lane", "") == BACKFILL_LANE:
        return "exempt", "backfilled executions have no SLA"
    done = finished_ms(ex) if ex.state == SUCCEEDED else 0
    return _outcome(ex.state, done, ex.state in TERMINAL_STATES, deadline, now)


def run_verdict(run: DagRun, deadline: int, now: int) -> tuple[str, str]:
    """`verdict` for a DAG run (`schedd.core.dags.DagRun`): RUNNING, then SUCCEEDED or FAILED."""
    if has_missed(run):
        return "recorded", "the miss is already recorded"
    return _outcome(run.state, run.ended_ms, run.state != "RUNNING", deadline, now)


def _outcome(state: str, done: int, ended: bool, deadline: int, now: int) -> tuple[str, str]:
    if state == SUCCEEDED:
        if done <= deadline:
            return "met", "succeeded in time"
        return "missed", (f"succeeded at {sched.format_ms(done)}, "
                          f"{_duration(done - deadline)} after the deadline")
    if now < deadline:
        return "pending", "the deadline has not passed"
    if ended:
        return "missed", f"ended {state} without succeeding by the deadline"
    return "missed", f"still {state} at the deadline"


def event(ex: Execution | DagRun, deadline: int, now: int, sla_text: str, why: str) -> ExecutionEvent:
    where = f" ({sla_text})" if sla_text else ""
    message = f"missed its SLA{where}, deadline {sched.format_ms(deadline)}: {why}"
    return ExecutionEvent(time_ms=now, kind=MISSED, message=message[:MAX_MESSAGE_CHARS])


def _duration(ms: int) -> str:
    s = max(ms, 0) // 1000
    if s < 1:
        return f"{max(ms, 0)}ms"
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"


# ------------------------------------------------------------------ the due index

def job_sla(state: Tables, job: Job) -> Sla | None:
    """The job's SLA, parsed once per job revision (a substring test for jobs without one): a
    job created again under a deleted one's name never gets the deleted one's SLA or webhook."""
    return _cached_sla(state, job.name, job)


def dag_sla(state: Tables, dag: DagDef) -> Sla | None:
    """A DAG's SLA (`schedd.core.dags.DagDef`), parsed once per DAG revision, like `job_sla`."""
    return _cached_sla(state, dag_key(dag.name), dag)


def _cached_sla(state: Tables, key: str, owner: Job | DagDef) -> Sla | None:
    # a job's template holds every field but its name (and the name wherever it is a string):
    # looked at as is, without rebuilding the spec, unless the name stands where a key could
    text = owner.spec_t if isinstance(owner, Job) else owner.spec
    if '"sla":' not in text and WINDOW_MARK not in text and SPEC_NAME_MARK + ":" not in text:
        return None
    cache = state.sla_jobs
    hit = cache.get(key)
    if hit is None or hit[0] != owner.revision:
        if len(cache) > 2 * (len(state.jobs) + len(state.dags)) + 1000:
            cache.clear()
        try:
            spec = owner.spec if isinstance(owner, Job) else owner.dag_spec
            hit = cache[key] = (owner.revision, sla_of_spec(spec, owner.tz))
        except ValueError:
            hit = cache[key] = (owner.revision, None)
    return hit[1]


def dag_key(dag: str) -> str:
    """The due index name of a DAG's runs."""
    return DAG_KEY + dag


def run_deadline(state: Tables, run: DagRun) -> int | None:
    """A DAG run's deadline under its DAG's current SLA (counted from the logical time), or None."""
    dag = state.dags.get(run.dag)
    sla = dag_sla(state, dag) if dag is not None else None
    return deadline_ms(sla, run.logical_ms) if sla is not None else None


def target(state: Tables, name: str, t: int) -> tuple[Execution | DagRun | None, Judge]:
    """(the execution or DAG run a due index entry names, or None; its verdict function)."""
    if name.startswith(DAG_KEY):
        return state.dag_runs.get((name[len(DAG_KEY):], t)), run_verdict
    return state.execs.get((name, t)), verdict


def watch(state: Tables, name: str, t: int, deadline: int) -> None:
    """Put an execution's deadline in the due index (any execution: jobs, DAG tasks)."""
    state.sla_watch.add((deadline, name, t))


def unwatch(state: Tables, name: str, t: int, deadline: int) -> None:
    state.sla_watch.discard((deadline, name, t))


def on_record(state: Tables, job: Job, ex: Execution, now: int) -> None:
    """Apply hook for a newly recorded execution: index its deadline, drop settled entries."""
    sla = job_sla(state, job)
    if sla is not None and ex.state not in EXEMPT_STATES and getattr(ex, "lane", "") != BACKFILL_LANE:
        deadline = deadline_ms(sla, ex.scheduled_ms)
        if deadline is not None:
            watch(state, ex.job, ex.scheduled_ms, deadline)
    if state.sla_watch:
        collect(state, now)


def on_run(state: Tables, dag: DagDef, run: DagRun, now: int) -> None:
    """Apply hook for a DAG run that just started: index its deadline if the DAG has an SLA."""
    deadline = run_deadline(state, run)
    if deadline is not None:
        watch(state, dag_key(run.dag), run.logical_ms, deadline)
    if state.sla_watch:
        collect(state, now)


def collect(state: Tables, now: int, limit: int = _COLLECT_BATCH) -> None:
    """Drop index entries whose deadline passed and whose verdict is final and not a miss to be
    recorded (met, exempt, already recorded, execution gone). Bounded work per call."""
    drop: list[tuple[int, str, int]] = []
    for key in state.sla_watch.islice(0, limit):
        deadline, name, t = key
        if deadline > now:
            break
        ex, judge = target(state, name, t)
        if ex is None or judge(ex, deadline, now)[0] in ("met", "exempt", "recorded"):
            drop.append(key)
    for key in drop:
        state.sla_watch.discard(key)


def rebuild(state: Tables) -> None:
    """Rebuild the due index from jobs and executions, and DAGs and their runs (restore). Only
    jobs and DAGs with an SLA are read."""
    state.sla_jobs = {}
    entries: list[tuple[int, str, int]] = []
    for name, job in state.jobs.items():
        sla = job_sla(state, job)
        if sla is None:
            continue
        for t in state.by_job.get(name, ()):
            ex = state.execs[(name, t)]
            deadline = deadline_ms(sla, t)
            if deadline is not None and not has_missed(ex) and ex.state not in EXEMPT_STATES:
                if not (ex.state == SUCCEEDED and finished_ms(ex) <= deadline):
                    entries.append((deadline, name, t))
    for name, dag in state.dags.items():
        sla = dag_sla(state, dag)
        if sla is None:
            continue
        for t in state.dag_run_times.get(name, ()):
            deadline = deadline_ms(sla, t)
            if deadline is None:
                continue
            # undecided (whatever the time), or succeeded late with the miss not recorded yet
            if run_verdict(state.dag_runs[(name, t)], deadline, -(2 ** 63))[0] in ("pending", "missed"):
                entries.append((deadline, dag_key(name), t))
    state.sla_watch = SortedList(entries)


def due(state: Tables, now: int) -> Iterator[tuple[int, str, int]]:
    """Index entries whose deadline is at or before `now`, oldest deadline first (an iterator:
    do not change the index while iterating)."""
    return state.sla_watch.irange(None, (now, _MAX_KEY, 2 ** 63))


# ------------------------------------------------------------------ apply

def apply(state: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """Entry kind ``sla`` (args: job, scheduled_ms, deadline_ms, and ``created``: the log index
    that recorded the execution, so a miss decided for a deleted job's execution never lands on
    its successor's under the same key): record a miss as an event on the execution, once. Only from the leader of the current epoch (like ``expire``): a deposed
    leader's late verdict is refused. The verdict is taken again here from the entry's time, so a
    result that committed in time first turns the entry into a refusal ("met")."""
    if cmd.term != state.epoch:
        return reject(Code.STALE_TERM, f"sla from term {cmd.term}, but the leader epoch is {state.epoch}")
    if "dag" in cmd.args:
        return _apply_run(state, cmd)
    name, t, deadline = cmd.args.get("job"), cmd.args.get("scheduled_ms"), cmd.args.get("deadline_ms")
    if not isinstance(deadline, int) or isinstance(deadline, bool):
        return reject(Code.INVALID, "deadline_ms must be an integer")
    ex = state.execs.get((name, t)) if isinstance(name, str) and isinstance(t, int) else None
    created = cmd.args.get("created")
    if ex is None or (created is not None and created != ex.log_index):
        return reject(Code.NOT_FOUND, f"execution {name}@{t} not found")
    code, why = verdict(ex, deadline, cmd.now)
    if code != "missed":
        if code != "pending":
            unwatch(state, ex.job, ex.scheduled_ms, deadline)
        return reject(code, f"execution {ex.id}: no SLA miss to record ({why})")
    text = cmd.args.get("sla")
    ev = event(ex, deadline, cmd.now, text if isinstance(text, str) else "", why)
    ex.events = (*ex.events, ev)
    unwatch(state, ex.job, ex.scheduled_ms, deadline)
    # no "name"/"scheduled_ms"/"items" keys: the dispatcher's apply hook reads those as new executions
    return ok(R.SlaMissRecorded(ex.id, deadline, ex.state, ev.message, ev.time_ms),
              effects=(SlaMissed(ex.id, ev.message),))


def _apply_run(state: Tables, cmd: C.Command) -> ApplyResult:
    """The ``sla`` entry for a DAG run (args: dag, logical_ms, deadline_ms): the event goes to
    `DagRun.events`, once."""
    dag, t, deadline = cmd.args.get("dag"), cmd.args.get("logical_ms"), cmd.args.get("deadline_ms")
    if not isinstance(deadline, int) or isinstance(deadline, bool):
        return reject(Code.INVALID, "deadline_ms must be an integer")
    ok_key = isinstance(dag, str) and isinstance(t, int) and not isinstance(t, bool)
    run = state.dag_runs.get((str(dag), int(t or 0))) if ok_key else None
    if run is None:
        return reject(Code.NOT_FOUND, f"DAG run {dag}@{t} not found")
    code, why = run_verdict(run, deadline, cmd.now)
    if code != "missed":
        if code != "pending":
            unwatch(state, dag_key(run.dag), run.logical_ms, deadline)
        return reject(code, f"DAG run {run.run_id}: no SLA miss to record ({why})")
    text = cmd.args.get("sla")
    ev = event(run, deadline, cmd.now, text if isinstance(text, str) else "", why)
    run.events = (*run.events, ev)
    unwatch(state, dag_key(run.dag), run.logical_ms, deadline)
    return ok(R.DagSlaMissRecorded(run.run_id, deadline, run.state, ev.message, ev.time_ms),
              effects=(SlaMissed(run.run_id, ev.message),))

