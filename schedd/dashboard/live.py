"""Live streams to the browser (server-sent events), so a page follows the cluster without polling.

- `/api/events` (every page, through common.js's `follow`): the API's watch (WatchJobs, or
  WatchExecutions of one job) opened with the session's token, so a principal hears only of
  rows it may read, and shared (hub.py) by every page that follows the same thing under the
  same token and grants: one watch on the node however many tabs are open. A Jobs page says
  which page of jobs it shows (`team`, `state`, `text`, `pool`, `after`, `size`: its own
  /api/jobs query), and its watch follows that page exactly, so a row added to or removed from
  the watch is one entering or leaving the page. The browser gets
  `ready` once the watch has its first listing (and after a reconnection: the page reloads, so
  nothing missed while it was away), then `changed` at most once per COALESCE_S however fast the
  rows change, carrying the changed rows as the page's own row JSON (`rows`, `added`) and the
  keys `removed`, so a page patches what it shows instead of reloading; `changed` with `reload`
  when the page fell behind (its queue overflowed) and must reload.
- `relay` is what both this and the run page's log stream (run.py) use: a feed (the hub's
  subscription, or a gRPC server stream read by a task of its own) written to the browser, a
  comment every HEARTBEAT_S (proxies keep the connection; a dead peer is noticed), the token
  checked again then (a deleted token or a logout ends the stream with `end`, and the page's
  next call goes to /login), and the feed closed as soon as the browser goes away (seen within
  TICK_S) or the node shuts down: the last page of a shared watch cancels its gRPC call.

Bounds: a session holds at most PER_SESSION streams (a browser holds about six connections per
host over HTTP/1.1; the rest stay for the pages' calls), the dashboard at most TOTAL (half the
node's watch cap, so `schedctl ... --watch` keeps room; shared watches hold fewer); past that a
stream is refused 429 and the page falls back to a slow reload until it may open one again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from schedd.dashboard import hub
from schedd.dashboard.backend import PAGE_SIZES, WATCHES, ApiError, Unauthenticated
from schedd.dashboard.hub import COALESCE_S, Hub, Key, Subscriber, frame
from schedd.dashboard.sessions import Session
from schedd.dashboard.shell import API, HEADERS, SESSION, session_of, status_of

__all__ = ["COALESCE_S", "frame", "relay", "install", "add_routes"]

HEARTBEAT_S = 15.0        # a comment line, and the token checked again
TICK_S = 0.25             # how soon a browser gone away is noticed
PER_SESSION = 4
TOTAL = 32
WATCH_ROWS = {"jobs": 200, "runs": 50}   # rows a page's watch follows: the largest page of jobs (a page
                                         # that says which page it shows: that page); a job's newest
                                         # runs (a run page's own run is among them while it runs)
LISTING = ("team", "state", "text", "pool", "after")   # the Jobs page's listing a `jobs` watch may follow
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
HUB: web.AppKey[Hub] = web.AppKey("hub", Hub)
_END = hub.END


def install(app: web.Application, streams: Streams | None = None) -> None:
    """The stream table and the shared watches, and the streams' end at shutdown (before aiohttp
    waits for open handlers; each closes its feed, the last page of a watch its gRPC call)."""
    app[STREAMS] = streams if streams is not None else Streams()
    app[HUB] = Hub()

    async def stop(app: web.Application) -> None:
        app[STREAMS].stop_all()

    app.on_shutdown.append(stop)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/api/events", events)


def refused(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


async def events(request: web.Request) -> web.StreamResponse:
    """The page's "what you may read changed" stream: a subscription to the shared watch of this
    session's token, its grants now and what the page follows."""
    q = request.query
    what, job = q.get("watch", "jobs"), q.get("job", "")
    followed = _followed(what, q)
    if isinstance(followed, str):
        return refused(400, followed)
    listing, size = followed
    session = session_of(request)
    if session is None:
        return refused(401, "not logged in", login="/login")
    try:
        who = await request.app[API].whoami(session.token)
    except Unauthenticated as e:
        request.app[SESSION].close(session.id)
        return refused(401, e.message, login="/login")
    except ApiError as e:
        return refused(status_of(e), e.message, code=e.code)
    key = Key(session.token, _grants(who), what, job, tuple(sorted({**listing, "size": str(size)}.items())))

    def source() -> AsyncGenerator[Any, None]:
        return request.app[API].watch(key.token, what, job=job, size=size, **listing)

    async def subscribe(token: str) -> Feed:
        return Subscription(request.app[HUB], request.app[HUB].subscribe(key, source))

    async def on_item(item: Any, send: Callable[[bytes], Awaitable[None]]) -> bool:
        if item == hub.READY:
            await send(frame("ready", 1))
        elif item == hub.RELOAD:
            await send(frame("changed", {"reload": 1}))
        else:
            await send(item)                  # a `changed` frame, encoded once for every page
        return True

    return await relay(request, subscribe, on_item)


