"""The assignment decision, as a pure function of what the leader knows at one instant:

    decide(view, now, workers, in flight, pace) -> Decision(claims, skips, waiting)

For each execution that may start by now + lookahead, in serving order (the normal lane before
backfill, higher priority first, then oldest due first): skip it (overlap skip, starting
deadline), let it wait saying why (overlap queue, max_active, concurrency key, quota, no free
slot, no free slot on a worker that may run it, the catch-up rate), or claim it on a worker.
`policy.blocked` is the rule; apply checks it again at the claim. Claims already proposed but
not applied (`InFlight.claiming`) count as running.

Placement is part of the decision: each worker's free slots are a `Capacity` (its pool, labels
and which teams its token serves), and a claim is placed on an eligible worker (the one running
the fewest first, as WorkerHub.eligible orders them). A run that no free worker may take waits
and the runs behind it are still looked at: counting claims against the total of free slots let
old runs of an unserved pool block later runs that a free worker could serve.

Ahead places (for a herd: many runs due at one instant): a worker that holds assignments not yet due beyond its slots
(WorkerHello.ahead) offers them as `Capacity.ahead`; a run may take one, up to
`Pace.ahead_ms` before its due time (the burst lookahead, when the herd's intents are recorded),
so a herd's claims are committed and pushed before its instant and at the instant only the
workers' timers are left. A run already due takes a free slot while one is left anywhere, else an
ahead place too: the worker starts what waits there oldest due first, so a backlog past due is
served before the runs behind it (it was never claimed, when only free slots could take it).

Pure: no clock (now is an argument), no I/O, nothing changed; the catch-up pacing it needs comes
in (`Pace.catchup_next_ms`) and goes out (`Decision.catchup_next_ms`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from schedd.core.model import SCHEDULED, Execution, Job
from schedd.core.policy import BACKFILL, JobPolicy
from schedd.core.view import StateView

ExecKey = tuple[str, int]
Candidate = tuple[int, Execution, Job]          # (due, execution, job)
ServeClass = tuple[bool, int]                   # (backfill lane, -priority): the serving order's head


@dataclass(slots=True, frozen=True)
class InFlight:
    """Decisions proposed and not applied yet: they must not be taken twice."""

    claiming: Mapping[ExecKey, tuple[str, ...]] = field(default_factory=dict)  # -> quota keys held
    skipping: Collection[ExecKey] = frozenset()


@dataclass(slots=True, frozen=True)
class Pace:
    """How far and how much to look."""

    lookahead_ms: int
    full: bool = True                 # look at every waiting run (skips, waiting reasons), not
                                      # only as far as there are free slots
    catchup_rate: float = 1.0         # catch-up runs started per second, at most
    catchup_next_ms: float = 0.0      # when the next catch-up run may start
    workers: bool = True              # a worker is connected (for the waiting reason)
    scan_limit: int = 0               # look at most at this many runs (0 = no limit)
    ahead_ms: int = 0                 # runs due by now + this may be claimed into workers' ahead
                                      # queues (Capacity.ahead); 0: only within the lookahead
    kinds: frozenset[str] | None = None   # handler kinds some connected worker runs (None: any)
    pools: frozenset[str] | None = None   # pools some connected worker serves (None: any)

    @property
    def horizon_ms(self) -> int:
        """How far ahead a run may be claimed at all."""
        return max(self.lookahead_ms, self.ahead_ms)


# What a worker that sends no handler list (WorkerHello.handlers, older than containers) runs.
OLD_WORKER_KINDS = frozenset({"shell", "http", "python", "sensor"})


def worker_kinds(advertised: Sequence[str]) -> frozenset[str]:
    """The handler kinds a worker runs, from its hello: an empty list is an older worker's."""
    return frozenset(advertised) if advertised else OLD_WORKER_KINDS


@dataclass(slots=True, frozen=True)
class Capacity:
    """One worker's free slots as the decision sees them."""

    name: str
    free: int
    pool: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    load: int = 0                                  # attempts running or being claimed there
    serves: Callable[[str], bool] | None = None    # team -> its token may serve it (None: any)
    ahead: int = 0                                 # more, once the free slots are taken: the
                                                   # worker holds them until due and a slot is free
    kinds: frozenset[str] = OLD_WORKER_KINDS       # handler kinds it runs (WorkerHello.handlers)

    def takes(self, policy: JobPolicy) -> bool:
        """Whether this worker may run an attempt of a job with `policy` (pool, labels, team)."""
        if policy.pool and self.pool != policy.pool:
            return False
        if any(self.labels.get(k) != v for k, v in policy.worker_labels):
            return False
        if policy.handler and policy.handler not in self.kinds:
            return False
        return self.serves is None or self.serves(policy.team)


