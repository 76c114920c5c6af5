"""Entities of the replicated state and the validation of what users send.

One place decides what a valid job spec is: the API calls `canonical_spec` before it proposes
anything (so bad input is refused with a clear message and nothing is committed); what it gives is
the typed spec (schedd.core.specs.JobSpec) and its committed text. Apply checks the committed text
again for what it computes with (`specs.load_job`), so a replica never trusts its proposer.
Validation is a pure function of the spec, so every proposer gives the same answer.

Everything here is pure: no clock, no I/O, no randomness.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, ClassVar, Generic, TypeVar, overload

from schedd.core import schedule as sched
from schedd.core.param_rules import check as check_params
from schedd.core.specs import (
    CONTAINER_FEATURE_LEVEL as CONTAINER_FEATURE_LEVEL, DEFAULT_HISTORY_LIMIT as DEFAULT_HISTORY_LIMIT,
    MAX_HISTORY_LIMIT as MAX_HISTORY_LIMIT, MAX_SLA_SECONDS as MAX_SLA_SECONDS, NAME_RE as NAME_RE,
    SLA_BY_RE as SLA_BY_RE, CalendarRef, WindowSpec, ContainerHandler, Handler, HttpHandler, JobSpec, Mount, Policies, PythonHandler,
    ResourceLimits, RetrySpec, SealedSecret, ShellHandler, SlaSpec, ValidationError as ValidationError,
)

TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")

DEFAULT_TEAM = "default"
MAX_SPEC_BYTES = 16 * 1024
MAX_COMMAND_BYTES = 8 * 1024
MAX_MAP_ENTRIES = 64
MAX_TIMEOUT_S = 7 * 24 * 3600

OVERLAP_POLICIES = ("allow", "skip", "queue")
CATCHUP_POLICIES = ("all", "latest", "none")
CATCHUP_ORDERS = ("newest", "oldest")
DELIVERY_POLICIES = ("at_least_once", "at_most_once")
ON_SKIP = ("skip", "next_allowed")               # a job's calendar.on_skip (schedd.core.calendars)
ON_BLACKOUT = ("skip", "defer")                  # a job's on_blackout
MAX_ERROR_CHARS = 2048
MAX_OUTPUT_TAIL_CHARS = 4096


# Execution states (docs/architecture.md "Facts": entities). Only SCHEDULED is produced before workers exist.
SCHEDULED = "SCHEDULED"
RUNNING = "RUNNING"
RETRY_WAIT = "RETRY_WAIT"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
CANCELLED = "CANCELLED"
SKIPPED = "SKIPPED"
UPSTREAM_FAILED = "UPSTREAM_FAILED"
LOST = "LOST"
REJECTED = "REJECTED"            # an attempt the worker declined before starting; not counted
EXECUTION_STATES = (SCHEDULED, RUNNING, RETRY_WAIT, SUCCEEDED, FAILED, TIMED_OUT, CANCELLED,
                    SKIPPED, UPSTREAM_FAILED, LOST)
TERMINAL_STATES = frozenset({SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, SKIPPED, UPSTREAM_FAILED, LOST})

Gap = tuple[int, int, str, str]      # instants [from_ms, to_ms) not run: (from, to, disposition, detail)


SPEC_NAME_MARK = "\x00"      # where a spec template holds its job's name (never in JSON text)


def spec_template(text: str, name: str) -> str:
    """The committed spec text with every `"<name>"` string literal replaced by SPEC_NAME_MARK,
    interned: jobs that differ only by name (a million jobs made from one template) share one
    string instead of holding a copy each. Exactly reversible (`spec_of_template`): JSON text
    accepted by json.loads holds no raw NUL character, so the mark only ever stands for the name."""
    return sys.intern(text.replace(f'"{name}"', SPEC_NAME_MARK))


def spec_of_template(template: str, name: str) -> str:
    return template.replace(SPEC_NAME_MARK, f'"{name}"')


class RowSpecs:
    """The typed spec of job rows, built once per spec template and shared by the rows made from
    it (renamed for each), or per (template, name) where the name stands elsewhere in the text
    too. A row keeps its committed text (its template is what snapshots and the digest hold);
    holding a JobSpec in each of a million rows would cost more than the row. Bounded: past
    `limit` entries the older half goes (a spec seen again is parsed again). Results never depend
    on what is cached: it is a memo of a pure function, shared by every thread that reads rows."""

    __slots__ = ("limit", "_entries")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: dict[str | tuple[str, str], JobSpec] = {}

    def get(self, template: str, name: str) -> JobSpec:
        hit = self._entries.get(template)
        if hit is not None:
            return hit.renamed(name)
        own = self._entries.get((template, name))
        if own is not None:
            return own
        spec = JobSpec.from_text(spec_of_template(template, name))
        if len(self._entries) >= self.limit:
            for key in list(islice(self._entries, self.limit // 2)):
                self._entries.pop(key, None)
        self._entries[template if template.count(SPEC_NAME_MARK) == 1 else (template, name)] = spec
        return spec


ROW_SPECS = RowSpecs(limit=1024)


# A job row's fields that few rows differ in: (team, schedule, tz, history_limit, dst, paused,
# created_by, version). One tuple of them is shared by every row holding the same values.
Traits = tuple[str, str, str, int, str, bool, str, int]
_TEAM, _SCHEDULE, _TZ, _HISTORY_LIMIT, _DST, _PAUSED, _CREATED_BY, _VERSION = range(8)
T = TypeVar("T")


class TraitsMemo:
    """The shared tuple of each combination of traits: a million jobs registered alike hold one
    tuple (and one copy of its strings, restored ones included) instead of seven slots and
    seven values each. Bounded like RowSpecs: past `limit` entries the older half goes, which
    costs only sharing (a row keeps its tuple; rows made later get an equal one). The tuple a row
    holds is equal in value to what it was given, so nothing it answers depends on the memo;
    `paused` is made a bool first, so an equal tuple never swaps False for 0."""

    __slots__ = ("limit", "_entries")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: dict[Traits, Traits] = {}

    def get(self, team: str, schedule: str, tz: str, history_limit: int, dst: str, paused: bool,
            created_by: str, version: int) -> Traits:
        key: Traits = (team, schedule, tz, history_limit, dst, bool(paused), created_by, version)
        hit = self._entries.get(key)
        if hit is not None:
            return hit
        if len(self._entries) >= self.limit:
            for old in list(islice(self._entries, self.limit // 2)):
                self._entries.pop(old, None)
        key = tuple(sys.intern(v) if type(v) is str else v for v in key)   # type: ignore[assignment]
        self._entries[key] = key
        return key


TRAITS = TraitsMemo(limit=1 << 16)


class _Trait(Generic[T]):
    """An attribute of a job row held in its shared traits (item `i`): writing it swaps the row's
    tuple for the shared one with that item changed."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i

    @overload
    def __get__(self, job: None, owner: type[Any]) -> _Trait[T]: ...

    @overload
    def __get__(self, job: Job, owner: type[Any]) -> T: ...

    def __get__(self, job: Job | None, owner: type[Any]) -> T | _Trait[T]:
        return self if job is None else job.traits[self.i]   # type: ignore[return-value]

    def __set__(self, job: Job, value: T) -> None:
        t: list[Any] = list(job.traits)
        t[self.i] = value
        job.traits = TRAITS.get(*t)


