"""DAGs: graphs of dependent tasks, validated here and run by the replicated state machine.

Pure and deterministic like the rest of `schedd.core`: no clock, no I/O, no randomness, no
iteration over sets of strings. The proposer validates a DAG fully (`canonical_dag`) and commits
its canonical JSON; apply re-checks what it computes with and never raises.

How a DAG lives in the state (docs/architecture.md "Facts": entities):
- `state.dags[name]` is a `DagDef`; each task is an ordinary job row named `<dag>:<task>` (a
  colon never appears in a user's job name), with no schedule of its own. A scheduled DAG also
  has a row `<dag>:` holding the graph's schedule, so it fires through the ordinary wheel and
  `fire` path; the execution that fire records for that row is closed at once (SUCCEEDED, "run
  <id> started") and a `DagRun` starts at the same logical instant.
- `state.dag_runs[(dag, logical_ms)]` is a `DagRun`: a run id, a state, the state of each task
  and a pending-upstream counter per task. A task's run is the execution
  (`<dag>:<task>`, logical_ms): workers, retries, timeouts, fencing and cancel are unchanged.
- When a task execution reaches a terminal state, `Tables.set_state` queues it and
  `settle` (called at the end of the same apply) updates the run: downstream counters drop, a
  task whose rule holds is recorded SCHEDULED right then (no polling); a task that can no longer
  run is recorded UPSTREAM_FAILED (or SKIPPED), so it stays visible in the run, and that
  cascades. All of it is replicated state: a failover mid-run loses nothing and reruns nothing.
- Sensors: a task whose handler is `{"sensor": {...}}` checks a condition once per attempt; a
  "not ready" result (`NOT_READY`) puts the execution back in RETRY_WAIT until now + poll
  interval (no worker slot held, no retry attempt consumed) and ends it TIMED_OUT once the
  sensor timeout, counted from the first poll, has passed.

Trigger rules: `all_success` (default: every upstream SUCCEEDED; an upstream failure makes it
UPSTREAM_FAILED at once, an upstream SKIPPED makes it SKIPPED), `all_done` (runs once every
upstream ended, whatever the outcome), `one_failed` (runs as soon as an upstream failed; SKIPPED
if all ended without a failure).
"""

from __future__ import annotations

import re
from typing import Any

from schedd.core import commands as C
from schedd.core import params as run_params
from schedd.core import schedule as sched
from schedd.core import sla as S
from schedd.core.attempts import DEFAULT_POLL_S, DEFAULT_SENSOR_TIMEOUT_S, NOT_READY
from schedd.core.firing import record
from schedd.core.jobs import parse_schedule, upsert
from schedd.core.model import (
    CANCELLED, FAILED, LOST, MAX_HISTORY_LIMIT, NAME_RE, SCHEDULED, SKIPPED, SUCCEEDED, TERMINAL_STATES,
    TIMED_OUT, UPSTREAM_FAILED, Execution, ExecutionEvent, ValidationError, canonical_spec,
)
from schedd.core.specs import (
    NO_POLICIES, DagSpec, DagTask, JobHead, JobSpec, Policies, RawHandler, SensorHandler, check_committed_sla,
    load_dag,
)
from schedd.core.naming import dag_of_job, refuse_job_op, run_id, schedule_row, task_job
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code, ok, reject
from schedd.core.rows import DEFAULT_MAX_RUNS, DagDef, DagRun
from schedd.core.tables import Tables

__all__ = ["DEFAULT_MAX_RUNS", "NOT_READY", "DagDef", "DagRun", "dag_of_job", "refuse_job_op", "run_id",
           "schedule_row", "task_job"]   # re-exported

PENDING = "PENDING"               # a task of a run whose execution is not recorded yet
RUN_RUNNING, RUN_SUCCEEDED, RUN_FAILED = "RUNNING", "SUCCEEDED", "FAILED"
TRIGGER_RULES = ("all_success", "all_done", "one_failed")
FAIL_STATES = frozenset({FAILED, TIMED_OUT, CANCELLED, LOST, UPSTREAM_FAILED})
SENSOR_KINDS = ("file", "http_url", "command")

