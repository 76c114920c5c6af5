"""Halting: a build that is behind stops applying.

- Halting: a build that is behind stops applying. When the consumer's apply raises `BuildBehind`
  (the cluster's feature level is, or this entry raises it, above what this build supports;
  schedd.core.state.apply changed nothing), the node halts its state machine: that entry and every
  later one stay in the log, unapplied (an upgraded build applies them at its restart), and from
  then on it neither votes, grants a pre-vote, starts an election, answers TimeoutNow nor leads (a
  leader steps down). It still appends and acknowledges entries, like a disk. An older build
  applied such entries as INVALID, diverged, and once elected dispatched what it believed pending:
  18,481 (job, instant) pairs ran twice. `halted` says why ("" while not); `halt()` is also called
  by the shell when a restored snapshot is above this build.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.pre_vote import PreVote

log = logging.getLogger("schedd.raft")

VOTING = frozenset({"request_vote", "timeout_now"})     # what a halted node ignores (halting)


class BuildBehind(Exception):
    """Raised by a consumer's apply for an entry this build must not apply (halting): the entry
    is left unapplied and the node halts."""


class Halting(PreVote):
    """Stops this node applying, voting and leading. Owns `halted` (why, "" while not) and
    `on_halt` (the shell's hook, told once). Apply, pre-vote, the message dispatch and the
    deadline sleep read `halted`."""

    def _init_halting(self) -> None:
        self.halted = ""                              # halting: why this node stopped applying
        self.on_halt: Callable[[str], None] = lambda why: None

    def halt(self, why: str) -> None:
        """Tick thread: stop applying, voting and leading for good (this process); `why` is
        logged at ERROR once and handed to `on_halt`."""
        if self.halted:
            return
        self.halted = why
        log.error("halted: %s (stopped applying at index %d; the log is kept for an upgraded build)",
                  why, int(self.raftLastApplied))
        self._stay_out_of_elections()
        self.on_halt(why)

    def _stay_out_of_elections(self) -> None:
        """A halted node never stands: its election timer is pushed back on every tick (stock
        elects when it runs out, TimeoutNow included), and a leader or candidate steps down."""
        self._SyncObj__transferInProgress = False
        self._prevote.won = False
        self._restart_election_timer()
        if self._SyncObj__raftState != _RAFT_STATE.FOLLOWER:
            self._SyncObj__raftLeader = None
            self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
