"""Prompt sends: when a leader sends what was just proposed.

- Prompt sends: proposals go out at once. In batch mode (appendEntriesUseBatch, one AppendEntries
  for many entries) stock leaves a proposal in its queue until the tick's poll times out (tick_ms)
  and then sends the new entry only with the next heartbeat (heartbeat_ms): a commit took 20-25 ms
  on an idle loopback cluster, and 64 PutJob calls in flight got 800 jobs/s. Here a follower with
  nothing unanswered gets what it lacks in the tick that appends it (a proposal wakes the tick
  thread when such a follower exists), and a follower's answer, which ticks, sends it what was
  appended meanwhile: one batch in flight per follower (sending on every proposal cost the loaded
  rows 15% more CPU), and no entry waits for a heartbeat. The shell also groups concurrent
  proposals (GroupCommit).
"""

from __future__ import annotations

from typing import Any

from pysyncobj import SyncObj
from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.log_repair import REPLICATE, LogRepair


class PromptSends(LogRepair):
    """Proposals sent in the tick that appends them. Owns `_pipeline_idle`: may a proposal
    (on its proposer's thread) wake the tick thread, because a follower could take it now."""

    def _init_prompt_sends(self) -> None:
        self._pipeline_idle = False                   # prompt sends: may a proposal wake the tick?

    def _applyCommand(self, command: Any, callback: Any, commandType: Any = None) -> None:
        """Prompt sends: a proposal wakes the tick thread if a follower can take it now (stock's batch
        mode leaves it in the queue until the poll times out). The flag, not _idle_followers:
        this runs on the proposer's thread, the tick thread owns the indexes."""
        SyncObj._applyCommand(self, command, callback, commandType)
        if self._pipeline_idle:       # else the answer awaited wakes it, and it sends then
            self._wake()

    def _checkCommandsToApply(self) -> None:
        """Prompt sends: what the leader holds and a follower has not been sent goes to that
        follower in this tick, unless an AppendEntries to it is still unanswered (stock's batch
        mode waits for the next heartbeat, up to appendEntriesPeriod); a leader alone ticks
        again at once, its commit needs no answer."""
        last = self._log_last()
        self._timed("proposals", lambda: SyncObj._checkCommandsToApply(self))()
        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            self._pipeline_idle = False
            return
        if not self._SyncObj__otherNodes:
            if self._log_last() > last:
                self._wake()
            self._pipeline_idle = True
            return
        now = self._now()
        for node in self._idle_followers():
            if self._SyncObj__raftNextIndex[node] <= self._log_last():
                self._timed("sending", self._send_to)(node, now)
        self._pipeline_idle = bool(self._idle_followers())

    def _idle_followers(self) -> list[Any]:
        """Prompt sends: the connected followers in REPLICATE with nothing unanswered (matchIndex
        reached what was sent: nextIndex - 1). Judged on the real matchIndex, not the one
        the parallel disk write caps at the leader's durable index for the commit computation. One batch in
        flight per follower: sending on every proposal cost the loaded rows 15% more CPU."""
        match = self._real_match()
        nxt, connected = self._SyncObj__raftNextIndex, self._SyncObj__connectedNodes
        return [n for n in self._SyncObj__otherNodes
                if n in connected and self._repl_mode.get(n) == REPLICATE
                and match.get(n, 0) >= nxt.get(n, 0) - 1]
