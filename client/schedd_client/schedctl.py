"""schedctl: the command line of a schedd cluster.

    schedctl [--cluster ADDRS] [-o table|json|yaml] [--timeout S] [--stale] COMMAND ...

    job create NAME --schedule S (--command CMD | --http-url URL | --argv ARG...) [flags]
    job create NAME --schedule S --image IMG [--command CMD | --container-arg A...] [container flags]
    job create -f FILE            create every job in a YAML/JSON file ("-" = stdin; one atomic batch)
    job apply -f FILE             create or update every job in the file (one atomic batch)
    job update NAME [flags]       change the given fields of a job
    job get NAME [--next N]       spec, state, version, next fire times, last run
    job next NAME [--count N]     coming fires in the job's zone and in UTC, DST effects marked
    job list [--team T] [--state active|paused]
    job pause|delete NAME
    job resume NAME [--catch-up]  missed-while-paused instants follow the catch-up policy
    job trigger NAME [--force]    --force: run even if the overlap policy would skip or queue it
    job backfill NAME --from T --to T [--dry-run]   past instants, on the low-priority lane
    run list [JOB] [--state S] [--limit N] [--oldest-first]
    run list JOB --all-instants [--since T] [--until T] [--limit N]   every instant and what became of
                                  it (the first N, default 50: a note on stderr says when more follow)
    quota set KEY N | quota delete KEY | quota list       KEY: team:<t> pool:<p> lane:backfill
    run get ID                    an execution with its attempts and output tails
    dag apply -f FILE             create or replace every DAG in a YAML/JSON file (see schedd_client.dags)
    dag run NAME                  start a run now
    dag show NAME [--run ID]      the graph with each task's state in a run (default: the newest)
    dag runs NAME [--limit N] | dag list | dag get NAME | dag delete NAME
    cluster status                leader, term and every node's Raft progress, the membership
    cluster add-node|remove-node|replace-node ...   membership changes (schedd_client.membership_commands)
    cluster snapshot save FILE    a consistent snapshot from the leader (restore: `schedd restore`)
    acl bootstrap | whoami        the first management token (once) | who your token is
    acl policy|role|token create|list|get|delete ...   (see schedd_client.acl_commands)
    audit list [--since 1h] [--principal P] [--target T] [--action A] | audit verify [FILE] | audit export

Global options may come before or after the command, with one exception: after ``job create`` and
``job update``, ``--timeout`` is the job's timeout, so put the RPC timeout before the command there.
``--argv`` takes every remaining argument, so it comes last. The cluster defaults to
``$SCHEDD_CLUSTER``, else 127.0.0.1:7070; the token (``--token``) to ``$SCHEDD_TOKEN``. File formats:
see ``schedd_client.specs``.

Files (``-f``) are read by the bounded loader of ``schedd_client.documents`` (``--max-file-size``
or ``$SCHEDCTL_MAX_FILE_BYTES``, default 64 MiB). Human output escapes terminal control
characters (``convert.printable``); ``-o json|yaml`` is exact.

Exit status: 0 on success, 1 when the command failed, 2 for a usage error, 141 when stdout's
reader went away (``| head``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from schedd_proto import PROTOCOL_VERSION
from schedd_proto import scheduler_pb2 as pb

from . import acl_commands, backup, dag_commands, membership_commands
from .channels import Security, SecurityError
from .client import Client
from .context import CLUSTER_ENV, ContextError, resolve
from ._cli import _count, _file_options, _global_options, _seconds, _table
from ._failover import tls_failure
from .convert import format_duration, format_time, parse_time, printable, relative_time, to_dict
from .documents import Limits, read_input
from .errors import AlreadyExists, Conflict, SchedError, TlsRequired, Unavailable, ValidationError, brief, clip
from .specs import INT32_MIN, job_specs_from_bytes, parse_duration, spec_from_dict, spec_to_dict

__all__ = ["main", "build_parser"]

PROG = "schedctl"
MAX_INSTANTS = 10_000                     # what one ListInstants call returns at most (the server's cap)


class UsageError(Exception):
    """The command line does not make sense (exit status 2)."""


class CommandError(Exception):
    """The command failed for a reason found locally, e.g. an unreadable file (exit status 1)."""


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE   # what a shell reports for a tool killed by SIGPIPE


def main(argv: Sequence[str] | None = None, *, now: Callable[[], float] | None = None) -> int:
    """Run schedctl with ``argv`` (default ``sys.argv[1:]``); returns the exit status.
    ``now`` returns the current epoch seconds, for the relative times in tables.

    Output that stdout cannot encode (``PYTHONIOENCODING=ascii``, ``LANG=C``) is written with
    backslash escapes instead of failing. When the reader of stdout goes away (``schedctl run list
    | head``), the command stops quietly with status 141, like a tool killed by SIGPIPE."""
    _escape_unencodable(sys.stdout)
    try:
        code = _run(argv, now)
        sys.stdout.flush()            # inside the try: a closed pipe fails here, not at exit
        return code
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _escape_unencodable(stream: Any) -> None:
    if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
        stream.reconfigure(errors="backslashreplace")


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit finds no closed pipe to fail
    on (it would print "Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):   # stdout is no file (e.g. captured in tests)
        pass


def _run(argv: Sequence[str] | None, now: Callable[[], float] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # argparse: --help (0) or a usage error (2)
        return exit.code if isinstance(exit.code, int) else 2
    security = Security()
    try:
        cluster, security = resolve(args.cluster, ca=args.ca, cert=args.cert, key=args.key,
                                    token=args.token, context=args.context)
        with Client(cluster, timeout=args.rpc_timeout, security=security) as client:
            _Command(args, client, now or time.time).run()
        return 0
    except (ContextError, SecurityError) as err:
        _error(str(err))
        return 2
    except UsageError as err:
        _error(f"{err} (see {PROG} {args.group} --help)")
        return 2
    except TlsRequired as err:     # says what to do already, at once
        _error(err.message)
        return 1
    except Unavailable as err:
        _error(err.message)
        print(f"{PROG}: {_unavailable_hint(err.message, security)}", file=sys.stderr)
        return 1
    except (SchedError, CommandError) as err:
        _error(str(err))
        return 1
    except KeyboardInterrupt:
        return 130


def _unavailable_hint(message: str, security: Security) -> str:
    """What to check when no node answered: the TLS side when a TLS error says so (a certificate,
    an alert, a connection a TLS server closed), the nodes named unreachable (stopped or cut
    off: a handshake that never completes is what they look like, not a TLS mismatch), or the
    addresses."""
    if tls_failure(message):
        if not security.secure:
            return ("the node may require TLS: pass --ca (and --cert/--key for client "
                    "certificates), set SCHEDD_CA/SCHEDD_CERT/SCHEDD_KEY or SCHEDD_CONTEXT.")
        if security.cert is None:
            return ("the node may require a client certificate (mTLS): pass --cert and --key, "
                    "or check that --ca is the CA of the cluster.")
        return ("the TLS handshake failed: check that --ca is the CA of the cluster and that "
                "--cert was issued by the CA the nodes trust ([tls] client_ca).")
    if "unreachable" in message:
        return ("the nodes named unreachable did not answer (stopped, cut off, or not running); "
                f"check them, or that --cluster or {CLUSTER_ENV} lists the cluster's gRPC "
                "addresses (host:port,host:port).")
    return (f"is the cluster running? Point --cluster or {CLUSTER_ENV} at its nodes' gRPC"
            " addresses (host:port,host:port).")


def _error(message: str) -> None:
    """One error line on stderr, escaped like tables and cut short: a server's message may echo
    a value of any size back."""
    print(printable(clip(f"{PROG}: error: {message}", 2000)), file=sys.stderr)


# ---------------------------------------------------------------- the command line

def _time_arg(text: str) -> Callable[[float], int]:
    """A time given as RFC 3339, ``now``, or a duration ago (``90d``, ``6h30m``, also written
    ``-90d`` or ``90d ago``); resolved later against the command's clock, so tests can inject it."""
    text = text.strip()
    if text == "now":
        return lambda now: int(now * 1000)
    relative = text.removesuffix("ago").strip().removeprefix("-")
    if relative and relative[0].isdigit() and relative[-1] in "smhd":
        try:
            seconds = parse_duration(relative)
        except ValidationError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if seconds > _MAX_AGO_SECONDS:      # before 1900: no schedule of ours has instants there
            raise argparse.ArgumentTypeError(f"too far back: at most {_MAX_AGO_SECONDS // 86400}d ago")
        return lambda now: int((now - seconds) * 1000)
    try:
        ms = parse_time(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"bad time {brief(text)}: {e}") from None
    return lambda now: ms


