"""This node's own record of the terms it led (NodeStatus.leader_terms), in memory.

The replicated state keeps only the highest leader term (`Tables.epoch`), not who led when, and
a leader change is no log entry of its own; each node knows when it became the leader and when
it stepped down. Cluster.Status gathers every node's record, so together they are the cluster's
recent leader changes (`schedctl cluster leaders`, the dashboard's cluster page). A restart
forgets a node's record: it is a recent view, not an audit trail.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

KEPT = 20


@dataclass(slots=True)
class LeaderTerm:
    term: int
    since_ms: int
    until_ms: int = 0            # 0: still the leader


@dataclass(slots=True)
class LeaderTerms:
    """The last `KEPT` terms this node led, oldest first. Written by the Raft thread's role
    callback, read by the gRPC handlers: a lock keeps each read whole."""

    _terms: deque[LeaderTerm] = field(default_factory=lambda: deque(maxlen=KEPT))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def became_leader(self, term: int, now_ms: int) -> None:
        with self._lock:
            self._end(now_ms)
            self._terms.append(LeaderTerm(term, now_ms))

    def stepped_down(self, now_ms: int) -> None:
        with self._lock:
            self._end(now_ms)

    def _end(self, now_ms: int) -> None:
        if self._terms and not self._terms[-1].until_ms:
            self._terms[-1].until_ms = now_ms

    def rows(self) -> list[tuple[int, int, int]]:
        """(term, since_ms, until_ms) of each, oldest first (what ClusterService answers)."""
        with self._lock:
            return [(t.term, t.since_ms, t.until_ms) for t in self._terms]
