"""gRPC servicers: validate, propose, map results to status codes; forward to the leader.

A node that is not the leader forwards writes (and reads, unless the caller sent
`x-schedd-stale-ok: 1`) to the leader's gRPC address, once: a forwarded call that lands on a
non-leader is refused with UNAVAILABLE rather than bounced around during an election.
Bad input is refused before anything is proposed, so it commits nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid

import grpc
from google.protobuf import descriptor_pool, message_factory

from schedd.api import convert
from schedd.core import commands as C
from schedd.core import ledger
from schedd.core import schedule as sched
from schedd.core.policy import BACKFILL, QUOTA_KINDS, quota_limit
from schedd.core.state import MAX_BACKFILL_PER_ENTRY, schedule_of
from schedd.core.model import (
    EXECUTION_STATES, ValidationError, canonical_spec, parse_execution_id,
)
from schedd.replication.node import NotApplied, OutcomeUnknown, RaftNode
from schedd.runtime.clock import Clock
from schedd.runtime.metrics import Metrics
from schedd.v1 import scheduler_pb2 as pb
from schedd.v1 import scheduler_pb2_grpc as pb_grpc

log = logging.getLogger("schedd.api")

FORWARDED = "x-schedd-forwarded"
STALE_OK = "x-schedd-stale-ok"
PRINCIPAL = "x-schedd-principal"
COMMIT_TIMEOUT_S = 10.0
PAST_AT_GRACE_MS = 60_000
BATCH_CHUNK = 100
MAX_BACKFILL = 100_000            # instants per backfill request

RESULT_STATUS = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "exists": grpc.StatusCode.ALREADY_EXISTS,
    "conflict": grpc.StatusCode.FAILED_PRECONDITION,
    "stale_term": grpc.StatusCode.UNAVAILABLE,
    "blocked": grpc.StatusCode.FAILED_PRECONDITION,
    "internal": grpc.StatusCode.INTERNAL,
}


def _metadata(context) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def principal(context) -> str:
    return _metadata(context).get(PRINCIPAL) or context.peer() or "unknown"


def _canonical_batch(specs) -> list[tuple[dict, str]]:
    out = []
    for i, spec in enumerate(specs):
        try:
            out.append(canonical_spec(convert.spec_to_dict(spec)))
        except ValidationError as e:
            raise ValidationError(f"job #{i + 1} ({spec.name or 'unnamed'}): {e}") from None
    return out


class Router:
    """Forwards a call to the current leader, generically by service and method name (any
    schedd.v1 service whose generated module is loaded: Scheduler, Cluster, Workers, Dags)."""

    def __init__(self, node: RaftNode) -> None:
        self.node = node
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _channel(self, addr: str) -> grpc.aio.Channel:
        ch = self._channels.get(addr)
        if ch is None:
            ch = self._channels[addr] = grpc.aio.insecure_channel(addr)
        return ch

    async def forward(self, service: str, method: str, request, context):
        md = _metadata(context)
        if md.get(FORWARDED):
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "this node is no longer the leader (an election is under way); retry")
        addr = self.node.leader_grpc_address()
        if not addr or addr == self.node.cfg.grpc_address:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no leader is elected yet; retry shortly")
        out_type = descriptor_pool.Default().FindServiceByName(f"schedd.v1.{service}") \
            .FindMethodByName(method).output_type
        call = self._channel(addr).unary_unary(
            f"/schedd.v1.{service}/{method}", request_serializer=type(request).SerializeToString,
            response_deserializer=message_factory.GetMessageClass(out_type).FromString)
        remaining = context.time_remaining()
        timeout = min(remaining, 30.0) if remaining is not None else 30.0
        meta = [(FORWARDED, self.node.cfg.node_id), (PRINCIPAL, principal(context))]
        try:
            return await call(request, timeout=timeout, metadata=meta)
        except grpc.aio.AioRpcError as e:
            # The leader's own answer passes through unchanged; the status says whether retrying
            # is safe (UNAVAILABLE) and the message says why.
            await context.abort(e.code(), e.details() or f"leader {addr}: {e.code().name}")

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()


def routed(*, write: bool):
    """Run the method here if this node leads (or the caller accepts stale reads), else forward."""
    def deco(fn):
        @functools.wraps(fn)
        async def wrapper(self, request, context):
            started = time.perf_counter()
            code = "OK"
            try:
                if self.node.is_leader() or (not write and _metadata(context).get(STALE_OK) == "1"):
                    return await fn(self, request, context)
                return await self.router.forward(self.SERVICE, fn.__name__, request, context)
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception:
                code = context.code().name if context.code() else "UNKNOWN"
                raise
            finally:
                self.metrics.requests.labels(fn.__name__, code).inc()
                log.debug("%s %s in %.1f ms", fn.__name__, code, (time.perf_counter() - started) * 1000)
        return wrapper
    return deco


class SchedulerService(pb_grpc.SchedulerServicer):
    SERVICE = "Scheduler"

    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, router: Router,
                 dispatcher=None) -> None:
        self.node, self.clock, self.metrics, self.router = node, clock, metrics, router
        self.dispatcher = dispatcher

    def _exec_pb(self, ex) -> pb.Execution:
        """The replicated record, plus the leader's own note on why a SCHEDULED one still waits."""
        out = convert.execution_to_pb(ex)
        assigner = getattr(self.dispatcher, "assigner", None)
        if assigner is not None and ex.state == "SCHEDULED" and not out.reason:
            out.reason = assigner.waiting_reason(ex.job, ex.scheduled_ms)
        return out

    # ------------------------------------------------------------ helpers

    async def _commit(self, context, kind: str, rid: str, **args) -> dict:
        try:
            entry = C.encode(kind, rid=rid or uuid.uuid4().hex, now=self.clock.now_ms(),
                             term=self.node.term, by=principal(context), **args)
        except C.EntryTooLarge as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request too large: {e}")
        started = time.perf_counter()
        try:
            result = await self.node.propose(entry, timeout=COMMIT_TIMEOUT_S)
            self.metrics.commit_latency.labels(kind).observe(time.perf_counter() - started)
        except NotApplied as e:
            self.metrics.proposals.labels(kind, "not_applied").inc()
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"not committed ({e}); safe to retry")
        except OutcomeUnknown as e:
            self.metrics.proposals.labels(kind, "unknown").inc()
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{e}; retry with the same request_id")
        self.metrics.proposals.labels(kind, result.get("code", "ok")).inc()
        if not result.get("ok"):
            await context.abort(RESULT_STATUS.get(result.get("code"), grpc.StatusCode.INTERNAL),
                                result.get("msg", "rejected"))
        return result

    async def _valid_spec(self, context, spec: pb.JobSpec) -> tuple[dict, str]:
        """Validate before proposing: bad input is refused and nothing is committed."""
        try:
            d, text = canonical_spec(convert.spec_to_dict(spec))
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        await self._refuse_past_at(context, d)
        return d, text

    async def _refuse_past_at(self, context, d: dict) -> None:
        """A new one-off whose time is long past is almost surely a mistake: refuse it."""
        if not d["schedule"].startswith("at "):
            return
        at = sched.next_after(sched.parse(d["schedule"], d["timezone"], hash_key=d["name"]), -(2 ** 62))
        with self.node.lock:
            exists = d["name"] in self.node.state.jobs
        if not exists and at is not None and at < self.clock.now_ms() - PAST_AT_GRACE_MS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"schedule {d['schedule']!r} is in the past")

    def _job_pb(self, name: str, upcoming: int = 0) -> pb.Job | None:
        with self.node.lock:
            job = self.node.state.jobs.get(name)
            return None if job is None else convert.job_to_pb(job, self.node.state, upcoming=upcoming)

    async def _job_or_abort(self, context, name: str, upcoming: int = 0) -> pb.Job:
        job = self._job_pb(name, upcoming)
        if job is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {name!r} not found")
        return job

    # ------------------------------------------------------------ jobs

    @routed(write=True)
    async def PutJob(self, request: pb.PutJobRequest, context) -> pb.PutJobResponse:
        spec, text = await self._valid_spec(context, request.job)
        result = await self._commit(context, C.PUT, request.request_id, spec=text,
                                    name=spec["name"], create_only=request.create_only,
                                    expected_version=request.expected_version)
        return pb.PutJobResponse(job=await self._job_or_abort(context, spec["name"]),
                                 created=bool(result.get("created")))

    @routed(write=True)
    async def PutJobs(self, request: pb.PutJobsRequest, context) -> pb.PutJobsResponse:
        # Validation of a big batch is CPU work: off the event loop, so the dispatcher and
        # other calls keep their timing while it runs.
        try:
            checked = await asyncio.to_thread(_canonical_batch, request.jobs)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        for d, _ in checked:
            await self._refuse_past_at(context, d)
        names = [d["name"] for d, _ in checked]
        if len(set(names)) != len(names):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the batch names a job more than once")
        rid = request.request_id or uuid.uuid4().hex
        texts = [text for _, text in checked]
        chunks = [texts[i:i + BATCH_CHUNK] for i in range(0, len(texts), BATCH_CHUNK)]
        results = await asyncio.gather(*(
            self._commit(context, C.PUT_MANY, f"{rid}-{i}", specs=chunk) for i, chunk in enumerate(chunks)))
        return pb.PutJobsResponse(created=sum(r.get("created", 0) for r in results),
                                  updated=sum(r.get("updated", 0) for r in results))

    @routed(write=False)
    async def GetJob(self, request: pb.GetJobRequest, context) -> pb.Job:
        upcoming = request.upcoming or 5
        if not 0 < upcoming <= 100:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "upcoming must be between 1 and 100")
        return await self._job_or_abort(context, request.name, upcoming)

    @routed(write=False)
    async def ListJobs(self, request: pb.ListJobsRequest, context) -> pb.ListJobsResponse:
        size = request.page_size or 100
        if not 0 < size <= 1000:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size must be between 1 and 1000")
        if request.state not in ("", "active", "paused"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "state must be active or paused")
        with self.node.lock:
            st = self.node.state
            jobs, nxt, total = st.list_jobs(team=request.team, state=request.state,
                                            after=request.page_token, limit=size)
            return pb.ListJobsResponse(jobs=[convert.job_to_pb(j, st) for j in jobs],
                                       next_page_token=nxt, total=total)

    @routed(write=True)
    async def PauseJob(self, request: pb.JobRef, context) -> pb.Job:
        await self._commit(context, C.PAUSE, request.request_id, name=request.name)
        return await self._job_or_abort(context, request.name)

    @routed(write=True)
    async def ResumeJob(self, request: pb.JobRef, context) -> pb.Job:
        await self._commit(context, C.RESUME, request.request_id, name=request.name,
                           catch_up=request.catch_up)
        return await self._job_or_abort(context, request.name)

    @routed(write=True)
    async def DeleteJob(self, request: pb.JobRef, context) -> pb.DeleteJobResponse:
        await self._commit(context, C.DELETE, request.request_id, name=request.name)
        return pb.DeleteJobResponse(name=request.name)

    @routed(write=True)
    async def TriggerJob(self, request: pb.TriggerJobRequest, context) -> pb.Execution:
        result = await self._commit(context, C.TRIGGER, request.request_id, name=request.name,
                                    force=request.force)
        with self.node.lock:
            ex = self.node.state.execs.get((result["name"], result["scheduled_ms"]))
            if ex is not None:
                return convert.execution_to_pb(ex)
        await context.abort(grpc.StatusCode.NOT_FOUND, "the execution was recorded but is already pruned")

    # ------------------------------------------------------------ executions

    @routed(write=False)
    async def ListExecutions(self, request: pb.ListExecutionsRequest, context) -> pb.ListExecutionsResponse:
        size = request.page_size or 100
        if not 0 < size <= 1000:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size must be between 1 and 1000")
        if request.state and request.state not in EXECUTION_STATES:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"state must be one of {', '.join(EXECUTION_STATES)}")
        try:
            after = convert.parse_exec_token(request.page_token)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        with self.node.lock:
            st = self.node.state
            if request.job and request.job not in st.jobs:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job!r} not found")
            page, nxt, total = st.list_executions(job=request.job, state=request.state, after=after,
                                                  limit=size, oldest_first=request.oldest_first)
            return pb.ListExecutionsResponse(executions=[self._exec_pb(e) for e in page],
                                             next_page_token=convert.exec_token(nxt), total=total)

    @routed(write=False)
    async def GetExecution(self, request: pb.GetExecutionRequest, context) -> pb.Execution:
        try:
            key = parse_execution_id(request.id)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        with self.node.lock:
            ex = self.node.state.execs.get(key)
            if ex is not None:
                return self._exec_pb(ex)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"execution {request.id!r} not found")

    @routed(write=True)
    async def CancelExecution(self, request: pb.CancelExecutionRequest, context) -> pb.Execution:
        try:
            name, t = parse_execution_id(request.id)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        result = await self._commit(context, C.CANCEL, request.request_id, job=name, scheduled_ms=t)
        assigner = getattr(self.dispatcher, "assigner", None)
        if result.get("cancel_requested") and assigner is not None:
            assigner.push_cancel(result["token"], request.id)
        with self.node.lock:
            return self._exec_pb(self.node.state.execs[(name, t)])


    # ------------------------------------------------------------ backfill, ledger, quotas

    @routed(write=True)
    async def BackfillJob(self, request: pb.BackfillRequest, context) -> pb.BackfillResponse:
        """Instants are listed here, on the leader, and committed in entries of at most
        MAX_BACKFILL_PER_ENTRY; apply checks each one is an instant of the schedule."""
        if not request.from_ms or not request.to_ms or request.from_ms > request.to_ms:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "give from and to times, from <= to")
        now = self.clock.now_ms()
        if request.to_ms > now:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"backfill covers the past only: to {sched.format_ms(request.to_ms)} is in "
                                "the future")
        with self.node.lock:
            job = self.node.state.jobs.get(request.name)
            s = None if job is None else schedule_of(job)
        if job is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.name!r} not found")
        if s.kind in ("none", "at"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"job {request.name!r} has no recurring schedule to backfill")
        times: list[int] = []
        x = sched.next_after(s, request.from_ms - 1)
        while x is not None and x <= request.to_ms:
            if len(times) == MAX_BACKFILL:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"the range holds more than {MAX_BACKFILL} instants; backfill it in parts")
            times.append(x)
            x = sched.next_after(s, x)
        out = pb.BackfillResponse(instants=len(times), first_ms=times[0] if times else 0,
                                  last_ms=times[-1] if times else 0)
        if request.dry_run or not times:
            return out
        rid = request.request_id or uuid.uuid4().hex
        step = MAX_BACKFILL_PER_ENTRY
        results = await asyncio.gather(*(
            self._commit(context, C.BACKFILL, f"{rid}-{i}", name=request.name, times=times[i:i + step])
            for i in range(0, len(times), step)))
        out.created = sum(r.get("created", 0) for r in results)
        out.duplicates = sum(r.get("duplicates", 0) for r in results)
        return out

    @routed(write=False)
    async def ListInstants(self, request: pb.ListInstantsRequest, context) -> pb.ListInstantsResponse:
        now = self.clock.now_ms()
        until = request.to_ms or now
        since = request.from_ms or until - 86_400_000
        limit = request.limit or 1000
        if since > until or not 0 < limit <= ledger.MAX_INSTANTS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"need from <= to and 1 <= limit <= {ledger.MAX_INSTANTS}")
        with self.node.lock:
            st = self.node.state
            job = st.jobs.get(request.job)
            if job is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job!r} not found")
            rows = ledger.instants(st, job, since, until, limit)
            return pb.ListInstantsResponse(instants=[
                pb.InstantRecord(instant_ms=r.instant_ms, disposition=r.disposition, detail=r.detail,
                                 execution=self._exec_pb(r.execution) if r.execution is not None else None)
                for r in rows])

    @routed(write=True)
    async def SetQuota(self, request: pb.SetQuotaRequest, context) -> pb.Quota:
        kind, _, name = request.key.partition(":")
        if kind not in QUOTA_KINDS or not name or (kind == "lane" and name != BACKFILL):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"bad quota key {request.key!r}: use team:<name>, pool:<name> or lane:backfill")
        if request.limit < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit must be >= 0 (0 removes the quota)")
        await self._commit(context, C.QUOTA, request.request_id, key=request.key, limit=request.limit)
        with self.node.lock:
            st = self.node.state
            return pb.Quota(key=request.key, limit=quota_limit(st, request.key) or 0,
                            running=st.held.get(request.key, 0))

    @routed(write=False)
    async def ListQuotas(self, request: pb.ListQuotasRequest, context) -> pb.ListQuotasResponse:
        with self.node.lock:
            st = self.node.state
            keys = sorted({*st.quotas, f"lane:{BACKFILL}", *(k for k in st.held if not k.startswith("key:"))})
            return pb.ListQuotasResponse(quotas=[
                pb.Quota(key=k, limit=quota_limit(st, k) or 0, running=st.held.get(k, 0)) for k in keys])


