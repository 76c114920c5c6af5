"""The only place that builds a pysyncobj SyncObj (with journal.py, the only code importing it).

Thread map (docs/architecture.md, section 2):
- pysyncobj's tick thread: elections, replication, apply (`ReplicatedState.apply_entry`), snapshot
  (de)serialization and our callbacks. It is started by, and dies with, the thread that builds the
  SyncObj, so `RaftNode` must be constructed on the main thread. A node hosting several groups
  passes them one `ticker.TickLoop`: each group's SyncObj is built with autoTick off and the
  loop's one thread ticks all of them (the same work, for every group, on that thread).
- the asyncio thread (gRPC, dispatcher): proposes with `propose()`, which hands the result back with
  `call_soon_threadsafe`, and reads the state under `RaftNode.lock` (apply holds it too).

What a proposal's outcome means (architecture.md "Facts" §1a FAIL_REASON): SUCCESS returns apply's result;
QUEUE_FULL, MISSING_LEADER, NOT_LEADER and DISCARDED mean "not applied" (safe to retry);
LEADER_CHANGED, UNKNOWN_OUTCOME and our own deadline mean "unknown": the entry may still commit, so a
caller retries with the same request id and the state machine's dedup makes that safe.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Sequence
from os import PathLike
from typing import Any, Generic, Protocol, TypeVar
from collections.abc import Callable

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from schedd.core import features
from schedd.core.commands import FEATURES
from schedd.core import commands as C
from schedd.core.results import ApplyResult, Code, Parts, Refused
from schedd.core.state import SchedulerState
from schedd.replication import journal as durable
from schedd.replication.journal_index import RESIDENT_BYTES
from schedd.replication import membership as members_file
from schedd.replication.membership import ChangeGate, Membership, StaticMember
from schedd.replication import level_file
from schedd.replication.raft_patches import BuildBehind, RepairingSyncObj
from schedd.replication.ticker import Replica, TickLoop
from schedd.replication.raft_port import SharedRaftPort
from schedd.replication.transport import TransportLimits
from schedd.ports.faults import NO_FAULTS, Faults
from schedd.ports.history import HistorySink

log = logging.getLogger("schedd.raft")


class RaftSettings(Protocol):
    """The Raft tuning a node is built with (runtime.config.RaftTuning is one)."""
    @property
    def heartbeat_ms(self) -> int: ...
    @property
    def tick_ms(self) -> int: ...
    @property
    def election_timeout_ms(self) -> tuple[int, int]: ...
    @property
    def leader_fallback_ms(self) -> int: ...
    @property
    def compaction_entries(self) -> int: ...
    @property
    def compaction_seconds(self) -> int: ...
    @property
    def compaction_bytes(self) -> int: ...
    @property
    def max_frame_bytes(self) -> int: ...
    @property
    def handshake_timeout_ms(self) -> int: ...


Member = StaticMember       # a member as the config names it (schedd.replication.membership)


class NodeSettings(Protocol):
    """What a RaftNode reads of its configuration (runtime.config.NodeConfig is one). The node
    keeps the object it was given as `cfg`, typed as given, for the shell built around it."""
    @property
    def node_id(self) -> str: ...
    @property
    def data_dir(self) -> str | PathLike[str]: ...
    @property
    def raft_address(self) -> str: ...
    @property
    def raft_bind(self) -> str: ...
    @property
    def secret(self) -> str: ...
    @property
    def fsync(self) -> str: ...
    @property
    def raft(self) -> RaftSettings: ...
    @property
    def members(self) -> Sequence[Member]: ...


CfgT = TypeVar("CfgT", bound=NodeSettings)

FOLLOWER, CANDIDATE, LEADER = 0, 1, 2
ROLE_NAMES = {FOLLOWER: "follower", CANDIDATE: "candidate", LEADER: "leader"}


class ProposalError(Exception):
    """Base of proposal failures."""


class NotApplied(ProposalError):
    """The entry was certainly not applied: retrying is safe."""


class OutcomeUnknown(ProposalError):
    """The entry may or may not commit: retry only with the same request id."""


class ReadUnconfirmed(Exception):
    """This node could not confirm it leads (not the leader, stepped down, or no majority
    answered in time): a read here could go back in time. Retrying, elsewhere, is safe."""


def _settle_reads(futs: list[asyncio.Future[int]], index: int | None, why: str) -> None:
    for fut in futs:
        if fut.done():
            continue
        if index is None:
            fut.set_exception(ReadUnconfirmed(why))
        else:
            fut.set_result(index)


_NOT_APPLIED = {FAIL_REASON.QUEUE_FULL: "queue full", FAIL_REASON.MISSING_LEADER: "no leader",
                FAIL_REASON.NOT_LEADER: "not leader", FAIL_REASON.DISCARDED: "discarded by a new leader",
                FAIL_REASON.REQUEST_DENIED: "request denied"}


class ReplicatedState(SyncObjConsumer):
    """Adapts SchedulerState to pysyncobj: one replicated method, so method numbering never changes
    between versions (the entry codec carries its own version instead)."""

    def __init__(self, state: SchedulerState, lock: threading.RLock,
                 on_applied: Callable[[str, ApplyResult, int], None], faults: Faults = NO_FAULTS,
                 node_id: str = "", *, build: str = "",
                 on_level: Callable[[int], None] = lambda level: None,
                 history: HistorySink | None = None) -> None:
        self._sm = state
        self._history = history              # where executions leaving the tables go (None: dropped)
        self._lock = lock
        self._build = build                 # this build's version, for the halt message
        self._on_level = on_level           # the replicated level changed (or a halt asked for one)
        self._level = 0                     # the level last handed to on_level
        self._on_applied = on_applied
        self._faults = faults
        self._node_id = node_id
        self.digests = DigestPoints()
        self.apply_times = ApplyTimes()
        self.freezer = GrowthFreezer()
        super().__init__()

    @replicated
    def apply_entry(self, entry: str) -> ApplyResult:
        index = self._syncObj.raftLastApplied + 1
        entry = self._faults.entry_to_apply(entry, index)
        asked = time.perf_counter()
        with self._lock:
            locked = time.perf_counter()
            result = self._sm.apply(entry, index)
            if result.code is Code.BUILD_BEHIND:       # nothing changed: stop here (halting)
                raise self._behind(int(result.of(Refused).cluster_level or 0))
            if self.digests.wanted(index):
                self.digests.record(index, self._sm.state_digest())
            self._note_level(self._sm.feature_level)
            if self._sm.outbox and self._history is not None:
                self._hand_over(index)
        self.apply_times.note(index, entry, locked - asked, time.perf_counter() - locked)
        self.freezer.note(len(self._sm.jobs) + len(self._sm.execs))
        self._faults.applied(self._node_id, entry, result, index, self._sm.log_hash)
        try:
            self._on_applied(entry, result, index)
        except Exception:  # a shell hook must never wedge apply
            log.exception("on_applied hook failed")
        return result

    def _hand_over(self, index: int) -> None:
        """Give the history store what this entry moved out of the tables. Under the apply lock,
        before the next apply clears the outbox; the store encodes at once and writes later."""
        out, jobs = self._sm.outbox, self._sm.jobs
        teams = {ex.job: job.team for ex in out.executions if (job := jobs.get(ex.job)) is not None}
        try:
            assert self._history is not None
            self._history.add(out.executions, index, teams, out.forgotten)
        except Exception:  # a broken disk must not wedge apply; the gap is found on the next start
            log.exception("handing entry %d's finished executions to the history store failed", index)

    def _behind(self, level: int) -> BuildBehind:
        """What halts the node: the level recorded first, so a restart on this build refuses."""
        self._note_level(level)
        return BuildBehind(features.build_behind_message(self._build, self._sm.features.max_level, level))

    def _note_level(self, level: int) -> None:
        if level != self._level:
            self._level = level
            try:
                self._on_level(level)
            except Exception:  # a full disk must not wedge apply; the halt still catches a rollback
                log.exception("recording the feature level %d failed", level)

    def _serialize(self) -> object:
        """The image pysyncobj writes. A snapshot no longer carries the executions that left the
        tables, so the history store holds every hand-over up to this index on disk (synced)
        before the log before it can be compacted away."""
        with self._lock:
            if self._history is not None:
                self._history.add((), self._sm.last_index)     # applied_index reaches the snapshot's
                self._history.flush(durable=True)
            return self._sm.snapshot()

    def _deserialize(self, data: Any) -> None:
        started = time.monotonic()
        with self._lock:
            self._sm.restore(data)
            level, top = self._sm.feature_level, self._sm.features.max_level
            if self._history is not None and self._history.applied_index < self._sm.last_index:
                if self._sm.archived:      # entries this store never saw may have archived runs
                    self._history.note_gap(self._sm.last_index)
                else:
                    self._history.add((), self._sm.last_index)
        log.info("restored snapshot: %d jobs, %d executions in %.2fs", len(self._sm.jobs),
                 len(self._sm.execs), time.monotonic() - started)
        if level > top and isinstance(self._syncObj, RepairingSyncObj):
            self._syncObj.halt(str(self._behind(level)))   # a newer cluster's snapshot: apply nothing on it
        else:
            self._note_level(level)


MIN_RESIDENT_BYTES = 1 << 20


def resident_log_bytes(shards: int) -> int:
    """How much of its log's newest commands a group keeps in memory (older ones are read back
    from the journal file when a lagging follower needs them): the node's budget, the journal's
    RESIDENT_BYTES, shared by the S groups it hosts, at least 1 MiB each. A budget per group
    would cost every sharded node S times the memory of an unsharded one, about 150 B per job
    at S = 8 (bench/README.md "A replica's memory per job")."""
    return max(MIN_RESIDENT_BYTES, RESIDENT_BYTES // max(1, shards))


class GrowthFreezer:
    """gc.freeze() each time the replicated state has grown by GROWTH since the last freeze.
    Registering a herd adds rows faster than anything dies, and with the daemon's thresholds
    (runtime.daemon.tune_gc: 50,000 / 20 / 20) a generation-1 collection scans everything that
    survived the last twenty young ones, up to a million objects, while holding the GIL: a
    fire entry applied during one held the leader's tick thread 483 and 928 ms at load 13, and
    the followers stood. Replaying that herd's log (2,069 entries, 100,000 jobs and
    executions): slowest apply 205 ms of CPU without freezing, 33 ms with (29 freezes). Rows
    live as long as the state (state.restore freezes what it loads for the same reason), are
    freed by reference counting when dropped, and a freeze is O(1); what it costs is that a
    reference cycle alive at a freeze and dropped later is never collected, hence only on
    growth, not on a timer."""

    GROWTH = 0.1
    MIN_ROWS = 10_000

    def __init__(self) -> None:
        self.frozen_at = 0          # rows (jobs + executions) at the last freeze
        self.freezes = 0

    def note(self, rows: int) -> bool:
        if rows < self.MIN_ROWS or rows < self.frozen_at * (1 + self.GROWTH):
            return False
        gc.freeze()
        self.frozen_at = rows
        self.freezes += 1
        return True


class ApplyTimes:
    """How long one entry held the Raft tick thread in apply, by entry kind: the slowest seen
    (what an apply cap per entry is sized from) and a warning for each entry over
    SLOW_S, with the part spent waiting for the node lock (the asyncio thread's reads hold it;
    under RepairingSyncObj the tick takes the lock before calling apply, the bounded lock wait of raft_patches,
    so that wait shows in the stall log's "apply: node lock wait" instead). Only the tick
    thread writes it; the kind is decoded only for a slow entry."""

    SLOW_S = 0.05

    def __init__(self) -> None:
        self.slowest: dict[str, tuple[float, int]] = {}    # kind -> (seconds, bytes)
        self.slow = 0
        self._quiet_until = 0.0        # at most one warning a second (a loaded node has many)

    def note(self, index: int, entry: str, waited: float, applied: float) -> None:
        took = waited + applied
        if took < self.SLOW_S:
            return
        self.slow += 1
        try:
            kind = str(json.loads(entry).get("k", "?"))
        except (ValueError, AttributeError):
            kind = "?"
        if took > self.slowest.get(kind, (0.0, 0))[0]:
            self.slowest[kind] = (took, len(entry))
        now = time.monotonic()
        if now < self._quiet_until:
            return
        self._quiet_until = now + 1.0
        log.warning("entry %d (%s, %d bytes) held the raft tick thread %.0f ms: %.0f ms applying, "
                    "%.0f ms waiting for the node lock", index, kind, len(entry), took * 1000,
                    applied * 1000, waited * 1000)


class DigestPoints:
    """State digests taken at log indexes asked for in advance ("the digest right after entry X
    applied"). Replicas under a steady write load rarely sit at one index when sampled; asking
    each for the digest at the same future index compares them whatever the load. Bounded: the
    newest MAX indexes are kept. Guarded by the node lock (asked for on the asyncio thread,
    recorded by apply)."""

    MAX = 16

    def __init__(self) -> None:
        self._points: dict[int, str] = {}     # index -> digest ("" while not yet applied)

    def ask(self, index: int, applied: int) -> None:
        if index > applied and index not in self._points:
            self._points[index] = ""
            for old in sorted(self._points)[:-self.MAX]:
                del self._points[old]

    def wanted(self, index: int) -> bool:
        return self._points.get(index) == ""

    def record(self, index: int, digest: str) -> None:
        self._points[index] = digest

    def get(self, index: int) -> str:
        return self._points.get(index, "")


STATUS_READ_TRIES = 20


@dataclass(slots=True)
class RaftStatus:
    """One consistent reading of pysyncobj's status (RaftNode.status)."""
    role: str
    term: int
    commit_index: int
    applied_index: int
    leader_commit_index: int
    has_quorum: bool
    uptime_s: int
    leader: str = ""                  # the leader's raft address as this node knows it ("" = none)
    last_log_index: int = 0
    match_index: dict[str, int] = field(default_factory=dict)   # leader only: peer raft address -> index


@dataclass(slots=True, frozen=True)
class ReadAge:
    """How far behind a stale read may be: the index this node has applied, committed entries
    it knows of and has not applied yet, and seconds since it last had proof it was current
    (a follower: its leader heard; a leader: a majority answered); None: never."""
    index: int
    behind: int
    age_s: float | None


_R = TypeVar("_R")


def settle(fut: asyncio.Future[_R], result: _R, error: int) -> None:
    """Resolve a proposal's future from pysyncobj's outcome (see the module docstring)."""
    if fut.done():
        return
    if error == FAIL_REASON.SUCCESS:
        fut.set_result(result)
    elif error in _NOT_APPLIED:
        fut.set_exception(NotApplied(_NOT_APPLIED[error]))
    else:
        fut.set_exception(OutcomeUnknown(f"outcome unknown (pysyncobj reason {error})"))


class GroupCommit:
    """Group commit: groupable entries go to Raft together as one GROUP entry (schedd.core.state
    applies each as if it had an entry of its own), so 64 PutJob calls in flight cost a few
    Raft entries per commit round instead of 64: one pickle, one journal write, one append per
    follower and one callback each. While MAX_ROUNDS groups await their commit, new entries
    wait for the next one to end (they would only queue behind it in pysyncobj anyway); else
    they go at the end of this turn of the event loop. An entry alone is proposed as it is. A
    group stays within MAX_BYTES and MAX_ENTRIES; each proposer gets its own part of the result,
    or the group's refusal or error if it has no part (then nothing of it applied)."""

    MAX_BYTES = C.MAX_ENTRY_BYTES - 2048     # the group's envelope is well under 2 KiB
    MAX_ENTRIES = 256
    MAX_ROUNDS = 2
    ROUND_HOLD_S = 0.5

    def __init__(self, submit: Callable[[str, Callable[[ApplyResult, int], None]], None],
                 term: Callable[[], int], *, hold_s: float = ROUND_HOLD_S,
                 enabled: Callable[[], bool] = lambda: True) -> None:
        self._submit = submit
        self._term = term
        self._hold_s = hold_s
        self._enabled = enabled        # may the cluster apply a GROUP entry? (its feature level)
        self._pending: list[tuple[str, asyncio.Future[ApplyResult]]] = []
        self._bytes = 0
        self._scheduled = False
        self._rounds = 0                       # submitted, not yet answered

    def add(self, loop: asyncio.AbstractEventLoop, entry: str) -> asyncio.Future[ApplyResult]:
        fut: asyncio.Future[ApplyResult] = loop.create_future()
        size = C.encoded_size(entry)
        if self._pending and (self._bytes + size > self.MAX_BYTES or len(self._pending) >= self.MAX_ENTRIES):
            self._send()
        self._pending.append((entry, fut))
        self._bytes += size
        if not self._scheduled and self._rounds < self.MAX_ROUNDS:
            self._scheduled = True
            loop.call_soon(self.flush)
        return fut

    def flush(self) -> None:
        """End of a loop turn: propose what is pending unless MAX_ROUNDS are in flight."""
        self._scheduled = False
        if self._rounds < self.MAX_ROUNDS:
            self._send()

    def _send(self) -> None:
        """Propose what is pending: one entry as it is, several as one GROUP entry."""
        pending, self._pending, self._bytes = self._pending, [], 0
        if len(pending) > 1 and not self._enabled():
            for one in pending:                # a cluster not at GROUP's level yet: each alone
                self._pending = [one]
                self._send()
            return
        if not pending:
            return
        futs = [f for _, f in pending]
        entry = pending[0][0] if len(pending) == 1 else \
            C.encode(C.GROUP, rid="", now=0, term=self._term(), entries=[e for e, _ in pending])
        self._rounds += 1
        # pysyncobj may never answer a proposal (architecture.md "Facts" §1a): a round stops holding the next
        # ones back after ROUND_HOLD_S whatever becomes of it (its proposers keep their deadlines).
        held = [True]
        asyncio.get_running_loop().call_later(self._hold_s, self._release, held)
        self._submit(entry, lambda result, error: self._answered(held, futs, result, error))

    def _release(self, held: list[bool]) -> None:
        if held[0]:
            held[0] = False
            self._rounds -= 1
            if self._pending and not self._scheduled:
                self._send()

    def _answered(self, held: list[bool], futs: list[asyncio.Future[ApplyResult]], result: ApplyResult,
                  error: int) -> None:
        if held[0]:
            held[0] = False
            self._rounds -= 1
        if len(futs) == 1:
            settle(futs[0], result, error)
        else:
            parts = (result.payload.parts if error == FAIL_REASON.SUCCESS and result.ok
                     and isinstance(result.payload, Parts) else None)
            if parts is not None and len(parts) == len(futs):
                for fut, part in zip(futs, parts):
                    settle(fut, part, error)
            else:
                for fut in futs:
                    settle(fut, result, error)
        if self._pending and not self._scheduled and self._rounds < self.MAX_ROUNDS:
            self._send()                       # what waited for this round goes now


class RaftNode(Generic[CfgT]):
    """A cluster member: the replicated state, its lock, and the SyncObj that drives it."""

    def __init__(self, cfg: CfgT, *, on_role_change: Callable[[int, int], None] | None = None,
                 on_applied: Callable[[str, ApplyResult, int], None] | None = None,
                 faults: Faults = NO_FAULTS, learn_from: Sequence[str] = (), build: str = "",
                 history: HistorySink | None = None, ticker: TickLoop | None = None,
                 raft_port: SharedRaftPort | None = None, port_group: int | None = None) -> None:
        """`learn_from`: Raft addresses of a cluster to follow as a non-voter (pysyncobj's
        read-only node: no Raft address of its own, not counted in any quorum), receiving its
        snapshot and log into this data dir; a joining node does this before it asks to be
        added (schedd.runtime.join), then starts as a voter on the same data dir.
        `ticker`: the node's one tick loop for all its groups (a sharded node); None: this
        group's SyncObj ticks on a pysyncobj thread of its own (autoTick), as an unsharded
        node's always has. Stock pysyncobj (the fault suite's negative control) always does.
        `port_group`: this group's number on a cluster whose nodes listen on one Raft port for
        all their groups (its links dial with the group's preamble), `raft_port` the node's
        port it listens through (None for a learner, which listens nowhere); both None: a port
        of its own (replication.raft_port)."""
        self.cfg = cfg
        self.learner = bool(learn_from)
        self.history = history        # the node's history store (schedd.history), for reads; None in some tests
        self.state = SchedulerState(faults.feature_table(FEATURES))   # a test may run an older build's
        self.lock = threading.RLock()
        self._on_role_change = on_role_change or (lambda old, new: None)
        self._consumer = ReplicatedState(self.state, self.lock, on_applied or (lambda e, r, i: None),
                                         faults, cfg.node_id, build=build,
                                         on_level=lambda level: level_file.write(cfg.data_dir, level),
                                         history=history)
        self.digests = self._consumer.digests
        self._hooks = durable.prepare_durable_journal(str(cfg.data_dir), fsync=cfg.fsync,
                                                      resident_bytes=resident_log_bytes(getattr(cfg, "shards", 1)))
        durable.speed_up_snapshots()
        r = cfg.raft
        bind = cfg.raft_bind or cfg.raft_address
        self._ticker = ticker if not faults.stock_raft else None
        if raft_port is not None and (self._ticker is None or learn_from):
            raise ValueError("a group listens on the shared Raft port only when the node's tick loop drives it "
                             "(the port hands it connections on that loop's thread)")
        self._replica: Replica | None = self._ticker.replica() if self._ticker is not None else None
        conf = SyncObjConf(
            password=cfg.secret or None,
            bindAddress=bind,
            autoTick=self._replica is None,
            autoTickPeriod=r.tick_ms / 1000,
            appendEntriesPeriod=r.heartbeat_ms / 1000,
            raftMinTimeout=r.election_timeout_ms[0] / 1000,
            raftMaxTimeout=r.election_timeout_ms[1] / 1000,
            connectionTimeout=max(3.5, r.election_timeout_ms[1] / 1000),
            connectionRetryTime=0.5,
            leaderFallbackTimeout=r.leader_fallback_ms / 1000,
            appendEntriesUseBatch=True,
            **self._hooks.conf_kwargs,
            logCompactionMinEntries=r.compaction_entries,
            logCompactionMinTime=r.compaction_seconds,
            logCompactionSplit=False,
            useFork=True,
            commandsWaitLeader=True,
            dynamicMembershipChange=True,      # changes serialized by ChangeGate (architecture.md "Facts" F3)
            onStateChanged=self._state_changed,
        )
        others, source = (list(learn_from), "the cluster it learns from") if learn_from else self._initial_peers(cfg)
        self._started = time.monotonic()
        transport = self._hooks.transport_class.with_limits(TransportLimits(
            max_frame_bytes=r.max_frame_bytes, handshake_timeout_s=r.handshake_timeout_ms / 1000),
            port=raft_port, group=port_group)
        # Stock pysyncobj only as the fault suite's negative control (SCHEDD_UNSAFE=stock_raft).
        raft_kwargs: dict[str, Any] = {} if faults.stock_raft else {
            "apply_lock": self.lock, "compaction_bytes": r.compaction_bytes}
        if self._replica is not None:
            raft_kwargs["poller"] = self._replica.poller
        raft_class = SyncObj if faults.stock_raft else RepairingSyncObj
        try:
            self.sync = raft_class(None if learn_from else cfg.raft_address, others, conf=conf,
                                   consumers=[self._consumer], transportClass=faults.transport(transport),
                                   **raft_kwargs)
        except BaseException:
            if self._ticker is not None and self._replica is not None:
                self._ticker.unregister(self._replica)      # its descriptors, if it made any
            raise
        self._hooks.attach(self.sync)
        self._tick_jobs: collections.deque[Callable[[], bool]] = collections.deque()
        self.sync.addOnTickCallback(self._run_tick_jobs)
        if isinstance(self.sync, RepairingSyncObj):     # the deadline sleep: a queued job ticks at tick_ms
            self.sync.add_tick_need(lambda: 0.0 if self._tick_jobs else None)
        self.membership = Membership(cfg.node_id, cfg.members, self._raft_config, self._member_table,
                                     cfg.data_dir, saved=members_file.read_file(cfg.data_dir) or ())
        self.changes = ChangeGate()
        loaded = sorted(a for a in self._raft_config()[1:])
        if loaded != sorted(others):
            source = "pysyncobj's dump (it overrides the config file and membership.json)"
        self.membership.source = source
        if self._ticker is not None and self._replica is not None:
            self._load_dump_here()
            self._replica.sync = self.sync
            self._ticker.register(self._replica)      # its ticks begin (its hooks and callbacks set)
        if self.learner:
            log.info("learning from %s as a non-voter (read-only Raft node)", ", ".join(others))
            return
        log.info("membership at start: %s (from %s; pysyncobj's journal may change it as it replays)",
                 self.membership.describe(), source)
        disagreement = self.membership.config_disagreement()
        if disagreement:
            log.warning("membership: %s", disagreement)

    @staticmethod
    def _initial_peers(cfg: NodeSettings) -> tuple[list[str], str]:
        """The peers the SyncObj is built with: the last Raft configuration this node wrote to
        its data dir if any (it joined at run time, or the membership changed since the config
        file was written), else the config file's."""
        saved = members_file.read_file(cfg.data_dir)
        if saved:
            return ([m.raft_address for m in saved if m.raft_address != cfg.raft_address],
                    f"{members_file.MEMBERSHIP_FILE} in the data dir")
        return [p.raft_address for p in cfg.members if p.id != cfg.node_id], "the config file"

    def learners(self) -> int:
        """Read-only Raft nodes connected to this node (joiners catching up as non-voters)."""
        return len(self.sync.readonlyNodes)

    def learner_progress(self) -> tuple[int, int]:
        """A learner's (applied index, the leader's commit index as last heard; 0 = none yet)."""
        return int(self.sync.raftLastApplied), int(self.sync._SyncObj__leaderCommitIndex or 0)

    def _raft_config(self) -> list[str]:
        """This node's Raft address, then its peers', as pysyncobj has them now (a copy of a set
        the tick thread changes: the caller retries on RuntimeError)."""
        return [self.cfg.raft_address, *sorted(n.address for n in self.sync.otherNodes)]

    def _member_table(self) -> dict[str, tuple[str, str]]:
        with self.lock:
            return dict(self.state.members)

    # ------------------------------------------------------------ leadership

    def _state_changed(self, old: int, new: int) -> None:
        log.info("raft role %s -> %s (term %d)", ROLE_NAMES.get(old, old), ROLE_NAMES.get(new, new),
                 self.sync.raftCurrentTerm if hasattr(self, "sync") else -1)
        self._on_role_change(old, new)

    @property
    def repair_stats(self) -> Any:
        """The patched Raft's counters (raft_patches.RepairStats), None on stock pysyncobj (the
        negative control): what the metrics read of the tick thread's health."""
        return getattr(self.sync, "repair_stats", None)

    @property
    def halted(self) -> str:
        """Why this node stopped applying ("" while it applies): its build is below the cluster's
        feature level (raft_patches: halting). It then serves nothing but its status."""
        return str(getattr(self.sync, "halted", ""))

    def is_leader(self) -> bool:
        """pysyncobj's view only: it may be stale for up to leader_fallback_ms. Never gate a side
        effect on it alone; gate on a committed entry of this term (the leader epoch)."""
        return bool(self.sync._isLeader())

    @property
    def term(self) -> int:
        return self.sync.raftCurrentTerm

    def leader_raft_address(self) -> str:
        leader = self.sync._getLeader()
        return leader.id if leader is not None else ""

    def leader_grpc_address(self) -> str:
        return self.membership.grpc_of_raft(self.leader_raft_address())

    def leads_epoch(self) -> bool:
        """Leader in the current term AND that term's epoch entry has been applied here."""
        return self.is_leader() and self.state.epoch == self.term

    def _role_term_leader(self) -> tuple[bool, int, str]:
        return self.sync._isLeader(), self.sync.raftCurrentTerm, self.leader_raft_address()

    def status(self) -> RaftStatus:
        """Role, term, leader, commit, applied and match indexes. Role, term and leader come from
        one moment: the tuple the tick thread publishes between ticks (RepairingSyncObj
        `role_term_leader`). Read from pysyncobj's fields on this thread they could come from
        two moments, whatever the retries: a node resumed by SIGCONT showed as leader of a term
        it never led (stock sets the term, then the role, and the tick thread can be switched
        out in between for longer than three reads take). The indexes are read as they are."""
        st = self._status()
        if isinstance(self.sync, RepairingSyncObj):
            role, st.term, st.leader = self.sync.role_term_leader()
            st.role = ROLE_NAMES.get(role, str(role))
            if role != LEADER:
                st.match_index = {}
        return st

    def log_size(self) -> tuple[int, int]:
        """Entries and bytes this replica's log holds since its last snapshot: what a restart
        would replay after loading the dump (bytes 0 with a journal that cannot say)."""
        raft_log = self.sync._SyncObj__raftLog
        measure = getattr(raft_log, "log_bytes", None)
        return len(raft_log), int(measure()) if measure is not None else 0

    def _status(self) -> RaftStatus:
        """getStatus() as read on this thread (stock pysyncobj, the negative control, has nothing
        better: read until (leader?, term, leader) are equal before, inside and after)."""
        sync = self.sync
        for attempt in range(STATUS_READ_TRIES):
            before = self._role_term_leader()
            try:
                s = sync.getStatus()
            except RuntimeError:               # a dict resized under the read (membership change)
                if attempt + 1 < STATUS_READ_TRIES:
                    continue
                raise
            log_tail = sync._SyncObj__raftLog[-1:]
            leader = s["leader"].id if s["leader"] is not None else ""
            if before == (s["state"] == LEADER, s["raft_term"], leader) == self._role_term_leader():
                break
        last = log_tail[0][1] if log_tail else s["commit_idx"]
        prefix = "match_idx_server_"
        return RaftStatus(
            role=ROLE_NAMES.get(s["state"], str(s["state"])), term=s["raft_term"],
            commit_index=s["commit_idx"],
            applied_index=s["last_applied"], leader_commit_index=s["leader_commit_idx"] or 0,
            has_quorum=bool(s["has_quorum"]), uptime_s=int(time.monotonic() - self._started),
            leader=leader, last_log_index=last,
            match_index={k[len(prefix):]: v for k, v in s.items() if k.startswith(prefix)}
            if s["state"] == LEADER else {})

    # ------------------------------------------------------------ proposals

    _group: GroupCommit | None = None        # made by the first groupable proposal

    async def propose(self, entry: str, *, timeout: float = 10.0, groupable: bool = False) -> ApplyResult:
        """Replicate `entry` and return apply's result on this node. Raises NotApplied or
        OutcomeUnknown. Callable from the asyncio thread only. A `groupable` entry (a kind in
        commands.GROUPABLE) may share one log entry with others proposed in the same turn of the
        event loop (GroupCommit); its result and its errors are its own all the same."""
        loop = asyncio.get_running_loop()
        if groupable:
            if self._group is None:
                self._group = GroupCommit(self._submit, lambda: self.term,
                                          enabled=lambda: features.enabled(self.state, C.GROUP))
            fut = self._group.add(loop, entry)
        else:
            fut = loop.create_future()
            self._submit(entry, lambda result, error: settle(fut, result, error))
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise OutcomeUnknown(f"no commit within {timeout:g}s") from None

    # ------------------------------------------------------------ linearizable reads

    _reads_pending: list[asyncio.Future[int]] | None = None    # asked in this loop turn

    async def read_index(self, *, timeout: float) -> int:
        """Return once a read that arrived now may be served from this node's state (it is
        linearizable: no write acknowledged before the call is missing from it): this node led
        at a point after the call began, confirmed by a majority's answers to a heartbeat sent
        after it (ReadIndex in raft_patches), and has applied what was committed then.
        Returns that index. Raises ReadUnconfirmed when that cannot be confirmed within
        `timeout` (cut off from its peers, not the leader, stepped down). Reads asked in one
        turn of the event loop share one request. Stock pysyncobj (the fault suite's negative
        control) has no read path: there, pysyncobj's own view (what every read used before
        ReadIndex)."""
        sync = self.sync
        if not isinstance(sync, RepairingSyncObj):
            if self.is_leader():
                return int(sync.raftLastApplied)
            raise ReadUnconfirmed("this node is not the leader")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        if self._reads_pending is None:
            self._reads_pending = []
            loop.call_soon(self._ask_reads, loop, sync)
        self._reads_pending.append(fut)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise ReadUnconfirmed(f"a majority did not confirm this node's leadership within "
                                  f"{timeout:g}s") from None

    def _ask_reads(self, loop: asyncio.AbstractEventLoop, sync: RepairingSyncObj) -> None:
        """End of a loop turn: one request for every read asked in it, asked after all of
        them arrived (a read may join only a round that begins after it)."""
        futs, self._reads_pending = self._reads_pending or [], None

        def answered(index: int | None, why: str) -> None:     # tick thread
            if not loop.is_closed():                # (a shutdown: nobody waits any more)
                loop.call_soon_threadsafe(_settle_reads, futs, index, why)

        sync.request_read(answered)

    def read_age(self) -> ReadAge:
        """What a stale read served here: see ReadAge and RepairingSyncObj.read_age."""
        if isinstance(self.sync, RepairingSyncObj):
            age, behind = self.sync.read_age()
        else:
            age, behind = None, 0
        return ReadAge(int(self.sync.raftLastApplied), behind, age)

    # ------------------------------------------------------------ membership

    async def change_config(self, op: str, raft_address: str, *, timeout: float = 10.0) -> None:
        """Add ("add") or remove ("remove") a voter through pysyncobj and wait for the entry's
        commit. Raises NotApplied (refused: no leader, or a change pysyncobj denies) or
        OutcomeUnknown. Callers serialize through `self.changes` (pysyncobj does not)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def callback(result: object, error: int) -> None:  # tick thread
            loop.call_soon_threadsafe(settle, fut, None, error)

        change = self.sync.addNodeToCluster if op == "add" else self.sync.removeNodeFromCluster
        change(raft_address, callback=callback)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise OutcomeUnknown(f"no commit within {timeout:g}s") from None

    def transfer_leadership(self, tries: int = 200, to: str | None = None) -> None:
        """Hand leadership to the most caught-up connected voter, or to the voter at Raft address
        `to` (Raft TimeoutNow). pysyncobj denies it unless the target's matchIndex is the
        leader's last index, which a loaded leader rarely sees at one instant: it is tried on
        each of the next `tries` ticks, in the tick thread (pysyncobj's state is the tick
        thread's), until one is sent."""
        left = [tries]

        def attempt() -> bool:
            def done(result: object, error: int) -> None:
                if error in (FAIL_REASON.SUCCESS, FAIL_REASON.NOT_LEADER):
                    left[0] = 0
            left[0] -= 1
            self.sync.transferLeadership(to, callback=done)
            return left[0] <= 0

        self._tick_jobs.append(attempt)
        if isinstance(self.sync, RepairingSyncObj):
            self.sync.wake()                        # its tick may sleep until a deadline (the deadline sleep)

    def _run_tick_jobs(self) -> None:
        """Tick thread: run each queued job; keep the ones that say they are not done."""
        for _ in range(len(self._tick_jobs)):
            job = self._tick_jobs.popleft()
            try:
                finished = job()
            except Exception:
                log.exception("tick job failed")
                finished = True
            if not finished:
                self._tick_jobs.append(job)
    def _submit(self, entry: str, on_done: Callable[[ApplyResult, int], None]) -> None:
        """Hand `entry` to pysyncobj; `on_done(result, error)` runs on this (the asyncio) thread."""
        loop = asyncio.get_running_loop()

        def callback(result: ApplyResult, error: int) -> None:  # tick thread
            loop.call_soon_threadsafe(on_done, result, error)

        self._consumer.apply_entry(entry, callback=callback)

    def _load_dump_here(self) -> None:
        """pysyncobj loads a group's dump on the group's first tick. On the node's one tick loop
        that tick would hold every other group's ticks for as long as the load takes (seconds
        for a group of a million jobs: at ten million jobs over 8 groups, a restarted node's
        groups missed their heartbeats and the shards it led churned through elections), and
        no shard's restore may block another's. So a group ticked by the loop loads its dump here, on the thread
        building it, before the loop ticks it; the loop ticks the groups built before it
        meanwhile, as their own threads did."""
        sync: Any = self.sync
        if not getattr(sync, "_SyncObj__needLoadDumpFile", False):
            return
        dump = sync._SyncObj__conf.fullDumpFile
        if dump is not None and os.path.isfile(dump):
            sync._SyncObj__loadDumpFile(clearJournal=False)
        sync._SyncObj__needLoadDumpFile = False

    def close(self) -> None:
        """Stop the tick thread; pysyncobj then flushes and closes the journal. On the node's
        tick loop: leave the loop (no tick of this group runs once `unregister` returns; the
        other groups go on), then destroy it here (autoTick off: pysyncobj does it at once).
        Then close the wake pipe, which pysyncobj never closes (a dropped shard replica would
        leak it): nothing ticks this group any more."""
        if self._ticker is not None and self._replica is not None:
            leave_port = getattr(self.sync._SyncObj__transport, "leave_port", None)
            if leave_port is not None:
                leave_port()                          # the shared Raft port hands it nothing more
            self._ticker.unregister(self._replica)
            self.sync.destroy()
        else:
            self.sync.destroy_synchronous()
        close_wake = getattr(self.sync, "close_wake", None)      # stock SyncObj (negative control): none
        if close_wake is not None:
            close_wake()
