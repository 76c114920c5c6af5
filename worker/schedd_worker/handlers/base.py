"""What every handler kind shares: the attempt (`Assignment`), how it must stop (`Stop`), what
it returns (`Result`), the one interface (`Handler`), and the helpers that bound output and wait.

A handler kind is one module of this package (shell, http, python, sensor), each a class with
one method, ``async run(assignment, spec, stop) -> Result``, that never raises for anything the
job does (cancelling the awaiting task propagates CancelledError, after the attempt is stopped).
`schedd_worker.executors.execute` picks the kind and turns the Result into an Outcome.
"""

from __future__ import annotations

import _thread
import asyncio
import contextvars
import functools
import queue
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, UTC
from typing import Any, Protocol

from schedd_client.net.policy import NetPolicy
from schedd_worker.run_logs import NO_LOG, LogSink

__all__ = [
    "Assignment", "HttpOptions", "Result", "Stop", "Handler",
    "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED",
    "OUTPUT_TAIL_BYTES", "ERROR_MAX_BYTES", "HTTP_READ_LIMIT",
    "format_rfc3339", "contract_env", "tail_text", "marked_tail", "bound_error", "fmt_seconds", "Tail",
    "Capture",
    "race", "stopped", "in_daemon_thread", "start_eagerly", "WarmThreads", "Cancel", "LightEvent",
]

SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
CANCELLED = "CANCELLED"

OUTPUT_TAIL_BYTES = 4096
ERROR_MAX_BYTES = 2048
HTTP_READ_LIMIT = 1 << 20       # read at most 1 MiB of a response body (its tail is kept)


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
    team: str = ""           # the job's team: who it runs as (schedd_worker.isolation)
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)   # never logged
    limits: Mapping[str, float] = field(default_factory=dict)   # ResourceLimits fields set
    params: Mapping[str, str] = field(default_factory=dict)     # the run's parameters (job trigger --param)


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


@dataclass(slots=True)
class Result:
    """How one run of a handler ended (the executor adds the times: an Outcome)."""
    state: str               # SUCCEEDED | FAILED | TIMED_OUT | CANCELLED (| NOT_READY: sensors)
    exit_code: int | None = None
    http_status: int | None = None
    error: str = ""
    output_tail: str = ""


@dataclass(slots=True, frozen=True)
class Stop:
    """When an attempt must stop, the same for every handler kind."""
    cancel: asyncio.Event | None     # set: stop now, CANCELLED
    deadline: float | None           # loop time of the attempt's timeout (None: no timeout)
    grace: float                     # after SIGTERM / a thread's cancel event, before giving up
    log: LogSink = NO_LOG            # where its whole output goes (the attempt's run log)


class Handler(Protocol):
    """One handler kind. `spec` is the job's handler object of this kind (e.g. the value of
    "shell"); configuration (network policy, Python registry) is the instance's."""

    async def run(self, a: Assignment, spec: Mapping[str, Any], stop: Stop) -> Result: ...


# ---------------------------------------------------------------------------------- contract

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@functools.lru_cache(maxsize=4096)
def format_rfc3339(ms: int) -> str:
    """UTC RFC 3339 with Z: "2026-11-29T02:00:00Z"; milliseconds only when non-zero. Cached:
    every attempt of a herd, and every fire of a job, formats the same few instants."""
    secs, milli = divmod(int(ms), 1000)
    t = _EPOCH + timedelta(seconds=secs)
    frac = f".{milli:03d}" if milli else ""
    return (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:"
            f"{t.second:02d}{frac}Z")


def contract_env(a: Assignment) -> dict[str, str]:
    """The SCHEDD_* variables every handler sees, and the run's parameters as
    SCHEDD_PARAM_<NAME> (the name upper-cased; the cluster refuses two names equal but for case)."""
    env = {
        "SCHEDD_JOB_ID": a.job,
        "SCHEDD_JOB_NAME": a.job,
        "SCHEDD_EXECUTION_ID": a.execution_id,
        "SCHEDD_SCHEDULED_TIME": format_rfc3339(a.scheduled_ms),
        "SCHEDD_ATTEMPT": str(a.attempt),
        "SCHEDD_FENCING_TOKEN": str(a.fencing_token),
    }
    if a.params:
        env.update(param_env(a.params))
    return env


def param_env(params: Mapping[str, str]) -> dict[str, str]:
    """The environment variables of a run's parameters."""
    return {f"SCHEDD_PARAM_{k.upper()}": v for k, v in params.items()}


# ---------------------------------------------------------------------------------- bounding

def tail_text(data: bytes | bytearray, limit: int = OUTPUT_TAIL_BYTES) -> str:
    """The last `limit` bytes as text; a UTF-8 sequence cut at the front is dropped, not mangled."""
    if len(data) > limit:
        data = bytes(data[-limit:])
        i = 0
        while i < 3 and i < len(data) and 0x80 <= data[i] <= 0xBF:
            i += 1
        data = data[i:]
    return bytes(data).decode("utf-8", errors="replace")