@dataclass(slots=True, init=False, repr=False)
class Job:
    """One job row. Its committed spec text is the source of truth (handler, retry and the
    rest), kept as a template shared by jobs that differ only by name (`spec_t`, see
    spec_template); `spec` reads it as the typed JobSpec (RowSpecs), `spec_text` as the text. The
    hot fields the scheduler needs are kept unpacked beside it; those that few jobs differ in
    (team, schedule, zone, history limit, DST policy, paused, creator, version) are one shared
    tuple (`traits`, TraitsMemo), read and written as attributes of their own. What a row costs
    in memory is most of what a replica holds per job, hence the ten slots.

    The snapshot's row layout (schedd.core.image.JOB_FIELDS) is ROW_FIELDS, the constructor's
    arguments, not the slots: changing ROW_FIELDS changes the format."""

    name: str
    spec_t: str                      # spec_template(spec, name); read and write `spec`
    traits: Traits
    next_fire: int | None
    created_ms: int
    updated_ms: int
    last_fire: int | None            # last scheduled instant recorded by the schedule
    fired_total: int                 # executions recorded since creation, pruned ones included
    gaps: tuple[Gap, ...]            # (from_ms, to_ms, disposition, detail): instants not run and why (newest last)
    incarnation: int                 # log index of the entry that created it (0: before this field)

    ROW_FIELDS: ClassVar[tuple[str, ...]] = (
        "name", "team", "schedule", "tz", "spec_t", "version", "paused", "next_fire", "created_ms",
        "updated_ms", "created_by", "history_limit", "last_fire", "fired_total", "gaps", "dst", "incarnation")
    # What the state digest hashes (schedd.core.digest): the spec's text, not its template, so
    # the digest of a job row is the same whichever way a version stores the text.
    DIGEST_FIELDS: ClassVar[tuple[str, ...]] = tuple("spec_text" if f == "spec_t" else f for f in ROW_FIELDS)

    def __init__(self, name: str, team: str, schedule: str, tz: str, spec_t: str, version: int, paused: bool,
                 next_fire: int | None, created_ms: int, updated_ms: int, created_by: str,
                 history_limit: int = DEFAULT_HISTORY_LIMIT, last_fire: int | None = None, fired_total: int = 0,
                 gaps: tuple[Gap, ...] = (), dst: str = "", incarnation: int = 0) -> None:
        self.name, self.spec_t = name, spec_t
        self.traits = TRAITS.get(team, schedule, tz, history_limit, dst, paused, created_by, version)
        self.next_fire, self.created_ms, self.updated_ms = next_fire, created_ms, updated_ms
        self.last_fire, self.fired_total, self.gaps, self.incarnation = last_fire, fired_total, gaps, incarnation

    def __repr__(self) -> str:
        return f"Job({', '.join(f'{f}={getattr(self, f)!r}' for f in self.ROW_FIELDS)})"

    # The traits as attributes (not annotated: they are not dataclass fields).
    team = _Trait[str](_TEAM)
    schedule = _Trait[str](_SCHEDULE)
    tz = _Trait[str](_TZ)
    history_limit = _Trait[int](_HISTORY_LIMIT)
    dst = _Trait[str](_DST)                  # DST policy "gap/fold" of the schedule; "" = the defaults
    paused = _Trait[bool](_PAUSED)
    created_by = _Trait[str](_CREATED_BY)
    version = _Trait[int](_VERSION)          # bumped by every change of the spec

    def set_traits(self, *, team: str, schedule: str, tz: str, history_limit: int, dst: str, paused: bool,
                   version: int) -> None:
        """Change several traits at once (one lookup of the shared tuple, not one per trait)."""
        self.traits = TRAITS.get(team, schedule, tz, history_limit, dst, paused, self.created_by, version)

    @property
    def spec(self) -> JobSpec:
        return ROW_SPECS.get(self.spec_t, self.name)

    @property
    def spec_text(self) -> str:
        """The committed form of the spec."""
        return spec_of_template(self.spec_t, self.name)

    @spec_text.setter
    def spec_text(self, text: str) -> None:
        self.spec_t = spec_template(text, self.name)

    @property
    def revision(self) -> tuple[int, int]:
        """What a cache of anything derived from the spec is keyed by: a job deleted and created
        again under its name starts at version 1 again, but in another incarnation."""
        return (self.incarnation, self.version)


