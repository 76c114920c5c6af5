"""The job flags of ``schedctl job create|update`` and how they become a job document.

Separate from the commands because this is one decision of its own: which flag sets which key of
the document ``schedd_client.specs`` reads, and how an update's flags merge into the stored job.
Both the parser (``add_spec_flags``) and the commands (``flag_doc``, ``merge``) read it here.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import Any

from ._cli import UsageError, _count, _seconds
from .errors import brief
from .specs import INT32_MIN


def add_spec_flags(parser: argparse.ArgumentParser, *, creating: bool) -> None:
    """Flags that set job fields; each maps onto a key of the job document (see ``_flag_doc``)."""
    spec = parser.add_argument_group("job fields")
    spec.add_argument("--schedule", metavar="S",
                      help='cron, "@every 30s", "at <RFC 3339>"; none (or "") makes an on-demand job, '
                           'run by `job trigger`')  # fmt: skip
    spec.add_argument("--tz", metavar="ZONE", help="IANA time zone of the schedule (default UTC)")
    handler = spec.add_mutually_exclusive_group()
    handler.add_argument("--command", metavar="CMD", help="run CMD with /bin/sh -c")
    handler.add_argument("--http-url", metavar="URL", help="call URL (POST unless --http-method)")
    handler.add_argument("--argv", nargs=argparse.REMAINDER, metavar="ARG",
                         help="exec ARG... directly; takes the rest of the line")  # fmt: skip
    spec.add_argument("--http-method", metavar="METHOD")
    spec.add_argument("--workdir", metavar="DIR", help="working directory of --command/--argv")
    spec.add_argument("--env", action="append", metavar="K=V", help="environment (repeatable)")
    spec.add_argument("--inherit-env", action="append", metavar="NAME",
                      help="let --command/--argv see the worker's variable NAME (repeatable; "
                           "by default a job sees only PATH, HOME, LANG and SCHEDD_*)")
    spec.add_argument("--secret-env", action="append", metavar="K=V",
                      help="secret environment (repeatable): stored encrypted, never shown by reads; "
                           "a bare K takes the value of schedctl's own variable K (keeps it off "
                           "the command line)")
    spec.add_argument("--limit", action="append", metavar="NAME=N",
                      help="per-attempt resource limit (repeatable): memory_mb, cpu_seconds, "
                           "open_files, processes")
    _container_flags(parser)
    spec.add_argument("--team", metavar="T")
    spec.add_argument("--description", metavar="D")
    spec.add_argument("--label", action="append", metavar="K=V", help="label (repeatable)")
    spec.add_argument("--default-param", action="append", metavar="K=V",
                      help="a default run parameter of every run, SCHEDD_PARAM_<K> (repeatable; "
                           "`job trigger --param` overrides it)")
    spec.add_argument("--worker-label", action="append", metavar="K=V",
                      help="run only on workers with this label (repeatable)")
    if creating:
        spec.add_argument("--paused", action="store_true", default=None, help="create paused")
    spec.add_argument("--priority", type=_count(INT32_MIN), metavar="N")
    spec.add_argument("--pool", metavar="P")
    spec.add_argument("--overlap", choices=("skip", "queue", "allow"))
    spec.add_argument("--catchup", choices=("all", "latest", "none"))
    spec.add_argument("--delivery", choices=("at_least_once", "at_most_once"),
                      help="at_most_once: an attempt whose fate is unknown ends LOST, never re-run")
    spec.add_argument("--timeout", dest="job_timeout", type=_seconds, metavar="D",
                      help="the job's timeout: seconds or 30s, 5m, 1h")  # fmt: skip
    spec.add_argument("--max-attempts", type=_count(1), metavar="N")
    spec.add_argument("--history-limit", type=_count(0), metavar="N")
    spec.add_argument("--dst-gap", choices=("shift", "skip"),
                      help="a time skipped by spring-forward: fire just after the gap (shift, default) or not")
    spec.add_argument("--dst-fold", choices=("first", "last", "both"),
                      help="a time repeated by fall-back fires at its first (default), last or both occurrences")
    spec.add_argument("--sla-within", type=_seconds, metavar="D", help="SLA: done within D of the scheduled time")
    spec.add_argument("--sla-by", metavar="HH:MM", help="SLA: done by this wall time (first at or after the scheduled time)")
    spec.add_argument("--sla-tz", metavar="ZONE", help="zone of --sla-by (default: the job's)")
    policy = parser.add_argument_group("scheduling policies")
    policy.add_argument("--max-active", type=_count(1), metavar="N", help="overlap allow: at most N runs at once")
    policy.add_argument("--queue-limit", type=_count(1), metavar="N",
                        help="overlap queue: at most N waiting runs, more are skipped (default 10)")
    policy.add_argument("--concurrency-key", metavar="KEY",
                        help="jobs sharing KEY run at most --concurrency-limit at once (default 1)")
    policy.add_argument("--concurrency-limit", type=_count(1), metavar="N")
    policy.add_argument("--catchup-window", type=_seconds, metavar="D",
                        help="catch up only instants newer than D (e.g. 6h)")
    policy.add_argument("--catchup-max", type=_count(1), metavar="N", help="catch up at most N missed instants")
    policy.add_argument("--catchup-order", choices=("newest", "oldest"), help="which ones --catchup-max keeps")
    policy.add_argument("--starting-deadline", type=_seconds, metavar="D",
                        help="an instant not started within D of its time is SKIPPED")
    policy.add_argument("--jitter", type=_seconds, metavar="D",
                        help="spread dispatch over [0, D) by a hash of the job name")
    policy.add_argument("--history-max-age", type=_seconds, metavar="D",
                        help="prune finished executions older than D")
    spec.add_argument("--sla-webhook", metavar="URL", help="POST each SLA miss to URL (JSON, best effort)")
    cal = parser.add_argument_group("calendars and blackouts (feature level 8)")
    cal.add_argument("--calendar-skip", action="append", metavar="NAME",
                     help="skip instants on the dates of calendar NAME, in the job's zone (repeatable)")
    cal.add_argument("--calendar-only", action="append", metavar="NAME",
                     help="fire only on the dates of calendar NAME (repeatable: any of them)")
    cal.add_argument("--on-skip", choices=("skip", "next_allowed"),
                     help="a calendar-excluded instant: skipped (default) or moved to the next allowed instant")
    cal.add_argument("--on-blackout", choices=("skip", "defer"),
                     help="an instant in a blackout window: skipped (default) or deferred to its end")
    win = parser.add_argument_group("flexible window (feature level 9)")
    win.add_argument("--window", metavar="HH:MM-HH:MM",
                     help="run once a day at the least-loaded second of this window in --tz, placed by the "
                          "leader (the end is the run's deadline); --schedule '0 0 * * 1-5' picks the days")


def _container_flags(parser: argparse.ArgumentParser) -> None:
    """A container handler (docs/workers.md "Container jobs"): with --image, --command/--argv,
    --env and --workdir are the container's."""
    box = parser.add_argument_group("container handler (with --image)")
    box.add_argument("--image", metavar="IMG", help="run in a container of IMG (--command runs with /bin/sh -c in it)")
    box.add_argument("--container-arg", action="append", metavar="A",
                     help="exec these args in the container, no shell (repeatable, in order)")
    box.add_argument("--user", metavar="USER[:GROUP]", help="the user inside the container")
    box.add_argument("--network", metavar="NET", help="none (default), host or a named network, where the worker allows it")
    box.add_argument("--cpus", type=float, metavar="N", help="CPU limit (0.5 = half a CPU)")
    box.add_argument("--memory", metavar="SIZE", help="memory limit: MiB (64) or a size (64Mi, 1Gi)")
    box.add_argument("--pids", type=_count(1), metavar="N", help="at most N processes")
    box.add_argument("--read-write", action="store_true", default=None, help="a writable root filesystem (default read-only)")
    box.add_argument("--mount", action="append", metavar="SRC:DST[:rw]",
                     help="bind-mount host path SRC (allowlisted by the worker) at DST, read-only unless :rw")
    box.add_argument("--pull", choices=("never", "if-missing"), help="pull the image if missing, where the worker allows it")


