"""Building ``JobSpec`` messages: from keyword arguments (``job_spec``) or from a job document
(``spec_from_dict``, for YAML/JSON files), and back (``spec_to_dict``).

The job document
----------------
One mapping per job. Only ``name`` and a handler are required; every other key has the server's
default. Unknown keys are refused with a ``ValidationError`` naming the key::

    name: nightly-backup            # [a-z0-9][a-z0-9._-]{0,127}
    team: ops                       # default "default"
    schedule: "0 2 * * *"           # cron (5 or 6 fields, macros, H), "@every 30s",
                                    # "at 2026-12-01T09:00:00Z", or "" / absent = on demand
    timezone: Europe/Paris          # IANA zone (alias: tz); default UTC
    description: Dump the database to S3
    labels: {tier: gold}
    paused: false                   # create paused
    priority: 10
    pool: db
    worker_labels: {zone: eu-1}     # run only on workers started with --labels zone=eu-1
    overlap: skip                   # skip | queue | allow (default allow)
    catchup: latest                 # all | latest | none (default all)
    delivery: at_most_once          # at_least_once (default) | at_most_once
    max_active: 3                   # overlap allow: at most 3 runs at once (default unbounded)
    queue_limit: 5                  # overlap queue: at most 5 waiting, more are SKIPPED (default 10)
    concurrency_key: warehouse      # jobs sharing a key run at most concurrency_limit at once
    concurrency_limit: 1            # (default 1: mutually exclusive)
    catchup_window: 6h              # after downtime, only instants newer than this are caught up
    catchup_max: 10                 # at most 10 missed instants run (catchup all) ...
    catchup_order: newest           # ... the newest (default) or the oldest
    starting_deadline: 10m          # not started 10 min after its instant: SKIPPED, with the reason
    jitter: 60s                     # spread dispatch over [0, 60s) by a hash of the name
    history_max_age: 30d            # prune finished executions older than this
    timeout: 30m                    # seconds (a number) or a duration: "90s", "5m", "1h30m", "250ms"
    history_limit: 200              # executions kept; 0 = server default
    dst_gap: skip                   # shift (default: fire at the end of a spring-forward gap) | skip
    dst_fold: both                  # first (default) | last | both: a repeated wall time fires on...
    sla:                            # a deadline per run; a miss is an event on the run (+ webhook)
      within: 2h                    # done within 2h of the scheduled time, and/or
      by: "06:00"                   # by the first 06:00 at or after it, in
      timezone: Europe/Berlin       # (default: the job's zone)
      webhook: https://hooks.example.com/sla   # POSTed once per miss, best effort
    window: {start: "01:00", end: "05:00", tz: Europe/Berlin}
                                    # instead of an exact time: each run placed by the leader at the
                                    # least-loaded second of the window (the end is its deadline);
                                    # schedule then picks the days ("0 0 * * 1-5") or is absent
                                    # (every day); "01:00-05:00" is short for start and end
    retry:
      max_attempts: 3
      initial_backoff: 10s          # durations like timeout
      max_backoff: 5m
      multiplier: 2

    # the handler, exactly one of:
    command: /usr/local/bin/backup.sh --full   # run with /bin/sh -c
    argv: [/usr/local/bin/backup, --full]      # or exec directly
    workdir: /srv/backup                       # with command/argv only
    env: {BUCKET: s3://backups}                # with command/argv only
    inherit_env: [AWS_REGION]                  # worker variables it may see (command/argv only;
                                               # default: PATH, HOME, LANG and SCHEDD_* only)
    env_secret: {DB_PASSWORD: hunter2}         # secret env (command/argv, python: ctx.secret_env):
                                               # stored encrypted, read back as "***(v1)"; sending
                                               # "***(vN)" back keeps the stored value
    limits: {memory_mb: 512, cpu_seconds: 60, open_files: 256, processes: 64}
                                               # per attempt, applied by the worker (rlimits, and
                                               # memory.max / pids.max of a cgroup where it has one)
    params: {region: eu}                       # default run parameters (SCHEDD_PARAM_REGION, ...);
                                               # `job trigger --param region=us` overrides one

    http: {url: "https://ci.example.com/hook", method: POST, headers: {X-Token: abc},
           body: "{}", insecure_skip_verify: false}

    python: {name: reports.weekly, args: {week: current}}   # args: any JSON value

    container:                                 # run in a container (podman/docker on the worker)
      image: localhost/etl:1.4                 # required
      command: "etl --since yesterday"         # run with /bin/sh -c in the image, or
      args: [etl, --since, yesterday]          # exec directly (neither: the image's own command)
      env: {STAGE: prod}                       # env_secret works too: only inside the container
      workdir: /work
      user: "1000:1000"
      network: none                            # default; host or a named network if the worker allows
      cpu: 0.5                                 # CPUs
      memory: 256Mi                            # MiB (256) or a size (256Mi, 1Gi)
      pids: 64                                 # at most 64 processes
      read_only: true                          # read-only root filesystem (default true)
      mounts: [{source: /srv/in, target: /in}, {source: /srv/out, target: /out, read_only: false}]
                                               # host paths the worker allowlists
      pull: never                              # never (default) | if-missing, if the worker allows

Map values (labels, env, headers) and argv items may be numbers or booleans; they are sent as text.
A file may hold one document, a list of them, or several YAML documents (see ``schedctl``).
A document may also be a job as ``schedctl job get NAME -o yaml`` (or ``-o json``) prints it: its
``spec`` is sent and the rest (version, next fire, ...) is left out, so a read applies back as is.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf.json_format import ParseDict, ParseError

from schedd_proto import scheduler_pb2 as pb

from .documents import DocumentError, Limits, build_all, load_documents
from .errors import ValidationError, brief, clip

__all__ = ["job_spec", "container_handler", "container_to_dict", "spec_from_dict", "spec_from_document", "spec_from_read", "spec_to_dict", "parse_duration", "job_specs_from_bytes",
           "INT32_MIN", "INT32_MAX"]

# the integer fields of a JobSpec (priority, max_attempts, limits, counts) are int32
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

_DOC_KEYS: tuple[str, ...] = (
    "name", "team", "schedule", "timezone", "tz", "description", "labels", "paused", "priority",
    "pool", "worker_labels", "overlap", "catchup", "delivery", "timeout", "history_limit", "retry",
    "command", "argv", "workdir", "env", "inherit_env", "http", "python", "container",
)  # fmt: skip
_DOC_KEYS += ("dst_gap", "dst_fold", "sla", "env_secret", "limits", "params")
_DOC_KEYS += ("calendar", "on_blackout")
_DOC_KEYS += ("window",)
_DOC_KEYS += ("max_active", "queue_limit", "concurrency_key", "concurrency_limit", "catchup_window",
              "catchup_max", "catchup_order", "starting_deadline", "jitter", "history_max_age")
# job document key -> JobSpec field, for the policies given as durations
_DURATION_FIELDS = {"catchup_window": "catchup_window_seconds", "starting_deadline": "starting_deadline_seconds",
                    "jitter": "jitter_seconds", "history_max_age": "history_max_age_seconds"}
_COUNT_FIELDS = ("max_active", "queue_limit", "concurrency_limit", "catchup_max")
_RETRY_KEYS = ("max_attempts", "initial_backoff", "max_backoff", "multiplier")
_SLA_KEYS = ("within", "by", "timezone", "webhook")
_CALENDAR_KEYS = ("skip", "only", "on_skip")
_WINDOW_KEYS = ("start", "end", "tz")
_HTTP_KEYS = ("url", "method", "headers", "body", "insecure_skip_verify")
_PYTHON_KEYS = ("name", "args")
_CONTAINER_KEYS = ("image", "command", "args", "env", "workdir", "user", "network", "cpu", "memory", "pids",
                   "read_only", "mounts", "pull")
_MOUNT_KEYS = ("source", "target", "read_only")
_LIMIT_KEYS = ("memory_mb", "cpu_seconds", "open_files", "processes")

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | float) -> float:
    """Seconds from a number or a duration text: ``"30"``, ``"90s"``, ``"5m"``, ``"1h30m"``,
    ``"250ms"``, ``"2d"``. Raises ``ValidationError`` for anything else or a negative value."""
    if isinstance(value, bool):
        raise ValidationError(f"invalid duration {brief(value)}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not text or "".join(n + u for n, u in parts) != text:
                raise ValidationError(
                    f"invalid duration {brief(value)}: use seconds or e.g. 90s, 5m, 1h30m, 250ms"
                ) from None
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds < 0 or not math.isfinite(seconds):
        raise ValidationError(f"invalid duration {brief(value)}: must be a finite, non-negative time")
    return seconds


def job_spec(
    name: str,
    *,
    schedule: str = "",
    tz: str = "UTC",
    command: str | None = None,
    argv: Iterable[str] | None = None,
    workdir: str = "",
    env: Mapping[str, str] | None = None,
    inherit_env: Iterable[str] | None = None,
    http_url: str | None = None,
    http_method: str = "",
    http_headers: Mapping[str, str] | None = None,
    http_body: str = "",
    http_insecure_skip_verify: bool = False,
    python: str | None = None,
    python_args: Any = None,
    team: str = "",
    description: str = "",
    labels: Mapping[str, str] | None = None,
    retry: pb.RetryPolicy | None = None,
    timeout: float | str = 0,
    overlap: str = "",
    catchup: str = "",
    delivery: str = "",
    priority: int = 0,
    pool: str = "",
    worker_labels: Mapping[str, str] | None = None,
    paused: bool = False,
    history_limit: int = 0,
    dst_gap: str = "",
    dst_fold: str = "",
    sla: pb.SlaSpec | Mapping[str, Any] | None = None,
    max_active: int = 0,
    queue_limit: int = 0,
    concurrency_key: str = "",
    concurrency_limit: int = 0,
    catchup_window: float | str = 0,
    catchup_max: int = 0,
    catchup_order: str = "",
    starting_deadline: float | str = 0,
    jitter: float | str = 0,
    history_max_age: float | str = 0,
    env_secret: Mapping[str, str] | None = None,
    limits: pb.ResourceLimits | Mapping[str, float] | None = None,
    container: pb.ContainerHandler | Mapping[str, Any] | None = None,
    params: Mapping[str, str] | None = None,
    calendar: pb.JobCalendar | Mapping[str, Any] | None = None,
    on_blackout: str = "",
    window: pb.JobWindow | Mapping[str, Any] | str | None = None,
) -> pb.JobSpec:
    """A ``JobSpec`` with exactly one handler: ``command=`` or ``argv=`` (with optional ``workdir``,
    ``env`` and ``inherit_env``, the worker variables the job may see besides PATH, HOME, LANG), ``http_url=`` (with ``http_method``, ``http_headers``, ``http_body``), or
    ``python=`` (a handler name registered with the worker API; ``python_args`` is any JSON value),
    or ``container=`` (a ``ContainerHandler`` or a mapping of its fields: image, command or args,
    env, workdir, user, network, cpu, memory as MiB or "64Mi"/"1Gi", pids, read_only, mounts as
    mappings of source, target, read_only, pull; needs a cluster at feature level 6). ``params``
    are the default run parameters of every run (a trigger's own win, name by name; level 7).
    ``calendar`` a ``JobCalendar`` or a mapping of skip, only (lists of calendar names) and on_skip
    (skip | next_allowed); ``on_blackout`` skip | defer (feature level 8; schedd_client.calendars).
    ``window`` a flexible window instead of an exact time: "01:00-05:00", a ``JobWindow`` or a
    mapping of start, end and optionally tz (the job's zone, when ``tz`` is not given otherwise);
    ``schedule`` then picks the days ("0 0 * * 1-5") or is empty for every day (feature level 9).

    ``timeout`` is seconds or a duration text ("5m"). Empty ``schedule`` means on demand.
    ``dst_gap`` (shift | skip) and ``dst_fold`` (first | last | both) are the schedule's DST
    policies; ``sla`` a ``SlaSpec`` or a mapping of its fields (``within`` may be a duration
    text). Policies: ``max_active`` (overlap allow), ``queue_limit`` (overlap queue),
    ``concurrency_key``/``concurrency_limit``, ``catchup_window``, ``catchup_max``,
    ``catchup_order`` (newest | oldest), ``starting_deadline``, ``jitter`` and ``history_max_age``
    (seconds or durations). ``env_secret``: secret environment (shell and python handlers), stored
    encrypted and never shown by reads; ``limits``: a ``ResourceLimits`` or a mapping of
    memory_mb, cpu_seconds, open_files, processes. Fields
    left at their zero value take the server's defaults. Raises ``ValidationError`` for a missing
    or ambiguous handler or a bad duration; the rest is validated by the server.
    """
    given = {"command": command, "argv": argv, "http": http_url, "python": python, "container": container}
    chosen = [kind for kind, value in given.items() if value is not None]
    if len(chosen) != 1:
        problem = "no handler" if not chosen else f"more than one handler ({', '.join(chosen)})"
        raise ValidationError(
            f"job {brief(name)}: {problem}: give exactly one of command, argv, http (http_url), python "
            "or container"
        )
    if (workdir or env or inherit_env) and command is None and argv is None:
        raise ValidationError(f"job {brief(name)}: workdir, env and inherit_env apply to command/argv "
                              "handlers only")

    if command is not None or argv is not None:
        handler = pb.Handler(
            shell=pb.ShellHandler(
                command=command or "", argv=list(argv or ()), workdir=workdir, env=dict(env or {}),
                inherit_env=list(inherit_env or ()),
            )
        )
    elif container is not None:
        handler = pb.Handler(container=container_handler(container, f"job {brief(name)}: container"))
    elif http_url is not None:
        handler = pb.Handler(
            http=pb.HttpHandler(
                url=http_url,
                method=http_method,
                headers=dict(http_headers or {}),
                body=http_body,
                insecure_skip_verify=http_insecure_skip_verify,
            )
        )
    else:
        try:
            args_json = "" if python_args is None else json.dumps(python_args, sort_keys=True)
        except (TypeError, ValueError) as err:
            raise ValidationError(f"job {brief(name)}: python args must be JSON data: {brief(str(err), 120)}") from None
        handler = pb.Handler(python=pb.PythonHandler(name=python or "", args_json=args_json))

    job_window, tz = _job_window(name, window, tz)
    try:
        return pb.JobSpec(
            name=name,
            team=team,
            schedule=schedule,
            timezone=tz,
            window=job_window,
            handler=handler,
            description=description,
            labels=dict(labels or {}),
            retry=retry,
            timeout_seconds=parse_duration(timeout),
            overlap=overlap,
            catchup=catchup,
            delivery=delivery,
            priority=priority,
            pool=pool,
            worker_labels=dict(worker_labels or {}),
            paused=paused,
            history_limit=history_limit,
            dst_gap=dst_gap,
            dst_fold=dst_fold,
            sla=_sla_spec(name, sla),
            max_active=max_active,
            queue_limit=queue_limit,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            catchup_window_seconds=parse_duration(catchup_window),
            catchup_max=catchup_max,
            catchup_order=catchup_order,
            starting_deadline_seconds=parse_duration(starting_deadline),
            jitter_seconds=parse_duration(jitter),
            history_max_age_seconds=parse_duration(history_max_age),
            env_secret=dict(env_secret or {}),
            params=dict(params or {}),
            calendar=_job_calendar(name, calendar),
            on_blackout=on_blackout,
            limits=limits if limits is None or isinstance(limits, pb.ResourceLimits)
            else pb.ResourceLimits(**dict(_mapping(limits, f"job {brief(name)}: limits"))),
        )
    except (TypeError, ValueError) as err:   # e.g. priority past int32: protobuf refuses it
        raise ValidationError(f"job {brief(name)}: {clip(str(err), 160)}") from None


def _job_window(name: str, value: pb.JobWindow | Mapping[str, Any] | str | None,
                tz: str) -> tuple[pb.JobWindow | None, str]:
    """The window and the job's zone: a window's own `tz` is the job's zone, unless the job
    names another one (refused: one zone holds the window and the days)."""
    if value is None or isinstance(value, pb.JobWindow):
        return value, tz
    label = f"job {brief(name)}: window"
    if isinstance(value, str):
        start, sep, end = value.partition("-")
        if not sep:
            raise ValidationError(f'{label}: "HH:MM-HH:MM" (e.g. "01:00-05:00"), got {brief(value)}')
        return pb.JobWindow(start=start.strip(), end=end.strip()), tz
    # YAML 1.1 reads an unquoted 01:00 as the sexagesimal number 60: read it back as the time
    value = {k: f"{v // 60:02d}:{v % 60:02d}" if k in ("start", "end") and type(v) is int and 0 <= v < 1440 else v
             for k, v in _mapping(value, label).items()}
    r = _Reader(value, label, _WINDOW_KEYS)
    zone = r.text("tz")
    if zone and tz not in ("", "UTC", zone):
        raise ValidationError(f"{label}: tz {zone!r} differs from the job's timezone {tz!r}: give one zone")
    return pb.JobWindow(start=r.text("start", required=True), end=r.text("end", required=True)), zone or tz


def _job_calendar(name: str, value: pb.JobCalendar | Mapping[str, Any] | None) -> pb.JobCalendar | None:
    if value is None or isinstance(value, pb.JobCalendar):
        return value
    r = _Reader(_mapping(value, f"job {brief(name)}: calendar"), f"job {brief(name)}: calendar", _CALENDAR_KEYS)
    return pb.JobCalendar(skip=r.text_list("skip") if value.get("skip") is not None else [],
                          only=r.text_list("only") if value.get("only") is not None else [],
                          on_skip=r.text("on_skip"))


def container_handler(value: pb.ContainerHandler | Mapping[str, Any], label: str = "container") -> pb.ContainerHandler:
    """A ``ContainerHandler`` from itself or a mapping of its fields (a job document's
    ``container:`` block): numbers in env are sent as text, ``memory`` as text ("64" is MiB),
    ``mounts`` as mappings. The server checks the values (schedd.core.model.container_spec)."""
    if isinstance(value, pb.ContainerHandler):
        return value
    r = _Reader(_mapping(value, label), label, _CONTAINER_KEYS)
    memory = r.doc.get("memory")
    if isinstance(memory, bool) or not isinstance(memory, (str, int, float, type(None))):
        raise r._wrong("memory", "MiB (a number) or a size like 64Mi")
    fields: dict[str, Any] = {
        "image": r.text("image", required=True), "command": r.text("command"),
        "args": r.text_list("args") if r.doc.get("args") is not None else [],
        "env": r.text_map("env"), "workdir": r.text("workdir"), "user": r.text("user"),
        "network": r.text("network"), "cpu": r.number("cpu"),
        "memory": "" if memory is None else _plain_text(memory), "pids": r.integer("pids"),
        "pull": r.text("pull"), "mounts": [_mount(m, f"{label}: mounts") for m in _list(r.doc.get("mounts"), label)],
    }
    if r.doc.get("read_only") is not None:
        fields["read_only"] = r.flag("read_only")
    return pb.ContainerHandler(**fields)


def _list(value: Any, label: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError(f"{label}: 'mounts' must be a list, got {_type_name(value)}")
    return value


def _mount(value: Any, label: str) -> pb.ContainerMount:
    r = _Reader(_mapping(value, label), label, _MOUNT_KEYS)
    mount = pb.ContainerMount(source=r.text("source", required=True), target=r.text("target", required=True))
    if r.doc.get("read_only") is not None:
        mount.read_only = r.flag("read_only")
    return mount


def _plain_text(value: str | float) -> str:
    return str(int(value)) if isinstance(value, float) and value == int(value) else str(value)


def container_to_dict(c: pb.ContainerHandler) -> dict[str, Any]:
    """The ``container:`` block of a job document for ``c`` (zero values left out)."""
    doc: dict[str, Any] = {"image": c.image}
    for key in ("command", "workdir", "user", "network", "memory", "pids", "pull"):
        if getattr(c, key):
            doc[key] = getattr(c, key)
    if c.args:
        doc["args"] = list(c.args)
    if c.env:
        doc["env"] = dict(c.env)
    if c.cpu:
        doc["cpu"] = _plain_number(c.cpu)
    if c.HasField("read_only"):
        doc["read_only"] = c.read_only
    if c.mounts:
        doc["mounts"] = [{"source": m.source, "target": m.target,
                          **({"read_only": m.read_only} if m.HasField("read_only") else {})} for m in c.mounts]
    return doc


def _sla_spec(name: str, sla: pb.SlaSpec | Mapping[str, Any] | None) -> pb.SlaSpec | None:
    if sla is None or isinstance(sla, pb.SlaSpec):
        return sla
    d = dict(_mapping(sla, f"job {brief(name)}: sla"))
    within = d.pop("within", None)
    if within is not None:
        d["within_seconds"] = parse_duration(within)
    try:
        return pb.SlaSpec(**d)
    except (TypeError, ValueError) as err:
        raise ValidationError(f"job {brief(name)}: bad sla: {clip(str(err))}") from None


def spec_from_dict(doc: Mapping[str, Any]) -> pb.JobSpec:
    """A ``JobSpec`` from a job document (the format is in this module's docstring).

    Raises ``ValidationError`` naming the offending key for unknown keys, wrong types, a missing
    or ambiguous handler, or a bad duration.
    """
    doc = _mapping(doc, "job document")
    label = f"job {brief(doc['name'])}" if isinstance(doc.get("name"), str) else "job document"
    r = _Reader(doc, label, _DOC_KEYS)
    if "timezone" in doc and "tz" in doc:
        raise ValidationError(f"{label}: give 'timezone' or its alias 'tz', not both")

    handler: dict[str, Any] = {}  # job_spec checks that there is exactly one
    if "command" in doc:
        handler.update(command=r.text("command"))
    if "argv" in doc:
        handler.update(argv=r.text_list("argv"))
    if "http" in doc:
        h = r.section("http", _HTTP_KEYS)
        handler.update(
            http_url=h.text("url", required=True),
            http_method=h.text("method"),
            http_headers=h.text_map("headers"),
            http_body=h.text("body"),
            http_insecure_skip_verify=h.flag("insecure_skip_verify"),
        )
    if "python" in doc:
        p = r.section("python", _PYTHON_KEYS)
        handler.update(python=p.text("name", required=True), python_args=p.doc.get("args"))
    if "container" in doc:
        handler.update(container=container_handler(doc["container"], f"{label}: container"))

    retry = None
    if doc.get("retry") is not None:
        rr = r.section("retry", _RETRY_KEYS)
        retry = pb.RetryPolicy(
            max_attempts=rr.integer("max_attempts"),
            initial_backoff_seconds=rr.seconds("initial_backoff"),
            max_backoff_seconds=rr.seconds("max_backoff"),
            multiplier=rr.number("multiplier"),
        )

    return job_spec(
        r.text("name", required=True),
        schedule=r.text("schedule"),
        tz=r.text("timezone") or r.text("tz") or "UTC",
        workdir=r.text("workdir"),
        env=r.text_map("env"),
        inherit_env=r.text_list("inherit_env") if doc.get("inherit_env") is not None else [],
        team=r.text("team"),
        description=r.text("description"),
        labels=r.text_map("labels"),
        retry=retry,
        timeout=r.seconds("timeout"),
        overlap=r.text("overlap"),
        catchup=r.text("catchup"),
        delivery=r.text("delivery"),
        priority=r.integer("priority"),
        pool=r.text("pool"),
        worker_labels=r.text_map("worker_labels"),
        paused=r.flag("paused"),
        history_limit=r.integer("history_limit"),
        dst_gap=r.text("dst_gap"),
        dst_fold=r.text("dst_fold"),
        sla=_sla_from_doc(r) if doc.get("sla") is not None else None,
        env_secret=r.text_map("env_secret"),
        params=r.text_map("params"),
        calendar=dict(r.section("calendar", _CALENDAR_KEYS).doc) if doc.get("calendar") is not None else None,
        on_blackout=r.text("on_blackout"),
        window=(doc["window"] if isinstance(doc.get("window"), str)
                else dict(r.section("window", _WINDOW_KEYS).doc) if doc.get("window") is not None else None),
        limits=_limits_from_doc(r) if doc.get("limits") is not None else None,
        concurrency_key=r.text("concurrency_key"),
        catchup_order=r.text("catchup_order"),
        max_active=r.integer("max_active"),                   # _COUNT_FIELDS, by name so each is type-checked
        queue_limit=r.integer("queue_limit"),
        concurrency_limit=r.integer("concurrency_limit"),
        catchup_max=r.integer("catchup_max"),
        catchup_window=r.seconds("catchup_window"),           # _DURATION_FIELDS
        starting_deadline=r.seconds("starting_deadline"),
        jitter=r.seconds("jitter"),
        history_max_age=r.seconds("history_max_age"),
        **handler,
    )


_JOB_READ_KEYS = frozenset(f.name for f in pb.Job.DESCRIPTOR.fields) | {
    f.name[:-3] for f in pb.Job.DESCRIPTOR.fields if f.name.endswith("_ms")}    # to_dict's readable times


def spec_from_document(doc: Any) -> pb.JobSpec:
    """A ``JobSpec`` from either form a file may hold: a job document (``spec_from_dict``) or a
    job as ``schedctl job get -o yaml|json`` prints it (a mapping with a ``spec``, whose other keys
    are the job's state and are not sent), so what a read shows can be applied back as it is."""
    if isinstance(doc, Mapping) and "spec" in doc and "name" not in doc:
        return spec_from_read(doc)
    return spec_from_dict(doc)


def spec_from_read(doc: Mapping[str, Any]) -> pb.JobSpec:
    """The spec of a job as a read printed it (``to_dict`` of a ``Job``). Its secret values are
    masks (``***(v1)``), which a write keeps as stored. A summary (``job list``) is refused: it
    holds only some of the spec, and applying it would clear the rest."""
    spec = doc["spec"]
    label = f"job {brief(spec['name'])}" if isinstance(spec, Mapping) and isinstance(spec.get("name"), str) \
        else "job document"
    _check_keys(doc, sorted(_JOB_READ_KEYS), label)
    if doc.get("summary"):
        raise ValidationError(f"{label}: a summary from `job list` holds part of the spec; apply what "
                              "`schedctl job get NAME -o yaml` prints")
    try:
        return ParseDict(_mapping(spec, f"{label}: 'spec'"), pb.JobSpec())
    except ParseError as err:
        raise ValidationError(f"{label}: 'spec': {clip(' '.join(str(err).split()))}") from None


def job_specs_from_bytes(data: bytes, where: str, limits: Limits = Limits()) -> list[tuple[str, pb.JobSpec]]:
    """Every job in a job file's bytes (one document, a list of them, or several YAML documents)
    with where it was read ("jobs.yaml: document 3, item 2"), all checked before the caller sends
    any; ``where`` names the file. Raises ``DocumentError`` (a ``ValidationError``) with one line
    naming the document and the problem."""
    located = load_documents(data, where, limits)
    if not located:
        raise DocumentError(f"{where}: no job documents")
    specs = build_all(located, spec_from_document)
    seen: set[str] = set()
    for (label, _), spec in zip(located, specs):
        if spec.name in seen:
            raise DocumentError(f"{label}: job {brief(spec.name)} appears more than once")
        seen.add(spec.name)
    return [(label, spec) for (label, _), spec in zip(located, specs)]


def _limits_from_doc(r: _Reader) -> pb.ResourceLimits:
    lim = r.section("limits", _LIMIT_KEYS)
    return pb.ResourceLimits(memory_mb=lim.integer("memory_mb"), cpu_seconds=lim.number("cpu_seconds"),
                             open_files=lim.integer("open_files"), processes=lim.integer("processes"))


def _sla_from_doc(r: _Reader) -> pb.SlaSpec:
    s = r.section("sla", _SLA_KEYS)
    if isinstance(s.doc.get("by"), int) and not isinstance(s.doc.get("by"), bool):
        raise ValidationError(f'{s.label}: \'by\' must be quoted text like "06:00" (YAML reads an '
                              "unquoted 06:00 as a number)")
    return pb.SlaSpec(within_seconds=s.seconds("within"), by=s.text("by"), timezone=s.text("timezone"),
                      webhook=s.text("webhook"))


def spec_to_dict(spec: pb.JobSpec) -> dict[str, Any]:
    """The job document for ``spec`` (the inverse of ``spec_from_dict``), fields at their zero
    value left out; ``spec_from_dict(spec_to_dict(s)) == s`` for a spec with one handler."""
    doc: dict[str, Any] = {"name": spec.name}
    for key in ("team", "schedule", "timezone", "description"):
        if getattr(spec, key):
            doc[key] = getattr(spec, key)
    if spec.labels:
        doc["labels"] = dict(spec.labels)
    if spec.worker_labels:
        doc["worker_labels"] = dict(spec.worker_labels)
    if spec.params:
        doc["params"] = dict(spec.params)
    if spec.HasField("calendar"):
        cal = {"skip": list(spec.calendar.skip), "only": list(spec.calendar.only), "on_skip": spec.calendar.on_skip}
        doc["calendar"] = {k: v for k, v in cal.items() if v}
    if spec.on_blackout:
        doc["on_blackout"] = spec.on_blackout
    if spec.HasField("window"):
        doc["window"] = {"start": spec.window.start, "end": spec.window.end}
    kind = spec.handler.WhichOneof("kind")
    if kind == "shell":
        shell = spec.handler.shell
        if shell.argv:
            doc["argv"] = list(shell.argv)
        else:
            doc["command"] = shell.command
        if shell.workdir:
            doc["workdir"] = shell.workdir
        if shell.env:
            doc["env"] = dict(shell.env)
        if shell.inherit_env:
            doc["inherit_env"] = list(shell.inherit_env)
    elif kind == "http":
        http = spec.handler.http
        doc["http"] = {"url": http.url}
        for key in ("method", "body", "insecure_skip_verify"):
            if getattr(http, key):
                doc["http"][key] = getattr(http, key)
        if http.headers:
            doc["http"]["headers"] = dict(http.headers)
    elif kind == "python":
        doc["python"] = {"name": spec.handler.python.name}
        if spec.handler.python.args_json:
            doc["python"]["args"] = json.loads(spec.handler.python.args_json)
    elif kind == "container":
        doc["container"] = container_to_dict(spec.handler.container)
    if spec.HasField("retry"):
        retry = {
            "max_attempts": spec.retry.max_attempts,
            "initial_backoff": _plain_number(spec.retry.initial_backoff_seconds),
            "max_backoff": _plain_number(spec.retry.max_backoff_seconds),
            "multiplier": _plain_number(spec.retry.multiplier),
        }
        doc["retry"] = {k: v for k, v in retry.items() if v}
    if spec.timeout_seconds:
        doc["timeout"] = _plain_number(spec.timeout_seconds)
    for key in ("overlap", "catchup", "delivery", "priority", "pool", "paused", "history_limit"):
        if getattr(spec, key):
            doc[key] = getattr(spec, key)
    for key in ("dst_gap", "dst_fold", "concurrency_key", "catchup_order", *_COUNT_FIELDS):
        if getattr(spec, key):
            doc[key] = getattr(spec, key)
    for key, field in _DURATION_FIELDS.items():
        if getattr(spec, field):
            doc[key] = _plain_number(getattr(spec, field))
    if spec.HasField("sla"):
        sla = {"within": _plain_number(spec.sla.within_seconds), "by": spec.sla.by,
               "timezone": spec.sla.timezone, "webhook": spec.sla.webhook}
        doc["sla"] = {k: v for k, v in sla.items() if v}
    if spec.env_secret:
        doc["env_secret"] = dict(spec.env_secret)      # masks, as read: a write keeps them
    if spec.HasField("limits"):
        limits = {k: _plain_number(getattr(spec.limits, k)) for k in _LIMIT_KEYS}
        doc["limits"] = {k: v for k, v in limits.items() if v}
    return doc


def _plain_number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(f"{what} must be a mapping, got {_type_name(value)}")
    return value


def _check_keys(doc: Mapping[str, Any], allowed: Iterable[str], label: str) -> None:
    allowed = list(allowed)
    for key in doc:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1) if len(str(key)) < 100 else []
            hint = f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(allowed)}"
            raise ValidationError(f"{label}: unknown key {brief(key)}{hint}")


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


class _Reader:
    """Typed reads of a document's keys; errors name the key. Absent or null keys read as zero."""

    def __init__(self, doc: Mapping[str, Any], label: str, allowed: Iterable[str] | None = None):
        if allowed is not None:
            _check_keys(doc, allowed, label)
        self.doc = doc
        self.label = label

    def section(self, key: str, allowed: Iterable[str]) -> _Reader:
        """A reader of the mapping under ``key``, whose keys must be among ``allowed``."""
        return _Reader(_mapping(self.doc[key], f"{self.label}: {key!r}"), f"{self.label}: {key}", allowed)

    def _get(self, key: str, required: bool) -> Any:
        value = self.doc.get(key)
        if value is None and required:
            raise ValidationError(f"{self.label}: missing required key {key!r}")
        return value

    def _wrong(self, key: str, expected: str) -> ValidationError:
        value = self.doc[key]
        return ValidationError(
            f"{self.label}: {key!r} must be {expected}, got {_type_name(value)} {brief(value)}"
        )

    def text(self, key: str, *, required: bool = False) -> str:
        value = self._get(key, required)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self._wrong(key, "text")
        return value

    def integer(self, key: str) -> int:
        value = self._get(key, False)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, "an integer")
        if not INT32_MIN <= value <= INT32_MAX:
            raise self._wrong(key, f"an integer from {INT32_MIN} to {INT32_MAX}")
        return value

    def number(self, key: str) -> float:
        value = self._get(key, False)
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(key, "a number")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self._get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false")
        return value

    def seconds(self, key: str) -> float:
        value = self._get(key, False)
        if value is None:
            return 0.0
        try:
            return parse_duration(value)
        except ValidationError as err:
            raise ValidationError(f"{self.label}: {key!r}: {err.message}") from None

    def text_map(self, key: str) -> dict[str, str]:
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self._wrong(key, "a mapping")
        return {str(k): self._item(key, v) for k, v in value.items()}

    def text_list(self, key: str) -> list[str]:
        value = self._get(key, False)
        if not isinstance(value, list) or not value:
            raise self._wrong(key, "a non-empty list")
        return [self._item(key, v) for v in value]

    def _item(self, key: str, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (str, int, float)):
            return str(value)
        raise ValidationError(
            f"{self.label}: {key!r} items must be text, numbers or booleans, got {_type_name(value)}"
        )
