"""ReadIndex (Raft thesis §6.4, as etcd and hashicorp raft do it): when a read on the leader is
linearizable, without writing anything to the log.

A leader that is cut off from its peers keeps believing it leads until the leader fallback
timeout ends it (2.5 s by default), while the others elect a new leader within about one
election timeout and commit newer writes; a read served from its state meanwhile goes back in
time. So a read is served only at a point the leader has proved it still led after
the read arrived:

1. the read is asked (`ask`, any thread); the tick thread drains what was asked into a *round*
   (`start`) only while this node leads and has committed an entry of its current term (Raft §8:
   until then its commit index may lag the previous leader's), and records the round's read
   index, the commit index at that moment;
2. the round gets a number (`seq`), larger than any sent before, and the leader sends every
   follower a heartbeat carrying it; a patched follower echoes the newest number it was sent in
   its answer, and answers at all only if it accepts this node as the leader of its term (an
   AppendEntries of an older term is dropped unanswered);
3. once followers that with the leader make a majority have echoed a number at or above the
   round's, no other leader can have committed anything after the read arrived (any majority
   that elected one overlaps this one, which still answered this term): the round is
   *confirmed* (`ack`, `confirm`);
4. a confirmed round is served once this node has applied up to its read index (`serve`).

Rounds are numbered for the node's lifetime, so an echo answers a heartbeat sent at or after the
round began, never an older one (nor one of an earlier leadership of this node). Reads asked
together share one round (one heartbeat to each follower, however many reads). Stepping down
fails every round and every read asked (`fail`): the caller retries elsewhere.

This class holds only the bookkeeping; it is pure (no clock, no I/O) and driven by the tick
thread of `raft_patches.RepairingSyncObj` (ReadIndex), which owns every field but `_asked`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field

#: Called once per read: (the read index, "") when the read may be served now, (None, why) if not.
ReadCallback = Callable[[int | None, str], None]

NOT_LEADER = "this node is not the leader"
STEPPED_DOWN = "this node stopped leading before it could confirm its leadership"


@dataclass(slots=True)
class ReadRound:
    """Reads that share one confirmation: its number, its read index, who waits on it."""
    seq: int
    index: int
    waiting: list[ReadCallback]
    confirmed: bool = False


@dataclass(slots=True)
class ReadStats:
    """What the metrics and tests read: rounds started, confirmed, reads served and refused."""
    rounds: int = 0
    confirmed: int = 0
    served: int = 0
    refused: int = 0


@dataclass(slots=True)
class ReadIndex:
    """The reads a leader owes, by round (module doc)."""
    seq: int = 0                        # the newest round's number: sent with every AppendEntries
    stats: ReadStats = field(default_factory=ReadStats)
    _asked: collections.deque[ReadCallback] = field(default_factory=collections.deque)
    _rounds: list[ReadRound] = field(default_factory=list)
    _acked: dict[Hashable, int] = field(default_factory=dict)   # follower -> newest number echoed

    def ask(self, callback: ReadCallback) -> None:
        """Any thread: a read arrived (deque.append is atomic; only the tick thread drains)."""
        self._asked.append(callback)

    def asked(self) -> bool:
        return bool(self._asked)

    def unconfirmed(self) -> bool:
        """A round still waits for its majority (heartbeats must ask: no quiet heartbeats then)."""
        return any(not r.confirmed for r in self._rounds)

    def awaits(self, follower: Hashable) -> bool:
        """Does an unconfirmed round still need this follower's echo?"""
        return self.unconfirmed() and self._acked.get(follower, 0) < self.seq

    def start(self, commit_index: int) -> ReadRound | None:
        """Tick thread, leading with a commit of this term: every read asked so far joins one
        new round at `commit_index`. The caller then sends the heartbeats (None: nothing asked)."""
        waiting: list[ReadCallback] = []
        while self._asked:
            waiting.append(self._asked.popleft())
        if not waiting:
            return None
        self.seq += 1
        new = ReadRound(self.seq, commit_index, waiting)
        self._rounds.append(new)
        self.stats.rounds += 1
        return new

    def ack(self, follower: Hashable, seq: int) -> None:
        """A follower echoed `seq` (the newest number it had been sent)."""
        if seq > self._acked.get(follower, 0):
            self._acked[follower] = seq

    def confirm(self, followers: Collection[Hashable]) -> None:
        """Confirm every round a majority of the voters (`followers` and this node) echoed."""
        majority = (len(followers) + 1) // 2 + 1
        for r in self._rounds:
            if r.confirmed:
                continue
            echoed = sum(1 for f in followers if self._acked.get(f, 0) >= r.seq)
            if echoed + 1 < majority:
                return              # later rounds have larger numbers: not echoed either
            r.confirmed = True
            self.stats.confirmed += 1

    def serve(self, applied: int) -> None:
        """Answer every confirmed round whose read index this node has applied."""
        ready = [r for r in self._rounds if r.confirmed and r.index <= applied]
        if not ready:
            return
        self._rounds = [r for r in self._rounds if not (r.confirmed and r.index <= applied)]
        for r in ready:
            self.stats.served += len(r.waiting)
            for callback in r.waiting:
                callback(r.index, "")

    def fail(self, why: str) -> None:
        """Refuse every read asked and every round not yet confirmed (this node stopped leading,
        or never led). A confirmed round stays: it proved a point after its reads arrived, and
        is served once applied (applying goes on as a follower)."""
        refused: list[ReadCallback] = []
        while self._asked:
            refused.append(self._asked.popleft())
        for r in self._rounds:
            if not r.confirmed:
                refused.extend(r.waiting)
        self._rounds = [r for r in self._rounds if r.confirmed]
        self.stats.refused += len(refused)
        for callback in refused:
            callback(None, why)