@dataclass(slots=True)
class Attempt:
    number: int
    worker: str
    fencing_token: int
    started_ms: int
    ended_ms: int = 0
    state: str = RUNNING
    exit_code: int = 0
    http_status: int = 0
    error: str = ""
    output_tail: str = ""
    rejected: str = ""          # a late result refused by fencing, kept for the history
    worker_incarnation: str = ""  # the worker process the claim was made for (read with getattr:
                                # attempts restored from older snapshots lack it)


@dataclass(slots=True)
class Execution:
    """Keyed by (job, scheduled_ms), which is UNIQUE: the execution id is derived from it, so a
    new leader recognises what an old one already recorded."""

    job: str
    scheduled_ms: int
    state: str
    trigger: str                     # schedule | catchup | manual | forced | backfill
    created_ms: int                  # leader time stamped on the entry that recorded it
    term: int
    log_index: int
    updated_ms: int
    reason: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    retry_at: int | None = None      # while RETRY_WAIT: when the next attempt may start
    cancel_requested: bool = False   # a cancel arrived while an attempt was running
    due_ms: int = 0                  # when it may start (scheduled time plus jitter); 0 = scheduled_ms
    lane: str = ""                   # "" | backfill: served after the normal lane, with its own quota
    holds: tuple[str, ...] = ()      # quota counters its running attempt occupies (policy.holds)
    events: tuple[ExecutionEvent, ...] = ()  # ExecutionEvents (sla_missed, ...), oldest first; a tuple, so an
                                     # execution without events costs no list (add: ex.events += (e,))

    @property
    def id(self) -> str:
        return execution_id(self.job, self.scheduled_ms)

    @property
    def due(self) -> int:
        """When it may start: its scheduled time plus its job's jitter."""
        return self.due_ms or self.scheduled_ms


@dataclass(slots=True)
class ExecutionEvent:
    """Something that happened to an execution beside its attempts (e.g. "sla_missed")."""

    time_ms: int
    kind: str
    message: str


def execution_id(job: str, scheduled_ms: int) -> str:
    """`<job>@<RFC 3339 UTC>`: readable, and derived from the unique key alone."""
    return f"{job}@{sched.format_ms(scheduled_ms, 'UTC')}"


# The rows of a DAG: "<dag>:<task>" for a task, "<dag>:" for the DAG's schedule (schedd.core.dags).
DAG_ROW_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}:([a-z0-9][a-z0-9._-]{0,127})?$")


def parse_execution_id(eid: str) -> tuple[str, int]:
    job, sep, when = eid.partition("@")
    if not sep or not (NAME_RE.match(job) or DAG_ROW_RE.match(job)):
        raise ValidationError(f"bad execution id {eid!r}: expected <job>@<RFC 3339 time>")
    try:
        return job, sched.parse_time(when, "UTC")
    except sched.ScheduleError as e:
        raise ValidationError(f"bad execution id {eid!r}: {e}") from None


# ------------------------------------------------------------------ spec validation

def _str(d: dict[str, Any], key: str, limit: int, default: str = "") -> str:
    v = d.get(key, default)
    if v is None:
        v = default
    if not isinstance(v, str):
        raise ValidationError(f"{key} must be a string")
    if len(v.encode()) > limit:
        raise ValidationError(f"{key} is too long ({len(v.encode())} bytes, at most {limit})")
    return v


def _str_map(d: dict[str, Any], key: str, key_re: re.Pattern[str] | None = None) -> dict[str, str]:
    m = d.get(key) or {}
    if not isinstance(m, dict):
        raise ValidationError(f"{key} must be a map of strings")
    if len(m) > MAX_MAP_ENTRIES:
        raise ValidationError(f"{key} has {len(m)} entries, at most {MAX_MAP_ENTRIES}")
    out = {}
    for k in sorted(m):
        v = m[k]
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValidationError(f"{key} must be a map of strings")
        if key_re is not None and not key_re.match(k):
            raise ValidationError(f"bad {key} key {k!r}")
        if len(k) + len(v) > 4096:
            raise ValidationError(f"{key} entry {k!r} is too long")
        out[k] = v
    return out


def _number(d: dict[str, Any], key: str, lo: float, hi: float, *, integer: bool) -> float | int:
    v = d.get(key) or 0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValidationError(f"{key} must be a number")
    if integer and int(v) != v:
        raise ValidationError(f"{key} must be a whole number")
    if not lo <= v <= hi:
        raise ValidationError(f"{key} must be between {lo:g} and {hi:g}, got {v:g}")
    return int(v) if integer else float(v)


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_INHERIT_ENV = 64


