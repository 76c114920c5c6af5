"""End to end: NodeInfo of a leader resumed by SIGCONT never reports it as
leader of a term it never led.

A leader frozen past an election reads, once resumed, the new leader's AppendEntries: pysyncobj
sets the new term before the follower role, and NodeInfo read between the two said (leader, new
term) in 3 of 8 resumes. RaftNode.status now reads role, term and leader from the one record the
tick thread publishes after each tick (the unit test: tests/unit/test_status_moment.py). Here a
real 3-node cluster freezes its leader until another is elected, resumes it and watches its
NodeInfo every 20 ms: Raft elects at most one leader per term, so every (role=leader, term) any
node reports must name one node per term, and the resumed node never the new leader's term.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field

import grpc
import pytest

from schedd.ports.fakes import wait_until
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

ROUNDS = 5
WATCH_S = 3.0          # how long the resumed node is watched
POLL_S = 0.02


@dataclass(slots=True)
class Leaders:
    """Every (node, term) some node reported leading, over the whole test: Raft's election
    safety says one node per term, so a second node for a term is a NodeInfo that lied."""

    seen: dict[int, set[str]] = field(default_factory=dict)
    polls: int = 0

    def note(self, nid: str, info: pb.NodeStatus | None) -> pb.NodeStatus | None:
        self.polls += 1
        if info is not None and info.role == "leader":
            self.seen.setdefault(info.term, set()).add(nid)
        return info

    def of(self, nid: str) -> set[int]:
        return {term for term, who in self.seen.items() if nid in who}

    def doubled(self) -> dict[int, set[str]]:
        return {term: who for term, who in self.seen.items() if len(who) > 1}


class Watch:
    """One open channel per node (a TLS handshake per 20 ms poll would be the test's load)."""

    def __init__(self, c) -> None:
        self.stack = contextlib.ExitStack()
        self.stubs = {nid: pb_grpc.ClusterStub(self.stack.enter_context(c.channel(nid))) for nid in c.nodes}
        self.leaders = Leaders()

    def info(self, nid: str, timeout: float = 1.0) -> pb.NodeStatus | None:
        try:
            out = self.stubs[nid].NodeInfo(pb.NodeInfoRequest(), timeout=timeout)
        except grpc.RpcError:
            out = None
        return self.leaders.note(nid, out)

    def new_leader(self, others: list[str], above: int) -> tuple[str, int] | None:
        """The node among `others` that reports leading a term above `above`, if one does."""
        for nid in others:
            info = self.info(nid)
            if info is not None and info.role == "leader" and info.term > above:
                return nid, info.term
        return None


def test_a_resumed_leader_never_reports_leading_the_new_leaders_term(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    watch = Watch(c)
    try:
        for _ in range(ROUNDS):
            old = c.wait_leader(timeout=30)
            old_term = wait_until(lambda: (i := watch.info(old)) is not None and i.role == "leader" and i.term,
                                  timeout=10, what=f"{old} to report leading")
            others = [n for n in c.nodes if n != old]
            c.signal_node(old, signal.SIGSTOP)
            try:
                new, new_term = wait_until(lambda: watch.new_leader(others, old_term), timeout=30,
                                           what=f"a new leader while {old} is frozen")
            finally:
                c.signal_node(old, signal.SIGCONT)
            end = time.monotonic() + WATCH_S
            last = None
            while time.monotonic() < end:
                last = watch.info(old) or last
                time.sleep(POLL_S)
            assert new_term not in watch.leaders.of(old), (
                f"{old} (leader of term {old_term}, resumed) reported leading term {new_term}, "
                f"which {new} led: {watch.leaders.seen}")
            assert last is not None and (last.role != "leader" or last.term > new_term), (
                f"{old} still reports leading term {last.term if last else '?'} {WATCH_S:g} s after its resume")
    finally:
        watch.stack.close()
    assert not watch.leaders.doubled(), f"two leaders reported for one term: {watch.leaders.seen}"
    assert len(watch.leaders.seen) > ROUNDS and watch.leaders.polls > ROUNDS * 20   # it did look
