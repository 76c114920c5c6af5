"""Run ONE attempt of an execution and report how it ended (DESIGN.md "Handler contract").

`execute(assignment)` runs a shell, HTTP or Python handler to its end and returns an `Outcome`.
It never raises for anything the handler does (a missing binary, a refused connection, an
exception in a Python function, even a bug in this module): every failure is an Outcome. Only
cancelling the task that awaits it propagates `asyncio.CancelledError` — and even then the
attempt is stopped first (process group SIGKILLed, HTTP socket shut, Python task cancelled).
The preferred way to stop an attempt is the `cancel` event, which yields a CANCELLED outcome.

Every handler sees the same facts (`contract_env`): SCHEDD_JOB_ID, SCHEDD_JOB_NAME,
SCHEDD_EXECUTION_ID, SCHEDD_SCHEDULED_TIME (RFC 3339 UTC), SCHEDD_ATTEMPT, SCHEDD_FENCING_TOKEN —
as environment variables (shell), X-Schedd-* headers and a JSON body (HTTP), or a
`HandlerContext` (Python). The execution id is the idempotency key.

Shell
    `/bin/sh -c command`, or argv without a shell, in its own session (so its own process
    group), with a minimal environment (`job_environment`: PATH, HOME, LANG, the variables the
    job names in `inherit_env`, its `env`, the contract), stdin from /dev/null, stdout and
    stderr merged; only the last OUTPUT_TAIL_BYTES are
    kept (memory stays bounded whatever the job prints). On timeout or cancel the whole group
    gets SIGTERM, then SIGKILL after `kill_grace_s`, and the outcome is reported only once no
    member is left. When the main process exits on its own, processes it left behind in its
    group (background children) get the same TERM/KILL treatment before the outcome is
    returned: a reported attempt has nothing still running. (A process that moved to a session
    or group of its own, with setsid or shell job control, has left on purpose and is not
    tracked.) exit_code is the exit status, or -N when signal N ended the main process. Once the
    main process has exited, the outcome follows its exit status even if the timeout or cancel
    strikes while leftovers are being stopped. Cancelling the awaiting task SIGKILLs the group
    at once, even mid-start.

HTTP
    One request with the stdlib's http.client in a daemon thread, to an address the worker's
    outbound network policy allows (`HttpOptions.policy`, schedd.net: the host is resolved once
    and the checked address is dialled; by default loopback, link-local and cloud metadata
    addresses are refused). No proxy, no redirects followed (a 3xx is a failure with its status
    and "redirect to ... not followed": the safe choice for non-idempotent POSTs, and no hop can
    lead outside the policy). At most `read_limit` bytes of the body are read and its last
    `keep_bytes` kept as the output tail (0 keeps nothing).

Python
    Functions from a `PythonHandlers` registry, called with one `HandlerContext`. Coroutine
    functions run on the event loop and are cancelled on timeout/cancel; plain functions run in a
    daemon thread of their own and get a `threading.Event` in `ctx.cancel`, set on timeout/cancel.
    A thread cannot be killed: after setting the event we wait `kill_grace_s` for it to return,
    then report anyway (the error says the thread may still be running). Daemon threads (not the
    default executor) so that a stuck handler neither starves other work nor blocks shutdown.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import http.client
import inspect
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from schedd_client.net.outbound import checked_connection, request_path
from schedd_client.net.policy import NetPolicy

log = logging.getLogger("schedd.worker.executors")

__all__ = [
    "Assignment", "Outcome", "HandlerContext", "PythonHandlers", "HttpOptions", "execute",
    "contract_env", "job_environment",
    "format_rfc3339", "OUTPUT_TAIL_BYTES", "ERROR_MAX_BYTES", "HTTP_READ_LIMIT",
    "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED",
]

SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
CANCELLED = "CANCELLED"

OUTPUT_TAIL_BYTES = 4096
ERROR_MAX_BYTES = 2048
HTTP_READ_LIMIT = 1 << 20       # read at most 1 MiB of a response body (its tail is kept)
READ_CHUNK = 64 * 1024
DRAIN_S = 0.5                   # after the main process exits: wait this long for the pipe to close
KILL_WAIT_S = 5.0               # after SIGKILL: give the kernel this long to clear the group


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------------- data types

@dataclass(slots=True, frozen=True)
class Assignment:
    execution_id: str        # e.g. "nightly@2026-11-29T02:00:00Z", the idempotency key
    job: str
    scheduled_ms: int        # UTC epoch ms (the nominal instant)
    attempt: int             # 1-based
    fencing_token: int       # monotonic across the cluster
    handler: dict            # canonical handler, see schedd.core.model._handler
    timeout_s: float = 0.0   # per-attempt timeout, 0 = none
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class HttpOptions:
    """What a worker's HTTP handlers and http sensors may reach, and how much of an answer they
    read and keep (the output tail is readable by anyone who can read runs)."""
    policy: NetPolicy = NetPolicy()
    keep_bytes: int = OUTPUT_TAIL_BYTES     # of the body kept in output_tail; 0 keeps nothing
    read_limit: int = HTTP_READ_LIMIT       # of the body read, at most

    def __post_init__(self) -> None:
        if not 0 <= self.keep_bytes <= OUTPUT_TAIL_BYTES:
            raise ValueError(f"keep_bytes must be between 0 and {OUTPUT_TAIL_BYTES}")
        if not 0 <= self.read_limit <= HTTP_READ_LIMIT:
            raise ValueError(f"read_limit must be between 0 and {HTTP_READ_LIMIT}")


@dataclass(slots=True, frozen=True)
class Outcome:
    state: str               # SUCCEEDED | FAILED | TIMED_OUT | CANCELLED
    started_ms: int
    ended_ms: int
    exit_code: int | None = None     # shell: the exit status, or -N when killed by signal N
    http_status: int | None = None   # http
    error: str = ""                  # human-readable, at most ERROR_MAX_BYTES (UTF-8)
    output_tail: str = ""            # last OUTPUT_TAIL_BYTES of output / body / return value


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
        return fn

    def unregister(self, name: str) -> None:
        with self._lock:
            self._fns.pop(name, None)

    def get(self, name: str) -> Callable | None:
        with self._lock:
            return self._fns.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._fns)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._fns

    def __len__(self) -> int:
        with self._lock:
            return len(self._fns)


# ---------------------------------------------------------------------------------- contract

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def format_rfc3339(ms: int) -> str:
    """UTC RFC 3339 with Z: "2026-11-29T02:00:00Z"; milliseconds only when non-zero."""
    secs, milli = divmod(int(ms), 1000)
    t = _EPOCH + timedelta(seconds=secs)
    frac = f".{milli:03d}" if milli else ""
    return (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:"
            f"{t.second:02d}{frac}Z")


def contract_env(a: Assignment) -> dict[str, str]:
    """The SCHEDD_* variables every handler sees."""
    return {
        "SCHEDD_JOB_ID": a.job,
        "SCHEDD_JOB_NAME": a.job,
        "SCHEDD_EXECUTION_ID": a.execution_id,
        "SCHEDD_SCHEDULED_TIME": format_rfc3339(a.scheduled_ms),
        "SCHEDD_ATTEMPT": str(a.attempt),
        "SCHEDD_FENCING_TOKEN": str(a.fencing_token),
    }


BASE_ENV = ("PATH", "HOME", "LANG")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def job_environment(a: Assignment, spec: Mapping, worker_env: Mapping[str, str]) -> dict[str, str]:
    """What a shell job's process sees: PATH, HOME and LANG of the worker, the worker variables
    the job names in `inherit_env`, its own `env`, then the SCHEDD_* contract (which wins).
    Nothing else of the worker's environment: its unit's secrets are not every job's."""
    env = {k: worker_env[k] for k in BASE_ENV if k in worker_env}
    env.setdefault("PATH", DEFAULT_PATH)
    names = spec.get("inherit_env") or ()
    if isinstance(names, (list, tuple)):
        env.update({n: worker_env[n] for n in names if isinstance(n, str) and n in worker_env})
    job_env = spec.get("env") or {}
    if isinstance(job_env, Mapping):
        env.update({str(k): str(v) for k, v in job_env.items()})
    env.update(contract_env(a))
    return env


