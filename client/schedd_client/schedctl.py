"""schedctl: the command line of a schedd cluster.

    schedctl [--cluster ADDRS] [-o table|json|yaml] [--timeout S] [--stale] COMMAND ...

    job create NAME --schedule S (--command CMD | --http-url URL | --argv ARG...) [flags]
    job create NAME --schedule S --image IMG [--command CMD | --container-arg A...] [container flags]
    job create -f FILE            create every job in a YAML/JSON file ("-" = stdin; one atomic batch)
    job apply -f FILE [--dry-run] create or update every job in the file; unchanged jobs keep their
                                  version; batches of --batch-size (each atomic), all checked first
    job diff -f FILE [--exit-code]  what apply would change, field by field
    job update NAME [flags]       change the given fields of a job
    job get NAME [--next N]       spec, state, version, next fire times, last run
    job next NAME [--count N]     coming fires in the job's zone and in UTC, DST effects marked
    job list [--team T] [--state active|paused] [--pool P]
    job pause|delete NAME
    job delete -f FILE | -l KEY=V [--yes]   the jobs of a file, or matching labels (team=T: a team)
    job resume NAME [--catch-up]  missed-while-paused instants follow the catch-up policy
    job trigger NAME [--force]    --force: run even if the overlap policy would skip or queue it
    job backfill NAME --from T --to T [--dry-run]   past instants, on the low-priority lane
    run list [JOB] [--state S] [--limit N] [--oldest-first]
    run list JOB --all-instants [--since T] [--until T] [--limit N]   every instant and what became of
                                  it (the first N, default 50: a note on stderr says when more follow)
    quota set KEY N | quota delete KEY | quota list       KEY: team:<t> pool:<p> lane:backfill
    calendar create NAME [--date D] [--range A..B] [--weekdays sat,sun] [--country DE [--subdiv BY]]
                  [--years 2026..2028] [--ics FILE] [--team T]   named calendars (calendar_commands)
    calendar apply -f FILE | get NAME | list | delete NAME
    blackout create NAME --start T --end T [--team T] [--label K=V] [--reason R] | list | delete NAME
    run get ID                    an execution with its attempts and output tails
    run explain RUN               why RUN's instant ran: intent (log index, term), claims, tokens, attempts, SLA
    job explain NAME --at T       why an instant did not run: paused, skipped, waiting for a slot, not due, ...
    forecast [--from T] [--to T] [--by team|pool] [--top N]   runs due per second/minute, peaks vs slots
    dag apply -f FILE             create or replace every DAG in a YAML/JSON file (see schedd_client.dags)
    dag run NAME                  start a run now
    dag show NAME [--run ID]      the graph with each task's state in a run (default: the newest)
    dag runs NAME [--limit N] | dag list | dag get NAME | dag delete NAME
    cluster status                leader, term and every node's Raft progress, the membership
    cluster leaders               the recent leader changes: which node led which term, from when to when
    cluster add-node|remove-node|replace-node ...   membership changes (schedd_client.membership_commands)
    shard list | shard move SHARD --from N1 --to N4   the shard groups | a replica moved to another node
    cluster snapshot save FILE    a consistent snapshot from the leader (restore: `schedd restore`)
    acl bootstrap | whoami        the first management token (once) | who your token is
    acl policy|role|token create|list|get|delete ...   (see schedd_client.acl_commands)
    audit list [--since 1h] [--principal P] [--target T] [--action A] | audit verify [FILE] | audit export
    completion bash|zsh|fish      a shell completion script: source <(schedctl completion bash)
    dashboard [--no-open|--url]   a one-time login link to the web dashboard (opened on a desktop)

Global options may come before or after the command, with one exception: after ``job create`` and
``job update``, ``--timeout`` is the job's timeout, so put the RPC timeout before the command there.
``--argv`` takes every remaining argument, so it comes last. The cluster defaults to
``$SCHEDD_CLUSTER``, else 127.0.0.1:7070; the token (``--token``) to ``$SCHEDD_TOKEN``. File formats:
see ``schedd_client.specs``.

Files (``-f``) are read by the bounded loader of ``schedd_client.documents`` (``--max-file-size``
or ``$SCHEDCTL_MAX_FILE_BYTES``, default 64 MiB). Human output escapes terminal control
characters (``convert.printable``); ``-o json|yaml`` is exact. On a terminal, tables colour run
states and errors say ``error:`` in red; never in a pipe or a file, nor with ``NO_COLOR`` set.

Exit status: 0 on success, 1 when the command failed, 2 for a usage error, 141 when stdout's
reader went away (``| head``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from schedd_proto import PROTOCOL_VERSION

from . import (acl_commands, backup, calendar_commands, cluster_commands, completion, dag_commands,
               dashboard_commands, forecast_commands, job_commands, job_file_commands, membership_commands,
               quota_commands, run_commands, run_flow_commands, run_logs)
from ._cli import PROG, CommandError, ExitStatus, UsageError, _count, _file_options, _global_options, _time_arg
from ._failover import tls_failure
from .channels import Security, SecurityError
from .client import Client
from .context import CLUSTER_ENV, ContextError, resolve
from .convert import printable
from .output import colour_wanted
from .errors import SchedError, TlsRequired, Unavailable, clip
from .invocation import Invocation
from .run_flow_commands import RunOutcome
from .waiting import EXIT_HELP
from .watch_commands import WATCH_HELP
from .states import RunState
from .job_flags import add_spec_flags

__all__ = ["main", "build_parser"]

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
    if args.group == "completion":            # needs no cluster: the parser is all it reads
        print(completion.script(args.shell, completion.tree_of(build_parser())), end="")
        return 0
    security = Security()
    try:
        cluster, security = resolve(args.cluster, ca=args.ca, cert=args.cert, key=args.key,
                                    token=args.token, context=args.context)
        if getattr(args, "wait_timeout", None) and not args.wait:    # --timeout without --wait: the RPCs'
            args.rpc_timeout = args.wait_timeout
        with Client(cluster, timeout=args.rpc_timeout, security=security) as client:
            Invocation(args, client, now or time.time).run()
        return 0
    except RunOutcome as outcome:       # a waited-for run that did not succeed: its exit status
        return outcome.code
    except (ContextError, SecurityError) as err:
        _error(str(err))
        return 2
    except UsageError as err:
        _error(f"{err} (see {PROG} {args.group} --help)")
        return 2
    except ExitStatus as status:
        return status.code
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
    text = printable(clip(f"{PROG}: error: {message}", 2000))
    if colour_wanted(sys.stderr):
        text = text.replace("error:", "\x1b[31merror:\x1b[0m", 1)
    print(text, file=sys.stderr)



def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Control a schedd cluster: jobs, runs and the cluster itself.",
        epilog=EXIT_HELP,
    )
    parser.add_argument("--version", action="version", version=version_line(),
                        help="print the client's version and protocol version, and exit")
    _global_options(parser, top=True)
    groups = parser.add_subparsers(dest="group", required=True,
                                   metavar="{job,run,dag,calendar,blackout,quota,worker,cluster,acl,audit,dashboard,completion}")

    def command(
        subparsers: Any, name: str, run: Callable[[Invocation], None], help: str, *, timeout: bool = True
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
        jobs, "create", job_commands.job_create, "create a job from flags, or every job in a file",
        timeout=False,
    )  # fmt: skip
    create.add_argument("name", nargs="?", metavar="NAME")
    _file_options(create, required=False)
    add_spec_flags(create, creating=True)

    apply = command(jobs, "apply", job_file_commands.job_apply,
                    "create or update every job in a file; unchanged jobs are left as they are")
    diff = command(jobs, "diff", job_file_commands.job_diff,
                   "what `job apply -f FILE` would change, field by field (commits nothing)")
    job_file_commands.add_file_options(apply, diff)

    update = command(
        jobs, "update", job_commands.job_update, "change the given fields of a job", timeout=False
    )
    update.add_argument("name", metavar="NAME")
    add_spec_flags(update, creating=False)

    get = command(jobs, "get", job_commands.job_get, "show a job: spec, state, next fire times")
    get.add_argument("name", metavar="NAME")
    get.add_argument("--next", type=_count(1, 100), default=5, metavar="N",
                     help="how many next fire times to show (default 5, max 100)")  # fmt: skip

    upcoming = command(jobs, "next", job_commands.job_next,
                       "preview the coming fires in the job's zone and in UTC, marking DST effects")
    upcoming.add_argument("name", metavar="NAME")
    upcoming.add_argument("--count", type=_count(1, 100), default=10, metavar="N",
                          help="how many coming fires to show (default 10, max 100)")

    listing = command(jobs, "list", job_commands.job_list, "list jobs")
    listing.add_argument("--team", default="")
    listing.add_argument("--state", default="", type=str.lower, choices=("active", "paused"),
                         help="active or paused (any case)")
    listing.add_argument("--name-contains", default="", metavar="TEXT",
                         help="only jobs whose name contains TEXT (any case)")
    listing.add_argument("--pool", default="", metavar="POOL", help="only jobs of this worker pool")
    listing.add_argument("--watch", action="store_true", help=WATCH_HELP)
    listing.add_argument("--all", action="store_true",
                         help="also the rows DAGs own (DAG:TASK; `dag show DAG` shows them under their DAG)")

    command(jobs, "pause", job_commands.job_pause, "stop firing a job").add_argument("name", metavar="NAME")
    job_file_commands.add_delete_options(command(
        jobs, "delete", job_file_commands.job_delete,
        "delete a job (NAME, no confirmation), or the jobs of a file (-f) or a selector (-l), asked first"))
    resume = command(jobs, "resume", job_commands.job_resume, "fire a paused job again")
    resume.add_argument("name", metavar="NAME")
    resume.add_argument("--catch-up", action="store_true",
                        help="run the instants missed while paused as the job's catch-up policy says "
                             "(default: they are recorded 'paused' and not run)")
    trigger = command(jobs, "trigger", run_flow_commands.job_trigger, "fire a job now, outside its schedule",
                      timeout=False)
    trigger.add_argument("name", metavar="NAME")
    trigger.add_argument("--force", action="store_true",
                         help="run even if the job's overlap policy would skip or queue it")
    run_flow_commands.add_flow_flags(trigger)
    backfill = command(jobs, "backfill", job_commands.job_backfill,
                       "run a job for the past instants of its schedule in a time range (low-priority lane)")
    backfill.add_argument("name", metavar="NAME")
    backfill.add_argument("--from", dest="start", type=_time_arg, required=True, metavar="T",
                          help="RFC 3339 time (2026-09-01T00:00:00Z), or a duration ago: 90d, 6h")
    backfill.add_argument("--to", dest="end", type=_time_arg, required=True, metavar="T",
                          help="RFC 3339 time, a duration ago (1h) or now")
    backfill.add_argument("--dry-run", action="store_true", help="count the instants, commit nothing")

    runs = group("run", "inspect executions")
    run_list = command(runs, "list", run_commands.run_list, "list executions, newest first")
    run_list.add_argument("job", nargs="?", default="", metavar="JOB")
    run_list.add_argument("--state", default="", type=_run_state, metavar="STATE",
                          help="e.g. running, failed, succeeded (any case)")
    run_list.add_argument("--limit", type=_count(0), default=50, metavar="N",
                          help="show at most N (default 50, 0 = all)")  # fmt: skip
    run_list.add_argument("--oldest-first", action="store_true")
    run_list.add_argument("--all-instants", action="store_true",
                          help="every scheduled instant of JOB with its disposition (ran, skipped-overlap, "
                               "skipped-deadline, coalesced, paused, ...), oldest first")
    run_list.add_argument("--since", type=_time_arg, metavar="T", help="with --all-instants (default 24h ago)")
    run_list.add_argument("--until", type=_time_arg, metavar="T", help="with --all-instants (default now)")
    run_list.add_argument("--watch", action="store_true", help=WATCH_HELP + " (the newest --limit runs)")
    run_get = command(runs, "get", run_commands.run_get, "show an execution with its attempts")
    run_get.add_argument("id", metavar="ID", help="an execution id, or JOB@latest (the job's newest run)")
    run_get.add_argument("--latest", action="store_true", help="ID is a job: show its newest run")
    run_flow_commands.add_run_commands(runs, command)         # run retry
    run_cancel = command(runs, "cancel", run_commands.run_cancel,
                         "cancel an execution (a running attempt's process group is killed)")
    run_cancel.add_argument("id", metavar="ID")
    run_logs.add_commands(runs, command)           # run logs RUN [-f] [--stdout|--stderr] [--tail N]
    forecast_commands.add_commands(groups, jobs, runs, command)   # forecast, run explain, job explain

    workers = group("worker", "the workers connected to the leader")
    worker_listing = command(workers, "list", cluster_commands.worker_list,
                             "connected workers: slots, pool, labels, running attempts")
    worker_listing.add_argument("--watch", action="store_true", help=WATCH_HELP)

    quotas = group("quota", "caps on running attempts per team, pool or the backfill lane")
    quota_set = command(quotas, "set", quota_commands.quota_set, "set a quota: at most N attempts running at once")
    # dest quota_key: `key` is the --key (TLS private key) option's
    quota_set.add_argument("quota_key", metavar="KEY", help="team:<name>, pool:<name> or lane:backfill")
    quota_set.add_argument("limit", type=_count(1), metavar="N")
    command(quotas, "delete", quota_commands.quota_delete, "remove a quota").add_argument("quota_key", metavar="KEY")
    command(quotas, "list", quota_commands.quota_list, "quotas with their limits and current use")

    cluster = group("cluster", "cluster membership and Raft progress")
    status = command(cluster, "status", cluster_commands.cluster_status, "leader, term and every node's progress")
    status.add_argument("--digest", action="store_true",
                        help="each node's state digest at its applied index (equal on converged replicas; "
                             "costs a pass over the state on every node)")
    command(cluster, "leaders", cluster_commands.leader_list, "the recent leader changes (each node's own record)")
    membership_commands.add_commands(cluster, command)   # add-node, remove-node, replace-node
    shards = group("shard", "the cluster's shard groups (one unless it was made with shards > 1)")
    command(shards, "list", cluster_commands.shard_list,
            "every shard: leader, replicas, term, jobs and lag (as the node reached sees them)")
    move = command(shards, "move", cluster_commands.shard_move,
                   "move a shard's replica to another node (add it there, wait until it caught up, then "
                   "remove the old one); asking again resumes a move cut short")
    move.add_argument("shard", type=int, metavar="SHARD")
    move.add_argument("--from", dest="from_node", required=True, metavar="NODE", help="the node giving its replica up")
    move.add_argument("--to", dest="to_node", required=True, metavar="NODE",
                      help="the node taking it (a node of the cluster: a new one joins with `schedd serve --join`)")
    backup.add_commands(cluster, command)          # cluster snapshot save FILE
    dag_commands.add_commands(groups, command)     # dag apply|run|show|runs|list|get|delete
    calendar_commands.add_commands(groups, command)   # calendar ... and blackout ...
    acl_commands.add_commands(groups, command, _time_arg)   # acl ... and audit ...
    dash = command(groups, "dashboard", dashboard_commands.dashboard,
                   "print (and on a desktop open) a one-time login link to the web dashboard "
                   "(as --token, if given; the node reached mints it)")
    dash.add_argument("--url", nargs="?", const=True, default=False,
                      help="print only the dashboard's address (no login link is made)")
    dash.add_argument("--no-open", action="store_true", help="only print the link")
    shells = groups.add_parser("completion", help="print a shell completion script (bash, zsh or fish)",
                               description="print a shell completion script: source <(schedctl completion bash)")
    shells.add_argument("shell", choices=completion.SHELLS)
    return parser


def _run_state(text: str) -> str:
    """``--state failed`` in any case; an unknown state is a usage error (exit 2) naming them."""
    if not text:
        return ""                  # the default: any state
    try:
        return RunState.parse(text).value
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def version_line() -> str:
    """What ``schedctl --version`` prints: this client's version and the API protocol it speaks."""
    try:
        version = importlib.metadata.version("schedd-client")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"{PROG} {version} (protocol {PROTOCOL_VERSION})"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
