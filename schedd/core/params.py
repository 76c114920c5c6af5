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
import re
from collections.abc import Mapping
from typing import Any

from schedd.core import commands as C
from schedd.core.model import ExecutionEvent, ValidationError

PARAMS_FEATURE_LEVEL = 7          # schedd.core.commands FEATURES: Level 7
PARAMS_EVENT = "params"           # the execution (or DAG run) event that holds them
MAX_PARAMS = 64
MAX_NAME_CHARS = 64
MAX_VALUE_BYTES = 4096
MAX_TOTAL_BYTES = 16 * 1024       # names and values together: an entry stays far below its cap
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check(params: object) -> dict[str, str]:
    """The params as a sorted map of strings, or ValidationError saying what is wrong. Names are
    identifiers (they become environment variables `SCHEDD_PARAM_<NAME>` on a worker, upper-cased,
    so two names equal but for case are refused)."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ValidationError("params must be a map of names to strings")
    if len(params) > MAX_PARAMS:
        raise ValidationError(f"too many params: {len(params)}, at most {MAX_PARAMS}")
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    total = 0
    for name in sorted(params, key=str):
        value = params[name]
        if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > MAX_NAME_CHARS:
            raise ValidationError(f"bad param name {name!r}: a letter or _ then letters, digits or _, "
                                  f"at most {MAX_NAME_CHARS} characters")
        if not isinstance(value, str):
            raise ValidationError(f"param {name!r} must be a string")
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_VALUE_BYTES:
            raise ValidationError(f"param {name!r} is too long ({size} bytes, at most {MAX_VALUE_BYTES})")
        if "\0" in value:
            raise ValidationError(f"param {name!r} contains a NUL character")
        upper = name.upper()
        if upper in seen:
            raise ValidationError(f"params {seen[upper]!r} and {name!r} differ only in case "
                                  f"(both would be SCHEDD_PARAM_{upper})")
        seen[upper] = name
        total += len(name) + size
        out[name] = value
    if total > MAX_TOTAL_BYTES:
        raise ValidationError(f"params are too large ({total} bytes, at most {MAX_TOTAL_BYTES})")
    return out


def from_entry(cmd: C.Command) -> dict[str, str]:
    """The checked params an entry carries ({} for none). An entry below the params level is read
    as a build without params reads it: the key is ignored. Raises ValidationError."""
    if cmd.level < PARAMS_FEATURE_LEVEL:
        return {}
    return check(cmd.args.get("params"))


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
