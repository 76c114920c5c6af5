"""The fakes every test uses in place of the real ports: one manual clock, one fake Raft node, one
metrics recorder, and the one way to wait for a condition (a polled predicate with a deadline,
never a fixed sleep).

Shipped with the daemon (not under tests/) so the fakes move with the interfaces they stand in
for; nothing in production builds them."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from types import SimpleNamespace
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


# ------------------------------------------------------------------ clock

class ManualClock:
    """A Clock that moves only when told: `now` is set or advanced by the test. With `source`, it
    reads the time from there instead (a test harness that stamps entries with its own `now`), so
    the clock and the entries never disagree. `offset_ms` skews it like SystemClock's."""

    __slots__ = ("now", "offset_ms", "_source")

    def __init__(self, now_ms: int = 0, *, source: Callable[[], int] | None = None) -> None:
        self.now = now_ms
        self.offset_ms = 0
        self._source = source

    def now_ms(self) -> int:
        return (self._source() if self._source is not None else self.now) + self.offset_ms

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


# ------------------------------------------------------------------ metrics

class RecordedSeries:
    """One counter or histogram: its samples summed per label tuple (`()` without labels)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[tuple[str, ...], float] = {}

    def labels(self, *values: str) -> _Labeled:
        return _Labeled(self, tuple(values))

    def inc(self, amount: float = 1) -> None:
        self.counts[()] = self.counts.get((), 0) + amount

    def observe(self, amount: float) -> None:
        self.inc(amount)


class _Labeled:
    __slots__ = ("_series", "_key")

    def __init__(self, series: RecordedSeries, key: tuple[str, ...]) -> None:
        self._series, self._key = series, key

    def inc(self, amount: float = 1) -> None:
        counts = self._series.counts
        counts[self._key] = counts.get(self._key, 0) + amount

    def observe(self, amount: float) -> None:
        self.inc(amount)


class RecordingMetrics:
    """A `schedd.ports.metrics.Metrics` that keeps what was recorded in memory, per series:
    `metrics.sla_missed.counts == {("j1",): 1}`."""

    def __init__(self) -> None:
        self.fire_lateness = RecordedSeries()
        self.fire_lead = RecordedSeries()
        self.skipped = RecordedSeries()
        self.late_intents = RecordedSeries()
        self.fired = RecordedSeries()
        self.proposals = RecordedSeries()
        self.commit_latency = RecordedSeries()
        self.attempts_expired = RecordedSeries()
        self.requests = RecordedSeries()
        self.sla_missed = RecordedSeries()


# ------------------------------------------------------------------ the Raft node

class Proposals:
    """What becomes of a proposal. The default applies it at once and returns apply's result;
    a test subclasses it to hold an entry, lose its answer or refuse it (the code under test runs
    its production path: only the fake misbehaves)."""

    async def propose(self, node: FakeNode, entry: str) -> Any:
        return node.apply(entry)


class FakeMembership:
    """Stands in for `RaftNode.membership`: `voters` are what `members()` returns (objects with
    `id`, `raft_address` and `grpc_address`, as a test sets them)."""

    def __init__(self) -> None:
        self.voters: list[Any] = []

    def members(self) -> list[Any]:
        return list(self.voters)


class FakeNode:
    """Stands in for `RaftNode` where shell code (leader, API, SLA driver) needs one: the leader
    of `term`, leading its epoch, whose log applies each proposal at once through `apply` (a
    function of the entry: a test harness's, which numbers and stamps entries) unless
    `proposals` says otherwise. `state` returns the state machine the node reads; `proposed`
    lists the entries proposed, in order; `status()` returns `raft_status` (set it to the
    RaftStatus a test wants the node to report)."""

    def __init__(self, apply: Callable[[str], Any], state: Callable[[], Any], *,
                 cfg: Any = None, term: int = 1, proposals: Proposals | None = None) -> None:
        self._apply = apply
        self._state = state
        self.cfg = cfg
        self.term = term
        self.lock = threading.RLock()
        self.proposals = proposals or Proposals()
        self.proposed: list[str] = []
        self.raft_status: Any = None
        self.repair_stats: Any = None       # RaftNode.repair_stats: none without patched Raft
        self.learner_count = 0              # RaftNode.learners(): read-only Raft nodes connected
        self.halted = ""                    # RaftNode.halted: why it stopped applying
        self.history = None                 # RaftNode.history: no history store (reads are the tables')
        self.membership = FakeMembership()

    @property
    def state(self) -> Any:
        return self._state()

    def apply(self, entry: str) -> Any:
        """Apply `entry` now, under the node lock as pysyncobj's apply thread would."""
        with self.lock:
            return self._apply(entry)

    async def propose(self, entry: str, *, timeout: float = 10.0, groupable: bool = False) -> Any:
        """Each entry alone (a group applies its entries as if alone: the same results)."""
        self.proposed.append(entry)
        return await self.proposals.propose(self, entry)

    def status(self) -> Any:
        return self.raft_status

    def log_size(self) -> tuple[int, int]:
        """Entries and bytes of the log since the last snapshot (RaftNode.log_size): the entries
        proposed here, at their encoded length."""
        return len(self.proposed), sum(len(e.encode()) for e in self.proposed)

    def learners(self) -> int:
        return self.learner_count

    def is_leader(self) -> bool:
        return True

    def leads_epoch(self) -> bool:
        return True

    async def read_index(self, *, timeout: float) -> int:
        """RaftNode.read_index: a leader alone, confirmed at once (`reads` counts the calls)."""
        self.reads = getattr(self, "reads", 0) + 1
        return 0

    def read_age(self) -> Any:
        """RaftNode.read_age: current (a ReadAge's fields)."""
        return SimpleNamespace(index=0, behind=0, age_s=0.0)

    def leader_grpc_address(self) -> str:
        return str(getattr(self.cfg, "grpc_address", ""))


class LoseFirstAnswer(Proposals):
    """The first proposal is applied but its answer is lost (`lost` is raised, e.g. the node's
    OutcomeUnknown): the caller must retry with the same request id."""

    def __init__(self, lost: Callable[[], BaseException]) -> None:
        self._lost: Callable[[], BaseException] | None = lost

    async def propose(self, node: FakeNode, entry: str) -> Any:
        result = node.apply(entry)
        if self._lost is not None:
            lost, self._lost = self._lost, None
            raise lost()
        return result


# ------------------------------------------------------------------ waiting for a condition

class WaitTimeout(TimeoutError, AssertionError):
    """A condition did not hold in time: a test failure (AssertionError) that code waiting for
    something it may give up on can catch as a TimeoutError."""


def _timed_out(what: str, timeout: float, last_exc: BaseException | None) -> WaitTimeout:
    return WaitTimeout(f"timed out after {timeout:g}s waiting for {what}"
                          + (f" (last error: {last_exc!r})" if last_exc else ""))


def wait_until(predicate: Callable[[], T], *, timeout: float, interval: float = 0.1,
               what: str = "condition", errors: bool = True) -> T:
    """Poll `predicate` until it returns a truthy value and return that value; fail with `what`
    after `timeout` seconds. Exceptions count as "not yet" (the process under test may still be
    starting) unless `errors` is False."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # keep polling through transient errors
            if not errors:
                raise
            last_exc = e
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last_exc)
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], T | Awaitable[T]], *, timeout: float,
                           interval: float = 0.01, what: str = "condition") -> T:
    """`wait_until` on the running event loop: sleeps yield to it, and `predicate` may be a
    coroutine function (to let the test settle its tasks between looks). Exceptions propagate."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise _timed_out(what, timeout, None)
        await asyncio.sleep(interval)