_MAX_AGO_SECONDS = 200 * 365 * 86400


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Control a schedd cluster: jobs, runs and the cluster itself.",
        epilog="Exit status: 0 success, 1 failure, 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=version_line(),
                        help="print the client's version and protocol version, and exit")
    _global_options(parser, top=True)
    groups = parser.add_subparsers(dest="group", required=True, metavar="{job,run,dag,quota,worker,cluster,acl,audit}")

    def command(
        subparsers: Any, name: str, run: Callable[[_Command], None], help: str, *, timeout: bool = True
    ) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=help)
        _global_options(sub, top=False, timeout=timeout)
        sub.set_defaults(run=run)
        return sub

    def group(name: str, help: str) -> Any:
        sub = groups.add_parser(name, help=help, description=help)
        _global_options(sub, top=False)
        return sub.add_subparsers(dest="command", required=True, metavar="COMMAND")

    jobs = group("job", "create, inspect and control jobs")
    create = command(
        jobs, "create", _Command.job_create, "create a job from flags, or every job in a file",
        timeout=False,
    )  # fmt: skip
    create.add_argument("name", nargs="?", metavar="NAME")
    _file_options(create, required=False)
    _spec_flags(create, creating=True)

    apply = command(jobs, "apply", _Command.job_apply, "create or update every job in a file")
    _file_options(apply, required=True)

    update = command(
        jobs, "update", _Command.job_update, "change the given fields of a job", timeout=False
    )
    update.add_argument("name", metavar="NAME")
    _spec_flags(update, creating=False)

    get = command(jobs, "get", _Command.job_get, "show a job: spec, state, next fire times")
    get.add_argument("name", metavar="NAME")
    get.add_argument("--next", type=_count(1, 100), default=5, metavar="N",
                     help="how many next fire times to show (default 5, max 100)")  # fmt: skip

    upcoming = command(jobs, "next", _Command.job_next,
                       "preview the coming fires in the job's zone and in UTC, marking DST effects")
    upcoming.add_argument("name", metavar="NAME")
    upcoming.add_argument("--count", type=_count(1, 100), default=10, metavar="N",
                          help="how many coming fires to show (default 10, max 100)")

    listing = command(jobs, "list", _Command.job_list, "list jobs")
    listing.add_argument("--team", default="")
    listing.add_argument("--state", default="", choices=("active", "paused"))

    for name, run, help in (
        ("pause", _Command.job_pause, "stop firing a job"),
        ("delete", _Command.job_delete, "delete a job (no confirmation)"),
    ):
        command(jobs, name, run, help).add_argument("name", metavar="NAME")
    resume = command(jobs, "resume", _Command.job_resume, "fire a paused job again")
    resume.add_argument("name", metavar="NAME")
    resume.add_argument("--catch-up", action="store_true",
                        help="run the instants missed while paused as the job's catch-up policy says "
                             "(default: they are recorded 'paused' and not run)")
    trigger = command(jobs, "trigger", _Command.job_trigger, "fire a job now, outside its schedule")
    trigger.add_argument("name", metavar="NAME")
    trigger.add_argument("--force", action="store_true",
                         help="run even if the job's overlap policy would skip or queue it")
    backfill = command(jobs, "backfill", _Command.job_backfill,
                       "run a job for the past instants of its schedule in a time range (low-priority lane)")
    backfill.add_argument("name", metavar="NAME")
    backfill.add_argument("--from", dest="start", type=_time_arg, required=True, metavar="T",
                          help="RFC 3339 time (2026-09-01T00:00:00Z), or a duration ago: 90d, 6h")
    backfill.add_argument("--to", dest="end", type=_time_arg, required=True, metavar="T",
                          help="RFC 3339 time, a duration ago (1h) or now")
    backfill.add_argument("--dry-run", action="store_true", help="count the instants, commit nothing")

    runs = group("run", "inspect executions")
    run_list = command(runs, "list", _Command.run_list, "list executions, newest first")
    run_list.add_argument("job", nargs="?", default="", metavar="JOB")
    run_list.add_argument("--state", default="", help="e.g. RUNNING, FAILED, SUCCEEDED")
    run_list.add_argument("--limit", type=_count(0), default=50, metavar="N",
                          help="show at most N (default 50, 0 = all)")  # fmt: skip
    run_list.add_argument("--oldest-first", action="store_true")
    run_list.add_argument("--all-instants", action="store_true",
                          help="every scheduled instant of JOB with its disposition (ran, skipped-overlap, "
                               "skipped-deadline, coalesced, paused, ...), oldest first")
    run_list.add_argument("--since", type=_time_arg, metavar="T", help="with --all-instants (default 24h ago)")
    run_list.add_argument("--until", type=_time_arg, metavar="T", help="with --all-instants (default now)")
    run_get = command(runs, "get", _Command.run_get, "show an execution with its attempts")
    run_get.add_argument("id", metavar="ID")
    run_cancel = command(runs, "cancel", _Command.run_cancel,
                         "cancel an execution (a running attempt's process group is killed)")
    run_cancel.add_argument("id", metavar="ID")

    workers = group("worker", "the workers connected to the leader")
    command(workers, "list", _Command.worker_list, "connected workers: slots, pool, labels, running attempts")

    quotas = group("quota", "caps on running attempts per team, pool or the backfill lane")
    quota_set = command(quotas, "set", _Command.quota_set, "set a quota: at most N attempts running at once")
    # dest quota_key: `key` is the --key (TLS private key) option's
    quota_set.add_argument("quota_key", metavar="KEY", help="team:<name>, pool:<name> or lane:backfill")
    quota_set.add_argument("limit", type=_count(1), metavar="N")
    command(quotas, "delete", _Command.quota_delete, "remove a quota").add_argument("quota_key", metavar="KEY")
    command(quotas, "list", _Command.quota_list, "quotas with their limits and current use")

    cluster = group("cluster", "cluster membership and Raft progress")
    status = command(cluster, "status", _Command.cluster_status, "leader, term and every node's progress")
    status.add_argument("--digest", action="store_true",
                        help="each node's state digest at its applied index (equal on converged replicas; "
                             "costs a pass over the state on every node)")
    membership_commands.add_commands(cluster, command)   # add-node, remove-node, replace-node
    backup.add_commands(cluster, command)          # cluster snapshot save FILE
    dag_commands.add_commands(groups, command)     # dag apply|run|show|runs|list|get|delete
    acl_commands.add_commands(groups, command, _time_arg)   # acl ... and audit ...
    return parser