def anywhere(free: int) -> list[Capacity]:
    """`free` slots on one worker that takes anything (tests, and callers without workers)."""
    return [Capacity("", free)] if free > 0 else []


@dataclass(slots=True, frozen=True)
class Claim:
    due: int
    job: str
    scheduled_ms: int
    attempt: int
    created: int                      # the log index that recorded the execution
    row: Job
    holds: tuple[str, ...]
    worker: str = ""                  # the Capacity it was placed on


@dataclass(slots=True)
class Decision:
    claims: list[Claim] = field(default_factory=list)
    skips: list[tuple[str, int, str]] = field(default_factory=list)   # (job, scheduled_ms, reason)
    waiting: dict[ExecKey, str] = field(default_factory=dict)
    unserved: dict[ExecKey, tuple[int, str]] = field(default_factory=dict)   # -> (due, pool) no worker serves
    catchup_next_ms: float = 0.0
    classes: set[ServeClass] = field(default_factory=set)   # serving classes of the runs looked at
    looked: int = 0                   # runs looked at
    last: tuple[int, str, int] | None = None   # the ready key of the last one (a scan's cursor)


def serve_class(view: StateView, ex: Execution, job: Job) -> ServeClass:
    return (ex.lane == BACKFILL, -view.policy(job).priority)


def candidates(view: StateView, now: int, lookahead_ms: int,
               claiming: Mapping[ExecKey, object]) -> list[Candidate]:
    """(due, execution, job) of executions that may start by now + lookahead, in serving order."""
    out = []
    for due, ex, job in in_due_order(view, now, lookahead_ms, claiming):
        out.append(((*serve_class(view, ex, job), due, ex.job, ex.scheduled_ms), due, ex, job))
    out.sort(key=lambda c: c[0])
    return [(due, ex, job) for _, due, ex, job in out]


def in_due_order(view: StateView, now: int, lookahead_ms: int, claiming: Mapping[ExecKey, object],
                 after: tuple[int, str, int] | None = None) -> Iterator[Candidate]:
    """The same executions lazily, oldest due first (after the ready key `after`, if given):
    the serving order whenever every ready run is of one serving class, the usual case."""
    for due, name, t in view.ready_until(now + lookahead_ms, after=after):
        job = view.job(name)
        ex = view.execution(name, t)
        if job is None or ex is None or job.paused or (name, t) in claiming:
            continue
        yield due, ex, job


def _unrunnable(policy: JobPolicy, kinds: frozenset[str] | None) -> str | None:
    """Why no connected worker could ever run it (its handler kind), or None."""
    if policy.handler and kinds is not None and policy.handler not in kinds:
        return f"waiting: no worker can run {policy.handler} jobs"
    return None


def unserved_pool(policy: JobPolicy, pools: frozenset[str] | None) -> str:
    """The pool of a run that no connected worker serves ("" if some does, or it needs none):
    such a run waits for an operator, not for capacity, and is counted apart from the backlog."""
    if policy.pool and pools is not None and policy.pool not in pools:
        return policy.pool
    return ""


def unserved_reason(pool: str) -> str:
    return f"waiting: no connected worker serves pool {pool!r}"


def _no_worker_reason(policy: JobPolicy, kinds: frozenset[str] | None = None) -> str:
    unrunnable = _unrunnable(policy, kinds)
    if unrunnable:
        return unrunnable
    where = [f"in pool {policy.pool!r}"] if policy.pool else []
    where += [f"with labels {','.join(f'{k}={v}' for k, v in policy.worker_labels)}"] \
        if policy.worker_labels else []
    return " ".join(["waiting for a free worker slot", *where])


