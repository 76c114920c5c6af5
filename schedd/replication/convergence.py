"""Is every replica converging? A pure tracker of replication progress, fed samples.

A replica whose log repair is stuck (stock pysyncobj: a healed leader kept a divergent suffix and never
caught up, with nothing but a lag figure to show it) must be an alarm. The tracker is fed
`(now_ms, peer, match_index, last_index)` samples and says, per peer, how far behind it is and
whether it is *stuck*: behind, and its match index has not moved forward for `stuck_after_ms`.

- On the leader a sample per peer: pysyncobj's matchIndex for it and the leader's last log index.
- On a follower one sample for itself: its commit index and the leader's commit index as the
  leader's appends announce it (its own log repair is what is stuck when that never closes).

Progress is a forward move of the match index, or no lag at all: a replica that was idle and in
step for an hour is not stuck the moment a new entry appears. A match index going back (pysyncobj
resets it to 0 when a peer reconnects) is not progress. No clock inside: time comes in the
samples, so tests drive it with numbers; the daemon (schedd/runtime/daemon.py) feeds it monotonic
milliseconds and turns its rows into metrics, cluster-status warnings, health and log lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schedd.replication.node import RaftStatus

DEFAULT_STUCK_AFTER_MS = 10_000
DEFAULT_WARN_EVERY_MS = 30_000


@dataclass(slots=True)
class Replica:
    peer: str
    match_index: int
    last_index: int
    progress_ms: int              # the last sample that showed progress (or the first sample)
    stuck: bool = False
    warned_ms: int | None = None  # the last WARNING logged for it

    @property
    def lag(self) -> int:
        return max(0, self.last_index - self.match_index)

    @property
    def repair_index(self) -> int:
        """The first entry the replica lacks: where repair is stuck."""
        return self.match_index + 1


class ConvergenceTracker:
    """Per-peer replication progress from samples; pure and single-threaded."""

    def __init__(self, stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS,
                 warn_every_ms: int = DEFAULT_WARN_EVERY_MS) -> None:
        self.stuck_after_ms = stuck_after_ms
        self.warn_every_ms = warn_every_ms
        self._rows: dict[str, Replica] = {}

    def observe(self, now_ms: int, peer: str, match_index: int, last_index: int) -> Replica:
        row = self._rows.get(peer)
        if row is None:
            row = self._rows[peer] = Replica(peer, match_index, last_index, now_ms)
        else:
            if match_index > row.match_index:
                row.progress_ms = now_ms
            row.match_index, row.last_index = match_index, last_index
        if row.lag == 0:
            row.progress_ms = now_ms
        row.stuck = row.lag > 0 and now_ms - row.progress_ms >= self.stuck_after_ms
        if not row.stuck:
            row.warned_ms = None
        return row

    def keep_only(self, peers: Iterable[str]) -> None:
        """Forget peers no longer sampled (a role change: the leader's rows mean nothing to a
        follower, and a new leader starts its own observation)."""
        keep = set(peers)
        for peer in [p for p in self._rows if p not in keep]:
            del self._rows[peer]

    def reset(self) -> None:
        self._rows.clear()

    def rows(self) -> list[Replica]:
        return [self._rows[p] for p in sorted(self._rows)]

    def stuck(self) -> list[Replica]:
        return [r for r in self.rows() if r.stuck]

    def is_stuck(self, peer: str) -> bool:
        row = self._rows.get(peer)
        return row is not None and row.stuck

    def warnings_due(self, now_ms: int) -> list[Replica]:
        """Stuck replicas to log about now, at most once per `warn_every_ms` each."""
        due = []
        for row in self.stuck():
            if row.warned_ms is None or now_ms - row.warned_ms >= self.warn_every_ms:
                row.warned_ms = now_ms
                due.append(row)
        return due


def samples(status: RaftStatus, self_address: str) -> list[tuple[str, int, int]]:
    """(peer, match_index, last_index) samples from one RaftStatus (schedd.replication.node): a
    leader's view of each peer, or a follower's view of itself against the leader's commit
    index. A node that knows no leader has nothing to compare with: no sample."""
    if status.role == "leader":
        return [(peer, match, status.last_log_index) for peer, match in sorted(status.match_index.items())]
    if status.leader and status.leader_commit_index:
        return [(self_address, status.commit_index, status.leader_commit_index)]
    return []
