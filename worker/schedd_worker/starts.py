"""When an accepted attempt starts: at its due time, as soon as a slot frees, or never (handed back).

Why separate: an accepted attempt is held in the one timer (`schedd_worker.timers`) until its due
time on the local clock; everything due at one instant starts in one callback, every handler
call first and then the bookkeeping that watches them; what does not fit the free slots waits
(`schedd_worker.slots`) and starts as a slot frees, in this same callback when one ended at
once; an attempt that waited too long, or that the worker gives up before it started, goes back
to the leader as REJECTED. Running and watching one attempt is `schedd_worker.attempt`'s; what is
sent is `schedd_worker.reports`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from schedd_proto import scheduler_pb2 as pb
from schedd_worker.attempt import AttemptRunner, RunSettings, Started, prepare
from schedd_worker.ledger import Held, Ledger
from schedd_worker.reports import Reports
from schedd_worker.slots import Slots
from schedd_worker.timers import QuietCollector, Timer

__all__ = ["Starts", "wall_ms"]

log = logging.getLogger("schedd.worker")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Starts:
    def __init__(self, run: RunSettings, *, ledger: Ledger, slots: Slots, reports: Reports,
                 gc: QuietCollector | None = None) -> None:
        self.run = run
        self.ledger = ledger
        self.slots = slots
        self.reports = reports
        self.runner = AttemptRunner(run, report=reports.report, ended=self.end)
        self.timer = Timer(run.now_ms, self.on_due,           # every waiting attempt, one loop timer
                           now_s=time.time if run.now_ms is wall_ms else None)
        self.gc = gc or QuietCollector()         # full collections between due instants (one per process)
        self._starting = False                   # start_ready is running (not re-entered)
        slots.wake = self.start_ready            # the pool gives this shard a freed slot

    @property
    def now_ms(self) -> Callable[[], int]:
        return self.run.now_ms

    def accept(self, a: pb.Assignment) -> None:
        """Hold the assignment (prepared now) until it is due: in the timer, or started now."""
        token = a.fencing_token
        self.ledger.accept(prepare(a, self.run))
        now = self.now_ms()
        log.debug("accepted %s attempt %d (token %d), due in %d ms", a.execution_id, a.attempt,
                  token, max(0, a.due_ms - now) if a.due_ms else 0)
        if a.due_ms and a.due_ms > now:
            self.timer.add(a.due_ms, token)
        else:
            self.on_due([token])

    def on_due(self, tokens: list[int]) -> None:
        """The timer: every attempt due by now starts in this one callback, every handler call
        first (an async one runs to its first await, a plain one's thread starts), then the
        bookkeeping that watches them, so no handler waits for the bookkeeping of the others;
        those that ended at once free their slots for the attempts waiting, still in this
        callback (one loop turn between them was a tenth of a 1,000 herd's start)."""
        due = [att for att in map(self.ledger.held.get, tokens)
               if att is not None and att.phase == "waiting"]
        room = self.slots.room()
        if len(due) > room:                       # more due than free slots: the rest start
            self.slots.queue(due[room:], self.now_ms())   # as slots free up (no leader round trip)
            del due[room:]
        started = [self._call(att) for att in due]
        for att, s in zip(due, started):
            self.runner.watch(att, s)
        self.quiet_gc()

    def quiet_gc(self) -> None:
        """A full garbage collection if one is due and nothing is (QuietCollector)."""
        if self.slots.waiting():                  # attempts wait for a slot: not now
            return
        nxt = self.timer.queue.next_due()
        self.gc.maybe_collect(None if nxt is None else nxt / 1000 - self.timer.now_s())

    def start_ready(self) -> None:
        """A slot freed: start the attempts due and waiting for one, oldest due first; one that
        waited too long (overdue) is handed back instead. Not re-entered: a start that ended at
        once frees its slot for the next one of this same loop, not in a nested one (a herd of
        instant handlers would nest as deep as it is long)."""
        if self._starting:
            return
        self._starting = True
        try:
            now = self.now_ms()
            while self.slots.ready and self.slots.free():
                att = self.slots.ready.popleft()
                if att.phase == "waiting" and self.ledger.held.get(att.msg.fencing_token) is att:
                    if self.slots.overdue(att, now):
                        self.hand_back(att, self.slots.overdue_reason())
                    else:
                        self.start(att)
        finally:
            self._starting = False
        if not self.slots.ready and self.ledger.held_back:
            self.reports.release_held()

    def start(self, att: Held) -> None:
        """Start the attempt now (due, or cancelled while waiting)."""
        self.runner.watch(att, self._call(att))

    def _call(self, att: Held) -> Started | None:
        self.slots.take()
        return self.runner.call(att)

    def end(self, att: Held) -> None:
        """The attempt ended or was handed back: no longer held; a slot it took goes on."""
        self.ledger.end(att.msg.fencing_token)
        if att.phase == "running":
            self.slots.give()
            if self.slots.pool is not None:      # the longest waiting shard's, maybe this one's
                self.slots.pool.freed()
            elif self.slots.ready:
                self.start_ready()
        att.phase = "ended"

    def hand_back(self, att: Held, why: str) -> None:
        """An attempt that never started goes back to the leader as REJECTED: it runs again
        (elsewhere), neither a failure nor an attempt counted."""
        self.end(att)
        self.reports.reject(att.msg, why)

    def hand_back_overdue(self) -> None:
        """Every heartbeat: hand back what waits for a slot too long (no slot freed meanwhile)."""
        if not self.slots.ready:
            return
        for att in self.slots.overdue_now(self.now_ms()):
            self.hand_back(att, self.slots.overdue_reason())
        self.slots.prune()

    def cancel(self, c: pb.CancelAttempt) -> None:
        """The leader cancels an attempt: stop it, or report it CANCELLED if it had not started."""
        att = self.ledger.held.get(c.fencing_token)
        if att is None:
            log.info("cancel for %s (token %d): not running here", c.execution_id, c.fencing_token)
            if c.fencing_token in self.ledger.owed:
                self.reports.send_result(c.fencing_token)
            return
        log.info("cancelling %s (token %d)", att.msg.execution_id, att.msg.fencing_token)
        self.runner.stop(att)
        if att.phase == "waiting":            # reports CANCELLED "cancelled before it started"
            self.start(att)
