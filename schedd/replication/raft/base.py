"""What every repair reads of the Raft core: its clock, its log's ends, a send, the election
timer, and the state that several repairs share (declared here, set by the one that owns it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pysyncobj import SyncObj
from pysyncobj.syncobj import monotonicTime as raft_clock

from schedd.replication.raft.stats import RepairStats
from schedd.replication.read_index import ReadIndex



class RaftBase(SyncObj):
    """The accessors the repairs share. Its annotated fields are read by several repairs and
    owned by one each; `RepairingSyncObj.__init__` sets them before `SyncObj.__init__`, so they
    stay out of snapshots."""

    repair_stats: RepairStats       # the counters every repair adds to (RepairingSyncObj)
    reads: ReadIndex                # ReadIndex's bookkeeping (reads.LinearizableReads)
    halted: str                     # why this node stopped applying, "" if not (halting.Halting)
    _leader_contact: float          # monotonic time a leader was last heard (pre_vote.PreVote)
    _wake: Callable[[], None]       # ends the tick thread's poll (deadline_sleep; set after init)

    def _now(self) -> float:
        """pysyncobj's own clock: its deadlines (heartbeats, elections) are compared with it,
        and it is not time.monotonic() (it differs by a constant offset)."""
        return float(raft_clock())

    def _log_first(self) -> int:
        return int(self._SyncObj__raftLog[0][1])

    def _log_last(self) -> int:
        return int(self._SyncObj__raftLog[-1][1])

    def _term_at(self, idx: int) -> int:
        return int(self._SyncObj__raftLog[idx - self._log_first()][2])

    def _send(self, node: Any, message: dict[str, Any]) -> None:
        self._SyncObj__transport.send(node, message)

    def _restart_election_timer(self) -> None:
        self._SyncObj__raftElectionDeadline = self._now() + self._SyncObj__generateRaftTimeout()
