"""The metrics port: what the shell records, as counters and histograms it may label.

`schedd.runtime.metrics.Metrics` is the Prometheus implementation a node runs with; `NullMetrics`
records nothing, and `schedd.ports.fakes.RecordingMetrics` keeps counts a test can read. Code that
records takes a `Metrics`; only the daemon knows which one it is."""

from __future__ import annotations

from typing import Protocol


class Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Histogram(Protocol):
    def observe(self, amount: float) -> None: ...


class LabeledCounter(Protocol):
    def labels(self, *values: str) -> Counter: ...


class LabeledHistogram(Protocol):
    def labels(self, *values: str) -> Histogram: ...


class Metrics(Protocol):
    """The series the leader and the API record (see runtime/metrics.py for what each means).
    Read-only members, so any object whose attributes fit (a Prometheus Counter is both labeled
    and not) is one."""
    @property
    def fire_lateness(self) -> Histogram: ...
    @property
    def fire_lead(self) -> Histogram: ...
    @property
    def skipped(self) -> Counter: ...
    @property
    def late_intents(self) -> Counter: ...
    @property
    def fired(self) -> LabeledCounter: ...            # trigger
    @property
    def proposals(self) -> LabeledCounter: ...        # kind, outcome
    @property
    def commit_latency(self) -> LabeledHistogram: ...  # kind
    @property
    def attempts_expired(self) -> LabeledCounter: ...  # outcome
    @property
    def requests(self) -> LabeledCounter: ...         # method, code
    @property
    def sla_missed(self) -> LabeledCounter: ...       # job


class _Nothing:
    """A counter and a histogram, labeled or not, that drops every sample."""
    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def labels(self, *values: str) -> _Nothing:
        return self


class NullMetrics:
    """Records nothing: for code run without a node (tools, tests that do not look)."""
    __slots__ = ("fire_lateness", "fire_lead", "skipped", "late_intents", "fired", "proposals",
                 "commit_latency", "attempts_expired", "requests", "sla_missed")

    def __init__(self) -> None:
        nothing = _Nothing()
        self.fire_lateness = self.fire_lead = nothing
        self.skipped = self.late_intents = nothing
        self.fired = self.proposals = self.attempts_expired = self.requests = nothing
        self.commit_latency = nothing
        self.sla_missed = nothing
