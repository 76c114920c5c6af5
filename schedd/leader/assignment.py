"""The assignment decision, as a pure function of what the leader knows at one instant:

    decide(view, now, free slots, in flight, pace) -> Decision(claims, skips, waiting)

For each execution that may start by now + lookahead, in serving order (the normal lane before
backfill, higher priority first, then oldest due first): skip it (overlap skip, starting
deadline), let it wait saying why (overlap queue, max_active, concurrency key, quota, no free
slot, the catch-up rate), or claim it. `policy.blocked` is the rule; apply checks it again at the
claim. Claims already proposed but not applied (`InFlight.claiming`) count as running.

Pure: no clock (now is an argument), no I/O, nothing changed; the catch-up pacing it needs comes
in (`Pace.catchup_next_ms`) and goes out (`Decision.catchup_next_ms`). Which worker runs a claim
is the Assigner's business (schedd.leader.assigner): it knows the connections.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from schedd.core.model import SCHEDULED, Execution, Job
from schedd.core.policy import BACKFILL
from schedd.core.view import StateView

ExecKey = tuple[str, int]


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


@dataclass(slots=True, frozen=True)
class Claim:
    due: int
    job: str
    scheduled_ms: int
    attempt: int
    created: int                      # the log index that recorded the execution
    row: Job
    holds: tuple[str, ...]


@dataclass(slots=True)
class Decision:
    claims: list[Claim] = field(default_factory=list)
    skips: list[tuple[str, int, str]] = field(default_factory=list)   # (job, scheduled_ms, reason)
    waiting: dict[ExecKey, str] = field(default_factory=dict)
    catchup_next_ms: float = 0.0


def candidates(view: StateView, now: int, lookahead_ms: int,
               claiming: Mapping[ExecKey, object]) -> list[tuple[int, Execution, Job]]:
    """(due, execution, job) of executions that may start by now + lookahead, in serving order."""
    out = []
    for due, name, t in view.ready_until(now + lookahead_ms):
        job = view.job(name)
        ex = view.execution(name, t)
        if job is None or ex is None or job.paused or (name, t) in claiming:
            continue
        policy = view.policy(job)
        out.append(((ex.lane == BACKFILL, -policy.priority, due, name, t), due, ex, job))
    out.sort(key=lambda c: c[0])
    return [(due, ex, job) for _, due, ex, job in out]


def decide(view: StateView, now: int, free: int, in_flight: InFlight, pace: Pace) -> Decision:
    """See the module docstring. The caller holds the node lock (the view reads the state)."""
    d = Decision(catchup_next_ms=pace.catchup_next_ms)
    extra_active: dict[str, int] = {}
    extra_held: dict[str, int] = {}

    def count(name: str, holds: tuple[str, ...]) -> None:
        extra_active[name] = extra_active.get(name, 0) + 1
        for key in holds:
            extra_held[key] = extra_held.get(key, 0) + 1

    for (name, _), holds in in_flight.claiming.items():
        count(name, holds)
    for due, ex, job in candidates(view, now, pace.lookahead_ms, in_flight.claiming):
        if len(d.claims) >= free and not pace.full:
            break
        name, t = ex.job, ex.scheduled_ms
        policy = view.policy(job)
        fresh = ex.state == SCHEDULED and not ex.attempts
        if (fresh and policy.deadline_ms and ex.trigger in ("schedule", "catchup")
                and now > due + policy.deadline_ms):
            if (name, t) not in in_flight.skipping:
                d.skips.append((name, t, f"deadline: not started within its starting deadline of "
                                         f"{policy.deadline_ms / 1000:g}s"))
            continue
        why = view.blocked(ex, policy, extra_active.get(name, 0), extra_held)
        if why:
            if (policy.overlap == "skip" and why.startswith("overlap") and fresh and due <= now
                    and ex.lane != BACKFILL and (name, t) not in in_flight.skipping):
                d.skips.append((name, t, why))
            d.waiting[(name, t)] = f"waiting: {why}"
            continue
        if len(d.claims) >= free:
            d.waiting[(name, t)] = ("waiting: no worker is connected" if not pace.workers
                                    else "waiting for a free worker slot")
            continue
        if ex.trigger == "catchup" and not ex.attempts:
            if now < d.catchup_next_ms:
                d.waiting[(name, t)] = f"waiting: catch-up runs start at most {pace.catchup_rate:g}/s"
                continue
            d.catchup_next_ms = now + 1000 / pace.catchup_rate
        holds = policy.holds(ex.lane)
        d.claims.append(Claim(due, name, t, len(ex.attempts) + 1, ex.log_index, job, holds))
        count(name, holds)
    return d
