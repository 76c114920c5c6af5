"""Log repair, conflict-only truncation and pre-vote (schedd/replication/raft_patches.py), driven
message by message on an in-memory network: no sockets, no tick thread, no timing.

Each scenario runs against the patched SyncObj and, where the stock one fails it, against stock
pysyncobj 0.3.17 too: that is the negative control proving the scenario reproduces the stuck
log repair (a leader cut off under write load never caught up after the heal).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st
from pysyncobj import SyncObj
from pysyncobj.journal import MemoryJournal

from schedd.replication.memory_network import (NO_OP, MemoryNetwork, append_raw, commit_index,
                                               make_leader, match_index, raft_log, send_heartbeats,
                                               set_term)
from schedd.replication.raft_patches import PRE_VOTE, RepairingSyncObj, raft_clock

A, B, C = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"
PEERS = [A, B, C]


def cluster(cls: type) -> MemoryNetwork:
    net = MemoryNetwork()
    for addr in PEERS:
        net.add(addr, PEERS, cls=cls)
    net.connect_all()
    return net


def diverged(cls: type, *, common: int = 20, stale: int = 40, fresh: int = 60) -> MemoryNetwork:
    """The stuck repair's shape: B led term 1 alone and appended `stale` entries nobody else has;
    A and C moved on in term 2 with `fresh` entries at the same indexes. A now leads term 3."""
    net = cluster(cls)
    for addr in PEERS:
        append_raw(net.nodes[addr], [1] * common)
    append_raw(net.nodes[B], [1] * stale)
    for addr in (A, C):
        append_raw(net.nodes[addr], [2] * fresh)
    for addr in PEERS:
        set_term(net.nodes[addr], 2)
    make_leader(net.nodes[A], 3)
    return net


def rounds(net: MemoryNetwork, leader: str, n: int) -> None:
    """n heartbeat rounds: the leader sends its pipelined burst, everything is delivered in order."""
    for _ in range(n):
        send_heartbeats(net.nodes[leader])
        net.deliver_all()


def converged(net: MemoryNetwork, a: str, b: str) -> bool:
    return raft_log(net.nodes[a]) == raft_log(net.nodes[b])


# --------------------------------------------------------------------------- log repair

def test_divergent_suffix_of_several_batches_is_repaired() -> None:
    net = diverged(RepairingSyncObj)
    rounds(net, A, 12)
    assert converged(net, A, B) and converged(net, A, C)
    assert net.nodes[B].repair_stats.truncated_entries == 40      # the stale term-1 suffix only
    assert match_index(net.nodes[A], B) == raft_log(net.nodes[A])[-1][0]


def test_stock_pysyncobj_never_repairs_a_divergent_suffix() -> None:
    """Negative control: the leader keeps the last answer of a pipelined burst ("go to my last
    index + 1") and never walks back past the divergent suffix."""
    net = diverged(SyncObj)
    rounds(net, A, 60)
    assert converged(net, A, C)
    assert not converged(net, A, B)


def test_repair_converges_in_few_rounds_whatever_the_suffix_length() -> None:
    """One conflicting term costs one round trip (the follower names the term's first index)."""
    net = diverged(RepairingSyncObj, stale=400, fresh=300)
    rounds(net, A, 6)
    assert converged(net, A, B)


def test_restarted_follower_with_a_shorter_log_catches_up() -> None:
    net = cluster(RepairingSyncObj)
    append_raw(net.nodes[A], [1] * 50)
    append_raw(net.nodes[C], [1] * 50)
    append_raw(net.nodes[B], [1] * 5)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 4)
    assert converged(net, A, B)


@pytest.mark.parametrize("kept", [0, 12])
def test_a_follower_that_lost_acknowledged_entries_is_repaired(kept: int) -> None:
    """B acknowledged 40 entries, then lost them (wiped and started again under its name:
    kept=0; or a disk that kept only the first 12). The leader's matchIndex for it said 40, and
    probing never went below 41: B never caught up (the full fault profile's S12)."""
    net = cluster(RepairingSyncObj)
    leader = net.nodes[A]
    make_leader(leader, 2)
    append_raw(leader, [2] * 40)
    rounds(net, A, 4)
    assert match_index(leader, B) == raft_log(leader)[-1][0]
    kept_log = raft_log(net.nodes[B])[:kept + 1]
    fresh = net.add(B, PEERS, cls=RepairingSyncObj)
    append_raw(fresh, [t for _, t in kept_log[1:]])
    net.connect_all()
    rounds(net, A, 8)
    assert converged(net, A, B)
    assert match_index(leader, B) == raft_log(leader)[-1][0]
    assert leader.repair_stats.acked_lost == 1


