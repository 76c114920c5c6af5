"""One stream per node (`Workers.ConnectNode`), carrying the sub-streams of every shard it leads.

Why: a worker of a sharded cluster serves every shard, and one `Workers.Connect` per shard was
S gRPC streams (64 at S = 64) to the few nodes that lead them. Here every lane whose leader is
node N opens a sub-stream on the worker's one stream to N; the node serves each sub-stream with
that shard's own Connect handler (schedd.leader.worker_mux), so hello checks, leases, fencing,
the redirect of a node that does not lead ("leader=" in a FAILED_PRECONDITION) and the rest
are exactly as on a Connect stream of that shard.

Why the link notices nothing: a sub-stream (`SubCall`) is read and written as the link reads
and writes a `Connect` call (`write`, `read` returning messages then `grpc.aio.EOF`, `done_writing`,
`cancel`, `done`), and it ends as that call would: with the status the node's handler ended
it with (a `grpc.aio.AioRpcError`), or the outer stream's when that fails (a node SIGKILLed
ends every sub-stream on it with UNAVAILABLE at once). So the leader search, redirects, the
term watch, the backoff and the Welcome's checks stay the link's (`leader_link`).

The outer stream is opened by the first sub-stream to a node, with that link's channel options
(keepalive pings only to a node that accepts them), and ended when its last sub-stream ends: a
worker holds exactly one stream per node it serves shards of, none to the others. A node that
answers UNIMPLEMENTED (an older build) is remembered for OLD_NODE_S: the link falls back to a
Connect per shard there (`speaks`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import grpc.aio

from schedd_client.channels import Security, open_aio_channel
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

__all__ = ["NodeStreams", "NodeStream", "SubCall", "OLD_NODE_S"]

log = logging.getLogger("schedd.worker")

OLD_NODE_S = 300.0              # a node that refused ConnectNode is asked again after this long


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class SubCall:
    """One shard's sub-stream, shaped as the `Connect` call the link would hold (module doc)."""

    def __init__(self, node: NodeStream, stream: int, shard: int) -> None:
        self.node = node
        self.stream = stream
        self.shard = shard
        self._inbox: asyncio.Queue[pb.LeaderMessage | None] = asyncio.Queue()
        self._error: grpc.aio.AioRpcError | None = None
        self._done = False                   # ended: by the node, the outer stream or us
        self._written = False                # half-closed by us

    # ------------------------------------------------------------ the call's interface

    async def write(self, msg: pb.WorkerMessage) -> None:
        if self._done or self._written:
            raise self._error or _error(grpc.StatusCode.CANCELLED, "the sub-stream is closed for writing")
        await self._send(pb.NodeWorkerMessage(stream=self.stream, shard=self.shard, message=msg))

    async def _send(self, frame: pb.NodeWorkerMessage) -> None:
        """A write on the node's stream; its failure raised as this sub-stream's error (an
        AioRpcError, as a Connect call's write raises), never as a CancelledError the link
        would take for its own cancellation."""
        try:
            await self.node.send(frame)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise self._error or _error(grpc.StatusCode.UNAVAILABLE,
                                        f"the stream to {self.node.address} ended") from None
        except grpc.aio.AioRpcError:
            raise
        except Exception as e:  # noqa: BLE001 - the stream broke: read as a failed call
            raise self._error or _error(grpc.StatusCode.UNAVAILABLE,
                                        f"the stream to {self.node.address}: {e}") from None

    async def read(self) -> Any:
        msg = await self._inbox.get()
        if msg is None:
            self._inbox.put_nowait(None)     # every later read ends the same way
            if self._error is not None:
                raise self._error
            return grpc.aio.EOF
        return msg

    async def done_writing(self) -> None:
        if self._done or self._written:
            return
        self._written = True
        await self._send(pb.NodeWorkerMessage(stream=self.stream, shard=self.shard,
                                              closed=pb.SubStreamClosed(code=0)))

    def cancel(self) -> bool:
        if self._done:
            return False
        self.end(_error(grpc.StatusCode.CANCELLED, "cancelled by the worker"))
        self.node.cancelled(self)
        return True

    def done(self) -> bool:
        return self._done

    # ------------------------------------------------------------ from the node's stream

    def deliver(self, msg: pb.LeaderMessage) -> None:
        if not self._done:
            self._inbox.put_nowait(msg)

    def end(self, error: grpc.aio.AioRpcError | None) -> None:
        """The sub-stream is over: OK (None, reads end with EOF) or `error` (reads raise it)."""
        if self._done:
            return
        self._done = True
        self._error = error
        self._inbox.put_nowait(None)
        self.node.ended(self)


