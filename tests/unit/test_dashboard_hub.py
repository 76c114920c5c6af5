"""The dashboard's shared watches (hub.py) on their own, fed by fake sources: one upstream per
key however many subscribers, fan-out of one encoded frame, reference counting (the last to
leave closes the source), a slow subscriber told to reload while the others keep their frames,
and the watch's end or refusal delivered to every subscriber."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from schedd.dashboard import hub
from schedd.dashboard.backend import ApiError
from schedd.dashboard.hub import Hub, Key
from tests.unit.test_dashboard_live import Upstream


class Source:
    """The watches opened for one key (each the live tests' fake upstream, fed by the test)."""

    def __init__(self) -> None:
        self.opened: list[Upstream] = []

    def __call__(self) -> AsyncIterator[Any]:
        self.opened.append(Upstream("tok", "jobs"))
        return self.opened[-1].items()

    @property
    def feed(self) -> asyncio.Queue[Any]:
        return self.opened[-1].feed

    def all_closed(self) -> bool:
        """Each watch read is closed (one closed before its first read never made its call)."""
        return all(up.closed or not up.started for up in self.opened)


async def next_item(sub: hub.Subscriber, timeout: float = 5.0) -> Any:
    return await asyncio.wait_for(sub.queue.get(), timeout)


def rows(frame: bytes) -> dict:
    head, data = frame.decode().strip().split("\n")
    assert head == "event: changed"
    return json.loads(data[len("data: "):])


KEY = Key("tok", "grants", "jobs")


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(hub, "COALESCE_S", 0.05)


async def test_one_upstream_per_key_fans_out_one_frame_and_the_last_subscriber_closes_it():
    h, src, other = Hub(), Source(), Source()
    a, b = h.subscribe(KEY, src), h.subscribe(KEY, src)
    c = h.subscribe(Key("tok2", "grants", "jobs"), other)       # another token: its own watch
    assert len(src.opened) == 1 and len(other.opened) == 1 and len(h.upstreams()) == 2
    src.feed.put_nowait(("changed", "j0", {"name": "j0"}))     # before the listing: not a change
    src.feed.put_nowait(("synced", "", None))
    assert await next_item(a) == hub.READY and await next_item(b) == hub.READY
    late = h.subscribe(KEY, src)
    assert await next_item(late) == hub.READY                  # at once: the listing is there
    src.feed.put_nowait(("changed", "j1", {"name": "j1"}))
    frames = [await next_item(s) for s in (a, b, late)]
    assert frames[0] is frames[1] is frames[2]                 # encoded once, the same bytes to each
    assert rows(frames[0]) == {"rows": [{"name": "j1"}], "added": [], "removed": []}
    assert c.queue.empty()
    for s in (a, b):
        await h.unsubscribe(s)
    assert not src.opened[0].closed                             # `late` still follows it
    await h.unsubscribe(late)
    assert src.opened[0].closed and h.upstreams() == [c.upstream]
    again = h.subscribe(KEY, src)                               # a new page: a new watch
    assert len(src.opened) == 2 and not again.ready
    await h.unsubscribe(again)
    await h.unsubscribe(c)
    assert src.all_closed() and other.all_closed() and h.upstreams() == []


async def test_a_slow_subscriber_is_told_to_reload_and_does_not_hold_up_the_others():
    h, src = Hub(), Source()
    slow, quick_ = h.subscribe(KEY, src), h.subscribe(KEY, src)
    src.feed.put_nowait(("synced", "", None))
    assert await next_item(slow) == hub.READY and await next_item(quick_) == hub.READY
    n = hub.QUEUE + 5
    for i in range(n):                                           # one frame per coalescing period
        src.feed.put_nowait(("changed", "j1", {"name": "j1", "n": i}))
        got = rows(await next_item(quick_))                      # the quick one reads every frame
        assert got["rows"] == [{"name": "j1", "n": i}]
    items = []
    while not slow.queue.empty():
        items.append(slow.queue.get_nowait())
    assert hub.RELOAD in items and slow.overflows >= 1           # what it missed: reload, not a gap
    assert len(items) <= hub.QUEUE
    after = items[items.index(hub.RELOAD) + 1:]
    assert all(rows(f)["rows"][0]["n"] > hub.QUEUE - 1 for f in after)   # only frames after the reload
    await h.unsubscribe(slow)
    await h.unsubscribe(quick_)


async def test_the_watch_ending_or_refused_reaches_every_subscriber_and_is_forgotten():
    h, src = Hub(), Source()
    a, b = h.subscribe(KEY, src), h.subscribe(KEY, src)
    src.feed.put_nowait(ApiError("UNAVAILABLE", "no leader"))
    for s in (a, b):
        item = await next_item(s)
        assert isinstance(item, ApiError) and item.message == "no leader"
    assert h.upstreams() == [] and src.opened[0].closed
    c = h.subscribe(KEY, src)                                    # the next page opens a new one
    src.feed.put_nowait(("synced", "", None))
    assert await next_item(c) == hub.READY and len(src.opened) == 2
    src.feed.put_nowait(None)                                    # the node ended the stream
    assert await next_item(c) == hub.END
    for s in (a, b, c):
        await h.unsubscribe(s)
    assert h.upstreams() == []
