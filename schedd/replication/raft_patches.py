"""What pysyncobj 0.3.17's Raft core gets wrong, restored in one place: `RepairingSyncObj`.

Each repair below has a name, which the code uses where it refers to one, and each override cites
the rule it restores. They replace name-mangled private methods of `pysyncobj.SyncObj`
(`_SyncObj__onMessageReceived`, `_SyncObj__sendAppendEntries`, ...), so this module is tied to one
pysyncobj release: `PYSYNCOBJ_VERSION` is checked at import and pinned in pyproject.toml. Every
node of a cluster must run it (pre-vote is a new message kind a stock node ignores).

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
- Conflict-only truncation (Raft §5.3 receiver rule 3: "if an existing entry conflicts with a new
  one (same index, different term), delete the existing entry and all that follow it"). Stock
  followers drop everything after prevLogIdx, so a delayed or repeated AppendEntries removes
  entries already acknowledged, even applied ones. Here an entry is dropped only from the first
  index whose term differs, and a success acknowledges only prevLogIdx + len(entries): the entries
  the leader vouched for (receiver rule 5: commitIndex = min(leaderCommit, index of the last new
  entry), not of the log's last entry).
- Pre-vote (Raft thesis §9.6). A node whose election timer runs out first asks its peers whether
  they would vote for it in the next term, without raising its own; a peer says yes only if it has
  not heard from a leader for an election timeout and the candidate's log is up to date. So a
  healed node, or one whose tick stalled, no longer deposes a healthy leader by raising the term. A
  round is void once a leader is heard (late grants answer a question asked before), and a node
  back from a stall of its own tick refuses for a minimum election timeout: it was not listening,
  so the silence it measured says nothing about the leader (followers that apply the same batch on
  a starved machine stall together, and granted each other elections).
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
- The post-install deadline: no election straight after a snapshot install: installing blocks the
  tick thread (about 0.6 s per 100k jobs), after which the election deadline has already passed
  though the leader was just heard; the deadline is restarted when the install ends.
- Inbox first: after a stall, the inbox before the timers. Stock's tick judges the election
  deadline (follower) and the leader fallback before it polls its sockets, so after a stall of the
  tick thread (CPU starvation, the GIL, a long apply) the heartbeats and answers that arrived
  meanwhile count as silence. A tick that begins over half the minimum election timeout after the
  previous one (logged, counted in `RepairStats.long_tick_gaps`) reads its sockets first.
- Bounded apply, per tick: stock applies every committed entry in the tick that learns of them;
  here a tick stops applying after an eighth of the minimum election timeout and the next tick goes
  on at once, so a backlog no longer holds heartbeats (sent after apply) or their reading.
- The parallel disk write: the leader writes to its disk in parallel with replication (Raft thesis
  §10.2.1: "the leader may write to its disk in parallel with replicating to the followers ... it
  counts itself in the majority only once its entries are durable"). On a durable journal
  (journal.DurableJournal, policy ``always``) the leader of a multi-node cluster no longer
  fdatasyncs in its tick (before sending, or before polling): the journal's background thread does,
  and the commit computation sees every follower's matchIndex capped at the leader's durable index,
  so an entry commits only once it is on the leader's disk and on a follower's (which still
  fdatasyncs before it acknowledges). Stricter than the thesis (which also lets two followers
  commit without the leader), never looser. Stock counts its own copy at once, whatever the disk;
  our journal used to sync it inline, up to 50 ms per tick under load. The background thread wakes
  the tick when the durable index moves (a commit may be waiting).
- The bounded lock wait: apply never waits long for the node lock. given `apply_lock` (the lock the
  shell's readers hold: RaftNode.lock), the tick takes it before each entry for at most a heartbeat
  period and, if the other thread still holds it, leaves the entry for the next tick and goes on to
  send and read. On a loaded leader the asyncio thread's passes held it 50-100 ms while a
  start_many or finish_many waited, and the heartbeats (sent after apply) with it.
- Prompt sends: proposals go out at once. In batch mode (appendEntriesUseBatch, one AppendEntries
  for many entries) stock leaves a proposal in its queue until the tick's poll times out (tick_ms)
  and then sends the new entry only with the next heartbeat (heartbeat_ms): a commit took 20-25 ms
  on an idle loopback cluster, and 64 PutJob calls in flight got 800 jobs/s. Here a follower with
  nothing unanswered gets what it lacks in the tick that appends it (a proposal wakes the tick
  thread when such a follower exists), and a follower's answer, which ticks, sends it what was
  appended meanwhile: one batch in flight per follower (sending on every proposal cost the loaded
  rows 15% more CPU), and no entry waits for a heartbeat. The shell also groups concurrent
  proposals (GroupCommit).
- The deadline sleep: the tick sleeps until its next deadline. Stock's tick thread polls with a
  fixed timeout (tick_ms), so an idle node ran its whole tick 20 times a second besides every
  message: about a third of an idle cluster's CPU, and a third of the CPU per fire at 100 fires/s.
  Here the poll waits until the next thing that has a time: a leader's next heartbeat, a follower's
  election deadline, the transport's keepalive, at most a quarter of the minimum election timeout
  (so inbox first never reads a sleep as a stall); a message, a proposal (prompt sends), a durable
  write (the parallel disk write), a queued tick job or destroy() wake it sooner; committed entries
  left unapplied (bounded apply and the bounded lock wait) end it at once. Whatever polls for
  progress rather than waiting for an event (binding, connecting, a handshake's deadline, unsynced
  writes, queued commands, a deadline already past) keeps the tick period, as stock; each such part
  says so through `add_tick_need`.
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
- ReadIndex: linearizable reads (Raft thesis §6.4; `read_index.py` holds the bookkeeping).
  pysyncobj has no read path: a leader cut off from its peers believes it leads until the leader
  fallback ends it, and served reads from its old state meanwhile. Here `request_read` asks the
  tick thread for a point at which a read is safe: a leader that has committed an entry of its
  current term (Raft §8) records its commit index, numbers the round and sends every follower a
  heartbeat carrying the number (`read_seq`, on every AppendEntries); a patched follower echoes the
  number it was sent in every answer (an AppendEntries of an older term it drops unanswered), and a
  heartbeat is never quiet (quiet heartbeats) while a round awaits that follower. Once echoes from
  followers that with the leader make a majority reach the round's number, and the leader has
  applied up to the recorded index, the read is served. Reads asked in one tick share one round.
  Stepping down refuses what is unconfirmed. A stock follower does not echo: a leader whose
  majority needs stock followers (a rolling upgrade's first steps) cannot confirm reads, and they
  are refused retryably until enough nodes run this build.
- Halting: a build that is behind stops applying. When the consumer's apply raises `BuildBehind`
  (the cluster's feature level is, or this entry raises it, above what this build supports;
  schedd.core.state.apply changed nothing), the node halts its state machine: that entry and every
  later one stay in the log, unapplied (an upgraded build applies them at its restart), and from
  then on it neither votes, grants a pre-vote, starts an election, answers TimeoutNow nor leads (a
  leader steps down). It still appends and acknowledges entries, like a disk. An older build
  applied such entries as INVALID, diverged, and once elected dispatched what it believed pending:
  18,481 (job, instant) pairs ran twice. `halted` says why ("" while not); `halt()` is also called
  by the shell when a restored snapshot is above this build.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pysyncobj.pickle as raft_pickle
from pysyncobj import SyncObj
from pysyncobj.config import FAIL_REASON
from pysyncobj.pipe_notifier import PipeNotifier
from pysyncobj.syncobj import _RAFT_STATE, SyncObjExceptionWrongVer
from pysyncobj.syncobj import monotonicTime as raft_clock
from pysyncobj.version import VERSION as _INSTALLED_VERSION

from schedd.replication.read_index import NOT_LEADER, STEPPED_DOWN, ReadCallback, ReadIndex

log = logging.getLogger("schedd.raft")

PYSYNCOBJ_VERSION = "0.3.17"
if _INSTALLED_VERSION != PYSYNCOBJ_VERSION:
    raise ImportError(f"schedd's Raft patches are written against pysyncobj {PYSYNCOBJ_VERSION}, "
                      f"found {_INSTALLED_VERSION}")

PROBE, REPLICATE = "probe", "replicate"
# The longest one part of a tick may hold it before the tick goes on (one round of sending,
# the bounded lock wait for the node lock). It was the heartbeat period, so a longer heartbeat (fewer
# idle ticks) made a loaded leader's ticks longer too; the default heartbeat is this long.
TICK_SLICE_S = 0.02
# Quiet heartbeats: a caught-up follower answers a heartbeat at least once per this fraction of the
# leader fallback timeout (2.5 s: every 0.5 s), so a leader that lost its quorum still steps
# down on time.
QUIET_WINDOW_PARTS = 5
# A tick that holds its thread this long (work, not the poll's wait) is logged with its parts.
LONG_HOLD_S = 0.1
# Parts timed inside other parts: fdatasync (in sending, a reply, a tick callback), the poll's
# wait (in poll+messages), gc (wherever the tick thread allocated).
NESTED = frozenset({"fdatasync", "wait", "gc"})
PRE_VOTE, PRE_VOTE_RESPONSE = "schedd_pre_vote", "schedd_pre_vote_response"
NEWER_TERM = "schedd_newer_term"    # the answer to a stale leader (newer term heard)
VOTING = frozenset({"request_vote", "timeout_now"})     # what a halted node ignores (halting)


class BuildBehind(Exception):
    """Raised by a consumer's apply for an entry this build must not apply (halting): the entry
    is left unapplied and the node halts."""


def _no_wake() -> None:
    pass


class RepairingSyncObj(SyncObj):
    """A SyncObj whose log repair, truncation and elections follow the Raft paper (module doc)."""

    def __init__(self, *args: Any, apply_lock: Any = None, **kwargs: Any) -> None:
        # Set before SyncObj.__init__: attributes that exist then are left out of snapshots, and
        # the tick thread it starts reads them.
        self._apply_lock = apply_lock                 # the bounded lock wait (None: apply takes no lock)
        self._repl_mode: dict[Any, str] = {}          # leader: per follower, PROBE or REPLICATE
        self._leader_contact = -math.inf              # monotonic time a leader was last heard
        self._prevote_round = 0
        self._prevote_term = 0
        self._prevote_grants: set[Any] = set()
        self._prevote_won = False
        self._tick_started = 0.0                      # when the last tick began (0: none yet)
        self._listening_since = -math.inf             # end of this node's last long stall
        self._tick_work = 0.0                         # seconds the last tick took (poll included)
        self._apply_work = 0.0                        # of which applying entries
        self._sections: dict[str, float] = {}         # of which: seconds per part (stall log)
        self._waited = 0.0                            # of which: blocked in the poll, waiting
        self._tick_ident = 0                          # the tick thread (its gc pauses: "gc")
        self._gc_started = 0.0
        self._weak_self = weakref.ref(self)           # the gc callback's way to this node
        self._match_real: dict[Any, int] | None = None    # the parallel disk write: matchIndex while capped
        self._match_capped: dict[Any, int] | None = None
        self._pipeline_idle = False                   # prompt sends: may a proposal wake the tick?
        self._tick_needs: list[Callable[[], float | None]] = []   # the deadline sleep (the transport's, the journal's)
        self.reads = ReadIndex()                      # ReadIndex: linearizable reads
        self.halted = ""                              # halting: why this node stopped applying
        # (role, term, leader id) as the tick thread left them at the end of its last tick: one
        # moment, for readers on other threads (`role_term_leader`)
        self._published: tuple[int, int, str] = (_RAFT_STATE.FOLLOWER, 0, "")
        self.on_halt: Callable[[str], None] = lambda why: None
        self.repair_stats = RepairStats()
        super().__init__(*args, **kwargs)
        self._publish()                                   # the term restored from the journal
        inner = getattr(self._poller, "_PollPoller__poll", None)
        if inner is not None:                             # the poll's wait, apart from its work
            self._poller._PollPoller__poll = _TimedWait(inner, self)
        timed_poll = self._timed("poll+messages", self._poller.poll)
        self._poller.poll = lambda timeout: timed_poll(self._poll_wait(timeout))   # the deadline sleep
        journal = self._SyncObj__raftLog
        if callable(getattr(journal, "sync", None)):      # DurableJournal: its fdatasync
            journal.sync = self._timed("fdatasync", journal.sync)
        # Ends the tick thread's poll (the parallel disk write and prompt sends); a driven node
        # (tests) has no thread.
        self._wake = PipeNotifier(self._poller).notify if self._SyncObj__conf.autoTick else _no_wake
        if hasattr(journal, "wake"):                      # the parallel disk write: its background thread
            journal.wake = self._wake

    def _timed(self, part: str, call: Any) -> Any:
        """`call`, its time added to this tick's `part` (the stall log's breakdown); only the
        tick thread calls these."""
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = self._now()
            try:
                return call(*args, **kwargs)
            finally:
                self._sections[part] = self._sections.get(part, 0.0) + self._now() - started
        return timed

    # ------------------------------------------------------------ small accessors

    def _now(self) -> float:
        """pysyncobj's own clock: its deadlines (heartbeats, elections) are compared with it,
        and it is not time.monotonic() (it differs by a constant offset)."""
        return float(raft_clock())

    def _log_first(self) -> int:
        return int(self._SyncObj__raftLog[0][1])

    def _log_last(self) -> int:
        return int(self._SyncObj__raftLog[-1][1])

    def _term_at(self, idx: int) -> int:
        return int(self._SyncObj__raftLog[idx - self._log_first()][2])

    def _send(self, node: Any, message: dict[str, Any]) -> None:
        self._SyncObj__transport.send(node, message)

    def _restart_election_timer(self) -> None:
        self._SyncObj__raftElectionDeadline = self._now() + self._SyncObj__generateRaftTimeout()

    # ------------------------------------------------------------ message dispatch

    def _SyncObj__onMessageReceived(self, node: Any, message: dict[str, Any]) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        if self.halted and kind in VOTING:
            return          # halting: a halted node takes no part in elections
        if kind == "append_entries" and message.get("term", -1) < self._SyncObj__raftCurrentTerm:
            # rule 1, with the reply Raft sends and stock does not (newer term heard)
            self._send(node, {"type": NEWER_TERM, "term": self._SyncObj__raftCurrentTerm})
            return
        if kind == NEWER_TERM:
            self._on_newer_term(node, message)
            return
        if kind == "append_entries" and "prevLogIdx" in message:
            self._on_append_entries(node, message)
            return
        if kind == "next_node_idx" and self._SyncObj__raftState == _RAFT_STATE.LEADER:
            self._on_append_response(node, message)
            return
        if kind == PRE_VOTE:
            self._on_pre_vote(node, message)
            return
        if kind == PRE_VOTE_RESPONSE:
            self._on_pre_vote_response(node, message)
            return
        SyncObj._SyncObj__onMessageReceived(self, node, message)
        if kind == "append_entries" and message.get("term", -1) >= self._SyncObj__raftCurrentTerm:
            # A snapshot chunk (or install) from the current leader: the post-install deadline, and pre-vote's
            # record of leader contact.
            self._heard_from_leader()
            self._restart_election_timer()

    def _heard_from_leader(self) -> None:
        """A live leader: a pre-vote round under way is void (its late grants must not start an
        election: they answer a question asked before the leader was heard)."""
        self._leader_contact = self._now()
        self._prevote_won = False
        self._prevote_round += 1
        self._prevote_grants = set()

    # ------------------------------------------------------------ follower: AppendEntries

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

    # ------------------------------------------------------------ leader: responses and sending

    def _on_append_response(self, node: Any, message: dict[str, Any]) -> None:
        """Log repair, leader side: act only on answers to the request outstanding."""
        self._SyncObj__lastResponseTime[node] = self._now()
        echo = message.get("read_seq")
        if isinstance(echo, int) and echo > 0:
            self.reads.ack(node, echo)      # ReadIndex: it accepts us as this term's leader
            self._confirm_reads()
        nxt, match = self._SyncObj__raftNextIndex, self._SyncObj__raftMatchIndex
        if message["success"]:
            acked = message["next_node_idx"] - 1
            if acked > match.get(node, 0):
                match[node] = acked
            if nxt.get(node, 0) < acked + 1:
                nxt[node] = acked + 1
            self._repl_mode[node] = REPLICATE
            return
        if "prev_idx" not in message:
            if message.get("reset"):        # a stock follower (or a snapshot-path answer)
                nxt[node] = message["next_node_idx"]
            return                          # a chunk acknowledgement
        answered = message["prev_idx"]      # None: the request had no prevLogIdx
        mode = self._repl_mode.get(node, PROBE)
        if answered is None:
            stale = False
        elif mode == REPLICATE:
            # Below what it acknowledged: an answer to a request older than that success. At
            # it (answers arrive in order): it no longer holds what it acknowledged (below).
            stale = answered < match.get(node, 0)
        else:
            stale = answered != nxt.get(node, 0) - 1
        if stale:
            self.repair_stats.stale_rejections += 1
            return
        hint = message["next_node_idx"]
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

    def _tick_slice(self) -> float:
        """The longest one part of a tick (a sending round, a node-lock wait) may take."""
        return min(float(self._SyncObj__conf.appendEntriesPeriod), TICK_SLICE_S)

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
            data = raft_pickle.dumps(entries[0])
            for pos in range(0, len(data), batch):
                kind = "start" if pos == 0 else ("finish" if pos + batch >= len(data) else "process")
                self._send(node, {**base, "transmission": kind, "data": data[pos:pos + batch]})
                if node not in self._SyncObj__connectedNodes:
                    return False
            return True
        self._send(node, {**base, "entries": entries})
        return node in self._SyncObj__connectedNodes

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

    # ------------------------------------------------------------ the deadline sleep

    def add_tick_need(self, need: Callable[[], float | None]) -> None:
        """Deadline sleep: `need()` (called on the tick thread before each poll) says when its owner
        needs the next tick: None (not for itself), 0 (at the tick period: it polls for
        progress), or in that many seconds."""
        self._tick_needs.append(need)

    def wake(self) -> None:
        """End the tick thread's poll now (another thread queued work for it)."""
        self._wake()

    def destroy(self) -> None:
        SyncObj.destroy(self)
        self.reads.fail("this node is shutting down")
        self._wake()                    # the tick thread notices at its next tick, not a sleep later

    def _poll_wait(self, period: float) -> float:
        """Deadline sleep: how long the tick's poll may wait for a message: until the next deadline,
        at most a quarter of the minimum election timeout; `period` (tick_ms, the caller's
        timeout) when something polls for progress. A zero timeout (a driven tick, the read after a
        stall of inbox first, a backlog) stays zero."""
        if period <= 0:
            return period
        if self._backlog():
            return 0.0                  # entries left to apply (bounded apply, the bounded lock wait): go on
        soon = float(self._SyncObj__conf.raftMinTimeout) / 4
        for need in self._tick_needs:
            left = need()
            if left is not None:
                soon = min(soon, left if left > 0 else period)
        if self._SyncObj__commandsQueue._FastQueue__queue or self.reads.asked():
            return min(soon, period)    # pysyncobj's queue: a slice left, or waiting for a leader
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            left = self._SyncObj__newAppendEntriesTime - self._now()
        elif self._SyncObj__selfNode is not None and self._SyncObj__otherNodes:
            left = self._SyncObj__raftElectionDeadline - self._now()
        else:
            return soon                 # a learner, or alone: nothing of Raft's own is timed
        return min(soon, left if left > 0 else period)   # past and not acted on: poll as stock

    # ------------------------------------------------------------ linearizable reads (ReadIndex)

    def request_read(self, callback: ReadCallback) -> None:
        """Any thread: `callback(index, "")` (tick thread) once a read that arrived now may be
        served from this node's state, that is once it has applied `index`; `callback(None,
        why)` if this node cannot confirm it leads (not the leader, or it stepped down).
        Reads asked before the tick thread next runs share one confirmation round."""
        self.reads.ask(callback)
        self._wake()

    def _start_reads(self) -> None:
        """Tick thread: what was asked joins a new round, its heartbeats go out now. A leader
        that has not committed an entry of its term yet (its no-op) keeps the reads waiting:
        its commit index may lag what the previous leader committed (Raft §8)."""
        reads = self.reads
        if not reads.asked():
            return
        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            reads.fail(NOT_LEADER)
            return
        commit = int(self._SyncObj__raftCommitIndex)
        if commit < self._log_first() or self._term_at(commit) != self._SyncObj__raftCurrentTerm:
            return
        if reads.start(commit) is None:
            return
        if self._SyncObj__otherNodes:
            self._SyncObj__sendAppendEntries()      # the round's heartbeats (and the heartbeat due)
        self._confirm_reads()

    def _confirm_reads(self) -> None:
        self.reads.confirm(self._SyncObj__otherNodes)
        self.reads.serve(int(self.raftLastApplied))

    def read_age(self) -> tuple[float | None, int]:
        """How old this node's state may be, for a stale read's answer: (seconds since this
        node last had proof it was current, committed entries it knows of and has not applied).
        A follower: since it last heard its leader. A leader: since a majority last answered it
        (quiet heartbeats let a caught-up follower answer only once per quiet window). None: never.
        Read from another thread: each field is one load, the pair is approximate."""
        now = self._now()
        behind = max(0, int(self._SyncObj__raftCommitIndex) - int(self.raftLastApplied))
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            others = list(self._SyncObj__otherNodes)
            times = sorted((float(self._SyncObj__lastResponseTime.get(n, -math.inf)) for n in others),
                           reverse=True)
            need = (len(others) + 1) // 2          # followers that with us make a majority
            heard = times[need - 1] if need else now
        else:
            heard = self._leader_contact
            behind = max(behind, int(self._SyncObj__leaderCommitIndex or 0) - int(self.raftLastApplied))
        return (now - heard if heard > -math.inf else None), behind

    # ------------------------------------------------------------ pre-vote

    def _onTick(self, timeToWait: float = 0.0) -> None:
        if self._note_tick_gap() and self._SyncObj__transport.ready:
            # Inbox first: back from a stall, read what arrived meanwhile before any timer is judged
            # (stock judges first: a follower's election and a leader's fallback would count
            # heartbeats and answers sitting unread in our own sockets as silence).
            self._poller.poll(0)
        if self.halted:
            self._stay_out_of_elections()
        self._maybe_pre_vote()
        self._start_reads()
        backlog = self._backlog()
        started = self._now()
        cpu_started = time.thread_time()
        self._tick_ident = threading.get_ident()
        _TICKING[self._tick_ident] = self._weak_self
        self._sections = {}
        self._waited = 0.0
        self._cap_match_at_durable()
        try:
            SyncObj._onTick(self, 0.0 if backlog else timeToWait)
        finally:
            self._uncap_match()
            self._publish()
        self.reads.serve(int(self.raftLastApplied))
        self._tick_work = self._now() - started
        self._sections["apply"] = self._apply_work
        # fdatasync happens inside sending (before_send) or a tick callback: not a part of its own
        self._sections["rest (tick callbacks)"] = self._tick_work - sum(
            v for k, v in self._sections.items() if k not in NESTED)
        self.repair_stats.tick_holds.record(self._tick_work - self._waited, time.thread_time() - cpu_started,
                               self._waited, self._sections)
        self._log_long_hold()

    def _on_gc(self, phase: str) -> None:
        """A collection run by the tick thread (it allocates, so it collects): its pause is a
        part of the tick ("gc", nested in whichever part allocated)."""
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self._sections["gc"] = self._sections.get("gc", 0.0) + time.perf_counter() - self._gc_started
            self._gc_started = 0.0

    def _log_long_hold(self) -> None:
        """A tick that held the thread (its work, not its wait for a message) for
        LONG_HOLD_S or more is logged with its parts, and the CPU the thread got meanwhile (at most
        one line a second): a hold far above its CPU is a thread waiting for a core, the GIL or
        the disk, not working."""
        held = self._tick_work - self._waited
        if held < LONG_HOLD_S:
            return
        holds = self.repair_stats.tick_holds
        holds.long += 1
        now = self._now()
        if now - holds.logged_at < 1.0:
            return                      # at most one line a second (counted in `long`)
        holds.logged_at = now
        parts = ", ".join(f"{k} {v * 1000:.0f}" for k, v in
                          sorted(self._sections.items(), key=lambda kv: -kv[1]) if v >= 0.001)
        log.info("raft tick held %.0f ms (cpu %.0f ms, as %s): %s; %d such ticks since start",
                 held * 1000, holds.last_cpu * 1000,
                 "leader" if self._SyncObj__raftState == _RAFT_STATE.LEADER else "follower", parts,
                 holds.long)

    def _publish(self) -> None:
        """Tick thread, between two ticks (no message half handled): the role, term and leader
        of one moment, as one tuple (one store; a reader's one load sees all three of it)."""
        leader = self._SyncObj__raftLeader
        self._published = (int(self._SyncObj__raftState), int(self._SyncObj__raftCurrentTerm),
                           leader.id if leader is not None else "")

    def role_term_leader(self) -> tuple[int, int, str]:
        """Any thread: (role, term, leader id) as of the end of the last tick. Read field by
        field instead, a reader can pair a role with a term from another moment: stock sets the
        new term, then the follower state (and the leader before both), so a leader resumed by
        SIGCONT that handles the new leader's AppendEntries showed as leader of a term it never
        led while the tick thread was switched out in between."""
        return self._published

    def _backlog(self) -> bool:
        """Committed entries left to apply (a halted node has none it may apply)."""
        return self._SyncObj__raftCommitIndex > self.raftLastApplied and not self.halted

    # ------------------------------------------------------------ halting

    def halt(self, why: str) -> None:
        """Tick thread: stop applying, voting and leading for good (this process); `why` is
        logged at ERROR once and handed to `on_halt`."""
        if self.halted:
            return
        self.halted = why
        log.error("halted: %s (stopped applying at index %d; the log is kept for an upgraded build)",
                  why, int(self.raftLastApplied))
        self._stay_out_of_elections()
        self.on_halt(why)

    def _stay_out_of_elections(self) -> None:
        """A halted node never stands: its election timer is pushed back on every tick (stock
        elects when it runs out, TimeoutNow included), and a leader or candidate steps down."""
        self._SyncObj__transferInProgress = False
        self._prevote_won = False
        self._restart_election_timer()
        if self._SyncObj__raftState != _RAFT_STATE.FOLLOWER:
            self._SyncObj__raftLeader = None
            self._SyncObj__setState(_RAFT_STATE.FOLLOWER)

    def _cap_match_at_durable(self) -> None:
        """Parallel disk write: in parallel mode, stock's commit computation (the next thing a leader's tick
        does; it counts the leader itself unconditionally) sees each follower's matchIndex
        capped at the leader's durable index; `_uncap_match` puts the real one back before
        anything else reads it (apply, sending, answers)."""
        journal = self._SyncObj__raftLog
        set_parallel = getattr(journal, "set_parallel", None)
        if set_parallel is None:
            return                      # a MemoryJournal or stock's: no disk to wait for
        leading = self._SyncObj__raftState == _RAFT_STATE.LEADER and bool(self._SyncObj__otherNodes)
        if not set_parallel(leading):
            return
        durable = int(journal.durable_index)
        real = self._SyncObj__raftMatchIndex
        self._match_real = real
        self._match_capped = self._SyncObj__raftMatchIndex = {n: min(i, durable) for n, i in real.items()}

    def _SyncObj__setState(self, newState: int) -> None:
        """Parallel disk write: parallel mode ends before the role does: a node that stops leading (a
        higher term heard in this very tick, the leader fallback) must fdatasync before its
        next message again (its next ack as a follower covers what it holds)."""
        if newState != _RAFT_STATE.LEADER:
            set_parallel = getattr(self._SyncObj__raftLog, "set_parallel", None)
            if set_parallel is not None:
                set_parallel(False)
            led = self._SyncObj__raftState == _RAFT_STATE.LEADER
            self.reads.fail(STEPPED_DOWN if led else NOT_LEADER)     # ReadIndex: unconfirmed reads refused
        SyncObj._SyncObj__setState(self, newState)

    def _uncap_match(self) -> None:
        real, self._match_real = self._match_real, None
        if real is not None and self._SyncObj__raftMatchIndex is self._match_capped:
            self._SyncObj__raftMatchIndex = real   # (a new leadership may have replaced it)
        self._match_capped = None

    def _applyCommand(self, command: Any, callback: Any, commandType: Any = None) -> None:
        """Prompt sends: a proposal wakes the tick thread if a follower can take it now (stock's batch
        mode leaves it in the queue until the poll times out). The flag, not _idle_followers:
        this runs on the proposer's thread, the tick thread owns the indexes."""
        SyncObj._applyCommand(self, command, callback, commandType)
        if self._pipeline_idle:       # else the answer awaited wakes it, and it sends then
            self._wake()

    def _checkCommandsToApply(self) -> None:
        """Prompt sends: what the leader holds and a follower has not been sent goes to that
        follower in this tick, unless an AppendEntries to it is still unanswered (stock's batch
        mode waits for the next heartbeat, up to appendEntriesPeriod); a leader alone ticks
        again at once, its commit needs no answer."""
        last = self._log_last()
        self._timed("proposals", lambda: SyncObj._checkCommandsToApply(self))()
        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            self._pipeline_idle = False
            return
        if not self._SyncObj__otherNodes:
            if self._log_last() > last:
                self._wake()
            self._pipeline_idle = True
            return
        now = self._now()
        for node in self._idle_followers():
            if self._SyncObj__raftNextIndex[node] <= self._log_last():
                self._timed("sending", self._send_to)(node, now)
        self._pipeline_idle = bool(self._idle_followers())

    def _idle_followers(self) -> list[Any]:
        """Prompt sends: the connected followers in REPLICATE with nothing unanswered (matchIndex
        reached what was sent: nextIndex - 1). Judged on the real matchIndex, not the one
        the parallel disk write caps at the leader's durable index for the commit computation. One batch in
        flight per follower: sending on every proposal cost the loaded rows 15% more CPU."""
        match = self._real_match()
        nxt, connected = self._SyncObj__raftNextIndex, self._SyncObj__connectedNodes
        return [n for n in self._SyncObj__otherNodes
                if n in connected and self._repl_mode.get(n) == REPLICATE
                and match.get(n, 0) >= nxt.get(n, 0) - 1]

    def _real_match(self) -> dict[Any, int]:
        """The followers' matchIndex, not the one the parallel disk write caps at the leader's durable index."""
        return self._match_real if self._match_real is not None else self._SyncObj__raftMatchIndex

    def _SyncObj__tryLogCompaction(self) -> None:
        self._timed("compaction", lambda: SyncObj._SyncObj__tryLogCompaction(self))()

    def _apply_budget(self) -> float:
        """Seconds of applying per tick (bounded apply): an eighth of the minimum election timeout, so
        heartbeats (leader) and reading them (follower) never wait long behind a backlog."""
        return float(self._SyncObj__conf.raftMinTimeout) / 8

    def _SyncObj__applyLogEntries(self) -> bool:
        """Stock's apply loop, bounded by `_apply_budget` (bounded apply): stock applies every committed
        entry in one tick, so a follower catching up, or any node applying a herd's batches on a
        starved machine, sent and read no message for seconds. The rest waits for the next tick
        (which then polls without waiting)."""
        self._uncap_match()             # the parallel disk write: the commit computation is done
        applied, commit = int(self.raftLastApplied), int(self._SyncObj__raftCommitIndex)
        self._apply_work = 0.0
        if commit <= applied or self.halted:
            return False
        deadline = self._now() + self._apply_budget()
        waiting = self._SyncObj__commandsWaitingCommit
        lock = self._apply_lock
        for entry in self._SyncObj__getEntries(applied + 1, commit - applied):
            if lock is not None and not self._take_apply_lock(lock, deadline):
                break
            try:
                try:
                    res = self._SyncObj__doApplyCommand(entry[0])
                except BuildBehind as e:
                    self.halt(str(e))         # halting: this entry and the rest stay unapplied
                    break
                subscribers = waiting.pop(entry[1], [])
                for term, callback in subscribers:
                    if term == entry[2]:
                        callback(res, FAIL_REASON.SUCCESS)
                    else:
                        callback(None, FAIL_REASON.DISCARDED)
                applied += 1
                self._SyncObj__raftLastApplied = applied
            except SyncObjExceptionWrongVer as e:
                log.error("request to switch to unsupported code version (self version: %d, "
                          "requested version: %d)", self._SyncObj__selfCodeVersion, e.ver)
            finally:
                if lock is not None:
                    lock.release()
            if self._now() > deadline:
                self.repair_stats.apply_yields += 1
                break
        self._apply_work = self._now() - deadline + self._apply_budget()
        self.reads.serve(applied)       # ReadIndex: confirmed reads waiting for this apply
        return not self._SyncObj__conf.appendEntriesUseBatch

    def _take_apply_lock(self, lock: Any, deadline: float) -> bool:
        """Bounded lock wait: the node lock for one entry, waiting at most a heartbeat period or
        TICK_SLICE_S (and not past the apply budget); False (counted) leaves the entry for the
        next tick."""
        wait = max(0.001, min(self._tick_slice(), deadline - self._now()))
        started = self._now()
        got = bool(lock.acquire(timeout=wait))
        self._sections["apply: node lock wait"] = (self._sections.get("apply: node lock wait", 0.0)
                                                   + self._now() - started)
        if not got:
            self.repair_stats.apply_lock_yields += 1
        return got

    def _note_tick_gap(self) -> bool:
        """The time since the previous tick began: how long this node could not act on Raft
        (its own work, the GIL, the CPU); the longest is kept. True after a long one (over half
        the minimum election timeout), which is logged."""
        now = self._now()
        gap = now - self._tick_started if self._tick_started else 0.0
        self._tick_started = now
        self.repair_stats.max_tick_gap = max(self.repair_stats.max_tick_gap, gap)
        if gap <= self._SyncObj__conf.raftMinTimeout / 2:
            return False
        self.repair_stats.long_tick_gaps += 1
        self._listening_since = now
        parts = ", ".join(f"{k} {v * 1000:.0f}" for k, v in
                          sorted(self._sections.items(), key=lambda kv: -kv[1]) if v >= 0.001)
        log.warning("raft tick thread stalled %.0f ms (as %s): the previous tick took %.0f ms, "
                    "%.0f ms of it applying (%s)", gap * 1000,
                    "leader" if self._SyncObj__raftState == _RAFT_STATE.LEADER else "follower",
                    self._tick_work * 1000, self._apply_work * 1000, parts)
        return True

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
        if self._prevote_won and self._prevote_term == self._SyncObj__raftCurrentTerm + 1:
            self._prevote_won = False
            return
        self._start_pre_vote()

    def _start_pre_vote(self) -> None:
        self._prevote_round += 1
        self._prevote_term = self._SyncObj__raftCurrentTerm + 1
        self._prevote_grants = set()
        self._prevote_won = False
        self.repair_stats.pre_votes += 1
        self._restart_election_timer()
        request = {"type": PRE_VOTE, "term": self._prevote_term, "round": self._prevote_round,
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
        if (not message.get("granted") or message.get("round") != self._prevote_round
                or self._prevote_term != self._SyncObj__raftCurrentTerm + 1
                or self._SyncObj__raftState == _RAFT_STATE.LEADER):
            return
        self._prevote_grants.add(node)
        voters = len(self._SyncObj__otherNodes) + 1
        if len(self._prevote_grants) + 1 > voters / 2 and not self._prevote_won:
            self._prevote_won = True
            self._SyncObj__raftElectionDeadline = 0     # stock elects on the next tick


class RepairStats:
    """Counters of the repair machinery (what a scripted test asserts, what a debugger reads)."""

    __slots__ = ("truncations", "truncated_entries", "rejections", "stale_rejections", "pre_votes",
                 "max_tick_gap", "long_tick_gaps", "apply_yields", "apply_lock_yields", "acked_lost",
                 "tick_holds", "newer_term_step_downs")

    def __init__(self) -> None:
        self.truncations = 0
        self.truncated_entries = 0
        self.rejections = 0
        self.stale_rejections = 0
        self.pre_votes = 0
        self.max_tick_gap = 0.0         # seconds, the longest time between two tick starts
        self.long_tick_gaps = 0         # gaps over half the minimum election timeout
        self.apply_yields = 0           # ticks that left committed entries for the next one
        self.apply_lock_yields = 0      # of which: the node lock stayed busy (the bounded lock wait)
        self.acked_lost = 0             # followers found without entries they acknowledged (log repair)
        self.tick_holds = TickHolds()   # how long each tick held the tick thread, by part
        self.newer_term_step_downs = 0  # leaderships ended by a node of a newer term (newer term heard)


# The node whose tick runs on each thread (the last one: a driven test ticks several on one), for
# the one gc callback: a collection's pause is a part of that node's tick.
_TICKING: dict[int, weakref.ref[RepairingSyncObj]] = {}


def _gc_pause(phase: str, info: dict[str, Any]) -> None:
    ref = _TICKING.get(threading.get_ident())
    node = ref() if ref is not None else None
    if node is not None:
        node._on_gc(phase)


gc.callbacks.append(_gc_pause)


class _TimedWait:
    """The poller's select.poll object, its blocking poll timed into the tick's "wait" (the
    rest of "poll+messages" is handling what arrived)."""

    def __init__(self, inner: Any, node: RepairingSyncObj) -> None:
        self._inner = inner
        self._node = node

    def poll(self, timeout: Any = None) -> Any:
        started = time.perf_counter()
        try:
            return self._inner.poll(timeout)
        finally:
            waited = time.perf_counter() - started
            self._node._waited += waited
            sections = self._node._sections
            sections["wait"] = sections.get("wait", 0.0) + waited

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


HOLD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, math.inf)


