"""The leader's loop: record intents ahead of time, then launch each at its instant.

Runs on every node, acts only on the leader, and only while `node.leads_epoch()`: this node leads
in its current term AND the epoch entry of that term has been applied here. So a side effect is
gated by a commit of this term, never by pysyncobj's `_isLeader()` alone (which can be stale).

1. Epoch: on gaining leadership, propose `epoch(term)`. Apply raises the state's epoch and from then
   on rejects fire entries of any other term: a deposed leader's late intents are refused.
2. Intent: each step, plan the instants due by now + lookahead and propose them in batched `fire`
   entries (at most max_fire_batch and FIRE_ENTRY_MAX pairs and C.BATCH_ENTRY_BYTES, under pysyncobj's 64 KiB
   chunking limit; at most MAX_INFLIGHT_BATCHES in flight, so one commit round's applies stay
   short enough for the tick thread to keep heartbeating).
3. Launch: an execution is launched only from an apply result (on_applied), never from "my
   proposal returned": a timed-out proposal may still commit, a forwarded one may apply later.
   Until workers exist, launching means: at the scheduled instant, log it and measure lateness.
"""

from __future__ import annotations

import asyncio
import logging
import time

from schedd.core import batches
from schedd.core import commands as C
from schedd.core.model import RUNNING, SCHEDULED
from schedd.core.results import ApplyResult, CancelAttempt, EpochApplied, Launch
from schedd.core.view import StateView
from schedd.leader.assigner import Assigner
from schedd.leader.placer import Placer
from schedd.leader.planner import plan_fires, plan_horizon
from schedd.leader.sla import SlaDriver
from schedd.leader.workers import WorkerHub
from schedd.replication.node import ProposalError, RaftNode
from schedd.ports.clock import Clock
from schedd.ports.faults import NO_FAULTS, Faults
from schedd.ports.metrics import Metrics

log = logging.getLogger("schedd.dispatcher")

IDLE_STEP_S = 0.05
# A follower has nothing to step for: its role changing wakes it (on_role_change); this is
# only a backstop. Stepping every IDLE_STEP_S cost each idle follower 20 wakeups a second.
FOLLOWER_STEP_S = 1.0
# pysyncobj applies every entry committed in one round in one tick, without heartbeating
# between them, so a round carries at most MAX_INFLIGHT_BATCHES x FIRE_ENTRY_MAX intents: at
# ~20 us an intent (one policy per spec template) that is ~40 ms of apply per node, far from
# the election timeout (at 0.1-0.3 ms an intent, as before, such rounds caused elections).
# Fewer held a loaded leader near 800 intents a round: a 100,000 herd's last 20,000 were
# recorded more than MISSED_GRACE_MS after their instant, labelled catch-up and started at
# catchup_per_second (10/s). Entries are cut by size as well (long names: fire_chunks).
MAX_INFLIGHT_BATCHES = 4
FIRE_ENTRY_MAX = 500
FIRE_ITEM_BYTES = 24            # what an intent costs in a fire entry besides its job's name
LAUNCH_SLICE = 1000             # executions looked at per hold of the node lock at an instant (a loop pass each)
PROPOSE_TIMEOUT_S = 5.0
TAKEOVER_MARGIN_MS = 250
BATCH_CHECK_MS = 1000           # how often the leader looks for abandoned staged batches


def fire_chunks(items: list[tuple[str, int]], per_entry: int) -> list[list[tuple[str, int]]]:
    """The intents of one step in chunks that each fit one fire entry: at most `per_entry` and
    C.BATCH_ENTRY_BYTES (500 names of 128 characters would not fit an entry)."""
    return C.chunk_by_size(items, lambda item: FIRE_ITEM_BYTES + C.encoded_size(item[0]),
                           C.BATCH_ENTRY_BYTES, per_entry)


