"""The shell around the convergence tracker: sample, publish, warn, set health.

Every `period_s` it reads one consistent Raft status (RaftNode.status), feeds the pure
ConvergenceTracker (schedd/replication/convergence.py) monotonic milliseconds, and publishes an
immutable tuple of rows that the metrics scrape thread and Cluster.Status read without locks. It
logs a rate-limited WARNING naming each stuck replica and the index where its repair is stuck,
and says whether this node may take writes: it knows a leader, has a quorum, and is not itself
the stuck replica. The daemon maps that to the `schedd.writes` health service.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from collections.abc import Awaitable, Callable

from schedd.replication.convergence import ConvergenceTracker, Replica, samples

log = logging.getLogger("schedd.replication")

PERIOD_S = 0.5


def _mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ReplicaWatch:
    def __init__(self, node, tracker: ConvergenceTracker, *, wall_ms: Callable[[], int],
                 mono_ms: Callable[[], int] = _mono_ms) -> None:
        self.node, self.tracker = node, tracker
        self.wall_ms, self.mono_ms = wall_ms, mono_ms
        self.rows: tuple[Replica, ...] = ()        # published: read from any thread
        self.writable = False
        self.why_not_writable = "not sampled yet"
        self._term = -1
        self._role = ""

    def progress_wall_ms(self, row: Replica) -> int:
        """A row's last progress on the wall clock (rows hold monotonic times)."""
        return self.wall_ms() - (self.mono_ms() - row.progress_ms)

    def sample(self) -> bool:
        """One step; returns whether this node may take writes."""
        st = self.node.status()
        now = self.mono_ms()
        me = self.node.cfg.raft_address
        if (st.term, st.role) != (self._term, self._role):
            self.tracker.reset()               # a new role or term: a fresh observation
            self._term, self._role = st.term, st.role
        observed = samples(st, me)
        for peer, match, last in observed:
            self.tracker.observe(now, peer, match, last)
        self.tracker.keep_only(peer for peer, _, _ in observed)
        self.rows = tuple(replace(r) for r in self.tracker.rows())
        for row in self.tracker.warnings_due(now):
            self._warn(row, st, now)
        if st.role != "leader" and not st.leader:
            why = "no leader is known"
        elif not st.has_quorum:
            why = "no quorum"
        elif self.tracker.is_stuck(me):
            row = next(r for r in self.rows if r.peer == me)
            why = (f"this replica is not converging: {row.lag} entries behind, repair stuck at "
                   f"index {row.repair_index}")
        else:
            why = ""
        self.writable, self.why_not_writable = not why, why
        return self.writable

    def _warn(self, row: Replica, st, now: int) -> None:
        stalled_s = (now - row.progress_ms) / 1000
        if row.peer == self.node.cfg.raft_address:
            log.warning("this replica is not converging: commit index %d, the leader's %d (%d entries "
                        "behind), no progress for %.0f s; log repair is stuck at index %d",
                        row.match_index, row.last_index, row.lag, stalled_s, row.repair_index)
            return
        log.warning("replica %s (%s) is not converging: matchIndex %d unchanged for %.0f s while this "
                    "leader's log ends at %d (%d entries behind, term %d); log repair is stuck at index %d",
                    self.node.membership.id_of_raft(row.peer) or "?", row.peer, row.match_index, stalled_s,
                    row.last_index, row.lag, st.term, row.repair_index)

    async def run(self, on_writable: Callable[[bool], Awaitable[None]], period_s: float = PERIOD_S) -> None:
        """Sample forever; `on_writable` is awaited whenever the writable verdict changes."""
        last: bool | None = None
        while True:
            try:
                writable = self.sample()
                if writable != last:
                    if last is not None or not writable:
                        log.info("writes %s%s", "served" if writable else "NOT served",
                                 "" if writable else f": {self.why_not_writable}")
                    await on_writable(writable)
                    last = writable
            except Exception:  # the watch must survive a bad sample
                log.exception("replication watch step failed")
            await asyncio.sleep(period_s)