class TickHolds:
    """How long each tick held the tick thread (its wall time less the poll's wait), the thread's
    CPU over the tick, and each part's time in the ticks that had it: per part, counts per
    bucket of HOLD_BUCKETS (not cumulative), the sum and the largest. Written by the tick
    thread, read by the metrics."""

    bounds = HOLD_BUCKETS

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.maxes: dict[str, float] = {}
        self.last_cpu = 0.0
        self.long = 0                   # ticks held LONG_HOLD_S or more
        self.logged_at = -math.inf      # when the last of them was logged

    def record(self, held: float, cpu: float, waited: float, sections: dict[str, float]) -> None:
        self.last_cpu = cpu
        self._add("held", held)
        self._add("cpu", cpu)
        for part, seconds in sections.items():
            if part == "poll+messages":
                part, seconds = "messages", seconds - waited
            if part != "wait" and seconds > 0:
                self._add(part, seconds)

    def _add(self, part: str, seconds: float) -> None:
        counts = self.counts.get(part)
        if counts is None:
            counts = self.counts[part] = [0] * len(HOLD_BUCKETS)
            self.sums[part] = 0.0
            self.maxes[part] = 0.0
        for i, bound in enumerate(HOLD_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
                break
        self.sums[part] += seconds
        if seconds > self.maxes[part]:
            self.maxes[part] = seconds
