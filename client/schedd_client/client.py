"""``Client`` (blocking, over ``grpc``) and ``AsyncClient`` (over ``grpc.aio``).

Both have the same methods, declared per area in ``_methods`` (jobs, runs, DAGs, access
control, the cluster): each is a builder of ``_plans`` (what to send, how to read the answer)
carried out by ``_transport`` (which node to ask and when to give up: ``_failover``). This module
adds the constructors: the addresses, the security options and the channels.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from types import TracebackType

import grpc
import grpc.aio

from ._methods import (
    AclMixin,
    AsyncAclMixin,
    AsyncCalendarsMixin,
    AsyncClusterMixin,
    AsyncDagsMixin,
    AsyncJobsMixin,
    AsyncRunsMixin,
    CalendarsMixin,
    ClusterMixin,
    DagsMixin,
    JobsMixin,
    RunsMixin,
)
from ._transport import auth_metadata
from .channels import Security, env_token, open_aio_channel, open_channel, speaks_tls, with_files
from .context import CLUSTER_ENV, DEFAULT_CLUSTER, context_from_env, load_context, parse_cluster, resolve

__all__ = ["Client", "AsyncClient", "DEFAULT_CLUSTER", "CLUSTER_ENV", "auth_metadata", "make_security",
           "parse_cluster"]


def _token(token: str | None) -> str | None:
    """The token given, else ``$SCHEDD_TOKEN`` (unset or "": none)."""
    return env_token() if token is None else (token.strip() or None)


def _tls_probe(security: Security, channel_factory: object) -> Callable[[str], bool] | None:
    """Whether to ask a node that closed a plaintext connection if it speaks TLS (_failover):
    for this client's own plaintext channels only (a given factory decides its own security)."""
    return speaks_tls if channel_factory is None and not security.secure else None


def make_security(security: Security | None = None, *, tls: bool | None = None,
                  ca: str | os.PathLike[str] | None = None, cert: str | os.PathLike[str] | None = None,
                  key: str | os.PathLike[str] | None = None, token: str | None = None) -> Security:
    """The ``Security`` of a client's keyword options: ``security`` (default plaintext) with any
    of ``tls``, ``ca``, ``cert``, ``key``, ``token`` that are given applied over it."""
    return with_files(security or Security(), ca=ca, cert=cert, key=key, token=token, tls=tls)


def _resolved(cluster: str | Sequence[str] | None, security: Security | None, channel_factory: object, *,
              tls: bool | None, ca: str | os.PathLike[str] | None, cert: str | os.PathLike[str] | None,
              key: str | os.PathLike[str] | None, token: str | None
              ) -> tuple[str | Sequence[str] | None, Security]:
    """The addresses and security of a client's constructor arguments. Without ``security=`` or
    ``channel_factory=`` they are found as schedctl finds them (``context.resolve``): an argument
    first, then ``$SCHEDD_CLUSTER``, ``$SCHEDD_CA``/``CERT``/``KEY``, ``$SCHEDD_TOKEN``, then the
    context file of ``$SCHEDD_CONTEXT``; so ``Client()`` in a shell where schedctl works reaches
    the same cluster with the same certificates and token."""
    if security is not None or channel_factory is not None:
        return cluster, make_security(security, tls=tls, ca=ca, cert=cert, key=key, token=_token(token))
    given = cluster if cluster is None or isinstance(cluster, str) else ",".join(cluster)
    addresses, found = resolve(given, ca=ca, cert=cert, key=key, token=_token(token) if token is not None else None)
    return addresses, make_security(found, tls=tls)


def _context_args(path: str | os.PathLike[str] | None) -> tuple[list[str], Security]:
    ctx = load_context(path) if path is not None else context_from_env()
    if ctx is None:
        raise ValueError("no context file: pass a path or set SCHEDD_CONTEXT")
    return ctx.cluster, ctx.security


class Client(JobsMixin, RunsMixin, DagsMixin, AclMixin, ClusterMixin, CalendarsMixin):
    """A blocking client of a schedd cluster; safe to share between threads.

    ``cluster`` is ``"host:port,host:port"`` or a list (default: ``$SCHEDD_CLUSTER``, else the
    cluster of ``$SCHEDD_CONTEXT``'s file, else ``127.0.0.1:7070``); any node will do. With no
    security argument, the certificates and token come from the environment as schedctl takes
    them (``$SCHEDD_CA``/``CERT``/``KEY``/``TOKEN``, else the context file): ``Client()`` reaches
    the cluster ``schedctl`` reaches. ``timeout`` bounds each method call, failover
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
        cluster, self.security = _resolved(cluster, security, channel_factory, tls=tls, ca=ca, cert=cert,
                                           key=key, token=token)
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


class AsyncClient(AsyncJobsMixin, AsyncRunsMixin, AsyncDagsMixin, AsyncAclMixin, AsyncClusterMixin,
                  AsyncCalendarsMixin):
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
        cluster, self.security = _resolved(cluster, security, channel_factory, tls=tls, ca=ca, cert=cert,
                                           key=key, token=token)
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