def marked_tail(data: bytes | bytearray, total: int, limit: int = OUTPUT_TAIL_BYTES) -> str:
    """The last bytes of `data` as text, at most `limit` bytes in all, headed by a line that
    says how many bytes came before ("… 16,384 bytes before this") when any did: the tail in
    the Raft log says itself that it is a tail, and the full log is on the worker."""
    if total <= len(data):
        return tail_text(data, limit)
    room = limit - len(f"… {total:,} bytes before this\n".encode())
    kept = tail_text(data, room)
    before = total - len(kept.encode())
    return f"… {before:,} bytes before this\n{kept}"


def bound_error(s: str, limit: int = ERROR_MAX_BYTES) -> str:
    b = s.encode("utf-8", errors="replace")
    if len(b) <= limit:
        return s
    return b[: limit - 3].decode("utf-8", errors="ignore") + "..."


def fmt_seconds(x: float) -> str:
    return f"{x:g}s"


class Tail:
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
        return tail_text(self.buf, self.limit)

    def marked(self) -> str:
        """The tail, headed by how many bytes came before it (`marked_tail`)."""
        return marked_tail(self.buf, self.total, self.limit)


class Capture:
    """A handler's output as it reads it from the job's pipes: every byte goes to the attempt's
    log (`Stop.log`, written by the worker, never by the job) and the last ones to the tail that
    the result carries."""
    __slots__ = ("tail", "log")

    def __init__(self, log: LogSink = NO_LOG) -> None:
        self.tail = Tail()
        self.log = log

    def feed(self, stream: int, data: bytes) -> None:
        self.tail.feed(data)
        self.log.write(stream, data)

    def text(self) -> str:
        return self.tail.marked()


# ---------------------------------------------------------------------------------- waiting

class LightEvent(asyncio.Event):
    """An asyncio.Event whose waiters are a list: asyncio's own keeps a deque, 760 bytes even
    when empty, and a worker holds one or two per attempt, up to tens of thousands of attempts
    held ahead of a herd. Event only appends, removes and iterates its waiters."""

    def __init__(self) -> None:
        super().__init__()
        self._waiters = []                 # type: ignore[assignment]  # a deque in asyncio


class Cancel(LightEvent):
    """An asyncio.Event that also settles plain futures when set (`waiter()`), so waiting on it
    beside another future costs no task of its own (`race` made one per attempt: a tenth of the
    worker's loop in a herd of 10,000)."""

    def __init__(self) -> None:
        super().__init__()
        self._futs: list[asyncio.Future] = []

    def waiter(self) -> asyncio.Future:
        f = asyncio.get_running_loop().create_future()
        if self.is_set():
            f.set_result(True)
        else:
            self._futs.append(f)
        return f

    def set(self) -> None:
        super().set()
        futs, self._futs = self._futs, []
        for f in futs:
            if not f.done():
                f.set_result(True)


async def race(fut: asyncio.Future, cancel: asyncio.Event | None, deadline: float | None) -> str:
    """Wait for `fut`, the cancel event or the deadline (loop time): "done" | "cancel" | "timeout".
    `fut` is never cancelled here. A finished `fut` wins over a simultaneous cancel/timeout."""
    loop = asyncio.get_running_loop()
    if fut.done():
        return "done"
    if cancel is not None and cancel.is_set():
        return "cancel"
    woke = loop.create_future()

    def wake(_: object = None) -> None:
        if not woke.done():
            woke.set_result(None)

    cw: asyncio.Future | None = None
    if isinstance(cancel, Cancel):
        cw = cancel.waiter()
    elif cancel is not None:
        cw = asyncio.ensure_future(cancel.wait())
    timer = loop.call_at(deadline, wake) if deadline is not None else None
    fut.add_done_callback(wake)
    if cw is not None:
        cw.add_done_callback(wake)
    try:
        await woke
    finally:
        fut.remove_done_callback(wake)
        if cw is not None:
            cw.remove_done_callback(wake)
            cw.cancel()
        if timer is not None:
            timer.cancel()
    if fut.done():
        return "done"
    if cancel is not None and cancel.is_set():
        return "cancel"
    return "timeout"


def stopped(how: str, a: Assignment) -> tuple[str, str]:
    if how == "cancel":
        return CANCELLED, "cancelled"
    return TIMED_OUT, f"timed out after {fmt_seconds(a.timeout_s)}"


