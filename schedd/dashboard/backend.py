"""What the dashboard asks the API, and the answers as plain JSON values.

Every call goes to this node's own gRPC port with the session's token as the bearer, exactly as
schedctl's would: the interceptor authenticates it, checks the method's capability, the servicer
filters lists by what the token may read, and a write is forwarded to the leader. So the
dashboard can never show or do more than the same token could through the API.
"""

from __future__ import annotations

import secrets
import signal
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from schedd_proto import acl_pb2, acl_pb2_grpc
from schedd_proto import logs_pb2 as lpb
from schedd_proto import logs_pb2_grpc as lpb_grpc
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

CALL_TIMEOUT_S = 10.0
PAGE_SIZES = (25, 50, 100, 200)
WATCHES = ("jobs", "runs")       # what a page's live stream follows: WatchJobs, WatchExecutions
RECENT_RUNS = 20                # outcomes per job in the jobs list (ListJobs.recent)


class ApiError(Exception):
    """An API refusal the page shows as it is (`code`: the gRPC status name)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class Unauthenticated(ApiError):
    """The token no longer authenticates (expired, deleted, never valid): the session ends."""


@dataclass(slots=True)
class Api:
    """Calls on the node's own gRPC address through `channel` (built once, on the loop)."""

    address: str
    channel_factory: Callable[[str], grpc.aio.Channel]
    _channel: grpc.aio.Channel | None = None

    def _ch(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = self.channel_factory(self.address)
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _call(self, stub_method: Any, request: Any, token: str) -> Any:
        try:
            return await stub_method(request, timeout=CALL_TIMEOUT_S, metadata=_bearer(token))
        except grpc.aio.AioRpcError as e:
            raise _refusal(e) from None

    async def _stream(self, stub_method: Any, request: Any, token: str) -> AsyncGenerator[Any, None]:
        """A server stream's messages, for as long as the caller reads. Closing the generator
        (or cancelling its reader) cancels the gRPC call, so the node frees what it holds for
        it (a watch slot, a log reader) as soon as the browser goes away."""
        call = stub_method(request, metadata=_bearer(token))
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as e:
            raise _refusal(e) from None
        finally:
            call.cancel()

    async def whoami(self, token: str) -> dict[str, Any]:
        """Who the token is; Unauthenticated if it is no (longer a) valid token."""
        r = await self._call(acl_pb2_grpc.AclStub(self._ch()).WhoAmI, acl_pb2.WhoAmIRequest(), token)
        if r.acl_enabled and r.principal in ("", "anonymous"):
            raise Unauthenticated("UNAUTHENTICATED", "the token did not authenticate")
        return {"principal": r.principal or "(access control off)", "kind": r.kind, "acl_off": not r.acl_enabled,
                "grants": [{"pattern": g.pattern, "capabilities": list(g.capabilities)} for g in r.grants],
                "operator": not r.acl_enabled or any("operator" in g.capabilities and g.pattern in ("cluster", "*")
                                                     for g in r.grants)}

    async def jobs(self, token: str, *, team: str = "", state: str = "", text: str = "", after: str = "",
                   size: int = 50, pool: str = "") -> dict[str, Any]:
        """One page of jobs the token may read (ListJobs: ordered by name, after `after`; `text`:
        names containing it), each with its last RECENT_RUNS outcomes (in the same call)."""
        req = pb.ListJobsRequest(team=team, state=state, page_token=after, page_size=size, name_contains=text,
                                 pool=pool, recent=RECENT_RUNS)
        r = await self._call(pb_grpc.SchedulerStub(self._ch()).ListJobs, req, token)
        return {"jobs": [job_row(j) for j in r.jobs], "next": r.next_page_token, "total": r.total}

    async def cluster(self, token: str, with_digest: bool = False) -> dict[str, Any]:
        """The cluster as this node sees it (Cluster.Status: needs `operator`); `with_digest`:
        each node's state and history digests too (a pass over the state on every node)."""
        r = await self._call(pb_grpc.ClusterStub(self._ch()).Status, pb.ClusterStatusRequest(with_digest=with_digest),
                             token)
        shards: list[dict[str, Any]] = []
        if any(n.shards > 1 for n in r.nodes):          # a sharded cluster: every shard's leader too
            listed = await self._call(pb_grpc.ClusterStub(self._ch()).ListShards, pb.ListShardsRequest(), token)
            shards = [shard_row(s) for s in listed.items]
        return {"leader": r.leader_id, "term": r.term, "commit_index": r.commit_index, "jobs": r.jobs,
                "answered_by": r.answered_by, "warnings": list(r.warnings), "feature_level": r.feature_level,
                "nodes": [node_row(n) for n in r.nodes], "leader_changes": leader_changes(r), "shards": shards}


    async def run(self, token: str, run_id: str) -> dict[str, Any]:
        """One run and its attempts (GetExecution), with what the page words from its job (the
        team, for the buttons; the timeout, for "timed out after 30 s"): GetJob, when the job
        still exists and the token may read it."""
        r = await self._call(pb_grpc.SchedulerStub(self._ch()).GetExecution, pb.GetExecutionRequest(id=run_id), token)
        team, timeout_s = "", 0.0
        try:
            job = await self._call(pb_grpc.SchedulerStub(self._ch()).GetJob, pb.GetJobRequest(name=r.job), token)
            team, timeout_s = job.spec.team, job.spec.timeout_seconds
        except Unauthenticated:
            raise
        except ApiError:
            pass                                  # deleted since: the run is still worth showing
        return run_row(r, team, timeout_s)

    async def cancel(self, token: str, run_id: str) -> dict[str, Any]:
        """CancelExecution, as `schedctl run cancel` calls it."""
        req = pb.CancelExecutionRequest(id=run_id, request_id=secrets.token_hex(16))
        r = await self._call(pb_grpc.SchedulerStub(self._ch()).CancelExecution, req, token)
        return {"id": r.id, "state": r.state, "cancel_requested": r.cancel_requested}

    async def retry(self, token: str, run_id: str) -> dict[str, Any]:
        """RetryExecution, as `schedctl run retry` calls it."""
        req = pb.RetryExecutionRequest(id=run_id, request_id=secrets.token_hex(16))
        r = await self._call(pb_grpc.SchedulerStub(self._ch()).RetryExecution, req, token)
        return {"id": r.id, "state": r.state}

    def watch(self, token: str, what: str, *, job: str = "", team: str = "", state: str = "", text: str = "",
              pool: str = "", after: str = "",
              size: int = 100) -> AsyncGenerator[tuple[str, str, dict[str, Any] | None], None]:
        """A watch's events as (type, key, row): type added, changed, removed or synced; row the
        page's own JSON of it (`job_row`, `watched_run_row`; None when removed). WatchJobs (`jobs`:
        the page of jobs `jobs` lists with the same arguments, each with its last RECENT_RUNS runs
        this node holds in memory: the ones that may still change) or WatchExecutions (`runs`, of
        `job`), as `schedctl job list --watch` and `run list --watch` follow them; the node sends
        only rows the token may read."""
        stub = pb_grpc.SchedulerStub(self._ch())
        if what == "runs":
            events = self._stream(stub.WatchExecutions, pb.ListExecutionsRequest(job=job, page_size=size, batch=True),
                                  token)
        else:
            req = pb.ListJobsRequest(team=team, state=state, name_contains=text, pool=pool, page_token=after,
                                     page_size=size, recent=RECENT_RUNS, batch=True)
            events = self._stream(stub.WatchJobs, req, token)
        return _rows(events)

    def logs(self, token: str, run_id: str, attempt: int = 0) -> AsyncGenerator[dict[str, Any], None]:
        """A run's output, followed until the attempt ends (ReadRunLogs with follow, as `schedctl
        run logs --follow` reads it), chunk by chunk as plain values."""
        req = lpb.ReadRunLogsRequest(id=run_id, attempt=attempt, follow=True)
        return _chunks(self._stream(lpb_grpc.LogsStub(self._ch()).ReadRunLogs, req, token))


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _refusal(e: grpc.aio.AioRpcError) -> ApiError:
    kind = Unauthenticated if e.code() == grpc.StatusCode.UNAUTHENTICATED else ApiError
    return kind(e.code().name, e.details() or e.code().name)


async def _rows(events: AsyncGenerator[pb.WatchEvent, None]) -> AsyncGenerator[tuple[str, str, dict[str, Any] | None],
                                                                                None]:
    try:
        async for message in events:
            for event in (message.events if message.type == "batch" else (message,)):   # asked in batches
                row = (job_row(event.job) if event.HasField("job") else
                       watched_run_row(event.execution) if event.HasField("execution") else None)
                yield event.type, event.key, row
    finally:
        await events.aclose()                   # closing this closes the call too


async def _chunks(chunks: AsyncGenerator[lpb.RunLogChunk, None]) -> AsyncGenerator[dict[str, Any], None]:
    try:
        async for c in chunks:
            yield {"kind": c.kind, "stream": c.stream, "text": c.data.decode("utf-8", "replace"), "time_ms": c.time_ms,
                   "dropped_bytes": c.dropped_bytes, "message": c.message, "state": c.state,
                   "exit_code": c.exit_code, "attempt": c.attempt, "worker": c.worker}
    finally:
        await chunks.aclose()


def run_row(r: pb.Execution, team: str, timeout_s: float) -> dict[str, Any]:
    dag, _, task = r.job.partition(":") if ":" in r.job else ("", "", "")
    return {"id": r.id, "job": r.job, "team": team, "scheduled_ms": r.scheduled_ms, "due_ms": r.due_ms,
            "state": r.state, "trigger": r.trigger, "reason": r.reason, "created_ms": r.created_ms,
            "updated_ms": r.updated_ms, "retry_at_ms": r.retry_at_ms, "cancel_requested": r.cancel_requested,
            "params": dict(sorted(r.params.items())), "lane": r.lane,
            "dag": {"name": dag, "task": task, "run": f"{dag}@{r.id.partition('@')[2]}"} if dag else None,
            "events": [{"time_ms": e.time_ms, "kind": e.kind, "message": e.message} for e in r.events],
            "attempts": [attempt_row(a, timeout_s) for a in r.attempts]}


def watched_run_row(r: pb.Execution) -> dict[str, Any]:
    """What a page needs of a run its watch reports, to tell whether it shows it."""
    return {"id": r.id, "job": r.job, "state": r.state, "scheduled_ms": r.scheduled_ms, "updated_ms": r.updated_ms}


def attempt_row(a: pb.Attempt, timeout_s: float) -> dict[str, Any]:
    return {"number": a.number, "worker": a.worker, "fencing_token": a.fencing_token, "state": a.state,
            "started_ms": a.started_ms, "ended_ms": a.ended_ms, "error": a.error, "output_tail": a.output_tail,
            "rejected": a.rejected, "outcome": outcome_text(a, timeout_s)}


def outcome_text(a: pb.Attempt, timeout_s: float) -> str:
    """How an attempt ended, in words a person reads without the manual ("killed by SIGKILL"
    rather than -9); "" while it runs."""
    if a.state == "TIMED_OUT":
        return f"timed out after {timeout_s:g} s" if timeout_s else "timed out"
    if a.state == "LOST":
        gone = f"worker {a.worker} lost: "
        if a.worker and a.error.startswith(gone):
            return f"lost: worker {a.worker} gone ({a.error[len(gone):]})"
        return f"lost: {a.error or 'its worker went away'}"
    if not a.ended_ms and a.state in ("", "RUNNING"):
        return ""
    if a.http_status:
        return f"HTTP {a.http_status}"
    if a.exit_code < 0:
        try:
            return f"killed by {signal.Signals(-a.exit_code).name}"
        except ValueError:
            return f"killed by signal {-a.exit_code}"
    if a.state == "CANCELLED" and not a.exit_code:
        return "cancelled"
    return f"exit status {a.exit_code}"


def job_row(j: pb.Job) -> dict[str, Any]:
    s = j.spec
    return {"name": s.name, "team": s.team, "schedule": s.schedule, "timezone": s.timezone,
            "paused": j.paused, "next_fire_ms": j.next_fire_ms, "last_state": j.last_state,
            "last_scheduled_ms": j.last_scheduled_ms, "last_execution_id": j.last_execution_id,
            "executions_total": j.executions_total, "words": j.schedule_words, "pool": s.pool,
            "recent": [{"id": r.execution_id, "state": r.state, "ms": r.scheduled_ms} for r in j.recent]}


def node_row(n: pb.NodeStatus) -> dict[str, Any]:
    return {"id": n.id, "grpc_address": n.grpc_address, "role": n.role, "term": n.term,
            "commit_index": n.commit_index, "applied_index": n.applied_index, "lag": n.lag,
            "version": n.version, "feature_level": n.feature_level, "writable": n.writable,
            "error": n.error, "uptime_seconds": n.uptime_seconds,
            "state_digest": n.state_digest, "digest_index": n.digest_index, "history_digest": n.history_digest,
            "history_index": n.history_index, "history_rows": n.history_rows, "history_gap": n.history_gap}


def shard_row(s: pb.ShardStatus) -> dict[str, Any]:
    return {"shard": s.shard, "leader": s.leader_id, "replicas": list(s.replicas), "term": s.term, "jobs": s.jobs,
            "executions": s.executions, "lag": s.lag, "commit_index": s.commit_index}


def leader_changes(status: pb.ClusterStatus) -> list[dict[str, Any]]:
    """Every node's record of the terms it led (NodeStatus.leader_terms), newest first (as
    `schedctl cluster leaders` shows them)."""
    rows = [{"node": n.id, "term": t.term, "since_ms": t.since_ms, "until_ms": t.until_ms}
            for n in status.nodes for t in n.leader_terms]
    return sorted(rows, key=lambda c: (c["since_ms"], c["term"]), reverse=True)
