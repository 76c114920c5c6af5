"""What each API method sends and what it returns, with no I/O.

Each public method of ``Client`` and ``AsyncClient`` (declared in ``_methods``, where its
documentation is) carries out one builder: here for jobs, executions and the cluster, in
``dags``, ``acl`` and ``membership`` for theirs. A builder takes the method's arguments and
returns a ``Plan`` (one or more unary calls and how to combine their answers) or a ``Pager`` (a
paged list walked lazily). The clients only carry the calls out, so the request building and
response handling live here once for both.

Obligation: a mutating builder draws its ``request_id`` here, once, so every retry of the built
call re-sends the same id and the server deduplicates a retry after an unknown outcome.
"""

from __future__ import annotations

import getpass
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from google.protobuf.message import Message

from schedd_proto import scheduler_pb2 as pb

from .errors import NotFound

T = TypeVar("T")
M = TypeVar("M", bound=Message)

STALE_OK_METADATA = ("x-schedd-stale-ok", "1")


def _principal() -> str:
    """Who is calling, for the server's audit trail (no authentication yet: informational)."""
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (KeyError, OSError):
        return "unknown"


PRINCIPAL_METADATA = ("x-schedd-principal", _principal())


@dataclass(frozen=True)
class Call:
    """One unary RPC: ``service`` is ``"scheduler"``, ``"cluster"`` or ``"workers"``, ``method``
    the RPC name."""

    service: str
    method: str
    request: Message
    mutating: bool = False
    stale_ok: bool = False
    #: Send to this node only (no failover), e.g. for per-node status.
    address: str | None = None
    #: The call's deadline in seconds when it is longer than the client's (a shard move waits
    #: for a replica to catch up); None: the client's timeout.
    timeout: float | None = None

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (PRINCIPAL_METADATA, STALE_OK_METADATA) if self.stale_ok else (PRINCIPAL_METADATA,)


@dataclass(frozen=True)
class Plan(Generic[T]):
    """Calls made one after another; ``combine`` turns their responses into the method's result."""

    calls: Sequence[Call]
    combine: Callable[[list[Message]], T]


def _single(call: Call, reply: type[M]) -> Plan[M]:
    """One call whose response, of type ``reply``, is the result."""

    def result(responses: list[Message]) -> M:
        assert isinstance(responses[0], reply)
        return responses[0]

    return Plan([call], result)


class Pager(Generic[T]):
    """A walk over a paged list RPC. ``call`` is the next request to send, ``None`` when done;
    ``feed(response)`` returns the items to hand out and moves ``call`` on."""

    def __init__(
        self,
        first: Call,
        items: Callable[[Message], Sequence[T]],
        limit: int | None = None,
        *,
        size_field: str = "page_size",
    ) -> None:
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        self._items = items
        self._size_field = size_field  # the request's field for "at most this many in the page"
        self._left = limit
        self.call: Call | None = None if limit == 0 else self._shrink(first)

    def feed(self, response: Message) -> Sequence[T]:
        assert self.call is not None
        items = self._items(response)
        if self._left is not None:
            items = items[: self._left]
            self._left -= len(items)
        token: str = response.next_page_token
        previous: str = self.call.request.page_token
        if not token or token == previous or self._left == 0:
            self.call = None
        else:
            request = type(self.call.request)()
            request.CopyFrom(self.call.request)
            request.page_token = token
            self.call = self._shrink(replace(self.call, request=request))
        return items

    def _shrink(self, call: Call) -> Call:
        """Ask for no more than the items still wanted."""
        request = call.request
        if self._left is not None and self._left < getattr(request, self._size_field):
            setattr(request, self._size_field, self._left)
        return call


def new_request_id() -> str:
    return uuid.uuid4().hex


def _scheduler(method: str, request: Message, *, mutating: bool = False, stale_ok: bool = False) -> Call:
    return Call("scheduler", method, request, mutating=mutating, stale_ok=stale_ok)


# ---------------------------------------------------------------- jobs


def put_job_result(
    spec: pb.JobSpec, *, create_only: bool = False, expected_version: int = 0
) -> Plan[pb.PutJobResponse]:
    request = pb.PutJobRequest(
        job=spec,
        create_only=create_only,
        expected_version=expected_version,
        request_id=new_request_id(),
    )
    return _single(_scheduler("PutJob", request, mutating=True), pb.PutJobResponse)


def put_job(spec: pb.JobSpec, *, create_only: bool = False, expected_version: int = 0) -> Plan[pb.Job]:
    plan = put_job_result(spec, create_only=create_only, expected_version=expected_version)
    return Plan(plan.calls, lambda responses: plan.combine(responses).job)