def _spec_flags(parser: argparse.ArgumentParser, *, creating: bool) -> None:
    """Flags that set job fields; each maps onto a key of the job document (see ``_flag_doc``)."""
    spec = parser.add_argument_group("job fields")
    spec.add_argument("--schedule", metavar="S",
                      help='cron, "@every 30s", "at <RFC 3339>", or "" for on demand')  # fmt: skip
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
}  # fmt: skip


def _flag_doc(args: argparse.Namespace) -> dict[str, Any]:
    """The job-document keys given as flags (absent flags are left out)."""
    doc = {key: getattr(args, dest) for dest, key in _FLAG_KEYS.items() if getattr(args, dest, None) is not None}
    if args.argv == []:
        raise UsageError("--argv needs at least one argument")
    http = {"url": args.http_url, "method": args.http_method}
    if any(http.values()):
        doc["http"] = {k: v for k, v in http.items() if v}
    for dest, key in (("env", "env"), ("label", "labels"), ("worker_label", "worker_labels")):
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


# ---------------------------------------------------------------- the commands


@dataclass
class _Command:
    args: argparse.Namespace
    client: Client
    clock: Callable[[], float]

    def run(self) -> None:
        self.args.run(self)

    # -- output

    def emit(self, data: Any, table: Callable[[], str]) -> None:
        """Print ``data`` as one JSON/YAML document, or ``table()`` for -o table. This is the one
        place human output is written: it goes through ``printable``, so a description, label or
        job output cannot send the terminal escape sequences; JSON and YAML stay exact."""
        if self.args.output in ("json", "yaml"):
            self.print_data(data)
        else:
            print(printable(table()))

    def print_data(self, data: Any) -> None:
        """``data`` as JSON or YAML (``-o``), exact: where stdout cannot encode a character (an
        ASCII terminal), the format's own escapes carry it (``\u00e9``), never a lossy one."""
        for ascii_only in (False, True):
            if self.args.output == "json":
                text = json.dumps(data, indent=2, ensure_ascii=ascii_only) + "\n"
            else:
                text = yaml.safe_dump(data, sort_keys=False, allow_unicode=not ascii_only)
            try:
                text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
                break
            except UnicodeEncodeError:
                continue
        sys.stdout.write(text)

    def file_limits(self) -> Limits:
        """The bounds on an input file: ``--max-file-size``, else the environment's."""
        size = getattr(self.args, "max_file_size", None)
        return Limits(max_bytes=size) if size else Limits.from_env()

    def ago(self, ms: int) -> str:
        """``in 4m12s`` / ``3s ago``."""
        return relative_time(ms, int(self.clock() * 1000))

    def when(self, ms: int) -> str:
        """``2026-11-29T02:00:00Z (in 4m12s)``; ``-`` for none."""
        return f"{format_time(ms)} ({self.ago(ms)})" if ms else "-"

    # -- jobs

    def job_create(self) -> None:
        args, flags = self.args, _flag_doc(self.args)
        if args.file:
            if args.name or flags:
                raise UsageError("job create -f FILE takes no NAME or job flags")
            self._create_from_file(args.file)
            return
        if not args.name:
            raise UsageError("job create needs NAME (or -f FILE)")
        if args.schedule is None:
            raise UsageError('job create needs --schedule ("" for an on-demand job)')
        if not {"command", "argv", "http", "container"} & flags.keys():
            raise UsageError("job create needs a handler: --command, --argv, --http-url or --image")
        job = self._create(spec_from_dict({"name": args.name, **flags}))
        self.emit(to_dict(job), lambda: _created_line(job))

    def _create(self, spec: pb.JobSpec) -> pb.Job:
        try:
            return self.client.put_job(spec, create_only=True).job
        except AlreadyExists:
            raise CommandError(
                f"job {brief(spec.name)} already exists; change it with `{PROG} job update {clip(spec.name, 80)}"
                f" ...` or `{PROG} job apply -f FILE`"
            ) from None

    def _create_from_file(self, path: str) -> None:
        """One batch, create only: every job of the file is created, or none is."""
        located = _read_specs(path, self.file_limits())
        self._put_batch(located, create_only=True)
        self.emit({"created": len(located), "updated": 0},
                  lambda: "\n".join(f"created job {spec.name} (version 1)" for _, spec in located))

    def job_apply(self) -> None:
        located = _read_specs(self.args.file, self.file_limits())
        result = self._put_batch(located, create_only=False)
        self.emit(
            to_dict(result),
            lambda: f"applied {len(located)} job{'s' if len(located) != 1 else ''}:"
            f" {result.created} created, {result.updated} updated",
        )

    def _put_batch(self, located: list[tuple[str, pb.JobSpec]], *, create_only: bool) -> pb.PutJobsResponse:
        """PutJobs of the whole file, all or nothing; a refused job's position in the call is
        turned into its place in the file."""
        try:
            return self.client.put_jobs([spec for _, spec in located], create_only=create_only)
        except SchedError as err:
            if err.position is not None and 0 < err.position <= len(located):
                raise CommandError(f"{located[err.position - 1][0]}: {err.message}; nothing was committed") from None
            raise

    def job_update(self) -> None:
        changes = _flag_doc(self.args)
        if not changes:
            raise UsageError("job update needs at least one field flag to change")
        job = self.client.get_job(self.args.name, upcoming=1)
        spec = spec_from_dict(_merge(spec_to_dict(job.spec), changes))
        try:
            updated = self.client.put_job(spec, expected_version=job.version).job
        except Conflict:
            raise CommandError(
                f"job {job.spec.name!r} changed while being updated (it is past version"
                f" {job.version}); run the command again"
            ) from None
        self.emit(to_dict(updated), lambda: f"updated job {updated.spec.name} (version {updated.version})")

    def job_get(self) -> None:
        job = self.client.get_job(self.args.name, upcoming=self.args.next, stale_ok=self.args.stale)
        self.emit(to_dict(job), lambda: self._job_details(job))

    def _job_details(self, job: pb.Job) -> str:
        spec = job.spec
        next_runs = [
            "  ".join(filter(None, (_local_time(spec, fire), format_time(ms), self.ago(ms))))
            for ms, fire in _upcoming(job)
        ]
        last_run = "-"
        if job.last_execution_id:
            last_run = f"{job.last_execution_id}  {job.last_state or '-'}  scheduled {self.when(job.last_scheduled_ms)}"
        created = self.when(job.created_ms) + (f" by {job.created_by}" if job.created_by else "")
        return _fields(
            ("Name", spec.name),
            ("Team", spec.team),
            ("Description", spec.description),
            ("Schedule", spec.schedule or "(on demand)"),
            ("Time zone", spec.timezone or "UTC"),
            ("Handler", _describe_handler(spec)),
            ("State", _job_state(job)),
            ("Version", job.version),
            ("Labels", ", ".join(f"{k}={v}" for k, v in sorted(spec.labels.items()))),
            ("Retry", _describe_retry(spec.retry)),
            ("Timeout", format_duration(spec.timeout_seconds) if spec.timeout_seconds else "none"),
            ("Overlap", spec.overlap),
            ("Delivery", spec.delivery),
            ("Catch-up", spec.catchup),
            ("Priority", spec.priority or ""),
            ("Pool", spec.pool),
            ("History limit", spec.history_limit or ""),
            ("DST policy", _describe_dst(job)),
            ("SLA", _describe_sla(spec)),
            ("Created", created),
            ("Updated", self.when(job.updated_ms)),
            ("Executions", job.executions_total),
            ("Last run", last_run),
            ("Next run", self.when(job.next_fire_ms)),
            ("Next runs", "\n".join(next_runs)),
        )

    def job_next(self) -> None:
        job = self.client.get_job(self.args.name, upcoming=self.args.count, stale_ok=self.args.stale)
        spec = job.spec
        zone = spec.timezone or "UTC"
        rows: list[dict[str, Any]] = [
            {"time_ms": ms, "local": fire.local, "utc": format_time(ms), "dst": fire.dst_note}
            for ms, fire in _upcoming(job)
        ]
        policy = _describe_dst(job)
        header = f"{spec.name}: {spec.schedule or '(on demand)'} in {zone}" + (f" (DST: {policy})" if policy else "")
        self.emit(
            {"name": spec.name, "schedule": spec.schedule, "timezone": zone,
             "dst_gap": job.effective_dst_gap, "dst_fold": job.effective_dst_fold, "fires": rows},
            lambda: header + "\n" + _table(
                ("#", f"LOCAL ({zone})", "UTC", "IN", "DST"),
                [(i, r["local"], r["utc"], self.ago(r["time_ms"]) or "-", r["dst"] or "-")
                 for i, r in enumerate(rows, 1)],
                empty="No coming fires (paused, on demand, or a one-off already past).",
            ),
        )

    def job_list(self) -> None:
        args = self.args
        jobs = list(self.client.list_jobs(team=args.team, state=args.state, stale_ok=args.stale))
        self.emit(
            [to_dict(job) for job in jobs],
            lambda: _table(
                ("NAME", "TEAM", "SCHEDULE", "TZ", "STATE", "NEXT RUN", "LAST RUN", "LAST STATE"),
                [
                    (
                        job.spec.name,
                        job.spec.team,
                        job.spec.schedule or "(on demand)",
                        job.spec.timezone or "UTC",
                        _job_state(job),
                        self.when(job.next_fire_ms),
                        self.when(job.last_scheduled_ms),
                        job.last_state or "-",
                    )
                    for job in jobs
                ],
                empty="No jobs found.",
            ),
        )

    def job_pause(self) -> None:
        job = self.client.pause_job(self.args.name)
        self.emit(to_dict(job), lambda: f"paused job {job.spec.name} (version {job.version})")

    def job_resume(self) -> None:
        job = self.client.resume_job(self.args.name, catch_up=self.args.catch_up)
        self.emit(
            to_dict(job),
            lambda: f"resumed job {job.spec.name} (version {job.version}, next run {self.when(job.next_fire_ms)})",
        )

    def job_trigger(self) -> None:
        run = self.client.trigger_job(self.args.name, force=self.args.force)
        note = f": {run.reason}" if run.reason else ""
        self.emit(to_dict(run), lambda: f"triggered job {run.job}: execution {run.id} ({run.state}{note})")

    def job_backfill(self) -> None:
        args = self.args
        start, end = args.start(self.clock()), args.end(self.clock())
        r = self.client.backfill_job(args.name, start, end, dry_run=args.dry_run)
        span = f"{format_time(r.first_ms)} .. {format_time(r.last_ms)}" if r.instants else "none"
        self.emit(
            to_dict(r),
            lambda: (f"{r.instants} instants of {args.name} in range ({span})" if args.dry_run else
                     f"backfill of {args.name}: {r.created} executions recorded on the backfill lane, "
                     f"{r.duplicates} instants already recorded ({span})"),
        )

    # -- quotas

    def quota_set(self) -> None:
        q = self.client.set_quota(self.args.quota_key, self.args.limit)
        self.emit(to_dict(q), lambda: f"quota {q.key}: at most {q.limit} running ({q.running} now)")

    def quota_delete(self) -> None:
        q = self.client.set_quota(self.args.quota_key, 0)
        self.emit(to_dict(q), lambda: f"quota {q.key} removed" + (f" (default {q.limit} applies)" if q.limit else ""))

    def quota_list(self) -> None:
        quotas = self.client.list_quotas()
        self.emit(
            [to_dict(q) for q in quotas],
            lambda: _table(("QUOTA", "LIMIT", "RUNNING"),
                           [(q.key, q.limit or "-", q.running) for q in quotas], empty="No quotas."),
        )

    def job_delete(self) -> None:
        self.client.delete_job(self.args.name)
        self.emit({"name": self.args.name, "deleted": True}, lambda: f"deleted job {self.args.name}")

    # -- runs

    def run_list(self) -> None:
        args = self.args
        if args.all_instants:
            self._instants()
            return
        if args.since is not None or args.until is not None:
            raise UsageError("--since and --until go with --all-instants")
        runs = list(
            self.client.list_executions(
                args.job,
                state=args.state,
                limit=args.limit or None,
                oldest_first=args.oldest_first,
                stale_ok=args.stale,
            )
        )
        sla = any(_sla_missed(run) for run in runs)      # an SLA column only when one missed
        self.emit(
            [to_dict(run) for run in runs],
            lambda: _table(
                ("ID", "JOB", "SCHEDULED", "STATE", "TRIGGER", "RECORDED", "TERM") + (("SLA",) if sla else ()),
                [
                    (run.id, run.job, self.when(run.scheduled_ms), run.state, run.trigger,
                     self.when(run.created_ms), run.term)  # fmt: skip
                    + (("! missed" if _sla_missed(run) else "-",) if sla else ())
                    for run in runs
                ],
                empty="No executions found.",
            ),
        )

    def _instants(self) -> None:
        args = self.args
        if not args.job:
            raise UsageError("run list --all-instants needs JOB")
        now = self.clock()
        wanted = args.limit or MAX_INSTANTS
        rows = self.client.list_instants(
            args.job, start_ms=args.since(now) if args.since else 0, end_ms=args.until(now) if args.until else 0,
            limit=min(wanted + 1, MAX_INSTANTS), stale_ok=args.stale)
        if len(rows) > wanted:      # one more than shown was asked for: say that the list goes on
            rows = rows[:wanted]
            print(f"{PROG}: showing the first {wanted} instants of the window (oldest first); more follow: "
                  f"--since {format_time(rows[-1].instant_ms + 1)} for the next ones, or --limit N "
                  f"(0: up to {MAX_INSTANTS:,})", file=sys.stderr)
        self.emit(
            [to_dict(r) for r in rows],
            lambda: _table(
                ("INSTANT", "DISPOSITION", "STATE", "DETAIL"),
                [(format_time(r.instant_ms), r.disposition,
                  r.execution.state if r.HasField("execution") else "-", _shorten(r.detail, 70))
                 for r in rows],
                empty="No instants in the window."),
        )

    def run_get(self) -> None:
        run = self.client.get_execution(self.args.id, stale_ok=self.args.stale)
        self.emit(to_dict(run), lambda: self._run_details(run))

    def _run_details(self, run: pb.Execution) -> str:
        recorded = self.when(run.created_ms)
        if run.term or run.log_index:
            recorded += f", term {run.term}, log index {run.log_index}"
        parts = [
            _fields(
                ("ID", run.id),
                ("Job", run.job),
                ("State", run.state),
                ("Reason", run.reason),
                ("Trigger", run.trigger),
                ("Scheduled", self.when(run.scheduled_ms)),
                ("Recorded", recorded),
                ("Updated", self.when(run.updated_ms)),
                ("Retry at", self.when(run.retry_at_ms) if run.retry_at_ms else ""),
                ("Cancel", "requested" if run.cancel_requested else ""),
            ),
            "",
            "Attempts:",
            _table(
                ("#", "STATE", "WORKER", "TOKEN", "STARTED", "ENDED", "EXIT/HTTP", "ERROR"),
                [
                    (a.number, a.state or "-", a.worker or "-", a.fencing_token or "-",
                     format_time(a.started_ms) or "-", format_time(a.ended_ms) or "-",
                     _outcome(a), _shorten(a.error, 60) or "-")  # fmt: skip
                    for a in run.attempts
                ],
                empty="  (none yet)",
            ),
        ]
        if run.events:
            parts += ["", "Events:", _table(
                ("TIME", "KIND", "MESSAGE"),
                [(format_time(e.time_ms) or "-", ("! " if e.kind == "sla_missed" else "") + e.kind, e.message)
                 for e in run.events],
                empty="")]
        for attempt in run.attempts:
            if attempt.output_tail:
                parts += ["", f"Output of attempt {attempt.number} (tail):", _indent(attempt.output_tail)]
            if len(attempt.error) > 60:
                parts += ["", f"Error of attempt {attempt.number}:", _indent(attempt.error)]
            if attempt.rejected:
                parts += ["", f"Late result of attempt {attempt.number} (fenced):", _indent(attempt.rejected)]
        return "\n".join(parts)

    def run_cancel(self) -> None:
        run = self.client.cancel_execution(self.args.id)
        self.emit(to_dict(run), lambda: (
            f"cancel requested for {run.id}: its worker kills the running attempt"
            if run.cancel_requested and run.state == "RUNNING" else f"{run.id}: {run.state}"))

    # -- workers

    def worker_list(self) -> None:
        workers = list(self.client.list_workers().workers)
        self.emit(
            [to_dict(w) for w in workers],
            lambda: _table(
                ("NAME", "SLOTS", "RUNNING", "POOL", "LABELS", "STATE", "CONNECTED", "LAST HEARTBEAT"),
                [
                    (w.name, w.slots, len(w.running), w.pool or "-",
                     ",".join(f"{k}={v}" for k, v in sorted(w.labels.items())) or "-",
                     "draining" if w.draining else "ready", self.when(w.connected_ms),
                     self.when(w.last_heartbeat_ms))  # fmt: skip
                    for w in workers
                ],
                empty="No workers connected.",
            ) + ("".join(f"\n  {w.name}: {', '.join(w.running)}" for w in workers if w.running)),
        )

    # -- cluster

    def cluster_status(self) -> None:
        status = self.client.cluster_status(stale_ok=self.args.stale, with_digest=self.args.digest)
        self.emit(status_dict(status), lambda: _cluster_table(status, digest=self.args.digest))