def _followed(what: str, q: Any) -> tuple[dict[str, str], int] | str:
    """What a page's watch follows: a Jobs page's listing (its filters, cursor and page size) and
    how many rows; or why the request is refused."""
    if what not in WATCHES:
        return f"watch must be one of {', '.join(WATCHES)}"
    if what != "jobs":
        return {}, WATCH_ROWS[what]
    listing = {k: q.get(k, "").strip() for k in LISTING}
    if listing["state"] not in ("", "active", "paused"):
        return "state must be active or paused"
    size = q.get("size", "")
    if size and (not size.isdigit() or int(size) not in PAGE_SIZES):
        return f"size must be one of {', '.join(map(str, PAGE_SIZES))}"
    return listing, int(size) if size else WATCH_ROWS[what]


def _grants(who: dict[str, Any]) -> str:
    """The grants a watch was opened under, as one comparable value."""
    return json.dumps([who.get("principal"), who.get("acl_off"), who.get("grants")], sort_keys=True)


class Feed(Protocol):
    """What a relay writes out: items on a queue (its end, or the API's refusal, as the last)."""

    @property
    def queue(self) -> asyncio.Queue[Any]: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class Subscription:
    """A page's subscription to a shared watch: closing it may close the watch."""

    owner: Hub
    sub: Subscriber

    @property
    def queue(self) -> asyncio.Queue[Any]:
        return self.sub.queue

    async def close(self) -> None:
        await self.owner.unsubscribe(self.sub)


@dataclass(slots=True)
class Pumped:
    """A gRPC server stream of its own, read into a queue by a task."""

    items: AsyncGenerator[Any, None]
    queue: asyncio.Queue[Any] = field(default_factory=lambda: asyncio.Queue(maxsize=64))
    task: asyncio.Future[None] | None = None

    def __post_init__(self) -> None:
        self.task = asyncio.ensure_future(_pump(self.items, self.queue))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.items.aclose()                   # cancels the gRPC call


Source = Callable[[str], AsyncGenerator[Any, None]]
Opener = Callable[[str], Awaitable[Feed]]
OnItem = Callable[[Any, Callable[[bytes], Awaitable[None]]], Awaitable[bool]]
OnTick = Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]


def pumped(source: Source) -> Opener:
    """A feed of `source(token)`'s items (a stream of its own, not shared: the run's log)."""
    async def open_(token: str) -> Feed:
        return Pumped(source(token))
    return open_


async def relay(request: web.Request, opener: Opener, on_item: OnItem, on_tick: OnTick | None = None) -> web.StreamResponse:
    """Open the feed (`opener(token)`: a shared watch, or `pumped` gRPC server stream of the API),
    answer with its refusal as JSON if it refuses at once (401: to /login; 404, 403, 429 ...),
    else stream: each item through `on_item` (False: the stream is complete), `on_tick` after
    each item and tick, heartbeats, until the browser goes, the source ends (`end` with why),
    the session ends, or shutdown."""
    session = session_of(request)
    if session is None:
        return refused(401, "not logged in", login="/login")
    live = request.app[STREAMS].open(session.id)
    if isinstance(live, str):
        return refused(429, live)
    feed: Feed | None = None
    try:
        feed = await opener(session.token)
        queue = feed.queue
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
        if feed is not None:
            await feed.close()


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