def _env(body: dict[str, Any]) -> dict[str, str]:
    """A shell handler's env. execve takes "KEY=VALUE" strings ending at a NUL: a key holding
    "=" would be read as another variable (KEY "A=B" sets A to "B=..."), a NUL anywhere cuts the
    entry short, and an empty key sets nothing; each is refused here rather than run as
    something else on the worker."""
    env = _str_map(body, "env")
    for k, v in env.items():
        if not k or "=" in k or "\0" in k:
            raise ValidationError(f"bad env name {k!r}: a variable name cannot be empty or hold "
                                  "'=' or a NUL character")
        if "\0" in v:
            raise ValidationError(f"env {k!r}: a value cannot hold a NUL character")
    return env


def _pool(d: dict[str, Any]) -> str:
    """A job's pool. It is matched against the pool a worker names and shown in listings, logs
    and the audit trail, where a newline or another control character would forge a line."""
    pool = _str(d, "pool", 64)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in pool):
        raise ValidationError(f"bad pool {pool!r}: a pool name cannot hold a newline or another "
                              "control character")
    return pool


def _inherit_env(body: dict[str, Any]) -> list[str]:
    """The worker variables a shell job opts in to (sorted, unique). The SCHEDD_* contract is
    the worker's to set, never inherited."""
    names = body.get("inherit_env") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValidationError("inherit_env must be a list of variable names")
    if len(names) > MAX_INHERIT_ENV:
        raise ValidationError(f"inherit_env has {len(names)} names, at most {MAX_INHERIT_ENV}")
    for n in names:
        if not ENV_NAME_RE.match(n):
            raise ValidationError(f"bad inherit_env name {n!r}: use letters, digits and _, not "
                                  "starting with a digit")
        if n.startswith("SCHEDD_"):
            raise ValidationError(f"inherit_env name {n!r}: SCHEDD_* variables are set by the "
                                  "worker for each attempt")
    return sorted(set(names))


HANDLER_KINDS = ("shell", "http", "python", "container")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")
USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$")
NETWORK_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
PATH_RE = re.compile(r"^/[^\x00,:]{0,1023}$")
SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?)?B?\s*$", re.IGNORECASE)
PULL_POLICIES = ("never", "if-missing")
MAX_MOUNTS = 16
MAX_CONTAINER_MEMORY_MIB = 1 << 20       # 1 TiB
MIN_CONTAINER_MEMORY_MIB = 6             # podman's and docker's floor
_MIB_PER = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2}


def memory_mib(value: Any) -> int:
    """A container's memory limit in MiB: a number is MiB; a size ("64Mi", "1Gi", "512M") has a
    binary unit (M and Mi alike: what podman's own --memory reads). Whole MiB only, so a worker
    and a reader see the same number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValidationError("container memory must be MiB (a number) or a size like 64Mi or 1Gi")
    m = SIZE_RE.match(str(value))
    if not m:
        raise ValidationError(f"container memory {value!r}: use MiB (64) or a size (64Mi, 1Gi)")
    mib = float(m.group(1)) * _MIB_PER[(m.group(2) or "")[:1].upper()]
    if mib != int(mib):
        raise ValidationError(f"container memory {value!r} is not a whole number of MiB")
    if not MIN_CONTAINER_MEMORY_MIB <= mib <= MAX_CONTAINER_MEMORY_MIB:
        raise ValidationError(f"container memory must be between {MIN_CONTAINER_MEMORY_MIB}Mi and "
                              f"{MAX_CONTAINER_MEMORY_MIB}Mi, got {int(mib)}Mi")
    return int(mib)


def _path(body: dict[str, Any], key: str, what: str) -> str:
    value = _str(body, key, 1024)
    if not PATH_RE.match(value) or "/../" in value + "/" or value.endswith("/.."):
        raise ValidationError(f"{what} must be an absolute path without ',', ':' or '..', got {value!r}")
    return value


def _flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError(f"container {key} must be true or false")
    return value


def _mounts(body: dict[str, Any]) -> tuple[Mount, ...]:
    mounts = body.get("mounts") or []
    if not isinstance(mounts, list) or not all(isinstance(m, dict) for m in mounts):
        raise ValidationError("container mounts must be a list of {source, target, read_only}")
    if len(mounts) > MAX_MOUNTS:
        raise ValidationError(f"container has {len(mounts)} mounts, at most {MAX_MOUNTS}")
    out = []
    for m in mounts:
        unknown = sorted(set(m) - {"source", "target", "read_only"})
        if unknown:
            raise ValidationError(f"unknown container mount field {unknown[0]!r}")
        target = _path(m, "target", "a mount's target")
        if target == "/":
            raise ValidationError("a mount's target cannot be /")
        out.append(Mount(source=_path(m, "source", "a mount's source"), target=target,
                         read_only=_flag(m, "read_only", True)))
    return tuple(out)


def _container_command(body: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(command, args): at most one of them set."""
    command = _str(body, "command", MAX_COMMAND_BYTES)
    args = body.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValidationError("container args must be a list of strings")
    if command and args:
        raise ValidationError("a container handler takes a command (run with /bin/sh -c) or args, not both")
    if sum(len(a.encode()) for a in args) > MAX_COMMAND_BYTES:
        raise ValidationError(f"container args are too long (at most {MAX_COMMAND_BYTES} bytes)")
    return command, () if command else tuple(args)