LEADER_FIELDS = ("leader_id", "leader_grpc_address", "commit_index", "feature_level")


def status_dict(status: pb.ClusterStatus) -> dict[str, Any]:
    """``cluster status -o json|yaml``: what only a leader knows is ``null`` while there is none,
    never a zero that reads as a value (commit index 0, feature level 0)."""
    out = to_dict(status)
    if not status.leader_id:
        out.update(dict.fromkeys(LEADER_FIELDS))
    return out


# ---------------------------------------------------------------- files


def _read_specs(path: str, limits: Limits) -> list[tuple[str, pb.JobSpec]]:
    """Every job in a YAML/JSON file, in document order, with where it was read ("jobs.yaml:
    document 3, item 2"), all checked before anything is sent (``DocumentError`` else)."""
    return job_specs_from_bytes(*read_input(path, limits), limits)


# ---------------------------------------------------------------- text


def _fields(*pairs: tuple[str, Any]) -> str:
    """``Label:  value`` lines, aligned; empty values left out, multi-line values indented."""
    width = max(len(label) for label, _ in pairs) + 2
    shown = [(label, str(value)) for label, value in pairs if value not in ("", None)]
    lines = []
    for label, value in shown:
        first, *rest = value.split("\n")
        lines.append(f"{label + ':':<{width}}{first}")
        lines += [" " * width + line for line in rest]
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip("\n").split("\n"))


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _created_line(job: pb.Job) -> str:
    return f"created job {job.spec.name} (version {job.version})"