class WarmThreads:
    """Daemon threads kept warm for blocking handler calls. A call goes to an idle thread; when
    none is idle, a new thread starts while there are fewer than `eager`, else the call waits
    in the queue and, if no thread took it within `grow_after_s`, threads start for every call
    still waiting. So short calls share a few warm threads (a thread start per call cost the
    worker's loop more than the call: Thread.start waits until the new thread runs, and a herd
    of 10,000 started 10,000 threads), and a stuck call still never delays the
    others by more than `grow_after_s`. Threads idle for `idle_s` exit. Threads start with
    `_thread.start_new_thread` (no wait for them to run) and are never joined at exit."""

    def __init__(self, eager: int = 32, grow_after_s: float = 0.02, idle_s: float = 60.0) -> None:
        self.eager, self.grow_after_s, self.idle_s = eager, grow_after_s, idle_s
        self._q: queue.SimpleQueue = queue.SimpleQueue()     # (call, reserved an idle thread)
        # Threads waiting for a call, less the calls already promised to one of them. Exact, not a
        # semaphore released per finished call (ThreadPoolExecutor's way): a burst served by fewer
        # threads than calls left more tokens than idle threads, and calls that must run together
        # (a herd's handlers at a barrier) then waited behind busy threads.
        self._idle = 0
        self._lock = threading.Lock()
        self._backlog = threading.Event()       # calls may be waiting for a thread: watch them
        self._watching = False
        self.threads = 0                         # alive (introspection, tests)

    def submit(self, call: Callable[[], None]) -> None:
        with self._lock:
            reserved = self._idle > 0
            self._idle -= reserved
            spawn = not reserved and self.threads < self.eager
            self.threads += spawn
            watch = not reserved and not spawn and not self._watching
            self._watching = self._watching or watch
        self._q.put((call, reserved))
        if spawn:
            _thread.start_new_thread(self._serve, ())
        elif not reserved:
            self._backlog.set()
            if watch:
                _thread.start_new_thread(self._watch, ())

    def _spawn(self, n: int) -> None:
        with self._lock:
            self.threads += n
        for _ in range(n):
            _thread.start_new_thread(self._serve, ())

    def _watch(self) -> None:
        """While calls wait: every grow_after_s, a thread for each call no thread took."""
        while True:
            self._backlog.wait()
            time.sleep(self.grow_after_s)
            self._backlog.clear()
            waiting = self._q.qsize()
            if waiting:
                self._spawn(waiting)
                self._backlog.set()

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                call, reserved = self._q.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:                 # nobody counts on us: exit
                        self._idle -= 1
                        self.threads -= 1
                        return
                    self._idle -= 1                    # a call is promised to an idle thread
                continue
            if not reserved:                           # we took a call nobody promised us to
                with self._lock:
                    self._idle -= 1
            try:
                call()
            except BaseException:  # noqa: BLE001 - calls hand their own errors over; keep serving
                pass


_THREADS = WarmThreads()


def start_eagerly(coro: Coroutine[Any, Any, Any]) -> asyncio.Future:
    """Run `coro` now, up to its first suspension, and return the future of its result (what
    Python 3.12's eager tasks do; 3.11 has none). A task's first step runs a loop iteration
    later, behind every other call started in the same callback: a herd's handlers would start
    only once all were set up, and one that never awaits would cost a task for nothing. What
    follows the first suspension runs in a task that resumes the coroutine where it stopped, in
    the same copied context (as a task's steps)."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    try:
        yielded = ctx.run(coro.send, None)
    except StopIteration as e:
        fut = loop.create_future()
        fut.set_result(e.value)
        return fut
    except asyncio.CancelledError:
        fut = loop.create_future()
        fut.cancel()
        return fut
    except BaseException as e:
        fut = loop.create_future()
        fut.set_exception(e)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return fut
    return loop.create_task(_resumed(coro, yielded), context=ctx)


async def _resumed(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    return await _Rest(coro, yielded)


@dataclass(slots=True)
class _Rest:
    """The rest of a coroutine `start_eagerly` began: gives the task driving it what the
    coroutine yielded first, then passes the task's sends and throws through (what `yield from`
    does from its second step on)."""
    coro: Coroutine[Any, Any, Any]
    yielded: Any

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self.coro, self.yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # noqa: BLE001 - thrown into the coroutine, as yield from does
                try:
                    yielded = coro.throw(e)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


def in_daemon_thread(fn: Callable, *args: Any) -> asyncio.Future:
    """Run fn(*args) in a daemon thread of its own for the call (a warm one: `WarmThreads`);
    its result/exception lands in the returned future. (Not asyncio.to_thread: an abandoned call
    must neither occupy the shared default executor nor make interpreter/loop shutdown wait for
    it.)"""
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

    inbox = _inbox(loop)

    def run() -> None:
        try:
            value = ctx.run(fn, *args)
            ok = True
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting side
            value, ok = e, False
        inbox.put(settle, ok, value)

    _THREADS.submit(run)
    return fut


class _Inbox:
    """Calls from threads to run on one loop, with one loop wake-up for as many as arrive
    before the loop runs them (a wake-up per call is a write to the loop's self-pipe: 7% of the
    worker's loop when a herd's handlers end together)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable, tuple]] = []

    def put(self, fn: Callable, *args: Any) -> None:
        with self._lock:
            self._calls.append((fn, args))
            wake = len(self._calls) == 1
        if wake:
            try:
                self.loop.call_soon_threadsafe(self._run)
            except RuntimeError:  # loop closed: nobody is waiting any more
                pass

    def _run(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            fn(*args)


_INBOXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _inbox(loop: asyncio.AbstractEventLoop) -> _Inbox:
    box = _INBOXES.get(loop)
    if box is None:
        box = _INBOXES[loop] = _Inbox(loop)
    return box
