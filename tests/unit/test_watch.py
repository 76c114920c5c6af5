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


def test_built_rows_are_built_again_only_when_their_inputs_change():
    from schedd.api.watch import Built
    built, calls = Built(), []

    def build(name: str, n: int):
        return lambda: calls.append(name) or _job(f"{name}{n}")

    a1 = built.row("a", ("a", 1), build("a", 1))
    assert built.row("a", ("a", 1), build("a", 1)) is a1 and calls == ["a"]
    assert built.row("a", ("a", 2), build("a", 2)).spec.name == "a2" and calls == ["a", "a"]
    built.row("b", ("b", 1), build("b", 1))
    built.keep({"b": _job("b")})
    assert list(built.rows) == ["b"]


def test_a_job_summary_changes_only_with_its_inputs():
    """`job_pb_inputs` covers what `job_to_pb` reads: through a job's life (fired, triggered,
    run, cancelled, paused, resumed, its spec changed), wherever the summary changed, its
    inputs did."""
    from schedd.api import convert
    from schedd.core import commands as C
    from schedd.core import queries
    from tests.support.state import T0, Harness

    h = Harness()
    seen: list[tuple[object, bytes]] = []

    def look() -> None:
        job = h.state.jobs["j"]
        recent = tuple((ex.scheduled_ms, ex.state) for ex in queries.recent_runs(h.state, "j", 20))
        row = convert.job_to_pb(job, h.state, summary=True, recent=recent)
        seen.append((convert.job_pb_inputs(job, h.state, recent), row.SerializeToString(deterministic=True)))

    h.put(name="j", schedule="@every 10s")
    look()
    h.plan_and_fire()
    look()
    h.now = T0 + 4_000
    manual = h.apply(C.TRIGGER, name="j").payload.scheduled_ms
    look()
    h.apply(C.CANCEL, job="j", scheduled_ms=manual)
    look()
    h.apply(C.PAUSE, name="j")
    look()
    h.apply(C.RESUME, name="j")
    look()
    h.put(name="j", schedule="@every 20s")
    look()
    look()
    for (inputs_a, row_a), (inputs_b, row_b) in zip(seen, seen[1:]):
        assert row_a == row_b or inputs_a != inputs_b
    assert len({row for _, row in seen}) >= 5            # the steps did change the summary


def test_batched_reads_carry_one_reads_changes_together_and_the_sdk_hands_them_out_one_by_one():
    """A batching watch sends the changes of one read as one message (the listing with "synced",
    then each read's changes), the same events, in the same order, as the unbatched watch; the
    SDK's reader unpacks them, so its callers see single events whichever the node sends."""
    from schedd.api.watch import reads
    from schedd_client.watching import unbatched
    slots = WatchSlots(cap=1)
    rows = {"a": _job("a"), "b": _job("b")}
    index = [1]

    async def read():
        return dict(rows)

    async def scenario() -> None:
        stream = reads(_Context(), slots, read, lambda: index[0], tick=0.001)
        first = await anext(stream)
        assert [e[:2] for e in first] == [("added", "a"), ("added", "b"), ("synced", "")]
        rows["c"] = _job("c")
        del rows["a"]
        index[0] = 2
        assert [e[:2] for e in await anext(stream)] == [("added", "c"), ("removed", "a")]
        await stream.aclose()
        assert slots.active == 0

    asyncio.run(scenario())
    batch = pb.WatchEvent(type="batch", events=[pb.WatchEvent(type="added", key="a"),
                                                pb.WatchEvent(type="synced")])
    assert [(e.type, e.key) for e in unbatched(batch)] == [("added", "a"), ("synced", "")]
    single = pb.WatchEvent(type="changed", key="b")
    assert list(unbatched(single)) == [single]
