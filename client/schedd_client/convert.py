"""Messages to plain data, and times and durations to text, for display (``-o json|yaml``, tables).

The API carries times as UTC epoch milliseconds in fields ending in ``_ms`` (0 = none). ``to_dict``
keeps those and adds a readable sibling without the suffix::

    {"next_fire_ms": 1795917600000, "next_fire": "2026-11-29T02:00:00Z",
     "upcoming_ms": [...], "upcoming": ["2026-11-29T02:00:00Z", ...], "created_ms": 0, "created": None}
"""

from __future__ import annotations

import base64
import calendar
import re
from datetime import datetime, UTC
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

__all__ = ["to_dict", "format_time", "parse_time", "format_duration", "relative_time", "printable"]

_TIME_SUFFIX = "_ms"


def to_dict(message: Message) -> dict[str, Any]:
    """A plain dict of ``message``: proto field names, every field present (defaults included),
    int64 as ``int``, enums by name, unset sub-messages as ``None``, only the set member of a oneof,
    and for every ``*_ms`` field a sibling without the suffix holding RFC 3339 UTC text (0 -> None).
    """
    out: dict[str, Any] = {}
    field: Any
    for field in message.DESCRIPTOR.fields:
        oneof = field.containing_oneof
        if oneof is not None and message.WhichOneof(oneof.name) != field.name:
            continue
        value = getattr(message, field.name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _scalar_or_message(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_scalar_or_message(field, v) for v in value]
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _scalar_or_message(field, value)
        if field.name.endswith(_TIME_SUFFIX) and field.cpp_type == FieldDescriptor.CPPTYPE_INT64:
            readable = field.name[: -len(_TIME_SUFFIX)]
            ms = out[field.name]
            out[readable] = [format_time(t) for t in ms] if isinstance(ms, list) else format_time(ms)
    return out


def _is_map(field: Any) -> bool:  # a FieldDescriptor (python or upb)
    return bool(
        field.is_repeated
        and field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
    )


def _scalar_or_message(field: Any, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_dict(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


def format_time(ms: int) -> str | None:
    """RFC 3339 UTC text for epoch milliseconds: ``2026-11-29T02:00:00Z`` (``.123Z`` when the
    milliseconds are not zero); ``None`` for 0 ("none")."""
    if not ms:
        return None
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}"
    return text + "Z"


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))?",
    re.ASCII,
)


def parse_time(text: str) -> int:
    """RFC 3339 text -> epoch ms; a time without offset is UTC. "T", "t" or a space separate date
    and time; fractions below 1 ms are truncated. The server reads times in a job's zone
    (schedd.core.schedule.parse_time, same syntax); the client needs only UTC and offsets."""
    m = _RFC3339.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"{text!r} is not an RFC 3339 time like 2026-12-01T10:00:00Z")
    y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
    try:
        wall = calendar.timegm(datetime(y, mo, d, h, mi, sec).timetuple())
    except ValueError as e:
        raise ValueError(f"{text!r} is not a valid time: {e}") from None
    milli = int((m[7] or "0").ljust(3, "0")[:3])
    if not m[9]:
        return wall * 1000 + milli
    hh, mm = int(m[10]), int(m[11])
    if hh > 23 or mm > 59:
        raise ValueError(f"{text!r} has a bad UTC offset")
    off = (hh * 3600 + mm * 60) * (1 if m[9] == "+" else -1)
    return (wall - off) * 1000 + milli


_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def format_duration(seconds: float) -> str:
    """A compact duration: ``250ms``, ``1.5s``, ``42s``, ``4m12s``, ``2h5m``, ``3d4h``: the largest
    unit and the next one when it is not zero (so ``1d`` for a day and 30 seconds)."""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms" if seconds else "0s"
    total = int(seconds)
    if total < 60 and seconds != total:
        return f"{seconds:.1f}".rstrip("0").rstrip(".") + "s"
    first = next(i for i, (_, size) in enumerate(_UNITS) if total >= size)
    unit, size = _UNITS[first]
    text = f"{total // size}{unit}"
    if first + 1 < len(_UNITS):
        next_unit, next_size = _UNITS[first + 1]
        if (total % size) // next_size:
            text += f"{(total % size) // next_size}{next_unit}"
    return text


def relative_time(ms: int, now_ms: int) -> str:
    """``in 4m12s`` / ``3s ago`` / ``now`` for a time relative to ``now_ms``; ``""`` for 0."""
    if not ms:
        return ""
    delta = (ms - now_ms) / 1000
    if abs(delta) < 1:
        return "now"
    whole = float(int(delta))  # whole seconds: "in 4m12s", never "in 4m12.3s"
    return f"in {format_duration(whole)}" if delta > 0 else f"{format_duration(whole)} ago"


# C0 controls but newline and tab, DEL, C1 controls (ESC and CSI start terminal sequences; CR
# overwrites a line; NUL and BEL confuse), and the bidi controls that make text read differently
# from what it is ("Trojan Source"): each becomes a visible escape such as \x1b or \u202e.
_UNSAFE = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F,
           *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNSAFE}


def printable(text: str) -> str:
    """``text`` safe to show on a terminal: control characters (except newline and tab) and bidi
    overrides escaped. For human output only; JSON and YAML output carry values exactly."""
    return text.translate(_ESCAPES)
