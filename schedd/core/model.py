"""Entities of the replicated state and the validation of what users send.

One place decides what a valid job spec is: the API calls `validate_spec` before it proposes
anything (so bad input is refused with a clear message and nothing is committed), and apply calls
it again on the committed entry (so a replica never trusts its proposer). Both give the same answer
because validation is a pure function of the spec.

Everything here is pure: no clock, no I/O, no randomness.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

from schedd.core import schedule as sched

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")

DEFAULT_TEAM = "default"
DEFAULT_HISTORY_LIMIT = 1000
MAX_HISTORY_LIMIT = 100_000
MAX_SPEC_BYTES = 16 * 1024
MAX_COMMAND_BYTES = 8 * 1024
MAX_MAP_ENTRIES = 64
MAX_TIMEOUT_S = 7 * 24 * 3600

OVERLAP_POLICIES = ("allow", "skip", "queue")
CATCHUP_POLICIES = ("all", "latest", "none")
CATCHUP_ORDERS = ("newest", "oldest")
DELIVERY_POLICIES = ("at_least_once", "at_most_once")
MAX_ERROR_CHARS = 2048
MAX_OUTPUT_TAIL_CHARS = 4096


class ValidationError(ValueError):
    """Bad user input; the message is meant for a person."""


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


@dataclass(slots=True)
class Job:
    """One job row. `spec` is the canonical JSON of the validated spec (the source of truth for
    handler, retry and the rest), kept as a shared template without the name (`spec_t`, see
    spec_template); the hot fields the scheduler needs are kept unpacked beside it."""

    name: str
    team: str
    schedule: str
    tz: str
    spec_t: str                      # spec_template(spec, name); read and write `spec`
    version: int
    paused: bool
    next_fire: int | None
    created_ms: int
    updated_ms: int
    created_by: str
    history_limit: int = DEFAULT_HISTORY_LIMIT
    last_fire: int | None = None     # last scheduled instant recorded by the schedule
    fired_total: int = 0             # executions recorded since creation, pruned ones included
    gaps: tuple[Gap, ...] = ()       # (from_ms, to_ms, disposition, detail): instants not run and why (newest last)
    dst: str = ""                    # DST policy "gap/fold" of the schedule; "" = the defaults
    incarnation: int = 0             # log index of the entry that created it (0: before this field)

    # What the state digest hashes (schedd.core.digest): the spec itself, not its template, so
    # the digest of a job row is the same whichever way a version stores the text.
    DIGEST_FIELDS: ClassVar[tuple[str, ...]] = (
        "name", "team", "schedule", "tz", "spec", "version", "paused", "next_fire", "created_ms",
        "updated_ms", "created_by", "history_limit", "last_fire", "fired_total", "gaps", "dst",
        "incarnation")

    @property
    def spec(self) -> str:
        return spec_of_template(self.spec_t, self.name)

    @spec.setter
    def spec(self, text: str) -> None:
        self.spec_t = spec_template(text, self.name)

    def spec_dict(self) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads(self.spec)
        return spec

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
CONTAINER_FEATURE_LEVEL = 6          # schedd.core.features Level 6: entries carrying one say fl=6
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


def _mounts(body: dict[str, Any]) -> list[dict[str, Any]]:
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
        out.append({"source": _path(m, "source", "a mount's source"), "target": target,
                    "read_only": _flag(m, "read_only", True)})
    return out


def _container_command(body: dict[str, Any], out: dict[str, Any]) -> None:
    command = _str(body, "command", MAX_COMMAND_BYTES)
    args = body.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValidationError("container args must be a list of strings")
    if command and args:
        raise ValidationError("a container handler takes a command (run with /bin/sh -c) or args, not both")
    if sum(len(a.encode()) for a in args) > MAX_COMMAND_BYTES:
        raise ValidationError(f"container args are too long (at most {MAX_COMMAND_BYTES} bytes)")
    if command:
        out["command"] = command
    elif args:
        out["args"] = list(args)


def container_spec(body: dict[str, Any]) -> dict[str, Any]:
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
    out: dict[str, Any] = {"image": image}
    _container_command(body, out)
    env = _str_map(body, "env", ENV_NAME_RE)
    if env:
        out["env"] = env
    if body.get("workdir"):
        out["workdir"] = _path(body, "workdir", "container workdir")
    user = _str(body, "user", 64)
    if user and not USER_RE.match(user):
        raise ValidationError(f"bad container user {user!r}: use name or uid, optionally :group")
    if user:
        out["user"] = user
    network = _str(body, "network", 64) or "none"
    if not NETWORK_RE.match(network):
        raise ValidationError(f"bad container network {network!r}: none, host or a network's name")
    out["network"] = network
    if body.get("cpu"):
        out["cpu"] = _number(body, "cpu", 0.01, 1024, integer=False)
    if body.get("memory"):
        out["memory"] = f"{memory_mib(body['memory'])}Mi"
    if body.get("pids"):
        out["pids"] = _number(body, "pids", 1, 1_000_000, integer=True)
    out["read_only"] = _flag(body, "read_only", True)
    mounts = _mounts(body)
    if mounts:
        out["mounts"] = mounts
    pull = _str(body, "pull", 16) or "never"
    if pull not in PULL_POLICIES:
        raise ValidationError(f"container pull must be one of {', '.join(PULL_POLICIES)}, got {pull!r}")
    out["pull"] = pull
    return out


def spec_level(spec: dict[str, Any]) -> int:
    """The feature level a canonical job or DAG-task spec needs beyond its entry kind's: a
    container handler is level 6 (an older build refuses it as invalid, so a replica of that
    build would diverge)."""
    handler = spec.get("handler")
    return CONTAINER_FEATURE_LEVEL if isinstance(handler, dict) and "container" in handler else 1


def _handler(d: dict[str, Any]) -> dict[str, Any]:
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
        return {"container": container_spec(body)}
    if kind == "shell":
        command = _str(body, "command", MAX_COMMAND_BYTES)
        argv = body.get("argv") or []
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValidationError("argv must be a list of strings")
        if bool(command) == bool(argv):
            raise ValidationError("a shell handler needs a command or an argv, not both")
        if sum(len(a.encode()) for a in argv) > MAX_COMMAND_BYTES:
            raise ValidationError(f"argv is too long (at most {MAX_COMMAND_BYTES} bytes)")
        out: dict[str, Any] = {"command": command} if command else {"argv": list(argv)}
        if body.get("workdir"):
            out["workdir"] = _str(body, "workdir", 1024)
        env = _env(body)
        if env:
            out["env"] = env
        inherit = _inherit_env(body)
        if inherit:
            out["inherit_env"] = inherit
        return {"shell": out}
    if kind == "http":
        url = _str(body, "url", 2048)
        if not re.match(r"^https?://[^\s/]+", url):
            raise ValidationError(f"http url must start with http:// or https://, got {url!r}")
        method = (_str(body, "method", 16) or "POST").upper()
        if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise ValidationError(f"unsupported http method {method!r}")
        out_http: dict[str, Any] = {"url": url, "method": method}
        headers = _str_map(body, "headers")
        if headers:
            out_http["headers"] = headers
        if body.get("body"):
            out_http["body"] = _str(body, "body", MAX_COMMAND_BYTES)
        if body.get("insecure_skip_verify"):
            out_http["insecure_skip_verify"] = True
        return {"http": out_http}
    name = _str(body, "name", 256)
    if not name:
        raise ValidationError("a python handler needs a name")
    out_py: dict[str, Any] = {"name": name}
    if body.get("args_json"):
        args = _str(body, "args_json", MAX_COMMAND_BYTES)
        try:
            json.loads(args)
        except ValueError:
            raise ValidationError("python args_json is not valid JSON") from None
        out_py["args_json"] = args
    return {"python": out_py}


def _retry(d: dict[str, Any]) -> dict[str, Any]:
    r = d.get("retry") or {}
    if not isinstance(r, dict):
        raise ValidationError("retry must be an object")
    out = {}
    if r.get("max_attempts"):
        out["max_attempts"] = _number(r, "max_attempts", 0, 100, integer=True)
    if r.get("initial_backoff_seconds"):
        out["initial_backoff_seconds"] = _number(r, "initial_backoff_seconds", 0, 86400, integer=False)
    if r.get("max_backoff_seconds"):
        out["max_backoff_seconds"] = _number(r, "max_backoff_seconds", 0, 7 * 86400, integer=False)
    if r.get("multiplier"):
        out["multiplier"] = _number(r, "multiplier", 1, 100, integer=False)
    return out


def validate_spec(d: dict[str, Any]) -> dict[str, Any]:
    """Return the canonical form of a job spec (defaults filled, empty fields dropped) or raise
    ValidationError. `d` is the proto JobSpec as a dict with proto field names."""
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


def canonical_spec(d: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """validate_spec, plus the canonical JSON text (sorted keys) that a proposer commits."""
    if not isinstance(d, dict):
        raise ValidationError("job spec must be an object")
    name = job_name(d)
    team = _str(d, "team", 64) or DEFAULT_TEAM
    if not TEAM_RE.match(team):
        raise ValidationError(f"bad team {team!r}: use 1-64 of a-z 0-9 . _ -")
    try:
        tz = sched.validate_tz(_str(d, "timezone", 64) or "UTC")
        parsed = sched.parse(_str(d, "schedule", 256), tz, hash_key=name,
                             gap=_str(d, "dst_gap", 16), fold=_str(d, "dst_fold", 16))
    except sched.ScheduleError as e:
        raise ValidationError(str(e)) from None
    out: dict[str, Any] = {"name": name, "team": team, "schedule": parsed.spec, "timezone": tz,
                 "handler": _handler(d)}
    description = _str(d, "description", 1024)
    if description:
        out["description"] = description
    labels = _str_map(d, "labels", LABEL_KEY_RE)
    if labels:
        out["labels"] = labels
    worker_labels = _str_map(d, "worker_labels", LABEL_KEY_RE)
    if worker_labels:
        out["worker_labels"] = worker_labels
    retry = _retry(d)
    if retry:
        out["retry"] = retry
    if d.get("timeout_seconds"):
        out["timeout_seconds"] = _number(d, "timeout_seconds", 0, MAX_TIMEOUT_S, integer=False)
    overlap = _str(d, "overlap", 16)
    if overlap and overlap not in OVERLAP_POLICIES:
        raise ValidationError(f"overlap must be one of {', '.join(OVERLAP_POLICIES)}, got {overlap!r}")
    if overlap:
        out["overlap"] = overlap
    catchup = _str(d, "catchup", 16)
    if catchup and catchup not in CATCHUP_POLICIES:
        raise ValidationError(f"catchup must be one of {', '.join(CATCHUP_POLICIES)}, got {catchup!r}")
    if catchup:
        out["catchup"] = catchup
    _policies(d, out)
    _dst_and_sla(d, out, sched.parse(parsed.spec, tz, hash_key=name))
    delivery = _str(d, "delivery", 16)
    if delivery and delivery not in DELIVERY_POLICIES:
        raise ValidationError(f"delivery must be one of {', '.join(DELIVERY_POLICIES)}, got {delivery!r}")
    if delivery and delivery != "at_least_once":
        out["delivery"] = delivery
    if d.get("priority"):
        out["priority"] = _number(d, "priority", -1000, 1000, integer=True)
    pool = _pool(d)
    if pool:
        out["pool"] = pool
    if d.get("paused"):
        out["paused"] = True
    if d.get("history_limit"):
        out["history_limit"] = _number(d, "history_limit", 1, MAX_HISTORY_LIMIT, integer=True)
    _secrets_and_limits(d, out)
    text = dump_spec(out)
    if len(text) > MAX_SPEC_BYTES:
        raise ValidationError(f"job spec is too large ({len(text)} bytes, at most {MAX_SPEC_BYTES})")
    return out, text


def _policies(d: dict[str, Any], out: dict[str, Any]) -> None:
    """Overlap bounds, concurrency key, catch-up window/cap/deadline, jitter and retention age."""
    for key, hi in (("max_active", 10_000), ("queue_limit", 10_000), ("concurrency_limit", 10_000),
                    ("catchup_max", 100_000)):
        if d.get(key):
            out[key] = _number(d, key, 1, hi, integer=True)
    if "max_active" in out and out.get("overlap", "allow") != "allow":
        raise ValidationError("max_active applies to overlap allow only (skip and queue allow one run)")
    if "queue_limit" in out and out.get("overlap") != "queue":
        raise ValidationError("queue_limit applies to overlap queue only")
    key = _str(d, "concurrency_key", 128)
    if key:
        if not TEAM_RE.match(key):
            raise ValidationError(f"bad concurrency_key {key!r}: use 1-64 of a-z 0-9 . _ -")
        out["concurrency_key"] = key
    elif "concurrency_limit" in out:
        raise ValidationError("concurrency_limit needs a concurrency_key")
    order = _str(d, "catchup_order", 16)
    if order and order not in CATCHUP_ORDERS:
        raise ValidationError(f"catchup_order must be one of {', '.join(CATCHUP_ORDERS)}, got {order!r}")
    if order and order != "newest":
        out["catchup_order"] = order
    for key, hi in (("catchup_window_seconds", 366 * 86400), ("starting_deadline_seconds", 366 * 86400),
                    ("jitter_seconds", 86400), ("history_max_age_seconds", 3660 * 86400)):
        if d.get(key):
            v = _number(d, key, 0.001, hi, integer=False)
            out[key] = int(v) if v == int(v) else v


def dump_spec(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def load_committed_spec(text: object) -> dict[str, Any]:
    """Read a canonical spec from a committed entry, checking only what apply relies on.

    Full validation (`validate_spec`) runs on the proposer before anything is committed; the
    entry then carries the canonical text, which apply stores as it is. Apply re-checks the fields
    it computes with, so a malformed entry is a deterministic rejection rather than an exception,
    and a later change of validation rules never changes how old entries replay.
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
    check_committed_dst_and_sla(d)
    return d