class Dispatcher:
    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, hub: WorkerHub | None = None,
                 faults: Faults = NO_FAULTS) -> None:
        self.node = node
        self.clock = clock
        self.metrics = metrics
        self.faults = faults
        self.cfg = node.cfg.scheduler
        self._wake = asyncio.Event()
        self._inflight: set[str] = set()           # jobs with an unsettled fire proposal
        self._batches = 0
        self._burst_until = 0                       # the end of the last burst window seen (planner)
        self._epoch_asked: int | None = None
        self._launches: dict[int, tuple[asyncio.TimerHandle, dict[str, int]]] = {}  # by instant: name -> t
        self._led_term: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self._aborting: set[str] = set()            # batch ids with an abort proposed (expiry)
        self._next_batch_check = 0                  # leader time of the next look for them
        self.hub = hub
        self.view = StateView(node.state)           # all the leader reads of the state
        self.assigner = (Assigner(node, clock, hub, self.cfg.lookahead_ms, self._spawn, metrics, faults,
                                  view=self.view)
                         if hub is not None else None)
        self.sla = SlaDriver(node, clock, metrics, self._spawn, webhooks=node.cfg.webhooks, view=self.view)
        self.placer = Placer(node, clock, self._spawn, self.view)
        if hub is not None:
            hub.on_change = self._wake.set

    # ------------------------------------------------------------ hooks from the tick thread

    def on_applied(self, entry: str, result: ApplyResult, index: int) -> None:
        """Called in pysyncobj's tick thread after each apply; must be cheap and never block.
        Performs the result's effects: executions to launch, an epoch applied, cancels to push."""
        if self._loop is None or not result.ok:
            return
        created = [(e.job, e.scheduled_ms) for e in result.effects if isinstance(e, Launch)]
        if created:
            self.faults.fire_applied(self.node, created, index, self._loop)
        # Launch timers and fire-lead metrics are the leader's (a new leader adopts the pending
        # intents in _take_over): a follower's loop is not woken for every fire entry.
        if (created or any(isinstance(e, EpochApplied) for e in result.effects)) and self.node.is_leader():
            self._loop.call_soon_threadsafe(self._applied, created)
        cancels = [e for e in result.effects if isinstance(e, CancelAttempt)]
        if cancels:
            self._loop.call_soon_threadsafe(self._push_cancels, cancels)

    def _push_cancels(self, cancels: list[CancelAttempt]) -> None:
        """A running attempt was asked to stop: tell its worker now (the reaper resends until
        the attempt ends). Only the leader of this epoch talks to workers."""
        if self.assigner is None or not self.node.leads_epoch():
            return
        for e in cancels:
            self.assigner.push_cancel(e.token, e.execution_id)

    def on_role_change(self, old: int, new: int) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    # ------------------------------------------------------------ loop

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        while True:
            await self._sleep(IDLE_STEP_S if self.node.is_leader() else FOLLOWER_STEP_S)
            self._wake.clear()
            try:
                self._step()
            except Exception:  # the loop must survive a bad step
                log.exception("dispatcher step failed")

    async def _sleep(self, timeout: float) -> None:
        """Until woken or `timeout`: a timer that sets the event (wait_for made a task and a
        cancellation each step)."""
        if self._wake.is_set():
            return
        timer = asyncio.get_running_loop().call_later(timeout, self._wake.set)
        try:
            await self._wake.wait()
        finally:
            timer.cancel()

    def _step(self) -> None:
        node = self.node
        if not node.is_leader():
            if self._led_term is not None and self.hub is not None:
                self.hub.close_all("this node is no longer the leader")
            self._led_term = None
            self._cancel_launches()
            if self.assigner is not None:
                self.assigner.load.clear()
            return
        term = node.term
        if self.view.epoch != term:
            if self._epoch_asked != term:
                self._epoch_asked = term
                self._spawn(self._propose(C.encode(C.EPOCH, rid=f"epoch-{node.cfg.node_id}-{term}",
                                                   now=self.clock.now_ms(), term=term, by=node.cfg.node_id),
                                          C.EPOCH, ()))
            return
        if self._led_term != term:
            self._led_term = term
            self._take_over()
        now = self.clock.now_ms()
        if self.assigner is not None:
            self.assigner.step(now)
        self.sla.step(now)                      # record SLA misses (schedd.leader.sla)
        self.placer.step(now, term)             # place window instants (schedd.leader.placer)
        self._abort_expired_batches(now, term)
        if self._batches >= MAX_INFLIGHT_BATCHES:
            return
        per_entry = min(self.cfg.max_fire_batch, FIRE_ENTRY_MAX)
        with node.lock:
            until = plan_horizon(self.view, now, self.cfg.lookahead_ms,
                                 burst_lookahead_ms=self.cfg.burst_lookahead_ms,
                                 burst_threshold=self.cfg.burst_threshold, burst_until_ms=self._burst_until)
            if until > now + self.cfg.lookahead_ms:
                self._burst_until = until        # a burst's window: its tail is recorded early too
            items = plan_fires(self.view, now, until - now,
                               limit=per_entry * (MAX_INFLIGHT_BATCHES - self._batches),
                               inflight=self._inflight)
        for chunk in fire_chunks(items, per_entry):
            jobs = sorted({n for n, _ in chunk})
            entry = C.encode(C.FIRE, rid="", now=now, term=term, by=node.cfg.node_id,
                             items=[[n, t] for n, t in chunk])
            self._spawn(self._propose(entry, C.FIRE, jobs))
            self.faults.fire_proposed(self, chunk, self._spawn)

    def _abort_expired_batches(self, now: int, term: int) -> None:
        """Staged batches whose proposer never committed nor aborted them (it died, or lost its
        leadership) are discarded by an abort entry; apply decides by entry times only."""
        if not self.view.has_batches() or now < self._next_batch_check:
            return
        self._next_batch_check = now + BATCH_CHECK_MS
        with self.node.lock:
            stale = [b for b in self.view.expired_batches(now) if b not in self._aborting]
        for b in stale:
            self._aborting.add(b)
            entry = C.encode(C.BATCH_ABORT, rid="", now=now, term=term, by=self.node.cfg.node_id,
                             batch=b, reason=f"not committed within {batches.BATCH_TTL_MS // 1000}s")
            self._spawn(self._propose(entry, C.BATCH_ABORT, ()))
            if self._loop is not None:               # ask again only if it did not apply by then
                self._loop.call_later(PROPOSE_TIMEOUT_S, self._aborting.discard, b)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _propose(self, entry: str, kind: str, jobs) -> None:
        self._inflight.update(jobs)
        self._batches += kind == C.FIRE
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
            outcome = "ok" if result.ok else result.code.value
            self.metrics.commit_latency.labels(kind).observe(loop.time() - started)
        except ProposalError as e:
            outcome = type(e).__name__
            log.info("%s proposal not confirmed: %s", kind, e)
            if kind == C.EPOCH:
                self._epoch_asked = None
        finally:
            self._inflight.difference_update(jobs)
            self._batches -= kind == C.FIRE
            self._wake.set()
        self.metrics.proposals.labels(kind, outcome).inc()

    # ------------------------------------------------------------ launch

    def _applied(self, created: list[tuple[str, int]]) -> None:
        now = self.clock.now_ms()
        view = self.view
        with self.node.lock:
            dues = [(name, t, ex.due if (ex := view.execution(name, t)) is not None else t) for name, t in created]
        for name, t, due in dues:
            self.metrics.fire_lead.observe(max(0.0, (due - now) / 1000))
            if due < now:
                self.metrics.late_intents.inc()
            self._schedule_launch(name, t, now, due)
        self._wake.set()

    def _schedule_launch(self, name: str, t: int, now: int, due: int) -> None:
        """One timer per due instant, however many executions share it: a burst of a thousand
        jobs due at the same second is launched in one pass, not a thousand callbacks. An
        execution is due at its scheduled instant plus its job's jitter."""
        group = self._launches.get(due)
        if group is None:
            if self._loop is None:
                return
            handle = self._loop.call_later(max(0.0, (due - now) / 1000), self._launch, due)
            group = self._launches[due] = (handle, {})
        group[1][name] = t

    def _launch(self, due: int) -> None:
        _, names = self._launches.pop(due, (None, {}))
        if not self.node.leads_epoch():
            return
        pending = list(names.items())
        if len(pending) <= LAUNCH_SLICE:
            self._launch_slice(due, pending)
        else:
            self._spawn(self._launch_herd(due, pending))

    async def _launch_herd(self, due: int, pending: list[tuple[str, int]]) -> None:
        """A herd, a slice at a time, yielding to the event loop between slices: releasing the
        node lock and taking it straight back starved the apply thread of it (RLock is not fair),
        and a 100,000 herd then held the Raft tick for seconds (an election)."""
        for i in range(0, len(pending), LAUNCH_SLICE):
            if not self.node.leads_epoch():
                return
            self._launch_slice(due, pending[i:i + LAUNCH_SLICE])
            await asyncio.sleep(0)

    def _launch_slice(self, due: int, names: list[tuple[str, int]]) -> None:
        now_ns = time.time_ns
        offset = self.clock.now_ms() - now_ns() // 1_000_000
        observe = self.metrics.fire_lateness.observe
        launched: dict[str, int] = {}
        view = self.view
        with self.node.lock:
            for name, t in names:
                ex = view.execution(name, t)
                job = view.job(name)
                if ex is None or ex.state not in (SCHEDULED, RUNNING) or job is None or job.paused:
                    continue            # deleted, paused or already handled since the intent
                observe(max(0.0, (now_ns() // 1_000_000 + offset - due) / 1000))
                launched[ex.trigger] = launched.get(ex.trigger, 0) + 1
        for trigger, n in launched.items():
            self.metrics.fired.labels(trigger).inc(n)
        log.debug("instant %d: launched %d", due, sum(launched.values()))

    def _take_over(self) -> None:
        """A new leader adopts the intents that previous leaders committed but may not have
        launched. It looks back over the failover window (the election, the old leader's
        fallback and its lookahead), but not before the old leader was last seen alive: the stamp
        of its newest intent, minus a margin for timer lag; the old leader had launched what fell
        due before that. Until workers record their claims in the log, an instant the old leader
        launched between that stamp and its death is counted again: at least once, as the firing
        rule allows (docs/architecture.md "Facts": firing, point 4), never zero times."""
        now = self.clock.now_ms()
        term = self.node.term
        raft = self.node.cfg.raft
        horizon = now - (raft.election_timeout_ms[1] + raft.leader_fallback_ms + self.cfg.lookahead_ms)
        with self.node.lock:
            pending = [(ex.scheduled_ms, ex.job, ex) for ex in self.view.scheduled_since(horizon)]
        old_alive = max((ex.created_ms for _, _, ex in pending if ex.term < term), default=None)
        if old_alive is not None:
            horizon = max(horizon, old_alive - TAKEOVER_MARGIN_MS)
        adopted = [(t, name, ex.due) for t, name, ex in pending if t > horizon or ex.term == term]
        if self.assigner is not None:
            self.assigner.take_over(now)
        for t, name, due in adopted:
            self._schedule_launch(name, t, now, due)
        log.info("leading term %d: %d pending intents adopted", term, len(adopted))

    def _cancel_launches(self) -> None:
        for handle, _ in self._launches.values():
            handle.cancel()
        self._launches.clear()

    async def close(self) -> None:
        self._cancel_launches()
        for task in list(self._tasks):
            task.cancel()
