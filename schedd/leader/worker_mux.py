"""One worker stream per node (`Workers.ConnectNode`): the sub-streams of the shards it leads.

Why: a sharded cluster's worker serves every shard, and one `Workers.Connect` stream per shard
is S streams per worker (64 at S = 64), most of them to the same few nodes. On `ConnectNode`
a worker holds one stream per node, and each shard's traffic is a sub-stream on it.

Why it changes no rule: each sub-stream is served by the shard's own `Connect` handler (the
group's `WorkerHub`, or whatever answers Connect for that group on this node), handed an
in-process request iterator and a `SubContext` whose `abort` ends only that sub-stream: the
worker is sent a `closed` frame with the status Connect's call would have ended with (the
"not the leader; leader=<addr>" redirect, UNAVAILABLE for a shard this node holds no replica
of, a refused hello...). Leases, fencing, the hello's checks, ACL, the per-group stream and
per-token limits and the registry are the hub's, per shard, as they were per stream. The
sub-stream runs in a task created by the outer call's handler, so it sees the outer call's
verified identity (the interceptor's contextvar is copied into the task): the hub's
`identify()` names the worker token the outer stream was authenticated with.

What counts: each sub-stream is counted by its group's hub exactly as a Connect stream
(`max_worker_streams`, `max_worker_streams_per_token`), so a worker admitted on N shards holds
N of those as before, and the limits mean what they meant. The outer streams are counted
too, per node, against the same numbers (a worker holds at most one per node, so a node
admitting N workers per group admits N outer streams), and an outer stream with no open
sub-stream is ended after the hub's hello timeout: an idle or stolen-token stream holds
nothing for long.

Order and pacing: a sub-stream's frames keep their order (one task forwards each), and the
outer stream's queue is bounded (OUT_QUEUE) so a hub's generator is paced by the writes as
Connect's is (what queues meanwhile still goes as one LeaderBatch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc

from schedd_proto import scheduler_pb2 as pb

log = logging.getLogger("schedd.workers")

OUT_QUEUE = 16                 # frames queued for the outer stream's writes, at most
RECONNECT_ROOM = 1             # handshakes a token may open beyond its stream cap (a reconnect)
SUBS_PER_SHARD = 2             # sub-streams of one stream, per shard: a shard's new sub-stream may
                               # open while its cancelled one still ends (each is counted by its hub too)


class SubStreamAborted(Exception):
    """A sub-stream's handler aborted it (`SubContext.abort`): its status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


# What a shard's sub-stream is served by: its group's Connect, or the status refusing it.
Route = Callable[[int], "Callable[[Any, Any], AsyncIterator[pb.LeaderMessage]] | tuple[grpc.StatusCode, str]"]


@dataclass(slots=True)
class StreamCounts:
    """A node's open worker streams, in all and per worker token, and what admits one more: one
    piece for the hub's Connect streams and the node's ConnectNode streams (`kind` names them
    in a refusal)."""

    kind: str                                                  # "streams" | "node streams"
    active: int = 0
    by_token: dict[str, int] = field(default_factory=dict)     # worker token -> its open streams

    def refusal(self, token: str | None, max_streams: int, max_per_token: int) -> str | None:
        """Why one more stream of `token` is refused (RESOURCE_EXHAUSTED), or None."""
        if self.active >= max_streams:
            return (f"this node already holds {self.active} worker {self.kind}, its limit "
                    f"(limits.max_worker_streams = {max_streams}); retry later or raise it")
        held = self.by_token.get(token, 0) if token is not None else 0
        if token is not None and held >= max_per_token + RECONNECT_ROOM:
            return (f"worker token {token} already holds {held} {self.kind} on this node, its limit "
                    f"(limits.max_worker_streams_per_token = {max_per_token}, plus "
                    f"{RECONNECT_ROOM} to reconnect); retry later, or give each group of workers "
                    "its own token")
        return None

    def take(self, token: str | None) -> None:
        self.active += 1
        if token is not None:
            self.by_token[token] = self.by_token.get(token, 0) + 1

    def give_back(self, token: str | None) -> None:
        self.active -= 1
        if token is None:
            return
        left = self.by_token.get(token, 0) - 1
        if left > 0:
            self.by_token[token] = left
        else:
            self.by_token.pop(token, None)


@dataclass(slots=True)
class MuxLimits:
    """The node's limits on outer streams (the hub's settings: `WorkerHub` of group 0)."""
    max_streams: int
    max_streams_per_token: int
    idle_s: float                          # an outer stream without a sub-stream is ended after this