# ------------------------------------------------------------------ DST policies and SLAs

MAX_SLA_SECONDS = 366 * 86400
SLA_BY_RE = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


def _dst_and_sla(d: dict[str, Any], out: dict[str, Any], default: sched.Schedule) -> None:
    """dst_gap / dst_fold (kept only where they differ from the default of the schedule, which
    depends on its hour field, so a spec that names the default commits the same text) and
    the sla object."""
    gap, fold = _str(d, "dst_gap", 16), _str(d, "dst_fold", 16)
    if gap and gap not in sched.GAP_POLICIES:
        raise ValidationError(f"dst_gap must be one of {', '.join(sched.GAP_POLICIES)}, got {gap!r}")
    if fold and fold not in sched.FOLD_POLICIES:
        raise ValidationError(f"dst_fold must be one of {', '.join(sched.FOLD_POLICIES)}, got {fold!r}")
    if gap and gap != default.gap:
        out["dst_gap"] = gap
    if fold and fold != default.fold:
        out["dst_fold"] = fold
    sla = d.get("sla")
    if sla in (None, {}):
        return
    if not isinstance(sla, dict):
        raise ValidationError("sla must be an object")
    unknown = sorted(set(sla) - {"within_seconds", "by", "timezone", "webhook"})
    if unknown:
        raise ValidationError(f"unknown sla field {unknown[0]!r}")
    got: dict[str, Any] = {}
    if sla.get("within_seconds"):
        try:
            v = _number(sla, "within_seconds", 0.001, MAX_SLA_SECONDS, integer=False)
        except ValidationError as e:
            raise ValidationError(f"sla.{e}") from None
        got["within_seconds"] = int(v) if v == int(v) else v
    by = _str(sla, "by", 16).strip()
    if by:
        if not SLA_BY_RE.match(by):
            raise ValidationError(f"sla.by must be a wall time HH:MM (00:00-23:59), got {by!r}")
        got["by"] = by
    tz = _str(sla, "timezone", 64)
    if tz:
        try:
            got["timezone"] = sched.validate_tz(tz)
        except sched.ScheduleError as e:
            raise ValidationError(f"sla.timezone: {e}") from None
    webhook = _str(sla, "webhook", 2048)
    if webhook:
        if not re.match(r"^https?://[^\s/]+", webhook):
            raise ValidationError(f"sla.webhook must start with http:// or https://, got {webhook!r}")
        got["webhook"] = webhook
    if "within_seconds" not in got and "by" not in got:
        raise ValidationError("sla needs within_seconds or by (or both)")
    if "timezone" in got and "by" not in got:
        raise ValidationError("sla.timezone applies to sla.by only")
    out["sla"] = got


