"""Which finished executions a store keeps, and pruning in small steps.

A job keeps its newest `keep` executions (by scheduled time, like `history_limit` in memory)
and none that finished (`updated_ms`) more than `max_age_ms` ago; a cluster default applies to
every job without an override. Pruning is incremental: the owner calls `HistoryStore.prune_step`
with a row budget, and each step is one short transaction, so a writer never waits behind one
huge DELETE. Two passes share the budget:

- by count: jobs that may hold more than they keep ("suspects": a job that got rows since it was
  last checked, or whose retention changed) lose their oldest rows; a job is read from its tally,
  so a job within its limit costs one lookup.
- by age: a sweep over the updated_ms index, oldest first, resumed where the last step stopped.
  Only rows older than the shortest age in force are looked at; each is deleted if it is older
  than its own job's age. Rows of jobs with a longer age are passed over (and counted against the
  budget, so a step stays small), never deleted for another job's policy.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from schedd.core.model import DEFAULT_HISTORY_LIMIT
from schedd.history import rows, tallies
from schedd.history.schema import ALL_STATES, WHOLE_STORE
from schedd.history.tallies import Tallies

DAY_MS = 86_400_000
DEFAULT_MAX_AGE_MS = 30 * DAY_MS

_AGE_SCAN = ("SELECT updated_ms, id, job FROM executions INDEXED BY executions_by_updated "
             "WHERE updated_ms < ? AND (updated_ms, id) > (?, ?) ORDER BY updated_ms, id LIMIT ?")
_OLDEST = "SELECT id FROM executions WHERE job = ? ORDER BY scheduled_ms LIMIT ?"
_START = (-(2 ** 63), 0)


@dataclass(slots=True, frozen=True)
class Retention:
    """What a job keeps: its newest `keep` executions, none finished more than `max_age_ms` ago
    (0: no age limit)."""

    keep: int = DEFAULT_HISTORY_LIMIT
    max_age_ms: int = DEFAULT_MAX_AGE_MS


DEFAULT_RETENTION = Retention()


@dataclass(slots=True, frozen=True)
class PruneStep:
    """What one step did; `more` is true when work was left for the next step (call again soon)."""

    deleted: int
    scanned: int
    more: bool


@dataclass(slots=True)
class Pruner:
    """The retention in force (not stored: the owner sets it from its jobs when it opens the
    store) and where pruning stands."""

    default: Retention
    overrides: dict[str, Retention] = field(default_factory=dict)
    # The owner's view of each job's retention (the daemon's: from the job's spec in the
    # replicated state, so it is right from the first step after a restart); overrides win.
    lookup: Callable[[str], Retention] | None = None
    shortest_hint: int = 0                # the shortest max age among the lookup's jobs (0: none)
    suspects: set[str] = field(default_factory=set)
    cursor: tuple[int, int] = _START     # (updated_ms, rowid) the age sweep resumes after
    _shortest: int | None = None          # the shortest age in force; None: to compute again

    def of(self, job: str) -> Retention:
        r = self.overrides.get(job)
        if r is not None:
            return r
        return self.lookup(job) if self.lookup is not None else self.default

    def set(self, job: str, retention: Retention | None) -> None:
        if retention is None:
            self.overrides.pop(job, None)
        else:
            self.overrides[job] = retention
        self.suspects.add(job)
        self._shortest = None

    def load(self, conn: sqlite3.Connection) -> None:
        """On open: every job holding more rows than the default keeps is a suspect."""
        self.suspects.update(job for (job,) in conn.execute(
            "SELECT job FROM tallies WHERE state = ? AND job != ? AND rows > ?",
            (ALL_STATES, WHOLE_STORE, self.default.keep)))

    def step(self, conn: sqlite3.Connection, now_ms: int, budget: int) -> PruneStep:
        """One step, inside the caller's transaction."""
        changes = Tallies()
        deleted = self._by_count(conn, budget, changes)
        gone, scanned, more = self._by_age(conn, now_ms, budget - deleted, changes)
        changes.write(conn)
        return PruneStep(deleted + gone, deleted + scanned, more or bool(self.suspects))

    def _by_count(self, conn: sqlite3.Connection, budget: int, changes: Tallies) -> int:
        deleted = 0
        for job in sorted(self.suspects):
            if deleted >= budget:
                break
            excess = tallies.rows(conn, job) - self.of(job).keep
            take = min(excess, budget - deleted)
            if take > 0:
                deleted += rows.delete(conn, [i for (i,) in conn.execute(_OLDEST, (job, take))], changes)
            if take >= excess:
                self.suspects.discard(job)
        return deleted

    def _by_age(self, conn: sqlite3.Connection, now_ms: int, budget: int,
                changes: Tallies) -> tuple[int, int, bool]:
        shortest = self._shortest_age()
        if not shortest or budget <= 0:
            return 0, 0, bool(shortest)
        keys = conn.execute(_AGE_SCAN, (now_ms - shortest, *self.cursor, budget)).fetchall()
        victims = []
        for updated, rowid, job in keys:
            age = self.of(job).max_age_ms
            if age and updated < now_ms - age:
                victims.append(rowid)
        deleted = rows.delete(conn, victims, changes)
        full = len(keys) >= budget
        self.cursor = (keys[-1][0], keys[-1][1]) if full else _START
        return deleted, len(keys), full

    def _shortest_age(self) -> int:
        if self._shortest is None:
            ages = [r.max_age_ms for r in (self.default, *self.overrides.values()) if r.max_age_ms]
            ages += [self.shortest_hint] if self.shortest_hint else []
            self._shortest = min(ages, default=0)
        return self._shortest
