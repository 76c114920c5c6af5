"""Rows of the smaller tables: DAG definitions, DAG runs and staged batches.

Kept below every module that works on them (tables, dags, sla, batches, the view), so none has to
import another to name them. Their pickled names are part of the snapshot format: instances are
pickled as they are (EXTRA_FIELDS in schedd.core.snapshot) under the modules that first defined
them, schedd.core.dags and schedd.core.batches, which re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schedd.core.model import ExecutionEvent
from schedd.core.naming import run_id
from schedd.core.specs import DagSpec

DEFAULT_MAX_RUNS = 50
STAGED = "staged"                 # a batch's state until it is committed or aborted


@dataclass(slots=True)
class DagDef:
    """A DAG definition. `spec` is the committed text (the source of truth; the field keeps its
    name because the fields are the snapshot's row layout) and `dag_spec` reads it as a typed
    DagSpec; the graph is kept unpacked beside it. The dicts are replaced, never mutated, so runs
    may share them."""

    name: str
    team: str
    schedule: str
    tz: str
    spec: str
    version: int
    created_ms: int
    updated_ms: int
    created_by: str
    order: tuple[str, ...]                  # task names, topological (stable: definition order)
    upstream: dict[str, tuple[str, ...]]    # task -> upstream tasks
    downstream: dict[str, tuple[str, ...]]  # task -> downstream tasks (topological order)
    rules: dict[str, str]                   # task -> trigger rule
    max_runs: int = DEFAULT_MAX_RUNS
    runs_total: int = 0
    incarnation: int = 0          # log index of the entry that created it (like Job.incarnation)

    @property
    def dag_spec(self) -> DagSpec:
        """The typed spec, parsed once per text (a memo of a pure function: DAGs are few)."""
        hit = _DAG_SPECS.get(self.spec)
        if hit is None:
            if len(_DAG_SPECS) >= _DAG_SPECS_KEPT:
                _DAG_SPECS.clear()
            hit = _DAG_SPECS[self.spec] = DagSpec.from_text(self.spec)
        return hit

    @property
    def revision(self) -> tuple[int, int]:
        """The key of caches derived from the spec (see Job.revision)."""
        return (self.incarnation, self.version)


_DAG_SPECS: dict[str, DagSpec] = {}
_DAG_SPECS_KEPT = 64


@dataclass(slots=True)
class DagRun:
    """One run of a DAG, keyed (dag, logical_ms). `states[task]` is PENDING until the task's
    execution is recorded, SCHEDULED while it is under way, then the execution's end state."""

    dag: str
    logical_ms: int
    state: str
    trigger: str
    created_ms: int
    version: int
    order: tuple[str, ...]
    upstream: dict[str, tuple[str, ...]]
    downstream: dict[str, tuple[str, ...]]
    rules: dict[str, str]
    pending: dict[str, int] = field(default_factory=dict)    # task -> upstream tasks not ended yet
    states: dict[str, str] = field(default_factory=dict)
    ended_ms: int = 0
    events: tuple[ExecutionEvent, ...] = ()  # of the run (sla_missed: schedd.core.sla), oldest first

    @property
    def run_id(self) -> str:
        return run_id(self.dag, self.logical_ms)


@dataclass(slots=True)
class Batch:
    since: int                                   # entry time of its first entry
    state: str = STAGED
    ended: int = 0
    chunks: dict[int, list[str]] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)   # the commit's counts, or why it was aborted


# The pickled names (see the module docstring).
DagDef.__module__ = DagRun.__module__ = "schedd.core.dags"
Batch.__module__ = "schedd.core.batches"