def _contract_headers(a: Assignment) -> dict[str, str]:
    return {
        "Idempotency-Key": a.execution_id,
        "X-Schedd-Job": a.job,
        "X-Schedd-Execution-Id": a.execution_id,
        "X-Schedd-Attempt": str(a.attempt),
        "X-Schedd-Fencing-Token": str(a.fencing_token),
        "X-Schedd-Scheduled-Time": format_rfc3339(a.scheduled_ms),
    }


def _contract_body(a: Assignment) -> dict:
    return {
        "job": a.job,
        "execution_id": a.execution_id,
        "scheduled_time": format_rfc3339(a.scheduled_ms),
        "attempt": a.attempt,
        "fencing_token": a.fencing_token,
    }


# ---------------------------------------------------------------------------------- bounding

def _tail_text(data: bytes | bytearray, limit: int = OUTPUT_TAIL_BYTES) -> str:
    """The last `limit` bytes as text; a UTF-8 sequence cut at the front is dropped, not mangled."""
    if len(data) > limit:
        data = bytes(data[-limit:])
        i = 0
        while i < 3 and i < len(data) and 0x80 <= data[i] <= 0xBF:
            i += 1
        data = data[i:]
    return bytes(data).decode("utf-8", errors="replace")


def _bound_error(s: str, limit: int = ERROR_MAX_BYTES) -> str:
    b = s.encode("utf-8", errors="replace")
    if len(b) <= limit:
        return s
    return b[: limit - 3].decode("utf-8", errors="ignore") + "..."


