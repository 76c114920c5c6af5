"""What the dashboard asks the API, and the answers as plain JSON values.

Every call goes to this node's own gRPC port with the session's token as the bearer, exactly as
schedctl's would: the interceptor authenticates it, checks the method's capability, the servicer
filters lists by what the token may read, and a write is forwarded to the leader. So the
dashboard can never show or do more than the same token could through the API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from schedd_proto import acl_pb2, acl_pb2_grpc
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

CALL_TIMEOUT_S = 10.0
PAGE_SIZES = (25, 50, 100, 200)


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
            return await stub_method(request, timeout=CALL_TIMEOUT_S,
                                     metadata=(("authorization", f"Bearer {token}"),))
        except grpc.aio.AioRpcError as e:
            kind = Unauthenticated if e.code() == grpc.StatusCode.UNAUTHENTICATED else ApiError
            raise kind(e.code().name, e.details() or e.code().name) from None

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
                   size: int = 50) -> dict[str, Any]:
        """One page of jobs the token may read (ListJobs: ordered by name, after `after`; `text`:
        names containing it)."""
        req = pb.ListJobsRequest(team=team, state=state, page_token=after, page_size=size, name_contains=text)
        r = await self._call(pb_grpc.SchedulerStub(self._ch()).ListJobs, req, token)
        return {"jobs": [job_row(j) for j in r.jobs], "next": r.next_page_token, "total": r.total}

    async def cluster(self, token: str, with_digest: bool = False) -> dict[str, Any]:
        """The cluster as this node sees it (Cluster.Status: needs `operator`); `with_digest`:
        each node's state and history digests too (a pass over the state on every node)."""
        r = await self._call(pb_grpc.ClusterStub(self._ch()).Status, pb.ClusterStatusRequest(with_digest=with_digest),
                             token)
        return {"leader": r.leader_id, "term": r.term, "commit_index": r.commit_index, "jobs": r.jobs,
                "answered_by": r.answered_by, "warnings": list(r.warnings), "feature_level": r.feature_level,
                "nodes": [node_row(n) for n in r.nodes], "leader_changes": leader_changes(r)}


def job_row(j: pb.Job) -> dict[str, Any]:
    s = j.spec
    return {"name": s.name, "team": s.team, "schedule": s.schedule, "timezone": s.timezone,
            "paused": j.paused, "next_fire_ms": j.next_fire_ms, "last_state": j.last_state,
            "last_scheduled_ms": j.last_scheduled_ms, "last_execution_id": j.last_execution_id,
            "executions_total": j.executions_total}


def node_row(n: pb.NodeStatus) -> dict[str, Any]:
    return {"id": n.id, "grpc_address": n.grpc_address, "role": n.role, "term": n.term,
            "commit_index": n.commit_index, "applied_index": n.applied_index, "lag": n.lag,
            "version": n.version, "feature_level": n.feature_level, "writable": n.writable,
            "error": n.error, "uptime_seconds": n.uptime_seconds,
            "state_digest": n.state_digest, "digest_index": n.digest_index, "history_digest": n.history_digest,
            "history_index": n.history_index, "history_rows": n.history_rows, "history_gap": n.history_gap}


def leader_changes(status: pb.ClusterStatus) -> list[dict[str, Any]]:
    """Every node's record of the terms it led (NodeStatus.leader_terms), newest first (as
    `schedctl cluster leaders` shows them)."""
    rows = [{"node": n.id, "term": t.term, "since_ms": t.since_ms, "until_ms": t.until_ms}
            for n in status.nodes for t in n.leader_terms]
    return sorted(rows, key=lambda c: (c["since_ms"], c["term"]), reverse=True)