def container_spec(body: dict[str, Any]) -> ContainerHandler:
    """The canonical container handler. Every value that reaches the engine's command line is
    checked here (an image or path that starts with '-' or holds ',' would be read as an
    option), and the defaults are written out (network none, read-only root, pull never), so a
    reader sees what the worker will do. What a worker permits (networks, mounts, pulls) is its
    own config's, checked when it runs the attempt."""
    image = _str(body, "image", 512)
    if not image:
        raise ValidationError("a container handler needs an image")
    if not IMAGE_RE.match(image):
        raise ValidationError(f"bad container image {image!r}")
    command, args = _container_command(body)
    env = _str_map(body, "env", ENV_NAME_RE)
    workdir = _path(body, "workdir", "container workdir") if body.get("workdir") else ""
    user = _str(body, "user", 64)
    if user and not USER_RE.match(user):
        raise ValidationError(f"bad container user {user!r}: use name or uid, optionally :group")
    network = _str(body, "network", 64) or "none"
    if not NETWORK_RE.match(network):
        raise ValidationError(f"bad container network {network!r}: none, host or a network's name")
    cpu = _number(body, "cpu", 0.01, 1024, integer=False) if body.get("cpu") else 0
    memory = f"{memory_mib(body['memory'])}Mi" if body.get("memory") else ""
    pids = _number(body, "pids", 1, 1_000_000, integer=True) if body.get("pids") else 0
    read_only = _flag(body, "read_only", True)
    mounts = _mounts(body)
    pull = _str(body, "pull", 16) or "never"
    if pull not in PULL_POLICIES:
        raise ValidationError(f"container pull must be one of {', '.join(PULL_POLICIES)}, got {pull!r}")
    return ContainerHandler(image=image, command=command, args=args, env=env, workdir=workdir, user=user,
                            network=network, cpu=cpu, memory=memory, pids=int(pids), read_only=read_only,
                            mounts=mounts, pull=pull)


def _handler(d: dict[str, Any]) -> Handler:
    h = d.get("handler") or {}
    if not isinstance(h, dict):
        raise ValidationError("handler must be an object")
    kinds = [k for k in HANDLER_KINDS if h.get(k)]
    if len(kinds) != 1:
        raise ValidationError("a job needs exactly one handler: shell (command or argv), http (url), "
                              "python (name) or container (image)")
    kind = kinds[0]
    body = h[kind]
    if not isinstance(body, dict):
        raise ValidationError(f"handler {kind} must be an object")
    if kind == "container":
        return container_spec(body)
    if kind == "shell":
        return _shell(body)
    if kind == "http":
        return _http(body)
    return _python(body)


def _shell(body: dict[str, Any]) -> ShellHandler:
    command = _str(body, "command", MAX_COMMAND_BYTES)
    argv = body.get("argv") or []
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValidationError("argv must be a list of strings")
    if bool(command) == bool(argv):
        raise ValidationError("a shell handler needs a command or an argv, not both")
    if sum(len(a.encode()) for a in argv) > MAX_COMMAND_BYTES:
        raise ValidationError(f"argv is too long (at most {MAX_COMMAND_BYTES} bytes)")
    workdir = _str(body, "workdir", 1024) if body.get("workdir") else ""
    return ShellHandler(command=command, argv=() if command else tuple(argv), workdir=workdir, env=_env(body),
                        inherit_env=tuple(_inherit_env(body)))


def _http(body: dict[str, Any]) -> HttpHandler:
    url = _str(body, "url", 2048)
    if not re.match(r"^https?://[^\s/]+", url):
        raise ValidationError(f"http url must start with http:// or https://, got {url!r}")
    method = (_str(body, "method", 16) or "POST").upper()
    if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        raise ValidationError(f"unsupported http method {method!r}")
    headers = _str_map(body, "headers")
    text = _str(body, "body", MAX_COMMAND_BYTES) if body.get("body") else ""
    return HttpHandler(url=url, method=method, headers=headers, body=text,
                       insecure_skip_verify=bool(body.get("insecure_skip_verify")))


def _python(body: dict[str, Any]) -> PythonHandler:
    name = _str(body, "name", 256)
    if not name:
        raise ValidationError("a python handler needs a name")
    args = ""
    if body.get("args_json"):
        args = _str(body, "args_json", MAX_COMMAND_BYTES)
        try:
            json.loads(args)
        except ValueError:
            raise ValidationError("python args_json is not valid JSON") from None
    return PythonHandler(name=name, args_json=args)


def _retry(d: dict[str, Any]) -> RetrySpec | None:
    r = d.get("retry") or {}
    if not isinstance(r, dict):
        raise ValidationError("retry must be an object")
    out: dict[str, Any] = {}
    if r.get("max_attempts"):
        out["max_attempts"] = _number(r, "max_attempts", 0, 100, integer=True)
    if r.get("initial_backoff_seconds"):
        out["initial_backoff_seconds"] = _number(r, "initial_backoff_seconds", 0, 86400, integer=False)
    if r.get("max_backoff_seconds"):
        out["max_backoff_seconds"] = _number(r, "max_backoff_seconds", 0, 7 * 86400, integer=False)
    if r.get("multiplier"):
        out["multiplier"] = _number(r, "multiplier", 1, 100, integer=False)
    return RetrySpec(**out) if out else None


def validate_spec(d: dict[str, Any]) -> JobSpec:
    """The canonical form of a job spec (defaults filled, empty fields dropped) as a typed spec,
    or ValidationError. `d` is the proto JobSpec as a dict with proto field names."""
    return canonical_spec(d)[0]


