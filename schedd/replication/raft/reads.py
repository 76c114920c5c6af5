"""ReadIndex: when a read on the leader is linearizable, and how old a stale read's state is.

- ReadIndex: linearizable reads (Raft thesis §6.4; `read_index.py` holds the bookkeeping).
  pysyncobj has no read path: a leader cut off from its peers believes it leads until the leader
  fallback ends it, and served reads from its old state meanwhile. Here `request_read` asks the
  tick thread for a point at which a read is safe: a leader that has committed an entry of its
  current term (Raft §8) records its commit index, numbers the round and sends every follower a
  heartbeat carrying the number (`read_seq`, on every AppendEntries); a patched follower echoes the
  number it was sent in every answer (an AppendEntries of an older term it drops unanswered), and a
  heartbeat is never quiet (quiet heartbeats) while a round awaits that follower. Once echoes from
  followers that with the leader make a majority reach the round's number, and the leader has
  applied up to the recorded index, the read is served. Reads asked in one tick share one round.
  Stepping down refuses what is unconfirmed. A stock follower does not echo: a leader whose
  majority needs stock followers (a rolling upgrade's first steps) cannot confirm reads, and they
  are refused retryably until enough nodes run this build.

The echo is sent by follower_log, the number and the acks are read by log_repair, and apply
serves what it reaches (bounded_apply).
"""

from __future__ import annotations

import math

from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.base import RaftBase
from schedd.replication.read_index import NOT_LEADER, STEPPED_DOWN, ReadCallback, ReadIndex


class LinearizableReads(RaftBase):
    """Reads asked, confirmed and served on the tick thread. Owns `reads` (the ReadIndex
    bookkeeping; `request_read` is the one part other threads touch)."""

    def _init_reads(self) -> None:
        self.reads = ReadIndex()                      # ReadIndex: linearizable reads

    def request_read(self, callback: ReadCallback) -> None:
        """Any thread: `callback(index, "")` (tick thread) once a read that arrived now may be
        served from this node's state, that is once it has applied `index`; `callback(None,
        why)` if this node cannot confirm it leads (not the leader, or it stepped down).
        Reads asked before the tick thread next runs share one confirmation round."""
        self.reads.ask(callback)
        self._wake()

    def _start_reads(self) -> None:
        """Tick thread: what was asked joins a new round, its heartbeats go out now. A leader
        that has not committed an entry of its term yet (its no-op) keeps the reads waiting:
        its commit index may lag what the previous leader committed (Raft §8)."""
        reads = self.reads
        if not reads.asked():
            return
        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            reads.fail(NOT_LEADER)
            return
        commit = int(self._SyncObj__raftCommitIndex)
        if commit < self._log_first() or self._term_at(commit) != self._SyncObj__raftCurrentTerm:
            return
        if reads.start(commit) is None:
            return
        if self._SyncObj__otherNodes:
            self._SyncObj__sendAppendEntries()      # the round's heartbeats (and the heartbeat due)
        self._confirm_reads()

    def _confirm_reads(self) -> None:
        self.reads.confirm(self._SyncObj__otherNodes)
        self.reads.serve(int(self.raftLastApplied))

    def _refuse_unconfirmed_reads(self) -> None:
        """This node leaves the leader role (or is not in it): what awaits confirmation is
        refused, retryably."""
        led = self._SyncObj__raftState == _RAFT_STATE.LEADER
        self.reads.fail(STEPPED_DOWN if led else NOT_LEADER)

    def read_age(self) -> tuple[float | None, int]:
        """How old this node's state may be, for a stale read's answer: (seconds since this
        node last had proof it was current, committed entries it knows of and has not applied).
        A follower: since it last heard its leader. A leader: since a majority last answered it
        (quiet heartbeats let a caught-up follower answer only once per quiet window). None: never.
        Read from another thread: each field is one load, the pair is approximate."""
        now = self._now()
        behind = max(0, int(self._SyncObj__raftCommitIndex) - int(self.raftLastApplied))
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            others = list(self._SyncObj__otherNodes)
            times = sorted((float(self._SyncObj__lastResponseTime.get(n, -math.inf)) for n in others),
                           reverse=True)
            need = (len(others) + 1) // 2          # followers that with us make a majority
            heard = times[need - 1] if need else now
        else:
            heard = self._leader_contact
            behind = max(behind, int(self._SyncObj__leaderCommitIndex or 0) - int(self.raftLastApplied))
        return (now - heard if heard > -math.inf else None), behind
