"""Shard placement: group 0's `shard_map` entry (apply's rules, snapshots, digests), what group
0's leader records (schedd.runtime.placement.MapKeeper), which groups a node builds as it starts,
and calls for a group this node holds no replica of (schedd.api.shard_calls)."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from schedd.api import shard_routing as R
from schedd.api.shard_calls import GroupCallError, RemoteGroup
from schedd.core import commands as C
from schedd.core import plain
from schedd.core.shards import ShardMap
from schedd.core.snapshot import SnapshotImage
from schedd.core.state import SchedulerState
from schedd.runtime.placement import MAP_LEVEL, MapKeeper, boot_shards, peers_of
from schedd.replication.membership import MemberInfo
from schedd.settings import NodeConfig, Peer
from tests.support.state import TOP_LEVEL, Harness

NODES = ("n1", "n2", "n3")


def doc(m: ShardMap) -> dict:
    return m.to_dict()


def test_the_first_map_then_only_the_next_version_is_recorded():
    h = Harness(level=TOP_LEVEL)
    first = ShardMap.initial(NODES, 4, 3)
    assert h.apply(C.SHARD_MAP, map=doc(first)).ok
    assert h.state.shard_map == doc(first)
    grown = first.add_node("n4")
    moved, done = grown.move(2, "n1", "n4")
    for bad, why in ((first, "does not follow"),                       # the same version again
                     (moved, "does not follow"),                        # a version skipped
                     (dataclasses.replace(grown, shards=grown.shards[:3]), "fixed"),   # another S
                     ):
        r = h.apply(C.SHARD_MAP, map=doc(bad))
        assert not r.ok and why in r.msg, r.msg
        assert h.state.shard_map == doc(first)                          # a refusal commits nothing
    broken = doc(grown) | {"replication": 9}
    r = h.apply(C.SHARD_MAP, map=broken)
    assert not r.ok and "replication" in r.msg
    assert not h.apply(C.SHARD_MAP, map="n1,n2").ok
    for m in (grown, moved, done):
        assert h.apply(C.SHARD_MAP, map=doc(m)).ok
    assert set(ShardMap.from_dict(h.state.shard_map).shard(2).replicas) == {"n2", "n3", "n4"}


def test_the_map_survives_snapshots_and_replay_and_is_in_the_digest():
    h = Harness(level=TOP_LEVEL)
    empty_digest = h.state.state_digest()
    h.apply(C.SHARD_MAP, map=doc(ShardMap.initial(NODES, 4, 3)))
    assert h.state.state_digest() != empty_digest
    replica = SchedulerState()
    for i, entry in enumerate(h.entries, start=2):
        replica.apply(entry, i)
    assert replica.state_digest() == h.state.state_digest()
    copy = SchedulerState()
    copy.restore(plain.loads(plain.dumps(h.state)))
    assert copy.shard_map == h.state.shard_map and copy.state_digest() == h.state.state_digest()
    again = SchedulerState()
    again.restore(pickle.loads(pickle.dumps(SnapshotImage(h.state))))
    assert again.shard_map == h.state.shard_map and again.state_digest() == h.state.state_digest()


def test_an_older_level_refuses_the_map():
    h = Harness(level=MAP_LEVEL - 1)
    assert not h.apply(C.SHARD_MAP, map=doc(ShardMap.initial(NODES, 2, 3))).ok
    assert not h.state.shard_map


class Zero:
    """Group 0's replica as the keeper reads it."""

    def __init__(self, members: list[str], doc: dict | None = None, leader: bool = True) -> None:
        self.lock = _NoLock()
        self.state = SimpleNamespace(shard_map=doc or {}, feature_level=MAP_LEVEL)
        self.membership = SimpleNamespace(members=lambda: [MemberInfo(m, f"{m}:7100", f"{m}:7070") for m in members])
        self._leader = leader

    def is_leader(self) -> bool:
        return self._leader


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_group_zeros_leader_records_the_first_map_then_each_node_that_joins_or_leaves():
    keeper = MapKeeper(Zero(["n1", "n2", "n3"]), 4, clock=None)   # type: ignore[arg-type]
    first = keeper.next_map()
    assert first is not None and first.nodes == NODES and first.replication == 3
    assert all(set(s.replicas) == set(NODES) for s in first.shards)   # every node holds every shard
    joined = MapKeeper(Zero(["n1", "n2", "n3", "n4"], doc(first)), 4, clock=None).next_map()   # type: ignore[arg-type]
    assert joined is not None and joined.nodes == (*NODES, "n4") and joined.replicas_on("n4") == ()
    assert MapKeeper(Zero(list(NODES) + ["n4"], doc(joined)), 4, clock=None).next_map() is None  # type: ignore[arg-type]
    left = MapKeeper(Zero(list(NODES), doc(joined)), 4, clock=None).next_map()   # type: ignore[arg-type]
    assert left is not None and left.nodes == NODES
    # n3 died; n4 took its replicas of shards 1-3 and n3 left group 0: shard 0's entry (every
    # node holds group 0) is named on the nodes still here, then n3 leaves the map
    m = joined
    for k in (1, 2, 3):
        m = m.move(k, "n3", "n4")[1]
    step = MapKeeper(Zero(["n1", "n2", "n4"], doc(m)), 4, clock=None).next_map()   # type: ignore[arg-type]
    assert step is not None and set(step.shard(0).replicas) == {"n1", "n2", "n4"} and "n3" in step.nodes
    step = MapKeeper(Zero(["n1", "n2", "n4"], doc(step)), 4, clock=None).next_map()   # type: ignore[arg-type]
    assert step is not None and step.nodes == ("n1", "n2", "n4")
    assert MapKeeper(Zero(list(NODES), leader=False), 4, clock=None).next_map() is None   # type: ignore[arg-type]