def _fmt_s(x: float) -> str:
    return f"{x:g}s"


class _Tail:
    """Keeps the last `limit` bytes of a stream; memory is limit + one chunk at most."""
    __slots__ = ("buf", "limit", "total")

    def __init__(self, limit: int = OUTPUT_TAIL_BYTES) -> None:
        self.buf = bytearray()
        self.limit = limit
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(chunk) >= self.limit:
            self.buf[:] = chunk[-self.limit:]
            return
        self.buf += chunk
        extra = len(self.buf) - self.limit
        if extra > 0:
            del self.buf[:extra]

    def text(self) -> str:
        return _tail_text(self.buf, self.limit)


@dataclass(slots=True)
class _Result:
    state: str
    exit_code: int | None = None
    http_status: int | None = None
    error: str = ""
    output_tail: str = ""


# ---------------------------------------------------------------------------------- waiting

async def _race(fut: asyncio.Future, cancel: asyncio.Event | None, deadline: float | None) -> str:
    """Wait for `fut`, the cancel event or the deadline (loop time): "done" | "cancel" | "timeout".
    `fut` is never cancelled here. A finished `fut` wins over a simultaneous cancel/timeout."""
    loop = asyncio.get_running_loop()
    if fut.done():
        return "done"
    if cancel is not None and cancel.is_set():
        return "cancel"
    waiters: set[asyncio.Future] = {fut}
    cw = None
    if cancel is not None:
        cw = asyncio.ensure_future(cancel.wait())
        waiters.add(cw)
    try:
        timeout = None if deadline is None else max(0.0, deadline - loop.time())
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if cw is not None:
            cw.cancel()
    if fut.done():
        return "done"
    if cancel is not None and cancel.is_set():
        return "cancel"
    return "timeout"


def _stopped(how: str, a: Assignment) -> tuple[str, str]:
    if how == "cancel":
        return CANCELLED, "cancelled"
    return TIMED_OUT, f"timed out after {_fmt_s(a.timeout_s)}"


def _in_daemon_thread(fn: Callable, *args: Any, name: str) -> asyncio.Future:
    """Run fn(*args) in a new daemon thread; its result/exception lands in the returned future.
    (Not asyncio.to_thread: an abandoned call must neither occupy the shared default executor
    nor make interpreter/loop shutdown wait for it.)"""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def run() -> None:
        try:
            value = ctx.run(fn, *args)
            ok = True
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting side
            value, ok = e, False
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


