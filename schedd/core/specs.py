"""Job and DAG specs as typed values, and the one place their canonical dict form is made and read.

A spec is validated once, on the proposer (`schedd.core.model.canonical_spec`,
`schedd.core.dags.canonical_dag`), into the frozen records of this module. Its committed form is
the JSON text of `to_dict()` with sorted keys (`text()`): the Raft entry carries it, the job row
keeps it, snapshots and the state digest hold it. Apply reads a committed text back with
`load_job` / `load_dag`, which check what apply computes with (the checks and their messages are
part of the replicated result), then `from_dict`. `to_dict` and `from_dict` are the only code that
writes or reads the canonical dict; everything else reads attributes.

Why the records are lossless. A committed text must stay byte for byte what it was: old logs and
snapshots replay into the same state, and the digest hashes the text. Every value in canonical
form lands in its field; anything else (a key a later version may add, an entry made by hand,
which apply stores unvalidated) is kept in the `extra` of the object it stood in (a handler that
is not one object of one known kind: as a `RawHandler`) and written back as it came, so
`from_dict(d).to_dict() == d` for every JSON object `d`, and apply's rewrites of a stored spec (a
pause, a DAG's task rows) keep what they do not understand. Unknown keys are passed over, as the
readers of the dict form always did; a known key whose value is not in canonical form reads as
absent (only hand-made entries hold one: the typed field says "not set" rather than guess).

Empty is absent: an optional field holds "", 0, None, () or an empty map when its key is absent,
and the canonical form never holds an optional key with an empty value. The field names are the
canonical keys, which are the API's proto field names (`policies` groups the scheduling policies,
which the canonical form keeps at the top level).

Pure: no clock, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from operator import attrgetter
from typing import Any, ClassVar, NamedTuple, cast

from schedd.core import schedule as sched

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
DEFAULT_HISTORY_LIMIT = 1000
MAX_HISTORY_LIMIT = 100_000
MAX_SLA_SECONDS = 366 * 86400
SLA_BY_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
CONTAINER_FEATURE_LEVEL = 6          # schedd.core.features Level 6: entries carrying one say fl=6
REQUIRED = ("name", "team", "schedule", "timezone")     # strings in every committed job and DAG spec


class _EmptyMap(dict[str, Any]):
    """The empty map every record shares as its default: a dict (reads at C speed), hashable
    (so a dataclass takes it as a default) and immutable (so sharing it is safe)."""

    __slots__ = ()

    def __hash__(self) -> int:               # type: ignore[override]
        return 0

    def _immutable(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("the shared empty map cannot change")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _immutable


EMPTY: Mapping[str, Any] = _EmptyMap()


class ValidationError(ValueError):
    """Bad user input; the message is meant for a person."""


# ------------------------------------------------------------------ reading and writing values
#
# A reader takes a JSON value and gives the field's value, or _NOT when the value is not in
# canonical form (then it stays in `extra`). Optional keys are canonical only when not empty.

_NOT: Any = object()
Reader = Callable[[Any], Any]
Writer = Callable[[Any], Any]


def _text(v: Any) -> Any:
    return v if type(v) is str and v else _NOT


def _any_text(v: Any) -> Any:
    return v if type(v) is str else _NOT


def _whole(v: Any) -> Any:
    return v if type(v) is int and v else _NOT


def _number(v: Any) -> Any:
    return v if (type(v) is int or type(v) is float) and v else _NOT


def _any_number(v: Any) -> Any:
    return v if type(v) is int or type(v) is float else _NOT


def _true(v: Any) -> Any:
    return True if v is True else _NOT


def _flag(v: Any) -> Any:
    return v if type(v) is bool else _NOT


def _words(v: Any) -> Any:
    return tuple(v) if type(v) is list and v and all(type(x) is str for x in v) else _NOT


def _text_map(v: Any) -> Any:
    if type(v) is not dict or not v or not all(type(k) is str and type(x) is str for k, x in v.items()):
        return _NOT
    return dict(v)


def _same(v: Any) -> Any:
    return v


def _list(v: Any) -> Any:
    return list(v)


def _dict(v: Any) -> Any:
    return dict(v)


def _record(v: Any) -> Any:
    return v.to_dict()


@dataclass(frozen=True, slots=True)
class _Key:
    """How one canonical key maps to its field: `always` keys are written whatever their value
    (required ones, and defaults the canonical form spells out)."""

    read: Reader
    write: Writer = _same
    always: bool = False


class Keys:
    """The canonical keys of one record (each its field's name), laid out for speed: reading a
    spec is on apply's path for every job whose spec is not cached."""

    __slots__ = ("readers", "writers", "always", "values")

    def __init__(self, keys: dict[str, _Key]) -> None:
        self.readers = {k: key.read for k, key in keys.items()}
        self.writers = tuple((k, key.write, key.always) for k, key in keys.items())
        self.always = tuple(k for k, key in keys.items() if key.always)
        self.values = attrgetter(*keys)


def _split(keys: Keys, d: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(field values, the rest): each key of `d` whose value is canonical goes to its field."""
    readers = keys.readers
    typed: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for k, v in d.items():
        read = readers.get(k)
        got = _NOT if read is None else read(v)
        if got is _NOT:
            extra[k] = v
        else:
            typed[k] = got
    return typed, extra


def _exact(cls: type[_Record] | type[_Handler], v: Any) -> Any:
    """The record of an object `v`: its canonical values in their fields, the rest of it in the
    record's `extra` (unknown keys included: readers always passed over a key they did not know
    inside a spec's objects, and a later version may add one). _NOT when `v` is not an object
    or misses a key the canonical form always writes: then its owner keeps it whole."""
    if type(v) is not dict:
        return _NOT
    keys = cls.keys
    typed, extra = _split(keys, v)
    for k in keys.always:
        if k not in typed:
            return _NOT
    if extra:
        typed["extra"] = extra
    return cls(**typed)


def _written(obj: Any, keys: Keys) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (k, write, always), v in zip(keys.writers, keys.values(obj)):
        if always or v:
            out[k] = write(v)
    return out


class _Builder:
    """Builds a frozen record through its slots' descriptors rather than its __init__, which
    sets each field through object.__setattr__ and costs twice as much: a spec is built on
    apply's path for every job whose spec is not cached, and renamed on every read of a row
    made from a shared template. The record stays frozen to everyone else."""

    __slots__ = ("cls", "setters", "values", "index", "defaults")

    def __init__(self, cls: type) -> None:
        names = [f.name for f in fields(cls)]
        self.cls = cls
        self.setters = tuple(getattr(cls, n).__set__ for n in names)
        self.values = attrgetter(*names)
        self.index = {n: i for i, n in enumerate(names)}
        self.defaults = tuple(f.default for f in fields(cls))      # MISSING where required

    def positions(self, keys: Keys) -> dict[str, tuple[Reader, int]]:
        """Each canonical key's reader and the position of its field (for `build`)."""
        return {k: (read, self.index[k]) for k, read in keys.readers.items()}

    def replaced(self, obj: Any, changes: Mapping[str, Any]) -> Any:
        values = list(self.values(obj))
        for k, v in changes.items():
            values[self.index[k]] = v
        return self.build(values)

    def build(self, values: list[Any]) -> Any:
        """The record of every field's value, in field order."""
        obj: Any = object.__new__(self.cls)
        for set_field, v in zip(self.setters, values):
            set_field(obj, v)
        return obj


class _Record:
    """A record whose object is its fields, each written as its key says (`keys`, set with the
    tables below), and its `extra` as it came."""

    __slots__ = ()
    keys: ClassVar[Keys]
    extra: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        out = _written(self, self.keys)
        if self.extra:
            out.update(self.extra)
        return out


class _Handler(_Record):
    """A handler of a known kind: its object is ``{kind: its fields}``."""

    __slots__ = ()
    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {self.kind: _Record.to_dict(self)}


def dump(d: Mapping[str, Any]) -> str:
    """The canonical JSON text of a canonical dict: sorted keys, no spaces, ASCII."""
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


# ------------------------------------------------------------------ handlers


@dataclass(frozen=True, slots=True)
class ShellHandler(_Handler):
    """`/bin/sh -c command`, or `argv` run directly (exactly one of them)."""

    kind: ClassVar[str] = "shell"
    command: str = ""
    argv: tuple[str, ...] = ()
    workdir: str = ""
    env: Mapping[str, str] = EMPTY
    inherit_env: tuple[str, ...] = ()          # sorted, unique
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class HttpHandler(_Handler):
    kind: ClassVar[str] = "http"
    url: str
    method: str = "POST"
    headers: Mapping[str, str] = EMPTY
    body: str = ""
    insecure_skip_verify: bool = False
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class PythonHandler(_Handler):
    """A function registered with the SDK worker (`name`), given `args_json`."""

    kind: ClassVar[str] = "python"
    name: str
    args_json: str = ""
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class Mount(_Record):
    source: str
    target: str
    read_only: bool = True
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class ContainerHandler(_Handler):
    """A container run by the worker's engine. The defaults that matter to isolation (network,
    read-only root, pull) are written out in the canonical form, so a reader sees what the
    worker will do."""

    kind: ClassVar[str] = "container"
    image: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = EMPTY
    workdir: str = ""
    user: str = ""
    network: str = "none"
    cpu: float = 0
    memory: str = ""                  # "<N>Mi"
    pids: int = 0
    read_only: bool = True
    mounts: tuple[Mount, ...] = ()
    pull: str = "never"
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class SensorHandler(_Handler):
    """A DAG task that checks a condition once per attempt: one of `file`, `http_url`,
    `command`, polled every `poll_interval_seconds` until `timeout_seconds` from the first poll."""

    kind: ClassVar[str] = "sensor"
    poll_interval_seconds: float
    timeout_seconds: float
    file: str = ""
    http_url: str = ""
    command: str = ""
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class RawHandler:
    """A handler in any other form: not one object of one known kind in canonical form (an
    entry made by hand, or a DAG's schedule row, whose handler is {}). Kept as committed, so it
    is written back unchanged and a worker gets it as the entry had it."""

    value: Any

    @property
    def kind(self) -> str:
        """The first key, as a reader of the committed object would take it ("" for none)."""
        return next(iter(self.value), "") if isinstance(self.value, dict) else ""

    def to_dict(self) -> Any:
        return self.value


Handler = ShellHandler | HttpHandler | PythonHandler | ContainerHandler | SensorHandler | RawHandler

ShellHandler.keys = Keys({"command": _Key(_text), "argv": _Key(_words, _list), "workdir": _Key(_text),
                "env": _Key(_text_map, _dict), "inherit_env": _Key(_words, _list)})
HttpHandler.keys = Keys({"url": _Key(_any_text, always=True), "method": _Key(_any_text, always=True),
               "headers": _Key(_text_map, _dict), "body": _Key(_text), "insecure_skip_verify": _Key(_true)})
PythonHandler.keys = Keys({"name": _Key(_any_text, always=True), "args_json": _Key(_text)})
Mount.keys = Keys({"source": _Key(_any_text, always=True), "target": _Key(_any_text, always=True),
                "read_only": _Key(_flag, always=True)})


def _mounts(v: Any) -> Any:
    if type(v) is not list or not v:
        return _NOT
    got = tuple(_exact(Mount, m) for m in v)
    return _NOT if any(m is _NOT for m in got) else got


def _mount_list(v: Any) -> Any:
    return [m.to_dict() for m in v]


ContainerHandler.keys = Keys({
    "image": _Key(_any_text, always=True), "command": _Key(_text), "args": _Key(_words, _list),
    "env": _Key(_text_map, _dict), "workdir": _Key(_text), "user": _Key(_text),
    "network": _Key(_any_text, always=True), "cpu": _Key(_number), "memory": _Key(_text), "pids": _Key(_whole),
    "read_only": _Key(_flag, always=True), "mounts": _Key(_mounts, _mount_list), "pull": _Key(_any_text, always=True)})
SensorHandler.keys = Keys({"file": _Key(_text), "http_url": _Key(_text), "command": _Key(_text),
                 "poll_interval_seconds": _Key(_any_number, always=True),
                 "timeout_seconds": _Key(_any_number, always=True)})
_HANDLERS: dict[str, type[_Handler]] = {
    cls.kind: cls for cls in (ShellHandler, HttpHandler, PythonHandler, ContainerHandler, SensorHandler)}


def handler_of(value: Any) -> Handler:
    """The handler a canonical handler object (`{"<kind>": {...}}`) says; a RawHandler for any
    other value."""
    if type(value) is dict and len(value) == 1:
        [(kind, body)] = value.items()
        known = _HANDLERS.get(kind)
        if known is not None:
            got = _shared_handler(known, kind, body)
            if got is not _NOT:
                return cast(Handler, got)
    return RawHandler(value)


_SHARED_HANDLERS: dict[tuple[Any, ...], Any] = {}
_SHARED_HANDLERS_KEPT = 1024


def _shared_handler(cls: type[_Handler], kind: str, body: Any) -> Any:
    """_exact(cls, body), one record for every equal body of strings alone: most jobs share
    their handler with many others (`true`, one Python function), and building it was a third
    of reading a spec. Only strings, because True == 1 == 1.0 in a key while the canonical text
    tells them apart. A memo of a pure function on immutable values: it never changes a result."""
    if type(body) is not dict or not all(type(v) is str for v in body.values()):
        return _exact(cls, body)
    key = (kind, *body.items())
    hit = _SHARED_HANDLERS.get(key)
    if hit is None:
        hit = _exact(cls, body)
        if hit is not _NOT:
            if len(_SHARED_HANDLERS) >= _SHARED_HANDLERS_KEPT:
                _SHARED_HANDLERS.clear()
            _SHARED_HANDLERS[key] = hit
    return hit


def _handler(v: Any) -> Any:
    return handler_of(v)


def handler_json(handler: Handler | None) -> str:
    """The handler as a worker receives it (Assignment.handler_json): its canonical object as
    JSON, keys sorted, as the committed text has them."""
    return json.dumps(handler.to_dict() if handler is not None else {}, sort_keys=True)


def handler_level(handler: Handler | None) -> int:
    """The feature level a handler needs beyond its entry kind's: a container is level 6 (an
    older build refuses it as invalid, so a replica of that build would diverge)."""
    if isinstance(handler, ContainerHandler):
        return CONTAINER_FEATURE_LEVEL
    if isinstance(handler, RawHandler) and isinstance(handler.value, dict) and "container" in handler.value:
        return CONTAINER_FEATURE_LEVEL
    return 1


# ------------------------------------------------------------------ the smaller records


@dataclass(frozen=True, slots=True)
class RetrySpec(_Record):
    """As the user gave it; 0 = the default (schedd.core.retry.RetryPolicy fills them)."""

    max_attempts: int = 0
    initial_backoff_seconds: float = 0
    max_backoff_seconds: float = 0
    multiplier: float = 0
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class SlaSpec(_Record):
    """A deadline per run: `within_seconds` of its scheduled time, and/or by the wall time `by`
    ("HH:MM" in `timezone`, "" = the owner's zone); `webhook` is POSTed once per miss."""

    within_seconds: float = 0
    by: str = ""
    timezone: str = ""
    webhook: str = ""
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class SealedSecret:
    """One env_secret value as the API edge sealed it: core never sees the plaintext."""

    version: int
    ciphertext: str
    extra: Mapping[str, Any] = EMPTY

    def to_dict(self) -> dict[str, Any]:
        return {"v": self.version, "ct": self.ciphertext, **self.extra}


@dataclass(frozen=True, slots=True)
class ResourceLimits(_Record):
    """Per-attempt limits the worker applies; 0 = none."""

    memory_mb: int = 0
    cpu_seconds: float = 0
    open_files: int = 0
    processes: int = 0
    extra: Mapping[str, Any] = EMPTY


@dataclass(frozen=True, slots=True)
class Policies:
    """How a job's runs are admitted and kept (schedd.core.policy.JobPolicy reads them with their
    defaults): overlap, concurrency key, catch-up, starting deadline, jitter, delivery, priority,
    pool and retention age. "" and 0 = the default."""

    overlap: str = ""
    max_active: int = 0
    queue_limit: int = 0
    concurrency_key: str = ""
    concurrency_limit: int = 0
    catchup: str = ""
    catchup_window_seconds: float = 0
    catchup_max: int = 0
    catchup_order: str = ""
    starting_deadline_seconds: float = 0
    jitter_seconds: float = 0
    history_max_age_seconds: float = 0
    delivery: str = ""
    priority: int = 0
    pool: str = ""


NO_POLICIES = Policies()


@dataclass(frozen=True, slots=True)
class CalendarRef(_Record):
    """The calendars a job's instants are checked against (schedd.core.calendars): an instant on
    a date of a `skip` calendar, or (with `only` calendars) on a date in none of them, is skipped,
    or with `on_skip` "next_allowed" moved to the schedule's next allowed instant."""

    skip: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    on_skip: str = ""                    # "" = skip
    extra: Mapping[str, Any] = EMPTY


CALENDAR_FEATURE_LEVEL = 8           # schedd.core.features Level 8: entries carrying one say fl=8


@dataclass(frozen=True, slots=True)
class WindowSpec(_Record):
    """A flexible window (schedd.core.windows): each day's run may start at any second of
    [start, end) local time in the job's zone, placed by the leader where the herd forecast is
    least loaded; the end is the run's SLA deadline. "HH:MM" each; an end before the start wraps
    past midnight."""

    start: str = ""
    end: str = ""
    extra: Mapping[str, Any] = EMPTY


WINDOW_FEATURE_LEVEL = 9             # schedd.core.features Level 9: entries carrying one say fl=9
WINDOW_MARK = '"window":'            # in a committed spec's text: it has a window (or says so by hand)

RetrySpec.keys = Keys({"max_attempts": _Key(_whole), "initial_backoff_seconds": _Key(_number),
                "max_backoff_seconds": _Key(_number), "multiplier": _Key(_number)})
SlaSpec.keys = Keys({"within_seconds": _Key(_number), "by": _Key(_text), "timezone": _Key(_text), "webhook": _Key(_text)})
CalendarRef.keys = Keys({"skip": _Key(_words, _list), "only": _Key(_words, _list), "on_skip": _Key(_text)})
WindowSpec.keys = Keys({"start": _Key(_any_text, always=True), "end": _Key(_any_text, always=True)})
ResourceLimits.keys = Keys({"memory_mb": _Key(_whole), "cpu_seconds": _Key(_number), "open_files": _Key(_whole),
                 "processes": _Key(_whole)})
_POLICIES = Keys({
    "overlap": _Key(_text), "max_active": _Key(_whole), "queue_limit": _Key(_whole),
    "concurrency_key": _Key(_text), "concurrency_limit": _Key(_whole), "catchup": _Key(_text),
    "catchup_window_seconds": _Key(_number), "catchup_max": _Key(_whole), "catchup_order": _Key(_text),
    "starting_deadline_seconds": _Key(_number), "jitter_seconds": _Key(_number),
    "history_max_age_seconds": _Key(_number), "delivery": _Key(_text), "priority": _Key(_whole), "pool": _Key(_text)})


def _retry(v: Any) -> Any:
    return _exact(RetrySpec, v)


def _sla(v: Any) -> Any:
    return _exact(SlaSpec, v)


def _limits(v: Any) -> Any:
    return _exact(ResourceLimits, v)


def _calendar(v: Any) -> Any:
    return _exact(CalendarRef, v)


def _window(v: Any) -> Any:
    return _exact(WindowSpec, v)


def _sealed(v: Any) -> Any:
    if type(v) is not dict or type(v.get("v")) is not int or type(v.get("ct")) is not str:
        return _NOT
    return SealedSecret(v["v"], v["ct"], {k: x for k, x in v.items() if k not in ("v", "ct")} or EMPTY)


def _secrets(v: Any) -> Any:
    if type(v) is not dict or not v or not all(type(k) is str for k in v):
        return _NOT
    got = {k: _sealed(x) for k, x in v.items()}
    return _NOT if any(s is _NOT for s in got.values()) else got


def _secret_map(v: Any) -> Any:
    return {k: s.to_dict() for k, s in v.items()}


# ------------------------------------------------------------------ job specs


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as committed. `handler` is None only for a hand-made spec without one; a DAG's task
    rows carry `dag` and `task`, and its schedule row a RawHandler of {}."""

    name: str
    team: str
    schedule: str
    timezone: str
    handler: Handler | None = None
    description: str = ""
    labels: Mapping[str, str] = EMPTY
    worker_labels: Mapping[str, str] = EMPTY
    retry: RetrySpec | None = None
    timeout_seconds: float = 0
    policies: Policies = NO_POLICIES
    dst_gap: str = ""                    # kept only where it differs from the schedule's default
    dst_fold: str = ""
    sla: SlaSpec | None = None
    paused: bool = False
    history_limit: int = 0               # 0 = DEFAULT_HISTORY_LIMIT
    env_secret: Mapping[str, SealedSecret] = EMPTY
    limits: ResourceLimits | None = None
    params: Mapping[str, str] = EMPTY    # default run parameters (schedd.core.params; feature level 7)
    dag: str = ""                        # the DAG whose row this is
    task: str = ""                       # and its task ("" for the DAG's schedule row)
    calendar: CalendarRef | None = None  # calendars its instants are checked against (feature level 8)
    on_blackout: str = ""                # "" = skip; "defer" (schedd.core.calendars; feature level 8)
    window: WindowSpec | None = None     # a flexible window (schedd.core.windows; feature level 9)
    extra: Mapping[str, Any] = EMPTY     # keys and values not in canonical form (module docstring)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSpec:
        """The spec of a canonical dict, lossless for any JSON object with a string name, team,
        schedule and timezone (ValidationError otherwise). One pass over the keys: the policies'
        go to their record."""
        values = list(_JOB_BUILDER.defaults)
        policy: list[Any] | None = None
        extra: dict[str, Any] = {}
        for k, v in d.items():
            at = _JOB_AT.get(k)
            if at is not None:
                got = at[0](v)
                if got is not _NOT:
                    values[at[1]] = got
                    continue
            elif (at := _POLICY_AT.get(k)) is not None:
                got = at[0](v)
                if got is not _NOT:
                    if policy is None:
                        policy = list(_POLICY_BUILDER.defaults)
                    policy[at[1]] = got
                    continue
            extra[k] = v
        for k in REQUIRED:
            if values[_JOB_BUILDER.index[k]] is MISSING:
                raise ValidationError(f"spec.{k} must be a string")
        if policy is not None:
            values[_JOB_BUILDER.index["policies"]] = _POLICY_BUILDER.build(policy)
        if extra:
            values[_JOB_BUILDER.index["extra"]] = extra
        spec: JobSpec = _JOB_BUILDER.build(values)
        return spec

    @classmethod
    def from_text(cls, text: str) -> JobSpec:
        """A stored spec's text (checked when it was committed) as a spec."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        out = _written(self, _JOB)
        if self.policies is not NO_POLICIES:
            out.update(_written(self.policies, _POLICIES))
        if self.extra:
            out.update(self.extra)
        return out

    def text(self) -> str:
        """The committed form."""
        return dump(self.to_dict())

    def renamed(self, name: str) -> JobSpec:
        """This spec under another name (jobs made from one template share everything else)."""
        return self if name == self.name else self._replaced(name=name)

    def with_paused(self, paused: bool) -> JobSpec:
        """The spec as a pause or resume rewrites it (a hand-made "paused" not in canonical form
        is replaced too, as rewriting the committed object did)."""
        extra = {k: v for k, v in self.extra.items() if k != "paused"} if "paused" in self.extra else self.extra
        return self._replaced(paused=paused, extra=extra or EMPTY)

    def _replaced(self, **changes: Any) -> JobSpec:
        copy: JobSpec = _JOB_BUILDER.replaced(self, changes)
        return copy

    @property
    def handler_kind(self) -> str:
        return "" if self.handler is None else self.handler.kind

    @property
    def level(self) -> int:
        """The feature level this spec needs beyond its entry kind's (`handler_level`; a
        calendar or a blackout policy: CALENDAR_FEATURE_LEVEL)."""
        level = handler_level(self.handler)
        if self.calendar is not None or self.on_blackout:
            level = max(level, CALENDAR_FEATURE_LEVEL)
        if self.window is not None:
            level = max(level, WINDOW_FEATURE_LEVEL)
        return level

    @property
    def dst_policy(self) -> str:
        """Job.dst: "gap/fold" as the spec names them, each "" when not named; "" for neither."""
        return f"{self.dst_gap}/{self.dst_fold}" if self.dst_gap or self.dst_fold else ""


_JOB = Keys({
    "name": _Key(_any_text, always=True), "team": _Key(_any_text, always=True),
    "schedule": _Key(_any_text, always=True), "timezone": _Key(_any_text, always=True),
    "handler": _Key(_handler, _record), "description": _Key(_text), "labels": _Key(_text_map, _dict),
    "worker_labels": _Key(_text_map, _dict), "retry": _Key(_retry, _record), "timeout_seconds": _Key(_number),
    "dst_gap": _Key(_text), "dst_fold": _Key(_text), "sla": _Key(_sla, _record), "paused": _Key(_true),
    "history_limit": _Key(_whole), "env_secret": _Key(_secrets, _secret_map), "limits": _Key(_limits, _record),
    "params": _Key(_text_map, _dict), "dag": _Key(_text), "task": _Key(_text),
    "calendar": _Key(_calendar, _record), "on_blackout": _Key(_text), "window": _Key(_window, _record)})
_JOB_BUILDER = _Builder(JobSpec)
_POLICY_BUILDER = _Builder(Policies)
_JOB_AT = _JOB_BUILDER.positions(_JOB)
_POLICY_AT = _POLICY_BUILDER.positions(_POLICIES)


class JobHead(NamedTuple):
    """What apply writes into a job row when it stores a spec: the fields it computes with there,
    read as apply has always read them (any truthy "paused" pauses; no history_limit is the
    default). The full spec is built only when asked for (`spec()`): registering a job whose
    template is known builds none, which keeps registering a million jobs as cheap as it was.
    An immutable tuple rather than a frozen dataclass: one is built for every job a put
    writes, and a tuple is built at C speed."""

    name: str
    team: str
    schedule: str
    timezone: str
    dst_gap: str
    dst_fold: str
    paused: bool
    history_limit: int                   # 0 = DEFAULT_HISTORY_LIMIT
    source: Any                          # the committed object (a dict), or the JobSpec itself

    @staticmethod
    def of(spec: JobSpec) -> JobHead:
        return JobHead(spec.name, spec.team, spec.schedule, spec.timezone, spec.dst_gap, spec.dst_fold,
                       spec.paused, spec.history_limit, spec)

    def spec(self) -> JobSpec:
        return self.source if isinstance(self.source, JobSpec) else JobSpec.from_dict(self.source)

    def renamed(self, name: str) -> JobHead:
        """The head of the same spec under another name (a batch made from one template)."""
        source = self.source.renamed(name) if isinstance(self.source, JobSpec) else {**self.source, "name": name}
        return self._replace(name=name, source=source)

    @property
    def dst_policy(self) -> str:
        """Job.dst: "gap/fold" as the spec names them, each "" when not named; "" for neither."""
        return f"{self.dst_gap}/{self.dst_fold}" if self.dst_gap or self.dst_fold else ""



def load_job(text: object) -> JobHead:
    """A job spec from a committed entry, checking only what apply relies on.

    Full validation (`model.canonical_spec`) runs on the proposer before anything is committed;
    the entry then carries the canonical text, which apply stores as it is. Apply re-checks the
    fields it computes with, so a malformed entry is a deterministic rejection (these messages
    are part of the replicated result) rather than an exception, and a later change of validation
    rules never changes how old entries replay.
    """
    if not isinstance(text, str):
        raise ValidationError("spec must be canonical JSON text")
    try:
        d = json.loads(text)
    except ValueError:
        raise ValidationError("spec is not valid JSON") from None
    if not isinstance(d, dict):
        raise ValidationError("spec must be an object")
    name = d.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(f"bad job name {name!r}")
    for key in ("team", "schedule", "timezone"):
        if not isinstance(d.get(key), str):
            raise ValidationError(f"spec.{key} must be a string")
    limit = d.get("history_limit", DEFAULT_HISTORY_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_HISTORY_LIMIT:
        raise ValidationError("bad history_limit")
    _check_dst(d)
    _check_sla(d)
    return JobHead(name, d["team"], d["schedule"], d["timezone"], d.get("dst_gap") or "", d.get("dst_fold") or "",
                   bool(d.get("paused")), d.get("history_limit") or 0, d)


def _check_dst(d: Mapping[str, Any]) -> None:
    if d.get("dst_gap", "shift") not in sched.GAP_POLICIES:
        raise ValidationError("bad dst_gap")
    if d.get("dst_fold", "first") not in sched.FOLD_POLICIES:
        raise ValidationError("bad dst_fold")


def _check_sla(d: Mapping[str, Any]) -> None:
    """What apply computes with of a committed SLA: its deadline fields."""
    sla = d.get("sla")
    if sla is None:
        return
    if not isinstance(sla, dict):
        raise ValidationError("bad sla")
    within = sla.get("within_seconds", 0)
    if isinstance(within, bool) or not isinstance(within, (int, float)) or not 0 <= within <= MAX_SLA_SECONDS:
        raise ValidationError("bad sla.within_seconds")
    by = sla.get("by", "")
    if not isinstance(by, str) or (by and not SLA_BY_RE.match(by)):
        raise ValidationError("bad sla.by")
    if not within and not by:
        raise ValidationError("sla needs within_seconds or by")
    for key in ("timezone", "webhook"):
        if not isinstance(sla.get(key, ""), str):
            raise ValidationError(f"bad sla.{key}")


def committed_level(text: str, dag: bool) -> int:
    """The feature level the specs of a committed text need (a DAG: its tasks'); 1 for a text
    that is not a spec: the entry kind's own checks refuse it as before."""
    try:
        d = json.loads(text)
    except ValueError:
        return 1
    if not isinstance(d, dict):
        return 1
    specs = d.get("tasks") if dag else [d]
    if not isinstance(specs, list):
        return 1
    return max((_raw_level(s.get("handler")) for s in specs if isinstance(s, dict)), default=1)


def _raw_level(handler: Any) -> int:
    return CONTAINER_FEATURE_LEVEL if isinstance(handler, dict) and "container" in handler else 1


# ------------------------------------------------------------------ DAG specs


@dataclass(frozen=True, slots=True)
class DagTask:
    """One task of a DAG: a job handler or a SensorHandler, and its place in the graph
    (`upstream`, `trigger_rule`; "" = all_success)."""

    name: str
    handler: Handler | None = None
    timeout_seconds: float = 0
    retry: RetrySpec | None = None
    pool: str = ""
    worker_labels: Mapping[str, str] = EMPTY
    description: str = ""
    upstream: tuple[str, ...] = ()
    trigger_rule: str = ""
    extra: Mapping[str, Any] = EMPTY

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DagTask:
        typed, extra = _split(_TASK, d)
        if "name" not in typed:
            raise ValidationError("a task's name must be a string")
        return cls(**typed, extra=extra or EMPTY)

    def to_dict(self) -> dict[str, Any]:
        out = _written(self, _TASK)
        if self.extra:
            out.update(self.extra)
        return out

    def row_extra(self) -> Mapping[str, Any]:
        """What of `extra` a task's job row takes, as it takes it: the job keys it copies, when
        set (schedd.core.dags builds the row)."""
        return {k: v for k, v in self.extra.items() if k in _ROW_KEYS and v} or EMPTY


_TASK = Keys({
    "name": _Key(_any_text, always=True), "handler": _Key(_handler, _record), "timeout_seconds": _Key(_number),
    "retry": _Key(_retry, _record), "pool": _Key(_text), "worker_labels": _Key(_text_map, _dict),
    "description": _Key(_text), "upstream": _Key(_words, _list), "trigger_rule": _Key(_text)})
_ROW_KEYS = frozenset({"retry", "timeout_seconds", "pool", "worker_labels", "description"})


def _tasks(v: Any) -> Any:
    if type(v) is not list or not all(type(t) is dict and type(t.get("name")) is str for t in v):
        return _NOT
    return tuple(DagTask.from_dict(t) for t in v)


def _task_list(v: Any) -> Any:
    return [t.to_dict() for t in v]


@dataclass(frozen=True, slots=True)
class DagSpec:
    """A DAG as committed: its own fields validate like a job's; `schedule` "" = on demand only;
    `max_runs` 0 = the default."""

    name: str
    team: str
    schedule: str
    timezone: str
    tasks: tuple[DagTask, ...] = ()
    description: str = ""
    sla: SlaSpec | None = None
    max_runs: int = 0
    extra: Mapping[str, Any] = EMPTY

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DagSpec:
        typed, extra = _split(_DAG, d)
        for k in REQUIRED:
            if k not in typed:
                raise ValidationError(f"spec.{k} must be a string")
        return cls(**typed, extra=extra or EMPTY)

    @classmethod
    def from_text(cls, text: str) -> DagSpec:
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        out = _written(self, _DAG)
        if self.extra:
            out.update(self.extra)
        return out

    def text(self) -> str:
        return dump(self.to_dict())

    def committed_max_runs(self) -> Any:
        """max_runs as the entry has it, canonical or not: apply checks it."""
        return self.max_runs or self.extra.get("max_runs")


_DAG = Keys({
    "name": _Key(_any_text, always=True), "team": _Key(_any_text, always=True),
    "schedule": _Key(_any_text, always=True), "timezone": _Key(_any_text, always=True),
    "tasks": _Key(_tasks, _task_list, always=True), "description": _Key(_text), "sla": _Key(_sla, _record),
    "max_runs": _Key(_whole)})


def load_dag(text: str) -> DagSpec:
    """A DAG spec from a committed entry, after the checks of its graph's shape that apply
    relies on, in the order apply words them (ValueError, TypeError or ScheduleError: apply
    answers "invalid DAG: <message>"). The cycle check, the SLA and the schedule come next, in
    schedd.core.dags, on the result."""
    d = json.loads(text)
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not NAME_RE.match(d["name"]):
        raise ValueError("bad DAG name")
    for key in ("team", "schedule", "timezone"):
        if not isinstance(d.get(key), str):
            raise ValueError(f"spec.{key} must be a string")
    tasks = d.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise ValueError("no tasks")
    names = []
    for t in tasks:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not NAME_RE.match(t["name"]):
            raise ValueError("bad task")
        names.append(t["name"])
    if len(set(names)) != len(names):
        raise ValueError("duplicate task names")
    known = set(names)
    for t in tasks:
        ups = t.get("upstream") or []
        if not isinstance(ups, list) or any(u not in known for u in ups):
            raise ValueError(f"task {t['name']!r}: bad upstream")
    return DagSpec.from_dict(d)


def check_committed_sla(owner: JobSpec | DagSpec) -> None:
    """The committed SLA check of `load_job`, for a DAG (schedd.core.dags runs it after the cycle
    check): on the SLA as committed, canonical or not."""
    _check_sla({"sla": owner.sla.to_dict() if owner.sla is not None else owner.extra.get("sla")})