def config(tmp_path: Path, *, join: tuple[str, ...] = ()) -> NodeConfig:
    return NodeConfig(node_id="n1", data_dir=tmp_path / "n1", raft_address="10.0.0.1:7100",
                      grpc_address="10.0.0.1:7070", shards=4, join=join,
                      peers=(Peer("n2", "10.0.0.2:7100", "10.0.0.2:7070"),))


def test_a_node_builds_every_group_on_its_first_start_then_the_ones_it_holds(tmp_path):
    cfg = config(tmp_path)
    assert boot_shards(cfg, first_start=True) == [0, 1, 2, 3]
    assert boot_shards(config(tmp_path, join=("10.0.0.2:7070",)), first_start=True) == [0]   # placed later
    (tmp_path / "n1" / "shards" / "2").mkdir(parents=True)
    (tmp_path / "n1" / "shards" / "2" / "journal").write_text("x")
    (tmp_path / "n1" / "shards" / "3").mkdir(parents=True)                 # empty: dropped, or never built
    assert boot_shards(cfg, first_start=False) == [0, 2]
    assert boot_shards(dataclasses.replace(cfg, shards=1), first_start=False) == [0]


def test_a_groups_peers_are_its_replicas_at_their_nodes_addresses():
    m = ShardMap.initial(("n1", "n2", "n3", "n4"), 4, 3)
    members = {n: MemberInfo(n, f"{n}:7100", f"{n}:7070") for n in ("n1", "n2", "n3", "n4")}
    peers = peers_of(m, 1, members)
    assert peers is not None and {p.id for p in peers} == set(m.shard(1).replicas)
    assert all(p.raft_address == f"{p.id}:7100" for p in peers)
    del members[m.shard(1).replicas[0]]               # a dead node removed from group 0: left out
    assert {p.id for p in peers_of(m, 1, members) or ()} == set(m.shard(1).replicas[1:])
    del members[m.shard(1).replicas[1]]
    assert peers_of(m, 1, members) is None            # a majority unknown: wait


class FakeCalls:
    def __init__(self, error: GroupCallError | None = None) -> None:
        self.asked: list[tuple[int, str, str]] = []
        self.error = error

    async def unary(self, shard, service, method, request, *, timeout=None, address=""):
        self.asked.append((shard, service, method))
        if self.error is not None:
            raise self.error
        return f"answer of shard {shard}"


class Context:
    def __init__(self) -> None:
        self.aborted: tuple | None = None

    def time_remaining(self) -> float:
        return 10.0

    def invocation_metadata(self) -> tuple:
        return ()

    async def abort(self, code, details="", trailing_metadata=()):
        self.aborted = (code, details)
        raise RuntimeError("aborted")


def test_a_group_held_elsewhere_answers_through_a_node_holding_it():
    calls = FakeCalls()
    local = {0: {"Scheduler": SimpleNamespace()}}
    front = R.ShardFront(4, lambda k: local.get(k), lambda k, service: RemoteGroup(calls, k, service))  # type: ignore[arg-type]
    assert front.hosts(0) and not front.hosts(2)
    target = front.target("Scheduler", 2)
    answer = asyncio.run(target.GetJob(object(), Context()))
    assert answer == "answer of shard 2" and calls.asked == [(2, "Scheduler", "GetJob")]
    with pytest.raises(AttributeError):
        _ = target.NoSuchMethod
    refused = FakeCalls(GroupCallError(grpc.StatusCode.NOT_FOUND, "n2: job 'x' not found"))
    ctx = Context()
    with pytest.raises(RuntimeError):
        asyncio.run(RemoteGroup(refused, 2, "Scheduler").GetJob(object(), ctx))   # type: ignore[arg-type]
    assert ctx.aborted == (grpc.StatusCode.NOT_FOUND, "n2: job 'x' not found")


def test_a_nodes_resident_log_budget_is_shared_by_its_groups():
    from schedd.replication.journal_index import RESIDENT_BYTES
    from schedd.replication.node import MIN_RESIDENT_BYTES, resident_log_bytes
    assert resident_log_bytes(1) == RESIDENT_BYTES                 # an unsharded node: as before
    assert resident_log_bytes(4) == RESIDENT_BYTES // 4
    assert resident_log_bytes(64) == MIN_RESIDENT_BYTES            # never below 1 MiB a group