def test_follower_never_commits_an_entry_the_leader_did_not_vouch_for() -> None:
    """Receiver rule 5: commitIndex <= the last entry this AppendEntries verified, not the log's
    last entry (B still holds its stale term-1 suffix beyond the verified prefix)."""
    net = diverged(RepairingSyncObj)
    leader = net.nodes[A]
    leader._SyncObj__raftCommitIndex = 70              # the leader's commit
    # A heartbeat whose prevLogIdx (20) is the end of the common prefix, carrying no entries.
    net.transports[B].receive(_heartbeat(A, B, term=3, prev_idx=20, prev_term=1, commit=70))
    assert commit_index(net.nodes[B]) <= 20
    assert len(raft_log(net.nodes[B])) == 61         # nothing truncated by a heartbeat


# --------------------------------------------------------------------------- truncation

def _delayed_duplicate(cls: type) -> tuple[MemoryNetwork, list[tuple[int, int]], int]:
    """B is in sync; the leader sends entries 33..36 (M1), then 37..40 (M2); M1 arrives again
    after M2 (a delayed duplicate, as a retransmission or a reconnect can produce)."""
    net = cluster(cls)
    append_raw(net.nodes[A], [1] * 30)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 3)
    append_raw(net.nodes[A], [2] * 4)
    send_heartbeats(net.nodes[A])
    m1 = [m for m in net.queue if m.dst == B]
    net.deliver_all()
    append_raw(net.nodes[A], [2] * 4)
    rounds(net, A, 2)
    before, acked = raft_log(net.nodes[B]), match_index(net.nodes[A], B)
    assert acked == 40 and before[-1] == (40, 2)
    net.deliver(m1)
    return net, before, acked


def test_repeated_append_does_not_truncate_acknowledged_entries() -> None:
    net, before, acked = _delayed_duplicate(RepairingSyncObj)
    assert raft_log(net.nodes[B]) == before
    assert net.nodes[B].repair_stats.truncations == 0
    net.deliver_all()
    assert match_index(net.nodes[A], B) == acked


def test_stock_pysyncobj_truncates_on_a_repeated_append() -> None:
    """Negative control: stock drops everything after prevLogIdx on any overlapping append,
    entries it had acknowledged included."""
    net, before, acked = _delayed_duplicate(SyncObj)
    assert raft_log(net.nodes[B])[-1][0] < acked


def test_reordered_batches_converge_and_never_lose_acked_entries() -> None:
    net = cluster(RepairingSyncObj)
    append_raw(net.nodes[A], [1] * 40)
    make_leader(net.nodes[A], 2)
    acked_before: list[tuple[int, int]] = []
    for _ in range(8):
        send_heartbeats(net.nodes[A])
        to_b = net.take(lambda m: m.dst == B)
        net.deliver(reversed(to_b))                   # the burst arrives back to front
        net.deliver_all()
        log_b = raft_log(net.nodes[B])
        assert log_b[:len(acked_before)] == acked_before
        acked_before = log_b[:match_index(net.nodes[A], B)]
    assert converged(net, A, B)


@settings(max_examples=150, deadline=None)
@given(common=st.integers(0, 15), stale=st.integers(0, 40), fresh=st.integers(0, 40),
       schedule=st.lists(st.tuples(st.sampled_from(["deliver", "drop", "dup", "reverse"]),
                                   st.integers(0, 5)), max_size=25))
def test_any_delivery_schedule_keeps_acked_entries_and_converges_once_healed(
        common: int, stale: int, fresh: int, schedule: list[tuple[str, int]]) -> None:
    """Property: whatever is dropped, duplicated or reordered, an entry the leader counts as
    matched on B stays in B's log, and reliable delivery afterwards converges B."""
    net = diverged(RepairingSyncObj, common=common, stale=stale, fresh=fresh)
    leader = net.nodes[A]
    history: list = []
    for action, k in schedule:
        send_heartbeats(leader)
        burst = net.take()
        history.extend(burst)
        if action == "drop":
            burst = burst[k:]
        elif action == "dup" and history:
            burst = burst + history[-(k + 1):]
        elif action == "reverse":
            burst = list(reversed(burst))
        net.deliver(burst)
        leader_log = raft_log(leader)
        for peer in (B, C):
            m = match_index(leader, peer)
            assert raft_log(net.nodes[peer])[:m] == leader_log[:m]
    net.queue.clear()
    rounds(net, A, 10)
    assert converged(net, A, B) and converged(net, A, C)