class _Slots:
    """The free slots left while deciding, per worker, and the placement rule. A run takes a
    free slot while one is left, else a worker's ahead place (Capacity.ahead), whether it is due
    yet or not: the worker starts what waits there oldest due first as its slots free. (A run
    past due that only a free slot could take was never claimed while runs claimed ahead kept
    the workers above their slots: under a sustained overload a fifth of the instants.)"""

    __slots__ = ("workers", "free", "ahead", "placed", "total", "ahead_total")

    def __init__(self, workers: Sequence[Capacity]) -> None:
        self.workers = [w for w in workers if w.free > 0 or w.ahead > 0]
        self.free = {w.name: max(0, w.free) for w in self.workers}
        self.ahead = {w.name: max(0, w.ahead) for w in self.workers}
        self.placed = {w.name: 0 for w in self.workers}
        self.total = sum(self.free.values())
        self.ahead_total = sum(self.ahead.values())

    def usable(self, slot: bool) -> bool:
        """Whether any place is left for a run that may take a slot (`slot`) or an ahead place."""
        return (slot and self.total > 0) or self.ahead_total > 0

    def place(self, policy: JobPolicy, slot: bool = True) -> str | None:
        """The eligible worker with room running the fewest (then most free, then by name), a
        free slot taken if `slot` (the run is due within the lookahead) and one is left, else an
        ahead place; None if no worker with room may run it."""
        best: Capacity | None = None
        best_key: tuple[int, int, str] | None = None
        for w in self.workers:
            free = self.free[w.name] if slot else 0
            if (free <= 0 and self.ahead[w.name] <= 0) or not w.takes(policy):
                continue
            key = (w.load + self.placed[w.name], -free, w.name)
            if best_key is None or key < best_key:
                best, best_key = w, key
        if best is None:
            return None
        if slot and self.free[best.name] > 0:
            self.free[best.name] -= 1
            self.total -= 1
        else:
            self.ahead[best.name] -= 1
            self.ahead_total -= 1
        self.placed[best.name] += 1
        return best.name


def decide(view: StateView, now: int, workers: Sequence[Capacity] | int, in_flight: InFlight, pace: Pace,
           items: Iterable[Candidate] | None = None) -> Decision:
    """See the module docstring. `workers`: each worker's free slots (an int: that many slots
    on a worker that takes anything). `items`: the runs to look at, in the order to serve them
    (default: every candidate, sorted). The caller holds the node lock (the view reads the state)."""
    slots = _Slots(anywhere(workers) if isinstance(workers, int) else workers)
    d = Decision(catchup_next_ms=pace.catchup_next_ms)
    extra_active: dict[str, int] = {}
    extra_held: dict[str, int] = {}

    def count(name: str, holds: tuple[str, ...]) -> None:
        extra_active[name] = extra_active.get(name, 0) + 1
        for key in holds:
            extra_held[key] = extra_held.get(key, 0) + 1

    for (name, _), holds in in_flight.claiming.items():
        count(name, holds)
    if items is None:
        items = candidates(view, now, pace.horizon_ms, in_flight.claiming)
    for due, ex, job in items:
        if (pace.scan_limit and d.looked >= pace.scan_limit) or \
                (not pace.full and not slots.usable(True)):
            break                   # no slot and no ahead place left: a scan stops there
        d.looked += 1
        name, t = ex.job, ex.scheduled_ms
        d.last = (due, name, t)
        slot = due <= now + pace.lookahead_ms     # may take a free slot; any run, an ahead place
        if not slot and slots.ahead_total <= 0:
            continue                # beyond the lookahead, and no worker holds runs ahead: later
        policy = view.policy(job)
        d.classes.add((ex.lane == BACKFILL, -policy.priority))
        fresh = ex.state == SCHEDULED and not ex.attempts
        if (fresh and policy.deadline_ms and ex.trigger in ("schedule", "catchup")
                and now > due + policy.deadline_ms):
            if (name, t) not in in_flight.skipping:
                d.skips.append((name, t, f"deadline: not started within its starting deadline of "
                                         f"{policy.deadline_ms / 1000:g}s"))
            continue
        if pace.workers and (pool := unserved_pool(policy, pace.pools)):
            d.unserved[(name, t)] = (due, pool)
            d.waiting[(name, t)] = unserved_reason(pool)
            continue
        why = view.blocked(ex, policy, extra_active.get(name, 0), extra_held)
        if why:
            if (policy.overlap == "skip" and why.startswith("overlap") and fresh and due <= now
                    and ex.lane != BACKFILL and (name, t) not in in_flight.skipping):
                d.skips.append((name, t, why))
            d.waiting[(name, t)] = f"waiting: {why}"
            continue
        if not slots.usable(slot):
            d.waiting[(name, t)] = ("waiting: no worker is connected" if not pace.workers
                                    else _unrunnable(policy, pace.kinds) or "waiting for a free worker slot")
            continue
        catchup = ex.trigger == "catchup" and not ex.attempts
        if catchup and now < d.catchup_next_ms:
            d.waiting[(name, t)] = f"waiting: catch-up runs start at most {pace.catchup_rate:g}/s"
            continue
        worker = slots.place(policy, slot)
        if worker is None:          # no free worker may run it: it waits, the runs behind it don't
            d.waiting[(name, t)] = _no_worker_reason(policy, pace.kinds)
            continue
        if catchup:
            d.catchup_next_ms = now + 1000 / pace.catchup_rate
        holds = policy.holds(ex.lane)
        d.claims.append(Claim(due, name, t, len(ex.attempts) + 1, ex.log_index, job, holds, worker))
        count(name, holds)
    return d
