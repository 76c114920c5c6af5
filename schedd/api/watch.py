"""Watches: a listing, then its changes, as one server stream (`schedctl job list --watch`, `run
list --watch`, `worker list --watch`, `dag show --watch`).

Fed from the answering node's applied state, so a follower serves a watch as well as the leader
(it may trail the leader by what it has not applied yet): a watch looks at the node's applied
index every TICK_S, and only when it moved does it read the listing again, under the node lock
and bounded like the listing it watches, and send what differs from what it sent before. A read
costs about 1 ms per 100 jobs (their summaries and the comparison; 16 ms for 1,000), so a watch
then waits at least 1/DUTY times what its last read took: on a busy cluster no watch holds the
node lock more than 5% of the time. The
workers are the leader's (not replicated): their watch reads the leader's list each
WORKER_TICK_S. A watch ends when its caller goes away (gRPC cancels the handler; its slot is
freed however it ends). Each node serves at most `WatchSlots.cap` watches at once: past that a
new one is refused with RESOURCE_EXHAUSTED, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import Message

from schedd.ports.rpc import CallContext

MAX_WATCHERS = 64          # concurrent watches one node serves
TICK_S = 0.2               # how often a watch looks at the applied index
WORKER_TICK_S = 1.0        # how often a worker watch reads the leader's list
MAX_ROWS = 1000            # rows one watch follows (the listing's own page bound)
DUTY = 0.05                # a watch waits at least 1/DUTY times as long as its last read took

Rows = dict[str, Message]
Event = tuple[str, str, Message | None]       # (type, key, row)


@dataclass(slots=True)
class WatchSlots:
    """The node's bound on concurrent watches."""

    cap: int = MAX_WATCHERS
    active: int = field(default=0)

    def take(self) -> bool:
        if self.active >= self.cap:
            return False
        self.active += 1
        return True

    def give(self) -> None:
        self.active -= 1


@dataclass(slots=True)
class Built:
    """One watch's rows as built at its last read, each with the inputs it was built from: a
    read builds again only the rows whose inputs changed (at 100 fires/s nearly every job
    changes every second, but a watch reads five times a second; most reads of a quiet
    listing build nothing)."""

    rows: dict[str, tuple[object, Message]] = field(default_factory=dict)

    def row(self, key: str, inputs: object, build: Callable[[], Message]) -> Message:
        hit = self.rows.get(key)
        if hit is not None and hit[0] == inputs:
            return hit[1]
        row = build()
        self.rows[key] = (inputs, row)
        return row

    def keep(self, keys: Rows) -> None:
        """Forget the rows no longer listed."""
        for key in [k for k in self.rows if k not in keys]:
            del self.rows[key]


def changes(before: dict[str, bytes], rows: Rows) -> tuple[list[Event], dict[str, bytes]]:
    """What changed from the rows sent before (`before`: key -> the bytes sent) to `rows`:
    "added" and "changed" rows in the listing's order, then "removed" keys; and the new `before`."""
    after = {key: row.SerializeToString(deterministic=True) for key, row in rows.items()}
    events: list[Event] = []
    for key, row in rows.items():
        old = before.get(key)
        if old is None:
            events.append(("added", key, row))
        elif old != after[key]:
            events.append(("changed", key, row))
    events.extend(("removed", key, None) for key in before if key not in after)
    return events, after


async def follow(context: CallContext, slots: WatchSlots, read: Callable[[], Awaitable[Rows]],
                 mark: Callable[[], object], tick: float = TICK_S) -> AsyncIterator[Event]:
    """The events of one watch, one by one (`reads`)."""
    async with contextlib.aclosing(reads(context, slots, read, mark, tick)) as batches:
        async for events in batches:
            for event in events:
                yield event


async def reads(context: CallContext, slots: WatchSlots, read: Callable[[], Awaitable[Rows]],
                mark: Callable[[], object], tick: float = TICK_S) -> AsyncGenerator[list[Event], None]:
    """The events of one watch, the changes of one read together: the listing `read` gives, then
    its changes whenever `mark` (the applied index) moves, until the caller goes away; "synced"
    (key "") after the first listing. A caller that asked for batches gets each list as one
    message (`batched`): at a hundred fires a second a jobs listing changes some 250 rows a
    second, and a message each is most of what a watch costs the node."""
    if not slots.take():
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"this node serves {slots.cap} watches already (its limit); retry later or "
                            "watch through another node")
    try:
        sent: dict[str, bytes] = {}
        seen: object = None
        first = True
        while True:
            now = mark()
            pause = tick
            if first or now != seen:
                seen = now
                started = time.perf_counter()
                events, sent = changes(sent, await read())
                pause = max(tick, (time.perf_counter() - started) / DUTY)
                if first:
                    events.append(("synced", "", None))
                    first = False
                if events:
                    yield events
            await asyncio.sleep(pause)
    finally:
        slots.give()