# --------------------------------------------------------------------------- pre-vote

def _heartbeat(src: str, dst: str, *, term: int, prev_idx: int, prev_term: int, commit: int):
    from schedd.replication.memory_network import Message
    return Message(src, dst, {"type": "append_entries", "term": term, "commit_index": commit,
                              "entries": [], "prevLogIdx": prev_idx, "prevLogTerm": prev_term})


def expire_election_timer(node: SyncObj) -> None:
    node._SyncObj__raftElectionDeadline = 0


def test_isolated_node_does_not_raise_its_term() -> None:
    """An expired timer starts a pre-vote round, not an election: a node cut off (or stalled)
    keeps its term, so on return it cannot depose the leader."""
    net = cluster(RepairingSyncObj)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 2)
    b = net.nodes[B]
    for _ in range(5):                                # five timeouts while partitioned
        expire_election_timer(b)
        b._onTick()
        net.take(lambda m: m.src == B)               # its requests are lost
    assert b.raftCurrentTerm == 2 and b.repair_stats.pre_votes == 5
    rounds(net, A, 2)                                # healed: the leader is still the leader
    assert net.nodes[A]._isLeader() and net.nodes[A].raftCurrentTerm == 2


def test_followers_that_hear_the_leader_refuse_a_pre_vote() -> None:
    net = cluster(RepairingSyncObj)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 2)
    b = net.nodes[B]
    expire_election_timer(b)
    b._onTick()                                      # pre-vote sent to A and C
    assert any(m.kind == PRE_VOTE for m in net.queue)
    net.deliver_all()
    assert b.raftCurrentTerm == 2 and net.nodes[A]._isLeader()


def test_won_pre_vote_leads_to_an_election_when_the_leader_is_gone() -> None:
    net = cluster(RepairingSyncObj)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 2)
    for addr in (B, C):                              # A dies: B and C stop hearing from it
        net.nodes[addr]._leader_contact = -1e9
        net.transports[addr].disconnect(A)
    b = net.nodes[B]
    expire_election_timer(b)
    b._onTick()
    net.deliver_all()                                # C grants the pre-vote
    assert b.raftCurrentTerm == 2
    b._onTick()                                      # the real election, term 3
    net.deliver_all()
    assert b.raftCurrentTerm == 3 and b._isLeader()


def test_grants_arriving_after_the_leader_was_heard_start_no_election() -> None:
    """A follower whose tick stalled past its timeout sends a pre-vote before it reads
    the heartbeats queued meanwhile; a peer stalled alike grants it. The grant answers a question
    asked before the leader was heard: it must not start an election (it did: term 3)."""
    net = cluster(RepairingSyncObj)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 2)
    b, c = net.nodes[B], net.nodes[C]
    expire_election_timer(b)
    b._onTick()                                      # pre-vote to A and C
    requests = net.take(lambda m: m.kind == PRE_VOTE)
    send_heartbeats(net.nodes[A])
    net.deliver(net.take(lambda m: m.dst == B))      # B now hears the leader...
    c._leader_contact = -1e9                         # ...C has not yet (stalled too)
    net.deliver([m for m in requests if m.dst == C])
    assert any(m.body.get("granted") for m in net.queue if m.dst == B)
    net.deliver_all()                                # the late grant reaches B
    for _ in range(3):
        b._onTick()
        net.deliver_all()
    assert b.raftCurrentTerm == 2 and net.nodes[A]._isLeader()


def test_a_node_back_from_a_stall_refuses_pre_votes_until_it_has_listened() -> None:
    """A node that was not running (its tick stalled: CPU starvation, a long apply) cannot tell
    whether the leader was silent: it refuses pre-votes for a minimum election timeout after."""
    net = cluster(RepairingSyncObj)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 2)
    b, c = net.nodes[B], net.nodes[C]
    stall = c._SyncObj__conf.raftMaxTimeout
    c._onTick()
    c._tick_started -= stall                         # C's last tick began `stall` s ago
    c._leader_contact -= stall                       # and so did its last look at the leader
    c._onTick()
    assert c.repair_stats.long_tick_gaps == 1 and c.repair_stats.max_tick_gap >= stall
    expire_election_timer(b)
    b._onTick()
    net.deliver([m for m in net.take(lambda m: m.kind == PRE_VOTE) if m.dst == C])
    replies = net.take(lambda m: m.src == C)
    assert replies and not any(m.body["granted"] for m in replies)


