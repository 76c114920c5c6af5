"""The leader's execution loop: claim due executions for workers, push committed claims, commit
results, expire attempts whose workers went silent, and push cancels.

Every decision becomes a log entry before it has an effect (docs/architecture.md "Facts": firing, point 4):
- a claim (`start`) is committed before the assignment is pushed, and its log index is the
  attempt's fencing token; the worker starts it at its due time on its own clock;
- a result is committed (`finish`); apply refuses a token that is no longer current, so a zombie
  worker cannot overwrite a retry's result;
- a lost attempt is expired (`expire`) only after a lease without news, and a new leader first
  grants running attempts one lease of grace for their workers to reconnect; a claim inherited
  from an earlier leader whose worker reconnects without it never started there: it is expired
  at once and run again without backoff (`inherited_claim_fate`).
The proposals carry request ids derived from the token, so a retried proposal applies once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from typing import Any

from schedd.core import acl as A
from schedd.core import commands as C
from schedd.core import features
from schedd.core import params as run_params
from schedd.core.attempts import MAX_CLAIMS_PER_ENTRY, MAX_RESULTS_PER_ENTRY
from schedd.core.jobs import NOT_STARTED_MARGIN_MS
from schedd.core.model import Execution, Job, ValidationError, execution_id, parse_execution_id
from schedd.core.policy import TemplateCache
from schedd.core import results as R
from schedd.core.results import UNKNOWN, ApplyResult, Code
from schedd.core.specs import JobSpec, ResourceLimits, handler_json
from schedd.core.view import StateView
from schedd.leader.assignment import Candidate, Capacity, Claim, InFlight, Pace, candidates, decide, in_due_order
from schedd.leader.planner import herd_window_ms
from schedd.leader.workers import WorkerConn, WorkerHub
from schedd.replication.node import ProposalError, RaftNode
from schedd.ports.clock import Clock
from schedd.security.secrets import EnvSealer, SecretError, open_secrets
from schedd.ports.faults import NO_FAULTS, ClaimAnswer, Faults
from schedd_proto import scheduler_pb2 as pb

log = logging.getLogger("schedd.assigner")

PROPOSE_TIMEOUT_S = 5.0
WORKER_KILL_GRACE_MS = 5_000     # a worker's TERM-to-KILL grace after a timeout (executors' default)
FINISH_TRIES = 3
CANCEL_RESEND_MS = 2_000
SPEC_CACHE = 10_000            # parsed specs kept: of jobs claimed or running (bounded)
FULL_PASS_MS = 500            # every waiting run is looked at (skips, reasons) this often, at least
FULL_PASS_SHARE = 20          # ... and a full pass takes at most 1/20 of the loop's time
SCAN_LIMIT = 1024             # runs one step looks at between full passes (the next resumes after)
SURVEY_LIMIT = 5_000         # runs one full pass looks at, holding the node lock (the next resumes)
REAP_MS = 250                 # running attempts are checked (leases, timeouts, cancels) this often,
REAP_LEASE_SHARE = 10         # ... or a tenth of the lease if longer, up to REAP_MAX_MS: see reap_ms
REAP_MAX_MS = 1_000
REAP_SLICE = 2_000            # ... at most this many per step, in rounds: a herd held ahead is
                              # 100,000 running attempts, and one walk over 20,000 held the
                              # node lock 140-400 ms every 250 ms (bench: herd-100k, --ahead)
AHEAD_IN_FLIGHT = 1024        # claims into ahead places proposed and not applied, at most (four
                              # start_many entries): a 100,000 herd claimed at once flooded the
                              # log and held the apply thread for seconds (elections)

BEHIND_MS = 2_000             # a run waiting this long past its due time: `cluster status` warns

HELD, WAIT, NOT_HELD = "held", "wait", "not_held"


@dataclass(slots=True)
class DispatchLoad:
    """How far behind dispatch is, as the leader measured at its last step: the runs past due
    that wait for a claim (for a free slot, a quota, or because the leader is behind) and how
    long ago the oldest of them was due. Past capacity schedd degrades by running late, never by
    dropping runs: this is where the lateness shows (the schedd_dispatch_* gauges,
    NodeStatus.dispatch_*, and a `cluster status` warning). Zero on a follower. Written on the
    event loop, read by the metrics scrape and Status.

    Runs of a pool that no connected worker serves are counted apart (`unserved`: pool -> runs
    past due): no capacity would take them, and counted in, one misconfigured job made the lag
    grow without bound and the warning blame the leader's capacity."""

    backlog: int = 0
    lag_ms: int = 0
    unserved: dict[str, int] = field(default_factory=dict)
    _skip: set[tuple[int, str, int]] = field(default_factory=set)    # ready keys of unserved runs
    _source: object = None
    _next_count_ms: int = 0

    def measure(self, view: StateView, now: int,
                unserved: Mapping[tuple[str, int], tuple[int, str]] | None = None) -> None:
        """O(log n) mostly: the caller holds the node lock. `unserved`: the runs the last pass
        found waiting for a pool no connected worker serves -> (due, pool); they are counted
        (O(their number)) when the mapping is a new one, else at most every FULL_PASS_MS (a step
        may run hundreds of times a second), and the walk for the oldest other run is bounded."""
        unserved = unserved or {}
        if unserved is not self._source or now >= self._next_count_ms or not unserved:
            self._count(view, now, unserved)
        self.backlog = max(0, view.ready_due_count(now) - len(self._skip))
        oldest = None
        if self.backlog:
            walk = islice(view.ready_until(now), len(self._skip) + SCAN_LIMIT)
            oldest = next((key[0] for key in walk if key not in self._skip), None)
        self.lag_ms = max(0, now - oldest) if oldest is not None else 0

    def _count(self, view: StateView, now: int, unserved: Mapping[tuple[str, int], tuple[int, str]]) -> None:
        skip: set[tuple[int, str, int]] = set()
        pools: dict[str, int] = {}
        for (name, t), (due, pool) in unserved.items():
            if due <= now and view.is_ready((due, name, t)):
                skip.add((due, name, t))
                pools[pool] = pools.get(pool, 0) + 1
        self._skip, self.unserved = skip, pools
        self._source, self._next_count_ms = unserved, now + FULL_PASS_MS

    def clear(self) -> None:
        self.backlog = self.lag_ms = 0
        self.unserved, self._skip, self._source = {}, set(), None


