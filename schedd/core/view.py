"""The read-only view of the state that the leader's loops (schedd.leader) decide from.

The leader never reaches into the tables' indexes (`ready`, `by_state`, `held`, the wheel): it
asks this view, which answers from them. So the indexes can change shape without the leader
noticing, and what the leader may read is written down in one place.

Contract: the caller holds the node lock (the apply thread writes the tables under it). Nothing
here changes replicated state. Two calls keep derived indexes tidy as they read, exactly as they
did when the leader called them directly: `due_fires` advances the timing wheel's horizon and
`collect_sla` drops settled entries from the SLA due index; neither changes what apply decides.
The objects returned (jobs, executions) are the state's own: read them, never change them.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

from schedd.core import batches
from schedd.core import calendars
from schedd.core import sla as S
from schedd.core import placing
from schedd.core import windows as W
from schedd.core.model import RUNNING, SCHEDULED, Execution, Job
from schedd.core.policy import JobPolicy, blocked
from schedd.core.rows import DagDef, DagRun
from schedd.core.tables import Tables

MAX_KEY = "\U0010ffff"


class StateView:
    """What the leader may read of a `Tables` (a SchedulerState)."""

    __slots__ = ("_t",)

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    @property
    def epoch(self) -> int:
        """The leader epoch applied here (schedd.leader: a node leads only its own epoch)."""
        return self._t.epoch

    def job(self, name: str) -> Job | None:
        return self._t.jobs.get(name)

    def any_paused(self) -> bool:
        """Whether some job is paused (a reap then looks up each running attempt's job)."""
        return bool(self._t.paused_names)

    def execution(self, name: str, t: int) -> Execution | None:
        return self._t.execs.get((name, t))

    def dag(self, name: str) -> DagDef | None:
        return self._t.dags.get(name)

    def policy(self, job: Job) -> JobPolicy:
        return self._t.policy(job)

    def blocked(self, ex: Execution, policy: JobPolicy, extra_active: int = 0,
                extra_held: dict[str, int] | None = None) -> str:
        """Why `ex` may not start now ("" = it may), counting claims in flight (policy.blocked)."""
        return blocked(self._t, ex, policy, extra_active, extra_held)

    # ------------------------------------------------------------ what may start, what runs

    def ready_until(self, until: int, after: tuple[int, str, int] | None = None) -> Iterator[tuple[int, str, int]]:
        """(due, job, scheduled_ms) of executions waiting for a claim (SCHEDULED, or RETRY_WAIT
        past its retry time) due by `until` (and after the key `after`, if given), in claim
        order. An iterator: do not apply meanwhile."""
        return self._t.ready.irange(after, (until, MAX_KEY, 2 ** 63), inclusive=(after is None, True))

    def is_ready(self, key: tuple[int, str, int]) -> bool:
        """Whether the execution of the ready key (due, job, scheduled_ms) still waits for a claim."""
        return key in self._t.ready

    def ready_count(self) -> int:
        """Executions waiting for a claim, however far ahead they are due."""
        return len(self._t.ready)

    def ready_due_count(self, now: int) -> int:
        """Executions waiting for a claim that were due by `now` (O(log n))."""
        return self._t.ready.bisect_right((now, MAX_KEY, 2 ** 63))

    def oldest_ready(self) -> int | None:
        """The earliest due time of an execution waiting for a claim (None: none waits)."""
        return self._t.ready[0][0] if self._t.ready else None

    def running(self) -> list[Execution]:
        """Executions with a running attempt, oldest scheduled first."""
        return self.running_after(None, None)

    def running_after(self, after: tuple[int, str] | None, limit: int | None) -> list[Execution]:
        """At most `limit` (None: all) of `running()`, from the first after the key
        (scheduled_ms, job) `after` on (from the start when None): a walk over tens of
        thousands in rounds."""
        index = self._t.by_state.get(RUNNING)
        if not index:
            return []
        execs = self._t.execs
        keys = index.irange(after, None, inclusive=(after is None, True))
        return [execs[(name, t)] for t, name in islice(keys, limit)]

    def scheduled_since(self, t: int) -> list[Execution]:
        """SCHEDULED executions scheduled at or after `t`, oldest first."""
        index = self._t.by_state.get(SCHEDULED)
        execs = self._t.execs
        return [execs[(name, s)] for s, name in index.irange((t, ""), None)] if index else []

    # ------------------------------------------------------------ firing

    def due_fires(self, until: int, limit: int | None = None) -> list[tuple[int, str]]:
        """(next_fire, job) of unpaused jobs due by `until`, oldest first (the timing wheel)."""
        return self._t.wheel.due(until, limit=limit)

    def due_fire_count(self, until: int) -> int:
        """How many unpaused jobs have their next instant not recorded yet due by `until`."""
        return self._t.wheel.count_due(until)

    # ------------------------------------------------------------ batches

    def has_batches(self) -> bool:
        return bool(self._t.batches)

    def expired_batches(self, now: int) -> list[str]:
        """Staged batches nobody committed within the TTL at leader time `now` (batches.expired)."""
        return batches.expired(self._t, now)

    # ------------------------------------------------------------ SLAs (schedd.core.sla)

    def sla_watched(self) -> bool:
        return bool(self._t.sla_watch)

    def sla_due(self, now: int) -> Iterator[tuple[int, str, int]]:
        """(deadline, name, t) of SLA index entries due by `now`, oldest deadline first."""
        return iter(S.due(self._t, now))

    def sla_target(self, name: str, t: int) -> tuple[Execution | DagRun | None, Any]:
        """The execution or DAG run an SLA entry names (or None), and its verdict function."""
        return S.target(self._t, name, t)

    def job_sla(self, job: Job) -> S.Sla | None:
        return S.job_sla(self._t, job)

    def dag_sla(self, dag: DagDef) -> S.Sla | None:
        return S.dag_sla(self._t, dag)

    def collect_sla(self, now: int, limit: int) -> None:
        """Drop settled entries from the SLA due index (see the module contract)."""
        S.collect(self._t, now, limit)

    @property
    def window_moves(self) -> int:
        """A count that grows whenever a window job is written or its next instant moves: no
        growth since a look that found every window instant placed, nothing new to place."""
        return self._t.window_moves

    def unplaced_windows(self, limit: int, after: str = "") -> tuple[list[W.Want], str]:
        """Window jobs whose next instant the leader has not placed yet, a step of the table
        after `after`, and where the next step goes on (schedd.core.windows.unplaced)."""
        return W.unplaced(self._t, limit, after)

    def window_taken(self, keys: list[tuple[str, int, int]]) -> dict[tuple[str, int, int], dict[int, int]]:
        """Window runs placed or recorded per second of each (pool, lo, hi)."""
        return W.taken(self._t, keys)

    def job_names(self) -> list[str]:
        """Every job's name (a copy), for reads made in parts."""
        return list(self._t.jobs)

    def exact_rows(self, names: list[str] | None = None) -> list[Any]:
        """The forecast rows of the jobs with exact times, all or of `names` (a placement's load)."""
        return placing.exact_rows(self._t, names)

    def book(self) -> Any:
        """The calendars and blackouts as of now (a copy), that the placement's load counts by."""
        return calendars.book_of(self._t)


Viewable = StateView | Tables


def as_view(state: Viewable) -> StateView:
    """The view of a state (or the view itself): leader functions accept either."""
    return state if isinstance(state, StateView) else StateView(state)
