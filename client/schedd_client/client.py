"""``Client`` (blocking, over ``grpc``) and ``AsyncClient`` (over ``grpc.aio``).

Both expose the same methods, which are the builders of ``_plans`` bound to the client: the
builder says what to send and how to read the answer, ``_failover`` says which node to ask and
when to give up, and the two classes below only carry calls out (``_invoke``) and walk pages.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
import time
import typing
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from schedd_proto import acl_pb2_grpc, backup_pb2_grpc, dags_pb2_grpc, membership_pb2_grpc
from schedd_proto import scheduler_pb2_grpc as pb_grpc

from . import _plans
from ._failover import Router
from ._plans import Call, Pager, Plan
from .channels import Security, env_token, open_aio_channel, open_channel, speaks_tls, with_files
from .context import context_from_env, load_context

__all__ = ["Client", "AsyncClient", "DEFAULT_CLUSTER", "parse_cluster"]

DEFAULT_CLUSTER = "127.0.0.1:7070"
CLUSTER_ENV = "SCHEDD_CLUSTER"


def _token(token: str | None) -> str | None:
    """The token given, else ``$SCHEDD_TOKEN`` (unset or "": none)."""
    return env_token() if token is None else (token.strip() or None)


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The metadata that authenticates a call: ``authorization: Bearer <token>`` ("": none)."""
    token = token.strip()
    return (("authorization", f"Bearer {token}"),) if token else ()

P = ParamSpec("P")
T = TypeVar("T")
ChannelT = TypeVar("ChannelT", grpc.Channel, grpc.aio.Channel)


def parse_cluster(cluster: str | Sequence[str] | None) -> list[str]:
    """The node addresses from ``"host:port,host:port"`` or a list; ``None`` reads the
    ``SCHEDD_CLUSTER`` environment variable, else ``127.0.0.1:7070``."""
    if cluster is None:
        cluster = os.environ.get(CLUSTER_ENV, "").strip() or DEFAULT_CLUSTER
    parts = cluster.split(",") if isinstance(cluster, str) else list(cluster)
    addresses = list(dict.fromkeys(part.strip() for part in parts if part.strip()))
    if not addresses:
        raise ValueError("no cluster addresses given")
    return addresses


def _tls_probe(security: Security, channel_factory: object) -> Callable[[str], bool] | None:
    """Whether to ask a node that closed a plaintext connection if it speaks TLS (_failover):
    for this client's own plaintext channels only (a given factory decides its own security)."""
    return speaks_tls if channel_factory is None and not security.secure else None


class _Transport(Generic[ChannelT]):
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
                    "dags": dags_pb2_grpc.DagsStub(channel),   # methods attached by .dags
                    "acl": acl_pb2_grpc.AclStub(channel),      # methods attached by .acl
                    "audit": acl_pb2_grpc.AuditStub(channel),
                    "membership": membership_pb2_grpc.MembershipStub(channel),   # methods by .membership
                    "backup": backup_pb2_grpc.BackupStub(channel),   # .backup.save_snapshot
                }
        return getattr(stubs[call.service], call.method)

    def _take_channels(self) -> list[ChannelT]:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
        return channels

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(self.addresses)!r}, timeout={self.timeout:g})"


# ---------------------------------------------------------------- binding the builders


def _result_type(build: Callable[..., Any]) -> Any:
    """``pb.Job`` for a builder annotated ``-> Plan[pb.Job]`` or ``-> Pager[pb.Job]``."""
    return typing.get_args(typing.get_type_hints(build)["return"])[0]


def _as_method(method: Callable[..., Any], build: Callable[..., Any], returns: Any) -> None:
    """Give ``method`` the builder's name, docs and signature, with ``self`` and ``returns``."""
    functools.update_wrapper(method, build)
    signature = inspect.signature(build)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *signature.parameters.values()], return_annotation=returns
    )


def _blocking(build: Callable[P, Plan[T]]) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(build(*args, **kwargs))

    _as_method(method, build, _result_type(build))
    return method


def _blocking_pages(build: Callable[P, Pager[T]]) -> Callable[Concatenate[Client, P], Iterator[T]]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._iterate(build(*args, **kwargs))

    _as_method(method, build, Iterator[_result_type(build)])  # type: ignore[misc]
    return method


def _blocking_list(build: Callable[P, Pager[T]]) -> Callable[Concatenate[Client, P], list[T]]:
    """A paged list returned whole (for methods that always returned a list)."""

    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        return list(self._iterate(build(*args, **kwargs)))

    _as_method(method, build, list[_result_type(build)])  # type: ignore[misc]
    return method


