"""The leader's side of replication: what it sends each follower, and what it makes of the answers.

- Log repair (Raft §5.3, "the leader decrements nextIndex and retries until the logs match"). Stock
  followers answer a rejected AppendEntries with `next_node_idx` and no hint of which request they
  answer; the leader keeps whatever arrived last. With a pipelined burst (the leader sends every
  batch from nextIndex to its last entry in one round), the batch whose prevLogIdx carries the
  wrong term is answered "go back to prevLogIdx" and every later batch "go to my last index + 1"
  (its prevLogIdx lies past the follower's log), so nextIndex never walks back past a divergent
  suffix longer than one batch: the replica never converges, restarts included (a leader cut off
  under write load stayed stuck after the heal). Here a follower's answer names the prevLogIdx it
  answers and, on a conflict, the first index of the conflicting term (the thesis' fast backup,
  §5.3 end); the leader ignores answers to requests it no longer has outstanding and, after a
  rejection, probes one request at a time until a success puts it back to pipelining (etcd raft's
  probe/replicate states). A follower whose answer shows it lacks an entry it had acknowledged (a
  disk that lost it, or a node wiped and started again under its name) has its matchIndex reset and
  is repaired from its log's end: the floor at matchIndex + 1 kept probing there forever (the full
  fault profile's S12: a rebuilt follower never caught up, and with a second follower behind, the
  cluster stopped committing).
- Quiet heartbeats. Stock followers answer every heartbeat, and the leader's tick wakes for each
  answer: in an idle cluster two thirds of the leader's wakeups, and each answer cost a follower a
  pickle, a compression, an encryption and a send. Raft needs none of these answers while the
  follower is caught up: its answer repeats an index the leader holds already. Here the leader
  marks a heartbeat `quiet` when the follower in REPLICATE has acknowledged the leader's last entry
  and answered within the quiet window (a fifth of the leader fallback timeout); a patched follower
  then applies it (leader contact, election timer, commit index) without answering, unless its
  answer would differ (a rejection, or any other index). Past the window the heartbeat asks again,
  so the leader fallback still sees every live follower several times per timeout. A stock follower
  ignores the flag and answers, and a stock leader never sets it: mixed versions behave as before.

The follower's half of both is in follower_log; a follower with nothing unanswered is sent new
entries at once by prompt_sends.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pysyncobj.pickle as raft_pickle
from pysyncobj import SyncObj

from schedd.replication.raft.parallel_write import ParallelDiskWrite
from schedd.replication.raft.reads import LinearizableReads
from schedd.replication.raft.tick_timing import TickTiming

log = logging.getLogger("schedd.raft")

PROBE, REPLICATE = "probe", "replicate"
# Quiet heartbeats: a caught-up follower answers a heartbeat at least once per this fraction of the
# leader fallback timeout (2.5 s: every 0.5 s), so a leader that lost its quorum still steps
# down on time.
QUIET_WINDOW_PARTS = 5


class LogRepair(ParallelDiskWrite, LinearizableReads, TickTiming):
    """AppendEntries out, their answers in (log repair, quiet heartbeats). Owns `_repl_mode`:
    per follower, PROBE (one request at a time, nextIndex moves only on answers) or REPLICATE
    (pipelined); a follower not in it is probed."""

    def _init_log_repair(self) -> None:
        self._repl_mode: dict[Any, str] = {}          # leader: per follower, PROBE or REPLICATE

    def _on_append_response(self, node: Any, message: dict[str, Any]) -> None:
        """Log repair, leader side: act only on answers to the request outstanding."""
        self._SyncObj__lastResponseTime[node] = self._now()
        echo = message.get("read_seq")
        if isinstance(echo, int) and echo > 0:
            self.reads.ack(node, echo)      # ReadIndex: it accepts us as this term's leader
            self._confirm_reads()
        if message["success"]:
            self._on_acknowledged(node, message["next_node_idx"] - 1)
        elif "prev_idx" not in message:
            if message.get("reset"):        # a stock follower (or a snapshot-path answer)
                self._SyncObj__raftNextIndex[node] = message["next_node_idx"]
        else:                               # (else: a chunk acknowledgement)
            self._on_rejected(node, message["prev_idx"], message["next_node_idx"])

    def _on_acknowledged(self, node: Any, acked: int) -> None:
        """A success: matchIndex and nextIndex move up to what it holds, and it is REPLICATE."""
        nxt, match = self._SyncObj__raftNextIndex, self._SyncObj__raftMatchIndex
        if acked > match.get(node, 0):
            match[node] = acked
        if nxt.get(node, 0) < acked + 1:
            nxt[node] = acked + 1
        self._repl_mode[node] = REPLICATE

    def _on_rejected(self, node: Any, answered: int | None, hint: int) -> None:
        """A rejection of the request whose prevLogIdx was `answered` (None: it had none), with
        the follower's hint: unless stale, nextIndex goes back and the follower is probed."""
        nxt, match = self._SyncObj__raftNextIndex, self._SyncObj__raftMatchIndex
        if self._is_stale_rejection(node, answered):
            self.repair_stats.stale_rejections += 1
            return
        bound = answered if answered is not None else hint
        if answered is not None and answered <= match.get(node, 0):
            # It lacks an entry it acknowledged: its disk lost it, or it was wiped and started
            # again under its name. Raft assumes neither; stock (and the floor below) then
            # probed at matchIndex + 1 forever. Repair it from what it holds (commit never
            # moves back; what it lost counts for no commit from now on).
            log.warning("raft: %s no longer holds entry %d it acknowledged (a lost disk, or "
                        "wiped and restarted): repairing it from its log's end (%d)",
                        node, answered, hint - 1)
            match[node] = 0
            self.repair_stats.acked_lost += 1
        nxt[node] = max(match.get(node, 0) + 1, min(hint, bound))
        self._repl_mode[node] = PROBE
        self.repair_stats.rejections += 1

    def _is_stale_rejection(self, node: Any, answered: int | None) -> bool:
        """Does this rejection answer a request no longer outstanding?"""
        if answered is None:
            return False
        if self._repl_mode.get(node, PROBE) == REPLICATE:
            # Below what it acknowledged: an answer to a request older than that success. At
            # it (answers arrive in order): it no longer holds what it acknowledged (above).
            return answered < self._SyncObj__raftMatchIndex.get(node, 0)
        return bool(answered != self._SyncObj__raftNextIndex.get(node, 0) - 1)

    def _SyncObj__onBecomeLeader(self) -> None:
        self._repl_mode.clear()             # probe every follower until it answers success
        SyncObj._SyncObj__onBecomeLeader(self)

    def _SyncObj__onNodeDisconnected(self, node: Any) -> None:
        self._repl_mode[node] = PROBE       # what was in flight to it is lost
        SyncObj._SyncObj__onNodeDisconnected(self, node)

    def _SyncObj__sendAppendEntries(self) -> None:
        """Stock's sending loop, except that a follower in PROBE gets one request per round and
        its nextIndex moves only on its answers (log repair)."""
        now = self._now()
        self._SyncObj__newAppendEntriesTime = now + self._SyncObj__conf.appendEntriesPeriod
        for node in self._SyncObj__otherNodes | self._SyncObj__readonlyNodes:
            if node not in self._SyncObj__connectedNodes:
                self._SyncObj__serializer.cancelTransmisstion(node)
                continue
            self._timed("sending", self._send_to)(node, now)

    def _send_to(self, node: Any, started: float) -> None:
        probing = self._repl_mode.get(node, PROBE) != REPLICATE
        first_round = True
        sending_snapshot: bool | None = False
        nxt = self._SyncObj__raftNextIndex
        while nxt[node] <= self._log_last() or first_round or sending_snapshot:
            if nxt[node] > self._log_first():
                if not self._send_entries(node, probing):
                    return
            else:
                sending_snapshot = self._send_snapshot_chunk(node)
                if sending_snapshot is None:
                    return
            first_round = False
            if probing and not sending_snapshot:
                return
            if self._now() - started > self._tick_slice():
                return

    def _base_message(self) -> dict[str, Any]:
        message = {"type": "append_entries", "term": self._SyncObj__raftCurrentTerm,
                   "commit_index": self._SyncObj__raftCommitIndex}
        if self.reads.seq:
            message["read_seq"] = self.reads.seq    # ReadIndex: the newest read round's number
        return message

    def _send_entries(self, node: Any, probing: bool) -> bool:
        """One AppendEntries from nextIndex (or a chunked single large entry); False once the
        node dropped its connection."""
        batch = self._SyncObj__conf.appendEntriesBatchSizeBytes
        nxt = self._SyncObj__raftNextIndex
        prev_idx, prev_term = self._SyncObj__getPrevLogIndexTerm(nxt[node])
        entries: list[Any] = []
        if nxt[node] <= self._log_last():
            entries = self._SyncObj__getEntries(nxt[node], None, batch)
            if not probing:
                nxt[node] = entries[-1][1] + 1
        base = {**self._base_message(), "prevLogIdx": prev_idx, "prevLogTerm": prev_term}
        if not entries and not probing and self._answer_known(node, prev_idx) \
                and not self.reads.awaits(node):    # ReadIndex: a read round asks
            base["quiet"] = True
        if len(entries) == 1 and len(entries[0][0]) >= batch:
            return self._send_chunked(node, base, entries[0], batch)
        self._send(node, {**base, "entries": entries})
        return node in self._SyncObj__connectedNodes

    def _send_chunked(self, node: Any, base: dict[str, Any], entry: Any, batch: int) -> bool:
        """One entry larger than a batch, pickled and sent in batch-sized chunks (stock's
        transmission); False once the node dropped its connection."""
        data = raft_pickle.dumps(entry)
        for pos in range(0, len(data), batch):
            kind = "start" if pos == 0 else ("finish" if pos + batch >= len(data) else "process")
            self._send(node, {**base, "transmission": kind, "data": data[pos:pos + batch]})
            if node not in self._SyncObj__connectedNodes:
                return False
        return True

    def _answer_known(self, node: Any, prev_idx: int) -> bool:
        """Quiet heartbeats: may this heartbeat go unanswered? The follower acknowledged prev_idx (the
        leader's last entry) already and answered within the quiet window, so its answer would
        say only that it is alive, which its last answer still says to the leader fallback (a
        window is a fifth of its timeout); past the window, the heartbeat asks again."""
        if self._real_match().get(node) != prev_idx:
            return False
        answered = float(self._SyncObj__lastResponseTime.get(node, -math.inf))
        return self._now() - answered < self._quiet_window()

    def _quiet_window(self) -> float:
        return float(self._SyncObj__conf.leaderFallbackTimeout) / QUIET_WINDOW_PARTS

    def _send_snapshot_chunk(self, node: Any) -> bool | None:
        """Stock's snapshot streaming: True while more chunks follow, False after the last, None
        to stop this round (disconnected, or the snapshot is still being written)."""
        data = self._SyncObj__serializer.getTransmissionData(node)
        self._send(node, {**self._base_message(), "serialized": data})
        if node not in self._SyncObj__connectedNodes or data is None:
            return None                     # disconnected, or no snapshot ready yet
        if data[2]:                         # last chunk
            self._SyncObj__raftNextIndex[node] = self._SyncObj__raftLog[1][1] + 1
            return False
        return True
