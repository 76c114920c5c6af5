"""``schedctl run ...``: listing executions (or every instant of a job), one execution in
detail, cancelling one.

Separate from the job commands: an execution's table and detail view (attempts, events, output
tails) are their own rendering, and ``--all-instants`` owns the paging note on stderr.
"""

from __future__ import annotations

import sys

from schedd_proto import scheduler_pb2 as pb

from ._cli import PROG, UsageError, _fields, _indent, _shorten, _table
from .convert import format_time, to_dict
from .invocation import Invocation
from .run_columns import duration_text, exit_text, last_exit_text, shown_state, worker_text
from .watch_commands import watch_listing


MAX_INSTANTS = 10_000                     # what one ListInstants call returns at most (the server's cap)
DEFAULT_WINDOW_MS = 86_400_000            # --all-instants without --since: the day before --until


def run_list(cmd: Invocation) -> None:
    args = cmd.args
    if args.all_instants:
        _instants(cmd)
        return
    if args.since is not None or args.until is not None:
        raise UsageError("--since and --until go with --all-instants")
    if args.watch:
        watch_listing(cmd, cmd.client.watch_executions(args.job, state=args.state, limit=args.limit or 100),
                      "execution",
                      lambda runs: runs_table(cmd, sorted(runs, key=lambda r: (r.scheduled_ms, r.job), reverse=True)),
                      lambda run: f"{run.id} {run.state}")
        return
    runs = list(
        cmd.client.list_executions(
            args.job,
            state=args.state,
            limit=args.limit or None,
            oldest_first=args.oldest_first,
            stale_ok=args.stale,
        )
    )
    cmd.emit([to_dict(run) for run in runs], lambda: runs_table(cmd, runs))


def runs_table(cmd: Invocation, runs: list[pb.Execution]) -> str:
    """`run list`'s table (also what `run list --watch` redraws); RECORDED and TERM with -o wide."""
    sla = any(_sla_missed(run) for run in runs)      # an SLA column only when one missed
    wide = cmd.output.wide
    now_ms = int(cmd.clock() * 1000)
    return _table(
            ("ID", "JOB", "SCHEDULED", "STATE", "TRIGGER", "DURATION", "WORKER", "EXIT")
            + (("RECORDED", "TERM") if wide else ()) + (("SLA",) if sla else ()),
            [
                (run.id, run.job, cmd.when(run.scheduled_ms), shown_state(run, now_ms), run.trigger,
                 duration_text(run, now_ms), worker_text(run), last_exit_text(run))
                + ((cmd.when(run.created_ms), run.term) if wide else ())
                + (("! missed" if _sla_missed(run) else "-",) if sla else ())
                for run in runs
            ],
            empty="No executions found.",
        )


def _instants(cmd: Invocation) -> None:
    args = cmd.args
    if not args.job:
        raise UsageError("run list --all-instants needs JOB")
    now = cmd.clock()
    wanted = args.limit or MAX_INSTANTS
    start_ms, end_ms = instants_window(args.since(now) if args.since else None,
                                       args.until(now) if args.until else None, int(now * 1000))
    if args.since is None or args.until is None:     # a window the user did not give: say which
        print(window_note(start_ms, end_ms, args.since is None, args.until is None), file=sys.stderr)
    rows = cmd.client.list_instants(
        args.job, start_ms=start_ms, end_ms=end_ms, limit=min(wanted + 1, MAX_INSTANTS), stale_ok=args.stale)
    if len(rows) > wanted:      # one more than shown was asked for: say that the list goes on
        rows = rows[:wanted]
        print(f"{PROG}: showing the first {wanted} instants of the window (oldest first); more follow: "
              f"--since {format_time(rows[-1].instant_ms + 1)} for the next ones, or --limit N "
              f"(0: up to {MAX_INSTANTS:,})", file=sys.stderr)
    cmd.emit(
        [to_dict(r) for r in rows],
        lambda: _table(
            ("INSTANT", "DISPOSITION", "STATE", "DETAIL"),
            [(format_time(r.instant_ms), r.disposition,
              r.execution.state if r.HasField("execution") else "-", _shorten(r.detail, 70))
             for r in rows],
            empty="No instants in the window."),
    )


def instants_window(since_ms: int | None, until_ms: int | None, now_ms: int) -> tuple[int, int]:
    """The window `--all-instants` reads: until now, and from DEFAULT_WINDOW_MS before its end,
    unless given (sent explicitly, so that the note names the window the server used)."""
    end = until_ms if until_ms is not None else now_ms
    return (since_ms if since_ms is not None else end - DEFAULT_WINDOW_MS), end


def window_note(start_ms: int, end_ms: int, since_defaulted: bool, until_defaulted: bool) -> str:
    """The one stderr line naming an `--all-instants` window that was (partly) defaulted."""
    said = [*(["--since: 24h before the end"] if since_defaulted else []),
            *(["--until: now"] if until_defaulted else [])]
    return (f"{PROG}: instants from {format_time(start_ms)} to {format_time(end_ms)} "
            f"(default {', '.join(said)}; give --since/--until for another window)")


def run_get(cmd: Invocation) -> None:
    ident = f"{cmd.args.id}@latest" if cmd.args.latest else cmd.args.id
    run = cmd.client.get_execution(ident, stale_ok=cmd.args.stale)
    cmd.emit(to_dict(run), lambda: _run_details(cmd, run))


def _run_details(cmd: Invocation, run: pb.Execution) -> str:
    recorded = cmd.when(run.created_ms)
    if run.term or run.log_index:
        recorded += f", term {run.term}, log index {run.log_index}"
    parts = [
        _fields(
            ("ID", run.id),
            ("Job", run.job),
            ("State", shown_state(run, int(cmd.clock() * 1000))),
            ("Reason", run.reason),
            ("Trigger", run.trigger),
            ("Scheduled", cmd.when(run.scheduled_ms)),
            ("Recorded", recorded),
            ("Updated", cmd.when(run.updated_ms)),
            ("Retry at", cmd.when(run.retry_at_ms) if run.retry_at_ms else ""),
            ("Cancel", "requested" if run.cancel_requested else ""),
            ("Params", ", ".join(f"{k}={v}" for k, v in sorted(run.params.items()))),
        ),
        "",
        "Attempts:",
        _table(
            ("#", "STATE", "WORKER", "TOKEN", "STARTED", "ENDED", "EXIT/HTTP", "ERROR"),
            [
                (a.number, a.state or "-", a.worker or "-", a.fencing_token or "-",
                 format_time(a.started_ms) or "-", format_time(a.ended_ms) or "-",
                 exit_text(a), _shorten(a.error, 60) or "-")  # fmt: skip
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


def run_cancel(cmd: Invocation) -> None:
    run = cmd.client.cancel_execution(cmd.args.id)
    cmd.emit(to_dict(run), lambda: (
        f"cancel requested for {run.id}: its worker kills the running attempt"
        if run.cancel_requested and run.state == "RUNNING" else f"{run.id}: {run.state}"))


def _sla_missed(run: pb.Execution) -> bool:
    return any(e.kind == "sla_missed" for e in run.events)

