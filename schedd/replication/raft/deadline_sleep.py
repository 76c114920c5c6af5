"""The deadline sleep: how long the tick thread may wait for a message.

- The deadline sleep: the tick sleeps until its next deadline. Stock's tick thread polls with a
  fixed timeout (tick_ms), so an idle node ran its whole tick 20 times a second besides every
  message: about a third of an idle cluster's CPU, and a third of the CPU per fire at 100 fires/s.
  Here the poll waits until the next thing that has a time: a leader's next heartbeat, a follower's
  election deadline, the transport's keepalive, at most a quarter of the minimum election timeout
  (so inbox first never reads a sleep as a stall); a message, a proposal (prompt sends), a durable
  write (the parallel disk write), a queued tick job or destroy() wake it sooner; committed entries
  left unapplied (bounded apply and the bounded lock wait) end it at once. Whatever polls for
  progress rather than waiting for an event (binding, connecting, a handshake's deadline, unsynced
  writes, queued commands, a deadline already past) keeps the tick period, as stock; each such part
  says so through `add_tick_need`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj import SyncObj
from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.bounded_apply import BoundedApply


def _no_wake() -> None:
    pass


class WakePipe:
    """The pipe whose one byte ends the tick's poll (or wakes the node's tick loop for this
    replica): pysyncobj's PipeNotifier, which never closes its pipe, made closeable. A group a
    shard move drops closes it with the rest of its replica (`close`), or each drop would leak
    two descriptors. A wake after the close (a journal or asyncio thread that raced the drop)
    does nothing: the numbers may already name another file, which the byte must never reach."""

    def __init__(self, poller: Any) -> None:
        self._poller = poller
        self._lock = threading.Lock()      # notify (any thread) against close
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        poller.subscribe(self._r, self._drain, POLL_EVENT_TYPE.READ)

    def notify(self) -> None:
        with self._lock:
            if self._w < 0:
                return
            try:
                os.write(self._w, b"o")
            except BlockingIOError:        # full: a wake-up is pending already
                pass

    def _drain(self, fd: int, event: int) -> None:
        try:
            while os.read(fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Once nothing polls the replica any more (its tick thread ended, or it left the loop)."""
        with self._lock:
            r, w = self._r, self._w
            self._r = self._w = -1
        if r < 0:
            return
        self._poller.unsubscribe(r)
        os.close(r)
        os.close(w)


class DeadlineSleep(BoundedApply):
    """The tick's poll timeout, and the wake that ends it early. Owns `_tick_needs` (what other
    parts say of their next deadline: the transport's, the journal's, the shell's tick jobs)
    and `_wake` with its pipe (made after SyncObj.__init__, when the poller exists)."""

    def _init_deadline_sleep(self) -> None:
        self._tick_needs: list[Callable[[], float | None]] = []   # the deadline sleep (the transport's, the journal's)
        # Set here, before SyncObj.__init__, though made after it: pysyncobj pickles into every
        # snapshot (the dump, and the one a leader sends) each attribute the SyncObj gained after
        # its __init__, and sets it back on the SyncObj that loads it. A wake made after __init__
        # travelled so: a restarted node, or a follower installing the leader's snapshot, took
        # another process's descriptor numbers for its wake pipe and wrote into whatever they
        # named there (BrokenPipeError, EBADF, or a byte into a live socket or file).
        self._wake = _no_wake
        self._wake_pipe: WakePipe | None = None

    def _sleep_until_deadline(self) -> None:
        """After SyncObj.__init__: the tick's poll waits `_poll_wait`, its time the tick's
        "poll+messages"."""
        timed_poll = self._timed("poll+messages", self._poller.poll)
        self._poller.poll = lambda timeout: timed_poll(self._poll_wait(timeout))

    def _install_wake(self) -> None:
        """After SyncObj.__init__: `_wake` ends the tick thread's poll (the parallel disk write's
        journal thread, prompt sends, reads, tick jobs): its own thread's, or the node's tick
        loop's (driven ticks: the pipe is one of this replica's descriptors the loop watches); a
        node a test ticks by hand has no thread to wake."""
        ticked = self._SyncObj__conf.autoTick or getattr(self, "driven", False)
        if ticked:
            self._wake_pipe = WakePipe(self._poller)
            self._wake = self._wake_pipe.notify
        journal = self._SyncObj__raftLog
        if hasattr(journal, "wake"):                      # the parallel disk write: its background thread
            journal.wake = self._wake

    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:
        """A dump or a leader's snapshot written by an earlier build still carries its `_wake`
        (`_init_deadline_sleep`): loading it keeps this process's own."""
        own = self._wake, self._wake_pipe
        try:
            SyncObj._SyncObj__loadDumpFile(self, clearJournal)  # type: ignore[attr-defined]
        finally:
            self._wake, self._wake_pipe = own

    def close_wake(self) -> None:
        """Close the wake pipe: after destroy, once no tick of this SyncObj runs (its thread
        joined, or it left the node's tick loop). Later wakes do nothing."""
        self._wake = _no_wake
        if self._wake_pipe is not None:
            self._wake_pipe.close()

    def add_tick_need(self, need: Callable[[], float | None]) -> None:
        """Deadline sleep: `need()` (called on the tick thread before each poll) says when its owner
        needs the next tick: None (not for itself), 0 (at the tick period: it polls for
        progress), or in that many seconds."""
        self._tick_needs.append(need)

    def wake(self) -> None:
        """End the tick thread's poll now (another thread queued work for it)."""
        self._wake()

    def _poll_wait(self, period: float) -> float:
        """Deadline sleep: how long the tick's poll may wait for a message: until the next deadline,
        at most a quarter of the minimum election timeout; `period` (tick_ms, the caller's
        timeout) when something polls for progress. A zero timeout (a driven tick, the read after a
        stall of inbox first, a backlog) stays zero."""
        if period <= 0:
            return period
        if self._backlog():
            return 0.0                  # entries left to apply (bounded apply, the bounded lock wait): go on
        soon = self._soonest_need(period)
        if self._SyncObj__commandsQueue._FastQueue__queue or self.reads.asked():
            return min(soon, period)    # pysyncobj's queue: a slice left, or waiting for a leader
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            left = self._SyncObj__newAppendEntriesTime - self._now()
        elif self._SyncObj__selfNode is not None and self._SyncObj__otherNodes:
            left = self._SyncObj__raftElectionDeadline - self._now()
        else:
            return soon                 # a learner, or alone: nothing of Raft's own is timed
        return min(soon, left if left > 0 else period)   # past and not acted on: poll as stock

    def _soonest_need(self, period: float) -> float:
        """The nearest of the tick needs (`period` for one that polls for progress), at most a
        quarter of the minimum election timeout (so inbox first never reads a sleep as a stall)."""
        soon = float(self._SyncObj__conf.raftMinTimeout) / 4
        for need in self._tick_needs:
            left = need()
            if left is not None:
                soon = min(soon, left if left > 0 else period)
        return soon
