"""A replica that is not converging is loud: the pure tracker, the consistent Raft
status read, the watch's health verdict and log line, the metrics, and the cluster status."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from schedd.api.service import STALE_LEADER, summarize
from schedd.replication.convergence import ConvergenceTracker, samples
from schedd.ports.fakes import FakeNode, ManualClock
from schedd.replication.node import LEADER, FOLLOWER, RaftNode, RaftStatus
from schedd.runtime.metrics import Metrics
from schedd.runtime.replica_watch import ReplicaWatch
from schedd_proto import scheduler_pb2 as pb
from client.schedd_client.cluster_commands import _cluster_table

N = 10_000          # stuck after this many ms without progress


# ---------------------------------------------------------------- the tracker

# (ms, match_index, last_index) samples of one peer -> (lag, stuck) after the last one
CASES = {
    "in step": ([(0, 100, 100), (20_000, 500, 500)], (0, False)),
    "behind but moving": ([(0, 10, 100), (6_000, 50, 200), (12_000, 90, 300), (18_000, 120, 400)], (280, False)),
    "behind, not moving, not yet N": ([(0, 693, 700), (9_999, 693, 900)], (207, False)),
    "behind, not moving for N": ([(0, 693, 700), (5_000, 693, 800), (10_000, 693, 900)], (207, True)),
    "idle for an hour, then one entry": ([(0, 100, 100), (3_600_000, 100, 100), (3_600_500, 100, 101)],
                                         (1, False)),
    "reset to 0 is not progress": ([(0, 693, 700), (5_000, 0, 700), (10_000, 0, 700)], (700, True)),
    "moves again: not stuck": ([(0, 693, 700), (10_000, 693, 900), (10_500, 900, 900)], (0, False)),
}


@pytest.mark.parametrize("name", CASES)
def test_stuck_means_behind_with_no_forward_progress_for_n(name):
    seq, (lag, stuck) = CASES[name]
    t = ConvergenceTracker(stuck_after_ms=N)
    for now, match, last in seq:
        row = t.observe(now, "p", match, last)
    assert (row.lag, row.stuck) == (lag, stuck)
    assert t.is_stuck("p") is stuck and [r.peer for r in t.stuck()] == (["p"] if stuck else [])


def test_warnings_are_rate_limited_per_peer_and_rearm_after_recovery():
    t = ConvergenceTracker(stuck_after_ms=N, warn_every_ms=30_000)
    for now in (0, 10_000):
        t.observe(now, "a", 5, 50)
        t.observe(now, "b", 50, 50)
    assert [r.peer for r in t.warnings_due(10_000)] == ["a"]
    t.observe(20_000, "a", 5, 60)
    assert t.warnings_due(20_000) == []                       # within 30 s of the last one
    t.observe(40_000, "a", 5, 60)
    assert [r.peer for r in t.warnings_due(40_000)] == ["a"]
    t.observe(41_000, "a", 60, 60)                            # recovered
    for now in (42_000, 52_000):
        t.observe(now, "a", 60, 61)
    assert [r.peer for r in t.warnings_due(52_000)] == ["a"]  # stuck again: warned at once


def test_keep_only_forgets_peers_no_longer_sampled():
    t = ConvergenceTracker()
    t.observe(0, "a", 1, 1)
    t.observe(0, "b", 1, 1)
    t.keep_only(["b"])
    assert [r.peer for r in t.rows()] == ["b"]


def status(**kw) -> RaftStatus:
    base = dict(role="follower", term=2, commit_index=10, applied_index=10, leader_commit_index=10,
                has_quorum=True, uptime_s=1, leader="127.0.0.1:1", last_log_index=12, match_index={})
    return RaftStatus(**{**base, **kw})


def test_samples_leader_per_peer_follower_itself_nothing_without_leader():
    lead = status(role="leader", leader="me", last_log_index=900, match_index={"b:2": 693, "a:1": 900})
    assert samples(lead, "me") == [("a:1", 900, 900), ("b:2", 693, 900)]
    assert samples(status(leader_commit_index=12), "me") == [("me", 10, 12)]
    assert samples(status(leader=""), "me") == []


# ---------------------------------------------------------------- one consistent status read

class TornSync:
    """getStatus() that, on its first call, is torn by the tick thread: the state field is read
    while this node still leads term 1, the term after it became a follower in term 2."""

    def __init__(self) -> None:
        self.raftCurrentTerm, self.leader, self.calls = 1, SimpleNamespace(id="n1:1"), 0
        self._SyncObj__raftLog = [(b"", 41, 1), (b"", 42, 2)]

    def _isLeader(self) -> bool:
        return self.leader.id == "n1:1"

    def _getLeader(self):
        return self.leader

    def getStatus(self) -> dict:
        self.calls += 1
        state, leader = (LEADER if self._isLeader() else FOLLOWER), self.leader
        if self.calls == 1:                   # the tick thread moves on in the middle of the read
            self.raftCurrentTerm, self.leader = 2, SimpleNamespace(id="n2:2")
        return {"state": state, "leader": leader, "raft_term": self.raftCurrentTerm, "commit_idx": 41,
                "last_applied": 41, "leader_commit_idx": 41, "has_quorum": True,
                "match_idx_server_n2:2": 40}


def test_status_reads_role_term_and_leader_of_one_moment():
    node = object.__new__(RaftNode)
    node.sync, node._started = TornSync(), time.monotonic()
    st = node.status()
    assert (st.role, st.term, st.leader) == ("follower", 2, "n2:2")
    assert st.match_index == {} and st.last_log_index == 42 and node.sync.calls == 2


# ---------------------------------------------------------------- cluster status

def node_status(id_, role, term, **kw) -> pb.NodeStatus:
    return pb.NodeStatus(id=id_, role=role, term=term, raft_address=f"127.0.0.1:{id_[-1]}", **kw)


def test_two_claimed_leaders_only_the_highest_term_leads():
    nodes = [node_status("n1", "leader", 1), node_status("n2", "leader", 2), node_status("n3", "follower", 2)]
    leader, warnings = summarize(nodes, 0)
    assert leader.id == "n2" and [n.role for n in nodes] == [STALE_LEADER, "leader", "follower"]
    assert warnings == ["n1 still acts as leader of term 1, but n2 leads term 2: a stale leader"]


def test_a_stuck_replica_is_named_once_with_its_lag_and_since_when():
    stuck = pb.ReplicaProgress(peer="127.0.0.1:3", match_index=693, last_index=1105, lag=412, stuck=True,
                               progress_ms=1_800_000_000_000)
    ok = pb.ReplicaProgress(peer="127.0.0.1:2", match_index=1105, last_index=1105)
    self_view = pb.ReplicaProgress(peer="127.0.0.1:3", match_index=693, last_index=1100, lag=407, stuck=True,
                                   progress_ms=1_800_000_000_000)
    nodes = [node_status("n1", "leader", 2, replicas=[stuck, ok]), node_status("n2", "follower", 2),
             node_status("n3", "follower", 2, replicas=[self_view])]
    _, warnings = summarize(nodes, 1_800_000_038_000)
    assert warnings == ["replica n3 (127.0.0.1:3) is not converging: 412 entries behind leader n1, "
                        "matchIndex 693 unchanged since 2027-01-15T08:00:00Z (38 s); log repair stuck at "
                        "index 694"]
    _, warnings = summarize(nodes[1:], 1_800_000_038_000)        # no leader answered: its own view
    assert warnings == ["replica n3 (127.0.0.1:3) is not converging: commit index 693, the leader's 1100 "
                        "(407 entries behind), no progress since 2027-01-15T08:00:00Z (38 s); log repair "
                        "stuck at index 694"]


def test_schedctl_shows_stale_leaders_and_warnings():
    nodes = [node_status("n1", STALE_LEADER, 1), node_status("n2", "leader", 2)]
    out = _cluster_table(pb.ClusterStatus(leader_id="n2", term=2, nodes=nodes,
                                          warnings=["replica n3 (x) is not converging: 4 entries behind"]))
    lines = out.splitlines()
    row = lines[2].split()                 # ID ROLE(2 words) VERSION LEVEL TERM ...
    assert row[:3] == ["n1", "stale", "leader"] and row[5] == "1"
    assert lines[-1] == "WARNING: replica n3 (x) is not converging: 4 entries behind"


# ---------------------------------------------------------------- the watch: health, log, metrics

def status_node() -> FakeNode:
    """A leader at index 100 whose one peer (n2) has matched all of it."""
    state = SimpleNamespace(jobs={}, execs={}, epoch=2, audit=SimpleNamespace(young_pruned=0))
    node = FakeNode(lambda entry: {"ok": False}, lambda: state,
                    cfg=SimpleNamespace(raft_address="127.0.0.1:3"))
    node.membership = SimpleNamespace(id_of_raft=lambda a: {"127.0.0.1:2": "n2"}.get(a, ""))
    node.raft_status = status(role="leader", leader="127.0.0.1:3", last_log_index=100,
                              match_index={"127.0.0.1:2": 100})
    return node


@pytest.fixture
def watch():
    clock = ManualClock(0)
    node = status_node()
    w = ReplicaWatch(node, ConvergenceTracker(stuck_after_ms=N), wall_ms=lambda: 1_800_000_000_000 + clock.now_ms(),
                     mono_ms=clock.now_ms)
    return w, node, clock


def test_the_leader_names_a_stuck_peer_in_a_rate_limited_warning(watch, caplog):
    w, node, clock = watch
    caplog.set_level(logging.WARNING, "schedd.replication")
    for ms, last in ((0, 100), (5_000, 300), (10_000, 500), (11_000, 520)):
        clock.now = ms
        node.raft_status.last_log_index = last
        assert w.sample() is True                  # a stuck peer does not stop the leader's writes
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("replica n2 (127.0.0.1:2) is not converging: matchIndex 100 unchanged for 10 s")
    assert "log repair is stuck at index 101" in lines[0]
    assert [(r.peer, r.lag, r.stuck) for r in w.rows] == [("127.0.0.1:2", 420, True)]
    assert w.progress_wall_ms(w.rows[0]) == 1_800_000_000_000
    metrics = Metrics()
    metrics.watch(node, w)
    text = generate_latest(metrics.registry).decode()
    assert 'schedd_replica_lag_entries{peer="127.0.0.1:2"} 420.0' in text
    assert 'schedd_replica_stuck{peer="127.0.0.1:2"} 1.0' in text


@pytest.mark.parametrize("change, writable, why", [
    ({}, True, ""),
    ({"leader": ""}, False, "no leader is known"),
    ({"has_quorum": False}, False, "no quorum"),
    ({"commit_index": 693, "leader_commit_index": 1105}, False,
     "this replica is not converging: 412 entries behind, repair stuck at index 694"),
])
def test_writes_health_follows_leader_quorum_and_own_convergence(watch, change, writable, why):
    w, node, clock = watch
    node.raft_status = status(**change)
    for ms in (0, 5_000, 10_000):
        clock.now = ms
        w.sample()
    assert (w.writable, w.why_not_writable) == (writable, why)


def test_a_new_term_starts_a_fresh_observation(watch):
    w, node, clock = watch
    node.raft_status = status(commit_index=693, leader_commit_index=1105)
    for ms in (0, 10_000):
        clock.now = ms
        w.sample()
    assert not w.writable
    node.raft_status = status(commit_index=693, leader_commit_index=1105, term=3)
    clock.now = 10_500
    assert w.sample() is True                   # not stuck until N passes in the new term too
