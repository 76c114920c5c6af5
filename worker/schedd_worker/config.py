"""The worker's config file (`schedd-worker --config FILE`), TOML, strictly checked: an unknown
key or a wrong type is an error naming it, and nothing starts.

    cluster = ["10.0.0.1:7070", "10.0.0.2:7070"]   # or "host:port,host:port"
    name = "w1"
    slots = 8
    ahead = 100000                  # assignments not yet due held beyond the slots (a herd)
    pool = "db"
    labels = { region = "eu" }
    drain_grace = 60                # seconds
    allow_root = false              # run as root without team mappings (jobs as root): refused

    [http]
    allow = ["10.1.0.0/16"]
    deny = []
    keep_bytes = 4096

    [isolation]
    allow_root_jobs = false         # a team mapped to uid/gid 0 is refused unless true
    umask = "0077"                  # of launched jobs (default: 0077 for mapped teams)
    cgroup = "auto"                 # auto | off | /sys/fs/cgroup/<delegated directory>
    uid_range = "61000-61999"       # a uid per team not mapped below (schedd_worker.uids)
    state_dir = "/var/lib/schedd-worker"   # the team -> uid table, the teams' working folders
    require = false                 # true: refuse to start unless jobs run as their team's uid

    [container]                     # container jobs (schedd_worker.handlers.container)
    engine = "podman"               # podman (default) | docker
    runtime = "auto"                # auto (the engine's default, then runc) | off | runc | crun ...
    networks = ["host"]             # allowed besides "none" (default: none only)
    mounts = [{ path = "/srv/data" }, { path = "/srv/out", rw = true }]   # bind-mount sources allowed
    pull = "never"                  # never (default) | if-missing: the most a job may ask
    ulimits = ["nofile=1024:1024", "nproc=1024:1024"]   # runc needs limits below the hard ones

    [logs]                          # run logs (schedd_worker.run_logs)
    enabled = true
    dir = "/var/lib/schedd-worker/logs"   # default: <state_dir>/logs, as root; else ~/.local/state/...
    attempt_bytes = 16777216        # per attempt: the head and the tail kept, the middle dropped
    total_bytes = 1073741824        # per worker: the oldest finished attempts removed first
    max_age = 604800                # seconds after an attempt ended
    keep_per_job = 100              # the newest attempts of each job

    [isolation.teams.payments]      # see schedd_worker.isolation
    user = "payments-jobs"
    group = "payments"
    groups = []
    workdir_root = "/srv/jobs/payments"
    allow_python = false

A flag given on the command line wins over the file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from typing import Any

from schedd_worker.handlers.container import DEFAULT_ULIMITS, ContainerConfig, MountRule
from schedd_worker.isolation import IsolationError, IsolationPolicy, TeamUser, resolve_user
from schedd_worker.run_logs import LogLimits
from schedd_worker.uids import UidError, parse_range

__all__ = ["WorkerConfig", "ConfigError", "load_config", "parse_config"]

_TOP = {"cluster": (str, list), "name": (str,), "slots": (int,), "ahead": (int,), "pool": (str,), "labels": (dict,),
        "drain_grace": (int, float), "allow_root": (bool,), "http": (dict,),
        "isolation": (dict,), "container": (dict,), "logs": (dict,)}
_LOGS = {"enabled": (bool,), "dir": (str,), "attempt_bytes": (int,), "total_bytes": (int,),
         "max_age": (int, float), "keep_per_job": (int,)}
_CONTAINER = {"engine": (str,), "runtime": (str,), "networks": (list,), "mounts": (list,), "pull": (str,),
              "ulimits": (list,)}
_HTTP = {"allow": (list,), "deny": (list,), "keep_bytes": (int,)}
_ISOLATION = {"allow_root_jobs": (bool,), "umask": (str,), "cgroup": (str,), "teams": (dict,),
              "uid_range": (str,), "state_dir": (str,), "require": (bool,)}
_TEAM = {"user": (str, int), "group": (str, int), "groups": (list,), "workdir_root": (str,),
         "allow_python": (bool,)}


class ConfigError(ValueError):
    """The file cannot be used; the message names the file and the key."""


@dataclass(slots=True)
class WorkerConfig:
    """What the file set (None / empty: not set, the flag or the built-in default applies)."""
    values: dict[str, Any] = field(default_factory=dict)     # top-level and http_* keys
    isolation: IsolationPolicy = field(default_factory=IsolationPolicy)
    cgroup: str = "auto"
    container: ContainerConfig = field(default_factory=ContainerConfig)
    container_runtime: str = "auto"           # auto | off | a runtime's name
    uid_range: tuple[int, int] | None = None  # [isolation] uid_range
    state_dir: str = ""                       # [isolation] state_dir ("": the default)
    require: bool = False                     # [isolation] require
    logs: LogLimits = field(default_factory=LogLimits)   # [logs] bounds
    logs_enabled: bool = True                 # [logs] enabled
    logs_dir: str = ""                        # [logs] dir ("": the default)


def _check(table: dict, allowed: dict, where: str) -> None:
    for key, value in table.items():
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(allowed)})")
        types = allowed[key]
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{where}.{key}: expected {' or '.join(t.__name__ for t in types)}")
        if not isinstance(value, types):
            raise ConfigError(f"{where}.{key}: expected {' or '.join(t.__name__ for t in types)}, "
                              f"got {type(value).__name__}")


def _strings(value: list, where: str) -> list[str]:
    if not all(isinstance(x, str) for x in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return list(value)


def _umask(text: str, where: str) -> int:
    try:
        n = int(text, 8)
    except ValueError:
        raise ConfigError(f"{where}: expected an octal umask like \"0077\", got {text!r}") from None
    if not 0 <= n <= 0o777:
        raise ConfigError(f"{where}: a umask is 000 to 777, got {text!r}")
    return n


def _teams(d: dict, allow_root_jobs: bool, where: str) -> dict[str, TeamUser]:
    out: dict[str, TeamUser] = {}
    for team, t in sorted(d.items()):
        tw = f"{where}.{team}"
        if not isinstance(t, dict):
            raise ConfigError(f"{tw}: expected a table")
        _check(t, _TEAM, tw)
        if "user" not in t:
            raise ConfigError(f"{tw}: missing user")
        if "groups" in t and not all(isinstance(g, (str, int)) and not isinstance(g, bool)
                                     for g in t["groups"]):
            raise ConfigError(f"{tw}.groups: expected group names or gids")
        try:
            out[team] = resolve_user(team, t, allow_root_jobs=allow_root_jobs)
        except IsolationError as e:
            raise ConfigError(f"{tw}: {e}") from None
    return out


def parse_config(text: str, where: str = "config") -> WorkerConfig:
    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: not valid TOML: {e}") from None
    _check(d, _TOP, where)
    values: dict[str, Any] = {}
    for key in ("name", "pool", "allow_root"):
        if key in d:
            values[key] = d[key]
    if "cluster" in d:
        c = d["cluster"]
        values["cluster"] = ",".join(_strings(c, f"{where}.cluster")) if isinstance(c, list) else c
    if "slots" in d:
        if d["slots"] < 1:
            raise ConfigError(f"{where}.slots: must be at least 1")
        values["slots"] = d["slots"]
    if "ahead" in d:
        if d["ahead"] < 0:
            raise ConfigError(f"{where}.ahead: must be 0 or more")
        values["ahead"] = d["ahead"]
    if "drain_grace" in d:
        if not 0 <= d["drain_grace"] < float("inf"):
            raise ConfigError(f"{where}.drain_grace: must be a finite number of seconds >= 0")
        values["drain_grace"] = float(d["drain_grace"])
    if "labels" in d:
        if not all(isinstance(v, str) for v in d["labels"].values()):
            raise ConfigError(f"{where}.labels: values must be strings")
        values["labels"] = dict(d["labels"])
    http = d.get("http", {})
    _check(http, _HTTP, f"{where}.http")
    for key in ("allow", "deny"):
        if key in http:
            values[f"http_{key}"] = _strings(http[key], f"{where}.http.{key}")
    if "keep_bytes" in http:
        values["http_keep_bytes"] = http["keep_bytes"]
    iso = d.get("isolation", {})
    _check(iso, _ISOLATION, f"{where}.isolation")
    allow_root_jobs = iso.get("allow_root_jobs", False)
    policy = IsolationPolicy(teams=_teams(iso.get("teams", {}), allow_root_jobs,
                                          f"{where}.isolation.teams"),
                             allow_root_jobs=allow_root_jobs,
                             umask=_umask(iso["umask"], f"{where}.isolation.umask")
                             if "umask" in iso else None)
    box = d.get("container", {})
    _check(box, _CONTAINER, f"{where}.container")
    logs = d.get("logs", {})
    _check(logs, _LOGS, f"{where}.logs")
    return WorkerConfig(logs=_log_limits(logs, f"{where}.logs"), logs_enabled=logs.get("enabled", True),
                        logs_dir=_absolute(logs, "dir", f"{where}.logs.dir"),
                        values=values, isolation=policy, cgroup=iso.get("cgroup", "auto") or "auto",
                        container=_container(box, f"{where}.container"),
                        container_runtime=box.get("runtime", "auto") or "auto",
                        uid_range=_uid_range(iso, f"{where}.isolation.uid_range"),
                        state_dir=_state_dir(iso, f"{where}.isolation.state_dir"),
                        require=iso.get("require", False))


def _log_limits(logs: dict, where: str) -> LogLimits:
    defaults = LogLimits()
    try:
        return LogLimits(attempt_bytes=logs.get("attempt_bytes", defaults.attempt_bytes),
                         total_bytes=logs.get("total_bytes", defaults.total_bytes),
                         max_age_s=float(logs.get("max_age", defaults.max_age_s)),
                         keep_per_job=logs.get("keep_per_job", defaults.keep_per_job))
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None


def _absolute(table: dict, key: str, where: str) -> str:
    path = table.get(key, "")
    if path and not path.startswith("/"):
        raise ConfigError(f"{where}: an absolute path, got {path!r}")
    return path


def _uid_range(iso: dict, where: str) -> tuple[int, int] | None:
    """The range (a mapped team's uid inside it is never handed out: TeamUids.taken)."""
    if "uid_range" not in iso:
        return None
    try:
        first, last = parse_range(iso["uid_range"])
    except UidError as e:
        raise ConfigError(f"{where}: {e}") from None
    return first, last


def _state_dir(iso: dict, where: str) -> str:
    path = iso.get("state_dir", "")
    if path and not path.startswith("/"):
        raise ConfigError(f"{where}: an absolute path, got {path!r}")
    return path


def _container(box: dict, where: str) -> ContainerConfig:
    engine = box.get("engine", "podman")
    if engine not in ("podman", "docker"):
        raise ConfigError(f"{where}.engine: podman or docker, got {engine!r}")
    pull = box.get("pull", "never")
    if pull not in ("never", "if-missing"):
        raise ConfigError(f"{where}.pull: never or if-missing, got {pull!r}")
    mounts = []
    for i, m in enumerate(box.get("mounts", [])):
        mw = f"{where}.mounts[{i}]"
        if not isinstance(m, dict):
            raise ConfigError(f"{mw}: expected a table {{ path = \"/srv/data\", rw = false }}")
        _check(m, {"path": (str,), "rw": (bool,)}, mw)
        if not m.get("path", "").startswith("/"):
            raise ConfigError(f"{mw}.path: an absolute path")
        mounts.append(MountRule(m["path"], m.get("rw", False)))
    return ContainerConfig(engine=engine, networks=tuple(_strings(box.get("networks", []), f"{where}.networks")),
                           mounts=tuple(mounts), pull=pull,
                           ulimits=tuple(_strings(box["ulimits"], f"{where}.ulimits")) if "ulimits" in box
                           else DEFAULT_ULIMITS)


def load_config(path: str) -> WorkerConfig:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    return parse_config(text, path)
