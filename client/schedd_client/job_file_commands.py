"""``schedctl job apply|diff -f FILE`` and ``job delete -f FILE | -l SELECTOR``: a file of jobs
(or what ``job get -o yaml`` printed) made the cluster's state, shown before it is, or removed.

Separate from ``job_commands`` (one job at a time): these work on many jobs, in batches, with
progress on stderr, a one-line summary, and for deletes a confirmation. What changes is the
server's answer (``Client.diff_jobs``); the batching and the report are ``job_sync``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import grpc

from schedd_proto import scheduler_pb2 as pb

from ._cli import PROG, CommandError, ExitStatus, UsageError, _count, _file_options
from .convert import printable
from .documents import Limits, read_input
from .errors import NotFound, SchedError
from .invocation import Invocation
from .job_sync import DEFAULT_BATCH_JOBS, ApplyReport, FieldChange
from .specs import job_specs_from_bytes

__all__ = ["add_file_options", "job_apply", "job_diff", "job_delete", "EXIT_DIFFERENT"]

#: ``job diff --exit-code`` when something would change (as ``git diff --exit-code``).
EXIT_DIFFERENT = 3
#: At most this many jobs are listed one per line; above it only the summary (and the changes
#: of a diff) are printed.
LIST_LIMIT = 50


def add_file_options(apply: argparse.ArgumentParser, diff: argparse.ArgumentParser) -> None:
    for parser in (apply, diff):
        _file_options(parser, required=True)
        parser.add_argument("--batch-size", type=_count(1, 100_000), default=DEFAULT_BATCH_JOBS, metavar="N",
                            help=f"jobs per call (default {DEFAULT_BATCH_JOBS}; halved when a node refuses "
                                 "a call as too large)")
    apply.add_argument("--dry-run", action="store_true",
                       help="show what would change, field by field, and commit nothing")
    diff.add_argument("--exit-code", action="store_true",
                      help=f"exit {EXIT_DIFFERENT} when something would change, 0 when nothing would")


def add_delete_options(delete: argparse.ArgumentParser) -> None:
    delete.add_argument("name", nargs="?", metavar="NAME")
    _file_options(delete, required=False)
    delete.add_argument("-l", "--selector", metavar="SELECTOR",
                        help="key=value[,key=value]: the jobs whose labels match (the key team matches "
                             "the job's team)")
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation (-f, -l)")


def _read(cmd: Invocation, path: str) -> list[tuple[str, pb.JobSpec]]:
    limits: Limits = cmd.file_limits()
    return job_specs_from_bytes(*read_input(path, limits), limits)


def _progress(total: int, batch: int) -> Callable[[str, int, int], None] | None:
    """Progress lines on stderr, only for work of more than one call."""
    if total <= batch:
        return None

    def show(stage: str, done: int, of: int) -> None:
        verb = "checked" if stage == "check" else "wrote"
        print(f"{PROG}: {verb} {done}/{of} jobs", file=sys.stderr, flush=True)
    return show


def _run_apply(cmd: Invocation, *, dry_run: bool) -> tuple[ApplyReport, list[tuple[str, pb.JobSpec]]]:
    located = _read(cmd, cmd.args.file)
    specs = [spec for _, spec in located]
    try:
        report = cmd.client.apply_jobs(specs, dry_run=dry_run, batch_jobs=cmd.args.batch_size,
                                       progress=_progress(len(specs), cmd.args.batch_size))
    except SchedError as err:
        if err.position is not None and 0 < err.position <= len(located):
            raise CommandError(f"{located[err.position - 1][0]}: {err.message}") from None
        if err.code == grpc.StatusCode.UNIMPLEMENTED:      # only a diff gets here: apply writes instead
            raise CommandError(f"this cluster cannot show what would change ({err.message}); upgrade its "
                               "nodes for job diff and --dry-run") from None
        raise
    return report, located


def job_apply(cmd: Invocation) -> None:
    report, _ = _run_apply(cmd, dry_run=cmd.args.dry_run)
    if cmd.args.dry_run:
        cmd.emit(report.to_dict(), lambda: _diff_text(report))
        return
    cmd.warn(report.warnings)
    cmd.emit(report.to_dict(), lambda: _applied_text(report))


def job_diff(cmd: Invocation) -> None:
    report, _ = _run_apply(cmd, dry_run=True)
    cmd.emit(report.to_dict(), lambda: _diff_text(report))
    if cmd.args.exit_code and (report.created or report.updated):
        raise ExitStatus(EXIT_DIFFERENT)


def _applied_text(report: ApplyReport) -> str:
    lines = []
    if report.legacy is None and len(report.created) + len(report.updated) + len(report.unchanged) <= LIST_LIMIT:
        lines += [f"job {name} created" for name in report.created]
        lines += [f"job {name} updated (was version {report.versions.get(name, '?')})" for name in report.updated]
        lines += [f"job {name} unchanged" for name in report.unchanged]
    return "\n".join([*lines, report.summary()])


def _diff_text(report: ApplyReport) -> str:
    """``+ job NAME`` (created) and ``~ job NAME`` (updated) with one line per field that
    changes; values as JSON, so a string, a number and a missing field read differently."""
    lines = []
    for mark, names in (("+", report.created), ("~", report.updated)):
        for name in names:
            version = f" (version {report.versions[name]})" if name in report.versions else ""
            lines.append(f"{mark} job {name}{version}")
            lines += [f"    {_change_line(c)}" for c in report.changes.get(name, [])]
    if report.unchanged and len(report.unchanged) <= LIST_LIMIT:
        lines += [f"= job {name}" for name in report.unchanged]
    return "\n".join([*lines, report.summary()])


def _change_line(change: FieldChange) -> str:
    if change.before is None:
        return f"{change.path}: {_value(change.after)}"
    if change.after is None:
        return f"{change.path}: {_value(change.before)} -> (removed)"
    return f"{change.path}: {_value(change.before)} -> {_value(change.after)}"


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------- delete many


def job_delete(cmd: Invocation) -> None:
    args = cmd.args
    chosen = [what for what, given in (("NAME", args.name), ("-f", args.file), ("-l", args.selector)) if given]
    if len(chosen) != 1:
        raise UsageError("job delete takes one of NAME, -f FILE or -l SELECTOR")
    if args.name:
        cmd.client.delete_job(args.name)
        cmd.emit({"name": args.name, "deleted": True}, lambda: f"deleted job {args.name}")
        return
    names = _named_in_file(cmd) if args.file else _selected(cmd, _selector(args.selector))
    if not names:
        cmd.emit({"deleted": [], "missing": []}, lambda: "no jobs to delete")
        return
    if not args.yes:
        _confirm(names, stdin_is_file=args.file == "-")
    deleted, missing = [], []
    for i, name in enumerate(names, 1):
        try:
            cmd.client.delete_job(name)  # paced by the SDK if the rate limit refuses it
            deleted.append(name)
        except NotFound:
            missing.append(name)
        if len(names) > LIST_LIMIT and i % 100 == 0:
            print(f"{PROG}: deleted {i}/{len(names)} jobs", file=sys.stderr, flush=True)
    cmd.emit({"deleted": deleted, "missing": missing}, lambda: "\n".join(
        ([f"deleted job {n}" for n in deleted] if len(names) <= LIST_LIMIT else [])
        + [f"deleted {len(deleted)} job{'s' if len(deleted) != 1 else ''}"
           + (f", {len(missing)} not found: {', '.join(missing[:10])}" if missing else "")]))


def _named_in_file(cmd: Invocation) -> list[str]:
    return [spec.name for _, spec in _read(cmd, cmd.args.file)]


def _selector(text: str) -> dict[str, str]:
    terms: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq or not key.strip():
            raise UsageError(f"-l {text!r}: use key=value[,key=value], e.g. -l team=data,tier=gold")
        terms[key.strip()] = value.strip()
    return terms


def _selected(cmd: Invocation, terms: dict[str, str]) -> list[str]:
    """The jobs every term matches: ``team`` by the job's team, other keys by its labels."""
    labels = {k: v for k, v in terms.items() if k != "team"}
    jobs = cmd.client.list_jobs(team=terms.get("team", ""), full=bool(labels))
    return [job.spec.name for job in jobs if all(job.spec.labels.get(k) == v for k, v in labels.items())]


def _confirm(names: list[str], *, stdin_is_file: bool) -> None:
    """Ask on stderr, read the answer on stdin; anything but y/yes deletes nothing."""
    if stdin_is_file:
        raise UsageError("job delete -f - reads the jobs from stdin, so it cannot ask: add --yes")
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    print(printable(f"{PROG}: delete {len(names)} job{'s' if len(names) != 1 else ''}: {shown}? [y/N] "),
          end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if answer.strip().lower() not in ("y", "yes"):
        if not answer:
            print(file=sys.stderr)
        raise CommandError("not confirmed; nothing was deleted (--yes skips the question)")
