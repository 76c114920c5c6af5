"""What a run parameter may be (`schedd.core.params` says where a run keeps them): checked the
same at the proposer, in a job spec's default `params` and in apply. Imports nothing of the
model, so the spec validation (schedd.core.model) can use it too."""

from __future__ import annotations

import re
from collections.abc import Mapping

from schedd.core.specs import ValidationError

PARAMS_FEATURE_LEVEL = 7          # schedd.core.commands FEATURES: Level 7
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


