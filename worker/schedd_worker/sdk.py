"""Embed a schedd worker in your own service, with Python handlers.

    from schedd_worker import Worker

    worker = Worker("10.0.0.1:7070,10.0.0.2:7070", slots=8, pool="images")

    @worker.handler("resize-images")
    def resize(ctx):                 # ctx: schedd_worker.HandlerContext
        ...                          # ctx.execution_id is the idempotency key; ctx.args the job's args
        return "resized 42 images"   # kept as the attempt's output tail

    worker.run()                     # blocks; SIGINT/SIGTERM drain, then it returns

A job runs it with the handler ``{"python": {"name": "resize-images", "args_json": "..."}}``.
Plain functions run in a thread of their own and should watch ``ctx.cancel`` (a
``threading.Event``, set on timeout or cancel); ``async def`` handlers run on the worker's event
loop and are cancelled. Returning normally is success; raising is a failure (its traceback is kept).

Inside an asyncio program use ``await worker.run_async(stop_event)`` instead of ``run()``.

TLS: ``ca=`` (the deployment's CA), ``cert=``/``key=`` (the worker's certificate, for mTLS),
``token=`` (sent as ``authorization: Bearer``), or a ready ``security=`` (schedd_client.channels).

``Worker.from_context()`` takes the cluster, CA, certificate and token from a context file
(``$SCHEDD_WORKER_CONTEXT``, else ``$SCHEDD_CONTEXT``), as ``Client.from_context()`` does. A worker that cannot reach the leader
says so at WARNING from its first failed try (Python's default logging shows it on stderr).

A credential the cluster refuses (a client token or certificate where a worker token is needed,
a revoked one) makes ``run``/``run_async`` raise ``CredentialRefused`` with what to do, logged at
ERROR; only what can heal (a node down, no leader yet) is retried.

Root: like ``schedd-worker``, a Worker refuses to be made by root (``PermissionError``): every
shell job it ran would run as root. ``allow_root=True`` is the SDK's ``--allow-root``.

HTTP jobs and http sensors this worker runs obey its outbound network policy: by default
loopback, link-local and cloud metadata addresses are refused; ``http_allow=["127.0.0.1"]`` lets
them reach a local service, ``http_deny=[...]`` refuses more (``["*"]``: only ``http_allow``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schedd_client.channels import Security
from schedd_client.client import make_security
from schedd_client.context import context_from_env, load_context, parse_cluster
from schedd_client.net.policy import make_policy
from schedd_worker.cli import root_refusal
from schedd_worker.executors import HandlerContext, HttpOptions, PythonHandlers
from schedd_worker.hooks import configure_worker
from schedd_worker.runtime import CredentialRefused, WorkerRuntime
from schedd_worker.timers import DEFAULT_AHEAD

__all__ = ["Worker", "HandlerContext", "CredentialRefused"]

log = logging.getLogger("schedd_worker.sdk")

WORKER_CONTEXT_ENV = "SCHEDD_WORKER_CONTEXT"


class Worker:
    def __init__(self, cluster: str | Sequence[str] | None = None, *, name: str | None = None,
                 slots: int = 4, pool: str = "", labels: Mapping[str, str] | None = None,
                 drain_grace_s: float = 30.0, kill_grace_s: float = 5.0,
                 http_allow: Sequence[str] = (), http_deny: Sequence[str] = (),
                 ca: str | None = None, cert: str | None = None, key: str | None = None,
                 token: str | None = None, security: Security | None = None,
                 ahead: int = DEFAULT_AHEAD, allow_root: bool = False) -> None:
        if int(slots) < 1:
            raise ValueError("slots must be at least 1")
        self.cluster = parse_cluster(cluster)
        self.security = make_security(security, ca=ca, cert=cert, key=key, token=token)
        self.security.credentials_for_channel()          # a bad file fails here, named
        why = root_refusal(os.geteuid(), allow_root, flag="allow_root=True", can_map=False)
        if why:                          # before anything runs, as schedd-worker does
            raise PermissionError(why)
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.slots = int(slots)
        self.ahead = int(ahead)          # assignments not yet due held beyond the slots (a herd)
        self.pool = pool
        self.labels = dict(labels or {})
        self.drain_grace_s = drain_grace_s
        self.kill_grace_s = kill_grace_s
        self.http = HttpOptions(policy=make_policy(allow=http_allow, deny=http_deny))
        self.handlers = PythonHandlers()
        self.runtime: WorkerRuntime | None = None

    @classmethod
    def from_context(cls, path: str | os.PathLike[str] | None = None, **options: Any) -> Worker:
        """A worker for the cluster of a context file, with its CA, certificate and token, as
        ``Client.from_context()``. The file is ``path``, else ``$SCHEDD_WORKER_CONTEXT``, else
        ``$SCHEDD_CONTEXT``: a worker needs a worker token, so a shell that runs schedctl as an
        admin names the worker's own file in the first (``schedd local`` prints that line).
        ``options`` are the constructor's other keywords (``slots=``, ``pool=``, ``name=``)."""
        path = path or os.environ.get(WORKER_CONTEXT_ENV, "").strip() or None
        ctx = load_context(path) if path is not None else context_from_env()
        if ctx is None:
            raise ValueError(f"no context file: pass a path or set {WORKER_CONTEXT_ENV} or SCHEDD_CONTEXT")
        return cls(ctx.cluster, security=ctx.security, **options)

    def handler(self, name: str) -> Callable[[Callable], Callable]:
        """Decorator: register ``fn(ctx)`` (plain or ``async def``) as the Python handler ``name``."""
        def register(fn: Callable) -> Callable:
            self.handlers.register(name, fn)
            return fn
        return register

    def _runtime(self) -> WorkerRuntime:
        return WorkerRuntime(self.cluster, name=self.name, slots=self.slots, pool=self.pool,
                             labels=self.labels, python_handlers=self.handlers,
                             drain_grace_s=self.drain_grace_s, kill_grace_s=self.kill_grace_s,
                             http=self.http, hooks=configure_worker(self.name),
                             security=self.security, ahead=self.ahead, warn_at_once=True)

    async def run_async(self, stop: asyncio.Event | None = None) -> None:
        """Run until ``stop`` is set (forever without one), then drain and return. Raises
        ``CredentialRefused`` at once when the cluster refuses the
        credential (not a worker token, revoked, not allowed this pool): waiting cannot fix it."""
        self.runtime = self._runtime()
        await self.runtime.run(stop if stop is not None else asyncio.Event())

    def run(self) -> None:
        """Blocking: run until SIGINT/SIGTERM, drain, return. A second signal cuts the drain
        grace short (running attempts are cancelled and reported)."""
        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            installed: list[signal.Signals] = []

            def on_signal() -> None:
                if stop.is_set():
                    if self.runtime is not None:
                        log.warning("second signal: cancelling running attempts now")
                        self.runtime.hurry()
                else:
                    log.info("signal received: draining (again to cancel running attempts)")
                    stop.set()

            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    try:
                        loop.add_signal_handler(sig, on_signal)
                        installed.append(sig)
                    except (NotImplementedError, RuntimeError):
                        pass
            try:
                await self.run_async(stop)
            finally:
                for sig in installed:
                    loop.remove_signal_handler(sig)

        asyncio.run(main())
