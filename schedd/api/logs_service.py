"""Logs.ReadRunLogs: a run's full output, streamed from the leader (schedd.leader.run_logs).

Any node answers: the leader holds the workers' streams, so a follower relays the leader's
stream (once: a forwarded call that lands on a non-leader is refused UNAVAILABLE, retryable).
The leader confirms it still leads before it reads (as a linearizable read does), so the
attempt it asks a worker about is the current one. Authorized like reading the run (the
interceptor: `read` on the job's team); bad input is refused INVALID_ARGUMENT before any
worker is asked, an unknown run NOT_FOUND, a run that has not started FAILED_PRECONDITION.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from schedd.api.service import Router, confirm_read
from schedd.leader.run_logs import LogReadError, RunLogs
from schedd.replication.node import RaftNode
from schedd.ports.rpc import CallContext
from schedd_proto import logs_pb2 as lpb
from schedd_proto import logs_pb2_grpc as lpb_grpc

log = logging.getLogger("schedd.api.logs")

METHOD = "/schedd.v1.Logs/ReadRunLogs"

_STATUS = {"invalid": grpc.StatusCode.INVALID_ARGUMENT, "not_found": grpc.StatusCode.NOT_FOUND,
           "not_started": grpc.StatusCode.FAILED_PRECONDITION}


class LogsService(lpb_grpc.LogsServicer):
    def __init__(self, node: RaftNode, router: Router, logs: RunLogs) -> None:
        self.node, self.router, self.logs = node, router, logs

    async def ReadRunLogs(self, request: lpb.ReadRunLogsRequest,
                          context: CallContext) -> AsyncIterator[lpb.RunLogChunk]:
        try:
            RunLogs.check(request)              # bad input is refused here, on any node
        except LogReadError as e:
            await context.abort(_STATUS[e.code], str(e))
        if not self.node.is_leader():
            async for chunk in self._forward(request, context):
                yield chunk
            return
        await confirm_read(self.node, context)
        try:
            async for chunk in self.logs.read(request):
                yield chunk
        except LogReadError as e:
            await context.abort(_STATUS[e.code], str(e))

    def _forward(self, request: lpb.ReadRunLogsRequest,
                 context: CallContext) -> AsyncIterator[lpb.RunLogChunk]:
        return self.router.forward_stream(METHOD, request, lpb.RunLogChunk, context)
