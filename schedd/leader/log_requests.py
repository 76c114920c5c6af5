"""Log pages asked of workers on their streams: one LeaderMessage.log_request out, one
WorkerMessage.log_page back per request, matched by request id (schedd.leader.run_logs reads a
run's log with them). Its own module so that the hub (schedd.leader.workers) routes the answers
without knowing how a log is read."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Protocol, TypeVar

from schedd_proto import logs_pb2 as lpb
from schedd_proto import scheduler_pb2 as pb

__all__ = ["LogRequests"]


class Stream(Protocol):
    """A worker's stream as the requests see it (schedd.leader.workers.WorkerConn)."""
    closed: bool


S = TypeVar("S", bound=Stream)


class LogRequests:
    """Requests for log pages in flight on worker streams, by request id. A page counts only
    from the stream it was asked on; a stream that ends answers its requests with None."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[Stream, asyncio.Future[lpb.LogPage | None]]] = {}

    async def ask(self, send: Callable[[S, pb.LeaderMessage], None], conn: S,
                  req: lpb.LogRequest, timeout: float) -> lpb.LogPage | None:
        """The worker's page, or None: its stream ended, or no answer within `timeout`."""
        rid = next(self._ids)
        req.request_id = rid
        fut: asyncio.Future[lpb.LogPage | None] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (conn, fut)
        try:
            send(conn, pb.LeaderMessage(log_request=req))
            if conn.closed:
                return None
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            self._pending.pop(rid, None)

    def answered(self, conn: Stream, page: lpb.LogPage) -> None:
        entry = self._pending.get(page.request_id)
        if entry is not None and entry[0] is conn and not entry[1].done():
            entry[1].set_result(page)

    def stream_closed(self, conn: Stream) -> None:
        for c, fut in list(self._pending.values()):
            if c is conn and not fut.done():
                fut.set_result(None)
