"""NodeInfo's role and term come from one moment.

A leader of term 2 resumed by SIGCONT reads the new leader's AppendEntries of term 3: stock sets
the term, then the follower state. A reader on the gRPC thread while the tick thread is switched
out between the two (for longer than its reads take) saw (leader, 3): leader of a term it never
led. The old read, retried until its ends agree, agrees on exactly that; the tuple the tick
thread publishes between ticks cannot.
"""

from __future__ import annotations

from schedd.replication.memory_network import MemoryNetwork, make_leader, send_heartbeats
from schedd.replication.node import RaftNode
from schedd.replication.raft_patches import RepairingSyncObj, _RAFT_STATE

A, B, C = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"


def leader_of_term_2() -> tuple[MemoryNetwork, RepairingSyncObj]:
    net = MemoryNetwork()
    for addr in (A, B, C):
        net.add(addr, [A, B, C], cls=RepairingSyncObj)
    net.connect_all()
    leader = net.nodes[A]
    make_leader(leader, 2)
    send_heartbeats(leader)
    net.deliver_all()
    leader._onTick()                          # a tick ends: what it publishes is one moment
    return net, leader


def node_over(sync: RepairingSyncObj) -> RaftNode:
    node = object.__new__(RaftNode)
    node.sync = sync
    node._started = 0.0
    return node


def mid_step_down(sync: RepairingSyncObj) -> None:
    """Where the tick thread stands between stock's two stores: the new term, the old role."""
    sync._SyncObj__raftCurrentTerm = 3
    assert sync._SyncObj__raftState == _RAFT_STATE.LEADER


def test_the_old_read_pairs_the_role_with_a_term_of_another_moment() -> None:
    _, leader = leader_of_term_2()
    mid_step_down(leader)
    old = node_over(leader)._status()         # the read before the fix: its ends agree, wrongly
    assert (old.role, old.term) == ("leader", 3)


def test_status_reports_the_role_and_term_of_one_moment() -> None:
    net, leader = leader_of_term_2()
    node = node_over(leader)
    st = node.status()
    assert (st.role, st.term, st.leader) == ("leader", 2, A)
    mid_step_down(leader)
    st = node.status()
    assert (st.role, st.term) == ("leader", 2)        # the last whole moment: it did lead term 2
    leader._SyncObj__setState(_RAFT_STATE.FOLLOWER)   # the step down completes; the tick ends
    leader._onTick()
    st = node.status()
    assert st.role == "follower" and st.term == 3 and st.match_index == {}
