"""What one tick cost, and what a stall of the tick thread changes.

- Inbox first: after a stall, the inbox before the timers. Stock's tick judges the election
  deadline (follower) and the leader fallback before it polls its sockets, so after a stall of the
  tick thread (CPU starvation, the GIL, a long apply) the heartbeats and answers that arrived
  meanwhile count as silence. A tick that begins over half the minimum election timeout after the
  previous one (logged, counted in `RepairStats.long_tick_gaps`) reads its sockets first.

The same measurement tells pre-vote when this node was last listening (`_listening_since`), and
each tick's parts (sending, apply, the poll's wait, fdatasync, gc, ...) go to
`RepairStats.tick_holds` and, for a long tick, to the log.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
import weakref
from typing import Any

from pysyncobj import SyncObj
from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.base import RaftBase

log = logging.getLogger("schedd.raft")

# The longest one part of a tick may hold it before the tick goes on (one round of sending,
# the bounded lock wait for the node lock). It was the heartbeat period, so a longer heartbeat (fewer
# idle ticks) made a loaded leader's ticks longer too; the default heartbeat is this long.
TICK_SLICE_S = 0.02
# A tick that holds its thread this long (work, not the poll's wait) is logged with its parts.
LONG_HOLD_S = 0.1
# Parts timed inside other parts: fdatasync (in sending, a reply, a tick callback), the poll's
# wait (in poll+messages), gc (wherever the tick thread allocated).
NESTED = frozenset({"fdatasync", "wait", "gc"})


class TickTiming(RaftBase):
    """The tick's clock and stall detection (inbox first). Owns `_tick_started` (when the last
    tick began), `_listening_since` (the end of this node's last long stall, read by pre-vote),
    `_tick_work`, `_apply_work`, `_sections` and `_waited` (the last tick's time: all of it, of
    which applying, per part, and blocked in the poll), `_tick_ident`, `_gc_started` and
    `_weak_self` (the gc callback's way to this node's tick)."""

    def _init_tick_timing(self) -> None:
        self._tick_started = 0.0                      # when the last tick began (0: none yet)
        self._listening_since = -math.inf             # end of this node's last long stall
        self._tick_work = 0.0                         # seconds the last tick took (poll included)
        self._apply_work = 0.0                        # of which applying entries
        self._sections: dict[str, float] = {}         # of which: seconds per part (stall log)
        self._waited = 0.0                            # of which: blocked in the poll, waiting
        self._tick_ident = 0                          # the tick thread (its gc pauses: "gc")
        self._gc_started = 0.0
        self._weak_self = weakref.ref(self)           # the gc callback's way to this node

    def _time_the_poll_wait(self) -> None:
        """After SyncObj.__init__: the poller's blocking poll is timed apart from its work."""
        inner = getattr(self._poller, "_PollPoller__poll", None)
        if inner is not None:
            self._poller._PollPoller__poll = _TimedWait(inner, self)

    def _time_the_journal_sync(self) -> None:
        """After SyncObj.__init__: a DurableJournal's fdatasync is a part of the tick of its own."""
        journal = self._SyncObj__raftLog
        if callable(getattr(journal, "sync", None)):
            journal.sync = self._timed("fdatasync", journal.sync)

    def _timed(self, part: str, call: Any) -> Any:
        """`call`, its time added to this tick's `part` (the stall log's breakdown); only the
        tick thread calls these."""
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = self._now()
            try:
                return call(*args, **kwargs)
            finally:
                self._sections[part] = self._sections.get(part, 0.0) + self._now() - started
        return timed

    def _tick_slice(self) -> float:
        """The longest one part of a tick (a sending round, a node-lock wait) may take."""
        return min(float(self._SyncObj__conf.appendEntriesPeriod), TICK_SLICE_S)

    def _read_inbox_after_stall(self) -> None:
        """Inbox first: back from a stall, read what arrived meanwhile before any timer is judged
        (stock judges first: a follower's election and a leader's fallback would count
        heartbeats and answers sitting unread in our own sockets as silence)."""
        if self._note_tick_gap() and self._SyncObj__transport.ready:
            self._poller.poll(0)

    def _note_tick_gap(self) -> bool:
        """The time since the previous tick began: how long this node could not act on Raft
        (its own work, the GIL, the CPU); the longest is kept. True after a long one (over half
        the minimum election timeout), which is logged."""
        now = self._now()
        gap = now - self._tick_started if self._tick_started else 0.0
        self._tick_started = now
        self.repair_stats.max_tick_gap = max(self.repair_stats.max_tick_gap, gap)
        if gap <= self._SyncObj__conf.raftMinTimeout / 2:
            return False
        self.repair_stats.long_tick_gaps += 1
        self._listening_since = now
        log.warning("raft tick thread stalled %.0f ms (as %s): the previous tick took %.0f ms, "
                    "%.0f ms of it applying (%s)", gap * 1000, self._role_name(),
                    self._tick_work * 1000, self._apply_work * 1000, self._parts_text())
        return True

    def _start_tick_clock(self) -> tuple[float, float]:
        """The tick's wall and CPU clocks at its start; its parts start at zero."""
        started = self._now()
        cpu_started = time.thread_time()
        self._tick_ident = threading.get_ident()
        _TICKING[self._tick_ident] = self._weak_self
        self._sections = {}
        self._waited = 0.0
        return started, cpu_started

    def _stop_tick_clock(self, started: float, cpu_started: float) -> None:
        """The tick's time, by part, into `RepairStats.tick_holds` (and the log if long)."""
        self._tick_work = self._now() - started
        self._sections["apply"] = self._apply_work
        # fdatasync happens inside sending (before_send) or a tick callback: not a part of its own
        self._sections["rest (tick callbacks)"] = self._tick_work - sum(
            v for k, v in self._sections.items() if k not in NESTED)
        self.repair_stats.tick_holds.record(self._tick_work - self._waited, time.thread_time() - cpu_started,
                                            self._waited, self._sections)
        self._log_long_hold()

    def _on_gc(self, phase: str) -> None:
        """A collection run by the tick thread (it allocates, so it collects): its pause is a
        part of the tick ("gc", nested in whichever part allocated)."""
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self._sections["gc"] = self._sections.get("gc", 0.0) + time.perf_counter() - self._gc_started
            self._gc_started = 0.0

    def _log_long_hold(self) -> None:
        """A tick that held the thread (its work, not its wait for a message) for
        LONG_HOLD_S or more is logged with its parts, and the CPU the thread got meanwhile (at most
        one line a second): a hold far above its CPU is a thread waiting for a core, the GIL or
        the disk, not working."""
        held = self._tick_work - self._waited
        if held < LONG_HOLD_S:
            return
        holds = self.repair_stats.tick_holds
        holds.long += 1
        now = self._now()
        if now - holds.logged_at < 1.0:
            return                      # at most one line a second (counted in `long`)
        holds.logged_at = now
        log.info("raft tick held %.0f ms (cpu %.0f ms, as %s): %s; %d such ticks since start",
                 held * 1000, holds.last_cpu * 1000, self._role_name(), self._parts_text(), holds.long)

    def _role_name(self) -> str:
        return "leader" if self._SyncObj__raftState == _RAFT_STATE.LEADER else "follower"

    def _parts_text(self) -> str:
        """The last tick's parts of a millisecond or more, longest first (for the log)."""
        return ", ".join(f"{k} {v * 1000:.0f}" for k, v in
                         sorted(self._sections.items(), key=lambda kv: -kv[1]) if v >= 0.001)

    def _SyncObj__tryLogCompaction(self) -> None:
        self._timed("compaction", lambda: SyncObj._SyncObj__tryLogCompaction(self))()


# The node whose tick runs on each thread (the last one: a driven test ticks several on one), for
# the one gc callback: a collection's pause is a part of that node's tick.
_TICKING: dict[int, weakref.ref[TickTiming]] = {}


def _gc_pause(phase: str, info: dict[str, Any]) -> None:
    ref = _TICKING.get(threading.get_ident())
    node = ref() if ref is not None else None
    if node is not None:
        node._on_gc(phase)


gc.callbacks.append(_gc_pause)


class _TimedWait:
    """The poller's select.poll object, its blocking poll timed into the tick's "wait" (the
    rest of "poll+messages" is handling what arrived)."""

    def __init__(self, inner: Any, node: TickTiming) -> None:
        self._inner = inner
        self._node = node

    def poll(self, timeout: Any = None) -> Any:
        started = time.perf_counter()
        try:
            return self._inner.poll(timeout)
        finally:
            waited = time.perf_counter() - started
            self._node._waited += waited
            sections = self._node._sections
            sections["wait"] = sections.get("wait", 0.0) + waited

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
