"""Cluster quotas when group 0's leader does not host every group (a shard moved away): a group
held elsewhere is read from a node holding it (schedd.api.quota_reads, its leader preferably),
and the balancer (schedd.leader.quota_balance) splits the quota from those reads as from its own
replicas'; a group no holder answers for leaves the shares as recorded."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import grpc
import pytest

from schedd.api import quota_reads
from schedd.api.shard_calls import GroupCallError
from schedd.core import commands as C
from schedd.core.quota_shares import GroupUse, use_of
from schedd.leader.quota_balance import QuotaBalancer
from schedd.ports.fakes import ManualClock
from schedd_proto import scheduler_pb2 as pb
from tests.support.state import TOP_LEVEL, Harness

KEY = "team:q"


class Replica:
    """A group's replica as the balancer and ListShards read it: its state under a lock; a
    proposal is applied at once (it leads)."""

    def __init__(self, node_id: str = "n1", leads: bool = True) -> None:
        self.h = Harness(level=TOP_LEVEL)
        self.state, self.lock = self.h.state, threading.Lock()
        self.leads, self.term = leads, 1
        self.cfg = SimpleNamespace(node_id=node_id)
        self.proposed: list[str] = []

    def is_leader(self) -> bool:
        return self.leads

    async def propose(self, entry: str, timeout: float):
        self.proposed.append(entry)
        return self.h.raw(entry)


def busy(r: Replica, waiting: int, running: int = 0) -> None:
    """`waiting` runs of team q ready to start, `running` of them started."""
    for i in range(waiting):
        name = f"j{len(r.state.jobs)}"
        r.h.put(name=name, schedule="", team="q")
        r.h.now += 1
        t = r.h.apply(C.TRIGGER, name=name).payload.scheduled_ms
        if i < running:
            assert r.h.apply(C.START, job=name, scheduled_ms=t, attempt=1, worker="w1").ok


def row(r: Replica, shard: int, keys, answered_by: str, leader: str, leader_addr: str = "") -> pb.ShardStatus:
    out = pb.ShardStatus(shard=shard, answered_by=answered_by, leader_id=leader, leader_grpc_address=leader_addr)
    out.quota_uses.extend(quota_reads.uses_pb(r, keys))
    return out


class Calls:
    """GroupCalls answering ListShards from replicas by address ("" : the first holder)."""

    def __init__(self, answers) -> None:
        self.answers, self.asked = answers, []

    async def unary(self, shard, service, method, request, *, timeout=None, address=""):
        assert (service, method) == ("Cluster", "ListShards") and request.shard == shard
        self.asked.append(address)
        answer = self.answers[address]
        if isinstance(answer, Exception):
            raise answer
        return pb.ListShardsResponse(shards=3, items=[answer(list(request.quota_keys))])


def test_a_use_crosses_the_wire_as_the_replica_holds_it():
    r = Replica()
    assert r.h.apply(C.QUOTA_SHARE, key=KEY, share=2, version=9).ok
    busy(r, waiting=5, running=2)
    (u,) = quota_reads.uses_pb(r, [KEY])
    assert quota_reads.use_from_pb(u) == use_of(r.state, KEY) == GroupUse(share=2, running=2, waiting=3, version=9)
    none = quota_reads.use_from_pb(quota_reads.uses_pb(Replica(), ["pool:gpu"])[0])
    assert none == GroupUse(share=None, running=0, waiting=0, version=0)      # no share is not share 0


def test_a_followers_answer_is_asked_again_of_the_leader():
    follower, leader = Replica("n2", leads=False), Replica("n4")
    busy(leader, waiting=4)
    calls = Calls({"": lambda keys: row(follower, 2, keys, "n2", "n4", "n4:50051"),
                   "n4:50051": lambda keys: row(leader, 2, keys, "n4", "n4", "n4:50051")})
    uses = asyncio.run(quota_reads.remote_uses(calls, 2, [KEY]))
    assert calls.asked == ["", "n4:50051"] and uses[KEY].waiting == 4         # the leader's figures


def test_a_leader_that_does_not_answer_leaves_the_followers_read():
    follower = Replica("n2", leads=False)
    busy(follower, waiting=1)
    calls = Calls({"": lambda keys: row(follower, 2, keys, "n2", "n4", "n4:50051"),
                   "n4:50051": GroupCallError(grpc.StatusCode.UNAVAILABLE, "n4: down")})
    assert asyncio.run(quota_reads.remote_uses(calls, 2, [KEY]))[KEY].waiting == 1


def test_an_answer_without_every_key_is_an_error_not_zero_use():
    """A holder of an older build ignores quota_keys: its row names no use, which must not be
    read as 'no share, nothing running' (that would let the balancer hand its room out)."""
    old = Replica("n2")
    calls = Calls({"": lambda keys: pb.ShardStatus(shard=2, answered_by="n2", leader_id="n2")})
    with pytest.raises(GroupCallError, match="older build"):
        asyncio.run(quota_reads.remote_uses(calls, 2, [KEY]))
    calls = Calls({"": lambda keys: row(old, 1, keys, "n2", "n2")})            # another shard's row
    with pytest.raises(GroupCallError):
        asyncio.run(quota_reads.remote_uses(calls, 2, [KEY]))


def cluster(demand: list[int]):
    """Group 0's leader hosting groups 0 and 1; group 2 lives elsewhere (read by `remote`).
    Team q's quota is 6, every group holds share 0 of it; `demand`: runs waiting per group."""
    groups = [Replica() for _ in range(3)]
    zero = groups[0]
    zero.state.shard_map = {"shards": [{}, {}, {}]}
    for g, n in zip(groups, demand):
        assert g.h.apply(C.QUOTA_SHARE, key=KEY, share=0, version=0).ok
        busy(g, waiting=n)
    assert zero.h.apply(C.QUOTA, key=KEY, limit=6).ok
    return groups


