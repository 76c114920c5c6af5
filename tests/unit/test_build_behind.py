"""A node whose build is below the cluster's feature level halts (halting, in raft_patches).

Three patched nodes on the in-memory network, each applying through a real ReplicatedState; C
runs an older build's table. The leader raises the level above C's build: C keeps appending and
acknowledging the log, but applies nothing from the raise on (its state stays what the others
had at the index before), never votes, never stands, and records the level for its next start.
"""

from __future__ import annotations

import functools
import threading

from schedd.core import commands as C
from schedd.core.state import SchedulerState
from schedd.replication.memory_network import MemoryNetwork, make_leader, raft_log, send_heartbeats
from schedd.replication.node import ReplicatedState
from schedd.replication.raft_patches import PRE_VOTE, RepairingSyncObj
from tests.support.state import T0, text

A, B, OLD = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"
PEERS = [A, B, OLD]
TOP = C.FEATURES.max_level


def entry(kind: str, rid: str, *, term: int = 2, **args) -> str:
    return C.encode(kind, rid=rid, now=T0, term=term, by="test", **args)


def cluster() -> tuple[MemoryNetwork, dict[str, ReplicatedState], list[int]]:
    net, consumers, recorded = MemoryNetwork(), {}, []
    for addr in PEERS:
        table = C.table_upto(TOP - 1) if addr == OLD else C.FEATURES
        on_level = recorded.append if addr == OLD else (lambda level: None)
        consumers[addr] = ReplicatedState(SchedulerState(table), threading.RLock(), lambda e, r, i: None,
                                          build="0.1.0-old" if addr == OLD else "", on_level=on_level)
        net.add(addr, PEERS, cls=functools.partial(RepairingSyncObj, consumers=[consumers[addr]]))
    net.connect_all()
    return net, consumers, recorded


def commit(net: MemoryNetwork, consumers: dict[str, ReplicatedState], *entries: str) -> None:
    """The leader A proposes `entries`; rounds of ticks and deliveries until every node that may
    apply has applied them."""
    for e in entries:
        consumers[A].apply_entry(e)
    for _ in range(4):
        for addr in PEERS:
            net.nodes[addr]._onTick()
        net.deliver_all()
        send_heartbeats(net.nodes[A])              # the commit index reaches the followers
        net.deliver_all()


def test_a_node_below_a_raised_level_halts_with_its_log_kept_and_its_state_unchanged() -> None:
    net, consumers, recorded = cluster()
    make_leader(net.nodes[A], 2)
    commit(net, consumers, entry(C.EPOCH, "epoch-2"), entry(C.PUT, "c/put", spec=text()))
    old, new = net.nodes[OLD], net.nodes[B]
    assert not old.halted and old.raftLastApplied == new.raftLastApplied
    before = consumers[OLD]._sm.state_digest()
    assert before == consumers[B]._sm.state_digest()
    halted_at = old.raftLastApplied

    commit(net, consumers, entry(C.FEATURE_LEVEL, f"feature-{TOP}", level=TOP),
           entry(C.PUT, "c/put2", spec=text(name="j2")))

    assert consumers[B]._sm.feature_level == TOP and len(consumers[B]._sm.jobs) == 2
    assert old.halted == f"this node runs schedd 0.1.0-old, feature level {TOP - 1}; the cluster is at {TOP}: upgrade this node"
    assert old.raftLastApplied == halted_at                       # nothing from the raise on
    assert consumers[OLD]._sm.state_digest() == before and consumers[OLD]._sm.feature_level < TOP
    assert raft_log(old) == raft_log(new)                          # the log is kept, entry for entry
    assert recorded[-1] == TOP                                     # a restart on this build refuses


def test_a_halted_node_neither_votes_nor_stands() -> None:
    net, consumers, _ = cluster()
    make_leader(net.nodes[A], 2)
    commit(net, consumers, entry(C.EPOCH, "epoch-2"), entry(C.FEATURE_LEVEL, f"feature-{TOP}", level=TOP))
    old = net.nodes[OLD]
    assert old.halted
    term = old.raftCurrentTerm
    for _ in range(5):                              # its election timer runs out, again and again
        old._SyncObj__raftElectionDeadline = 0
        old._onTick()
    sent = net.take(lambda m: m.src == OLD)
    assert not any(m.kind in (PRE_VOTE, "request_vote") for m in sent) and old.raftCurrentTerm == term
    assert not old._isLeader()
    # B stands for term 3: OLD grants neither a pre-vote nor a vote
    net.take()
    for kind in (PRE_VOTE, "request_vote"):
        net.nodes[B]._SyncObj__transport.send(old._SyncObj__otherNodes and next(
            n for n in net.nodes[B]._SyncObj__otherNodes if n.id == OLD),
            {"type": kind, "term": term + 1, "round": 1, "last_log_index": 10**6, "last_log_term": term + 1})
    net.deliver(net.take(lambda m: m.dst == OLD))
    answers = net.take(lambda m: m.src == OLD)
    assert not any(m.body.get("granted") for m in answers)
    assert not any(m.kind == "response_vote" for m in answers)
    # TimeoutNow from its leader (a transfer picking it) starts no election either
    leader_node = next(n for n in old._SyncObj__otherNodes if n.id == A)
    old._SyncObj__raftLeader = leader_node
    net.nodes[A]._SyncObj__transport.send(next(n for n in net.nodes[A]._SyncObj__otherNodes if n.id == OLD),
                                          {"type": "timeout_now", "term": term})
    net.deliver(net.take(lambda m: m.dst == OLD))
    old._onTick()
    assert old.raftCurrentTerm == term and not net.take(lambda m: m.src == OLD and m.kind == "request_vote")


def test_the_leader_refuses_a_joiner_below_the_clusters_level_or_its_snapshot_format() -> None:
    from schedd.api.halted import served_while_halted
    from schedd.api.membership_service import joiner_behind
    from schedd_proto import membership_pb2 as mpb
    formats = list(C.FEATURES.snapshot_formats())
    ok = mpb.JoinClusterRequest(id="n4", max_feature_level=TOP, snapshot_formats=formats, version="1.0")
    assert joiner_behind(ok, C.FEATURES, TOP) == ""
    old = mpb.JoinClusterRequest(id="n4", max_feature_level=TOP - 1, snapshot_formats=formats, version="0.9")
    why = joiner_behind(old, C.FEATURES, TOP)
    assert f"runs schedd 0.9, feature level {TOP - 1}; the cluster is at {TOP}" in why and "upgrade n4" in why
    assert joiner_behind(old, C.FEATURES, TOP - 1) == ""
    unaware = mpb.JoinClusterRequest(id="n4")          # a build from before the check
    assert "no feature level" in joiner_behind(unaware, C.FEATURES, 2)
    blind = mpb.JoinClusterRequest(id="n4", max_feature_level=TOP, snapshot_formats=formats[:-1])
    assert f"writes format {C.FEATURES.format_for(TOP)}" in joiner_behind(blind, C.FEATURES, TOP)
    # and a halted node still answers its status, nothing else
    assert served_while_halted("/schedd.v1.Cluster/NodeInfo") and served_while_halted("/grpc.health.v1.Health/Check")
    assert not served_while_halted("/schedd.v1.Scheduler/ListJobs")
    assert not served_while_halted("/schedd.v1.Membership/JoinCluster")