class SubContext:
    """The `CallContext` of one sub-stream: the outer call's, but an abort ends this sub-stream
    only (module doc)."""

    def __init__(self, outer: Any, shard: int) -> None:
        self._outer = outer
        self._shard = shard
        self._code: grpc.StatusCode | None = None

    async def abort(self, code: Any, details: str = "", trailing_metadata: Sequence[tuple[str, str]] = ()) -> NoReturn:
        self._code = code
        raise SubStreamAborted(code, details)

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str]]) -> None:
        pass                                  # a sub-stream's status travels in its closed frame

    def code(self) -> Any:
        return self._code

    def invocation_metadata(self) -> Sequence[tuple[str, Any]] | None:
        """The outer call's, naming the shard as a Connect of that shard would."""
        md = [(k, v) for k, v in self._outer.invocation_metadata() or () if k != "x-schedd-shard"]
        return (*md, ("x-schedd-shard", str(self._shard)))

    def peer(self) -> str:
        return str(self._outer.peer())

    def time_remaining(self) -> float | None:
        return self._outer.time_remaining()


class SubRequests:
    """A sub-stream's request iterator: the worker's messages for it, until it half-closes."""

    def __init__(self) -> None:
        self._q: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
        self.ended = False

    def put(self, msg: pb.WorkerMessage) -> None:
        if not self.ended:
            self._q.put_nowait(msg)

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._q.put_nowait(None)

    def __aiter__(self) -> SubRequests:
        return self

    async def __anext__(self) -> pb.WorkerMessage:
        msg = await self._q.get()
        if msg is None:
            self._q.put_nowait(None)          # every later read ends too
            raise StopAsyncIteration
        return msg


@dataclass(slots=True, eq=False)
class _Sub:
    stream: int
    shard: int
    requests: SubRequests = field(default_factory=SubRequests)
    task: asyncio.Task[None] | None = None


class WorkerMux:
    """The node's `ConnectNode` (module doc): `route(k)` serves shard k's sub-streams."""

    def __init__(self, route: Route, shards: Callable[[], int], limits: Callable[[], MuxLimits],
                 identify: Callable[[], str | None]) -> None:
        self.route = route
        self.shards = shards                  # the cluster's shard count (sub-streams open at once, at most)
        self.limits = limits
        self.identify = identify              # the outer call's worker token (None: ACL disabled)
        self.counts = StreamCounts("node streams")   # open outer streams (the schedd_worker_node_streams gauge)
        self.subs_open = 0                    # their open sub-streams

    @property
    def active(self) -> int:
        return self.counts.active

    @property
    def token_streams(self) -> dict[str, int]:
        return self.counts.by_token

    async def ConnectNode(self, request_iterator: Any, context: Any) -> AsyncIterator[pb.NodeLeaderMessage]:
        lim = self.limits()
        token = self.identify()
        refused = self.counts.refusal(token, lim.max_streams, lim.max_streams_per_token)
        if refused:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
        self.counts.take(token)
        try:
            async for frame in _OuterStream(self, context, lim.idle_s).serve(request_iterator):
                yield frame
        finally:
            self.counts.give_back(token)


