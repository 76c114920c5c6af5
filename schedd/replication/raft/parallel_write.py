"""The parallel disk write: when a leader's own copy counts for a commit.

- The parallel disk write: the leader writes to its disk in parallel with replication (Raft thesis
  §10.2.1: "the leader may write to its disk in parallel with replicating to the followers ... it
  counts itself in the majority only once its entries are durable"). On a durable journal
  (journal.DurableJournal, policy ``always``) the leader of a multi-node cluster no longer
  fdatasyncs in its tick (before sending, or before polling): the journal's background thread does,
  and the commit computation sees every follower's matchIndex capped at the leader's durable index,
  so an entry commits only once it is on the leader's disk and on a follower's (which still
  fdatasyncs before it acknowledges). Stricter than the thesis (which also lets two followers
  commit without the leader), never looser. Stock counts its own copy at once, whatever the disk;
  our journal used to sync it inline, up to 50 ms per tick under load. The background thread wakes
  the tick when the durable index moves (a commit may be waiting).
"""

from __future__ import annotations

from typing import Any

from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.base import RaftBase


class ParallelDiskWrite(RaftBase):
    """Parallel mode of the journal, and the matchIndex capping that keeps the commit behind the
    leader's disk. Owns `_match_real` (the followers' matchIndex while stock's field holds the
    capped copy) and `_match_capped` (that copy, to tell it from one a new leadership made)."""

    def _init_parallel_write(self) -> None:
        self._match_real: dict[Any, int] | None = None    # the parallel disk write: matchIndex while capped
        self._match_capped: dict[Any, int] | None = None

    def _cap_match_at_durable(self) -> None:
        """Parallel disk write: in parallel mode, stock's commit computation (the next thing a leader's tick
        does; it counts the leader itself unconditionally) sees each follower's matchIndex
        capped at the leader's durable index; `_uncap_match` puts the real one back before
        anything else reads it (apply, sending, answers)."""
        journal = self._SyncObj__raftLog
        set_parallel = getattr(journal, "set_parallel", None)
        if set_parallel is None:
            return                      # a MemoryJournal or stock's: no disk to wait for
        leading = self._SyncObj__raftState == _RAFT_STATE.LEADER and bool(self._SyncObj__otherNodes)
        if not set_parallel(leading):
            return
        durable = int(journal.durable_index)
        real = self._SyncObj__raftMatchIndex
        self._match_real = real
        self._match_capped = self._SyncObj__raftMatchIndex = {n: min(i, durable) for n, i in real.items()}

    def _uncap_match(self) -> None:
        real, self._match_real = self._match_real, None
        if real is not None and self._SyncObj__raftMatchIndex is self._match_capped:
            self._SyncObj__raftMatchIndex = real   # (a new leadership may have replaced it)
        self._match_capped = None

    def _real_match(self) -> dict[Any, int]:
        """The followers' matchIndex, not the one the parallel disk write caps at the leader's durable index."""
        return self._match_real if self._match_real is not None else self._SyncObj__raftMatchIndex

    def _end_parallel_mode(self) -> None:
        """Parallel mode ends before the role does: a node that stops leading (a higher term
        heard in this very tick, the leader fallback) must fdatasync before its next message
        again (its next ack as a follower covers what it holds)."""
        set_parallel = getattr(self._SyncObj__raftLog, "set_parallel", None)
        if set_parallel is not None:
            set_parallel(False)