def job_name(d: dict[str, Any]) -> str:
    """The spec's job name, or ValidationError: the only check of canonical_spec that reads the
    name, apart from placing a schedule's H fields (schedd.api.service reuses one spec's
    canonical form for many jobs that differ only by name, then checks each name with this)."""
    name = _str(d, "name", 128)
    if ":" in name and DAG_ROW_RE.match(name):
        raise ValidationError(f"job {name!r} is part of DAG {name.partition(':')[0]!r} (names with ':' "
                              "are DAG tasks); use `schedctl dag apply` to change it")
    if not NAME_RE.fullmatch(name):       # fullmatch: NAME_RE's "$" would let a final newline in
        raise ValidationError(f"bad job name {name!r}: use 1-128 of a-z 0-9 . _ -, starting with a "
                              "letter or digit")
    return name


def _choice(d: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = _str(d, key, 16)
    if value and value not in allowed:
        raise ValidationError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def canonical_spec(d: dict[str, Any]) -> tuple[JobSpec, str]:
    """validate_spec, plus the canonical JSON text (sorted keys) that a proposer commits. The
    checks run in a fixed order, so a spec with several faults is always refused for the same one."""
    if not isinstance(d, dict):
        raise ValidationError("job spec must be an object")
    name = job_name(d)
    team = _str(d, "team", 64) or DEFAULT_TEAM
    if not TEAM_RE.match(team):
        raise ValidationError(f"bad team {team!r}: use 1-64 of a-z 0-9 . _ -")
    d = window_zone(d)
    try:
        tz = sched.validate_tz(_str(d, "timezone", 64) or "UTC")
        window, schedule = window_schedule(d, _str(d, "schedule", 256))
        parsed = sched.parse(schedule, tz, hash_key=name,
                             gap=_str(d, "dst_gap", 16), fold=_str(d, "dst_fold", 16))
    except sched.ScheduleError as e:
        raise ValidationError(str(e)) from None
    handler = _handler(d)
    description = _str(d, "description", 1024)
    labels = _str_map(d, "labels", LABEL_KEY_RE)
    worker_labels = _str_map(d, "worker_labels", LABEL_KEY_RE)
    retry = _retry(d)
    timeout = _number(d, "timeout_seconds", 0, MAX_TIMEOUT_S, integer=False) if d.get("timeout_seconds") else 0
    policy: dict[str, Any] = {"overlap": _choice(d, "overlap", OVERLAP_POLICIES),
                              "catchup": _choice(d, "catchup", CATCHUP_POLICIES)}
    _policies(d, policy)
    gap, fold, sla = _dst_and_sla(d, sched.parse(parsed.spec, tz, hash_key=name))
    delivery = _choice(d, "delivery", DELIVERY_POLICIES)
    policy["delivery"] = delivery if delivery != "at_least_once" else ""
    policy["priority"] = _number(d, "priority", -1000, 1000, integer=True) if d.get("priority") else 0
    policy["pool"] = _pool(d)
    if window is not None and policy.get("jitter_seconds"):
        raise ValidationError("window and jitter together: a window spreads the runs already (drop jitter)")
    history_limit = _number(d, "history_limit", 1, MAX_HISTORY_LIMIT, integer=True) if d.get("history_limit") else 0
    env_secret = _env_secret(d, handler)
    spec = JobSpec(name=name, team=team, schedule=parsed.spec, timezone=tz, handler=handler,
                   description=description, labels=labels, worker_labels=worker_labels, retry=retry,
                   timeout_seconds=timeout, policies=Policies(**policy), dst_gap=gap, dst_fold=fold, sla=sla,
                   paused=bool(d.get("paused")), history_limit=int(history_limit), env_secret=env_secret,
                   limits=_limits(d), params=check_params(d.get("params")), calendar=_calendar_ref(d),
                   on_blackout=_choice(d, "on_blackout", ON_BLACKOUT).replace("skip", ""), window=window)
    text = spec.text()
    if len(text) > MAX_SPEC_BYTES:
        raise ValidationError(f"job spec is too large ({len(text)} bytes, at most {MAX_SPEC_BYTES})")
    return spec, text


def window_zone(d: dict[str, Any]) -> dict[str, Any]:
    """A job document whose `window` names its zone (`window: {tz: ...}`, as a job file may say
    it) with that zone as the job's: the window's times and the days its schedule picks are in
    the one zone of the job. Two different zones are refused."""
    w = d.get("window")
    if not isinstance(w, dict) or "tz" not in w:
        return d
    tz = w.get("tz")
    if not isinstance(tz, str):
        raise ValidationError("window.tz must be a time zone name")
    own = d.get("timezone") or ""
    if own and tz and own != tz:
        raise ValidationError(f"window.tz {tz!r} differs from the job's timezone {own!r}: give one zone")
    return {**d, "timezone": own or tz, "window": {k: v for k, v in w.items() if k != "tz"}}


def window_schedule(d: dict[str, Any], schedule: str) -> tuple[WindowSpec | None, str]:
    """The job's `window` (schedd.core.windows) and the schedule it implies: the window opens on
    the days the schedule's cron picks (its day-of-month, month and day-of-week fields; minute
    and hour must be `0 0`, or the window's start as a stored spec reads), or every day without
    a schedule. The committed schedule is that cron at the window's start: its instants are the
    windows' starts, the ledger's keys. No window: (None, the schedule as given)."""
    w = d.get("window")
    if w is None or w == {}:
        return None, schedule
    if not isinstance(w, dict):
        raise ValidationError('window: an object {start: "HH:MM", end: "HH:MM"}')
    unknown = set(w) - {"start", "end"}
    if unknown:
        raise ValidationError(f"window: unknown key(s) {', '.join(sorted(unknown))} (start, end, tz)")
    start, end = _hhmm(w.get("start"), "window.start"), _hhmm(w.get("end"), "window.end")
    if start == end:
        raise ValidationError(f"window.end equals window.start ({start}): the window would be empty")
    hh, mm = (int(x) for x in start.split(":"))
    fields = schedule.split()
    if not fields:
        days = ["*", "*", "*"]
    elif len(fields) == 5 and (fields[:2] == ["0", "0"] or fields[:2] == [str(mm), str(hh)]):
        days = fields[2:]
    else:
        raise ValidationError(f"with a window, the schedule picks the days only: a cron '0 0 DOM MON DOW' "
                              f"(e.g. '0 0 * * 1-5' for weekdays) or none for every day, not {schedule!r}")
    return WindowSpec(start=start, end=end), f"{mm} {hh} {' '.join(days)}"


def _hhmm(v: Any, what: str) -> str:
    """"HH:MM" (24-hour, "7:05" is read as "07:05"), or ValidationError."""
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", v) if isinstance(v, str) else None
    if m is None or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        raise ValidationError(f'{what} must be a time "HH:MM" (00:00-23:59), got {v!r}')
    return f"{int(m.group(1)):02d}:{m.group(2)}"


def _calendar_ref(d: dict[str, Any]) -> CalendarRef | None:
    """The job's `calendar` (schedd.core.calendars): names checked for shape here, for existence
    by apply against the replicated calendars. Defaults dropped (on_skip skip), None when empty."""
    ref = d.get("calendar")
    if not ref:
        return None
    if not isinstance(ref, dict):
        raise ValidationError("calendar: an object with skip, only and on_skip")
    ref = {k: v for k, v in ref.items() if v not in ("", [], None)}
    if not ref:
        return None
    for key in ("skip", "only"):
        names = ref.get(key) or []
        if not isinstance(names, list) or not all(isinstance(n, str) and NAME_RE.fullmatch(n) for n in names):
            raise ValidationError(f"calendar.{key}: a list of calendar names")
        if len(names) > 16:
            raise ValidationError(f"calendar.{key}: at most 16 calendars")
    unknown = set(ref) - {"skip", "only", "on_skip"}
    if unknown:
        raise ValidationError(f"calendar: unknown key(s) {', '.join(sorted(unknown))} (skip, only, on_skip)")
    on_skip = ref.get("on_skip", "")
    if on_skip not in ("", *ON_SKIP):
        raise ValidationError(f"calendar.on_skip must be one of {', '.join(ON_SKIP)}, got {on_skip!r}")
    skip, only = tuple(dict.fromkeys(ref.get("skip") or ())), tuple(dict.fromkeys(ref.get("only") or ()))
    if not skip and not only:
        raise ValidationError("calendar: give skip or only calendars")
    return CalendarRef(skip=skip, only=only, on_skip="" if on_skip == "skip" else on_skip)


def _policies(d: dict[str, Any], out: dict[str, Any]) -> None:
    """Overlap bounds, concurrency key, catch-up window/cap/deadline, jitter and retention age
    (into `out`, which holds the overlap)."""
    for key, hi in (("max_active", 10_000), ("queue_limit", 10_000), ("concurrency_limit", 10_000),
                    ("catchup_max", 100_000)):
        if d.get(key):
            out[key] = _number(d, key, 1, hi, integer=True)
    if "max_active" in out and (out["overlap"] or "allow") != "allow":
        raise ValidationError("max_active applies to overlap allow only (skip and queue allow one run)")
    if "queue_limit" in out and out["overlap"] != "queue":
        raise ValidationError("queue_limit applies to overlap queue only")
    key = _str(d, "concurrency_key", 128)
    if key:
        if not TEAM_RE.match(key):
            raise ValidationError(f"bad concurrency_key {key!r}: use 1-64 of a-z 0-9 . _ -")
        out["concurrency_key"] = key
    elif "concurrency_limit" in out:
        raise ValidationError("concurrency_limit needs a concurrency_key")
    order = _choice(d, "catchup_order", CATCHUP_ORDERS)
    if order and order != "newest":
        out["catchup_order"] = order
    for key, hi in (("catchup_window_seconds", 366 * 86400), ("starting_deadline_seconds", 366 * 86400),
                    ("jitter_seconds", 86400), ("history_max_age_seconds", 3660 * 86400)):
        if d.get(key):
            out[key] = _seconds(d, key, 0.001, hi)


def _seconds(d: dict[str, Any], key: str, lo: float, hi: float) -> float:
    """A duration as the canonical form writes it: whole seconds as an integer."""
    v = _number(d, key, lo, hi, integer=False)
    return int(v) if v == int(v) else v


# ------------------------------------------------------------------ DST policies and SLAs


def _dst_and_sla(d: dict[str, Any], default: sched.Schedule) -> tuple[str, str, SlaSpec | None]:
    """(dst_gap, dst_fold, sla): the DST policies kept only where they differ from the default of
    the schedule, which depends on its hour field, so a spec that names the default commits the
    same text."""
    gap, fold = _str(d, "dst_gap", 16), _str(d, "dst_fold", 16)
    if gap and gap not in sched.GAP_POLICIES:
        raise ValidationError(f"dst_gap must be one of {', '.join(sched.GAP_POLICIES)}, got {gap!r}")
    if fold and fold not in sched.FOLD_POLICIES:
        raise ValidationError(f"dst_fold must be one of {', '.join(sched.FOLD_POLICIES)}, got {fold!r}")
    return (gap if gap != default.gap else "", fold if fold != default.fold else "", _sla(d.get("sla")))


def _sla(sla: Any) -> SlaSpec | None:
    if sla in (None, {}):
        return None
    if not isinstance(sla, dict):
        raise ValidationError("sla must be an object")
    unknown = sorted(set(sla) - {"within_seconds", "by", "timezone", "webhook"})
    if unknown:
        raise ValidationError(f"unknown sla field {unknown[0]!r}")
    within: float = 0
    if sla.get("within_seconds"):
        try:
            within = _seconds(sla, "within_seconds", 0.001, MAX_SLA_SECONDS)
        except ValidationError as e:
            raise ValidationError(f"sla.{e}") from None
    by = _str(sla, "by", 16).strip()
    if by and not SLA_BY_RE.match(by):
        raise ValidationError(f"sla.by must be a wall time HH:MM (00:00-23:59), got {by!r}")
    tz = _str(sla, "timezone", 64)
    if tz:
        try:
            tz = sched.validate_tz(tz)
        except sched.ScheduleError as e:
            raise ValidationError(f"sla.timezone: {e}") from None
    webhook = _str(sla, "webhook", 2048)
    if webhook and not re.match(r"^https?://[^\s/]+", webhook):
        raise ValidationError(f"sla.webhook must start with http:// or https://, got {webhook!r}")
    if not within and not by:
        raise ValidationError("sla needs within_seconds or by (or both)")
    if tz and not by:
        raise ValidationError("sla.timezone applies to sla.by only")
    return SlaSpec(within_seconds=within, by=by, timezone=tz, webhook=webhook)


# ------------------------------------------------------------------ secret env and resource limits

MAX_SECRET_CIPHERTEXT = 8192
SECRET_MASK_RE = re.compile(r"^\*\*\*\(v([0-9]{1,9})\)$")
# job spec field -> (lowest, highest) of ResourceLimits
LIMIT_RANGES: dict[str, tuple[float, float]] = {
    "memory_mb": (16, 16 * 1024 * 1024), "cpu_seconds": (1, MAX_TIMEOUT_S),
    "open_files": (16, 1 << 20), "processes": (1, 1 << 20)}


def mask_secret(version: int) -> str:
    """What every read shows instead of a secret value: "***(v3)". Sent back on a write, it
    means "keep the stored value" (a read-modify-write never needs the plaintext)."""
    return f"***(v{version})"


def check_secret_names(names: Any, *, handler_kind: str) -> None:
    """The names of a job's secret env: what a shell, Python or container handler may be given."""
    if not names:
        return
    if handler_kind not in ("shell", "python", "container"):
        raise ValidationError("env_secret applies to shell (command/argv), python and container handlers only")
    if len(names) > MAX_MAP_ENTRIES:
        raise ValidationError(f"env_secret has {len(names)} entries, at most {MAX_MAP_ENTRIES}")
    for n in names:
        if not isinstance(n, str) or not ENV_NAME_RE.match(n):
            raise ValidationError(f"bad env_secret name {n!r}: use letters, digits and _, not "
                                  "starting with a digit")
        if n.startswith("SCHEDD_"):
            raise ValidationError(f"env_secret name {n!r}: SCHEDD_* variables are set by the worker")


def _env_secret(d: dict[str, Any], handler: Handler) -> dict[str, SealedSecret]:
    """env_secret, in the sealed form the API edge made of it ({name: {"v": version, "ct":
    ciphertext}}: core never sees a plaintext secret)."""
    sealed = d.get("env_secret") or {}
    if not isinstance(sealed, dict):
        raise ValidationError("env_secret must be a map")
    check_secret_names(sorted(sealed), handler_kind=handler.kind)
    env = handler.env if isinstance(handler, (ShellHandler, ContainerHandler)) else {}
    got: dict[str, SealedSecret] = {}
    for name in sorted(sealed):
        v = sealed[name]
        if not (isinstance(v, dict) and set(v) == {"v", "ct"} and isinstance(v["ct"], str)
                and 0 < len(v["ct"]) <= MAX_SECRET_CIPHERTEXT and type(v["v"]) is int
                and 1 <= v["v"] < 10**9):
            raise ValidationError(f"env_secret {name!r} was not sealed by the API (a value is sent "
                                  "as text and stored encrypted)")
        if name in env:
            raise ValidationError(f"{name!r} is in both env and env_secret")
        got[name] = SealedSecret(version=v["v"], ciphertext=v["ct"])
    return got


def _limits(d: dict[str, Any]) -> ResourceLimits | None:
    """The per-attempt resource limits (None: none)."""
    limits = d.get("limits") or {}
    if not isinstance(limits, dict):
        raise ValidationError("limits must be an object")
    unknown = sorted(set(limits) - set(LIMIT_RANGES))
    if unknown:
        raise ValidationError(f"unknown limits field {unknown[0]!r}")
    lim: dict[str, Any] = {}
    for key, (lo, hi) in LIMIT_RANGES.items():
        raw = limits.get(key) or 0
        try:                                  # int64 fields come as text from MessageToDict
            value = float(raw) if not isinstance(raw, bool) else None
        except (TypeError, ValueError):
            value = None
        if value is None:
            raise ValidationError(f"limits.{key} must be a number")
        if not value:
            continue
        if key != "cpu_seconds" and value != int(value):
            raise ValidationError(f"limits.{key} must be a whole number")
        if not lo <= value <= hi:
            raise ValidationError(f"limits.{key} must be between {lo:g} and {hi:g}, got {value:g}")
        lim[key] = int(value) if value == int(value) else value
    return ResourceLimits(**lim) if lim else None
