"""Linearizable reads: ReadIndex's bookkeeping (schedd/replication/read_index.py) and
the leader/follower exchange that confirms a round (ReadIndex in raft_patches), driven message by
message on the in-memory network: no sockets, no tick thread, no timing.

The scenario of the issue: a leader cut off from its peers still believes it leads, while the
others elect a new leader and commit newer writes; a read on the old leader must never be
answered from its old state."""

from __future__ import annotations

from pysyncobj import SyncObj

from schedd.replication.memory_network import (NO_OP, MemoryNetwork, commit_index, make_leader,
                                               raft_log, send_heartbeats)
from schedd.replication.raft_patches import RepairingSyncObj
from schedd.replication.read_index import NOT_LEADER, STEPPED_DOWN, ReadIndex

A, B, C = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"
PEERS = [A, B, C]


class Answers:
    """Collects read callbacks' outcomes: index, or the refusal's text."""

    def __init__(self) -> None:
        self.got: list[int | str] = []

    def __call__(self, index: int | None, why: str) -> None:
        self.got.append(index if index is not None else why)


# ---------------------------------------------------------------- the bookkeeping alone

def test_a_round_is_confirmed_by_a_majority_and_served_once_applied() -> None:
    r, out = ReadIndex(), Answers()
    r.ask(out)
    r.ask(out)
    assert r.start(commit_index=7) is not None and r.seq == 1
    r.confirm(["b", "c"])
    assert out.got == [] and r.unconfirmed()          # nobody echoed yet
    r.ack("b", 1)
    r.confirm(["b", "c"])
    r.serve(applied=6)
    assert out.got == []                              # confirmed, not applied yet
    r.serve(applied=7)
    assert out.got == [7, 7] and r.stats.rounds == 1 and r.stats.served == 2


def test_an_echo_of_an_older_round_confirms_nothing_newer() -> None:
    r, first, second = ReadIndex(), Answers(), Answers()
    r.ask(first)
    r.start(commit_index=3)
    r.ask(second)                                     # arrived after round 1 began
    r.start(commit_index=4)
    r.ack("b", 1)                                     # answers round 1's heartbeat only
    r.confirm(["b", "c"])
    r.serve(applied=10)
    assert first.got == [3] and second.got == []
    r.ack("c", 2)
    r.confirm(["b", "c"])
    r.serve(applied=10)
    assert second.got == [4]


def test_five_voters_need_two_echoes() -> None:
    r, out = ReadIndex(), Answers()
    r.ask(out)
    r.start(commit_index=1)
    r.ack("b", 1)
    r.confirm(["b", "c", "d", "e"])
    assert r.unconfirmed()
    r.ack("e", 1)
    r.confirm(["b", "c", "d", "e"])
    r.serve(applied=1)
    assert out.got == [1]


def test_alone_a_leader_confirms_at_once() -> None:
    r, out = ReadIndex(), Answers()
    r.ask(out)
    r.start(commit_index=2)
    r.confirm([])
    r.serve(applied=2)
    assert out.got == [2]


def test_stepping_down_refuses_what_is_unconfirmed_and_keeps_what_is() -> None:
    r, confirmed, pending, asked = ReadIndex(), Answers(), Answers(), Answers()
    r.ask(confirmed)
    r.start(commit_index=5)
    r.ack("b", 1)
    r.confirm(["b", "c"])
    r.ask(pending)
    r.start(commit_index=6)
    r.ask(asked)
    r.fail(STEPPED_DOWN)
    assert pending.got == [STEPPED_DOWN] and asked.got == [STEPPED_DOWN]
    r.serve(applied=5)                # applying goes on as a follower: the proof stands
    assert confirmed.got == [5] and r.stats.refused == 2


# ---------------------------------------------------------------- ReadIndex on the wire

def cluster(classes: dict[str, type] | None = None) -> MemoryNetwork:
    net = MemoryNetwork()
    for addr in PEERS:
        net.add(addr, PEERS, cls=(classes or {}).get(addr, RepairingSyncObj))
    net.connect_all()
    return net


def settled(net: MemoryNetwork, leader: str = A, term: int = 2) -> SyncObj:
    """`leader` leads `term`, its no-op committed and applied everywhere, every answer read."""
    node = net.nodes[leader]
    make_leader(node, term)
    for _ in range(3):
        send_heartbeats(node)
        net.deliver_all()
        for n in net.nodes.values():
            n._onTick()
        net.deliver_all()
    assert commit_index(node) == raft_log(node)[-1][0]
    return node


