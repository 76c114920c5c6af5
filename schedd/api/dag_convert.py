"""Proto <-> core conversion of DAGs, in one place (jobs and executions: `convert`).

A DAG spec comes in as a proto message and is validated into the typed spec the core keeps
(`dag_spec_from_pb`: proto -> dict with the proto's field names -> `dags.canonical_dag`); it
goes out as a message built from the typed spec's fields (`dag_spec_to_pb`). The one place the
two forms differ: a sensor task's handler is a SensorHandler in the core, which the message says
as the task's `sensor` field beside no handler.
"""

from __future__ import annotations

from google.protobuf.json_format import MessageToDict

from schedd.api import convert
from schedd.core import params as run_params
from schedd.core import dags as D
from schedd.core import sla as S
from schedd.core.specs import DagSpec, DagTask, SensorHandler
from schedd.core.tables import Tables
from schedd_proto import dags_pb2 as dpb


def dag_spec_to_dict(spec: dpb.DagSpec) -> dict:
    """The request's message as validation takes it: a dict with the proto's field names."""
    return MessageToDict(spec, preserving_proto_field_name=True)


def dag_spec_from_pb(spec: dpb.DagSpec) -> tuple[DagSpec, str]:
    """A request's DAG validated into the typed spec and its committed text (ValidationError:
    cycles named, unknown upstreams, duplicate tasks, any task's own fault)."""
    return D.canonical_dag(dag_spec_to_dict(spec))


def dag_spec_to_pb(spec: DagSpec) -> dpb.DagSpec:
    """The DAG as reads show it, built from its fields (what a hand-made entry holds beside the
    canonical fields stays in the state and is not shown)."""
    out = dpb.DagSpec(name=spec.name, team=spec.team, schedule=spec.schedule, timezone=spec.timezone,
                      description=spec.description, tasks=[_task_to_pb(t) for t in spec.tasks],
                      max_runs=spec.max_runs)
    if spec.sla is not None:
        out.sla.CopyFrom(convert.sla_to_pb(spec.sla))
    return out


def _task_to_pb(task: DagTask) -> dpb.DagTask:
    out = dpb.DagTask(name=task.name, upstream=task.upstream, trigger_rule=task.trigger_rule,
                      timeout_seconds=task.timeout_seconds, pool=task.pool,
                      worker_labels=dict(task.worker_labels), description=task.description)
    if isinstance(task.handler, SensorHandler):
        out.sensor.CopyFrom(sensor_to_pb(task.handler))
    elif task.handler is not None and (handler := convert.handler_to_pb(task.handler)) is not None:
        out.handler.CopyFrom(handler)
    if task.retry is not None:
        out.retry.CopyFrom(convert.retry_to_pb(task.retry))
    return out


def sensor_to_pb(sensor: SensorHandler) -> dpb.SensorSpec:
    return dpb.SensorSpec(file=sensor.file, http_url=sensor.http_url, command=sensor.command,
                          poll_interval_seconds=sensor.poll_interval_seconds, timeout_seconds=sensor.timeout_seconds)


def dag_to_pb(st: Tables, dag: D.DagDef) -> dpb.Dag:
    out = dpb.Dag(spec=dag_spec_to_pb(dag.dag_spec),
                  version=dag.version, created_ms=dag.created_ms, updated_ms=dag.updated_ms,
                  created_by=dag.created_by, runs_total=dag.runs_total)
    row = st.jobs.get(D.schedule_row(dag.name))
    if row is not None and row.next_fire is not None and not row.paused:
        out.next_fire_ms = row.next_fire
    times = D.runs_of(st, dag.name)
    if times:
        last = st.dag_runs[(dag.name, times[-1])]
        out.last_run_id, out.last_run_state = last.run_id, last.state
    return out


def run_to_pb(st: Tables, run: D.DagRun) -> dpb.DagRun:
    out = dpb.DagRun(run_id=run.run_id, dag=run.dag, logical_ms=run.logical_ms, state=run.state,
                     trigger=run.trigger, created_ms=run.created_ms, ended_ms=run.ended_ms,
                     dag_version=run.version, sla_deadline_ms=S.run_deadline(st, run) or 0,
                     events=convert.events_to_pb(run.events), params=run_params.of_events(run.events))
    for task in run.order:
        v = D.task_view(st, run, task)
        row = st.jobs.get(D.task_job(run.dag, task))
        out.tasks.append(dpb.DagTaskRun(
            task=task, state=v["state"], execution_id=v["execution_id"], upstream=v["upstream"],
            trigger_rule=v["trigger_rule"], attempts=v["attempts"], started_ms=v["started_ms"],
            ended_ms=v["ended_ms"], reason=v["reason"], pending_upstream=max(0, v["pending_upstream"]),
            sensor=row is not None and isinstance(row.spec.handler, SensorHandler)))
    return out