def test_pre_vote_refused_to_an_out_of_date_log() -> None:
    net = cluster(RepairingSyncObj)
    append_raw(net.nodes[C], [1] * 5)
    for addr in PEERS:
        net.nodes[addr]._leader_contact = -1e9
    b = net.nodes[B]
    expire_election_timer(b)
    b._onTick()
    net.deliver(net.take(lambda m: m.dst == C))
    replies = net.take(lambda m: m.src == C)
    assert replies and not any(m.body["granted"] for m in replies)


def test_snapshot_install_restarts_the_election_timer() -> None:
    """Installing a snapshot blocks the tick thread past the election timeout (simulated by a
    load that takes longer than raftMaxTimeout); the leader was just heard, so the timer must
    start after the install, not before it."""
    net = cluster(RepairingSyncObj)
    b = net.nodes[B]
    b._SyncObj__serializer.setTransmissionData = lambda data: True
    b._SyncObj__loadDumpFile = lambda clearJournal: time.sleep(0.9)
    net.transports[B].receive(
        _msg(A, B, {"type": "append_entries", "term": 0, "commit_index": 1,
                    "serialized": (b"", True, True)}))
    assert b._SyncObj__raftElectionDeadline > raft_clock()


def _term_ahead(cls: type) -> MemoryNetwork:
    """The soak's stuck replica: A leads term 2. For a moment B and C stop hearing it (a partition
    storm), C wins a pre-vote and starts an election for term 3, and every request_vote it sends
    is lost (the partition moved). A is heard again by B and goes on leading term 2; C is a
    candidate of term 3, the term nobody else knows."""
    net = cluster(cls)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 2)
    c = net.nodes[C]
    for addr in (B, C):
        net.nodes[addr]._leader_contact = -1e9
    expire_election_timer(c)
    c._onTick()                                      # pre-vote
    net.deliver(net.take(lambda m: m.dst == B))      # B grants (A's traffic to B is held)
    net.deliver(net.take(lambda m: m.dst == C))
    c._onTick()                                      # the election: term 3
    assert c.raftCurrentTerm == 3
    net.take(lambda m: m.src == C)                   # its request_vote messages are lost
    net.queue.clear()
    append_raw(net.nodes[A], [2] * 10)               # A goes on leading: C falls behind
    return net


def _run(net: MemoryNetwork, seconds_of_timeouts: int) -> None:
    """Heartbeats of whoever leads, every election timer running out in turn."""
    for _ in range(seconds_of_timeouts):
        for addr in PEERS:
            node = net.nodes[addr]
            if node._isLeader():
                send_heartbeats(node)
                node._onTick()
            net.deliver_all()
        for addr in PEERS:
            node = net.nodes[addr]
            if not node._isLeader() and node._SyncObj__raftLeader is None:
                expire_election_timer(node)
                node._leader_contact = -1e9
            node._onTick()
            net.deliver_all()


def test_a_node_whose_term_ran_ahead_rejoins_the_cluster() -> None:
    """A node of a higher term answers a lower-term AppendEntries with its term (Raft §5.1: the
    reply carries currentTerm, and a leader that sees a newer term steps down). Without it the
    node ignored the leader for ever: pre-vote kept it from raising the term again, its
    request_vote for term 3 had been lost, and the leader never learnt of term 3 (the 2-hour
    soak's replica that stopped at index 26,616 while the cluster went on to 28,052)."""
    net = _term_ahead(RepairingSyncObj)
    _run(net, 12)
    leaders = [a for a in PEERS if net.nodes[a]._isLeader()]
    assert len(leaders) == 1
    assert all(converged(net, leaders[0], a) for a in PEERS)
    assert len({net.nodes[a].raftCurrentTerm for a in PEERS}) == 1
    assert net.nodes[A].repair_stats.newer_term_step_downs == 1


def _msg(src: str, dst: str, body: dict):
    from schedd.replication.memory_network import Message
    return Message(src, dst, body)


