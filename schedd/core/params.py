"""Run parameters: what a user may pass to one run (`job trigger --param k=v`, `dag run --param`),
how they are checked, and where a run keeps them.

Why they ride as an execution event (kind `params`, the map as canonical JSON) rather than a
field of their own: an event is already part of every form an execution takes (the state digest,
the snapshot images, the on-disk history, the API's Execution message), so a run's parameters
reach all of them without a new row layout, a new snapshot format or a new history encoding.
A run holds at most one such event, written when it is recorded.

The same check runs at the proposer (a clear error, nothing committed) and in apply (a
hand-made entry is refused alike on every replica). An entry carrying params is stamped
fl=PARAMS_FEATURE_LEVEL by its proposer; apply reads params only from entries so stamped, as a
build that predates them ignores the key (`from_entry`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from schedd.core import commands as C
from schedd.core.model import ExecutionEvent
from schedd.core.param_rules import PARAMS_FEATURE_LEVEL, check

__all__ = ["PARAMS_EVENT", "PARAMS_FEATURE_LEVEL", "check", "defaults", "entry_args", "event", "from_entry",
           "of_events"]

PARAMS_EVENT = "params"           # the execution (or DAG run) event that holds them


def from_entry(cmd: C.Command) -> dict[str, str]:
    """The checked params an entry carries ({} for none). An entry below the params level is read
    as a build without params reads it: the key is ignored. Raises ValidationError."""
    if cmd.level < PARAMS_FEATURE_LEVEL:
        return {}
    return check(cmd.args.get("params"))


def defaults(job_params: tuple[tuple[str, str], ...], given: Mapping[str, str], cluster_level: int) -> dict[str, str]:
    """A run's params: its job's defaults (its spec's `params`, read only once the cluster is at
    the params level, where every replica applying knows them), each overridden by a given one."""
    if not job_params or cluster_level < PARAMS_FEATURE_LEVEL:
        return dict(given)
    return {**dict(job_params), **given}


def event(now: int, params: Mapping[str, str]) -> tuple[ExecutionEvent, ...]:
    """The event that records `params` on a run (none for no params)."""
    if not params:
        return ()
    return (ExecutionEvent(now, PARAMS_EVENT, json.dumps(dict(params), sort_keys=True, separators=(",", ":"))),)


def of_events(events: tuple[ExecutionEvent, ...]) -> dict[str, str]:
    """A run's params, read back from its events ({} for none)."""
    for e in events:
        if e.kind == PARAMS_EVENT:
            try:
                value: Any = json.loads(e.message)
            except ValueError:
                return {}
            return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
    return {}


def entry_args(params: Mapping[str, str]) -> dict[str, Any]:
    """What a proposer adds to an entry for `params`: the map and the feature level it needs
    (nothing at all for none, so an entry without params is byte-for-byte what it was)."""
    return {"params": dict(params), "fl": PARAMS_FEATURE_LEVEL} if params else {}