def _sla_missed(run: pb.Execution) -> bool:
    return any(e.kind == "sla_missed" for e in run.events)


def _describe_dst(job: pb.Job) -> str:
    """The DST policy in force and where it comes from ("" for a schedule without one)."""
    gap, fold = job.effective_dst_gap, job.effective_dst_fold
    if not gap:
        return ""
    if job.spec.dst_gap or job.spec.dst_fold:
        why = "named on the job"
    elif (gap, fold) == ("skip", "both"):
        why = "default: the hour repeats, so it follows real time"
    else:
        why = "default: fixed local times"
    return f"gap {gap}, fold {fold} ({why})"


def _describe_sla(spec: pb.JobSpec) -> str:
    if not spec.HasField("sla"):
        return ""
    sla = spec.sla
    parts = [f"within {format_duration(sla.within_seconds)}"] if sla.within_seconds else []
    if sla.by:
        parts.append(f"by {sla.by} {sla.timezone or spec.timezone or 'UTC'}")
    text = " and ".join(parts) or "-"
    return text + (f", webhook {sla.webhook}" if sla.webhook else "")


def _job_state(job: pb.Job) -> str:
    return "paused" if job.paused else "active"


def _upcoming(job: pb.Job) -> list[tuple[int, pb.UpcomingFire]]:
    """Each upcoming fire with how the server renders it in the job's zone (`UpcomingFire`); an
    older server sends none: then the UTC time stands for the local one and there is no DST note."""
    fires = list(job.upcoming_fires)
    if len(fires) != len(job.upcoming_ms):
        fires = [pb.UpcomingFire(local=format_time(ms) or "") for ms in job.upcoming_ms]
    return list(zip(job.upcoming_ms, fires))