def test_heartbeats_keep_their_period() -> None:
    """The leader's next heartbeat is due one appendEntriesPeriod after the last, on pysyncobj's
    clock (on time.monotonic() the deadline was 0.26 s late here: every commit took ~290 ms)."""
    net = cluster(RepairingSyncObj)
    leader = net.nodes[A]
    make_leader(leader, 2)
    send_heartbeats(leader)
    due = leader._SyncObj__newAppendEntriesTime - raft_clock()
    assert 0 < due <= leader._SyncObj__conf.appendEntriesPeriod


@pytest.mark.parametrize("cls", [RepairingSyncObj])
def test_single_node_elects_itself_without_pre_vote(cls: type) -> None:
    net = MemoryNetwork()
    n = net.add(A, [A], cls=cls)
    expire_election_timer(n)
    n._onTick()
    assert n._isLeader()


def test_a_backlog_is_applied_over_several_ticks_not_in_one() -> None:
    """Stock applies every committed entry in one tick: a follower catching up (or any node
    applying a herd's batches) neither sent nor read a message until it was done, past the
    election timeout. Here a tick stops after its budget; the rest follows on the next ticks."""
    net = cluster(RepairingSyncObj)
    b = net.nodes[B]
    append_raw(b, [1] * 50)
    b._SyncObj__raftCommitIndex = b._SyncObj__raftLog[-1][1]
    step = b._SyncObj__conf.raftMinTimeout / 8 / 2          # two entries fill the budget
    b._SyncObj__doApplyCommand = lambda command: time.sleep(step)
    b._onTick()
    first = b.raftLastApplied
    assert 1 <= first < 50, first
    assert b.repair_stats.apply_yields == 1
    deadline = time.monotonic() + 60
    while b.raftLastApplied < b._SyncObj__raftCommitIndex and time.monotonic() < deadline:
        b._onTick()
    assert b.raftLastApplied == b._SyncObj__raftCommitIndex


# --------------------------------------------------------------------------- the parallel disk write

class DiskLikeJournal(MemoryJournal):
    """A memory journal with DurableJournal's parallel-mode surface: entries reach `durable_index`
    only when the test says so (the background fdatasync finishing)."""

    def __init__(self, entries: list) -> None:
        super().__init__()
        for e in entries:
            self.add(*e)
        self.durable_index = int(entries[-1][1])
        self.parallel = False

    def set_parallel(self, on: bool) -> bool:
        self.parallel = on
        return on


def with_disk(node: SyncObj) -> DiskLikeJournal:
    journal = DiskLikeJournal(node._SyncObj__raftLog[:])
    node._SyncObj__raftLog = journal
    return journal


def test_the_leader_counts_itself_in_a_commit_only_for_entries_on_its_disk() -> None:
    """Raft thesis §10.2.1: the leader sends before its own fdatasync (off its tick) but is
    one of the majority only for durable entries. Both followers acked, the leader's disk lags:
    the commit stops at the leader's durable index (stricter than the thesis, never looser)
    and moves on once the disk catches up; matchIndex is never left capped."""
    net = cluster(RepairingSyncObj)
    leader = net.nodes[A]
    disk = with_disk(leader)
    make_leader(leader, 2)
    leader._onTick()                                   # appends its no-op
    rounds(net, A, 2)
    disk.durable_index = durable = raft_log(leader)[-1][0]
    leader._onTick()
    assert commit_index(leader) == durable             # all on disk: all committed
    append_raw(leader, [2] * 5)
    rounds(net, A, 2)
    last = raft_log(leader)[-1][0]
    assert match_index(leader, B) == match_index(leader, C) == last
    leader._onTick()
    assert commit_index(leader) == durable             # acked by both, not on the leader's disk
    assert disk.parallel
    assert match_index(leader, B) == last              # the cap was the commit computation's only
    disk.durable_index = last - 2
    leader._onTick()
    assert commit_index(leader) == last - 2
    disk.durable_index = last
    leader._onTick()
    assert commit_index(leader) == last


def test_a_leader_that_steps_down_syncs_before_its_next_message_again() -> None:
    """Parallel mode ends with leadership, inside the very tick that ends it: a node that
    hears a higher term and appends as a follower must fdatasync before it acknowledges."""
    net = cluster(RepairingSyncObj)
    leader = net.nodes[A]
    disk = with_disk(leader)
    make_leader(leader, 2)
    leader._onTick()
    assert disk.parallel
    net.take()
    make_leader(net.nodes[B], 3)
    send_heartbeats(net.nodes[B])
    net.deliver(net.take(lambda m: m.dst == A))
    assert not leader._isLeader() and not disk.parallel


