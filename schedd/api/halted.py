"""A halted node answers nothing but its status.

A node whose build is below the cluster's feature level stops applying entries (halting, in
schedd.replication.raft_patches), so its state is behind and frozen: a read there would answer from it and
a write forwarded from it would be accepted from a node that cannot see the result. Every call
but the status calls (Cluster.NodeInfo, Cluster.Status: `cluster status` must show why) and the
gRPC plumbing (health, reflection) is refused with FAILED_PRECONDITION and the halt's message,
which says what to do: upgrade this node.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

STILL_SERVED = ("/schedd.v1.Cluster/NodeInfo", "/schedd.v1.Cluster/Status", "/grpc.health.v1.Health/",
                "/grpc.reflection.")


def served_while_halted(method: str) -> bool:
    return method.startswith(STILL_SERVED)


class HaltedGate(grpc.aio.ServerInterceptor):
    """Refuses every call but the status while `halted()` says why the node halted."""

    def __init__(self, halted: Callable[[], str]) -> None:
        self.halted = halted

    async def intercept_service(self, continuation, handler_call_details):
        why = self.halted()
        if not why or served_while_halted(handler_call_details.method):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:
            return None

        async def refuse(request, context):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)

        async def refuse_stream(request, context):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)
            yield                                   # pragma: no cover - abort raises

        kinds = {"unary_unary": grpc.unary_unary_rpc_method_handler,
                 "unary_stream": grpc.unary_stream_rpc_method_handler,
                 "stream_unary": grpc.stream_unary_rpc_method_handler,
                 "stream_stream": grpc.stream_stream_rpc_method_handler}
        for attr, make in kinds.items():
            if getattr(handler, attr) is not None:
                body = refuse_stream if attr.endswith("_stream") else refuse
                return make(body, request_deserializer=handler.request_deserializer,
                            response_serializer=handler.response_serializer)
        return handler