def _container_doc(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Move the handler flags into doc["container"] when a container flag is given (--image on
    create; on update any container flag changes the job's container block)."""
    box: dict[str, Any] = {}
    for dest, key in (("image", "image"), ("user", "user"), ("network", "network"), ("cpus", "cpu"),
                      ("memory", "memory"), ("pids", "pids"), ("pull", "pull")):
        if getattr(args, dest, None) is not None:
            box[key] = getattr(args, dest)
    if getattr(args, "read_write", None):
        box["read_only"] = False
    if getattr(args, "container_arg", None):
        box["args"] = list(args.container_arg)
    if getattr(args, "mount", None):
        box["mounts"] = [_mount_flag(m) for m in args.mount]
    if not box:
        return
    for key, inner in (("command", "command"), ("argv", "args"), ("env", "env"), ("workdir", "workdir")):
        if key in doc:
            box[inner] = doc.pop(key)
    doc["container"] = box


def _mount_flag(text: str) -> dict[str, Any]:
    source, _, rest = text.partition(":")
    target, _, mode = rest.partition(":")
    if not source or not target or mode not in ("", "rw", "ro"):
        raise UsageError(f"--mount wants SRC:DST or SRC:DST:rw, got {brief(text)}")
    return {"source": source, "target": target, "read_only": mode != "rw"}


# argparse dest -> job document key, for the flags that map one to one
_FLAG_KEYS = {
    "schedule": "schedule", "tz": "timezone", "command": "command", "argv": "argv",
    "workdir": "workdir", "team": "team", "description": "description", "paused": "paused",
    "priority": "priority", "pool": "pool", "overlap": "overlap", "catchup": "catchup",
    "delivery": "delivery",
    "job_timeout": "timeout", "history_limit": "history_limit",
    "dst_gap": "dst_gap", "dst_fold": "dst_fold",
    "max_active": "max_active", "queue_limit": "queue_limit", "concurrency_key": "concurrency_key",
    "concurrency_limit": "concurrency_limit", "catchup_window": "catchup_window",
    "catchup_max": "catchup_max", "catchup_order": "catchup_order",
    "starting_deadline": "starting_deadline", "jitter": "jitter", "history_max_age": "history_max_age",
    "on_blackout": "on_blackout", "window": "window",
}  # fmt: skip


def _flag_doc(args: argparse.Namespace) -> dict[str, Any]:
    """The job-document keys given as flags (absent flags are left out)."""
    doc = {key: getattr(args, dest) for dest, key in _FLAG_KEYS.items() if getattr(args, dest, None) is not None}
    if args.argv == []:
        raise UsageError("--argv needs at least one argument")
    http = {"url": args.http_url, "method": args.http_method}
    if any(http.values()):
        doc["http"] = {k: v for k, v in http.items() if v}
    for dest, key in (("env", "env"), ("label", "labels"), ("worker_label", "worker_labels"),
                      ("default_param", "params")):
        if getattr(args, dest):
            doc[key] = _pairs(getattr(args, dest), f"--{dest.replace('_', '-')}")
    if args.inherit_env:
        doc["inherit_env"] = list(args.inherit_env)
    if args.secret_env:
        doc["env_secret"] = _secret_pairs(args.secret_env)
    if args.limit:
        doc["limits"] = {k: _limit_value(k, v) for k, v in _pairs(args.limit, "--limit").items()}
    if args.max_attempts is not None:
        doc["retry"] = {"max_attempts": args.max_attempts}
    sla = {"within": args.sla_within, "by": args.sla_by, "timezone": args.sla_tz, "webhook": args.sla_webhook}
    if any(v is not None for v in sla.values()):
        doc["sla"] = {k: v for k, v in sla.items() if v is not None}
    calendar = {"skip": args.calendar_skip, "only": args.calendar_only, "on_skip": args.on_skip}
    if any(v is not None for v in calendar.values()):
        doc["calendar"] = {k: v for k, v in calendar.items() if v is not None}
    _container_doc(args, doc)
    return doc


def _pairs(items: Iterable[str], flag: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} wants KEY=VALUE, got {brief(item)}")
        pairs[key] = value
    return pairs


def _secret_pairs(items: Iterable[str]) -> dict[str, str]:
    """--secret-env K=V, or a bare K for the value of this process's variable K."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not key:
            raise UsageError(f"--secret-env wants KEY=VALUE or KEY, got {brief(item)}")
        if not sep:
            if key not in os.environ:
                raise UsageError(f"--secret-env {key}: no variable {key} in the environment")
            value = os.environ[key]
        pairs[key] = value
    return pairs


def _limit_value(name: str, text: str) -> float | int:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--limit {name}: not a number: {brief(text)}") from None
    return int(value) if value.is_integer() and name != "cpu_seconds" else value


def _merge(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``changes`` applied: a new handler replaces the old one; labels, env, retry
    and http settings are merged key by key."""
    merged = dict(doc)
    if "image" in changes.get("container", {}):
        for key in ("command", "argv", "http", "python", "workdir", "env", "inherit_env"):
            merged.pop(key, None)
    if "command" in changes or "argv" in changes or "url" in changes.get("http", {}):
        for key in ("command", "argv", "http", "python", "container"):
            merged.pop(key, None)
        if "http" in changes:
            merged.pop("workdir", None)
            merged.pop("env", None)
            merged.pop("inherit_env", None)
            merged.pop("env_secret", None)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged
