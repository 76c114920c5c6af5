"""One test environment: the state harness, a manual clock and the fake Raft node, made together.

Modelled on hashicorp/raft's `MakeCluster` (testing.go): a test asks for one object and gets
the pieces wired the one way they are meant to be, instead of each test file assembling its own
combination of `Harness`, `FakeNode` and `ManualClock`:

- `env.h`: the state harness (tests.support.state.Harness, or a DagHarness or a subclass passed
  in): a real SchedulerState fed entries as the Raft log would, stamped with `env.h.now`.
- `env.clock`: a ManualClock that READS the harness's time (`ManualClock(source=...)`), so what
  the shell code under test reads and what the entries it proposes are stamped with never
  disagree. Move time with `env.now = t` or `env.advance(ms)` (or `h.now`: the same time).
- `env.node`: the FakeNode leading the harness's term (node n1), whose proposals apply to the
  harness at once (the next log index, recorded in `h.entries`), unless `proposals` says
  otherwise (schedd.ports.fakes.Proposals: hold, lose or refuse an answer).
- `env.metrics`: a RecordingMetrics; `env.spawn` / `await env.settle()`: the tasks the shell
  code spawns, collected and awaited (what the leader's event loop would run).
- `env.hub`, `env.assigner`: the leader's WorkerHub and Assigner over the node, made on first use.

Nothing here sleeps or reads the wall clock.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any

from schedd.core.state import SchedulerState
from schedd.ports.fakes import FakeNode, ManualClock, Proposals, RecordingMetrics
from tests.support.state import T0, Harness

LEASE_MS = 10_000         # the worker lease of env.hub
LOOKAHEAD_MS = 1_500      # the assigner's lookahead of env.assigner


def log_apply(h: Any):
    """Apply an entry to harness `h` as its log would: the next index, recorded in h.entries."""
    def apply(entry: str) -> dict:
        h.index += 1
        h.entries.append(entry)
        return h.state.apply(entry, h.index)
    return apply


def node_over(h: Any, *, proposals: Proposals | None = None, **cfg: Any) -> FakeNode:
    """The leader of h.term (node n1) whose proposals apply to `h` at once; `cfg` adds settings."""
    from schedd.runtime.config import SchedulerTuning
    settings = SimpleNamespace(node_id="n1", scheduler=SchedulerTuning(catchup_per_second=2),
                               grpc_address="127.0.0.1:1", **cfg)
    return FakeNode(log_apply(h), lambda: h.state, cfg=settings, term=h.term, proposals=proposals)


def clock_of(h: Any) -> ManualClock:
    """A clock that reads the harness's `now` (the time its entries are stamped with)."""
    return ManualClock(source=lambda: h.now)


class TestEnv:
    """A harness, its clock and its leader node (see the module docstring). `harness`: one the
    test made (a DagHarness, a subclass with its own helpers); else a Harness at `now` and
    feature `level`. `proposals` and `cfg` go to the node (node_over)."""

    __test__ = False          # a helper, not a test class pytest should collect

    def __init__(self, harness: Any = None, *, now: int = T0, level: int = 1,
                 proposals: Proposals | None = None, **cfg: Any) -> None:
        self.h = harness if harness is not None else Harness(now=now, level=level)
        self.clock = clock_of(self.h)
        self.node = node_over(self.h, proposals=proposals, **cfg)
        self.metrics = RecordingMetrics()
        self.tasks: list[asyncio.Future[Any]] = []

    # ------------------------------------------------------------ time and state

    @property
    def state(self) -> SchedulerState:
        state: SchedulerState = self.h.state
        return state

    @property
    def now(self) -> int:
        return int(self.h.now)

    @now.setter
    def now(self, ms: int) -> None:
        self.h.now = ms

    def advance(self, ms: int) -> int:
        """Move the time (the clock and the harness's entries alike) on by `ms`; the new time."""
        self.h.now += ms
        return int(self.h.now)

    def digest(self) -> str:
        return self.state.state_digest()

    # ------------------------------------------------------------ what the shell code spawns

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """The `spawn` callback shell code takes: the task is kept until `settle`."""
        self.tasks.append(asyncio.ensure_future(coro))

    async def settle(self) -> None:
        """Await every spawned task, those they spawn in turn included."""
        while self.tasks:
            await self.tasks.pop()

    # ------------------------------------------------------------ the leader's parts

    @functools.cached_property
    def hub(self) -> Any:
        """The leader's WorkerHub over the node (lease LEASE_MS)."""
        from schedd.leader.workers import WorkerHub
        return WorkerHub(self.node, self.clock, lease_ms=LEASE_MS)  # type: ignore[arg-type]

    @functools.cached_property
    def assigner(self) -> Any:
        """The leader's Assigner over the node and `hub`, spawning into `tasks`."""
        from schedd.leader.assigner import Assigner
        return Assigner(self.node, self.clock, self.hub, LOOKAHEAD_MS, self.spawn)  # type: ignore[arg-type]
