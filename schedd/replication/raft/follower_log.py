"""A follower's side of AppendEntries: which entries it keeps, what it answers.

- Conflict-only truncation (Raft §5.3 receiver rule 3: "if an existing entry conflicts with a new
  one (same index, different term), delete the existing entry and all that follow it"). Stock
  followers drop everything after prevLogIdx, so a delayed or repeated AppendEntries removes
  entries already acknowledged, even applied ones. Here an entry is dropped only from the first
  index whose term differs, and a success acknowledges only prevLogIdx + len(entries): the entries
  the leader vouched for (receiver rule 5: commitIndex = min(leaderCommit, index of the last new
  entry), not of the log's last entry).
- The post-install deadline: no election straight after a snapshot install: installing blocks the
  tick thread (about 0.6 s per 100k jobs), after which the election deadline has already passed
  though the leader was just heard; the deadline is restarted when the install ends.

The follower's half of log repair (its answer names the prevLogIdx it answers and, on a
conflict, the first index of the conflicting term) is explained in log_repair; its half of quiet
heartbeats (no answer the leader holds already) there too; ReadIndex's echo in reads.
"""

from __future__ import annotations

import logging
from typing import Any

import pysyncobj.pickle as raft_pickle
from pysyncobj.syncobj import _RAFT_STATE

from schedd.replication.raft.pre_vote import PreVote

log = logging.getLogger("schedd.raft")