# ---------------------------------------------------------------------------------- entry point

async def execute(a: Assignment, *, cancel: asyncio.Event | None = None,
                  python_handlers: PythonHandlers | None = None, kill_grace_s: float = 5.0,
                  now_ms: Callable[[], int] = _wall_ms,
                  http: HttpOptions = HttpOptions()) -> Outcome:
    """Run one attempt to its end and return its Outcome. Never raises, except that cancelling
    the awaiting task propagates CancelledError (after stopping the attempt). `http` says what
    HTTP handlers and http sensors may reach (default: HttpOptions(), see schedd.net.policy)."""
    started = now_ms()
    try:
        if cancel is not None and cancel.is_set():
            r = _Result(CANCELLED, error="cancelled before it started")
        else:
            r = await _dispatch(a, cancel, python_handlers, max(0.0, float(kill_grace_s)), http)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - the contract: every failure is an Outcome
        log.exception("executor failed on %s", a.execution_id)
        r = _Result(FAILED, error=f"internal error in the worker: {type(e).__name__}: {e}")
    return Outcome(state=r.state, started_ms=started, ended_ms=now_ms(), exit_code=r.exit_code,
                   http_status=r.http_status, error=_bound_error(r.error),
                   output_tail=r.output_tail)


async def _dispatch(a: Assignment, cancel: asyncio.Event | None,
                    handlers: PythonHandlers | None, grace: float, http: HttpOptions) -> _Result:
    h = a.handler if isinstance(a.handler, Mapping) else {}
    if h.get("sensor") and len(h) == 1:           # a DAG sensor: schedd.worker.sensors
        from schedd_worker import sensors
        return await sensors.check(a, h["sensor"], cancel, grace, http)
    kinds = [k for k in ("shell", "http", "python") if h.get(k)]
    if len(kinds) != 1:
        return _Result(FAILED, error=f"unsupported handler: expected exactly one of shell, http, "
                                     f"python; got {sorted(h) if h else 'nothing'}")
    kind = kinds[0]
    spec = h[kind]
    if not isinstance(spec, Mapping):
        return _Result(FAILED, error=f"{kind} handler must be an object")
    loop = asyncio.get_running_loop()
    timeout = float(a.timeout_s or 0)
    deadline = loop.time() + timeout if timeout > 0 else None
    if kind == "shell":
        return await _run_shell(a, spec, cancel, deadline, grace)
    if kind == "http":
        return await _run_http(a, spec, cancel, deadline, http)
    return await _run_python(a, spec, cancel, deadline, grace, handlers)


# ---------------------------------------------------------------------------------- shell