def allocation(zero: Replica) -> tuple[int, ...] | None:
    held = zero.state.allocations.get(KEY)
    return held[1] if held is not None else None


async def read_group(g: Replica, shard: int, keys):
    return quota_reads.uses_of_row(row(g, shard, keys, "n4", "n4"), shard, keys)


def test_the_balancer_splits_a_quota_over_a_group_held_elsewhere():
    groups = cluster(demand=[0, 1, 5])
    remote_reads: list[int] = []

    async def remote(k, keys):
        remote_reads.append(k)
        return await read_group(groups[k], k, keys)
    b = QuotaBalancer(lambda: {0: groups[0], 1: groups[1]}, ManualClock(0), remote)
    asyncio.run(b.balance())
    assert remote_reads == [2]
    assert allocation(groups[0]) == (0, 1, 5)                 # the demand is mostly in the moved shard
    # Group 2 copies it (its leader does, from its own replica of group 0): then a quieter
    # group 1 gives its slot to group 2 only once group 2's log holds the allocation.
    version = groups[0].state.allocations[KEY][0]
    assert groups[1].h.apply(C.QUOTA_SHARE, key=KEY, share=1, version=version).ok
    asyncio.run(b.balance())
    assert allocation(groups[0]) == (0, 1, 5)                 # unchanged: group 2 has not copied it
    groups[1].state.ready.clear()                             # group 1's demand went
    asyncio.run(b.balance())
    assert allocation(groups[0]) == (0, 0, 5)                 # lowered at once, not yet raised
    version = groups[0].state.allocations[KEY][0]
    for k in (0, 1, 2):
        assert groups[k].h.apply(C.QUOTA_SHARE, key=KEY, share=allocation(groups[0])[k], version=version).ok
    asyncio.run(b.balance())
    assert allocation(groups[0]) == (0, 0, 6)                 # every log holds it: group 2 raised


def test_a_group_no_holder_answers_for_keeps_the_shares_as_recorded():
    groups = cluster(demand=[0, 1, 5])

    async def unreachable(k, keys):
        raise GroupCallError(grpc.StatusCode.UNAVAILABLE, "no node holding a replica of shard 2 answered")
    asyncio.run(QuotaBalancer(lambda: {0: groups[0], 1: groups[1]}, ManualClock(0), unreachable).balance())
    assert allocation(groups[0]) is None
    # without a way to read other nodes, a node that does not host every group does not balance
    asyncio.run(QuotaBalancer(lambda: {0: groups[0], 1: groups[1]}, ManualClock(0)).balance())
    assert allocation(groups[0]) is None
