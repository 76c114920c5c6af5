"""The worker's capacity: how many attempts run at once, and which due ones wait for a slot.

Why separate: at most `count` attempts run at once, what falls due while every slot is busy waits
here (oldest due first) and starts as a slot frees, without a leader round trip; one that waited
too long is handed back instead (`overdue`). Those are rules about numbers and times only, kept
apart from starting and watching an attempt (`schedd_worker.attempt`) and from when to start it
(`schedd_worker.starts`), which both ask them. No I/O, no asyncio.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from schedd_worker.ledger import Held

__all__ = ["Slots"]


@dataclass(slots=True, eq=False)
class Slots:
    count: int                           # attempts that may run at once
    lease_ms: Callable[[], int]          # the current lease (the overdue rule is half of it)
    busy: int = 0                        # attempts running (at most `count`, but for a cancel)
    ready: deque[Held] = field(default_factory=deque)    # due, waiting for a slot, in due order

    def waiting(self) -> bool:
        """Due attempts wait for a slot (a herd is starting)."""
        return bool(self.ready)

    def room(self) -> int:
        return max(0, self.count - self.busy)

    def free(self) -> bool:
        return self.busy < self.count

    def queue(self, due: list[Held], now_ms: int) -> None:
        """Due, no slot free: wait here from `now_ms` on, after those already waiting."""
        for att in due:
            att.queued_ms = now_ms
        self.ready.extend(due)

    def overdue(self, att: Held, now_ms: int) -> bool:
        """An attempt with a timeout that waited for a slot more than half a lease (since it was
        due, or arrived due): the leader expires an attempt that does not report within its
        timeout plus a lease past due, and must not while it has not even started here (it
        would run twice). Without a timeout it may wait as long as it takes (the heartbeats
        keep it alive): a herd of slow handlers on few slots legitimately waits for long."""
        return (att.msg.timeout_seconds > 0
                and now_ms - max(att.msg.due_ms, att.queued_ms) > self.lease_ms() // 2)

    def overdue_reason(self) -> str:
        return (f"waited for a free slot for more than {self.lease_ms() / 2000:g}s: "
                "handed back before it started")

    def overdue_now(self, now_ms: int) -> list[Held]:
        """The waiting attempts that are overdue at `now_ms`."""
        return [a for a in self.ready if a.phase == "waiting" and self.overdue(a, now_ms)]

    def prune(self) -> None:
        """Forget what no longer waits (started, handed back, ended)."""
        self.ready = deque(a for a in self.ready if a.phase == "waiting")