MAX_TASKS = 200
MAX_DAG_BYTES = 56 * 1024         # the canonical text rides one log entry (C.MAX_ENTRY_BYTES)
MAX_RUNS = 1000
DEFAULT_SENSOR_CHECK_S = 60.0
MAX_POLLS = 5000                  # timeout / poll interval: every poll is an attempt in the history
SCHEDULE_ROW_HISTORY = 100

DAG_PUT = C.DAG_PUT
DAG_DELETE = C.DAG_DELETE
DAG_RUN = C.DAG_RUN


# ------------------------------------------------------------------ validation (proposer side)


def find_cycle(order: list[str], upstream: dict[str, list[str]]) -> list[str] | None:
    """A cycle as a path [a, b, ..., a] following upstream edges backwards (a needs b...), or None.
    Iterative DFS in definition order: deterministic, and no recursion limit."""
    color = {t: 0 for t in order}            # 0 new, 1 on the stack, 2 done
    for root in order:
        if color[root]:
            continue
        stack = [(root, iter(upstream[root]))]
        path = [root]
        color[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                color[node] = 2
                continue
            if color[nxt] == 1:
                cycle = path[path.index(nxt):] + [nxt]
                return cycle[::-1]           # in execution order: first runs first
            if color[nxt] == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(upstream[nxt])))
    return None


def topo_order(order: list[str], upstream: dict[str, list[str]]) -> list[str]:
    """Kahn's algorithm, ties broken by definition order (so `dag show` is stable)."""
    rank = {t: i for i, t in enumerate(order)}
    indeg = {t: len(upstream[t]) for t in order}
    down: dict[str, list[str]] = {t: [] for t in order}
    for t in order:
        for u in upstream[t]:
            down[u].append(t)
    ready = [t for t in order if indeg[t] == 0]
    out: list[str] = []
    while ready:
        ready.sort(key=rank.__getitem__)
        t = ready.pop(0)
        out.append(t)
        for d in down[t]:
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    return out


def _sensor(body: object, task: str) -> SensorHandler:
    if not isinstance(body, dict):
        raise ValidationError(f"task {task!r}: sensor must be an object")
    kinds = [k for k in SENSOR_KINDS if body.get(k)]
    if len(kinds) != 1:
        raise ValidationError(f"task {task!r}: a sensor needs exactly one of file, http_url, command")
    kind = kinds[0]
    value = body[kind]
    if not isinstance(value, str) or len(value.encode()) > 4096:
        raise ValidationError(f"task {task!r}: sensor {kind} must be a string of at most 4096 bytes")
    if kind == "http_url" and not re.match(r"^https?://[^\s/]+", value):
        raise ValidationError(f"task {task!r}: sensor http_url must start with http:// or https://")
    if kind == "file" and not value.startswith("/"):
        raise ValidationError(f"task {task!r}: sensor file must be an absolute path, got {value!r}")
    times: dict[str, float] = {}
    for key, default, lo, hi in (("poll_interval_seconds", DEFAULT_POLL_S, 0.1, 86400),
                                 ("timeout_seconds", DEFAULT_SENSOR_TIMEOUT_S, 0.1, 30 * 86400)):
        v = body.get(key) or default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            raise ValidationError(f"task {task!r}: sensor {key} must be a number from {lo:g} to {hi:g}")
        times[key] = int(v) if v == int(v) else float(v)
    polls = times["timeout_seconds"] / times["poll_interval_seconds"]
    if polls > MAX_POLLS:
        raise ValidationError(f"task {task!r}: sensor timeout / poll_interval is {polls:.0f} polls, "
                              f"at most {MAX_POLLS} (each poll is kept in the history)")
    return SensorHandler(poll_interval_seconds=times["poll_interval_seconds"], timeout_seconds=times["timeout_seconds"],
                         file=value if kind == "file" else "", http_url=value if kind == "http_url" else "",
                         command=value if kind == "command" else "")


