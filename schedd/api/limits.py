"""Caps on what one caller may ask of a node (the node config's [limits] table).

Every cap is refused with RESOURCE_EXHAUSTED and a message that names the config key, before
anything is proposed. `InflightLimit` caps the unary calls in flight on one client connection
(one HTTP/2 connection = one gRPC peer address); over the cap a call is refused at once rather
than queued, so one greedy connection cannot hold every handler of the node.
"""

from __future__ import annotations

import grpc

from schedd.api import auth
from schedd.settings import Limits


def call_overflow(limits: Limits, jobs: int, size: int) -> str:
    """Why a PutJobs call of `jobs` specs and `size` bytes is over the per-call caps ("" = fine)."""
    if jobs > limits.max_jobs_per_call:
        return (f"the call holds {jobs} jobs, more than limits.max_jobs_per_call "
                f"({limits.max_jobs_per_call}); send it in smaller batches")
    if size > limits.max_bytes_per_call:
        return (f"the call is {size} bytes, more than limits.max_bytes_per_call "
                f"({limits.max_bytes_per_call}); send it in smaller batches")
    return ""


def max_receive_bytes(limits: Limits) -> int:
    """gRPC's own receive cap: above the per-call byte cap, so that cap's clear message is what a
    caller sees, and never below 16 MiB (DAG files and other calls)."""
    return max(16 * 1024 * 1024, limits.max_bytes_per_call + 1024 * 1024)


class InflightLimit(grpc.aio.ServerInterceptor):
    """At most `limit` unary calls in flight per peer (a counting semaphore that refuses instead
    of waiting). Calls a follower forwards are exempt: they share the follower's one connection
    to the leader, and the follower already counted them on the caller's own connection. Whether
    a call was forwarded is what the authenticating interceptor verified (`auth.current()`, a
    node's signature), never a header a client could send; that interceptor runs first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inflight: dict[str, int] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        async def limited(request, context):
            info = auth.current()
            if info is not None and info.forwarded_by:
                return await inner(request, context)
            peer = context.peer() or "unknown"
            n = self.inflight.get(peer, 0)
            if n >= self.limit:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"{n} calls already in flight on this connection, the cap of "
                                    f"limits.max_inflight_per_connection ({self.limit}); wait for "
                                    "answers before sending more")
            self.inflight[peer] = n + 1
            try:
                return await inner(request, context)
            finally:
                left = self.inflight[peer] - 1
                if left:
                    self.inflight[peer] = left
                else:
                    del self.inflight[peer]

        return grpc.unary_unary_rpc_method_handler(
            limited, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
