"""What pysyncobj 0.3.17's Raft core gets wrong, restored: `RepairingSyncObj`.

Each repair has a name, which the code uses where it refers to one, and each override cites the
rule it restores. They replace name-mangled private methods of `pysyncobj.SyncObj`
(`_SyncObj__onMessageReceived`, `_SyncObj__sendAppendEntries`, ...), so they are tied to one
pysyncobj release: `PYSYNCOBJ_VERSION` is checked at import (schedd.replication.raft) and pinned
in pyproject.toml. Every node of a cluster must run them (pre-vote is a new message kind a stock
node ignores).

Each repair is a mixin of its own under schedd/replication/raft/, whose module doc says what it
restores and why; `RepairingSyncObj` composes them, and holds only the stock hooks where several
repairs meet (the message dispatch, the tick, a role change, destroy), in the order they apply:

- log repair (PROBE/REPLICATE, answers naming the request they answer): raft/log_repair.py, the
  follower's answers in raft/follower_log.py
- conflict-only truncation: raft/follower_log.py
- pre-vote: raft/pre_vote.py
- newer term heard: raft/newer_term.py
- the post-install deadline: raft/follower_log.py
- inbox first (and stall detection, the tick's parts): raft/tick_timing.py
- bounded apply: raft/bounded_apply.py
- the parallel disk write (matchIndex capped for the commit): raft/parallel_write.py
- the bounded lock wait: raft/bounded_apply.py
- prompt sends: raft/prompt_sends.py
- the deadline sleep: raft/deadline_sleep.py
- driven ticks (one tick loop for a node's groups: the loop's poller, mail first, bind in the
  tick): raft/driven_tick.py, the loop in schedd/replication/ticker.py
- quiet heartbeats: raft/log_repair.py (the follower's silence in raft/follower_log.py)
- ReadIndex: raft/reads.py (its bookkeeping in read_index.py)
- halting: raft/halting.py
- one snapshot child per process at a time: raft/snapshot_turns.py
"""

from __future__ import annotations

from typing import Any

from pysyncobj import SyncObj
from pysyncobj.syncobj import _RAFT_STATE
from pysyncobj.syncobj import monotonicTime as raft_clock

from schedd.replication.raft import PYSYNCOBJ_VERSION
from schedd.replication.raft.deadline_sleep import DeadlineSleep
from schedd.replication.raft.driven_tick import DrivenTick
from schedd.replication.raft.follower_log import FollowerLog
from schedd.replication.raft.halting import VOTING, BuildBehind
from schedd.replication.raft.log_repair import PROBE, QUIET_WINDOW_PARTS, REPLICATE
from schedd.replication.raft.newer_term import NEWER_TERM, NewerTermHeard
from schedd.replication.raft.pre_vote import PRE_VOTE, PRE_VOTE_RESPONSE
from schedd.replication.raft.prompt_sends import PromptSends
from schedd.replication.raft.snapshot_turns import SnapshotTurn, SnapshotTurns
from schedd.replication.raft.stats import HOLD_BUCKETS, RepairStats, TickHolds
from schedd.replication.raft.tick_timing import LONG_HOLD_S, NESTED, TICK_SLICE_S

__all__ = ["HOLD_BUCKETS", "LONG_HOLD_S", "NESTED", "NEWER_TERM", "PRE_VOTE", "PRE_VOTE_RESPONSE", "PROBE",
           "PYSYNCOBJ_VERSION", "QUIET_WINDOW_PARTS", "REPLICATE", "TICK_SLICE_S", "VOTING", "BuildBehind",
           "RepairStats", "RepairingSyncObj", "TickHolds", "_RAFT_STATE", "raft_clock"]