def _task(dag: str, team: str, d: object, i: int) -> DagTask:
    if not isinstance(d, dict):
        raise ValidationError(f"task #{i + 1} must be an object")
    name = d.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(f"task #{i + 1}: bad task name {name!r}: use 1-128 of a-z 0-9 . _ -, "
                              "starting with a letter or digit")
    h = d.get("handler") or {}
    if not isinstance(h, dict):
        raise ValidationError(f"task {name!r}: handler must be an object")
    sensor = d.get("sensor") or h.get("sensor")
    job_handler = {k: v for k, v in h.items() if k != "sensor"}
    if sensor and job_handler:
        raise ValidationError(f"task {name!r}: give a handler or a sensor, not both")
    as_job = {"name": name, "team": team, "handler": job_handler if not sensor else {"shell": {"command": "true"}}}
    for key in ("retry", "timeout_seconds", "pool", "worker_labels", "description"):
        if d.get(key):
            as_job[key] = d[key]
    try:
        spec, _ = canonical_spec(as_job)
    except ValidationError as e:
        raise ValidationError(f"task {name!r}: {e}") from None
    handler = _sensor(sensor, name) if sensor else spec.handler
    timeout = (spec.timeout_seconds or DEFAULT_SENSOR_CHECK_S) if sensor else spec.timeout_seconds
    upstream = d.get("upstream") or []
    if isinstance(upstream, str):
        upstream = [upstream]
    if not isinstance(upstream, list) or not all(isinstance(u, str) for u in upstream):
        raise ValidationError(f"task {name!r}: upstream must be a list of task names")
    if len(set(upstream)) != len(upstream):
        raise ValidationError(f"task {name!r}: upstream names a task twice")
    rule = d.get("trigger_rule") or "all_success"
    if rule not in TRIGGER_RULES:
        raise ValidationError(f"task {name!r}: trigger_rule must be one of {', '.join(TRIGGER_RULES)}, "
                              f"got {rule!r}")
    return DagTask(name=name, handler=handler, timeout_seconds=timeout, retry=spec.retry,
                   pool=spec.policies.pool, worker_labels=spec.worker_labels, description=spec.description,
                   upstream=tuple(upstream), trigger_rule=rule if rule != "all_success" else "")


def canonical_dag(d: object) -> tuple[DagSpec, str]:
    """Validate a DAG document (the proto DagSpec as a dict with proto field names) and return
    its canonical form and JSON text, or raise ValidationError with a message for a person."""
    if not isinstance(d, dict):
        raise ValidationError("a DAG must be an object")
    name = d.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(f"bad DAG name {name!r}: use 1-128 of a-z 0-9 . _ -, starting with a "
                              "letter or digit")
    team = d.get("team") or "default"
    schedule = d.get("schedule") or ""
    tz = d.get("timezone") or "UTC"
    # The DAG's own fields validate like a job's (team, schedule, zone, description).
    probe = {"name": name, "team": team, "schedule": schedule, "timezone": tz,
             "handler": {"shell": {"command": "true"}}, "description": d.get("description") or ""}
    if d.get("sla"):
        probe["sla"] = d["sla"]               # a DAG's SLA validates like a job's (schedd.core.sla)
    try:
        job, _ = canonical_spec(probe)
    except ValidationError as e:
        raise ValidationError(f"DAG {name!r}: {e}") from None
    if job.schedule.startswith("at "):
        raise ValidationError(f"DAG {name!r}: a DAG schedule is cron or @every (use `dag run` for once)")
    tasks = d.get("tasks") or []
    if not isinstance(tasks, list) or not tasks:
        raise ValidationError(f"DAG {name!r} has no tasks")
    if len(tasks) > MAX_TASKS:
        raise ValidationError(f"DAG {name!r} has {len(tasks)} tasks, at most {MAX_TASKS}")
    out_tasks = []
    seen: set[str] = set()
    for i, t in enumerate(tasks):
        task = _task(name, job.team, t, i)
        if task.name in seen:
            raise ValidationError(f"DAG {name!r}: duplicate task name {task.name!r}")
        seen.add(task.name)
        out_tasks.append(task)
    order = [t.name for t in out_tasks]
    upstream = {t.name: list(t.upstream) for t in out_tasks}
    for t in order:
        for u in upstream[t]:
            if u not in seen:
                raise ValidationError(f"DAG {name!r}: task {t!r} has unknown upstream {u!r} "
                                      f"(tasks: {', '.join(order)})")
    cycle = find_cycle(order, upstream)
    if cycle is not None:
        raise ValidationError(f"DAG {name!r} has a cycle: {' -> '.join(cycle)}")
    max_runs = d.get("max_runs") or 0
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or not 0 <= max_runs <= MAX_RUNS:
        raise ValidationError(f"DAG {name!r}: max_runs must be a whole number from 1 to {MAX_RUNS}")
    out = DagSpec(name=name, team=job.team, schedule="" if job.schedule == "none" else job.schedule,
                  timezone=job.timezone, tasks=tuple(out_tasks), description=job.description, sla=job.sla,
                  max_runs=max_runs)
    text = out.text()
    if len(text) > MAX_DAG_BYTES:
        raise ValidationError(f"DAG {name!r} is too large ({len(text)} bytes, at most {MAX_DAG_BYTES})")
    return out, text