def put_jobs(specs: Iterable[pb.JobSpec], *, create_only: bool = False) -> Plan[pb.PutJobsResponse]:
    request = pb.PutJobsRequest(jobs=list(specs), request_id=new_request_id(), create_only=create_only)
    return _single(_scheduler("PutJobs", request, mutating=True), pb.PutJobsResponse)


def diff_jobs(specs: Iterable[pb.JobSpec], *, stale_ok: bool = False) -> Plan[list[pb.JobChange]]:
    call = _scheduler("DiffJobs", pb.DiffJobsRequest(jobs=list(specs)), stale_ok=stale_ok)
    return Plan([call], lambda responses: list(responses[0].changes))


def get_job(name: str, *, upcoming: int = 5, stale_ok: bool = False) -> Plan[pb.Job]:
    request = pb.GetJobRequest(name=name, upcoming=upcoming)
    return _single(_scheduler("GetJob", request, stale_ok=stale_ok), pb.Job)


def list_jobs(
    *, team: str = "", state: str = "", page_size: int = 500, full: bool = False, stale_ok: bool = False,
    name_contains: str = "", pool: str = "", recent: int = 0,
) -> Pager[pb.Job]:
    request = pb.ListJobsRequest(team=team, state=state, page_size=page_size, full=full, name_contains=name_contains,
                                 pool=pool, recent=recent)
    return Pager(_scheduler("ListJobs", request, stale_ok=stale_ok), lambda r: list(r.jobs))


def pause_job(name: str) -> Plan[pb.Job]:
    request = pb.JobRef(name=name, request_id=new_request_id())
    return _single(_scheduler("PauseJob", request, mutating=True), pb.Job)


def resume_job(name: str, *, catch_up: bool = False) -> Plan[pb.Job]:
    request = pb.JobRef(name=name, request_id=new_request_id(), catch_up=catch_up)
    return _single(_scheduler("ResumeJob", request, mutating=True), pb.Job)


def delete_job(name: str) -> Plan[None]:
    call = _scheduler("DeleteJob", pb.JobRef(name=name, request_id=new_request_id()), mutating=True)
    return Plan([call], lambda responses: None)


def trigger_job(name: str, *, force: bool = False, params: Mapping[str, str] | None = None) -> Plan[pb.Execution]:
    request = pb.TriggerJobRequest(name=name, request_id=new_request_id(), force=force, params=dict(params or {}))
    return _single(_scheduler("TriggerJob", request, mutating=True), pb.Execution)


def backfill_job(name: str, start_ms: int, end_ms: int, *, dry_run: bool = False) -> Plan[pb.BackfillResponse]:
    request = pb.BackfillRequest(name=name, from_ms=start_ms, to_ms=end_ms, dry_run=dry_run,
                                 request_id=new_request_id())
    return _single(_scheduler("BackfillJob", request, mutating=True), pb.BackfillResponse)


def list_instants(job: str, *, start_ms: int = 0, end_ms: int = 0, limit: int = 1000,
                  stale_ok: bool = False) -> Pager[pb.InstantRecord]:
    request = pb.ListInstantsRequest(job=job, from_ms=start_ms, to_ms=end_ms, limit=limit)
    call = _scheduler("ListInstants", request, stale_ok=stale_ok)
    return Pager(call, lambda r: list(r.instants), limit, size_field="limit")


def set_quota(key: str, limit: int) -> Plan[pb.Quota]:
    request = pb.SetQuotaRequest(key=key, limit=limit, request_id=new_request_id())
    return _single(_scheduler("SetQuota", request, mutating=True), pb.Quota)


def list_quotas() -> Plan[list[pb.Quota]]:
    return Plan([_scheduler("ListQuotas", pb.ListQuotasRequest())], lambda responses: list(responses[0].quotas))


def forecast(*, start_ms: int = 0, end_ms: int = 0, by: str = "", top: int = 5,
             stale_ok: bool = False) -> Plan[pb.ForecastResponse]:
    request = pb.ForecastRequest(from_ms=start_ms, to_ms=end_ms, by=by, top=top)
    return _single(_scheduler("Forecast", request, stale_ok=stale_ok), pb.ForecastResponse)


# ---------------------------------------------------------------- executions


def list_executions(
    job: str = "",
    *,
    state: str = "",
    limit: int | None = None,
    oldest_first: bool = False,
    page_size: int = 500,
    stale_ok: bool = False,
) -> Pager[pb.Execution]:
    request = pb.ListExecutionsRequest(
        job=job, state=state, page_size=page_size, oldest_first=oldest_first
    )
    call = _scheduler("ListExecutions", request, stale_ok=stale_ok)
    return Pager(call, lambda r: list(r.executions), limit)


