"""DAGs in the SDK: the DAG document and the plan builders of the ``Client``/``AsyncClient``
DAG methods (declared in ``_methods``).

The ``schedctl dag`` commands are in ``schedd_client.dag_commands``.

The DAG document (YAML or JSON; ``schedctl dag apply -f etl.yaml``)::

    name: etl                       # [a-z0-9][a-z0-9._-]{0,127}
    team: data                      # default "default"
    schedule: "0 2 * * *"           # cron or "@every 1h" for the whole graph; absent = on demand
    timezone: Europe/Berlin         # IANA zone of the schedule (alias: tz); default UTC
    description: Nightly load
    max_runs: 50                    # finished runs kept (default 50)
    sla:                            # a deadline per run, from its logical time (same keys as a job's)
      within: 2h                    # done within 2h, and/or
      by: "06:00"                   # by 06:00 (quoted) in `timezone` below, default the DAG's zone
      webhook: https://hooks.example.com/sla   # POSTed once per missed run, best effort
    tasks:
      - name: wait-for-input        # a sensor: waits for a condition, no worker slot held between polls
        sensor: {file: /data/in/ready, poll_interval: 30s, timeout: 2h}   # or http_url: / command:
      - name: extract
        upstream: [wait-for-input]
        command: ./extract.sh       # any job handler: command, argv (+ workdir, env, inherit_env), http, python, container
        retry: {max_attempts: 3, initial_backoff: 10s}
        timeout: 10m                # per attempt
      - name: load
        upstream: [extract]
        http: {url: "https://etl.example.com/load"}
      - name: notify
        upstream: [load]
        trigger_rule: all_done      # all_success (default) | all_done | one_failed
        command: ./notify.sh

A task takes the job document's handler keys plus ``retry``, ``timeout``, ``pool``,
``worker_labels`` and ``description``; ``upstream`` (a list of task names) and ``trigger_rule``;
or ``sensor`` instead of a handler. Unknown keys are refused. A run that has not SUCCEEDED by its
SLA deadline (still running, FAILED, or done late) gets an ``sla_missed`` event, once:
``schedctl dag runs`` marks it ``! missed`` and ``schedctl dag show --run ID`` lists its events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from schedd_proto import dags_pb2 as dpb

from ._plans import Call, Plan, _single, new_request_id
from .convert import format_duration
from .documents import DocumentError, Limits, build_all, load_documents
from .errors import ValidationError, brief
from .specs import _Reader, _sla_from_doc, parse_duration, spec_from_dict, spec_to_dict

__all__ = ["dag_from_dict", "dag_to_dict", "put_dag", "get_dag", "list_dags", "delete_dag", "run_dag",
           "list_dag_runs", "get_dag_run"]

_DAG_KEYS = ("name", "team", "schedule", "timezone", "tz", "description", "max_runs", "sla", "tasks")
_TASK_KEYS = ("name", "upstream", "trigger_rule", "sensor", "retry", "timeout", "pool",
              "worker_labels", "description", "command", "argv", "workdir", "env", "inherit_env", "http", "python",
              "container")
_SENSOR_KEYS = ("file", "http_url", "command", "poll_interval", "timeout")
_JOB_KEYS = ("retry", "timeout", "pool", "worker_labels", "description", "command", "argv", "workdir",
             "env", "inherit_env", "http", "python", "container")


def _check(doc: Mapping[str, Any], allowed: tuple[str, ...], label: str) -> None:
    for key in doc:
        if key not in allowed:
            raise ValidationError(f"{label}: unknown key {brief(key)} (allowed: {', '.join(allowed)})")


def _task_from_dict(doc: Any, dag: str, i: int) -> dpb.DagTask:
    if not isinstance(doc, Mapping):
        raise ValidationError(f"DAG {brief(dag)}: task #{i} must be a mapping")
    name = doc.get("name")
    label = f"DAG {brief(dag)}, task {brief(name)}" if isinstance(name, str) else f"DAG {brief(dag)}, task #{i}"
    _check(doc, _TASK_KEYS, label)
    task = dpb.DagTask(name=str(name or ""))
    upstream = doc.get("upstream") or []
    if isinstance(upstream, str):
        upstream = [upstream]
    if not isinstance(upstream, list) or not all(isinstance(u, str) for u in upstream):
        raise ValidationError(f"{label}: upstream must be a list of task names")
    task.upstream.extend(upstream)
    task.trigger_rule = str(doc.get("trigger_rule") or "")
    if doc.get("sensor") is not None:
        s = doc["sensor"]
        if not isinstance(s, Mapping):
            raise ValidationError(f"{label}: sensor must be a mapping")
        _check(s, _SENSOR_KEYS, f"{label}, sensor")
        try:
            task.sensor.CopyFrom(dpb.SensorSpec(
                file=str(s.get("file") or ""), http_url=str(s.get("http_url") or ""),
                command=str(s.get("command") or ""),
                poll_interval_seconds=parse_duration(s["poll_interval"]) if s.get("poll_interval") else 0,
                timeout_seconds=parse_duration(s["timeout"]) if s.get("timeout") else 0))
        except ValidationError as e:
            raise ValidationError(f"{label}, sensor: {e.message}") from None
        job_doc = {k: doc[k] for k in ("retry", "timeout", "pool", "worker_labels", "description") if k in doc}
        job_doc["command"] = "true"          # validated as a job; the sensor replaces the handler
    else:
        job_doc = {k: doc[k] for k in _JOB_KEYS if k in doc}
    job_doc["name"] = task.name or "task"
    try:
        spec = spec_from_dict(job_doc)
    except ValidationError as e:
        prefix = f"job {brief(job_doc['name'])}: "
        raise ValidationError(f"{label}: {e.message.removeprefix(prefix)}") from None
    if doc.get("sensor") is None:
        task.handler.CopyFrom(spec.handler)
    if spec.HasField("retry"):
        task.retry.CopyFrom(spec.retry)
    task.timeout_seconds = spec.timeout_seconds
    task.pool = spec.pool
    task.worker_labels.update(spec.worker_labels)
    task.description = spec.description
    return task


def dag_from_dict(doc: Mapping[str, Any]) -> dpb.DagSpec:
    """A ``DagSpec`` from a DAG document (format in this module's docstring). Raises
    ``ValidationError`` for unknown keys and bad types; the graph itself (cycles, unknown
    upstreams, duplicate tasks) is checked by the server, which commits nothing on error."""
    if not isinstance(doc, Mapping):
        raise ValidationError("a DAG document must be a mapping")
    name = doc.get("name")
    label = f"DAG {brief(name)}" if isinstance(name, str) else "DAG document"
    _check(doc, _DAG_KEYS, label)
    if "timezone" in doc and "tz" in doc:
        raise ValidationError(f"{label}: give 'timezone' or its alias 'tz', not both")
    tasks = doc.get("tasks")
    if not isinstance(tasks, list):
        raise ValidationError(f"{label}: tasks must be a list of task mappings")
    reader = _Reader(doc, label)
    max_runs = reader.integer("max_runs")
    sla = _sla_from_doc(reader) if doc.get("sla") is not None else None   # as a job's
    return dpb.DagSpec(
        name=str(name or ""), team=str(doc.get("team") or ""), schedule=str(doc.get("schedule") or ""),
        timezone=str(doc.get("timezone") or doc.get("tz") or ""),
        description=str(doc.get("description") or ""), max_runs=max_runs, sla=sla,
        tasks=[_task_from_dict(t, str(name), i) for i, t in enumerate(tasks, 1)])


def dag_to_dict(spec: dpb.DagSpec) -> dict[str, Any]:
    """The DAG document for ``spec`` (the inverse of ``dag_from_dict``)."""
    from schedd_proto import scheduler_pb2 as pb
    doc: dict[str, Any] = {"name": spec.name}
    defaults = {"team": "default", "timezone": "UTC"}
    for key in ("team", "schedule", "timezone", "description", "max_runs"):
        if getattr(spec, key) and getattr(spec, key) != defaults.get(key):
            doc[key] = getattr(spec, key)
    if spec.HasField("sla"):
        doc["sla"] = spec_to_dict(pb.JobSpec(name=spec.name, sla=spec.sla))["sla"]
    doc["tasks"] = []
    for t in spec.tasks:
        job = pb.JobSpec(name=t.name, handler=t.handler, timeout_seconds=t.timeout_seconds, pool=t.pool,
                         description=t.description, worker_labels=dict(t.worker_labels))
        if t.HasField("retry"):
            job.retry.CopyFrom(t.retry)
        d = spec_to_dict(job)
        task: dict[str, Any] = {"name": t.name}
        if t.upstream:
            task["upstream"] = list(t.upstream)
        if t.trigger_rule and t.trigger_rule != "all_success":
            task["trigger_rule"] = t.trigger_rule
        if t.HasField("sensor"):
            s = t.sensor
            sensor = {k: getattr(s, k) for k in ("file", "http_url", "command") if getattr(s, k)}
            if s.poll_interval_seconds:
                sensor["poll_interval"] = format_duration(s.poll_interval_seconds)
            if s.timeout_seconds:
                sensor["timeout"] = format_duration(s.timeout_seconds)
            task["sensor"] = sensor
            d = {k: v for k, v in d.items() if k in ("retry", "timeout", "pool", "worker_labels", "description")}
        task.update({k: v for k, v in d.items() if k not in ("name", "timezone")})
        doc["tasks"].append(task)
    return doc


# ---------------------------------------------------------------- the plan builders of the SDK methods


def _dags(method: str, request: Message, *, mutating: bool = False, stale_ok: bool = False) -> Call:
    return Call("dags", method, request, mutating=mutating, stale_ok=stale_ok)


def put_dag(spec: dpb.DagSpec | Mapping[str, Any]) -> Plan[dpb.PutDagResponse]:
    if not isinstance(spec, dpb.DagSpec):
        spec = dag_from_dict(spec)
    request = dpb.PutDagRequest(dag=spec, request_id=new_request_id())
    return _single(_dags("PutDag", request, mutating=True), dpb.PutDagResponse)


def get_dag(name: str, *, stale_ok: bool = False) -> Plan[dpb.Dag]:
    return _single(_dags("GetDag", dpb.GetDagRequest(name=name), stale_ok=stale_ok), dpb.Dag)


def list_dags(*, stale_ok: bool = False) -> Plan[dpb.ListDagsResponse]:
    return _single(_dags("ListDags", dpb.ListDagsRequest(), stale_ok=stale_ok), dpb.ListDagsResponse)


def delete_dag(name: str) -> Plan[None]:
    call = _dags("DeleteDag", dpb.DagRef(name=name, request_id=new_request_id()), mutating=True)
    return Plan([call], lambda responses: None)


def run_dag(name: str, *, params: Mapping[str, str] | None = None) -> Plan[dpb.DagRun]:
    request = dpb.RunDagRequest(name=name, request_id=new_request_id(), params=dict(params or {}))
    return _single(_dags("RunDag", request, mutating=True), dpb.DagRun)


def list_dag_runs(name: str, *, limit: int = 20, stale_ok: bool = False) -> Plan[dpb.ListDagRunsResponse]:
    request = dpb.ListDagRunsRequest(name=name, limit=limit)
    return _single(_dags("ListDagRuns", request, stale_ok=stale_ok), dpb.ListDagRunsResponse)


def get_dag_run(name: str, run_id: str = "", *, stale_ok: bool = False) -> Plan[dpb.DagRun]:
    request = dpb.GetDagRunRequest(name=name, run_id=run_id)
    return _single(_dags("GetDagRun", request, stale_ok=stale_ok), dpb.DagRun)


def clear_dag_task(name: str, run_id: str, task: str, *, downstream: bool = False) -> Plan[dpb.DagRun]:
    request = dpb.ClearDagTaskRequest(name=name, run_id=run_id, task=task, downstream=downstream,
                                      request_id=new_request_id())
    return _single(_dags("ClearDagTask", request, mutating=True), dpb.DagRun)


def dag_specs_from_bytes(data: bytes, where: str, limits: Limits = Limits()) -> list[dpb.DagSpec]:
    """Every DAG in a DAG file's bytes (one document, a list, or several YAML documents), all
    checked before the caller sends any. Raises ``DocumentError`` with one line."""
    located = load_documents(data, where, limits)
    if not located:
        raise DocumentError(f"{where}: no DAG documents")
    return build_all(located, dag_from_dict)
