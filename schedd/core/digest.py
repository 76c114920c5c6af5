"""A digest of the replicated state itself, equal on every replica that holds the same state.

Unlike `SchedulerState.log_hash` (a chain over the applied entries: equal only for equal histories),
this hashes what the state IS: jobs (spec, version, schedule position), executions (state,
attempts, events), the leader epoch, the cluster's feature level (above 1), the dedup table, DAG definitions and
runs, quotas, the member table, calendars, blackouts and window placements. So a replica restored from a snapshot, or one whose dicts were filled in another
order, has the same digest as its peers at the same applied index; any difference in content
changes it. The fault suite compares it across replicas after every heal (tests/jepsen_like).

Contract: deterministic and order-independent. Every mapping is encoded sorted by key, every
dataclass as its type name and its fields in declaration order; nothing depends on dict insertion
order, set iteration order, object ids or the clock. Derived indexes (wheel, by_state, ...) are
not included: they are rebuilt from what is. Cost: O(size of the state); callers cache per index.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields, is_dataclass
from collections.abc import Callable
from functools import cache
from operator import attrgetter
from typing import Any

from schedd.core.acl import canonical_rows as acl_rows
from schedd.core.audit import canonical_rows as audit_rows

SECTIONS = ("jobs", "execs", "dedup", "dags", "dag_runs", "quotas", "batches", "members")


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    """The fields a row is hashed by: its dataclass fields, or the class's DIGEST_FIELDS where
    it stores a field in another form (Job keeps its spec as a template)."""
    names: tuple[str, ...] | None = getattr(cls, "DIGEST_FIELDS", None)
    return names if names is not None else tuple(f.name for f in fields(cls))


def _sorted_items(d: dict[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return sorted(d.items())
    except TypeError:                      # keys of mixed types: order by their canonical text
        return sorted(d.items(), key=lambda kv: _text(kv[0]))


def canonical(v: Any) -> Any:
    """A JSON-encodable value with one encoding per content (see the module contract)."""
    t: type = type(v)
    if t in _SCALARS or v is None:
        return v
    fields_of = _dataclass_fields(t)
    if fields_of is not None:
        try:
            values = fields_of(v)
        except AttributeError:               # an unset slot reads as None
            values = tuple(getattr(v, n, None) for n in _field_names(t))
        return [t.__name__, *(x if type(x) in _SCALARS or x is None else canonical(x) for x in values)]
    if isinstance(v, (str, int, float)):     # subclasses (bool, IntEnum, ...)
        return v
    if isinstance(v, dict):
        return [[canonical(k), canonical(x)] for k, x in _sorted_items(v)]
    if isinstance(v, (list, tuple)):
        return [x if type(x) in _SCALARS or x is None else canonical(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((canonical(x) for x in v), key=_text)
    return [t.__name__, repr(v)]


_SCALARS = frozenset({str, int, float, bool})


@cache
def _dataclass_fields(cls: type) -> Callable[[Any], tuple[Any, ...]] | None:
    """For a dataclass type, a function returning its field values in declaration order (one
    C-level attrgetter: the digest spends its time here); None for any other type."""
    if not (is_dataclass(cls) and isinstance(cls, type)):
        return None
    names = _field_names(cls)
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda v: (one(v),)
    return attrgetter(*names)


def _text(v: Any) -> str:
    return json.dumps(canonical(v), separators=(",", ":"), ensure_ascii=False)


def state_digest(state: Any) -> str:
    """sha256 (hex) over the canonical rows of every section, each row keyed and sorted."""
    h = hashlib.sha256()
    h.update(_text(["epoch", state.epoch]).encode())
    level = getattr(state, "feature_level", 1)
    if level != 1:                       # absent at level 1: digests from before levels still match
        h.update(_text(["feature_level", level]).encode())
    for name in SECTIONS:
        table = getattr(state, name)
        h.update(_text([name, len(table)]).encode())
        for key, row in _sorted_items(table):
            h.update(_text([key, row]).encode())
            h.update(b"\n")
    # Absent while empty: digests of states from before the history level still match.
    if getattr(state, "archived", None):
        h.update(_text(["archived", _sorted_items(state.archived)]).encode())
    # Absent while empty too: the calendar level's tables (schedd.core.calendars).
    for name in ("calendars", "blackouts", "placements", "shares", "allocations", "shard_map"):
        if getattr(state, name, None):
            h.update(_text([name, _sorted_items(getattr(state, name))]).encode())
    # The ACL table and the audit trail give their own canonical rows (the trail's head hash
    # covers every kept record).
    for name, rows in (("acl", acl_rows(state.acl)), ("audit", audit_rows(state.audit))):
        h.update(_text([name, rows]).encode())
    return h.hexdigest()