def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in group `pgid`.

    killpg(pgid, 0) alone is not enough: an orphaned member that exited stays a zombie until
    its new parent reaps it, and some container inits (PID 1) never do."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _ShellProtocol(asyncio.SubprocessProtocol):
    """Feeds the merged output straight into a bounded tail (no StreamReader buffer) and tells
    apart "the main process exited" from "the pipe closed": with Python 3.11's
    asyncio.subprocess, Process.wait() waits for both, and hangs while a background child
    still holds stdout."""

    def __init__(self, tail: _Tail) -> None:
        loop = asyncio.get_running_loop()
        self.tail = tail
        self.exited: asyncio.Future = loop.create_future()
        self.eof: asyncio.Future = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.tail.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.eof.done():
            self.eof.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def _wait_group_gone(transport: asyncio.SubprocessTransport, pgid: int,
                           timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    delay = 0.005
    while True:
        if transport.get_returncode() is not None and not _group_alive(pgid):
            return True
        if loop.time() >= end:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


async def _kill_group(transport: asyncio.SubprocessTransport, pgid: int, grace: float) -> None:
    """SIGTERM the group, wait `grace`, SIGKILL what is left; return once the group is empty."""
    _signal_group(pgid, signal.SIGTERM)
    if grace > 0 and await _wait_group_gone(transport, pgid, grace):
        return
    _signal_group(pgid, signal.SIGKILL)
    if not await _wait_group_gone(transport, pgid, KILL_WAIT_S):
        log.warning("process group %d still has members %.0fs after SIGKILL", pgid, KILL_WAIT_S)


def _kill_started(f: asyncio.Future) -> None:
    """For a start interrupted by task cancellation: kill whatever it started."""
    if f.cancelled() or f.exception() is not None:
        return
    transport = f.result()[0]
    _signal_group(transport.get_pid(), signal.SIGKILL)
    transport.close()


def _exit_result(rc: int) -> tuple[str, str]:
    if rc == 0:
        return SUCCEEDED, ""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return FAILED, f"killed by signal {name}"
    return FAILED, f"exit status {rc}"


async def _run_shell(a: Assignment, spec: Mapping, cancel: asyncio.Event | None,
                     deadline: float | None, grace: float) -> _Result:
    command = spec.get("command")
    argv = spec.get("argv")
    if command and argv:
        return _Result(FAILED, error="a shell handler needs a command or an argv, not both")
    if command:
        if not isinstance(command, str):
            return _Result(FAILED, error="shell command must be a string")
        args = ["/bin/sh", "-c", command]
    elif argv:
        if not isinstance(argv, (list, tuple)) or not all(isinstance(x, str) for x in argv):
            return _Result(FAILED, error="shell argv must be a list of strings")
        args = list(argv)
    else:
        return _Result(FAILED, error="a shell handler needs a command or an argv")

    workdir = spec.get("workdir") or None
    if workdir is not None:
        if not os.path.exists(workdir):
            return _Result(FAILED, error=f"working directory {workdir} does not exist")
        if not os.path.isdir(workdir):
            return _Result(FAILED, error=f"working directory {workdir} is not a directory")

    env = job_environment(a, spec, os.environ)

    loop = asyncio.get_running_loop()
    tail = _Tail()
    proto: _ShellProtocol | None = None

    def factory() -> _ShellProtocol:
        nonlocal proto
        proto = _ShellProtocol(tail)
        return proto

    # Shielded: if our task is cancelled while the pipes are still being connected, asyncio
    # would SIGKILL only the main pid and leave the rest of the group running.
    start = asyncio.ensure_future(loop.subprocess_exec(
        factory, *args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, cwd=workdir, env=env, start_new_session=True))
    try:
        transport, _ = await asyncio.shield(start)
    except asyncio.CancelledError:
        while not start.done():              # a start takes milliseconds: see it through,
            try:                             # kill what it started, then propagate
                await asyncio.shield(start)
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - nothing started; the cancellation still wins
                break
        _kill_started(start)
        raise
    except (OSError, ValueError, TypeError) as e:   # not found, not executable, NUL in argv...
        return _Result(FAILED, error=f"cannot start {args[0]}: {e}")
    assert proto is not None
    pgid = transport.get_pid()   # start_new_session: the child leads its own session and group
    try:
        how = await _race(proto.exited, cancel, deadline)
        if how != "done":
            await _kill_group(transport, pgid, grace)
            await asyncio.wait({proto.eof}, timeout=1.0)
            state, error = _stopped(how, a)
            return _Result(state, exit_code=transport.get_returncode(), error=error,
                           output_tail=tail.text())
        rc = transport.get_returncode()
        # The main process is gone. Let the output drain; then anything it left behind in its
        # group (background children, maybe holding the pipe) is stopped: once reported, the
        # attempt must have nothing still running.
        await asyncio.wait({proto.eof}, timeout=DRAIN_S)
        if _group_alive(pgid):
            log.info("%s: stopping processes left behind in group %d", a.execution_id, pgid)
            await _kill_group(transport, pgid, grace)
            await asyncio.wait({proto.eof}, timeout=1.0)
        state, error = _exit_result(rc)
        return _Result(state, exit_code=rc, error=error, output_tail=tail.text())
    except asyncio.CancelledError:
        _signal_group(pgid, signal.SIGKILL)
        raise
    finally:
        # Closes the pipe even if a process that left the group (setsid) still holds it.
        # (If the main process were still running, close() would SIGKILL it.)
        transport.close()


# ---------------------------------------------------------------------------------- http

class _HttpCall:
    """One blocking request, run in a thread; `abort()` (from any thread) unblocks it."""

    def __init__(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                 verify: bool, sock_timeout: float | None, opts: HttpOptions) -> None:
        self.method, self.url, self.headers, self.body = method, url, headers, body
        self.verify, self.sock_timeout, self.opts = verify, sock_timeout, opts
        self.aborted = False
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            conn = self._conn
        sock = getattr(conn, "sock", None) if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self) -> tuple[int, str, bytes, str]:
        """(status, reason, kept tail of the body, Location header)."""
        try:
            conn = checked_connection(self.opts.policy, self.url, timeout=self.sock_timeout,
                                      verify=self.verify)
        except ValueError:
            raise ValueError(f"unsupported url {_safe_url(self.url)}") from None
        with self._lock:
            if self.aborted:
                raise ConnectionAbortedError("aborted")
            self._conn = conn
        try:
            conn.connect()
            if self.aborted:
                raise ConnectionAbortedError("aborted")
            conn.request(self.method, request_path(self.url), body=self.body,
                         headers=self.headers)
            resp = conn.getresponse()
            keep, limit = self.opts.keep_bytes, self.opts.read_limit
            tail = _Tail(max(1, keep))
            got = 0
            while got < limit:
                chunk = resp.read(min(READ_CHUNK, limit - got))
                if not chunk:
                    break
                got += len(chunk)
                tail.feed(chunk)
            kept = bytes(tail.buf) if keep else b""
            return resp.status, resp.reason or "", kept, resp.getheader("Location") or ""
        finally:
            conn.close()


