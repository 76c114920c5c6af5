"""Watches (schedd.api.watch): what changed between two listings, the per-node cap on
concurrent watches, and a watch's slot freed however it ends (its caller gone)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from schedd.api.watch import WatchSlots, changes, follow
from schedd_proto import scheduler_pb2 as pb


def _job(name: str, paused: bool = False) -> pb.Job:
    return pb.Job(spec=pb.JobSpec(name=name, paused=paused))


def test_changes_are_added_changed_and_removed_rows():
    events, sent = changes({}, {"a": _job("a"), "b": _job("b")})
    assert [(t, k) for t, k, _ in events] == [("added", "a"), ("added", "b")]
    events, sent = changes(sent, {"a": _job("a", paused=True), "c": _job("c")})
    assert [(t, k) for t, k, _ in events] == [("changed", "a"), ("added", "c"), ("removed", "b")]
    assert changes(sent, {"a": _job("a", paused=True), "c": _job("c")})[0] == []


class _Context:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise RuntimeError("aborted")


def test_a_watch_lists_then_follows_the_applied_index_and_frees_its_slot():
    slots = WatchSlots(cap=1)
    rows = {"a": _job("a")}
    index = [1]

    async def read():
        return dict(rows)

    async def scenario() -> None:
        got: list[tuple[str, str]] = []
        stream = follow(_Context(), slots, read, lambda: index[0], tick=0.001)
        got.append((await anext(stream))[:2])
        got.append((await anext(stream))[:2])
        assert got == [("added", "a"), ("synced", "")] and slots.active == 1
        rows["b"] = _job("b")                  # not read again until the index moves
        index[0] = 2
        assert (await anext(stream))[:2] == ("added", "b")
        # a second watch past the cap is refused with what the limit is
        refused = _Context()
        with pytest.raises(RuntimeError):
            await anext(follow(refused, slots, read, lambda: 1))
        assert refused.aborted is not None and refused.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "serves 1 watches already" in refused.aborted[1]
        # the caller goes away (gRPC cancels the handler): the slot is free again
        task = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await stream.aclose()
        assert slots.active == 0

    asyncio.run(scenario())