class RepairingSyncObj(SnapshotTurns, DrivenTick, DeadlineSleep, PromptSends, FollowerLog, NewerTermHeard):
    """A SyncObj whose log repair, truncation and elections follow the Raft paper (module doc).
    Owns `repair_stats` (every repair's counters) and `_published` (role, term and leader as
    the tick thread left them at the end of its last tick: one moment, for readers on other
    threads, `role_term_leader`)."""

    def __init__(self, *args: Any, apply_lock: Any = None, snapshot_turn: SnapshotTurn | None = None,
                 poller: Any = None, compaction_bytes: int = 0, **kwargs: Any) -> None:
        """`poller`: the node's tick loop's (ticker.TickLoop.replica), for a SyncObj built with
        autoTick off that the loop ticks (driven ticks); None: autoTick, a thread of its own.
        `compaction_bytes`: compact once the applied log holds this many bytes (snapshot_turns)."""
        # Set before SyncObj.__init__: attributes that exist then are left out of snapshots, and
        # the tick thread it starts reads them.
        self._init_snapshot_turns(snapshot_turn, compaction_bytes)
        self._init_driven_tick(poller)
        self._init_bounded_apply(apply_lock)
        self._init_log_repair()
        self._init_pre_vote()
        self._init_tick_timing()
        self._init_parallel_write()
        self._init_prompt_sends()
        self._init_deadline_sleep()
        self._init_reads()
        self._init_halting()
        self._published: tuple[int, int, str] = (_RAFT_STATE.FOLLOWER, 0, "")
        self.repair_stats = RepairStats()
        super().__init__(*args, **kwargs)
        self._after_driven_init()
        self._publish()                                   # the term restored from the journal
        self._time_the_poll_wait()
        self._sleep_until_deadline()
        self._time_the_journal_sync()
        self._install_wake()

    def _SyncObj__onMessageReceived(self, node: Any, message: dict[str, Any]) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        if self.halted and kind in VOTING:
            return          # halting: a halted node takes no part in elections
        if kind == "append_entries" and message.get("term", -1) < self._SyncObj__raftCurrentTerm:
            self._refuse_stale_leader(node)     # newer term heard
            return
        if kind == NEWER_TERM:
            self._on_newer_term(node, message)
        elif kind == "append_entries" and "prevLogIdx" in message:
            self._on_append_entries(node, message)
        elif kind == "next_node_idx" and self._SyncObj__raftState == _RAFT_STATE.LEADER:
            self._on_append_response(node, message)
        elif kind == PRE_VOTE:
            self._on_pre_vote(node, message)
        elif kind == PRE_VOTE_RESPONSE:
            self._on_pre_vote_response(node, message)
        else:               # a snapshot chunk among them: the post-install deadline follows it
            SyncObj._SyncObj__onMessageReceived(self, node, message)
            self._after_stock_message(kind, message)

    def _onTick(self, timeToWait: float = 0.0) -> None:
        self._read_inbox_after_stall()      # inbox first
        clock = self._start_tick_clock() if self._take_mail() else None
        if clock is not None:               # driven ticks: mail first
            self._read_mail()
        if self.halted:
            self._stay_out_of_elections()
        self._maybe_pre_vote()
        self._start_reads()
        backlog = self._backlog()
        clock = clock or self._start_tick_clock()
        self._cap_match_at_durable()
        try:
            SyncObj._onTick(self, 0.0 if backlog else timeToWait)
        finally:
            self._uncap_match()
            self._publish()
        self.reads.serve(int(self.raftLastApplied))
        self._stop_tick_clock(*clock)

    def _SyncObj__setState(self, newState: int) -> None:
        """Leaving the leader role (or staying out of it) ends the parallel disk write's parallel
        mode and refuses the reads that await confirmation (ReadIndex), before stock changes it."""
        if newState != _RAFT_STATE.LEADER:
            self._end_parallel_mode()
            self._refuse_unconfirmed_reads()
        SyncObj._SyncObj__setState(self, newState)

    def destroy(self) -> None:
        SyncObj.destroy(self)
        self._leave_snapshot_turn()
        self.reads.fail("this node is shutting down")
        self._wake()                    # the tick thread notices at its next tick, not a sleep later

    def _publish(self) -> None:
        """Tick thread, between two ticks (no message half handled): the role, term and leader
        of one moment, as one tuple (one store; a reader's one load sees all three of it)."""
        leader = self._SyncObj__raftLeader
        self._published = (int(self._SyncObj__raftState), int(self._SyncObj__raftCurrentTerm),
                           leader.id if leader is not None else "")

    def role_term_leader(self) -> tuple[int, int, str]:
        """Any thread: (role, term, leader id) as of the end of the last tick. Read field by
        field instead, a reader can pair a role with a term from another moment: stock sets the
        new term, then the follower state (and the leader before both), so a leader resumed by
        SIGCONT that handles the new leader's AppendEntries showed as leader of a term it never
        led while the tick thread was switched out in between."""
        return self._published
