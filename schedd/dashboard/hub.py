"""One watch of the API per (token, grants, what it follows), shared by every open page that
follows the same thing, with its changes fanned out to them in batches.

Ten tabs of the Jobs page under one token used to hold ten WatchJobs streams on the node, each
reading, converting and sending every change of every job; a `Hub` holds one `Upstream` per
`Key` and counts its `Subscriber`s: the first page opens the watch, the last one to leave
closes it (the gRPC call is cancelled). The sharing is per token and per the token's grants
when the page opened (`Key.grants`), so a principal hears only of rows it may read, exactly as
with a watch of its own: the node filters the one watch by that token.

What a subscriber receives, in order, on its own bounded queue:
- READY once the watch has its first listing (at once if it had it already): the page loads.
- A `changed` frame (already encoded, the same bytes for every subscriber) at most once per
  COALESCE_S: the rows changed since the last one, as the page's own row JSON (`rows`: changed,
  `added`: new in the listing), and the keys `removed` from it. The first listing's rows are not
  changes (the page loads its own).
- RELOAD instead of what it missed when it fell QUEUE frames behind (a slow browser): its queue
  is emptied and the page reloads, so a slow page never holds up the others, and never patches
  from a gap.
- The watch's end as the last item: END, or the API's refusal (an ApiError). The hub forgets an
  ended upstream; the next page that asks opens a new one.

Used from the event loop only.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from schedd.dashboard.backend import ApiError

COALESCE_S = 0.5          # at most one `changed` per this, per watch (so per page)
QUEUE = 16                # items a subscriber may have waiting before it is told to reload

READY = "ready"
RELOAD = "reload"
END = "end"

Change = tuple[str, str, dict[str, Any] | None]       # (type, key, row): the backend's watch events
Source = Callable[[], AsyncGenerator[Change, None]]


def frame(event: str, data: Any) -> bytes:
    """One server-sent event; `data` as compact JSON (one line: the browser's event data)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@dataclass(frozen=True, slots=True)
class Key:
    """What one upstream watch is: whose (the token, and its grants when the page opened: a page
    opened after the grants changed gets a watch of its own, filtered by the new ones) and what
    it follows (pages showing the same listing share it)."""

    token: str
    grants: str
    what: str
    job: str = ""
    listing: tuple[tuple[str, str], ...] = ()     # a `jobs` watch's page: filters, cursor, size


@dataclass(slots=True, eq=False)
class Subscriber:
    """One page's end of an upstream: its queue of items, bounded."""

    upstream: Upstream
    queue: asyncio.Queue[Any] = field(default_factory=lambda: asyncio.Queue(maxsize=QUEUE))
    ready: bool = False
    overflows: int = 0

    def offer(self, item: Any) -> None:
        """Never waits: a full queue is emptied and told to reload (the end of the watch, though,
        is always delivered as itself)."""
        try:
            self.queue.put_nowait(item)
            return
        except asyncio.QueueFull:
            pass
        self.overflows += 1
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(item if item is END or isinstance(item, ApiError) else RELOAD)


class Upstream:
    """One watch of the API and the subscribers it feeds."""

    def __init__(self, key: Key, source: Source, forget: Callable[[Upstream], None]) -> None:
        self.key = key
        self.subscribers: list[Subscriber] = []
        self.synced = False
        self.ended = False
        self.pending: dict[str, tuple[str, dict[str, Any] | None]] = {}   # key -> (type, row), net
        self.sent = 0.0
        self.frames = 0
        self._flush: asyncio.TimerHandle | None = None
        self._forget = forget
        self._task = asyncio.ensure_future(self._read(source()))

    def add(self) -> Subscriber:
        sub = Subscriber(self)
        self.subscribers.append(sub)
        if self.synced:
            sub.ready = True
            sub.offer(READY)
        return sub

    async def close(self) -> None:
        """Cancel the watch (its gRPC call with it) and wait until it is gone."""
        self.ended = True
        if self._flush is not None:
            self._flush.cancel()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _read(self, items: AsyncGenerator[Change, None]) -> None:
        last: Any = END
        try:
            async for kind, key, row in items:
                if kind == "synced":
                    self._synced()
                elif self.synced:
                    self._note(kind, key, row)
        except ApiError as e:
            last = e
        except (OSError, RuntimeError, ValueError) as e:       # not the API's words: still the end
            last = ApiError("UNKNOWN", f"the watch failed: {e}")
        finally:
            await items.aclose()
        self.ended = True
        if self._flush is not None:
            self._flush.cancel()
        self._forget(self)
        for sub in self.subscribers:
            sub.offer(last)

    def _synced(self) -> None:
        self.synced = True
        for sub in self.subscribers:
            if not sub.ready:
                sub.ready = True
                sub.offer(READY)

    def _note(self, kind: str, key: str, row: dict[str, Any] | None) -> None:
        """Fold the change into the pending batch (net of the batch: added then changed is added,
        added then removed is nothing, removed then added is changed)."""
        before = self.pending.get(key, ("", None))[0]
        if kind == "removed":
            if before == "added":
                del self.pending[key]
            else:
                self.pending[key] = ("removed", None)
        elif kind == "added":
            self.pending[key] = ("changed" if before == "removed" else "added", row)
        else:
            self.pending[key] = ("added" if before == "added" else "changed", row)
        if self._flush is None and self.pending:
            delay = max(0.0, self.sent + COALESCE_S - time.monotonic())
            self._flush = asyncio.get_running_loop().call_later(delay, self._send)

    def _send(self) -> None:
        """The pending batch as one frame, encoded once, offered to every ready subscriber."""
        self._flush = None
        if not self.pending or self.ended:
            return
        batch: dict[str, list[Any]] = {"rows": [], "added": [], "removed": []}
        for key, (kind, row) in self.pending.items():
            batch["removed" if kind == "removed" else "rows" if kind == "changed" else "added"].append(
                key if kind == "removed" else row)
        self.pending = {}
        self.sent = time.monotonic()
        self.frames += 1
        data = frame("changed", batch)
        for sub in self.subscribers:
            if sub.ready:
                sub.offer(data)


class Hub:
    """The open upstreams, by key, each reference-counted by its subscribers."""

    def __init__(self) -> None:
        self._up: dict[Key, Upstream] = {}

    def subscribe(self, key: Key, source: Source) -> Subscriber:
        """A subscriber of the upstream for `key`, opened with `source` if there is none."""
        up = self._up.get(key)
        if up is None or up.ended:
            up = self._up[key] = Upstream(key, source, self._forgotten)
        return up.add()

    async def unsubscribe(self, sub: Subscriber) -> None:
        """The page went: the upstream is closed when it was its last subscriber."""
        up = sub.upstream
        if sub in up.subscribers:
            up.subscribers.remove(sub)
        if not up.subscribers:
            self._forgotten(up)
            await up.close()

    def _forgotten(self, up: Upstream) -> None:
        if self._up.get(up.key) is up:
            del self._up[up.key]

    def upstreams(self) -> list[Upstream]:
        return list(self._up.values())
