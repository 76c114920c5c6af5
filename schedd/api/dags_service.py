"""gRPC servicer of the Dags service (proto/schedd_proto/dags.proto).

Same rules as `schedd.api.service`: a non-leader forwards the call to the leader (once); a DAG
is validated fully here (`dags.canonical_dag`: cycles named, unknown upstreams, duplicate tasks)
before anything is proposed, so bad input commits nothing; reads come from the leader's state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from schedd.api import auth
from schedd.api.dag_convert import dag_spec_from_pb, dag_to_pb, run_to_pb
from schedd.api.service import CommittingService, Router, checked_params, routed, spec_levels
from schedd.api.watch import Rows, WatchSlots, follow
from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core import params as run_params
from schedd.core import results as R
from schedd.core.model import ValidationError
from schedd.replication.node import RaftNode
from schedd.ports.clock import Clock
from schedd.ports.metrics import Metrics
from schedd.ports.rpc import CallContext
from schedd_proto import dags_pb2 as dpb
from schedd_proto import dags_pb2_grpc as dpb_grpc

DEFAULT_RUNS = 20
MAX_RUNS_PAGE = 1000


class DagsService(CommittingService, dpb_grpc.DagsServicer):
    SERVICE = "Dags"

    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, router: Router,
                 watchers: WatchSlots | None = None) -> None:
        self.node, self.clock, self.metrics = node, clock, metrics
        self.router = router
        self.watchers = watchers if watchers is not None else WatchSlots()   # shared per node (daemon)

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
            spec, text = dag_spec_from_pb(request.dag)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        try:
            C.encode(C.DAG_PUT, rid="x", now=0, term=0, spec=text, name=spec.name)
        except C.EntryTooLarge as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"DAG too large: {e}")
        result = await self._commit(context, C.DAG_PUT, request.request_id, spec=text, name=spec.name,
                                    **spec_levels(spec.tasks))
        return dpb.PutDagResponse(dag=await self._dag_or_abort(context, spec.name),
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
        given = await checked_params(context, request.params)
        result = await self._commit(context, C.DAG_RUN, request.request_id, name=request.name,
                                    **run_params.entry_args(given))
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

    @routed(write=True)
    async def ClearDagTask(self, request: dpb.ClearDagTaskRequest, context: CallContext) -> dpb.DagRun:
        """A finished task of a run runs again, with (downstream) what depends on it
        (schedd.core.dags.clear decides; the run is named as GetDagRun names it)."""
        with self.node.lock:
            st = self.node.state
            known = request.name in st.dags
            run = D.find_run(st, request.name, request.run_id) if known else None
            t = run.logical_ms if run is not None else None
        if not known:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {request.name!r} not found")
        if t is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {request.name!r} has no run {request.run_id!r}")
        await self._commit(context, C.DAG_CLEAR, request.request_id, name=request.name, logical_ms=t,
                           task=request.task, downstream=request.downstream)
        with self.node.lock:
            st = self.node.state
            cleared = st.dag_runs.get((request.name, t))
            if cleared is not None:
                return run_to_pb(st, cleared)
        await context.abort(grpc.StatusCode.NOT_FOUND, "the run was cleared but is already pruned")

    async def WatchDagRun(self, request: dpb.GetDagRunRequest, context: CallContext) -> AsyncIterator[dpb.DagRun]:
        """The run (named as GetDagRun names it, "" = the newest now), then again at each change,
        from this node's applied state (schedd.api.watch); ends if the run is pruned."""
        with self.node.lock:
            st = self.node.state
            known = request.name in st.dags
            run = D.find_run(st, request.name, request.run_id) if known else None
            t = run.logical_ms if run is not None else None
        if t is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {request.name!r} not found" if not known
                                else f"DAG {request.name!r} has no run {request.run_id or 'yet'}")

        async def read() -> Rows:
            with self.node.lock:
                state = self.node.state
                now = state.dag_runs.get((request.name, t))
                return {now.run_id: run_to_pb(state, now)} if now is not None else {}

        async for kind, _, row in follow(context, self.watchers, read, lambda: self.node.state.last_index):
            if row is None and kind == "removed":
                return
            if isinstance(row, dpb.DagRun):
                yield row