def _local_time(spec: pb.JobSpec, fire: pb.UpcomingFire) -> str:
    """The time in the job's zone, ``2026-11-29T03:00:00+01:00 CET``; ``""`` for UTC jobs."""
    if spec.timezone in ("", "UTC") or not fire.zone_abbreviation:
        return ""
    return f"{fire.local} {fire.zone_abbreviation}"


def _outcome(attempt: pb.Attempt) -> str:
    if attempt.http_status:
        return f"HTTP {attempt.http_status}"
    return str(attempt.exit_code) if attempt.ended_ms else "-"


def _describe_handler(spec: pb.JobSpec) -> str:
    kind = spec.handler.WhichOneof("kind")
    if kind == "shell":
        shell = spec.handler.shell
        text = f"exec {json.dumps(list(shell.argv))}" if shell.argv else f"sh -c {json.dumps(shell.command)}"
        if shell.workdir:
            text += f" in {shell.workdir}"
        if shell.env:
            text += " with " + " ".join(f"{k}={v}" for k, v in sorted(shell.env.items()))
        if shell.inherit_env:
            text += "; inherits " + ", ".join(shell.inherit_env)
        if spec.env_secret:
            text += "; secret " + " ".join(f"{k}={v}" for k, v in sorted(spec.env_secret.items()))
        return text
    if kind == "http":
        return f"{spec.handler.http.method or 'POST'} {spec.handler.http.url}"
    if kind == "python":
        python = spec.handler.python
        return f"python {python.name}" + (f" {python.args_json}" if python.args_json else "")
    if kind == "container":
        return _describe_container(spec)
    return "(none)"