class ClusterService(pb_grpc.ClusterServicer):
    """Status is answered by whichever node is asked (never forwarded), from every member's
    NodeInfo, so it works during an election and shows unreachable nodes."""

    def __init__(self, node: RaftNode, router: Router) -> None:
        self.node, self.router = node, router

    def local_info(self, with_digest: bool = False) -> pb.NodeStatus:
        st = self.node.status()
        me = self.node.cfg
        digest, digest_index = "", 0
        with self.node.lock:            # the digest and the index it was taken at, together
            state = self.node.state
            state_hash, epoch = state.state_hash(), state.epoch
            if with_digest:
                digest, digest_index = state.state_digest(), state.last_index
        return pb.NodeStatus(
            id=me.node_id, raft_address=me.raft_address, grpc_address=me.grpc_address, role=st.role,
            term=st.term, commit_index=st.commit_index, applied_index=st.applied_index,
            lag=max(0, st.leader_commit_index - st.applied_index), has_quorum=st.has_quorum,
            state_hash=state_hash, uptime_seconds=st.uptime_s, leader_epoch=epoch,
            state_digest=digest, digest_index=digest_index)

    async def NodeInfo(self, request, context) -> pb.NodeStatus:
        if request.with_digest:         # O(state) under the lock: off the event loop
            return await asyncio.to_thread(self.local_info, True)
        return self.local_info()

    async def _peer_info(self, peer, with_digest: bool = False) -> pb.NodeStatus:
        stub = pb_grpc.ClusterStub(self.router._channel(peer.grpc_address))
        try:
            return await stub.NodeInfo(pb.NodeInfoRequest(with_digest=with_digest), timeout=1.5 + 3 * with_digest)
        except grpc.aio.AioRpcError as e:
            return pb.NodeStatus(id=peer.id, raft_address=peer.raft_address,
                                 grpc_address=peer.grpc_address, role="unreachable",
                                 error=e.details() or e.code().name)

    async def Status(self, request, context) -> pb.ClusterStatus:
        me = self.node.cfg
        peers = [p for p in me.members if p.id != me.node_id]
        digest = request.with_digest
        infos = {me.node_id: await asyncio.to_thread(self.local_info, True) if digest else self.local_info()}
        for p, info in zip(peers, await asyncio.gather(*(self._peer_info(p, digest) for p in peers))):
            infos[p.id] = info
        nodes = [infos[p.id] for p in me.members]
        leaders = [n for n in nodes if n.role == "leader"]
        leader = max(leaders, key=lambda n: n.term) if leaders else None
        with self.node.lock:
            jobs, execs = len(self.node.state.jobs), len(self.node.state.execs)
        if leader is not None:
            for n in nodes:
                if n.role != "unreachable":
                    n.lag = max(0, leader.commit_index - n.applied_index)
        return pb.ClusterStatus(
            leader_id=leader.id if leader else "", leader_grpc_address=leader.grpc_address if leader else "",
            term=max(n.term for n in nodes), commit_index=leader.commit_index if leader else 0,
            nodes=nodes, jobs=jobs, executions=execs, answered_by=me.node_id)
