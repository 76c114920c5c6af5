"""Pre-vote: who may start an election.

- Pre-vote (Raft thesis §9.6). A node whose election timer runs out first asks its peers whether
  they would vote for it in the next term, without raising its own; a peer says yes only if it has
  not heard from a leader for an election timeout and the candidate's log is up to date. So a
  healed node, or one whose tick stalled, no longer deposes a healthy leader by raising the term. A
  round is void once a leader is heard (late grants answer a question asked before), and a node
  back from a stall of its own tick refuses for a minimum election timeout: it was not listening,
  so the silence it measured says nothing about the leader (followers that apply the same batch on
  a starved machine stall together, and granted each other elections).

Every node of a cluster must run it: pre-vote is a message kind a stock node ignores.
"""

from __future__ import annotations

import math
from typing import Any

from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.tick_timing import TickTiming

PRE_VOTE, PRE_VOTE_RESPONSE = "schedd_pre_vote", "schedd_pre_vote_response"


class PreVoteBallot:
    """This node's current pre-vote round: its number, the term it asks for, who granted it,
    and whether it was won (and its election not started yet)."""

    __slots__ = ("round", "term", "grants", "won")

    def __init__(self) -> None:
        self.round = 0
        self.term = 0
        self.grants: set[Any] = set()
        self.won = False

    def open(self, term: int) -> None:
        """A new round asking for `term`; answers to earlier rounds no longer count."""
        self.round += 1
        self.term = term
        self.grants = set()
        self.won = False

    def void(self) -> None:
        """A leader was heard: the round under way counts no more grants, and a win not yet
        acted on is dropped."""
        self.won = False
        self.round += 1
        self.grants = set()

    def take_win(self, term: int) -> bool:
        """True once after a round for `term` was won: the election it allows goes ahead."""
        if self.won and self.term == term:
            self.won = False
            return True
        return False

    def count(self, node: Any, voters: int) -> bool:
        """`node` granted this round; True when that grant wins it (with our own vote, a
        majority of `voters`)."""
        self.grants.add(node)
        if len(self.grants) + 1 > voters / 2 and not self.won:
            self.won = True
            return True
        return False


class PreVote(TickTiming):
    """Pre-vote rounds, asked and answered. Owns `_prevote` (the ballot) and `_leader_contact`
    (when a leader was last heard: a peer grants only after an election timeout without one;
    stale reads read it too). Reads `_listening_since` (stall detection): a node refuses
    while it has not been listening for a minimum election timeout."""

    def _init_pre_vote(self) -> None:
        self._leader_contact = -math.inf              # monotonic time a leader was last heard
        self._prevote = PreVoteBallot()

    def _heard_from_leader(self) -> None:
        """A live leader: a pre-vote round under way is void (its late grants must not start an
        election: they answer a question asked before the leader was heard)."""
        self._leader_contact = self._now()
        self._prevote.void()

    def _maybe_pre_vote(self) -> None:
        """Runs before stock's election check: an expired timer starts a pre-vote round and is
        pushed back; only a won round lets stock's election (term + 1) go ahead."""
        if not self._SyncObj__transport.ready or self._SyncObj__selfNode is None or self.halted:
            return
        if self._SyncObj__raftState == _RAFT_STATE.LEADER or not self._SyncObj__otherNodes:
            return
        if self._SyncObj__raftElectionDeadline >= self._now():
            return
        if self._SyncObj__transferInProgress or not self._SyncObj__connectedToAnyone():
            return          # TimeoutNow: the leader asked for this election
        if self._prevote.take_win(self._SyncObj__raftCurrentTerm + 1):
            return
        self._start_pre_vote()

    def _start_pre_vote(self) -> None:
        ballot = self._prevote
        ballot.open(self._SyncObj__raftCurrentTerm + 1)
        self.repair_stats.pre_votes += 1
        self._restart_election_timer()
        request = {"type": PRE_VOTE, "term": ballot.term, "round": ballot.round,
                   "last_log_index": self._log_last(),
                   "last_log_term": self._SyncObj__getCurrentLogTerm()}
        for node in self._SyncObj__otherNodes:
            self._send(node, request)

    def _on_pre_vote(self, node: Any, message: dict[str, Any]) -> None:
        self._send(node, {"type": PRE_VOTE_RESPONSE, "term": message.get("term"),
                          "round": message.get("round"), "granted": self._grants_pre_vote(message)})

    def _grants_pre_vote(self, message: dict[str, Any]) -> bool:
        """Would we vote for it in its next term? Not while a leader is alive for us (we are it,
        or heard it within the minimum election timeout), and only for an up-to-date log (§5.4.1)."""
        if self._SyncObj__selfNode is None or self._SyncObj__raftState == _RAFT_STATE.LEADER or self.halted:
            return False
        if message.get("term", 0) <= self._SyncObj__raftCurrentTerm:
            return False
        if self._now() - max(self._leader_contact, self._listening_since) < self._SyncObj__conf.raftMinTimeout:
            return False    # a leader heard, or we were not listening (stalled) for that long
        my_term = self._SyncObj__getCurrentLogTerm()
        their_term, their_idx = message.get("last_log_term", -1), message.get("last_log_index", -1)
        return bool(their_term > my_term or (their_term == my_term and their_idx >= self._log_last()))

    def _on_pre_vote_response(self, node: Any, message: dict[str, Any]) -> None:
        ballot = self._prevote
        if (not message.get("granted") or message.get("round") != ballot.round
                or ballot.term != self._SyncObj__raftCurrentTerm + 1
                or self._SyncObj__raftState == _RAFT_STATE.LEADER):
            return
        if ballot.count(node, len(self._SyncObj__otherNodes) + 1):
            self._SyncObj__raftElectionDeadline = 0     # stock elects on the next tick