def _describe_container(spec: pb.JobSpec) -> str:
    """One line of what the worker will run: image, command, then the isolation asked for."""
    c = spec.handler.container
    text = f"container {c.image}"
    if c.command:
        text += f" sh -c {json.dumps(c.command)}"
    elif c.args:
        text += f" exec {json.dumps(list(c.args))}"
    parts = [f"network {c.network or 'none'}",
             "read-only root" if not c.HasField("read_only") or c.read_only else "writable root"]
    parts += [f"{label} {value}" for label, value in (("cpus", f"{c.cpu:g}" if c.cpu else ""),
                                                     ("memory", c.memory), ("pids", c.pids or ""),
                                                     ("user", c.user), ("workdir", c.workdir),
                                                     ("pull", c.pull)) if value]
    parts += [f"mount {m.source}:{m.target}" + ("" if not m.HasField("read_only") or m.read_only else ":rw")
              for m in c.mounts]
    if c.env:
        parts.append("with " + " ".join(f"{k}={v}" for k, v in sorted(c.env.items())))
    if spec.env_secret:
        parts.append("secret " + " ".join(f"{k}={v}" for k, v in sorted(spec.env_secret.items())))
    return text + "; " + ", ".join(parts)


def _describe_retry(policy: pb.RetryPolicy) -> str:
    if policy.max_attempts <= 1:
        return "no retry"
    text = f"{policy.max_attempts} attempts"
    if policy.initial_backoff_seconds or policy.max_backoff_seconds:
        text += (
            f", backoff {format_duration(policy.initial_backoff_seconds)}"
            f" to {format_duration(policy.max_backoff_seconds)}"
        )
    if policy.multiplier:
        text += f" x{policy.multiplier:g}"
    return text