def _awaitable_list(build: Callable[P, Pager[T]]) -> Callable[Concatenate[AsyncClient, P], typing.Awaitable[list[T]]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> list[T]:
        return [item async for item in self._iterate(build(*args, **kwargs))]

    _as_method(method, build, list[_result_type(build)])  # type: ignore[misc]
    return method


def _awaitable(build: Callable[P, Plan[T]]) -> Callable[Concatenate[AsyncClient, P], typing.Awaitable[T]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(build(*args, **kwargs))

    _as_method(method, build, _result_type(build))
    return method


def _async_pages(build: Callable[P, Pager[T]]) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[T]]:
    def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        return self._iterate(build(*args, **kwargs))

    _as_method(method, build, AsyncIterator[_result_type(build)])  # type: ignore[misc]
    return method


# ---------------------------------------------------------------- the clients


def make_security(security: Security | None = None, *, tls: bool | None = None,
                  ca: str | os.PathLike[str] | None = None, cert: str | os.PathLike[str] | None = None,
                  key: str | os.PathLike[str] | None = None, token: str | None = None) -> Security:
    """The ``Security`` of a client's keyword options: ``security`` (default plaintext) with any
    of ``tls``, ``ca``, ``cert``, ``key``, ``token`` that are given applied over it."""
    return with_files(security or Security(), ca=ca, cert=cert, key=key, token=token, tls=tls)


def _context_args(path: str | os.PathLike[str] | None) -> tuple[list[str], Security]:
    ctx = load_context(path) if path is not None else context_from_env()
    if ctx is None:
        raise ValueError("no context file: pass a path or set SCHEDD_CONTEXT")
    return ctx.cluster, ctx.security


class Client(_Transport[grpc.Channel]):
    """A blocking client of a schedd cluster; safe to share between threads.

    ``cluster`` is ``"host:port,host:port"`` or a list (default: ``$SCHEDD_CLUSTER``, else
    ``127.0.0.1:7070``); any node will do. ``timeout`` bounds each method call, failover
    included. TLS: ``ca=`` (the deployment's CA file; ``tls=True`` alone trusts the system
    roots), and ``cert=``/``key=`` for a client certificate (mTLS); ``token=`` (the bearer token
    ``<accessor>.<secret>``, default ``$SCHEDD_TOKEN``) is sent as ``authorization: Bearer
    <token>``, never in cleartext to a non-loopback address; ``security=`` takes a ready
    ``schedd_client.channels.Security``. ``Client.from_context()`` reads all of them from
    ``$SCHEDD_CONTEXT`` (``schedd_client.context``). ``channel_factory(address) -> grpc.Channel``
    replaces the channel altogether (interceptors, tests; the token then rides on each call).
    Use as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        cluster: str | Sequence[str] | None = None,
        *,
        timeout: float = 15.0,
        tls: bool | None = None,
        ca: str | os.PathLike[str] | None = None,
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
        token: str | None = None,
        security: Security | None = None,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
    ) -> None:
        self.security = make_security(security, tls=tls, ca=ca, cert=cert, key=key, token=_token(token))
        self.security.credentials_for_channel()          # a bad file fails here, named
        secured = self.security
        super().__init__(cluster, timeout,
                         channel_factory or (lambda address: open_channel(address, secured, token_in_calls=True)),
                         secured.token or "", _tls_probe(secured, channel_factory))

    @classmethod
    def from_context(cls, path: str | os.PathLike[str] | None = None, *, timeout: float = 15.0) -> Client:
        """A client for the cluster of a context file (default: ``$SCHEDD_CONTEXT``)."""
        cluster, security = _context_args(path)
        return cls(cluster, timeout=timeout, security=security)

    def close(self) -> None:
        for channel in self._take_channels():
            channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _invoke(self, call: Call) -> Message:
        attempts = self._router.attempts(call)
        for address, pause, timeout in attempts:
            if pause:
                time.sleep(pause)
            try:
                response: Message = self._method(address, call)(
                    call.request, timeout=timeout, metadata=(*call.metadata, *self._auth)
                )
            except grpc.RpcError as err:
                if (final := attempts.failed(address, err)) is not None:
                    raise final from None
            else:
                attempts.succeeded(address)
                return response
        raise attempts.exhausted()

    def _run(self, plan: Plan[T]) -> T:
        return plan.combine([self._invoke(call) for call in plan.calls])

    def _iterate(self, pager: Pager[T]) -> Iterator[T]:
        while pager.call is not None:
            yield from pager.feed(self._invoke(pager.call))

    put_job = _blocking(_plans.put_job)
    put_jobs = _blocking(_plans.put_jobs)
    get_job = _blocking(_plans.get_job)
    list_jobs = _blocking_pages(_plans.list_jobs)
    pause_job = _blocking(_plans.pause_job)
    resume_job = _blocking(_plans.resume_job)
    delete_job = _blocking(_plans.delete_job)
    trigger_job = _blocking(_plans.trigger_job)
    backfill_job = _blocking(_plans.backfill_job)
    list_instants = _blocking_list(_plans.list_instants)
    set_quota = _blocking(_plans.set_quota)
    list_quotas = _blocking(_plans.list_quotas)
    list_executions = _blocking_pages(_plans.list_executions)
    get_execution = _blocking(_plans.get_execution)
    cancel_execution = _blocking(_plans.cancel_execution)
    list_workers = _blocking(_plans.list_workers)
    cluster_status = _blocking(_plans.cluster_status)
    node_info = _blocking(_plans.node_info)

    def save_snapshot(self, path: str | os.PathLike[str], *, timeout: float | None = None) -> Any:
        """Save a consistent snapshot of the cluster to ``path``; returns its SnapshotMeta
        (``schedd_client.backup.save_snapshot``)."""
        from .backup import SAVE_TIMEOUT_S, save_snapshot
        return save_snapshot(self, path, timeout=timeout or SAVE_TIMEOUT_S)


class AsyncClient(_Transport[grpc.aio.Channel]):
    """The asyncio twin of ``Client``: same constructor and methods, awaited (list methods return
    async iterators). ``channel_factory`` returns a ``grpc.aio.Channel``. Use ``async with`` or
    ``await close()``; channels are made on first use, inside the running event loop.
    """

    def __init__(
        self,
        cluster: str | Sequence[str] | None = None,
        *,
        timeout: float = 15.0,
        tls: bool | None = None,
        ca: str | os.PathLike[str] | None = None,
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
        token: str | None = None,
        security: Security | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
    ) -> None:
        self.security = make_security(security, tls=tls, ca=ca, cert=cert, key=key, token=_token(token))
        self.security.credentials_for_channel()
        secured = self.security
        super().__init__(cluster, timeout,
                         channel_factory or (lambda address: open_aio_channel(address, secured,
                                                                              token_in_calls=True)),
                         secured.token or "", _tls_probe(secured, channel_factory))

    @classmethod
    def from_context(cls, path: str | os.PathLike[str] | None = None, *,
                     timeout: float = 15.0) -> AsyncClient:
        """An async client for the cluster of a context file (default: ``$SCHEDD_CONTEXT``)."""
        cluster, security = _context_args(path)
        return cls(cluster, timeout=timeout, security=security)

    async def close(self) -> None:
        for channel in self._take_channels():
            await channel.close(grace=None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _invoke(self, call: Call) -> Message:
        attempts = self._router.attempts(call)
        for address, pause, timeout in attempts:
            if pause:
                await asyncio.sleep(pause)
            try:
                response: Message = await self._method(address, call)(
                    call.request, timeout=timeout, metadata=(*call.metadata, *self._auth)
                )
            except grpc.RpcError as err:
                if (final := attempts.failed(address, err)) is not None:
                    raise final from None
            else:
                attempts.succeeded(address)
                return response
        raise attempts.exhausted()

    async def _run(self, plan: Plan[T]) -> T:
        return plan.combine([await self._invoke(call) for call in plan.calls])

    async def _iterate(self, pager: Pager[T]) -> AsyncIterator[T]:
        while pager.call is not None:
            for item in pager.feed(await self._invoke(pager.call)):
                yield item

    put_job = _awaitable(_plans.put_job)
    put_jobs = _awaitable(_plans.put_jobs)
    get_job = _awaitable(_plans.get_job)
    list_jobs = _async_pages(_plans.list_jobs)
    pause_job = _awaitable(_plans.pause_job)
    resume_job = _awaitable(_plans.resume_job)
    delete_job = _awaitable(_plans.delete_job)
    trigger_job = _awaitable(_plans.trigger_job)
    backfill_job = _awaitable(_plans.backfill_job)
    list_instants = _awaitable_list(_plans.list_instants)
    set_quota = _awaitable(_plans.set_quota)
    list_quotas = _awaitable(_plans.list_quotas)
    list_executions = _async_pages(_plans.list_executions)
    get_execution = _awaitable(_plans.get_execution)
    cancel_execution = _awaitable(_plans.cancel_execution)
    list_workers = _awaitable(_plans.list_workers)
    cluster_status = _awaitable(_plans.cluster_status)
    node_info = _awaitable(_plans.node_info)

    async def save_snapshot(self, path: str | os.PathLike[str], *, timeout: float | None = None) -> Any:
        """Save a consistent snapshot of the cluster to ``path``; returns its SnapshotMeta
        (``schedd_client.backup.save_snapshot_async``)."""
        from .backup import SAVE_TIMEOUT_S, save_snapshot_async
        return await save_snapshot_async(self, path, timeout=timeout or SAVE_TIMEOUT_S)
