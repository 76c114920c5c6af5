"""Group commit: PutJob entries proposed together share one GROUP log entry (schedd.core.state
applies each as if alone; schedd.replication.node.GroupCommit coalesces and fans results out)."""

from __future__ import annotations

import asyncio

import pytest
from pysyncobj import FAIL_REASON

from schedd.core import commands as C
from schedd.core.results import Code, ok
from schedd.core.state import SchedulerState
from schedd.replication.node import GroupCommit, NotApplied, OutcomeUnknown
from tests.support.state import T0, TOP_LEVEL, Harness, at_top_level, text


def put_entry(name: str, rid: str, **kw) -> str:
    return C.encode(C.PUT, rid=rid, now=T0, term=1, by="alice", spec=text(name=name, **kw), name=name)


def group(*entries: str) -> str:
    return C.encode(C.GROUP, rid="", now=0, term=1, entries=list(entries))


# ---------------------------------------------------------------- apply


def test_each_entry_of_a_group_gets_its_own_result_and_a_bad_one_commits_nothing():
    h = Harness(level=TOP_LEVEL)
    bad = C.encode(C.PUT, rid="c/r2", now=T0, term=1, by="bob", spec='{"name": "Bad Name"}', name="x")
    r = h.raw(group(put_entry("a", "c/r1"), bad, put_entry("b", "c/r3")))
    a, refused, b = r.payload.parts
    assert a.ok and a.payload.name == "a" and a.payload.created and b.ok and b.payload.name == "b"
    assert not refused.ok and refused.code == "invalid" and "bad job name" in refused.msg
    assert sorted(h.state.jobs) == ["a", "b"]
    # each has its own dedup record and audit record, like an entry of its own
    assert {"c/r1", "c/r2", "c/r3"} <= set(h.state.dedup)
    again = h.raw(group(put_entry("a", "c/r1"), put_entry("c", "c/r4")))
    assert again.payload.parts[0].deduplicated and again.payload.parts[1].payload.created
    actions = [(e.principal, e.outcome) for e in h.state.audit.records if e.action == C.PUT]
    assert ("alice", "allowed") in actions and ("bob", "error") in actions


def test_a_group_replays_to_the_same_state_as_its_entries_one_by_one():
    entries = [put_entry(f"j{i}", f"c/r{i}") for i in range(5)]
    grouped, alone = Harness(level=TOP_LEVEL), Harness(level=TOP_LEVEL)
    grouped.raw(group(*entries))
    for e in entries:
        alone.raw(e)
    assert sorted(grouped.state.jobs) == sorted(alone.state.jobs)
    assert [j.next_fire for j in grouped.state.jobs.values()] == [j.next_fire for j in alone.state.jobs.values()]
    replica = SchedulerState()
    for i, e in enumerate(grouped.entries, 1):
        replica.apply(e, i + 1)
    assert replica.state_digest() == grouped.state.state_digest()


@pytest.mark.parametrize("inner, fragment", [
    (C.encode(C.FIRE, rid="", now=T0, term=1, items=[]), "cannot be grouped"),
    (C.encode(C.GROUP, rid="", now=T0, term=1, entries=["x"]), "cannot be grouped"),
    ("not json", "malformed entry"),
])
def test_a_group_refuses_kinds_that_cannot_share_a_log_index(inner, fragment):
    h = Harness(level=TOP_LEVEL)
    r = h.raw(group(put_entry("a", "c/r1"), inner))
    assert r.payload.parts[0].ok and not r.payload.parts[1].ok and fragment in r.payload.parts[1].msg
    assert list(h.state.jobs) == ["a"]


# ---------------------------------------------------------------- the proposer


class FakeRaft:
    """Applies what GroupCommit submits to a real state, answering on the loop like RaftNode."""

    def __init__(self, error: int = FAIL_REASON.SUCCESS) -> None:
        self.state = at_top_level(SchedulerState())     # a cluster that may apply GROUP
        self.submitted: list[str] = []
        self.error = error

    def submit(self, entry: str, on_done) -> None:
        self.submitted.append(entry)
        result = self.state.apply(entry, len(self.submitted)) if self.error == FAIL_REASON.SUCCESS else ok()
        asyncio.get_running_loop().call_soon(on_done, result, self.error)


async def _propose_all(raft: FakeRaft, entries: list[str]):
    commit = GroupCommit(raft.submit, lambda: 1)
    loop = asyncio.get_running_loop()
    return await asyncio.gather(*(commit.add(loop, e) for e in entries), return_exceptions=True)


