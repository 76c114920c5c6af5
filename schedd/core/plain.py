"""The state image as plain values: what backups hold, and what snapshot format 6 carries.

Why: a pickle names the code that rebuilds it, so reading one runs whatever the writer chose.
This encoding holds nothing but JSON values (objects, arrays, strings, numbers, booleans, null);
reading it builds rows this module names itself, from positions this module defines. A crafted
text can make a bad state (refused by the checks on load: the audit chain, the ACL rows, the
digest compared by the caller), never run code.

Layout: one JSON object, `SCHEMA` first; rows are arrays in the field order of their dataclass
(JOB_FIELDS, EXEC_FIELDS, ...), nested rows (attempts, events, gaps) arrays too, so the text is
columnar-compact and the field names are written once, in `fields`. A reader refuses a schema it
does not know, and rows whose field lists differ from its own (a field added later gets a new
schema version with its own reader). Free-form values kept in the state (the dedup table's
results, a batch's outcome) are JSON as they are: their tuples come back as lists, which the
state digest and every reader treat alike. Bytes (the chained log hash) are hex.

Pure: no clock, no I/O. `encode` costs O(state) and runs where pickling did (a forked child).
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import fields
from operator import attrgetter
from typing import Any

from schedd.core.acl import table_to_dict
from schedd.core.calendars import blackout_of_row, blackout_row, calendar_of_row, calendar_row
from schedd.core.audit import trail_to_dict
from schedd.core.model import Attempt, Execution, ExecutionEvent, Job
from schedd.core.rows import Batch, DagDef, DagRun
from schedd.core.image import (
    EXEC_FIELDS, FEATURE_LEVEL_KEY, JOB_FIELDS, SNAPSHOT_DIGEST, SNAPSHOT_FORMAT, Image, Imaged,
)

SCHEMA = ["schedd-plain-state", 1]
ATTEMPT_FIELDS = tuple(f.name for f in fields(Attempt))
EVENT_FIELDS = tuple(f.name for f in fields(ExecutionEvent))
DAG_FIELDS = tuple(f.name for f in fields(DagDef))
RUN_FIELDS = tuple(f.name for f in fields(DagRun))
BATCH_FIELDS = tuple(f.name for f in fields(Batch))
FIELDS = {"job": JOB_FIELDS, "exec": EXEC_FIELDS, "attempt": ATTEMPT_FIELDS, "event": EVENT_FIELDS,
          "dag": DAG_FIELDS, "run": RUN_FIELDS, "batch": BATCH_FIELDS}

_EXEC_ATTEMPTS, _EXEC_EVENTS = EXEC_FIELDS.index("attempts"), EXEC_FIELDS.index("events")
_EXEC_HOLDS = EXEC_FIELDS.index("holds")
_JOB_SPEC_T, _JOB_GAPS = JOB_FIELDS.index("spec_t"), JOB_FIELDS.index("gaps")


class PlainError(ValueError):
    """A text that is not a plain state image; the message says what is wrong, in one line."""


# ------------------------------------------------------------------ writing

def to_plain(s: Imaged) -> dict[str, Any]:
    """The image of `s` as plain values (the inverse of `from_plain`)."""
    return {
        "schema": SCHEMA, "fields": FIELDS,
        "jobs": list(map(attrgetter(*JOB_FIELDS), s.jobs.values())),
        "execs": [_exec_row(ex) for ex in s.execs.values()],
        "epoch": s.epoch, "log_hash": s.log_hash.hex(), "last_index": s.last_index, "clock_ms": s.clock_ms,
        "dedup": [[rid, now, result] for rid, (now, result) in s.dedup.items()],
        "dags": [_dag_row(d) for d in s.dags.values()],
        "dag_runs": [_run_row(r) for r in s.dag_runs.values()],
        "quotas": s.quotas,
        "batches": [[bid, b.since, b.state, b.ended, sorted(b.chunks.items()), b.result]
                    for bid, b in s.batches.items()],
        "members": s.members,
        **({"archived": s.archived} if s.archived else {}),     # the history level's floors
        # the calendar level's tables (schedd.core.calendars), absent while empty
        **({"calendars": [calendar_row(c) for c in s.calendars.values()]} if s.calendars else {}),
        **({"blackouts": [blackout_row(b) for b in s.blackouts.values()]} if s.blackouts else {}),
        # the window level's placements (schedd.core.windows), absent while empty
        **({"placements": [[k, t, at] for k, (t, at) in s.placements.items()]} if s.placements else {}),
        # the quota-share level's tables (schedd.core.quota_shares), absent while empty
        **({"shares": [[k, v, n] for k, (v, n) in s.shares.items()]} if s.shares else {}),
        **({"allocations": [[k, v, list(n)] for k, (v, n) in s.allocations.items()]} if s.allocations else {}),
        # the shard placement level's map (schedd.core.shards), absent while none is recorded
        **({"shard_map": s.shard_map} if s.shard_map else {}),
        "acl": table_to_dict(s.acl), "audit": trail_to_dict(s.audit),
        FEATURE_LEVEL_KEY: s.feature_level,
        SNAPSHOT_DIGEST: [s.last_index, s.state_digest()],
    }


def dumps(s: Imaged) -> str:
    """`to_plain` as compact JSON text (ASCII: lone surrogates in a string survive the trip)."""
    return json.dumps(to_plain(s), separators=(",", ":"))


_event_row = attrgetter(*EVENT_FIELDS)
_attempt_row = attrgetter(*ATTEMPT_FIELDS)


def _exec_row(ex: Execution) -> list[Any]:
    row = list(attrgetter(*EXEC_FIELDS)(ex))
    row[_EXEC_ATTEMPTS] = list(map(_attempt_row, ex.attempts))
    row[_EXEC_EVENTS] = list(map(_event_row, ex.events))
    return row


def _dag_row(d: DagDef) -> tuple[Any, ...]:
    return tuple(attrgetter(*DAG_FIELDS)(d))


def _run_row(r: DagRun) -> list[Any]:
    row = list(attrgetter(*RUN_FIELDS)(r))
    row[RUN_FIELDS.index("events")] = list(map(_event_row, r.events))
    return row


# ------------------------------------------------------------------ reading

def loads(text: str | bytes) -> Image:
    """The image a plain text holds (what SchedulerState.restore takes). Raises PlainError.
    The garbage collector is off while the rows are built (2x faster on a million rows)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        doc = json.loads(text)
        return from_plain(doc)
    except PlainError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as e:
        raise PlainError(f"not a plain state image ({type(e).__name__}: {e})") from None
    finally:
        if enabled:
            gc.enable()