# ------------------------------------------------------------ the bounded lock wait: apply and the node lock

def test_apply_does_not_wait_past_a_heartbeat_period_for_a_busy_node_lock() -> None:
    """The shell's readers hold the node lock (on a loaded leader, passes of 50-100 ms while a
    start_many waited, and the heartbeats behind it). A tick gives up on the lock after a
    heartbeat period, leaves the entries for the next tick, and applies them once it is free."""
    import threading
    lock = threading.RLock()
    net = MemoryNetwork()
    for addr in PEERS:
        net.add(addr, PEERS, cls=lambda *a, **kw: RepairingSyncObj(*a, apply_lock=lock, **kw))
    net.connect_all()
    b = net.nodes[B]
    append_raw(b, [1] * 5)
    b._SyncObj__raftCommitIndex = b._SyncObj__raftLog[-1][1]
    held, release = threading.Event(), threading.Event()

    def reader() -> None:
        with lock:
            held.set()
            release.wait(60)

    t = threading.Thread(target=reader)
    t.start()
    try:
        assert held.wait(30)
        applied = b.raftLastApplied
        started = time.monotonic()
        b._onTick()
        waited = time.monotonic() - started
        assert b.raftLastApplied == applied and b.repair_stats.apply_lock_yields == 1
        assert waited < 10 * b._SyncObj__conf.appendEntriesPeriod + 5, waited   # not the reader's 60 s
    finally:
        release.set()
        t.join(30)
    deadline = time.monotonic() + 60
    while b.raftLastApplied < b._SyncObj__raftCommitIndex and time.monotonic() < deadline:
        b._onTick()
    assert b.raftLastApplied == b._SyncObj__raftCommitIndex


def settled_leader(cls: type) -> tuple[MemoryNetwork, SyncObj]:
    """A leads B and C, every follower caught up and every answer read (the tests of prompt sends)."""
    net = cluster(cls)
    leader = net.nodes[A]
    make_leader(leader, 2)
    rounds(net, A, 2)
    leader._onTick()
    net.deliver_all()
    return net, leader


def test_what_was_appended_while_an_answer_was_outstanding_goes_with_the_answer() -> None:
    """Prompt sends, flow control: one AppendEntries in flight per follower. A proposal made while
    both followers owe an answer is appended but not sent; each answer, which ticks, sends that
    follower what it lacks, without waiting for a heartbeat (the first version sent only what the
    answering tick itself appended: a commit then waited up to heartbeat_ms)."""
    net, leader = settled_leader(RepairingSyncObj)

    def carrying(after: int) -> list:
        return [m for m in net.take() if m.kind == "append_entries"
                and any(e[1] > after for e in m.body.get("entries", []))]

    last = raft_log(leader)[-1][0]
    leader._applyCommand(NO_OP + b"1", None)
    leader._onTick()
    first = carrying(last)
    assert {m.dst for m in first} == {B, C}
    second = raft_log(leader)[-1][0]
    leader._applyCommand(NO_OP + b"2", None)
    leader._onTick()
    assert raft_log(leader)[-1][0] > second and carrying(second) == []   # answers outstanding
    assert leader._SyncObj__newAppendEntriesTime > raft_clock()          # no heartbeat is due
    net.deliver(first)                  # the followers append and answer; the answers queue
    net.deliver(net.take(lambda m: m.dst == A))
    leader._onTick()
    assert {m.dst for m in carrying(second)} == {B, C}


@pytest.mark.parametrize("cls, sent", [(RepairingSyncObj, True), (SyncObj, False)])
def test_a_proposal_goes_to_the_followers_in_the_tick_that_takes_it(cls: type, sent: bool) -> None:
    """Prompt sends: stock's batch mode sends a new entry only with the next heartbeat (a commit took
    20-25 ms on an idle loopback cluster); here the tick that appends it sends it."""
    net, leader = settled_leader(cls)
    assert leader._SyncObj__newAppendEntriesTime > raft_clock()     # no heartbeat is due
    last = raft_log(leader)[-1][0]
    leader._applyCommand(NO_OP + b"p", None)
    leader._onTick()
    carried = {m.dst for m in net.take() if m.kind == "append_entries"
               and any(e[1] > last for e in m.body.get("entries", []))}
    assert carried == ({B, C} if sent else set())