def test_proposals_in_one_loop_turn_share_one_entry_and_each_gets_its_own_result():
    raft = FakeRaft()
    bad = C.encode(C.PUT, rid="c/bad", now=T0, term=1, spec="{}", name="x")
    results = asyncio.run(_propose_all(raft, [put_entry("a", "c/1"), bad, put_entry("b", "c/2")]))
    assert len(raft.submitted) == 1 and C.decode(raft.submitted[0]).kind == C.GROUP
    assert [r.code for r in results] == [Code.OK, Code.INVALID, Code.OK]
    assert results[0].payload.name == "a" and results[2].payload.name == "b"
    assert sorted(raft.state.jobs) == ["a", "b"]


def test_a_lone_proposal_goes_as_it_is_and_big_rounds_are_split():
    raft = FakeRaft()
    (r,) = asyncio.run(_propose_all(raft, [put_entry("a", "c/1")]))
    assert r.ok and C.decode(raft.submitted[0]).kind == C.PUT
    raft = FakeRaft()
    many = [put_entry(f"j{i:04d}", f"c/{i}") for i in range(600)]
    results = asyncio.run(_propose_all(raft, many))
    assert all(r.ok for r in results) and len(raft.state.jobs) == 600
    assert len(raft.submitted) >= 3 and all(len(e) <= C.MAX_ENTRY_BYTES for e in raft.submitted)


@pytest.mark.parametrize("error, exc", [(FAIL_REASON.NOT_LEADER, NotApplied),
                                        (FAIL_REASON.LEADER_CHANGED, OutcomeUnknown)])
def test_a_failed_round_fails_every_proposer_in_it(error, exc):
    results = asyncio.run(_propose_all(FakeRaft(error), [put_entry("a", "c/1"), put_entry("b", "c/2")]))
    assert all(isinstance(r, exc) for r in results)


class HeldRaft(FakeRaft):
    """Answers only when told (or never): proposals stay in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list = []

    def submit(self, entry: str, on_done) -> None:
        self.submitted.append(entry)
        self.waiting.append((self.state.apply(entry, len(self.submitted)), on_done))

    def answer_one(self) -> None:
        result, on_done = self.waiting.pop(0)
        on_done(result, FAIL_REASON.SUCCESS)


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_entries_wait_while_rounds_are_in_flight_and_go_together_when_one_ends():
    async def scenario():
        raft = HeldRaft()
        commit = GroupCommit(raft.submit, lambda: 1)
        loop = asyncio.get_running_loop()
        first = [commit.add(loop, put_entry("a", "c/1"))]
        await _turns()
        first.append(commit.add(loop, put_entry("b", "c/2")))
        await _turns()
        later = [commit.add(loop, put_entry(f"w{i}", f"c/w{i}")) for i in range(3)]
        await _turns()
        assert len(raft.submitted) == GroupCommit.MAX_ROUNDS       # two rounds in flight; 3 wait
        raft.answer_one()
        await _turns()
        assert first[0].result().ok and len(raft.submitted) == 3
        assert len(C.decode(raft.submitted[2]).args["entries"]) == 3
        while raft.waiting:
            raft.answer_one()
        return [f.result() for f in first + later]

    assert all(r.ok for r in asyncio.run(scenario()))


def test_a_round_pysyncobj_never_answers_stops_holding_the_next_ones():
    async def scenario():
        raft = HeldRaft()
        # held long enough that a loaded machine cannot release a round before the late entry is
        # checked to wait (0.05 s did, at load 7), short enough for a unit test
        commit = GroupCommit(raft.submit, lambda: 1, hold_s=1.0)
        loop = asyncio.get_running_loop()
        for i in range(GroupCommit.MAX_ROUNDS):
            commit.add(loop, put_entry(f"lost{i}", f"c/l{i}"))
            await _turns()
        late = commit.add(loop, put_entry("late", "c/late"))
        await _turns()
        assert len(raft.submitted) == GroupCommit.MAX_ROUNDS
        deadline = loop.time() + 30
        while len(raft.submitted) == GroupCommit.MAX_ROUNDS and loop.time() < deadline:
            await asyncio.sleep(0.01)
        raft.waiting[-1][1](raft.waiting[-1][0], FAIL_REASON.SUCCESS)
        return await late

    assert asyncio.run(scenario()).ok


def test_while_the_cluster_cannot_apply_groups_each_entry_goes_alone():
    async def scenario():
        raft = FakeRaft()
        commit = GroupCommit(raft.submit, lambda: 1, enabled=lambda: False)
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(*(commit.add(loop, put_entry(f"j{i}", f"c/{i}")) for i in range(3)))
        return raft, results

    raft, results = asyncio.run(scenario())
    assert all(r.ok for r in results) and [C.decode(e).kind for e in raft.submitted] == [C.PUT] * 3
