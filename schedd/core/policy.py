"""Per-job scheduling policies and the admission rule that applies them.

A job's policies (overlap, concurrency key, catch-up, starting deadline, jitter, priority,
quotas' keys, retention) live in its canonical spec. `SchedulerState.policy(job)` reads them
once per spec template (a `TemplateCache`: jobs differing only by name share one). `blocked(state, ex, policy)` is the one rule that says whether an execution may start
now; the leader's assigner asks it before it claims, and apply asks it again when the claim
commits, so claims racing each other can never exceed a limit. Both are pure.
"""

from __future__ import annotations

import hashlib
from itertools import islice
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar
from collections.abc import Callable

from schedd.core.model import SPEC_NAME_MARK, Execution, Job
from schedd.core.specs import JobHead, JobSpec

T = TypeVar("T")


class Counters(Protocol):
    """What `blocked` reads of the state (schedd.core.tables.Tables)."""

    quotas: dict[str, int]
    shares: dict[str, tuple[int, int]]
    held: dict[str, int]

    def active_count(self, name: str) -> int: ...

    def active_desc(self, name: str) -> str: ...

DEFAULT_QUEUE_LIMIT = 10
DEFAULT_BACKFILL_QUOTA = 2         # running backfill attempts cluster-wide unless set with a quota
BACKFILL = "backfill"
QUOTA_KINDS = ("team", "pool", "lane")


@dataclass(slots=True, frozen=True)
class JobPolicy:
    overlap: str = "allow"
    max_active: int = 0               # allow: 0 = unbounded
    queue_limit: int = DEFAULT_QUEUE_LIMIT
    concurrency_key: str = ""
    concurrency_limit: int = 1
    catchup: str = "all"
    catchup_window_ms: int = 0
    catchup_max: int = 0
    catchup_order: str = "newest"
    deadline_ms: int = 0              # starting deadline
    jitter_ms: int = 0
    priority: int = 0
    team: str = "default"
    pool: str = ""
    max_age_ms: int = 0
    worker_labels: tuple[tuple[str, str], ...] = ()   # a worker must carry all of them (sorted)
    handler: str = "shell"            # its handler's kind: a worker must advertise it (container)
    params: tuple[tuple[str, str], ...] = ()   # its runs' default parameters (sorted)
    calendar_skip: tuple[str, ...] = ()        # schedd.core.calendars
    calendar_only: tuple[str, ...] = ()
    on_skip: str = "skip"                      # skip | next_allowed
    on_blackout: str = "skip"                  # skip | defer
    window: tuple[str, ...] = ()               # (start, end) "HH:MM" (schedd.core.windows); () = none
    labels: tuple[tuple[str, str], ...] = ()   # its labels (sorted): what a blackout selects by

    @classmethod
    def from_spec(cls, spec: JobSpec) -> JobPolicy:
        """The spec's policies with their defaults filled in."""
        p = spec.policies
        return cls(overlap=p.overlap or "allow",
                   max_active=p.max_active,
                   queue_limit=p.queue_limit or DEFAULT_QUEUE_LIMIT,
                   concurrency_key=p.concurrency_key,
                   concurrency_limit=p.concurrency_limit or 1,
                   catchup=p.catchup or "all",
                   catchup_window_ms=_ms(p.catchup_window_seconds),
                   catchup_max=p.catchup_max,
                   catchup_order=p.catchup_order or "newest",
                   deadline_ms=_ms(p.starting_deadline_seconds),
                   jitter_ms=_ms(p.jitter_seconds),
                   priority=p.priority,
                   team=spec.team or "default",
                   pool=p.pool,
                   max_age_ms=_ms(p.history_max_age_seconds),
                   worker_labels=tuple(sorted(spec.worker_labels.items())) if spec.worker_labels else (),
                   handler=spec.handler_kind,
                   params=tuple(sorted(spec.params.items())) if spec.params else (),
                   calendar_skip=spec.calendar.skip if spec.calendar is not None else (),
                   calendar_only=spec.calendar.only if spec.calendar is not None else (),
                   on_skip=(spec.calendar.on_skip if spec.calendar is not None else "") or "skip",
                   on_blackout=spec.on_blackout or "skip",
                   window=(spec.window.start, spec.window.end) if spec.window is not None else (),
                   labels=tuple(sorted(spec.labels.items())) if spec.labels else ())

    @property
    def active_limit(self) -> int:
        """Runs of this job that may be active at once (0 = unbounded)."""
        return 1 if self.overlap in ("skip", "queue") else self.max_active

    def holds(self, lane: str) -> tuple[str, ...]:
        """The quota counters a running attempt of this job occupies."""
        keys = [f"team:{self.team}"]
        if self.pool:
            keys.append(f"pool:{self.pool}")
        if self.concurrency_key:
            keys.append(f"key:{self.concurrency_key}")
        if lane:
            keys.append(f"lane:{lane}")
        return tuple(keys)


def _ms(seconds: float) -> int:
    return int(round(float(seconds or 0) * 1000))


