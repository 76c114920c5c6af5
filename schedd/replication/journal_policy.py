"""When the journal's log is fdatasynced: the fsync policy, and the leader's parallel mode.

Why a module of its own: this is the decision Raft's safety rests on (an entry is acked or
committed only once it is durable on a majority), made in four places of the journal (before a
send, in the tick, before the commit index moves, in the deadline sleep); here it is written once.
The policies are described in schedd.replication.journal's docstring.

``always``: a dirty log is synced before any message leaves the node and before the commit index
moves, and on every tick. In *parallel mode* (the leader of a multi-node cluster, Raft thesis
§10.2.1) sends and the commit do not wait: the tick asks the background thread to sync, and the
leader counts itself in a commit only up to the durable index (its caller caps it).
``batch``: at most every ``batch_interval`` seconds, from the tick. ``never``: only when forced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FSYNC_POLICIES = ("always", "batch", "never")

#: What a tick does with a dirty log: sync it now, ask the background thread, or nothing yet.
TickSync = Literal["sync", "background"] | None


def check_policy(fsync: str) -> None:
    if fsync not in FSYNC_POLICIES:
        raise ValueError("fsync must be one of %r, got %r" % (FSYNC_POLICIES, fsync))


@dataclass(slots=True)
class FsyncPolicy:
    """One of FSYNC_POLICIES, its batch interval, and whether parallel mode is on."""

    name: str
    batch_interval: float
    parallel: bool = False

    @classmethod
    def parse(cls, fsync: str, batch_interval: float) -> FsyncPolicy:
        check_policy(fsync)
        if batch_interval < 0:
            raise ValueError("batch_interval must be >= 0")
        return cls(fsync, float(batch_interval))

    @property
    def durable(self) -> bool:
        """Whether opening, compaction and ``clear`` fsync (every policy but ``never``)."""
        return self.name != "never"

    def set_parallel(self, on: bool, closed: bool) -> bool:
        """Parallel mode only under ``always``: the other policies do not keep the durable index
        as a promise. Returns whether it is on."""
        self.parallel = bool(on) and self.name == "always" and not closed
        return self.parallel

    def sync_first(self, unsynced: bool) -> bool:
        """Whether a send, or a move of the commit index, must sync the log first
        (persist before send; the commit only over entries on this node's disk)."""
        return self.name == "always" and not self.parallel and unsynced

    def skips(self, force: bool) -> bool:
        """Whether a sync asked for is a no-op (``never``, unless forced)."""
        return self.name == "never" and not force

    def on_tick(self, since_sync: float) -> TickSync:
        """What the tick does with a dirty log, ``since_sync`` seconds after the last sync."""
        if self.name == "always":
            return "background" if self.parallel else "sync"
        if self.name == "batch" and since_sync >= self.batch_interval:
            return "sync"
        return None

    def tick_need(self, dirty: bool, settling: bool) -> float | None:
        """0 (tick at the tick period) while the tick has a write to sync or a truncation to
        settle; in parallel mode the background thread syncs and wakes the tick itself."""
        if settling:
            return 0.0
        if dirty and not self.parallel and self.name != "never":
            return 0.0
        return None
