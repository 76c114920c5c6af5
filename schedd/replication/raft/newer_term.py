"""Newer term heard: a stale leader learns it is one.

- Newer term heard (Raft §5.1: "if a server receives a request with a stale term number, it
  rejects the request", and the reply carries its currentTerm, from which a stale leader learns it
  is one). Stock drops a lower-term AppendEntries without a word and its answers carry no term, so
  a node whose term ran ahead of the leader's never came back: it won a pre-vote while the leader
  was briefly unheard, its request_vote messages were lost (the partition moved), and from then on
  it ignored the leader's term, while pre-vote kept it from raising the term again (a 2-hour soak's
  replica stood still at one index while the cluster went on for minutes). Here it answers
  `schedd_newer_term` with its term, and a leader that reads one steps down to a follower of
  that term, so the next election (any node's, after its timeout) is of a term that includes it.
  Pre-vote makes such terms rare: a node raises its term only when a majority said it would vote.
"""

from __future__ import annotations

import logging
from typing import Any

from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.base import RaftBase

log = logging.getLogger("schedd.raft")

NEWER_TERM = "schedd_newer_term"    # the answer to a stale leader (newer term heard)


class NewerTermHeard(RaftBase):
    """Both ends of the stale-term answer: refusing an AppendEntries of an older term with our
    term, and stepping down on such an answer. Owns no state beyond Raft's own term."""

    def _refuse_stale_leader(self, node: Any) -> None:
        """Rule 1 (an AppendEntries of a term below ours), with the reply Raft sends and stock
        does not: our term."""
        self._send(node, {"type": NEWER_TERM, "term": self._SyncObj__raftCurrentTerm})

    def _on_newer_term(self, node: Any, message: dict[str, Any]) -> None:
        """A node of a newer term refused our AppendEntries (newer term heard): whatever we were,
        we are a follower of that term now, with no leader known (Raft §5.1)."""
        term = message.get("term")
        if not isinstance(term, int) or term <= self._SyncObj__raftCurrentTerm:
            return
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            log.warning("raft: %s is at term %d, above this leader's %d: stepping down so that "
                        "an election of a newer term can include it", node, term,
                        self._SyncObj__raftCurrentTerm)
            self.repair_stats.newer_term_step_downs += 1
        self._SyncObj__setCurrentTerm(term, None)
        self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
        if self._SyncObj__raftLeader is not None:
            self._SyncObj__onLeaderChanged()
        self._SyncObj__raftLeader = None
        self._restart_election_timer()
