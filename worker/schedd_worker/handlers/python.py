"""The Python handler kind: a function registered on this worker, by name.

Python
    Functions from a `PythonHandlers` registry, called with one `HandlerContext`. Coroutine
    functions run on the event loop and are cancelled on timeout/cancel; plain functions run in a
    daemon thread of their own and get a `threading.Event` in `ctx.cancel`, set on timeout/cancel.
    A thread cannot be killed: after setting the event we wait `kill_grace_s` for it to return,
    then report anyway (the error says the thread may still be running). Daemon threads (not the
    default executor) so that a stuck handler neither starves other work nor blocks shutdown.
    Python handlers run inside the worker process, as the worker's user: a worker that maps teams
    to Unix users refuses them for a mapped team unless its mapping says allow_python = true.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .base import (FAILED, SUCCEEDED, Assignment, LightEvent, Result, Stop, fmt_seconds, format_rfc3339,
                   in_daemon_thread, race, start_eagerly, stopped, tail_text)

__all__ = ["PythonHandler", "PythonHandlers", "HandlerContext", "Call", "prepare", "finish", "settled"]


@dataclass(slots=True, frozen=True)
class HandlerContext:
    """What a Python handler is called with."""
    execution_id: str
    job: str
    scheduled_ms: int
    scheduled_time: str      # RFC 3339 UTC
    attempt: int
    fencing_token: int
    args: Any                # parsed args_json, or None
    cancel: Any              # asyncio.Event (coroutine functions) | threading.Event (plain ones)
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)  # the job's env_secret
    params: Mapping[str, str] = field(default_factory=dict)                  # the run's parameters


class PythonHandlers:
    """Registry of Python handler functions, by name.

        handlers = PythonHandlers()

        @handlers.register("send-report")
        def send_report(ctx: HandlerContext): ...

    Registering a second, different function under a taken name is an error (it would silently
    change what a job runs); registering the same function again is a no-op.
    """

    def __init__(self) -> None:
        self._fns: dict[str, Callable] = {}
        self._async: dict[str, bool] = {}        # is it a coroutine function: asked once, here
        self._lock = threading.Lock()

    def register(self, name: str, fn: Callable | None = None) -> Callable:
        if not isinstance(name, str) or not name:
            raise ValueError("a python handler needs a non-empty name")
        if fn is None:
            return lambda f: self.register(name, f)
        if not callable(fn):
            raise TypeError(f"python handler {name!r} is not callable: {fn!r}")
        with self._lock:
            old = self._fns.get(name)
            if old is not None and old is not fn:
                raise ValueError(f"a python handler named {name!r} is already registered")
            self._fns[name] = fn
            self._async[name] = _is_async(fn)
        return fn

    def unregister(self, name: str) -> None:
        with self._lock:
            self._fns.pop(name, None)
            self._async.pop(name, None)

    def get(self, name: str) -> Callable | None:
        with self._lock:
            return self._fns.get(name)

    def resolve(self, name: str) -> tuple[Callable, bool] | None:
        """The function registered under `name` and whether it is a coroutine function."""
        with self._lock:
            fn = self._fns.get(name)
            return None if fn is None else (fn, self._async[name])

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._fns)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._fns

    def __len__(self) -> int:
        with self._lock:
            return len(self._fns)


class PythonHandler:
    """``{"name": ..., "args_json": ...}``: calls the function registered under `name`."""

    def __init__(self, registry: PythonHandlers | None = None) -> None:
        self.registry = registry

    async def run(self, a: Assignment, spec: Mapping[str, Any], stop: Stop) -> Result:
        call = prepare(a, spec, self.registry)
        if isinstance(call, Result):
            return call
        return await finish(a, call, call.start(), stop.cancel, stop.deadline, stop.grace)


@dataclass(slots=True)
class Call:
    """A Python handler call resolved ahead of its due time (function, arguments, context), so
    that at the due time the worker does only `start()` (nothing between "due" and the
    handler's first statement but the call)."""
    fn: Callable
    ctx: HandlerContext
    is_async: bool

    def start(self) -> asyncio.Future:
        """Start the call: an async function at once, up to its first await (`start_eagerly`;
        the rest in a task of the running loop), a plain one in a warm daemon thread (its first
        statement runs as soon as that thread is scheduled)."""
        if self.is_async:
            return start_eagerly(self.fn(self.ctx))
        return in_daemon_thread(self.fn, self.ctx)


def prepare(a: Assignment, spec: Mapping, handlers: PythonHandlers | None) -> Call | Result:
    """The call `spec` asks for, or the FAILED Result that refuses it (no such function, bad
    args_json)."""
    name = spec.get("name")
    found = handlers.resolve(name) if handlers is not None and isinstance(name, str) else None
    if found is None:
        return Result(FAILED, error=f"no python handler named {name} on this worker")
    fn, is_async = found
    args = None
    raw = spec.get("args_json")
    if raw:
        try:
            args = json.loads(raw)
        except (ValueError, TypeError) as e:
            return Result(FAILED, error=f"invalid args_json: {e}")
    stop: asyncio.Event | threading.Event = LightEvent() if is_async else threading.Event()
    ctx = HandlerContext(execution_id=a.execution_id, job=a.job, scheduled_ms=a.scheduled_ms,
                         scheduled_time=format_rfc3339(a.scheduled_ms), attempt=a.attempt,
                         fencing_token=a.fencing_token, args=args, cancel=stop,
                         secret_env=dict(a.secret_env), params=dict(a.params))
    return Call(fn, ctx, is_async)


def _is_async(fn: Callable) -> bool:
    return (inspect.iscoroutinefunction(fn)
            or inspect.iscoroutinefunction(getattr(fn, "__call__", None)))  # noqa: B004 - an async __call__


def _value_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (bytes, bytearray)):
        return tail_text(v)
    s = v if isinstance(v, str) else repr(v)
    return tail_text(s.encode("utf-8", errors="replace"))