def check_committed_dst_and_sla(d: dict[str, Any]) -> None:
    """What apply computes with: the DST policy names and the SLA's deadline fields."""
    if d.get("dst_gap", "shift") not in sched.GAP_POLICIES:
        raise ValidationError("bad dst_gap")
    if d.get("dst_fold", "first") not in sched.FOLD_POLICIES:
        raise ValidationError("bad dst_fold")
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


def dst_policy(spec: dict[str, Any]) -> str:
    """The Job.dst text of a canonical spec: "gap/fold" as the spec names them, each "" when not
    named (then the schedule's default applies, see schedule.default_dst_policy); "" for
    neither."""
    gap, fold = spec.get("dst_gap") or "", spec.get("dst_fold") or ""
    return f"{gap}/{fold}" if gap or fold else ""


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


def _secrets_and_limits(d: dict[str, Any], out: dict[str, Any]) -> None:
    """env_secret, in the sealed form the API edge made of it ({name: {"v": version, "ct":
    ciphertext}}: core never sees a plaintext secret), and the per-attempt resource limits."""
    sealed = d.get("env_secret") or {}
    if not isinstance(sealed, dict):
        raise ValidationError("env_secret must be a map")
    kind = next(iter(out["handler"]))
    check_secret_names(sorted(sealed), handler_kind=kind)
    env = out["handler"][kind].get("env") or {}
    got: dict[str, Any] = {}
    for name in sorted(sealed):
        v = sealed[name]
        if not (isinstance(v, dict) and set(v) == {"v", "ct"} and isinstance(v["ct"], str)
                and 0 < len(v["ct"]) <= MAX_SECRET_CIPHERTEXT and type(v["v"]) is int
                and 1 <= v["v"] < 10**9):
            raise ValidationError(f"env_secret {name!r} was not sealed by the API (a value is sent "
                                  "as text and stored encrypted)")
        if name in env:
            raise ValidationError(f"{name!r} is in both env and env_secret")
        got[name] = {"v": v["v"], "ct": v["ct"]}
    if got:
        out["env_secret"] = got
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
    if lim:
        out["limits"] = lim