# ------------------------------------------------------------------ derived index


def upgrade(st: Tables) -> None:
    """After a restore: DAGs pickled before `incarnation` existed lack the slot (0 = unknown)."""
    for dag in st.dags.values():
        if not hasattr(dag, "incarnation"):
            dag.incarnation = 0


def runs_of(st: Tables, dag: str) -> list[int]:
    return st.runs_of(dag)


# ------------------------------------------------------------------ apply: definitions


Edges = dict[str, tuple[str, ...]]      # task -> its upstream (or downstream) tasks


def _graph(spec: DagSpec) -> tuple[tuple[str, ...], Edges, Edges, dict[str, str]]:
    """(topological order, upstream, downstream, rules) of a committed spec whose shape
    `load_dag` checked; ValueError if it has a cycle (apply never trusts its proposer)."""
    names = [t.name for t in spec.tasks]
    upstream = {t.name: list(t.upstream) for t in spec.tasks}
    if find_cycle(names, upstream) is not None:
        raise ValueError("cycle")
    order = tuple(topo_order(names, upstream))
    down: dict[str, list[str]] = {t: [] for t in order}
    for t in order:
        for u in upstream[t]:
            down[u].append(t)
    rules = {t.name: t.trigger_rule or "all_success" for t in spec.tasks}
    return (order, {t: tuple(upstream[t]) for t in order}, {t: tuple(down[t]) for t in order}, rules)


def _schedule_row_spec(dag: DagDef) -> JobSpec:
    """The job-row spec of a DAG's schedule: it fires through the ordinary wheel."""
    return JobSpec(name=schedule_row(dag.name), team=dag.team, schedule=dag.schedule, timezone=dag.tz,
                   handler=RawHandler({}), dag=dag.name, history_limit=SCHEDULE_ROW_HISTORY)


def _task_row_spec(dag: str, team: str, task: DagTask) -> JobSpec:
    """The job-row spec of a task: its handler and job fields, no schedule of its own."""
    return JobSpec(name=task_job(dag, task.name), team=team, schedule="", timezone="UTC", handler=task.handler,
                   description=task.description, worker_labels=task.worker_labels, retry=task.retry,
                   timeout_seconds=task.timeout_seconds, policies=Policies(pool=task.pool) if task.pool else NO_POLICIES,
                   dag=dag, task=task.name, history_limit=MAX_HISTORY_LIMIT,   # bounded by the DAG's run retention
                   extra=task.row_extra())