class _OuterStream:
    """One worker's ConnectNode call: the demultiplexer of its sub-streams."""

    def __init__(self, mux: WorkerMux, context: Any, idle_s: float) -> None:
        self.mux = mux
        self.context = context
        self.idle_s = idle_s
        self.subs: dict[int, _Sub] = {}
        self.highest = 0                      # the highest sub-stream id seen
        self.out: asyncio.Queue[pb.NodeLeaderMessage | None] = asyncio.Queue(maxsize=OUT_QUEUE)
        self.idle_since = 0.0                 # loop time the last sub-stream ended (or the stream began)
        self.refusals: set[asyncio.Task[None]] = set()   # closed frames of refused sub-streams, queued

    async def serve(self, request_iterator: Any) -> AsyncIterator[pb.NodeLeaderMessage]:
        reader = asyncio.create_task(self._demux(request_iterator))
        loop = asyncio.get_running_loop()
        self.idle_since = loop.time()
        try:
            while True:
                timeout = None if self.subs else max(0.0, self.idle_since + self.idle_s - loop.time())
                try:
                    frame = await asyncio.wait_for(self.out.get(), timeout)
                except TimeoutError:
                    if self.subs or loop.time() - self.idle_since < self.idle_s:
                        continue
                    await self.context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                             f"no sub-stream open on this worker stream for {self.idle_s:g}s")
                if frame is None:
                    break
                yield frame
        finally:
            reader.cancel()
            tasks = [s.task for s in self.subs.values() if s.task is not None] + list(self.refusals)
            for t in tasks:
                t.cancel()
            await asyncio.gather(reader, *tasks, return_exceptions=True)

    async def _demux(self, request_iterator: Any) -> None:
        """Hands each frame to its sub-stream, opening one on a new id; at the worker's half-close
        ends every sub-stream's requests, waits for them, then ends the outer stream."""
        try:
            async for frame in request_iterator:
                self._frame(frame)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the stream broke: its sub-streams end, then it
            log.debug("worker node stream from %s ended: %s", self.context.peer(), e)
        finally:
            for sub in list(self.subs.values()):
                sub.requests.end()
        tasks = [s.task for s in self.subs.values() if s.task is not None] + list(self.refusals)
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.out.put(None)

    def _frame(self, frame: pb.NodeWorkerMessage) -> None:
        sub = self.subs.get(frame.stream)
        kind = frame.WhichOneof("kind")
        if sub is None:
            if frame.stream <= self.highest or kind != "message":
                return                        # a sub-stream that ended (or never opened): late frames
            self.highest = frame.stream
            self._open(frame.stream, frame.shard, frame.message)
        elif kind == "message":
            sub.requests.put(frame.message)
        elif kind == "closed":
            if frame.closed.code == 0:
                sub.requests.end()
            elif sub.task is not None:
                sub.task.cancel()

    def _open(self, stream: int, shard: int, first: pb.WorkerMessage) -> None:
        sub = _Sub(stream, shard)
        route = self.mux.route(shard)
        if isinstance(route, tuple):
            self._closed_soon(sub, *route)
            return
        if len(self.subs) >= SUBS_PER_SHARD * max(1, self.mux.shards()):
            self._closed_soon(sub, grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"this stream already carries {len(self.subs)} sub-streams, "
                              f"{SUBS_PER_SHARD} per shard at most")
            return
        sub.requests.put(first)
        self.subs[stream] = sub
        self.mux.subs_open += 1
        sub.task = asyncio.create_task(self._run(sub, route), name=f"worker-sub-{shard}")

    def _closed_soon(self, sub: _Sub, code: grpc.StatusCode, details: str) -> None:
        """Refused before it opened: its closed frame, without holding up the reader."""
        frame = pb.NodeLeaderMessage(stream=sub.stream, shard=sub.shard,
                                     closed=pb.SubStreamClosed(code=code.value[0], details=details))
        task = asyncio.create_task(self.out.put(frame))
        self.refusals.add(task)
        task.add_done_callback(self.refusals.discard)

    async def _run(self, sub: _Sub, connect: Callable[[Any, Any], AsyncIterator[pb.LeaderMessage]]) -> None:
        """Serves one sub-stream with its shard's Connect; its end is sent as a closed frame."""
        code, details = grpc.StatusCode.OK, ""
        gen = connect(sub.requests, SubContext(self.context, sub.shard))
        try:
            async for msg in gen:
                await self.out.put(pb.NodeLeaderMessage(stream=sub.stream, shard=sub.shard, message=msg))
        except SubStreamAborted as e:
            code, details = e.code, e.details
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.CANCELLED, "the sub-stream was cancelled"
            raise
        except Exception as e:
            log.exception("worker sub-stream of shard %d failed", sub.shard)
            code, details = grpc.StatusCode.UNKNOWN, f"{type(e).__name__}: {e}"
        finally:
            await _close_quietly(gen)         # the hub's own cleanup (its stream counts) runs now
            self.subs.pop(sub.stream, None)
            self.mux.subs_open -= 1
            if not self.subs:
                self.idle_since = asyncio.get_running_loop().time()
            sub.requests.end()
            closed = pb.NodeLeaderMessage(stream=sub.stream, shard=sub.shard,
                                          closed=pb.SubStreamClosed(code=code.value[0], details=details))
            if code != grpc.StatusCode.CANCELLED:
                await self.out.put(closed)
            elif not self.out.full():        # the worker cancelled it, or the outer stream ends
                self.out.put_nowait(closed)


async def _close_quietly(gen: Any) -> None:
    try:
        await gen.aclose()
    except (Exception, asyncio.CancelledError):  # noqa: BLE001 - it ended already, with its status
        pass