# ---------------------------------------------------------------- the deadline sleep

PERIOD = 0.01       # the caller's tick period in these cases (driven_conf: heartbeat 0.05 s, min timeout 0.4 s)


def _follower_heard_leader(net: MemoryNetwork) -> SyncObj:
    node = net.nodes[B]
    node._restart_election_timer()
    return node


@pytest.mark.parametrize("case, expected", [
    ("a leader sleeps until its next heartbeat, past the tick period", "heartbeat"),
    ("a follower that heard its leader sleeps a quarter of the minimum election timeout", 0.1),
    ("a follower sleeps no later than its election deadline", 0.03),
    ("an election deadline past and not acted on polls at the period, as stock", PERIOD),
    ("a part that polls for progress keeps the period", PERIOD),
    ("a part with a deadline of its own shortens the sleep", 0.02),
    ("a queued command keeps the period", PERIOD),
    ("committed entries left to apply end the sleep at once", 0.0),
    ("a zero timeout stays zero", 0.0),
])
def test_the_tick_sleeps_until_its_next_deadline(case: str, expected: object) -> None:
    net = cluster(RepairingSyncObj)
    leader = net.nodes[A]
    make_leader(leader, 2)
    follower = _follower_heard_leader(net)
    node, period = follower, PERIOD
    if case.startswith("a leader"):
        send_heartbeats(leader)
        node = leader
    elif "no later than" in case:
        node._SyncObj__raftElectionDeadline = raft_clock() + 0.03
    elif "past and not acted on" in case:
        expire_election_timer(node)
    elif "polls for progress" in case:
        node.add_tick_need(lambda: 0.0)
        node.add_tick_need(lambda: None)
    elif "deadline of its own" in case:
        node.add_tick_need(lambda: 0.02)
    elif "queued command" in case:
        node._applyCommand(NO_OP + b"q", None)
    elif "left to apply" in case:
        append_raw(node, [2])
        node._SyncObj__raftCommitIndex = raft_log(node)[-1][0]
    elif "zero timeout" in case:
        period = 0.0
    wait = node._poll_wait(period)
    if expected == "heartbeat":
        assert PERIOD < wait <= leader._SyncObj__conf.appendEntriesPeriod
    else:
        assert wait == pytest.approx(expected, abs=0.005), case


def test_destroy_wakes_a_sleeping_tick() -> None:
    """destroy() ends the poll (a sleep until the next deadline would hold a shutdown)."""
    net = cluster(RepairingSyncObj)
    node = net.nodes[A]
    woken: list[bool] = []
    node._wake = lambda: woken.append(True)
    node.destroy()
    assert woken == [True]


# ------------------------------------------------------------ quiet heartbeats

def _heartbeat_round(net: MemoryNetwork, leader: SyncObj) -> tuple[list, list]:
    """One heartbeat: what the leader sent, and what the followers answered."""
    send_heartbeats(leader)
    sent = net.take()
    net.deliver(sent)
    return sent, net.take(lambda m: m.dst == A)


@pytest.mark.parametrize("case, answered", [
    ("caught up and answered within the window: quiet, no answer", set()),
    ("not answered within the window: asked, answered", {B, C}),
    ("a follower in PROBE is always asked", {B}),
    ("a follower that lost its log answers a quiet heartbeat anyway", {B}),
])
def test_a_caught_up_follower_answers_a_heartbeat_only_when_asked(case: str, answered: set) -> None:
    """Quiet heartbeats: the answer to a heartbeat that a caught-up follower acknowledged already tells
    the leader only that it is alive; the leader asks for one at least once per quiet window (a
    fifth of the leader fallback timeout). A quiet heartbeat still counts as leader contact:
    election timer, commit index."""
    net, leader = settled_leader(RepairingSyncObj)
    peers = {n.id: n for n in leader._SyncObj__otherNodes}
    if "not answered" in case:
        for n in peers.values():
            leader._SyncObj__lastResponseTime[n] -= leader._quiet_window()
    elif "PROBE" in case:
        leader._repl_mode[peers[B]] = "probe"
    elif "lost its log" in case:
        net.add(B, PEERS, cls=RepairingSyncObj)
        net.connect_all()
        leader._repl_mode[peers[B]] = "replicate"     # the leader has not noticed yet
    follower_c = net.nodes[C]
    follower_c._SyncObj__raftElectionDeadline = 0.0
    sent, answers = _heartbeat_round(net, leader)
    quiet = {m.dst for m in sent if m.body.get("quiet")}
    assert {m.src for m in answers} == answered, case
    if "lost its log" in case:
        assert [m.body["success"] for m in answers] == [False]
        net.deliver(answers)
        rounds(net, A, 6)
        assert converged(net, A, B)           # repaired as any follower that lost entries
    if not answered:
        assert quiet == {B, C}
        assert follower_c._SyncObj__raftElectionDeadline > raft_clock()   # heard its leader
        assert commit_index(follower_c) == commit_index(leader)


