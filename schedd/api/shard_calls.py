"""Calls to a shard group this node holds no replica of (a sharded cluster whose replicas moved).

Every node hosts group 0; after `schedctl shard move` a node may hold no replica of some other
group. A call it accepts for that group (any node accepts any call) is sent to a node that
holds one, signed by this node with the caller's identity (the receiver authenticates and
authorizes the caller again, against its own replica) and naming the group (`x-schedd-shard`),
so the receiver hands it to that group only. The receiver answers only if its replica leads
(a forwarded call is never forwarded twice): a follower's UNAVAILABLE sends the call to the
next holder, the one that answered last first (the group's leader, most of the time).

Group 0's leader reads a group it does not host the same way: its quota use
(schedd.api.quota_reads) and its forecast (SchedulerService.Forecast), each merged with what
its own replicas give.

`RemoteGroup` gives a group that lives elsewhere the shape of a local group's servicer (a
method per RPC), so the routing rules (schedd.api.shard_routing) treat every group alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import Message

from schedd.api import auth

SHARD_HEADER = "x-schedd-shard"
CALL_TIMEOUT_S = 30.0
CallContext = Any


class GroupCallError(Exception):
    """Every holder refused or could not be reached; the last answer's code and details."""

    def __init__(self, code: grpc.StatusCode, details: str, trailers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details, self.trailers = code, details, trailers


def _method(service: str, method: str) -> Any:
    return descriptor_pool.Default().FindServiceByName(f"schedd.v1.{service}").FindMethodByName(method)


class GroupCalls:
    """Sends calls to the nodes holding a group's replicas (module doc)."""

    def __init__(self, node_id: str, holders: Callable[[int], Sequence[str]], signer: auth.NodeSigner,
                 now_ms: Callable[[], int], dial: Callable[[str], grpc.aio.Channel]) -> None:
        self.node_id = node_id
        self.holders = holders            # shard -> the gRPC addresses of the nodes holding a replica
        self.signer = signer
        self.now_ms = now_ms
        self.dial = dial
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._answered: dict[int, str] = {}    # shard -> the holder that answered last

    def channel(self, addr: str) -> grpc.aio.Channel:
        ch = self._channels.get(addr)
        if ch is None:
            ch = self._channels[addr] = self.dial(addr)
        return ch

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

    def _order(self, shard: int) -> list[str]:
        addrs = list(self.holders(shard))
        last = self._answered.get(shard)
        return sorted(addrs, key=lambda a: a != last)

    def metadata(self, shard: int | None, path: str) -> list[tuple[str, str]]:
        meta = self.signer.metadata(self.node_id, auth.current(), path, self.now_ms())
        if shard is not None:
            meta.append((SHARD_HEADER, str(shard)))
        return meta

    async def unary(self, shard: int, service: str, method: str, request: Message, *,
                    timeout: float | None = None, address: str = "") -> Any:
        """The answer of the group's leader (or of the node at `address` only); raises
        GroupCallError."""
        desc = _method(service, method)
        path = f"/schedd.v1.{service}/{method}"
        out_type = message_factory.GetMessageClass(desc.output_type)
        last: GroupCallError | None = None
        for addr in [address] if address else self._order(shard):
            call = self.channel(addr).unary_unary(path, request_serializer=type(request).SerializeToString,
                                                  response_deserializer=out_type.FromString)
            try:
                answer = await call(request, timeout=timeout or CALL_TIMEOUT_S, metadata=self.metadata(shard, path))
            except grpc.aio.AioRpcError as e:
                last = GroupCallError(e.code(), f"{addr}: {e.details() or e.code().name}",
                                      tuple((k, v) for k, v in e.trailing_metadata() or ()
                                            if k.startswith("x-schedd-") and isinstance(v, str)))
                if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    continue
                raise last from None
            self._answered[shard] = addr
            return answer
        raise last or GroupCallError(grpc.StatusCode.UNAVAILABLE,
                                     f"no node holding a replica of shard {shard} is known; retry shortly")

    async def stream(self, shard: int, service: str, method: str, request: Message,
                     context: CallContext) -> AsyncIterator[Any]:
        """A server-streaming call relayed from the first holder that takes it."""
        desc = _method(service, method)
        path = f"/schedd.v1.{service}/{method}"
        out_type = message_factory.GetMessageClass(desc.output_type)
        last = f"no node holding a replica of shard {shard} is known; retry shortly"
        for addr in self._order(shard):
            call = self.channel(addr).unary_stream(path, request_serializer=type(request).SerializeToString,
                                                   response_deserializer=out_type.FromString)
            stream = call(request, timeout=context.time_remaining(), metadata=self.metadata(shard, path))
            sent = False
            try:
                async for chunk in stream:
                    sent = True
                    yield chunk
                self._answered[shard] = addr
                return
            except grpc.aio.AioRpcError as e:
                last = f"{addr}: {e.details() or e.code().name}"
                if sent or e.code() != grpc.StatusCode.UNAVAILABLE:
                    await context.abort(e.code(), last)
        await context.abort(grpc.StatusCode.UNAVAILABLE, last)


class RemoteGroup:
    """A group held elsewhere, shaped as its local servicer of `service` (module doc): each
    RPC method answers what the holder's replica answers, and aborts the caller's call with
    the holder's status otherwise."""

    def __init__(self, calls: GroupCalls, shard: int, service: str) -> None:
        self._calls, self._shard, self._service = calls, shard, service

    def __getattr__(self, method: str) -> Callable[..., Any]:
        try:
            desc = _method(self._service, method)
        except KeyError:
            raise AttributeError(method) from None
        if desc.server_streaming:
            return lambda request, context: self._calls.stream(self._shard, self._service, method, request, context)
        return lambda request, context: self._unary(method, request, context)

    async def _unary(self, method: str, request: Message, context: CallContext) -> Any:
        left = context.time_remaining()
        try:
            return await self._calls.unary(self._shard, self._service, method, request,
                                           timeout=min(left, CALL_TIMEOUT_S) if left is not None else None)
        except GroupCallError as e:
            await context.abort(e.code, e.details, trailing_metadata=e.trailers)
