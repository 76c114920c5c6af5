"""What both clients are built on: the addresses, the failover state and one channel per node
(``Transport``), and how one call or one paged list is carried out, blocking
(``BlockingTransport``) or awaited (``AsyncTransport``).

The public methods are declared per area on top of these (``_methods``); ``client.py`` adds
the constructors. ``backup`` streams a snapshot over the same channels.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from schedd_proto import acl_pb2_grpc, backup_pb2_grpc, calendars_pb2_grpc, dags_pb2_grpc, logs_pb2_grpc, membership_pb2_grpc
from schedd_proto import scheduler_pb2_grpc as pb_grpc

from ._failover import Router
from ._plans import Call, Pager, Plan
from .context import parse_cluster

__all__ = ["AsyncTransport", "BlockingTransport", "Transport", "auth_metadata"]

T = TypeVar("T")
ChannelT = TypeVar("ChannelT", grpc.Channel, grpc.aio.Channel)


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The metadata that authenticates a call: ``authorization: Bearer <token>`` ("": none)."""
    token = token.strip()
    return (("authorization", f"Bearer {token}"),) if token else ()


class Transport(Generic[ChannelT]):
    """What both clients hold: the addresses, the failover state and one channel per node."""

    def __init__(
        self,
        cluster: str | Sequence[str] | None,
        timeout: float,
        channel_factory: Callable[[str], ChannelT],
        token: str = "",
        tls_probe: Callable[[str], bool] | None = None,
    ) -> None:
        self.addresses = parse_cluster(cluster)
        self.timeout = timeout
        self._auth = auth_metadata(token)
        self._router = Router(self.addresses, timeout, tls_probe=tls_probe)
        self._channel_factory: Callable[[str], ChannelT] = channel_factory
        self._channels: dict[str, ChannelT] = {}
        self._stubs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _method(self, address: str, call: Call) -> Any:
        """The stub method for ``call`` on the node at ``address`` (channels are made on first use)."""
        with self._lock:
            stubs = self._stubs.get(address)
            if stubs is None:
                channel = self._channels[address] = self._channel_factory(address)
                stubs = self._stubs[address] = {
                    "scheduler": pb_grpc.SchedulerStub(channel),
                    "cluster": pb_grpc.ClusterStub(channel),
                    "workers": pb_grpc.WorkersStub(channel),
                    "dags": dags_pb2_grpc.DagsStub(channel),
                    "acl": acl_pb2_grpc.AclStub(channel),
                    "audit": acl_pb2_grpc.AuditStub(channel),
                    "membership": membership_pb2_grpc.MembershipStub(channel),
                    "backup": backup_pb2_grpc.BackupStub(channel),   # backup.save_snapshot
                    "logs": logs_pb2_grpc.LogsStub(channel),         # run_logs.read_logs
                    "calendars": calendars_pb2_grpc.CalendarsStub(channel),
                }
        return getattr(stubs[call.service], call.method)

    def _shards(self) -> int:
        """The cluster's shard count as the answers so far said it (0: not told yet, or unsharded)."""
        return self._router.shard_map.shards

    def _take_channels(self) -> list[ChannelT]:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
        return channels

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(self.addresses)!r}, timeout={self.timeout:g})"


class BlockingTransport(Transport[grpc.Channel]):
    """Calls carried out on the caller's thread."""

    def _invoke(self, call: Call) -> Message:
        attempts = self._router.attempts(call)
        for address, pause, timeout in attempts:
            if pause:
                time.sleep(pause)
            try:
                method = self._method(address, call)
                kw = {"timeout": timeout, "metadata": (*call.metadata, *self._auth)}
                if attempts.route:           # the trailers may name the shard's leader
                    response, rpc = method.with_call(call.request, **kw)
                    trailers = tuple(rpc.trailing_metadata() or ())
                else:
                    response, trailers = method(call.request, **kw), ()
            except grpc.RpcError as err:
                if (final := attempts.failed(address, err)) is not None:
                    raise final from None
            else:
                attempts.succeeded(address, trailers)
                return response
        raise attempts.exhausted()

    def _run(self, plan: Plan[T]) -> T:
        return plan.combine([self._invoke(call) for call in plan.calls])

    def _iterate(self, pager: Pager[T]) -> Iterator[T]:
        while pager.call is not None:
            yield from pager.feed(self._invoke(pager.call))


class AsyncTransport(Transport[grpc.aio.Channel]):
    """Calls awaited on the running event loop."""

    async def _invoke(self, call: Call) -> Message:
        attempts = self._router.attempts(call)
        for address, pause, timeout in attempts:
            if pause:
                await asyncio.sleep(pause)
            try:
                pending = self._method(address, call)(
                    call.request, timeout=timeout, metadata=(*call.metadata, *self._auth)
                )
                response: Message = await pending
                trailers = tuple(await pending.trailing_metadata() or ()) if attempts.route else ()
            except grpc.RpcError as err:
                if (final := attempts.failed(address, err)) is not None:
                    raise final from None
            else:
                attempts.succeeded(address, trailers)
                return response
        raise attempts.exhausted()

    async def _run(self, plan: Plan[T]) -> T:
        return plan.combine([await self._invoke(call) for call in plan.calls])

    async def _iterate(self, pager: Pager[T]) -> AsyncIterator[T]:
        while pager.call is not None:
            for item in pager.feed(await self._invoke(pager.call)):
                yield item
