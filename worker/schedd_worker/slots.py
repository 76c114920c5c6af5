"""The worker's capacity: how many attempts run at once, and which due ones wait for a slot.

Why separate: at most `count` attempts of one shard run at once, and at most `SlotPool.total` of
the whole process (a sharded cluster: one `Slots` per shard, their counts the shares of one pool,
see `schedd_worker.runtime`); what falls due while every slot is busy waits
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

__all__ = ["Slots", "SlotPool"]


@dataclass(slots=True, eq=False)
class SlotPool:
    """The process's slots, shared by every shard's `Slots`: whatever the shares say (they may
    add up to more than `total`: a worker with fewer slots than shards), no more than `total`
    attempts run at once. A freed slot goes to the shard whose first waiting attempt has waited
    longest, the shard that freed it included: no shard keeps the pool to itself."""
    total: int
    busy: int = 0
    members: list[Slots] = field(default_factory=list)   # every shard's

    def room(self) -> int:
        return max(0, self.total - self.busy)

    def freed(self) -> None:
        """A slot freed: start what waits, the longest waiting shard first."""
        woken: set[int] = set()
        while self.busy < self.total:
            waiting = [s for s in self.members if s.ready and s.busy < s.count and id(s) not in woken]
            if not waiting:
                return
            first = min(waiting, key=lambda s: s.ready[0].queued_ms)
            woken.add(id(first))
            first.wake()


@dataclass(slots=True, eq=False)
class Slots:
    count: int                           # attempts of this shard that may run at once (its share)
    lease_ms: Callable[[], int]          # the current lease (the overdue rule is half of it)
    busy: int = 0                        # attempts running (at most `count`, but for a cancel)
    ready: deque[Held] = field(default_factory=deque)    # due, waiting for a slot, in due order
    pool: SlotPool | None = None         # the process's slots (None: only `count` bounds)
    wake: Callable[[], None] = lambda: None   # start what waits here (`Starts.start_ready`)

    def __post_init__(self) -> None:
        if self.pool is not None:
            self.pool.members.append(self)

    def take(self) -> None:
        """An attempt starts: it takes a slot (a cancelled one too, for as long as it reports)."""
        self.busy += 1
        if self.pool is not None:
            self.pool.busy += 1

    def give(self) -> None:
        """A running attempt ended: its slot goes back (to this shard first, then the pool)."""
        self.busy -= 1
        if self.pool is not None:
            self.pool.busy -= 1

    def waiting(self) -> bool:
        """Due attempts wait for a slot (a herd is starting)."""
        return bool(self.ready)

    def room(self) -> int:
        own = max(0, self.count - self.busy)
        return own if self.pool is None else min(own, self.pool.room())

    def free(self) -> bool:
        return self.busy < self.count and (self.pool is None or self.pool.busy < self.pool.total)

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