def get_execution(id: str, *, stale_ok: bool = False) -> Plan[pb.Execution]:
    return _single(_scheduler("GetExecution", pb.GetExecutionRequest(id=id), stale_ok=stale_ok), pb.Execution)


def explain_run(id: str, *, stale_ok: bool = False) -> Plan[pb.Explanation]:
    return _single(_scheduler("Explain", pb.ExplainRequest(id=id), stale_ok=stale_ok), pb.Explanation)


def explain_instant(job: str, at_ms: int, *, stale_ok: bool = False) -> Plan[pb.Explanation]:
    return _single(_scheduler("Explain", pb.ExplainRequest(job=job, at_ms=at_ms), stale_ok=stale_ok),
                   pb.Explanation)


# ---------------------------------------------------------------- cluster


def retry_execution(id: str) -> Plan[pb.Execution]:
    request = pb.RetryExecutionRequest(id=id, request_id=new_request_id())
    return _single(_scheduler("RetryExecution", request, mutating=True), pb.Execution)


LATEST = "@latest"


def latest_of(id: str) -> str | None:
    """The job of a ``JOB@latest`` id (its newest run), else None."""
    return id[: -len(LATEST)] if id.endswith(LATEST) and len(id) > len(LATEST) else None


def _latest_execution(job: str, *, stale_ok: bool = False) -> Plan[pb.Execution]:
    """The newest run of ``job``: one page of one, newest first."""
    request = pb.ListExecutionsRequest(job=job, page_size=1)

    def result(responses: list[Message]) -> pb.Execution:
        page = responses[0]
        assert isinstance(page, pb.ListExecutionsResponse)
        if not page.executions:
            raise NotFound(f"job {job!r} has no runs")
        return page.executions[0]

    return Plan([_scheduler("ListExecutions", request, stale_ok=stale_ok)], result)


def cancel_execution(id: str) -> Plan[pb.Execution]:
    request = pb.CancelExecutionRequest(id=id, request_id=new_request_id())
    return _single(_scheduler("CancelExecution", request, mutating=True), pb.Execution)


def list_workers() -> Plan[pb.ListWorkersResponse]:
    return _single(Call("workers", "ListWorkers", pb.ListWorkersRequest()), pb.ListWorkersResponse)


def cluster_status(*, stale_ok: bool = False, with_digest: bool = False) -> Plan[pb.ClusterStatus]:
    request = pb.ClusterStatusRequest(with_digest=with_digest)
    return _single(Call("cluster", "Status", request, stale_ok=stale_ok), pb.ClusterStatus)


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """A term one node led (``leader_changes``); ``until_ms`` 0: it still leads."""

    node: str
    term: int
    since_ms: int
    until_ms: int


def leader_changes(*, stale_ok: bool = False) -> Plan[list[LeaderChange]]:
    """Every node's record of the terms it led (NodeStatus.leader_terms), newest first: the
    cluster's recent leader changes, as far as the nodes answering remember them."""
    def result(responses: list[Message]) -> list[LeaderChange]:
        status = responses[0]
        assert isinstance(status, pb.ClusterStatus)
        rows = [LeaderChange(n.id, t.term, t.since_ms, t.until_ms) for n in status.nodes for t in n.leader_terms]
        return sorted(rows, key=lambda c: (c.since_ms, c.term), reverse=True)

    return Plan([Call("cluster", "Status", pb.ClusterStatusRequest(), stale_ok=stale_ok)], result)


def list_shards() -> Plan[pb.ListShardsResponse]:
    return _single(Call("cluster", "ListShards", pb.ListShardsRequest()), pb.ListShardsResponse)


MOVE_TIMEOUT_S = 900.0


def move_shard(shard: int, *, from_node: str, to_node: str,
               timeout: float = MOVE_TIMEOUT_S) -> Plan[pb.MoveShardResponse]:
    request = pb.MoveShardRequest(shard=shard, from_node=from_node, to_node=to_node)
    return _single(Call("cluster", "MoveShard", request, mutating=True, timeout=timeout), pb.MoveShardResponse)


def node_info(address: str, *, with_digest: bool = False) -> Plan[pb.NodeStatus]:
    request = pb.NodeInfoRequest(with_digest=with_digest)
    return _single(Call("cluster", "NodeInfo", request, address=address), pb.NodeStatus)