class FollowerLog(PreVote):
    """Raft §5.3's receiver rules on this node's log. Owns no state beyond pysyncobj's log,
    commit index and chunked-entry buffer; a leader heard voids pre-vote's round."""

    def _on_append_entries(self, node: Any, message: dict[str, Any]) -> None:
        """Raft §5.3 receiver rules 1-5 (log repair and conflict-only truncation)."""
        term = message["term"]      # never below ours (rule 1: answered in the dispatch)
        self._accept_leader(node, term)
        echo = message.get("read_seq")      # ReadIndex: every answer of this term echoes it
        self._SyncObj__leaderCommitIndex = leader_commit = message["commit_index"]
        entries = self._assemble_entries(node, message)
        if entries is None:
            return          # a chunk of a large entry, acknowledged; the rest follows
        prev_idx, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        if prev_idx is None:
            self._reply(node, prev_idx=prev_idx, success=False, next_idx=self._log_last() + 1, echo=echo)
            return
        first = self._log_first()
        if prev_idx < first:
            # prevLogIdx lies inside our snapshot: everything up to `first` is committed here,
            # hence identical on the leader (Log Matching); drop what we already hold.
            entries = [e for e in entries if e[1] > first]
            prev_idx, prev_term = first, self._term_at(first)
        elif prev_idx > self._log_last():
            self._reply(node, prev_idx=message["prevLogIdx"], success=False,
                        next_idx=self._log_last() + 1, echo=echo)
            return
        elif self._term_at(prev_idx) != prev_term:
            self._reply(node, prev_idx=prev_idx, success=False, next_idx=self._conflict_hint(prev_idx),
                        echo=echo)
            return
        self._append_new(entries)
        match = entries[-1][1] if entries else prev_idx
        self._advance_commit(leader_commit, match)
        if message.get("quiet") and not entries and match == message["prevLogIdx"]:
            return          # quiet heartbeats: the leader already holds this answer, and asked for none
        self._reply(node, prev_idx=message["prevLogIdx"], success=True, next_idx=match + 1, echo=echo)

    def _after_stock_message(self, kind: Any, message: Any) -> None:
        """After stock handled a message: an AppendEntries of our term (a snapshot chunk, or its
        install) restarts the election timer (the post-install deadline) and is leader contact
        (pre-vote)."""
        if kind == "append_entries" and message.get("term", -1) >= self._SyncObj__raftCurrentTerm:
            self._heard_from_leader()
            self._restart_election_timer()

    def _accept_leader(self, node: Any, term: int) -> None:
        """What stock does for any AppendEntries of the current term (leader, term, timer)."""
        if term > self._SyncObj__raftCurrentTerm:
            self._SyncObj__transferInProgress = False
        if not self._SyncObj__transferInProgress:
            self._restart_election_timer()
        if self._SyncObj__raftLeader != node:
            self._SyncObj__onLeaderChanged()
        self._SyncObj__raftLeader = node
        if term > self._SyncObj__raftCurrentTerm:
            self._SyncObj__setCurrentTerm(term, None)
        self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
        self._heard_from_leader()

    def _assemble_entries(self, node: Any, message: dict[str, Any]) -> list[Any] | None:
        """Entries of the message, or None while a chunked single entry is still arriving."""
        transmission = message.get("transmission")
        if transmission is None:
            return list(message.get("entries", []))
        if transmission == "start":
            self._SyncObj__recvTransmission = message["data"]
        elif transmission in ("process", "finish"):
            self._SyncObj__recvTransmission += message["data"]
        else:
            raise ValueError(f"wrong transmission type {transmission!r}")
        if transmission != "finish":
            self._send(node, {"type": "next_node_idx", "next_node_idx": self._log_last() + 1,
                              "reset": False, "success": False})
            return None
        data, self._SyncObj__recvTransmission = self._SyncObj__recvTransmission, ""
        return [raft_pickle.loads(data)]

    def _conflict_hint(self, prev_idx: int) -> int:
        """First index of the term found at prev_idx (no entry of that term can match the
        leader's), never at or below our commit index (committed entries match)."""
        floor = max(self._SyncObj__raftCommitIndex + 1, self._log_first() + 1)
        conflict_term = self._term_at(prev_idx)
        idx = prev_idx
        while idx - 1 >= floor and self._term_at(idx - 1) == conflict_term:
            idx -= 1
        return idx

    def _append_new(self, entries: list[Any]) -> None:
        """Receiver rules 3 and 4: skip entries we hold with the same term, truncate from the
        first conflict, append the rest."""
        last = self._log_last()
        for pos, entry in enumerate(entries):
            idx, term = entry[1], entry[2]
            if idx > last:
                self._add_entries(entries[pos:])
                return
            if self._term_at(idx) != term:
                self._truncate_from(idx)
                self._add_entries(entries[pos:])
                return

    def _add_entries(self, entries: list[Any]) -> None:
        for entry in entries:
            self._SyncObj__raftLog.add(*entry)
        if self._SyncObj__conf.dynamicMembershipChange:
            for entry in entries:
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change)

    def _truncate_from(self, idx: int) -> None:
        applied = self._SyncObj__raftLastApplied
        self.repair_stats.truncations += 1
        self.repair_stats.truncated_entries += self._log_last() - idx + 1
        if idx <= applied:
            # Cannot happen while the rules above hold (a committed entry never conflicts);
            # if it does, something below Raft (the disk) lost acknowledged data.
            log.critical("truncating already-applied log entries from index %d (last applied: "
                         "%d): this replica's state may have diverged", idx, applied)
        if self._SyncObj__conf.dynamicMembershipChange:
            first = self._log_first()
            for entry in reversed(list(self._SyncObj__raftLog[idx - first:])):
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change, reverse=True)
        self._SyncObj__deleteEntriesFrom(idx)
        if self._SyncObj__raftCommitIndex > self._log_last():
            self._SyncObj__raftCommitIndex = self._log_last()

    def _advance_commit(self, leader_commit: int, match: int) -> None:
        """Receiver rule 5: commitIndex = min(leaderCommit, index of last new entry)."""
        if leader_commit > self._SyncObj__raftCommitIndex:
            new_commit = min(leader_commit, match)
            if new_commit > self._SyncObj__raftCommitIndex:
                self._SyncObj__raftCommitIndex = new_commit
        self._SyncObj__raftLog.setRaftCommitIndex(self._SyncObj__raftCommitIndex)

    def _reply(self, node: Any, *, prev_idx: int | None, success: bool, next_idx: int,
               echo: int | None = None) -> None:
        """`next_node_idx` as stock leaders read it, plus the prevLogIdx it answers and the read
        round number the leader sent (ReadIndex; a stock leader ignores both)."""
        answer = {"type": "next_node_idx", "next_node_idx": next_idx, "reset": not success,
                  "success": success, "prev_idx": prev_idx}
        if echo is not None:
            answer["read_seq"] = echo
        self._send(node, answer)