def _upsert_row(st: Tables, spec: JobSpec, cmd: C.Command, index: int) -> None:
    """Create or update a DAG's job row (its name has a colon, which PUT refuses) through the
    one job upsert path; a row whose spec is unchanged is left as it is. A new row's incarnation
    is `index` (a task removed and added again is another job)."""
    upsert(st, JobHead.of(spec), spec.text(), parse_schedule(spec), cmd, index, keep_if_same=True)


def _drop_row(st: Tables, name: str) -> None:
    job = st.jobs.get(name)
    if job is not None:
        st.drop_job(job)


def put(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    text = cmd.args.get("spec")
    if not isinstance(text, str):
        return reject(Code.INVALID, "invalid DAG: bad DAG name")
    try:
        spec = load_dag(text)
        order, upstream, downstream, rules = _graph(spec)
        check_committed_sla(spec)
        sched.parse(spec.schedule, spec.timezone, hash_key=schedule_row(spec.name))
    except (ValueError, TypeError, sched.ScheduleError) as e:
        return reject(Code.INVALID, f"invalid DAG: {e}")
    name = spec.name
    max_runs = spec.committed_max_runs() or DEFAULT_MAX_RUNS
    if not isinstance(max_runs, int) or not 1 <= max_runs <= MAX_RUNS:
        return reject(Code.INVALID, "invalid DAG: bad max_runs")
    current = st.dags.get(name)
    if current is not None:
        removed = [t for t in current.order if t not in rules]
        for t in runs_of(st, name):
            run = st.dag_runs[(name, t)]
            if run.state != RUN_RUNNING:
                continue
            busy = [task for task in removed if task in run.states]
            if busy:
                return reject(Code.CONFLICT, f"DAG {name!r}: run {run.run_id} is still running and uses "
                                           f"task(s) {', '.join(busy)} that this version removes; wait "
                                           "for it to end, or delete the DAG")
    if current is None:
        dag = DagDef(name=name, team=spec.team, schedule=spec.schedule, tz=spec.timezone,
                     spec=text, version=1, created_ms=cmd.now, updated_ms=cmd.now, created_by=cmd.by,
                     order=order, upstream=upstream, downstream=downstream, rules=rules,
                     max_runs=max_runs, incarnation=index)
        st.dags[name] = dag
    else:
        dag = current
        if dag.spec != text:
            for gone in dag.order:
                if gone not in rules:
                    _drop_row(st, task_job(name, gone))
            dag.team, dag.schedule, dag.tz, dag.spec = spec.team, spec.schedule, spec.timezone, text
            dag.order, dag.upstream, dag.downstream, dag.rules = order, upstream, downstream, rules
            dag.max_runs = max_runs
            dag.version += 1
            dag.updated_ms = cmd.now
    for task in spec.tasks:
        _upsert_row(st, _task_row_spec(name, dag.team, task), cmd, index)
    if dag.schedule and sched.parse(dag.schedule, dag.tz).kind != "none":
        _upsert_row(st, _schedule_row_spec(dag), cmd, index)
    else:
        _drop_row(st, schedule_row(name))
    _prune_runs(st, dag)
    return ok(R.Stored(current is None, name, dag.version))


def delete(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    name = cmd.args.get("name")
    dag = st.dags.get(name) if isinstance(name, str) else None
    if dag is None:
        return reject(Code.NOT_FOUND, f"DAG {name!r} not found")
    for task in dag.order:
        _drop_row(st, task_job(dag.name, task))
    _drop_row(st, schedule_row(dag.name))
    for t in list(runs_of(st, dag.name)):
        del st.dag_runs[(dag.name, t)]
    st.dag_run_times.pop(dag.name, None)
    del st.dags[dag.name]
    return ok(R.Named(dag.name))


def run_now(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    name = cmd.args.get("name")
    dag = st.dags.get(name) if isinstance(name, str) else None
    if dag is None:
        return reject(Code.NOT_FOUND, f"DAG {name!r} not found")
    try:
        given = run_params.from_entry(cmd)      # checked before anything changes
    except ValidationError as e:
        return reject(Code.INVALID, str(e))
    t = cmd.now
    while (name, t) in st.dag_runs:
        t += 1
    run = start_run(st, dag, t, "manual", cmd, index, run_params.event(cmd.now, given))
    return ok(R.DagRunStarted(dag.name, t, run.run_id))


def clear(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """`dag_clear {name, logical_ms, task, downstream}`: a finished task of a run (and, with
    `downstream`, every task that depends on it, transitively) runs again, like Airflow's clear.
    Each cleared task goes back to PENDING and is decided again by its trigger rule once its
    upstream tasks have ended: the cleared task itself at once (its upstream ended already),
    the ones below it as it ends. A cleared task is recorded afresh (its retry policy applies
    again); the run is RUNNING until every task has ended, and keeps an event saying who
    cleared what. Refused, changing nothing, while a chosen task is still under way."""
    name, t, task = cmd.args.get("name"), cmd.args.get("logical_ms"), cmd.args.get("task")
    if not isinstance(name, str) or type(t) is not int or not isinstance(task, str):
        return reject(Code.INVALID, "dag_clear needs name, task (strings) and logical_ms (an integer)")
    run = st.dag_runs.get((name, t))
    if run is None:
        return reject(Code.NOT_FOUND, f"DAG run {run_id(name, t)} not found")
    if task not in run.states:
        return reject(Code.NOT_FOUND, f"DAG {name!r} has no task {task!r} (tasks: {', '.join(run.order)})")
    chosen = cleared_tasks(run, task, cmd.args.get("downstream") is True)
    if run.states[task] not in TERMINAL_STATES:
        return reject(Code.CONFLICT, f"task {task!r} of run {run.run_id} has not ended "
                                     f"({run.states[task]}): only a finished task can be cleared")
    busy = [x for x in chosen if run.states[x] not in TERMINAL_STATES and run.states[x] != PENDING]
    if busy:
        return reject(Code.CONFLICT, f"task(s) {', '.join(busy)} of run {run.run_id} are still under way: "
                                     "wait for them to end or cancel them, then clear")
    for x in chosen:
        run.states[x] = PENDING
        old = st.execs.get((task_job(name, x), t))
        if old is not None:          # its run of before goes: the task is recorded afresh
            st.drop_exec(old)
    for x in run.order:              # what each waiting task still waits for, counted again
        if run.states[x] == PENDING:
            run.pending[x] = sum(1 for u in run.upstream[x] if run.states[u] not in TERMINAL_STATES)
    run.state, run.ended_ms = RUN_RUNNING, 0
    run.events += (ExecutionEvent(cmd.now, "cleared", f"{', '.join(chosen)} cleared by {cmd.by or 'anonymous'}"),)
    for x in chosen:
        if run.states[x] == PENDING and run.pending[x] == 0:
            state, reason = verdict(run, x)
            _record_task(st, run, x, state, reason, cmd, index)
    return ok(R.Cleared(run.run_id, chosen))


def cleared_tasks(run: DagRun, task: str, downstream: bool) -> tuple[str, ...]:
    """`task`, and with `downstream` every task reachable from it, in the DAG's order."""
    chosen = {task}
    if downstream:
        todo = [task]
        while todo:
            for d in run.downstream[todo.pop()]:
                if d not in chosen:
                    chosen.add(d)
                    todo.append(d)
    return tuple(x for x in run.order if x in chosen)


def verdict(run: DagRun, task: str) -> tuple[str, str]:
    """What `task`'s trigger rule says once every upstream task of it has ended: (SCHEDULED, "")
    to run it, or the end state it is recorded in and why."""
    rule = run.rules[task]
    if rule == "all_done":
        return SCHEDULED, ""
    if rule == "one_failed":
        if _failed(run, task):
            return SCHEDULED, ""
        return SKIPPED, "trigger rule one_failed: no upstream failed"
    for u in run.upstream[task]:
        if run.states[u] in FAIL_STATES:
            return UPSTREAM_FAILED, f"upstream {u} ended {run.states[u]}"
        if run.states[u] != SUCCEEDED:
            return SKIPPED, f"upstream {u} ended {run.states[u]}"
    return SCHEDULED, ""


HANDLERS = {DAG_PUT: put, DAG_DELETE: delete, DAG_RUN: run_now, C.DAG_CLEAR: clear}


# ------------------------------------------------------------------ apply: runs


def start_run(st: Tables, dag: DagDef, t: int, trigger: str, cmd: C.Command, index: int,
              events: tuple[ExecutionEvent, ...] = ()) -> DagRun:
    """`events`: the run's first events (its params: each task's execution gets them too)."""
    run = DagRun(dag=dag.name, logical_ms=t, state=RUN_RUNNING, trigger=trigger, created_ms=cmd.now,
                 version=dag.version, order=dag.order, upstream=dag.upstream,
                 downstream=dag.downstream, rules=dag.rules,
                 pending={task: len(dag.upstream[task]) for task in dag.order},
                 states={task: PENDING for task in dag.order}, events=events)
    st.dag_runs[(dag.name, t)] = run
    st.add_run_time(dag.name, t)
    dag.runs_total += 1
    S.on_run(st, dag, run, cmd.now)          # its SLA deadline, if the DAG has one
    for task in dag.order:
        if not dag.upstream[task]:
            _record_task(st, run, task, SCHEDULED, "", cmd, index)
    _prune_runs(st, dag)
    return run


def _record_task(st: Tables, run: DagRun, task: str, state: str, reason: str, cmd: C.Command, index: int) -> None:
    name = task_job(run.dag, task)
    job = st.jobs.get(name)
    if job is None:                      # cannot happen: rows follow the definition
        run.states[task] = FAILED
        return
    key = (name, run.logical_ms)
    old = st.execs.get(key)
    if old is not None:                  # a leftover of a pruned run at the same instant
        st.drop_exec(old)
    ex = record(st, job, run.logical_ms, "dag", cmd, index)
    ex.events += tuple(e for e in run.events if e.kind == run_params.PARAMS_EVENT)
    run.states[task] = SCHEDULED
    if state != SCHEDULED:
        ex.reason = reason
        st.set_state(ex, state, cmd.now)     # terminal: queued for settle, which cascades


def settle(st: Tables, cmd: C.Command, index: int) -> None:
    """Process what this entry did to DAG rows (queued by `Tables.add_exec` and `set_state`): a
    fire of a schedule row starts a run; a task execution that ended moves its run on. Runs to a
    fixed point: recording UPSTREAM_FAILED queues the next level."""
    queue = st.dag_pending
    while queue:
        name, t = queue.pop(0)
        ex = st.execs.get((name, t))
        if ex is None:
            continue
        dag_name, _, task = name.partition(":")
        if not task:
            if ex.state == SCHEDULED:
                _fire_run(st, dag_name, ex, cmd, index)
            continue
        run = st.dag_runs.get((dag_name, t))
        if run is None or task not in run.states or ex.state not in TERMINAL_STATES:
            continue
        if run.states[task] in TERMINAL_STATES:
            continue                         # already counted
        _task_ended(st, run, task, ex.state, cmd, index)


def _fire_run(st: Tables, dag_name: str, ex: Execution, cmd: C.Command, index: int) -> None:
    dag = st.dags.get(dag_name)
    if dag is None:
        ex.reason = "no such DAG"
        st.set_state(ex, SKIPPED, cmd.now)
        return
    if (dag_name, ex.scheduled_ms) in st.dag_runs:
        ex.reason = f"run {run_id(dag_name, ex.scheduled_ms)} already exists"
        st.set_state(ex, SKIPPED, cmd.now)
        return
    run = start_run(st, dag, ex.scheduled_ms, ex.trigger, cmd, index)
    ex.reason = f"started DAG run {run.run_id}"
    st.set_state(ex, SUCCEEDED, cmd.now)


def _failed(run: DagRun, task: str) -> bool:
    return any(run.states[u] in FAIL_STATES for u in run.upstream[task])


def _task_ended(st: Tables, run: DagRun, task: str, state: str, cmd: C.Command, index: int) -> None:
    run.states[task] = state
    for d in run.downstream[task]:
        run.pending[d] -= 1
        if run.states[d] != PENDING:
            continue                           # already decided (one_failed ran early, doomed)
        rule, left = run.rules[d], run.pending[d]
        if rule == "all_done":
            if left == 0:
                _record_task(st, run, d, SCHEDULED, "", cmd, index)
        elif rule == "one_failed":
            if _failed(run, d):
                _record_task(st, run, d, SCHEDULED, "", cmd, index)
            elif left == 0:
                _record_task(st, run, d, SKIPPED, "trigger rule one_failed: no upstream failed", cmd, index)
        else:
            if state in FAIL_STATES:
                _record_task(st, run, d, UPSTREAM_FAILED,
                             f"upstream {task} ended {state}", cmd, index)
            elif state != SUCCEEDED:
                _record_task(st, run, d, SKIPPED, f"upstream {task} ended {state}", cmd, index)
            elif left == 0:
                _record_task(st, run, d, SCHEDULED, "", cmd, index)
    if all(s in TERMINAL_STATES for s in run.states.values()):
        ok = all(s in (SUCCEEDED, SKIPPED) for s in run.states.values())
        run.state = RUN_SUCCEEDED if ok else RUN_FAILED
        run.ended_ms = cmd.now
        dag = st.dags.get(run.dag)
        if dag is not None:
            _prune_runs(st, dag)


def _prune_runs(st: Tables, dag: DagDef) -> None:
    """Keep the newest `max_runs` runs of a DAG: the oldest finished ones go, with their task
    executions. A running run is never pruned."""
    times = runs_of(st, dag.name)
    excess = len(times) - dag.max_runs
    if excess <= 0:
        return
    victims: list[int] = []
    for t in times:
        if len(victims) == excess:
            break
        if st.dag_runs[(dag.name, t)].state != RUN_RUNNING:
            victims.append(t)
    for t in victims:
        run = st.dag_runs.pop((dag.name, t))
        for task in run.order:
            key = (task_job(dag.name, task), t)
            ex = st.execs.get(key)
            if ex is not None:
                st.drop_exec(ex)
        times.remove(t)


# ------------------------------------------------------------------ reads


def task_view(st: Tables, run: DagRun, task: str) -> dict[str, Any]:
    """What `dag show` prints for one task of a run: state (live from the execution), attempts,
    times, reason."""
    name = task_job(run.dag, task)
    ex = st.execs.get((name, run.logical_ms))
    state = run.states.get(task, PENDING)
    view = {"task": task, "state": state, "execution_id": "", "attempts": 0, "started_ms": 0,
            "ended_ms": 0, "reason": "", "upstream": list(run.upstream.get(task, ())),
            "trigger_rule": run.rules.get(task, "all_success"), "pending_upstream": run.pending.get(task, 0)}
    if ex is not None:
        view["state"] = ex.state
        view["execution_id"] = ex.id
        view["attempts"] = len(ex.attempts)
        view["reason"] = ex.reason
        if ex.attempts:
            view["started_ms"] = ex.attempts[0].started_ms
            if ex.state in TERMINAL_STATES:
                view["ended_ms"] = ex.attempts[-1].ended_ms or ex.updated_ms
        elif ex.state in TERMINAL_STATES:
            view["ended_ms"] = ex.updated_ms
    return view


def find_run(st: Tables, dag: str, ref: str) -> DagRun | None:
    """A run by its full id, its time part, or "" (the newest)."""
    times = runs_of(st, dag)
    if not times:
        return None
    if not ref or ref == "latest":
        return st.dag_runs[(dag, times[-1])]
    _, sep, when = ref.rpartition("@")
    text = when if sep else ref
    try:
        t = sched.parse_time(text, "UTC")
    except sched.ScheduleError:
        return None
    return st.dag_runs.get((dag, t))