def test_a_read_is_confirmed_by_a_heartbeat_round_that_asks() -> None:
    """Quiet heartbeats would leave a caught-up follower's heartbeat unanswered; a read round asks."""
    net = cluster()
    leader = settled(net)
    out = Answers()
    leader.request_read(out)
    leader._onTick()
    sent = net.take()
    beats = [m for m in sent if m.kind == "append_entries"]
    assert {m.dst for m in beats} == {B, C}
    assert all(m.body["read_seq"] == 1 and not m.body.get("quiet") for m in beats)
    assert out.got == []                              # no answer read yet
    net.deliver(sent)
    answers = net.take(lambda m: m.dst == A)
    assert {m.body.get("read_seq") for m in answers} == {1}
    net.deliver(answers[:1])                          # one follower + the leader: a majority
    assert out.got == [commit_index(leader)]


def test_reads_asked_together_share_one_round() -> None:
    net = cluster()
    leader = settled(net)
    outs = [Answers() for _ in range(50)]
    for out in outs:
        leader.request_read(out)
    leader._onTick()
    assert len([m for m in net.take() if m.kind == "append_entries"]) == 2   # one per follower
    assert leader.reads.stats.rounds == 1


def test_a_cut_off_leader_never_answers_a_read_from_its_old_state() -> None:
    """A is cut off from B and C, which elect B (term 3) and commit a write; A still
    believes it leads. A read on A is never served: its heartbeats reach nobody, and once healed
    B and C drop its term-2 heartbeats unanswered; A steps down and refuses the read."""
    net = cluster()
    old = settled(net)
    for addr in (B, C):
        net.transports[A].disconnect(addr)
        net.transports[addr].disconnect(A)
    new = net.nodes[B]
    make_leader(new, 3)
    new._applyCommand(NO_OP + b"w", None)
    for _ in range(3):
        new._onTick()
        net.deliver_all()
    assert commit_index(new) > commit_index(old)      # the new leader committed past A
    out = Answers()
    old.request_read(out)
    old._onTick()
    assert net.take() == [] and out.got == []         # nobody to ask: nothing served
    net.connect_all()                                 # healed: B and C are at term 3
    send_heartbeats(old)
    net.deliver(net.take(lambda m: m.src == A))
    assert net.take(lambda m: m.dst == A and m.kind == "next_node_idx") == []   # dropped
    assert out.got == []
    send_heartbeats(new)                              # B's heartbeat deposes A
    net.deliver(net.take(lambda m: m.src == B and m.dst == A))
    assert out.got == [STEPPED_DOWN]


def test_a_new_leader_serves_no_read_before_it_commits_an_entry_of_its_term() -> None:
    """Raft §8: until its no-op commits, a new leader's commit index may lag the last one's."""
    net = cluster()
    settled(net)
    new = net.nodes[B]
    make_leader(new, 3)                               # appended its no-op, not committed yet
    net.take()
    out = Answers()
    new.request_read(out)
    new._onTick()
    assert new.reads.stats.rounds == 0 and out.got == []
    for _ in range(3):
        send_heartbeats(new)
        net.deliver_all()
        new._onTick()
        net.deliver_all()
    assert out.got == [commit_index(new)] and new.reads.stats.rounds == 1


def test_a_follower_refuses_a_read() -> None:
    net = cluster()
    settled(net)
    out = Answers()
    net.nodes[C].request_read(out)
    net.nodes[C]._onTick()
    assert out.got == [NOT_LEADER]


def test_stock_followers_do_not_echo_so_reads_are_refused_not_served_stale() -> None:
    """Mixed versions: a stock follower's answer carries no echo; a leader that needs it for
    its majority cannot confirm, and waits (its caller's deadline refuses the read)."""
    net = cluster({B: SyncObj, C: SyncObj})
    leader = settled(net)
    out = Answers()
    leader.request_read(out)
    leader._onTick()
    net.deliver_all()
    leader._onTick()
    net.deliver_all()
    assert out.got == [] and leader.reads.unconfirmed()


def test_read_age_says_when_a_node_last_had_proof_it_was_current() -> None:
    """A stale read's answer says how old it may be: a follower since it heard its leader."""
    net = cluster()
    leader = settled(net)
    age, behind = net.nodes[C].read_age()
    assert age is not None and 0 <= age < 5 and behind == 0
    lone = MemoryNetwork().add("10.0.0.9:1", ["10.0.0.9:1", A], cls=RepairingSyncObj)
    assert lone.read_age() == (None, 0)               # never heard a leader
    assert leader.read_age()[0] is not None
