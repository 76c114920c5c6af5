"""The history port: where apply's shell hands the executions that left the replicated tables
(schedd.core.history) — a node's history store (schedd.history.HistoryStore) in the daemon,
nothing in tests that do not look at history. A port so the replication layer needs no import
of the store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol


class HistorySink(Protocol):
    """What the Raft shell calls, on its tick thread, under the state lock."""

    @property
    def applied_index(self) -> int: ...

    def add(self, executions: Iterable[Any], applied_index: int, teams: Mapping[str, str] | None = None,
            forgotten: Iterable[str] = ()) -> bool:
        """What applying entry `applied_index` moved out of memory (and which jobs were deleted)."""

    def flush(self, durable: bool = False) -> int:
        """Commit everything handed over so far; `durable`: synced to disk (before a snapshot)."""

    def note_gap(self, upto: int) -> None:
        """The state jumped to entry `upto` (a snapshot installed) past what was handed over."""

    def get(self, job: str, scheduled_ms: int) -> Any:
        """A finished execution that left the tables (None: not there)."""