class NodeStream:
    """The worker's one `ConnectNode` call to one node, and the sub-streams on it."""

    def __init__(self, owner: NodeStreams, address: str, channel: grpc.aio.Channel) -> None:
        self.owner = owner
        self.address = address
        self.channel = channel
        self.call = pb_grpc.WorkersStub(channel).ConnectNode()
        self.subs: dict[int, SubCall] = {}
        self._next = 0
        self._lock = asyncio.Lock()          # one write at a time on the call
        self.closed = False
        self._reader = asyncio.create_task(self._read(), name=f"worker-node-stream-{address}")

    def open(self, shard: int) -> SubCall:
        self._next += 1
        sub = self.subs[self._next] = SubCall(self, self._next, shard)
        return sub

    async def send(self, frame: pb.NodeWorkerMessage) -> None:
        async with self._lock:
            await self.call.write(frame)

    def ended(self, sub: SubCall) -> None:
        if self.subs.get(sub.stream) is sub:
            del self.subs[sub.stream]
        if not self.subs:
            self.close()

    def cancelled(self, sub: SubCall) -> None:
        """Tell the node, unless the whole stream is closing anyway (its last sub-stream)."""
        if not self.closed:
            frame = pb.NodeWorkerMessage(stream=sub.stream, shard=sub.shard, closed=pb.SubStreamClosed(
                code=grpc.StatusCode.CANCELLED.value[0], details="cancelled by the worker"))
            self.owner.spawn(self._quiet_send(frame))

    async def _quiet_send(self, frame: pb.NodeWorkerMessage) -> None:
        try:
            await self.send(frame)
        except Exception as e:  # noqa: BLE001 - the stream failed: the reader ends every sub-stream
            log.debug("worker stream to %s: %s", self.address, e)

    def close(self) -> None:
        """No sub-stream left (or the stream failed): end the call and the channel."""
        if self.closed:
            return
        self.closed = True
        self.owner.forget(self)
        self.call.cancel()
        self.owner.spawn(self.channel.close())

    async def _read(self) -> None:
        error = _error(grpc.StatusCode.UNAVAILABLE, f"{self.address} ended the worker stream")
        try:
            while True:
                frame = await self.call.read()
                if frame is grpc.aio.EOF:
                    break
                sub = self.subs.get(frame.stream)
                if sub is None:
                    continue                     # one we cancelled: its last frames
                if frame.WhichOneof("kind") == "message":
                    sub.deliver(frame.message)
                elif frame.WhichOneof("kind") == "closed":
                    c = frame.closed
                    sub.end(None if c.code == 0 else _error(_status(c.code), c.details))
        except grpc.aio.AioRpcError as e:
            error = e
        except asyncio.CancelledError:
            error = _error(grpc.StatusCode.CANCELLED, "the worker stream was closed")
        except Exception as e:  # noqa: BLE001 - a broken frame: end this node's sub-streams
            error = _error(grpc.StatusCode.INTERNAL, f"worker stream to {self.address}: {e}")
        finally:
            self.closed = True
            self.owner.forget(self)
            for sub in list(self.subs.values()):
                sub.end(error)
            if not self.call.done():
                self.call.cancel()
            await self.channel.close()


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _status(code: int) -> grpc.StatusCode:
    return _CODES.get(code, grpc.StatusCode.UNKNOWN)


class NodeStreams:
    """The worker's streams by node address, shared by every lane (module doc)."""

    def __init__(self, security: Security, dial: Callable[[str], str]) -> None:
        self.security = security
        self.dial = dial
        self.nodes: dict[str, NodeStream] = {}
        self._old: dict[str, float] = {}         # address -> loop time it answered UNIMPLEMENTED
        self._tasks: set[asyncio.Task[Any]] = set()

    def speaks(self, address: str) -> bool:
        """Whether to open a sub-stream there (no: an older node, for a while)."""
        since = self._old.get(address)
        return since is None or asyncio.get_running_loop().time() - since >= OLD_NODE_S

    def old_node(self, address: str) -> None:
        if address not in self._old:
            log.info("%s does not take one stream per node (an older build): a stream per shard there", address)
        self._old[address] = asyncio.get_running_loop().time()

    def open(self, address: str, shard: int, options: Sequence[tuple[str, Any]]) -> SubCall:
        """A sub-stream of `shard` on the stream to `address` (opened now if there is none)."""
        node = self.nodes.get(address)
        if node is None or node.closed:
            channel = open_aio_channel(self.dial(address), self.security, list(options))
            node = self.nodes[address] = NodeStream(self, address, channel)
        return node.open(shard)

    @property
    def open_calls(self) -> int:
        """gRPC streams open now (one per node with a sub-stream)."""
        return len(self.nodes)

    def forget(self, node: NodeStream) -> None:
        if self.nodes.get(node.address) is node:
            del self.nodes[node.address]

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for node in list(self.nodes.values()):
            node.close()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
