"""Live streams to the browser (server-sent events), so a page follows the cluster without polling.

- `/api/events` (every page, through common.js's `follow`): the API's watch (WatchJobs, or
  WatchExecutions of one job) opened with the session's token, so a principal hears only of
  rows it may read. The browser gets no rows, only `changed` (at most one per COALESCE_S, however
  fast the rows change) and the page reloads its own JSON; `ready` once the watch has its first
  listing (and after a reconnection: the page reloads, so nothing missed while it was away).
- `relay` is what both this and the run page's log stream (run.py) use: a gRPC server stream
  read by a task of its own, written to the browser, a comment every HEARTBEAT_S (proxies keep the
  connection; a dead peer is noticed), the token checked again then (a deleted token or a logout
  ends the stream with `end`, and the page's next call goes to /login), and the gRPC call
  cancelled as soon as the browser goes away (seen within TICK_S) or the node shuts down.

Bounds: a session holds at most PER_SESSION streams (a browser holds about six connections per
host over HTTP/1.1; the rest stay for the pages' calls), the dashboard at most TOTAL (half the
node's watch cap, so `schedctl ... --watch` keeps room); past that a stream is refused 429 and
the page falls back to a slow reload until it may open one again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from schedd.dashboard.backend import WATCHES, ApiError, Unauthenticated
from schedd.dashboard.sessions import Session
from schedd.dashboard.shell import API, HEADERS, SESSION, session_of, status_of

COALESCE_S = 0.5          # at most one `changed` per this, per stream
HEARTBEAT_S = 15.0        # a comment line, and the token checked again
TICK_S = 0.25             # how soon a browser gone away is noticed
PER_SESSION = 4
TOTAL = 32
WATCH_ROWS = {"jobs": 200, "runs": 50}   # rows a page's watch follows: the largest page of jobs; a
                                         # job's newest runs (a run page's own run is among them while it runs)
FIRST_S = 2.0             # how long a refusal may take to be answered as its HTTP status


@dataclass(slots=True)
class Live:
    """One open stream: whose it is, and the flag that ends it (node shutdown)."""

    session: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)


class Streams:
    """The open streams, bounded per session and in all. Used from the event loop only."""

    def __init__(self, *, per_session: int = PER_SESSION, total: int = TOTAL) -> None:
        self.per_session, self.total = per_session, total
        self._open: list[Live] = []

    def open(self, session: str) -> Live | str:
        """A new stream, or why not."""
        if len(self._open) >= self.total:
            return f"this node serves {self.total} live streams already; the page reloads every 30 s instead"
        if self.count(session) >= self.per_session:
            return (f"this session has {self.per_session} live streams open already (other tabs?); "
                    "the page reloads every 30 s instead")
        live = Live(session)
        self._open.append(live)
        return live

    def close(self, live: Live) -> None:
        if live in self._open:
            self._open.remove(live)

    def count(self, session: str | None = None) -> int:
        return sum(1 for s in self._open if session is None or s.session == session)

    def stop_all(self) -> None:
        for live in self._open:
            live.stop.set()


STREAMS: web.AppKey[Streams] = web.AppKey("streams", Streams)
_END = object()


def install(app: web.Application, streams: Streams | None = None) -> None:
    """The stream table, and its end at shutdown (before aiohttp waits for open handlers)."""
    app[STREAMS] = streams if streams is not None else Streams()

    async def stop(app: web.Application) -> None:
        app[STREAMS].stop_all()

    app.on_shutdown.append(stop)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/api/events", events)


def frame(event: str, data: Any) -> bytes:
    """One server-sent event; `data` as compact JSON (one line: the browser's event data)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def refused(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


async def events(request: web.Request) -> web.StreamResponse:
    """The page's "something you may read changed" stream."""
    q = request.query
    what = q.get("watch", "jobs")
    if what not in WATCHES:
        return refused(400, f"watch must be one of {', '.join(WATCHES)}")
    job, team = q.get("job", ""), q.get("team", "")
    coalesced = Coalesced()

    def source(token: str) -> AsyncGenerator[str, None]:
        return request.app[API].watch(token, what, job=job, team=team, size=WATCH_ROWS[what])

    async def on_event(kind: str, send: Callable[[bytes], Awaitable[None]]) -> bool:
        if kind == "synced":
            coalesced.synced = True
            await send(frame("ready", 1))
        elif coalesced.synced:
            coalesced.dirty = True
        return True

    return await relay(request, source, on_event, coalesced.flush)


@dataclass(slots=True)
class Coalesced:
    """Changes heard since the last `changed` sent: at most one per COALESCE_S."""

    synced: bool = False
    dirty: bool = False
    sent: float = 0.0

    async def flush(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        now = time.monotonic()
        if self.dirty and now - self.sent >= COALESCE_S:
            self.dirty, self.sent = False, now
            await send(frame("changed", 1))


Source = Callable[[str], AsyncGenerator[Any, None]]
OnItem = Callable[[Any, Callable[[bytes], Awaitable[None]]], Awaitable[bool]]
OnTick = Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]


async def relay(request: web.Request, source: Source, on_item: OnItem, on_tick: OnTick | None = None) -> web.StreamResponse:
    """Open `source(token)` (a gRPC server stream of the API), answer with its refusal as JSON
    if it refuses at once (401: to /login; 404, 403, 429 ...), else stream: each item through
    `on_item` (False: the stream is complete), `on_tick` after each item and tick, heartbeats,
    until the browser goes, the source ends (`end` with why), the session ends, or shutdown."""
    session = session_of(request)
    if session is None:
        return refused(401, "not logged in", login="/login")
    live = request.app[STREAMS].open(session.id)
    if isinstance(live, str):
        return refused(429, live)
    items = source(session.token)
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
    pump = asyncio.create_task(_pump(items, queue))
    try:
        first = await _first(queue)
        if isinstance(first, Unauthenticated):
            request.app[SESSION].close(session.id)
            return refused(401, first.message, login="/login")
        if isinstance(first, ApiError):
            return refused(status_of(first), first.message, code=first.code)
        response = web.StreamResponse(headers={**HEADERS, "Content-Type": "text/event-stream",
                                               "Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        await response.prepare(request)

        async def send(data: bytes) -> None:
            await response.write(data)

        await send(b"retry: 3000\n\n")
        try:
            await _stream(request, session, live, first, queue, send, on_item, on_tick)
        except ConnectionError:
            pass                                   # the browser went away mid-write
        return response
    finally:
        request.app[STREAMS].close(live)
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)
        await items.aclose()                        # cancels the gRPC call


async def _pump(items: AsyncGenerator[Any, None], queue: asyncio.Queue[Any]) -> None:
    """Read the gRPC stream into `queue`; its end, or the API's refusal, as the last item."""
    try:
        async for item in items:
            await queue.put(item)
        await queue.put(_END)
    except ApiError as e:
        await queue.put(e)


async def _first(queue: asyncio.Queue[Any]) -> Any:
    """The stream's first item, if it comes soon (a refusal does: it is then answered as an HTTP
    status); None when the stream is quiet (a job that has printed nothing yet): the stream starts,
    and a later refusal arrives as `end`."""
    try:
        return await asyncio.wait_for(queue.get(), FIRST_S)
    except TimeoutError:
        return None


async def _stream(request: web.Request, session: Session, live: Live, item: Any, queue: asyncio.Queue[Any],
                  send: Callable[[bytes], Awaitable[None]], on_item: OnItem, on_tick: OnTick | None) -> None:
    beat = time.monotonic() + HEARTBEAT_S
    while True:
        if item is _END:
            await send(frame("end", {"error": "the node ended the stream"}))
            return
        if isinstance(item, Unauthenticated):
            request.app[SESSION].close(session.id)
            await send(frame("end", {"error": item.message, "login": "/login"}))
            return
        if isinstance(item, ApiError):
            await send(frame("end", {"error": item.message}))
            return
        if item is not None and not await on_item(item, send):
            return
        if on_tick is not None:
            await on_tick(send)
        if live.stop.is_set() or _gone(request):
            return
        if time.monotonic() >= beat:
            beat = time.monotonic() + HEARTBEAT_S
            if not await _still_logged_in(request, session):
                await send(frame("end", {"error": "the session ended", "login": "/login"}))
                return
            await send(b": \n\n")
        try:
            item = await asyncio.wait_for(queue.get(), TICK_S)
        except TimeoutError:
            item = None


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _still_logged_in(request: web.Request, session: Session) -> bool:
    """The session is still open and its token still authenticates (a logout, or a token
    deleted or expired, ends the stream; a node that cannot answer now does not)."""
    if request.app[SESSION].get(session.id) is None:
        return False
    try:
        await request.app[API].whoami(session.token)
    except Unauthenticated:
        request.app[SESSION].close(session.id)
        return False
    except ApiError:
        pass
    return True
