"""gRPC servicer of the Dags service (proto/schedd_proto/dags.proto).

Same rules as `schedd.api.service`: a non-leader forwards the call to the leader (once); a DAG
is validated fully here (`dags.canonical_dag`: cycles named, unknown upstreams, duplicate tasks)
before anything is proposed, so bad input commits nothing; reads come from the leader's state.
"""

from __future__ import annotations

import json

import grpc
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from schedd.api import auth, convert
from schedd.api.service import CommittingService, Router, routed, spec_levels
from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core import results as R
from schedd.core import sla as S
from schedd.core.model import ValidationError
from schedd.replication.node import RaftNode
from schedd.ports.clock import Clock
from schedd.ports.metrics import Metrics
from schedd.ports.rpc import CallContext
from schedd_proto import dags_pb2 as dpb
from schedd_proto import dags_pb2_grpc as dpb_grpc

DEFAULT_RUNS = 20
MAX_RUNS_PAGE = 1000


def dag_spec_to_dict(spec: dpb.DagSpec) -> dict:
    return MessageToDict(spec, preserving_proto_field_name=True)


def dag_spec_to_pb(spec: dict) -> dpb.DagSpec:
    """The canonical DAG spec (schedd.core.dags.canonical_dag) as the API's message, the inverse
    of `dag_spec_to_dict` + canonical_dag. The keys are the message's field names but for one
    thing: a sensor task's canonical handler is ``{"sensor": {...}}``, which the message says as
    the task's `sensor` field beside no handler. Strict, so that a field the message cannot say
    is an error a test sees (tests/unit/test_spec_roundtrip.py), not a silently lost sensor;
    only a spec stored by a newer version, with fields this one does not know, is shown
    without them."""
    tasks = []
    for task in spec.get("tasks") or ():
        handler = task.get("handler") or {}
        if "sensor" in handler:
            task = {k: v for k, v in task.items() if k != "handler"} | {"sensor": handler["sensor"]}
        tasks.append(task)
    d = {**spec, "tasks": tasks}
    try:
        return ParseDict(d, dpb.DagSpec())
    except ParseError:
        return ParseDict(d, dpb.DagSpec(), ignore_unknown_fields=True)


def dag_to_pb(st, dag: D.DagDef) -> dpb.Dag:
    out = dpb.Dag(spec=dag_spec_to_pb(dag.spec_dict()),
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


def run_to_pb(st, run: D.DagRun) -> dpb.DagRun:
    out = dpb.DagRun(run_id=run.run_id, dag=run.dag, logical_ms=run.logical_ms, state=run.state,
                     trigger=run.trigger, created_ms=run.created_ms, ended_ms=run.ended_ms,
                     dag_version=run.version, sla_deadline_ms=S.run_deadline(st, run) or 0,
                     events=convert.events_to_pb(run.events))
    for task in run.order:
        v = D.task_view(st, run, task)
        row = st.jobs.get(D.task_job(run.dag, task))
        out.tasks.append(dpb.DagTaskRun(
            task=task, state=v["state"], execution_id=v["execution_id"], upstream=v["upstream"],
            trigger_rule=v["trigger_rule"], attempts=v["attempts"], started_ms=v["started_ms"],
            ended_ms=v["ended_ms"], reason=v["reason"], pending_upstream=max(0, v["pending_upstream"]),
            sensor=row is not None and "sensor" in (json.loads(row.spec).get("handler") or {})))
    return out


class DagsService(CommittingService, dpb_grpc.DagsServicer):
    SERVICE = "Dags"

    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, router: Router) -> None:
        self.node, self.clock, self.metrics = node, clock, metrics
        self.router = router

    async def _dag_or_abort(self, context: CallContext, name: str) -> dpb.Dag:
        with self.node.lock:
            st = self.node.state
            dag = st.dags.get(name)
            if dag is not None:
                return dag_to_pb(st, dag)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {name!r} not found")

    async def _dag_known(self, context: CallContext, name: str) -> None:
        await self._known_or_abort(context, lambda st: name in st.dags, f"DAG {name!r} not found")

    @routed(write=True)
    async def PutDag(self, request: dpb.PutDagRequest, context: CallContext) -> dpb.PutDagResponse:
        try:
            spec, text = D.canonical_dag(dag_spec_to_dict(request.dag))
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        try:
            C.encode(C.DAG_PUT, rid="x", now=0, term=0, spec=text, name=spec["name"])
        except C.EntryTooLarge as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"DAG too large: {e}")
        result = await self._commit(context, C.DAG_PUT, request.request_id, spec=text, name=spec["name"],
                                    **spec_levels(spec["tasks"]))
        return dpb.PutDagResponse(dag=await self._dag_or_abort(context, spec["name"]),
                                  created=result.of(R.Stored).created)

    @routed(write=False)
    async def GetDag(self, request: dpb.GetDagRequest, context: CallContext) -> dpb.Dag:
        return await self._dag_or_abort(context, request.name)

    @routed(write=False)
    async def ListDags(self, request: dpb.ListDagsRequest, context: CallContext) -> dpb.ListDagsResponse:
        with self.node.lock:
            st = self.node.state
            teams = auth.read_filter()
            return dpb.ListDagsResponse(dags=[dag_to_pb(st, st.dags[n]) for n in sorted(st.dags)
                                              if teams is None or st.dags[n].team in teams])

    @routed(write=True)
    async def DeleteDag(self, request: dpb.DagRef, context: CallContext) -> dpb.DeleteDagResponse:
        await self._dag_known(context, request.name)
        await self._commit(context, C.DAG_DELETE, request.request_id, name=request.name)
        return dpb.DeleteDagResponse(name=request.name)

    @routed(write=True)
    async def RunDag(self, request: dpb.RunDagRequest, context: CallContext) -> dpb.DagRun:
        await self._dag_known(context, request.name)
        result = await self._commit(context, C.DAG_RUN, request.request_id, name=request.name)
        with self.node.lock:
            st = self.node.state
            started = result.of(R.DagRunStarted)
            run = st.dag_runs.get((started.name, started.logical_ms))
            if run is not None:
                return run_to_pb(st, run)
        await context.abort(grpc.StatusCode.NOT_FOUND, "the run was started but is already pruned")

    @routed(write=False)
    async def ListDagRuns(self, request: dpb.ListDagRunsRequest, context: CallContext) -> dpb.ListDagRunsResponse:
        limit = request.limit or DEFAULT_RUNS
        if not 0 < limit <= MAX_RUNS_PAGE:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"limit must be between 1 and {MAX_RUNS_PAGE}")
        response = None                  # None: no such DAG (answered once the lock is released)
        with self.node.lock:
            st = self.node.state
            if request.name in st.dags:
                times = D.runs_of(st, request.name)[-limit:][::-1]
                response = dpb.ListDagRunsResponse(
                    runs=[run_to_pb(st, st.dag_runs[(request.name, t)]) for t in times])
        if response is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {request.name!r} not found")
        return response

    @routed(write=False)
    async def GetDagRun(self, request: dpb.GetDagRunRequest, context: CallContext) -> dpb.DagRun:
        with self.node.lock:
            st = self.node.state
            known = request.name in st.dags
            run = D.find_run(st, request.name, request.run_id) if known else None
            if run is not None:
                return run_to_pb(st, run)
        if not known:                    # answered once the lock is released
            await context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {request.name!r} not found")
        what = f"run {request.run_id!r}" if request.run_id else "any run"
        await context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {request.name!r} has no {what}")