def jitter_offset_ms(name: str, jitter_ms: int) -> int:
    """Deterministic per job: the same offset at every instant and on every replica."""
    if jitter_ms <= 0:
        return 0
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % jitter_ms


def quota_limit(state: Counters, key: str) -> int | None:
    """The limit on a quota counter; None = unlimited. Concurrency keys carry theirs in the job.
    In a sharded cluster a group holding a share of the cluster's quota is limited by that share
    (schedd.core.quota_shares)."""
    share = state.shares.get(key)
    if share is not None:
        return share[1]
    limit = state.quotas.get(key)
    if limit is None and key == f"lane:{BACKFILL}":
        return DEFAULT_BACKFILL_QUOTA
    return limit


def blocked(state: Counters, ex: Execution, policy: JobPolicy,
            extra_active: int = 0, extra_held: dict[str, int] | None = None) -> str:
    """Why `ex` may not start now ("" = it may). `extra_*` count claims proposed but not yet
    applied (the assigner's view); apply passes none."""
    if ex.trigger != "forced":
        active_limit = policy.active_limit
        if active_limit:
            active = state.active_count(ex.job) + extra_active
            if ex.state != "SCHEDULED":        # a retry of its own counts itself as active
                active -= 1
            if active >= active_limit:
                return (f"overlap {policy.overlap}: {state.active_desc(ex.job)} still active"
                        if policy.overlap != "allow" else f"max_active {active_limit} reached")
    extra_held = extra_held or {}
    for key in policy.holds(ex.lane):
        kind, _, name = key.partition(":")
        limit: int | None = policy.concurrency_limit if kind == "key" else quota_limit(state, key)
        if limit is not None and state.held.get(key, 0) + extra_held.get(key, 0) >= limit:
            if kind == "key":
                return f"concurrency key {name!r} busy ({limit} running)"
            return f"{kind} quota {name!r} full ({limit} running)"
    return ""


def make_room(entries: dict[str, Any], limit: int) -> None:
    """At `limit` entries the older half goes (insertion order, deterministic): clearing
    everything made a herd of more jobs than `limit` re-parse every spec on every pass."""
    if len(entries) >= limit:
        for key in list(islice(entries, max(1, limit // 2))):
            del entries[key]


class VersionCache(Generic[T]):
    """Something derived from a job's spec (its policy), built once per job revision
    (incarnation and version: never the deleted job's under the same name). Bounded: past `limit`
    entries the older half is dropped, which costs one build per job seen again, where an entry
    kept for each of a million jobs would cost more than the job."""

    __slots__ = ("build", "limit", "_entries")

    def __init__(self, build: Callable[[Job], T], limit: int) -> None:
        self.build, self.limit = build, limit
        self._entries: dict[str, tuple[tuple[int, int], T]] = {}

    def get(self, job: Job) -> T:
        hit = self._entries.get(job.name)
        if hit is None or hit[0] != job.revision:
            make_room(self._entries, self.limit)
            hit = self._entries[job.name] = (job.revision, self.build(job))
        return hit[1]

    def forget(self, name: str) -> None:
        self._entries.pop(name, None)


class TemplateCache(Generic[T]):
    """Something derived from a job's spec that does not depend on the job's name, shared by
    every job made from one spec template (schedd.core.model.spec_template): a herd of 100,000
    jobs registered from one template builds it once, not once per job (parsing each job's spec
    was two fifths of recording an intent). A template in which the name stands anywhere but in
    the name field (a concurrency key or a label equal to the name) is name-dependent: those
    jobs are served per job revision (a VersionCache). Bounded like a VersionCache."""

    __slots__ = ("build", "limit", "_shared", "_own")

    def __init__(self, build: Callable[[JobSpec], T], limit: int) -> None:
        self.build, self.limit = build, limit
        self._shared: dict[str, T] = {}
        self._own: VersionCache[T] = VersionCache(lambda job: build(job.spec), limit)

    def get(self, job: Job) -> T:
        template = job.spec_t
        hit = self._shared.get(template)
        if hit is not None:
            return hit
        if template.count(SPEC_NAME_MARK) != 1:
            return self._own.get(job)
        make_room(self._shared, self.limit)
        hit = self._shared[template] = self.build(job.spec)
        return hit

    def seed(self, job: Job, head: JobHead) -> None:
        """Build a job's entry from the spec apply has just read for it (a put: `head`), unless
        its template has one: the job's first fire then reads no spec (reading one is most of a
        first intent's cost where every job's spec is its own). Jobs whose template is
        name-dependent are left to `get`."""
        template = job.spec_t
        if template in self._shared or template.count(SPEC_NAME_MARK) != 1:
            return
        make_room(self._shared, self.limit)
        self._shared[template] = self.build(head.spec())

    def forget(self, name: str) -> None:
        self._own.forget(name)


def policy_cache(limit: int = 100_000) -> TemplateCache[JobPolicy]:
    return TemplateCache(JobPolicy.from_spec, limit)