def test_a_stock_follower_answers_a_quiet_heartbeat() -> None:
    """Mixed versions: a follower that does not know the flag answers as it always did."""
    net = MemoryNetwork()
    net.add(A, PEERS, cls=RepairingSyncObj)
    for addr in (B, C):
        net.add(addr, PEERS, cls=SyncObj)
    net.connect_all()
    leader = net.nodes[A]
    make_leader(leader, 2)
    rounds(net, A, 3)
    sent, answers = _heartbeat_round(net, leader)
    assert {m.dst for m in sent if m.body.get("quiet")} == {B, C}
    assert {m.src for m in answers} == {B, C}


# --------------------------------------------------------------------------- tick holds


def test_tick_holds_count_the_ticks_work_not_its_wait_and_name_the_tick_threads_gc() -> None:
    """schedd_raft_tick_seconds: a tick's hold is its wall time less the poll's wait for a
    message; the thread's CPU and each part (apply, a collection the tick thread ran) come apart."""
    import gc

    from schedd.replication.raft_patches import TickHolds

    net = cluster(RepairingSyncObj)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 2)
    c = net.nodes[C]
    c._onTick()
    c.repair_stats.tick_holds = holds = TickHolds()
    c.addOnTickCallback(lambda: (gc.collect(), time.sleep(0.03)))
    started = time.perf_counter()
    c._onTick(0.2)                                   # waits for a message that never comes
    took = time.perf_counter() - started
    assert holds.counts["held"][-1] == 0 and sum(holds.counts["held"]) == 1
    assert 0.03 <= holds.maxes["held"] < took - 0.01, (holds.maxes, took)   # the wait left out
    assert holds.maxes["cpu"] < holds.maxes["held"] - 0.02   # the sleep held it, with no CPU
    assert holds.maxes["gc"] > 0                     # the collection, named
    assert "messages" in holds.counts and "wait" not in holds.counts


def test_tick_holds_are_exported_as_a_histogram_by_part() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from schedd.replication.raft_patches import TickHolds
    from schedd.runtime.metrics import _tick_holds

    holds = TickHolds()
    holds.record(0.3, 0.004, 0.0, {"apply": 0.25, "poll+messages": 0.05, "wait": 0.0})
    holds.record(0.001, 0.001, 0.2, {"poll+messages": 0.201})

    class Holds:
        def collect(self):  # type: ignore[no-untyped-def]
            return _tick_holds(holds)

    registry = CollectorRegistry()
    registry.register(Holds())
    text = generate_latest(registry).decode()
    assert 'schedd_raft_tick_seconds_bucket{le="0.2",part="held"} 1.0' in text
    assert 'schedd_raft_tick_seconds_bucket{le="+Inf",part="held"} 2.0' in text
    assert 'schedd_raft_tick_seconds_count{part="apply"} 1.0' in text       # only the tick that had it
    assert 'schedd_raft_tick_max_seconds{part="held"} 0.3' in text
    assert 'schedd_raft_tick_seconds_bucket{le="0.002",part="messages"} 1.0' in text   # 0.201 - 0.2 waited
    assert 'part="wait"' not in text


def test_a_tick_held_100_ms_is_logged_with_its_cpu_at_most_once_a_second(caplog) -> None:  # type: ignore[no-untyped-def]
    net = cluster(RepairingSyncObj)
    make_leader(net.nodes[A], 2)
    rounds(net, A, 2)
    c = net.nodes[C]
    c.addOnTickCallback(lambda: time.sleep(0.11))
    with caplog.at_level("INFO", logger="schedd.raft"):
        c._onTick()
        c._onTick()
    lines = [r.getMessage() for r in caplog.records if "raft tick held" in r.getMessage()]
    assert len(lines) == 1 and "as follower" in lines[0] and "rest (tick callbacks)" in lines[0], lines
    assert c.repair_stats.tick_holds.long == 2