def _exception_result(e: BaseException) -> Result:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return Result(FAILED, error=f"{type(e).__name__}: {e}",
                   output_tail=tail_text(tb.encode("utf-8", errors="replace")))


def settled(fut: asyncio.Future) -> Result | None:
    """How a finished call ended, or None when it returned an awaitable (a plain function that
    returned a coroutine): that one must still be awaited (`finish` does). The worker settles a
    call that ends on its own with this alone, in the future's done-callback, without a task of
    its own (schedd_worker.attempt)."""
    if fut.cancelled():
        return Result(FAILED, error="CancelledError: the handler was cancelled")
    exc = fut.exception()
    if exc is not None:
        return _exception_result(exc)
    value = fut.result()
    if inspect.isawaitable(value):
        return None
    return Result(SUCCEEDED, output_tail=_value_text(value))


async def finish(a: Assignment, call: Call, fut: asyncio.Future, cancel: asyncio.Event | None,
                 deadline: float | None, grace: float) -> Result:
    """Wait for a started call to end (or the cancel event, or the deadline) and say how."""
    is_async, stop = call.is_async, call.ctx.cancel
    try:
        how = await race(fut, cancel, deadline)
    except asyncio.CancelledError:
        stop.set()
        if is_async:
            fut.cancel()
        raise
    if how != "done":
        stop.set()
        if is_async:
            fut.cancel()
        if not fut.done():
            await asyncio.wait({fut}, timeout=grace)
        if not fut.done():
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        elif not fut.cancelled():
            fut.exception()                          # retrieved; the attempt is over either way
        state, error = stopped(how, a)
        if not fut.done():
            error += (f"; the handler did not stop within {fmt_seconds(grace)} and may still be running"
                      if not is_async else
                      f"; the handler ignored cancellation for {fmt_seconds(grace)}")
        return Result(state, error=error)
    r = settled(fut)
    if r is not None:
        return r
    fut2 = asyncio.ensure_future(fut.result())      # a plain function that returned a coroutine
    try:
        how = await race(fut2, cancel, deadline)
    except asyncio.CancelledError:
        fut2.cancel()
        raise
    if how != "done":
        stop.set()
        fut2.cancel()
        await asyncio.wait({fut2}, timeout=grace)
        state, error = stopped(how, a)
        return Result(state, error=error)
    return settled(fut2) or Result(SUCCEEDED, output_tail=_value_text(fut2.result()))
