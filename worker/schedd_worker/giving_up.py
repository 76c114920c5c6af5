"""When the worker gives its attempts up: the drain after `stop`, and the self-fence.

Why separate: both end attempts the leader still counts on, and both follow one rule: an
attempt that never started is handed back (REJECTED, the leader runs it again without counting
an attempt), one that runs is cancelled and reports CANCELLED. The drain does it at the end of
`drain_grace_s` (or at once on `hurry`); the self-fence when no leader was reachable for a
lease, since the leader has expired those attempts and runs them elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from schedd_worker.leader_link import LeaderLink
from schedd_worker.ledger import Held, Ledger
from schedd_worker.reports import Reports
from schedd_worker.starts import Starts

__all__ = ["Drain", "self_fence", "FINAL_ACK_TIMEOUT_S", "KILL_MARGIN_S", "FENCE_CHECK_S"]

log = logging.getLogger("schedd.worker")

FINAL_ACK_TIMEOUT_S = 5.0       # drain: wait this long for the last results to be acknowledged
KILL_MARGIN_S = 15.0            # after cancelling in a drain: executor's own kill waits + margin
FENCE_CHECK_S = 0.25            # the self-fence looks this often


def _running(ledger: Ledger) -> dict[asyncio.Future[Any], Held]:
    """The held attempts whose task (or watched call) has not ended, by that task."""
    return {a.task: a for a in ledger.held.values() if a.task is not None and not a.task.done()}


@dataclass(slots=True, eq=False)
class Drain:
    """Heartbeat(draining) at once; what waits for its due time or a slot is handed back;
    what runs gets `grace_s` to finish (less after `hurry`), then is cancelled; then the last
    results get `final_ack_s` to be acknowledged."""
    name: str
    ledger: Ledger
    starts: Starts
    reports: Reports
    grace_s: float
    kill_grace_s: float
    hurry: asyncio.Event
    final_ack_s: float = FINAL_ACK_TIMEOUT_S

    async def run(self) -> None:
        log.info("worker %s draining: %d attempts held, grace %gs", self.name, len(self.ledger.held),
                 self.grace_s)
        self.reports.heartbeat()
        for att in list(self.ledger.attempts()):
            if att.phase == "waiting":        # handed back: the leader requeues it
                self.starts.hand_back(att, "worker draining")
        self.starts.slots.ready.clear()
        self.reports.release_held()
        if any(a.task is not None for a in self.ledger.held.values()):
            await self._grace()
            await self._cancel_left_over()
        await self._last_acks()

    async def _grace(self) -> None:
        """Until every running attempt ended, the grace is over, or `hurry`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace_s
        hurry = asyncio.create_task(self.hurry.wait())
        try:
            while True:                       # (an attempt's task may change: escalate)
                pending = set(_running(self.ledger))
                left = deadline - loop.time()
                if not pending or hurry.done() or left <= 0:
                    break
                await asyncio.wait(pending | {hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hurry.cancel()

    async def _cancel_left_over(self) -> None:
        left_over = list(_running(self.ledger).values())
        if not left_over:
            return
        log.warning("drain grace over: cancelling %d running attempts (%s)",
                    len(left_over), ", ".join(a.msg.execution_id for a in left_over))
        for a in left_over:
            self.starts.runner.stop(a)
        await asyncio.wait({a.task for a in left_over if a.task is not None},  # set: see above
                           timeout=self.kill_grace_s + KILL_MARGIN_S)

    async def _last_acks(self) -> None:
        if not self.ledger.owed:
            return
        try:
            await asyncio.wait_for(self.ledger.settled.wait(), self.final_ack_s)
        except TimeoutError:
            log.warning("drain: %d results not acknowledged by the leader (tokens %s); the "
                        "leader will expire those attempts", len(self.ledger.owed), sorted(self.ledger.owed))


async def self_fence(name: str, link: LeaderLink, ledger: Ledger, starts: Starts) -> None:
    """Cut off from every leader for longer than a lease, this worker's attempts have been
    expired and are being run again elsewhere: stop them here too, so a partitioned worker
    does not keep running what another worker now runs. (A worker that is itself paused cannot
    do this; its late result is refused by the fencing token instead.)"""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(FENCE_CHECK_S)
        lost = link.lost_since
        if link.connected or lost is None or not ledger.held:
            continue
        if (loop.time() - lost) * 1000 > link.lease_ms:
            log.warning("worker %s: no leader for %.1fs (lease %d ms): cancelling %d attempts, "
                        "which the leader runs again elsewhere", name, loop.time() - lost,
                        link.lease_ms, len(ledger.held))
            for att in list(ledger.attempts()):
                if att.phase == "waiting":        # never started: back in line, not CANCELLED
                    starts.hand_back(att, "no leader for a lease: handed back before it started")
                else:
                    starts.runner.stop(att)
            link.lost_since = loop.time()         # once per lease at most
