"""One snapshot child at a time per process: `SnapshotTurns`.

pysyncobj compacts a group's log by forking a child that pickles the state into the dump file
(`useFork`). A sharded node hosts many groups, and groups that take writes at the same pace reach
their compaction threshold together: at ten million jobs over 8 groups, every group of every
node forked within seconds of the others. Each child shares its parent's pages copy-on-write,
but pickling touches every object's reference count, so each child comes to own a copy of the
pages of its group's state and much of the rest: 24 children of three nodes held 2.5 GiB each
and filled the machine's 23 GiB.

So a group forks only while it holds its process's turn (`SnapshotTurn`): a group that wants to
compact while another group's child runs leaves its log as it is and asks again on its next
tick; the group whose child ends (reaped by pysyncobj's own `checkSerializing`, which is where
the dump's entries are dropped) gives the turn back. A process's children then hold at most one
group's copy at a time, and compactions queue behind one another: a group's log grows past its
threshold by what it takes meanwhile, which the journal keeps on disk as it always does.

A group also compacts once its applied log holds `compaction_bytes` (`SnapshotTurns`), whatever
its number of entries. pysyncobj counts entries only (or time), and an entry is anything from a
heartbeat's no-op to a batch of a thousand jobs: with jobs registered in batches, 20,000 entries
are 20 million jobs of log, and a node restarted after ten million jobs with no dump taken yet
replayed its whole log before it served. What a restart replays after its dump is bytes of log,
so the bound is in bytes. It is a trade: each compaction forks the node and pickles the group's
state, which slows a bulk load (docs/deployment.md has the figures).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from schedd.replication.raft.base import RaftBase


class SnapshotTurn:
    """Which of a process's groups may have a snapshot child now (one at a time)."""

    __slots__ = ("_lock", "_holder")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: object | None = None

    def take(self, group: object) -> bool:
        """True when `group` holds the turn (already, or now)."""
        with self._lock:
            if self._holder is None:
                self._holder = group
            return self._holder is group

    def give_back(self, group: object) -> None:
        with self._lock:
            if self._holder is group:
                self._holder = None

    @property
    def holder(self) -> object | None:
        return self._holder


PROCESS_TURN = SnapshotTurn()      # the groups of one node process share it


def compact_in_turn(turn: SnapshotTurn, group: object, child_running: Callable[[], bool],
                    compact: Callable[[], None]) -> None:
    """One tick's compaction step of `group` (pysyncobj's: reap a finished child, or fork one
    when the log is long enough), taken only while `group` holds `turn`; the turn is given back
    once `group` has no child running."""
    if not child_running() and not turn.take(group):
        return                          # another group's child runs: ask again next tick
    try:
        compact()
    finally:
        if not child_running():
            turn.give_back(group)       # no child of ours now: reaped, or none was started


class SnapshotTurns(RaftBase):
    """A group's log compaction, only while it holds its process's `SnapshotTurn` (module doc)."""

    _snapshot_turn: SnapshotTurn
    _compaction_bytes: int

    def _init_snapshot_turns(self, turn: SnapshotTurn | None, compaction_bytes: int = 0) -> None:
        """`compaction_bytes`: compact once the applied log holds this many bytes (0: only
        pysyncobj's entries and time)."""
        self._snapshot_turn = turn if turn is not None else PROCESS_TURN
        self._compaction_bytes = compaction_bytes

    def _child_running(self) -> bool:
        """pysyncobj's serializer has a forked child it has not reaped yet (its pid > 0)."""
        return int(getattr(self._SyncObj__serializer, "_Serializer__pid", 0) or 0) > 0

    def _SyncObj__tryLogCompaction(self) -> None:
        if self._compaction_bytes and not self._child_running() and self._log_past_bytes():
            self._SyncObj__forceLogCompaction = True     # pysyncobj's own flag: compact on this step
        compact_in_turn(self._snapshot_turn, self, self._child_running, super()._SyncObj__tryLogCompaction)

    def _log_past_bytes(self) -> bool:
        """The applied part of the log holds `compaction_bytes` or more (a journal that cannot
        say, as a test's in-memory log: never)."""
        measure = getattr(self._SyncObj__raftLog, "applied_bytes", None)
        return measure is not None and measure(self._SyncObj__raftLastApplied) >= self._compaction_bytes

    def _leave_snapshot_turn(self) -> None:
        """At destroy: a group dropped while its child runs must not keep the others waiting."""
        self._snapshot_turn.give_back(self)