UNREACHABLE = "unreachable"


def _cluster_table(status: pb.ClusterStatus, *, digest: bool = False) -> str:
    """The cluster as the answering node saw it. A node that did not answer shows "unreachable"
    and why, never zeros; with no leader the header says so instead of a commit index."""
    if status.leader_id:
        leader = status.leader_id + (f" ({status.leader_grpc_address})" if status.leader_grpc_address else "")
        header = f"Leader: {leader}   term {status.term}   commit {status.commit_index}"
    else:
        header = f"Leader: none (no leader elected: writes wait for one)   term {status.term}"
    header += f"   jobs {status.jobs}   executions {status.executions}"
    if status.feature_level:
        header += f"   feature level {status.feature_level}"
    if status.answered_by:
        header += f"   (answered by {status.answered_by})"
    with_errors = any(node.error for node in status.nodes)
    headers = ("ID", "ROLE", "VERSION", "LEVEL", "TERM", "COMMIT", "APPLIED", "LAG", "GRPC", "RAFT") + (
        ("DIGEST",) if digest else ()) + (("ERROR",) if with_errors else ())
    rows = [_node_row(node, digest=digest, with_errors=with_errors) for node in status.nodes]
    out = header + "\n" + _table(headers, rows, empty="(no nodes reported)")
    if status.feature_level and status.supported_feature_level > status.feature_level:
        out += (f"\nEvery node supports feature level {status.supported_feature_level}: "
                f"the leader raises the cluster's level to it within seconds.")
    out += membership_commands.membership_lines(status)
    return out + "".join(f"\nWARNING: {w}" for w in status.warnings)


def _node_row(node: pb.NodeStatus, *, digest: bool, with_errors: bool) -> tuple[Any, ...]:
    """One node's row: LEVEL is the highest feature level its build supports."""
    error = (_shorten(node.error, 60),) if with_errors else ()
    if node.role == UNREACHABLE:
        return (node.id, node.role, *("-",) * 6, node.grpc_address, node.raft_address) + (
            ("-",) if digest else ()) + error
    return (node.id, node.role, node.version or "-", node.max_feature_level or "-", node.term,
            node.commit_index, node.applied_index, node.lag, node.grpc_address, node.raft_address) + (
        (f"{node.state_digest[:12]}@{node.digest_index}" if node.state_digest else "-",) if digest else ()
    ) + error


def version_line() -> str:
    """What ``schedctl --version`` prints: this client's version and the API protocol it speaks."""
    try:
        version = importlib.metadata.version("schedd-client")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"{PROG} {version} (protocol {PROTOCOL_VERSION})"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