def reap_ms(lease_ms: int) -> int:
    """How long between two reap rounds. A round walks every running attempt, and a worker held
    ahead of 1,000 fires/s holds some 15,000: at 250 ms apart the rounds took 15% of the leader's
    CPU. Nothing is expired sooner for looking more often, so a round a tenth of a lease apart
    (1 s for the default 10 s) loses at most that much precision on a lost worker, a timeout or a
    cancel's resend, and saves three quarters of the walking."""
    return min(REAP_MAX_MS, max(REAP_MS, lease_ms // REAP_LEASE_SHARE))


def paused_before_due(job: Job | None, ex: Execution, now: int) -> bool:
    """Whether a claimed attempt is one a pause must cancel: its job is paused, it came from the
    job's schedule (a run triggered by hand or a retry is the operator's), and it is due far
    enough ahead that its handler cannot have started on a worker whose clock runs ahead of
    ours. (Held ahead for a herd, it would otherwise run up to the burst lookahead after the
    pause.)"""
    return (job is not None and job.paused and not ex.cancel_requested
            and ex.trigger in ("schedule", "catchup") and ex.due > now + NOT_STARTED_MARGIN_MS)


def overload_warning(backlog: int, lag_ms: int) -> str:
    """The `cluster status` warning for a leader's dispatch backlog ("" when it keeps up)."""
    if lag_ms < BEHIND_MS or backlog <= 0:
        return ""
    return (f"dispatch is behind: {backlog} run(s) past due wait for a claim, the oldest due "
            f"{lag_ms / 1000:.1f} s ago (no free worker slot or quota for them, or the leader is "
            "past its capacity: every run still starts, late; `schedctl run get ID` says why one waits)")


def unserved_warnings(pools: Mapping[str, int]) -> list[str]:
    """The `cluster status` warnings for runs waiting for a pool that no connected worker serves."""
    return [f"{n} run(s) wait for pool {pool!r}, which no connected worker serves (start a worker "
            f"with --pool {pool}, or change the jobs' pool)" for pool, n in sorted(pools.items()) if n > 0]


def inherited_claim_fate(*, reconnected: bool, same_process: bool, reported: bool, holds: bool) -> str:
    """What became of a claim committed by an earlier leader, as far as this leader can tell.

    HELD: its worker lists the token (in its hello or a heartbeat): it runs there; the usual lease.
    WAIT: its worker has not reconnected, or has sent no heartbeat yet on its new stream: it may
      be running out of sight (a partitioned worker stops its attempts only after a lease), so the
      lease of grace from the takeover stands. Never run twice what might be running. Also when
      the worker that reconnected is another process than the one the claim was made for (its
      incarnation differs, or the claim predates incarnations): the process that got it may have
      started it before it died, and its handler may outlive it.
    NOT_HELD: the very process the claim was made for reconnected and heartbeats without it, and
      no result for it came first
      (resent results precede the first heartbeat on the stream; a result removes the claim from
      the inherited set): the worker never started it (the claim committed just before the old
      leader died, the assignment was never pushed or never reached it). Expire it now and run
      it again without backoff; at_most_once jobs keep their rule (apply ends them LOST).

    Without this, each new leader of a repeated failover granted a fresh lease of grace and the
    lost-attempt backoff followed: instants ran 97-101 s late under repeated leader cuts."""
    if holds:
        return HELD
    if not (reconnected and same_process and reported):
        return WAIT
    return NOT_HELD


CLAIM_BYTES = 128             # what a claim costs in a start_many entry besides its names


def claim_chunks(batch: list[tuple[WorkerConn, Claim, JobSpec]]) -> list[list[tuple[WorkerConn, Claim, JobSpec]]]:
    """The claims of one step in chunks that each fit one start_many entry: at most
    MAX_CLAIMS_PER_ENTRY claims and C.BATCH_ENTRY_BYTES (names counted as they are encoded)."""
    def size(item: tuple[WorkerConn, Claim, JobSpec]) -> int:
        conn, c, _ = item
        return CLAIM_BYTES + C.encoded_size(c.job) + C.encoded_size(conn.name) + C.encoded_size(conn.incarnation)
    return C.chunk_by_size(batch, size, C.BATCH_ENTRY_BYTES, MAX_CLAIMS_PER_ENTRY)


def _limits(limits: ResourceLimits | None) -> pb.ResourceLimits:
    """A spec's per-attempt limits as the Assignment carries them (0 = none)."""
    if limits is None:
        return pb.ResourceLimits()
    return pb.ResourceLimits(memory_mb=limits.memory_mb, cpu_seconds=limits.cpu_seconds,
                             open_files=limits.open_files, processes=limits.processes)


RESULT_BYTES = 256            # what a result costs in a finish_many entry besides its texts


def result_chunks(batch: list[tuple[WorkerConn, pb.AttemptResult, dict]]) -> list[list[tuple[WorkerConn, pb.AttemptResult, dict]]]:
    """Results in chunks that each fit one finish_many entry: at most MAX_RESULTS_PER_ENTRY
    and C.BATCH_ENTRY_BYTES (error and output texts counted as they are encoded)."""
    def size(item: tuple[WorkerConn, pb.AttemptResult, dict]) -> int:
        return RESULT_BYTES + sum(C.encoded_size(item[2][k]) for k in ("job", "worker", "error", "output_tail"))
    return C.chunk_by_size(batch, size, C.BATCH_ENTRY_BYTES, MAX_RESULTS_PER_ENTRY)


def share_ahead(ahead: list[int], room: int) -> list[int]:
    """Each worker's ahead places this step: its own, but at most `room` in all (the claims
    into ahead places in flight are bounded, AHEAD_IN_FLIGHT), shared evenly so that a herd is
    spread over the workers rather than given to the first one."""
    out = [0] * len(ahead)
    left = max(0, room)
    want = [i for i, a in enumerate(ahead) if a > 0]
    while left > 0 and want:
        each = max(1, left // len(want))
        for i in list(want):
            take = min(each, ahead[i] - out[i], left)
            out[i] += take
            left -= take
            if out[i] >= ahead[i]:
                want.remove(i)
            if left <= 0:
                break
    return out


def _may_serve(principal: A.Principal, pool: str, team: str) -> bool:
    return bool(A.may_serve(principal, pool, team))


class Assigner:
    def __init__(self, node: RaftNode, clock: Clock, hub: WorkerHub, lookahead_ms: int,
                 spawn: Callable, metrics=None, faults: Faults = NO_FAULTS, *,
                 view: StateView | None = None) -> None:
        self.node, self.clock, self.hub = node, clock, hub
        self.view = view if view is not None else StateView(node.state)   # all it reads of the state
        self.metrics = metrics
        self.faults = faults
        self._claim_hooked = type(faults).claim is not Faults.claim   # see _claim_many
        self.lookahead_ms = lookahead_ms
        self.spawn = spawn
        self.claiming: dict[tuple[str, int], tuple[str, ...]] = {}   # in flight -> quota keys held
        self.skipping: set[tuple[str, int]] = set()
        self.catchup_rate = float(node.cfg.scheduler.catchup_per_second)
        self._catchup_next_ms = 0.0
        self._next_full_pass_ms = 0
        self._next_reap_ms = 0
        self._reap_cursor: tuple[int, str] | None = None   # where the reap round in progress resumes
        self._classes: set = set()       # serving classes seen by the last full pass
        self._cursor: tuple[int, str, int] | None = None   # where the next step's scan resumes
        self._survey: tuple[int, str, int] | None = None   # where the next full pass resumes
        self._survey_classes: set = set()
        self._survey_waiting: dict[tuple[str, int], str] = {}
        self._last_step_ms = 0
        self.term = 0                    # the epoch this leader's current decisions are made in
        self.book = hub.book             # every fencing token's life on this leader (attempt_book)
        self.waiting: dict[tuple[str, int], str] = {}
        self.unserved: dict[tuple[str, int], tuple[int, str]] = {}   # -> (due, pool): see DispatchLoad
        self._survey_unserved: dict[tuple[str, int], tuple[int, str]] = {}
        self.took_over_ms = 0
        # job -> its spec, one per spec template (a herd of 100,000 from one template shares
        # one, not 100,000 copies renamed); its name is the template's first job's: read a
        # claim's own name from the claim
        self._specs: TemplateCache[JobSpec] = TemplateCache(lambda spec: spec, SPEC_CACHE)
        secret = getattr(node.cfg, "secret", "")
        self.sealer = EnvSealer(secret) if secret else None    # opens env_secret for assignments
        self.load = DispatchLoad()
        self._results: list[tuple[WorkerConn, pb.AttemptResult, dict]] = []   # to commit in one entry
        hub.on_result = self.on_result

    def take_over(self, now: int) -> None:
        """Running attempts get one lease of grace from now for their workers to reconnect; the
        claims running now are `inherited` until their workers say what became of them."""
        self.took_over_ms = self.faults.lease_grace_from(now)
        self.claiming.clear()
        self.waiting.clear()
        self.unserved.clear()
        self._survey_unserved = {}
        self._next_full_pass_ms = 0
        self._reap_cursor = None
        self._last_step_ms = 0           # a stall is measured while leading, not since it last led
        self._survey, self._cursor, self._survey_classes, self._survey_waiting = None, None, set(), {}
        with self.node.lock:
            running = [ex.attempts[-1] for ex in self.view.running()]
        self.book.inherit({a.fencing_token: a.worker for a in running})

    def step(self, now: int) -> None:
        """One pass, called by the dispatcher only while this node leads the current epoch.

        The term stamped on every entry proposed from this pass is the epoch read now, when the
        decision is made, never `node.term` read later inside a coroutine: a leader paused past
        an election resumes with pysyncobj already at the new term while it still believes it
        leads, and its stale decisions, stamped with the new term, would be forwarded to the new
        leader and pass the term check (found by tests/jepsen_like: a deposed leader expired
        attempts of a healthy worker)."""
        self.term = self.view.epoch
        if self._last_step_ms and now - self._last_step_ms > self.hub.lease_ms // 2:
            # This loop (or the clock) stalled: heartbeats that arrived meanwhile are not
            # processed yet. Grant running attempts a lease, as after a takeover.
            log.warning("leader loop stalled or clock jumped %d ms: lease grace for running attempts",
                        now - self._last_step_ms)
            self.took_over_ms = now
        self._last_step_ms = now
        self.hub.drop_silent(now)
        self._assign(now)
        with self.node.lock:
            self.load.measure(self.view, now, self.unserved)
        # Leases are seconds long: no need to look every step; but while claims inherited from
        # an earlier leader are unsettled, every step (one never started runs again at once),
        # and a round that stopped at REAP_SLICE goes on at the next step.
        if now >= self._next_reap_ms or self.book.inheriting() or self._reap_cursor is not None:
            self._reap(now)
            if self._reap_cursor is None:              # a round ended: the next in reap_ms
                self._next_reap_ms = now + reap_ms(self.hub.lease_ms)

    # ------------------------------------------------------------ claims

    def _capacity(self, now: int) -> list[Capacity]:
        """Each live worker's free slots, pool, labels and the teams its token serves."""
        live = [c for c in self.hub.conns.values() if self.hub.live(c, now)]
        room = share_ahead([c.ahead_free() for c in live], AHEAD_IN_FLIGHT - len(self.claiming))
        out = []
        for c, ahead in zip(live, room):
            free = max(0, c.free_slots())
            if free > 0 or ahead > 0:
                serves = None if c.principal is None else partial(_may_serve, c.principal, c.pool)
                out.append(Capacity(c.name, free, c.pool, c.labels, len(c.running) + c.reserved, serves, ahead,
                                    c.kinds))
        return out

    def _ahead_ms(self, workers: list[Capacity]) -> int:
        """How far ahead runs may be claimed into workers' ahead places: as far as a burst's
        intents are recorded ahead (a herd is claimed and pushed as soon as its intents commit),
        when a worker has room for runs not yet due; else 0 (the lookahead only)."""
        if not any(w.ahead > 0 for w in workers):
            return 0
        return herd_window_ms(self.node.cfg.scheduler.burst_lookahead_ms)

    def _assign(self, now: int) -> None:
        """Claim what may start, skip what must not run, and say why the rest waits: the
        decision is `schedd.leader.assignment.decide`, which also places each claim on a
        worker; this pushes each claim to it.

        Thousands of runs may wait (a herd, no worker in their pool, a quota): looking at all of
        them every step would starve the event loop. So a step looks only as far as there are
        free slots to fill, at most SCAN_LIMIT runs, oldest due first (the serving order while
        every waiting run is of one serving class, as the last full pass saw; else it sorts),
        resuming after the last run it looked at when it stopped at the limit. A full pass
        (every run: skips by deadline or overlap, waiting reasons, the serving classes) runs
        every FULL_PASS_MS, or less often when it is long, so it takes at most 1/FULL_PASS_SHARE
        of the loop's time."""
        full = now >= self._next_full_pass_ms
        if not full and not self.view.ready_count():
            self._cursor = None         # nothing waits for a claim: what a pass would conclude
            return
        workers = self._capacity(now)
        free = sum(w.free + w.ahead for w in workers)
        ahead_ms = self._ahead_ms(workers)
        horizon = max(self.lookahead_ms, ahead_ms)
        if not full and free <= 0:
            return
        in_flight = InFlight(self.claiming, self.skipping)
        lazy = not full and len(self._classes) <= 1
        with self.node.lock:
            started = time.perf_counter()
            # A full pass over a herd would hold the node lock (and so the apply thread) for
            # seconds: past SURVEY_LIMIT waiting runs it looks at SURVEY_LIMIT of them in due
            # order per pass, resuming after the last (a survey in rounds).
            survey = full and (self._survey is not None or self.view.ready_count() > SURVEY_LIMIT)
            items: Iterable[Candidate] | None
            if survey:
                items = in_due_order(self.view, now, horizon, self.claiming, after=self._survey)
            elif full:
                items = None
            elif lazy:
                items = in_due_order(self.view, now, horizon, self.claiming, after=self._cursor)
            else:
                items = candidates(self.view, now, horizon, self.claiming)
            limit = SURVEY_LIMIT if survey else 0 if full else SCAN_LIMIT
            pace = Pace(self.lookahead_ms, full=full, catchup_rate=self.catchup_rate,
                        catchup_next_ms=self._catchup_next_ms, workers=bool(self.hub.conns), scan_limit=limit,
                        ahead_ms=ahead_ms, kinds=frozenset().union(*(c.kinds for c in self.hub.conns.values())),
                        pools=frozenset(c.pool for c in self.hub.conns.values()))
            d = decide(self.view, now, workers, in_flight, pace, items)
            claims = [(c, self._specs.get(c.row)) for c in d.claims]
            spent_ms = (time.perf_counter() - started) * 1000
        self._catchup_next_ms = d.catchup_next_ms
        if full:
            self._next_full_pass_ms = now + max(FULL_PASS_MS, int(spent_ms * FULL_PASS_SHARE))
        if survey:
            more = d.looked >= SURVEY_LIMIT
            self._survey = d.last if more else None
            self._survey_classes |= d.classes
            self._survey_waiting.update(d.waiting)
            self.waiting.update(d.waiting)
            self._survey_unserved.update(d.unserved)
            self.unserved.update(d.unserved)
            if not more:                             # a round ended: what it saw is the truth
                self._classes, self._survey_classes = self._survey_classes, set()
                self.waiting, self._survey_waiting = self._survey_waiting, {}
                self.unserved, self._survey_unserved = self._survey_unserved, {}
            if more:
                self._next_full_pass_ms = now        # the round goes on at the next step
        elif full:
            self._classes = d.classes
            self.waiting = d.waiting                 # rebuilt each full pass: nothing stale lingers
            self.unserved = d.unserved
        else:
            if len(d.classes) > 1:
                self._classes = d.classes            # runs of another class appeared: sort from now on
            self.waiting.update(d.waiting)
            self.unserved.update(d.unserved)
        stopped_at_limit = lazy and d.looked >= SCAN_LIMIT and len(d.claims) < free
        self._cursor = d.last if stopped_at_limit else None
        if d.skips:
            self.skipping.update((n, t) for n, t, _ in d.skips)
            self.spawn(self._skip(d.skips, self.term))
        batch = []
        for c, spec in claims:
            conn = self.hub.conns[c.worker]
            conn.reserved += 1
            self.claiming[(c.job, c.scheduled_ms)] = c.holds
            batch.append((conn, c, spec))
        for chunk in claim_chunks(batch):
            self.spawn(self._claim_many(chunk, self.term))

    async def _skip(self, items: list[tuple[str, int, str]], term: int) -> None:
        entry = C.encode(C.SKIP, rid="", now=self.clock.now_ms(), term=term,
                         by=self.node.cfg.node_id, items=items)
        try:
            result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
            if result.ok and self.metrics is not None:
                self.metrics.skipped.inc(sum(1 for *_, code in result.of(R.Items).items if code == "skipped"))
        except ProposalError as e:
            log.info("skip of %d executions not confirmed: %s", len(items), e)
        finally:
            self.skipping.difference_update((n, t) for n, t, _ in items)

    async def _claim_many(self, chunk: list[tuple[WorkerConn, Claim, JobSpec]], term: int) -> None:
        """Propose the claims of one step in one `start_many` entry (one commit, one apply, one
        journal record for all of them), then settle each claim from its own share of the result."""
        items = [{"job": c.job, "scheduled_ms": c.scheduled_ms, "attempt": c.attempt, "worker": conn.name,
                  "worker_incarnation": conn.incarnation, "created": c.created} for conn, c, _ in chunk]
        if not features.enabled(self.node.state, C.START_MANY):
            # Mid rolling upgrade (a voter's build predates start_many): one `start` per claim.
            await asyncio.gather(*(self._claim(conn, c.job, c.scheduled_ms, c.attempt, c.due, spec, term,
                                               self._propose_one(C.START, f"start-{c.job}@{c.scheduled_ms}"
                                                                 f"#{c.attempt}.{c.created}", term, **item))
                                   for (conn, c, spec), item in zip(chunk, items)))
            return
        entry = C.encode(C.START_MANY, rid="", now=self.clock.now_ms(), term=term, by=self.node.cfg.node_id,
                         claims=items)
        if self._claim_hooked:          # the fault suite's claim hook sees each claim on its own
            proposal = asyncio.ensure_future(self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S))

            async def share(k: int) -> ApplyResult:
                result = await asyncio.shield(proposal)
                return result if not result.ok else result.of(R.ClaimedMany).claims[k]

            await asyncio.gather(*(self._claim(conn, c.job, c.scheduled_ms, c.attempt, c.due, spec, term, share(k))
                                   for k, (conn, c, spec) in enumerate(chunk)))
        else:
            # One await for the entry, then every claim settled in one loop: a task and a
            # shielded future per claim were a third of the leader's cost of claiming a herd.
            error: ProposalError | None = None
            shares: Sequence[ApplyResult]
            try:
                result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
            except ProposalError as e:
                error, shares = e, [UNKNOWN] * len(chunk)
            except BaseException:       # cancelled (leadership lost): the places are free again
                for conn, c, _ in chunk:
                    self._release(conn, c.job, c.scheduled_ms)
                raise
            else:
                shares = result.of(R.ClaimedMany).claims if result.ok else [result] * len(chunk)
            for (conn, c, spec), own in zip(chunk, shares):
                self._settle_claim(conn, c.job, c.scheduled_ms, c.attempt, c.due, spec, term, own, error)
        self.hub.on_change()            # claims settled: room for the next (ahead places in flight)

    async def _propose_one(self, kind: str, rid: str, term: int, **args: Any) -> ApplyResult:
        entry = C.encode(kind, rid=rid, now=self.clock.now_ms(), term=term, by=self.node.cfg.node_id, **args)
        return await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)

    async def _claim(self, conn: WorkerConn, name: str, t: int, attempt: int, due: int, spec: JobSpec,
                     term: int, proposal: Awaitable[ApplyResult]) -> None:
        """`proposal` settles with this claim's result (one share of a start_many entry's)."""
        error: ProposalError | None = None
        answer = ClaimAnswer(UNKNOWN)
        try:
            answer = await self.faults.claim(proposal, self, conn, name, t, attempt, due, spec)
        except ProposalError as e:
            error = e
        except BaseException:
            self._release(conn, name, t)
            raise
        self._settle_claim(conn, name, t, attempt, due, spec, term, answer.result, error, pushed=answer.pushed)

    def _params(self, name: str, t: int) -> dict[str, str]:
        """The run parameters recorded on execution (name, t), for its assignment."""
        with self.node.lock:
            ex = self.view.execution(name, t)
            events = ex.events if ex is not None else ()
        return run_params.of_events(events) if events else {}

    def _release(self, conn: WorkerConn, name: str, t: int) -> None:
        conn.reserved -= 1
        self.claiming.pop((name, t), None)

    def _settle_claim(self, conn: WorkerConn, name: str, t: int, attempt: int, due: int, spec: JobSpec,
                      term: int, result: ApplyResult, error: ProposalError | None, *,
                      pushed: bool = False) -> None:
        """A claim's proposal settled (`error` when it was not confirmed): free its reservation
        and, when it committed, push its assignment to the worker (unless `pushed` already: an
        unsafe switch of the fault suite did, before the commit)."""
        self._release(conn, name, t)
        if error is not None:
            log.info("claim of %s attempt %d not confirmed: %s", execution_id(name, t), attempt, error)
            return
        if not result.ok:
            return
        token = result.of(R.Claimed).token
        self.faults.claimed(token, name, t, conn.name)
        eid = execution_id(name, t)
        if conn.closed:
            if pushed:                  # it may have reached the worker: the lease rule
                self.book.vouch(token, self.clock.now_ms())
                return
            # Its stream ended before the claim committed, so its assignment was never sent
            # (nothing else sends one): no process can be running it. Run it again now, not
            # after a lease as a second attempt (a worker saying hello again ends a stream
            # while its claims are in flight).
            self.book.start_expiry(token)
            self.spawn(self._expire(name, t, token, "LOST", f"the stream of worker {conn.name} ended "
                                    "before its assignment was sent: never started", term, never_started=True))
            return
        self.book.hold(conn, token, eid, self.clock.now_ms())
        if pushed:
            return
        try:
            secret_env = open_secrets(spec.env_secret, self.sealer, name)
        except SecretError as e:        # never run it without them: fail the attempt instead
            log.error("%s: %s", eid, e)
            self.on_result(conn, pb.AttemptResult(execution_id=eid, fencing_token=token,
                                                  state="FAILED", error=str(e)))
            return
        self.hub.send(conn, pb.LeaderMessage(assignment=pb.Assignment(
            execution_id=eid, job=name, scheduled_ms=t, attempt=attempt, fencing_token=token,
            term=term, due_ms=self.faults.due(self.clock, due),
            handler_json=handler_json(spec.handler), timeout_seconds=float(spec.timeout_seconds),
            labels=dict(spec.labels), team=spec.team, secret_env=secret_env, limits=_limits(spec.limits),
            params=self._params(name, t))))
        self.faults.assignment_pushed(self.node, token, name, t, conn.name)

    # ------------------------------------------------------------ results

    def on_result(self, conn: WorkerConn, r: pb.AttemptResult) -> None:
        self.faults.result_arrived(r.fencing_token)
        # It reported (the usual rules apply to an inherited claim now), and a result is news:
        # the attempt stays alive until its finish is committed. Dropping it here let the
        # reaper expire an attempt claimed more than a lease ago (a herd claimed ahead) while
        # its result was on the way to the log: the expiry committed first and the run ran twice.
        self.book.result_arrived(r.fencing_token, self.clock.now_ms())
        try:
            name, t = parse_execution_id(r.execution_id)
        except ValidationError:
            self.hub.send(conn, pb.LeaderMessage(ack=pb.ResultAck(fencing_token=r.fencing_token, outcome="stale")))
            self.book.no_news(r.fencing_token)
            return
        if not self.book.begin_settling(r.fencing_token):
            # a copy the worker resent because the first went unacknowledged for a lease (the
            # log is slow: an overload): the first is still being committed and acknowledged,
            # and a second `finish` would only add to the load
            return
        token = self.faults.finish_token(self.node, name, t, r.fencing_token)
        self._results.append((conn, r, {
            "job": name, "scheduled_ms": t, "token": token, "worker": conn.name, "state": r.state,
            "exit_code": r.exit_code, "http_status": r.http_status, "error": r.error[:2048],
            "output_tail": r.output_tail[-4096:], "started_ms": r.started_ms, "ended_ms": r.ended_ms}))
        if len(self._results) == 1:     # the results of this loop pass go in one entry
            # the epoch of the decision to commit them, read now (see step), never node.term later
            self.spawn(self._flush_results(self.view.epoch))
        self.hub.on_change()            # a slot is free: the dispatcher's next step fills it now,
                                        # not at its idle tick (the wake-ups of one burst coalesce)

    async def _flush_results(self, term: int) -> None:
        await asyncio.sleep(0)          # let the results that arrived in this loop pass join
        batch, self._results = self._results, []
        for chunk in result_chunks(batch):
            self.spawn(self._commit_results(chunk, term))

    async def _commit_results(self, chunk: list[tuple[WorkerConn, pb.AttemptResult, dict]], term: int) -> None:
        """Commit many workers' results in one `finish_many` entry and acknowledge each with its
        own outcome. A proposal whose fate is unknown is proposed again (apply answers a result
        it already recorded as deduplicated); after FINISH_TRIES, no ack: the worker resends
        after its next reconnect."""
        if not features.enabled(self.node.state, C.FINISH_MANY):
            # Mid rolling upgrade (a voter's build predates finish_many): one `finish` per result.
            await asyncio.gather(*(self._finish_many([one], term, single=True) for one in chunk))
            return
        await self._finish_many(chunk, term)

    async def _finish_many(self, chunk: list[tuple[WorkerConn, pb.AttemptResult, dict]], term: int, *,
                           single: bool = False) -> None:
        if single:
            (_, r, item), = chunk
            entry = C.encode(C.FINISH, rid=f"finish-{r.fencing_token}", now=self.clock.now_ms(), term=term,
                             by=str(item["worker"]), **item)
        else:
            entry = C.encode(C.FINISH_MANY, rid="", now=self.clock.now_ms(), term=term, by=self.node.cfg.node_id,
                             results=[item for _, _, item in chunk])
        result = None
        try:
            for _ in range(FINISH_TRIES):
                try:
                    result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
                    break
                except ProposalError as e:
                    log.info("%d results not confirmed (%s); retrying", len(chunk), e)
        finally:
            for _, r, _ in chunk:        # settled (or given up: the worker resends it)
                self.book.result_settled(r.fencing_token)
        if result is None:
            return
        outcomes: Sequence[ApplyResult] = ([result] * len(chunk) if single or not result.ok
                                           else result.of(R.FinishedMany).results)
        for (conn, r, _), one in zip(chunk, outcomes):
            if one.ok:
                outcome = "committed"
            elif one.code is Code.STALE:
                outcome = "stale"
                log.warning("refused a stale result for %s from %s: %s", r.execution_id, conn.name, one.msg)
            else:
                outcome = one.code.value
            self.hub.send(conn, pb.LeaderMessage(ack=pb.ResultAck(fencing_token=r.fencing_token, outcome=outcome)))

    # ------------------------------------------------------------ leases, timeouts, cancels

    def _reap(self, now: int) -> None:
        """Expire what its worker stopped vouching for (LOST) or kept past its timeout, resend
        cancels, cancel what a pause caught before it was due: REAP_SLICE running attempts per
        call, oldest scheduled first, the next call resuming after the last (a round; the next
        round starts `reap_ms` after one ends). A round over 100,000 held ahead takes 50 steps,
        well within a lease; one walk over all of them, every 250 ms, held the node lock
        for 0.2 s each time."""
        lease = self.hub.lease_ms
        expire: list[tuple[str, int, int, str, str]] = []
        unstarted: list[tuple[str, int, int, str]] = []
        cancels: list[tuple[int, str]] = []
        paused: list[tuple[str, int, int]] = []
        view, book = self.view, self.book
        with self.node.lock:
            looked = view.running_after(self._reap_cursor, REAP_SLICE)
            any_paused = view.any_paused()
            self._reap_cursor = (looked[-1].scheduled_ms, looked[-1].job) if len(looked) >= REAP_SLICE else None
            for ex in looked:
                name, t = ex.job, ex.scheduled_ms
                a = ex.attempts[-1]
                token = a.fencing_token
                rec = book.get(token)
                if rec is not None and rec.expiring:
                    continue
                if rec is not None and rec.inherited:
                    conn = self.hub.conns.get(a.worker)
                    claimed_for = getattr(a, "worker_incarnation", "")
                    fate = inherited_claim_fate(reconnected=conn is not None and not conn.closed,
                                                same_process=conn is not None and bool(claimed_for)
                                                and conn.incarnation == claimed_for,
                                                reported=conn is not None and conn.reported,
                                                holds=conn is not None and token in conn.running)
                    if fate == NOT_HELD:
                        unstarted.append((name, t, token, f"worker {a.worker} reconnected to the new "
                                                          "leader without it: never started"))
                        continue
                    if fate == HELD:
                        book.settle_inherited(token)
                vouched = rec.vouched_ms if rec is not None else 0
                seen = max(vouched, a.started_ms, self.took_over_ms)
                # the spec (its timeout) only once a timeout could have passed: a herd held
                # ahead is tens of thousands of running attempts, and parsing each spec on every
                # reap (the spec cache holds 10,000) took a fifth of the leader's time
                since = max(a.started_ms, ex.due) + WORKER_KILL_GRACE_MS + lease
                job = view.job(name) if now > since else None
                timeout_ms = int(self._specs.get(job).timeout_seconds * 1000) if job else 0
                if now - seen > lease and not self.hub.vouches(a.worker, token, seen, now):
                    expire.append((name, t, token, "LOST",
                                   f"worker {a.worker} lost: no news for {lease / 1000:g}s"))
                elif timeout_ms and now > since + timeout_ms:
                    expire.append((name, t, token, "TIMED_OUT",
                                   f"exceeded its timeout of {timeout_ms / 1000:g}s and the worker did not report"))
                elif ex.cancel_requested and now - (rec.cancel_sent_ms if rec is not None else 0) > CANCEL_RESEND_MS:
                    cancels.append((token, ex.id))
                elif (any_paused and paused_before_due(view.job(name), ex, now)
                      and not (rec is not None and rec.pause_cancelling)):
                    paused.append((name, t, token))
        for name, t, token, outcome, reason in expire:
            book.start_expiry(token)
            self.spawn(self._expire(name, t, token, outcome, reason, self.term))
        for name, t, token, reason in unstarted:
            book.start_expiry(token)
            book.settle_inherited(token)
            self.spawn(self._expire(name, t, token, "LOST", reason, self.term, never_started=True))
        for token, eid in cancels:
            self.push_cancel(token, eid)
        for name, t, token in paused:
            book.start_pause_cancel(token)
            self.spawn(self._cancel_paused(name, t, token, self.term))

    async def _expire(self, name: str, t: int, token: int, outcome: str, reason: str, term: int,
                      never_started: bool = False) -> None:
        extra = {"never_started": True} if never_started else {}
        entry = C.encode(C.EXPIRE, rid=f"expire-{token}", now=self.clock.now_ms(), term=term,
                         by=self.node.cfg.node_id, job=name, scheduled_ms=t, token=token,
                         outcome=outcome, reason=reason, **extra)
        try:
            result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
            if result.ok:
                done = result.of(R.Finished)
                log.warning("expired %s attempt token %d: %s -> %s", execution_id(name, t), token, reason,
                            done.state)
                if self.metrics is not None:        # LOST: an at_most_once attempt never re-run
                    label = "never_started" if done.never_started else done.state
                    self.metrics.attempts_expired.labels(label).inc()
                self.book.expired(token)
        except ProposalError as e:
            log.info("expiry of token %d not confirmed: %s", token, e)
        finally:
            self.book.end_expiry(token)

    async def _cancel_paused(self, name: str, t: int, token: int, term: int) -> None:
        """Its job was paused while the attempt waited, claimed ahead, for its due time: cancel
        it through the log as `schedctl run cancel` would (the rule: a pause inside the window
        cancels the pushed assignment), so the instant ends CANCELLED and never starts."""
        entry = C.encode(C.CANCEL, rid=f"pause-cancel-{token}", now=self.clock.now_ms(), term=term,
                         by=self.node.cfg.node_id, job=name, scheduled_ms=t)
        try:
            result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
            if result.ok:
                log.info("job %s paused: cancelled %s, claimed ahead and not due yet", name,
                         execution_id(name, t))
        except ProposalError as e:
            log.info("cancel of paused %s not confirmed: %s", execution_id(name, t), e)
        finally:
            self.book.end_pause_cancel(token)

    def push_cancel(self, token: int, eid: str) -> None:
        conn = self.hub.holder(token)
        if conn is not None:
            self.book.cancel_pushed(token, self.clock.now_ms())
            self.hub.send(conn, pb.LeaderMessage(cancel=pb.CancelAttempt(execution_id=eid, fencing_token=token)))

    def waiting_reason(self, name: str, t: int) -> str:
        return self.waiting.get((name, t), "")