def _safe_url(url: str) -> str:
    """The URL without credentials, for error messages."""
    try:
        p = urllib.parse.urlsplit(url)
        if p.username is not None or p.password is not None:
            host = p.hostname or ""
            if p.port:
                host += f":{p.port}"
            p = p._replace(netloc=host)
        return urllib.parse.urlunsplit(p._replace(query="", fragment=""))
    except ValueError:
        return "<invalid url>"


def _status_text(status: int, reason: str) -> str:
    if not reason:
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = ""
    return f"HTTP {status} {reason}".rstrip()


async def _run_http(a: Assignment, spec: Mapping, cancel: asyncio.Event | None,
                    deadline: float | None, opts: HttpOptions) -> _Result:
    url = spec.get("url")
    if not isinstance(url, str) or not url:
        return _Result(FAILED, error="an http handler needs a url")
    method = str(spec.get("method") or "POST").upper()

    contract = _contract_headers(a)
    ours = {k.lower() for k in contract}
    headers: dict[str, str] = {}
    user_headers = spec.get("headers") or {}
    if isinstance(user_headers, Mapping):
        for k, v in user_headers.items():
            if str(k).lower() not in ours:          # the contract headers win
                headers[str(k)] = str(v)
    lower = {k.lower() for k in headers}
    body_text = spec.get("body")
    body: bytes | None
    if body_text:
        body = str(body_text).encode("utf-8")
    elif method == "GET":
        body = None                                 # facts travel in the headers only
    else:
        body = json.dumps(_contract_body(a), separators=(",", ":")).encode()
        if "content-type" not in lower:
            headers["Content-Type"] = "application/json"
    parts = urllib.parse.urlsplit(url)
    if (parts.username or parts.password) and "authorization" not in lower:
        cred = f"{urllib.parse.unquote(parts.username or '')}:" \
               f"{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
    headers.update(contract)

    timeout = float(a.timeout_s or 0)
    call = _HttpCall(method, url, headers, body, verify=not spec.get("insecure_skip_verify"),
                     sock_timeout=timeout if timeout > 0 else None, opts=opts)
    fut = _in_daemon_thread(call.run, name=f"schedd-http-{a.job}")
    try:
        how = await _race(fut, cancel, deadline)
    except asyncio.CancelledError:
        call.abort()
        raise
    if how != "done":
        call.abort()
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # no "never retrieved"
        state, error = _stopped(how, a)
        return _Result(state, error=error)
    exc = fut.exception()
    if exc is not None:
        if isinstance(exc, (TimeoutError, socket.timeout)) and timeout > 0:
            return _Result(TIMED_OUT, error=f"timed out after {_fmt_s(timeout)}")
        return _Result(FAILED, error=f"{method} {_safe_url(url)}: {type(exc).__name__}: {exc}")
    status, reason, tail, location = fut.result()
    text = _tail_text(tail)
    if 200 <= status < 300:
        return _Result(SUCCEEDED, http_status=status, output_tail=text)
    error = _status_text(status, reason)
    if 300 <= status < 400 and location:
        error += f": redirect to {_safe_url(location)} not followed"
    return _Result(FAILED, http_status=status, error=error, output_tail=text)