def from_plain(doc: Any) -> Image:
    """The image tuple of `to_plain`'s output, rows rebuilt by position (see the module docstring)."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise PlainError(f"unknown plain image schema {got!r} (this build reads {SCHEMA!r})")
    if doc.get("fields") != {k: list(v) for k, v in FIELDS.items()}:
        raise PlainError("the image's row fields are not this build's (written by another version)")
    jobs = {job.name: job for job in map(_job, _list(doc, "jobs"))}
    share_times(jobs.values())
    execs = {(ex.job, ex.scheduled_ms): ex for ex in map(_exec, _list(doc, "execs"))}
    dedup = {str(rid): (_int(now), dict(result)) for rid, now, result in _list(doc, "dedup")}
    extra = {
        "dags": {d.name: d for d in map(_dag, _list(doc, "dags"))},
        "dag_runs": {(r.dag, r.logical_ms): r for r in map(_run, _list(doc, "dag_runs"))},
        "quotas": {str(k): _int(v) for k, v in _dict(doc, "quotas").items()},
        "batches": dict(map(_batch, _list(doc, "batches"))),
        "members": {str(k): (str(raft), str(grpc)) for k, (raft, grpc) in _dict(doc, "members").items()},
        # absent before the history level (schedd.core.history): no execution had left memory
        "archived": {str(k): (_int(floor), _int(i)) for k, (floor, i) in doc.get("archived", {}).items()},
        "calendars": {c.name: c for c in map(calendar_of_row, doc.get("calendars", []))},
        "blackouts": {b.name: b for b in map(blackout_of_row, doc.get("blackouts", []))},
        "placements": {str(k): (_int(t), _int(at)) for k, t, at in doc.get("placements", [])},
        "shares": {str(k): (_int(v), _int(n)) for k, v, n in doc.get("shares", [])},
        "allocations": {str(k): (_int(v), tuple(map(_int, n))) for k, v, n in doc.get("allocations", [])},
        "shard_map": _shard_map(doc.get("shard_map")),
        "acl": _dict(doc, "acl"), "audit": _dict(doc, "audit"),
        FEATURE_LEVEL_KEY: _int(doc[FEATURE_LEVEL_KEY]),
        SNAPSHOT_DIGEST: (_int(doc[SNAPSHOT_DIGEST][0]), str(doc[SNAPSHOT_DIGEST][1])),
    }
    return (SNAPSHOT_FORMAT, jobs, execs, _int(doc["epoch"]), dedup, [], bytes.fromhex(doc["log_hash"]),
            _int(doc["last_index"]), _int(doc["clock_ms"]), extra)


def share_times(jobs: Iterable[Job]) -> None:
    """Equal times of the rows one int object each. A parser makes an int object per number it
    reads, where the replica that applied the log holds one per entry (every job a `put_many`
    made shares its `now`): 32 bytes per time per job, without which a restored replica held
    more than one that never restarted. next_fire is made one per instant when the indexes are
    rebuilt (Tables.same_instant)."""
    same: dict[int, int] = {}
    share = same.setdefault
    for job in jobs:
        job.created_ms, job.updated_ms = share(job.created_ms, job.created_ms), share(job.updated_ms, job.updated_ms)
        job.incarnation = share(job.incarnation, job.incarnation)
        if job.last_fire is not None:
            job.last_fire = share(job.last_fire, job.last_fire)


def _job(row: list[Any]) -> Job:
    _sized(row, JOB_FIELDS)
    row[_JOB_SPEC_T] = sys.intern(row[_JOB_SPEC_T])     # one template shared by its jobs again
    row[_JOB_GAPS] = tuple(map(tuple, row[_JOB_GAPS]))
    return Job(*row)


def _exec(row: list[Any]) -> Execution:
    row[_EXEC_ATTEMPTS] = [Attempt(*_sized(a, ATTEMPT_FIELDS)) for a in row[_EXEC_ATTEMPTS]]
    row[_EXEC_EVENTS] = _events(row[_EXEC_EVENTS])
    row[_EXEC_HOLDS] = tuple(row[_EXEC_HOLDS])
    return Execution(*_sized(row, EXEC_FIELDS))


def _events(rows: Iterable[list[Any]]) -> tuple[ExecutionEvent, ...]:
    return tuple(ExecutionEvent(*_sized(e, EVENT_FIELDS)) for e in rows)


def _edges(d: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    return {str(k): tuple(v) for k, v in d.items()}


_DAG_CONVERT: dict[str, Callable[[Any], Any]] = {"order": tuple, "upstream": _edges, "downstream": _edges}
_RUN_CONVERT: dict[str, Callable[[Any], Any]] = {**_DAG_CONVERT, "events": _events}


def _dag(row: list[Any]) -> DagDef:
    return DagDef(*_converted(row, DAG_FIELDS, _DAG_CONVERT))


def _run(row: list[Any]) -> DagRun:
    return DagRun(*_converted(row, RUN_FIELDS, _RUN_CONVERT))


def _batch(row: list[Any]) -> tuple[str, Batch]:
    bid, since, state, ended, chunks, result = _sized(row, ("id", *BATCH_FIELDS))
    return str(bid), Batch(_int(since), str(state), _int(ended),
                           {_int(seq): list(texts) for seq, texts in chunks}, dict(result))


def _converted(row: list[Any], names: tuple[str, ...], convert: dict[str, Callable[[Any], Any]]) -> list[Any]:
    return [convert[n](v) if n in convert else v for n, v in zip(names, _sized(row, names), strict=True)]


def _sized(row: Any, names: tuple[str, ...]) -> list[Any]:
    if not isinstance(row, list) or len(row) != len(names):
        raise PlainError(f"a row of {len(row) if isinstance(row, list) else type(row).__name__} values "
                         f"where {len(names)} fields ({names[0]}, ...) were expected")
    return row


def _list(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc[key]
    if not isinstance(value, list):
        raise PlainError(f"{key}: expected an array")
    return value


def _dict(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc[key]
    if not isinstance(value, dict):
        raise PlainError(f"{key}: expected an object")
    return value


def _int(v: Any) -> int:
    if type(v) is not int:
        raise PlainError(f"expected an integer, got {type(v).__name__}")
    return v


def _shard_map(v: Any) -> dict[str, Any]:
    """The shard map's document (checked whole when a node reads it: `shards.ShardMap.from_dict`)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise PlainError("shard_map: expected an object")
    return v
