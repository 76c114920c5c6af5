"""Bounded apply and the bounded lock wait: how long a tick may apply, and wait to.

- Bounded apply, per tick: stock applies every committed entry in the tick that learns of them;
  here a tick stops applying after an eighth of the minimum election timeout and the next tick goes
  on at once, so a backlog no longer holds heartbeats (sent after apply) or their reading.
- The bounded lock wait: apply never waits long for the node lock. given `apply_lock` (the lock the
  shell's readers hold: RaftNode.lock), the tick takes it before each entry for at most a heartbeat
  period and, if the other thread still holds it, leaves the entry for the next tick and goes on to
  send and read. On a loaded leader the asyncio thread's passes held it 50-100 ms while a
  start_many or finish_many waited, and the heartbeats (sent after apply) with it.
"""

from __future__ import annotations

import logging
from typing import Any

from pysyncobj.config import FAIL_REASON
from pysyncobj.syncobj import SyncObjExceptionWrongVer

from schedd.replication.raft.halting import BuildBehind, Halting
from schedd.replication.raft.parallel_write import ParallelDiskWrite
from schedd.replication.raft.reads import LinearizableReads

log = logging.getLogger("schedd.raft")


class BoundedApply(ParallelDiskWrite, LinearizableReads, Halting):
    """Stock's apply loop within a budget per tick, each entry under the node lock taken with a
    bounded wait. Owns `_apply_lock` (the shell's node lock, None: apply takes no lock); writes
    tick timing's `_apply_work`."""

    def _init_bounded_apply(self, apply_lock: Any) -> None:
        self._apply_lock = apply_lock                 # the bounded lock wait (None: apply takes no lock)

    def _apply_budget(self) -> float:
        """Seconds of applying per tick (bounded apply): an eighth of the minimum election timeout, so
        heartbeats (leader) and reading them (follower) never wait long behind a backlog."""
        return float(self._SyncObj__conf.raftMinTimeout) / 8

    def _SyncObj__applyLogEntries(self) -> bool:
        """Stock's apply loop, bounded by `_apply_budget` (bounded apply): stock applies every committed
        entry in one tick, so a follower catching up, or any node applying a herd's batches on a
        starved machine, sent and read no message for seconds. The rest waits for the next tick
        (which then polls without waiting)."""
        self._uncap_match()             # the parallel disk write: the commit computation is done
        applied, commit = int(self.raftLastApplied), int(self._SyncObj__raftCommitIndex)
        self._apply_work = 0.0
        if commit <= applied or self.halted:
            return False
        deadline = self._now() + self._apply_budget()
        waiting = self._SyncObj__commandsWaitingCommit
        lock = self._apply_lock
        for entry in self._SyncObj__getEntries(applied + 1, commit - applied):
            if lock is not None and not self._take_apply_lock(lock, deadline):
                break
            try:
                if not self._apply_entry(entry, waiting):
                    break                     # halting: this entry and the rest stay unapplied
                applied += 1
                self._SyncObj__raftLastApplied = applied
            except SyncObjExceptionWrongVer as e:
                log.error("request to switch to unsupported code version (self version: %d, "
                          "requested version: %d)", self._SyncObj__selfCodeVersion, e.ver)
            finally:
                if lock is not None:
                    lock.release()
            if self._now() > deadline:
                self.repair_stats.apply_yields += 1
                break
        self._apply_work = self._now() - deadline + self._apply_budget()
        self.reads.serve(applied)       # ReadIndex: confirmed reads waiting for this apply
        return not self._SyncObj__conf.appendEntriesUseBatch

    def _apply_entry(self, entry: Any, waiting: dict[int, list[tuple[int, Any]]]) -> bool:
        """One committed entry applied and its proposers answered (those of another term: it
        was discarded); False if the consumer raised BuildBehind, and the node halted."""
        try:
            res = self._SyncObj__doApplyCommand(entry[0])
        except BuildBehind as e:
            self.halt(str(e))
            return False
        for term, callback in waiting.pop(entry[1], []):
            if term == entry[2]:
                callback(res, FAIL_REASON.SUCCESS)
            else:
                callback(None, FAIL_REASON.DISCARDED)
        return True

    def _take_apply_lock(self, lock: Any, deadline: float) -> bool:
        """Bounded lock wait: the node lock for one entry, waiting at most a heartbeat period or
        TICK_SLICE_S (and not past the apply budget); False (counted) leaves the entry for the
        next tick."""
        wait = max(0.001, min(self._tick_slice(), deadline - self._now()))
        started = self._now()
        got = bool(lock.acquire(timeout=wait))
        self._sections["apply: node lock wait"] = (self._sections.get("apply: node lock wait", 0.0)
                                                   + self._now() - started)
        if not got:
            self.repair_stats.apply_lock_yields += 1
        return got

    def _backlog(self) -> bool:
        """Committed entries left to apply (a halted node has none it may apply)."""
        return self._SyncObj__raftCommitIndex > self.raftLastApplied and not self.halted