# ---------------------------------------------------------------------------------- python

def _is_async(fn: Callable) -> bool:
    return (inspect.iscoroutinefunction(fn)
            or inspect.iscoroutinefunction(getattr(fn, "__call__", None)))


def _value_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (bytes, bytearray)):
        return _tail_text(v)
    s = v if isinstance(v, str) else repr(v)
    return _tail_text(s.encode("utf-8", errors="replace"))


def _exception_result(e: BaseException) -> _Result:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return _Result(FAILED, error=f"{type(e).__name__}: {e}",
                   output_tail=_tail_text(tb.encode("utf-8", errors="replace")))


async def _run_python(a: Assignment, spec: Mapping, cancel: asyncio.Event | None,
                      deadline: float | None, grace: float,
                      handlers: PythonHandlers | None) -> _Result:
    name = spec.get("name")
    fn = handlers.get(name) if handlers is not None and isinstance(name, str) else None
    if fn is None:
        return _Result(FAILED, error=f"no python handler named {name} on this worker")
    args = None
    raw = spec.get("args_json")
    if raw:
        try:
            args = json.loads(raw)
        except (ValueError, TypeError) as e:
            return _Result(FAILED, error=f"invalid args_json: {e}")

    is_async = _is_async(fn)
    stop: asyncio.Event | threading.Event = asyncio.Event() if is_async else threading.Event()
    ctx = HandlerContext(execution_id=a.execution_id, job=a.job, scheduled_ms=a.scheduled_ms,
                         scheduled_time=format_rfc3339(a.scheduled_ms), attempt=a.attempt,
                         fencing_token=a.fencing_token, args=args, cancel=stop)

    async def call_async() -> Any:
        return await fn(ctx)

    if is_async:
        fut: asyncio.Future = asyncio.ensure_future(call_async())
    else:
        fut = _in_daemon_thread(fn, ctx, name=f"schedd-python-{a.job}")
    try:
        how = await _race(fut, cancel, deadline)
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
        state, error = _stopped(how, a)
        if not fut.done():
            error += (f"; the handler did not stop within {_fmt_s(grace)} and may still be running"
                      if not is_async else
                      f"; the handler ignored cancellation for {_fmt_s(grace)}")
        return _Result(state, error=error)
    if fut.cancelled():
        return _Result(FAILED, error="CancelledError: the handler was cancelled")
    exc = fut.exception()
    if exc is not None:
        return _exception_result(exc)
    value = fut.result()
    if inspect.isawaitable(value):                   # a plain function that returned a coroutine
        fut2 = asyncio.ensure_future(value)
        try:
            how = await _race(fut2, cancel, deadline)
        except asyncio.CancelledError:
            fut2.cancel()
            raise
        if how != "done":
            stop.set()
            fut2.cancel()
            await asyncio.wait({fut2}, timeout=grace)
            state, error = _stopped(how, a)
            return _Result(state, error=error)
        if fut2.cancelled():
            return _Result(FAILED, error="CancelledError: the handler was cancelled")
        if fut2.exception() is not None:
            return _exception_result(fut2.exception())
        value = fut2.result()
    return _Result(SUCCEEDED, output_tail=_value_text(value))
