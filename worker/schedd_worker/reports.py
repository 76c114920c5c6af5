"""What the worker tells the leader about its attempts: heartbeats, results, their resends.

Why separate: the leader decides whether an attempt is alive from these messages alone, so
when each goes is one decision. A result is owed until the leader acknowledges it (committed,
stale or refused settle it; anything else is resent), resent after a lease without an
acknowledgement and all of them after a reconnect; while due attempts wait for a slot (a herd
is starting) a result is held back for at most `hold_s`, and a heartbeat still lists it. What
is held and owed is the ledger's (`schedd_worker.ledger`); this module decides what to send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from schedd_proto import scheduler_pb2 as pb
from schedd_worker.hooks import WorkerEvents
from schedd_worker.leader_link import LeaderLink
from schedd_worker.ledger import Ledger

__all__ = ["Reports", "REJECTED", "RESULT_HOLD_S"]

log = logging.getLogger("schedd.worker")

REJECTED = "REJECTED"
RESULT_HOLD_S = 0.5             # results held at most this long while due attempts wait for a slot


@dataclass(slots=True, eq=False)
class Reports:
    name: str
    ledger: Ledger
    link: LeaderLink
    events: WorkerEvents
    now_ms: Callable[[], int]
    draining: Callable[[], bool]
    waiting: Callable[[], bool]          # due attempts wait for a slot: hold results back
    hold_s: float = RESULT_HOLD_S
    _flush: asyncio.TimerHandle | None = None

    def heartbeat(self) -> None:
        """The tokens it holds, with those whose result is held back, not sent yet (a leader
        reading a heartbeat that leaves out an attempt the worker had been sent loses it after
        a lease), and how many leader messages it has handled (the assignments it knows of)."""
        conn = self.link.session
        if conn is None:
            return
        self.link.send(pb.WorkerMessage(heartbeat=pb.Heartbeat(
            running_tokens=self.ledger.listed(), draining=self.draining(), messages_read=conn.read)))

    def send_result(self, token: int) -> None:
        u = self.ledger.owed.get(token)
        if u is not None and self.link.send(pb.WorkerMessage(result=u.result)):
            u.sent_at = asyncio.get_running_loop().time()

    def report(self, result: pb.AttemptResult) -> None:
        """Send the result, unless due attempts wait for a slot (a herd is starting): then it
        is held until they have all started or for hold_s at most, so that the herd's starts
        do not share the worker's and the leader's CPU with its results (a lease is seconds
        longer than the hold: the attempt is not given up meanwhile)."""
        waiting = self.waiting()
        self.ledger.owe(result, hold_back=waiting)
        if waiting:
            if self._flush is None:
                self._flush = asyncio.get_running_loop().call_later(self.hold_s, self.release_held)
            return
        self.send_result(result.fencing_token)

    def reject(self, a: pb.Assignment, why: str) -> None:
        """Refuse an assignment, or hand back one that never started: it runs again (elsewhere)."""
        log.info("rejecting %s (token %d, term %d): %s", a.execution_id, a.fencing_token, a.term, why)
        self.events.rejected(self.name, a, why)
        now = self.now_ms()
        self.report(pb.AttemptResult(execution_id=a.execution_id, fencing_token=a.fencing_token,
                                     state=REJECTED, error=why, started_ms=now, ended_ms=now))

    def release_held(self) -> None:
        """Send the results held back (the herd has started, or the hold is over)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        for token in self.ledger.take_held_back():
            self.send_result(token)

    def resend_all(self) -> None:
        """After a (re)connect: every unacknowledged result, oldest first."""
        for token in list(self.ledger.owed):
            self.send_result(token)

    def resend_unsettled(self, lease_ms: int) -> None:
        """Results the leader has not settled within a lease ("unknown" acks, lost ones)."""
        old = asyncio.get_running_loop().time() - lease_ms / 1000
        for token, u in list(self.ledger.owed.items()):
            if u.sent_at is None or u.sent_at <= old:
                self.send_result(token)

    def acked(self, ack: pb.ResultAck) -> None:
        self.events.acked(self.name, ack.fencing_token, ack.outcome)
        u = self.ledger.owed.get(ack.fencing_token)
        if u is None:
            return
        outcome = ack.outcome or "committed"
        if outcome in ("committed", "stale", "refused"):
            self.ledger.settle(ack.fencing_token)
            if outcome == "stale":
                log.warning("result of %s (token %d, %s) refused by fencing: the attempt was "
                            "superseded", u.result.execution_id, ack.fencing_token, u.result.state)
            elif outcome == "refused":
                log.warning("result of %s (token %d, %s) refused: the leader did not assign that "
                            "attempt to this worker", u.result.execution_id, ack.fencing_token,
                            u.result.state)
        else:
            log.info("leader could not settle the result of %s (token %d): %s; will resend",
                     u.result.execution_id, ack.fencing_token, outcome)
            u.sent_at = None
