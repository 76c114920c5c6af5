"""What `schedctl run list` and `run get` show of an execution beyond its record: the state as
a person reads it (a run claimed ahead of its due time has not started), how long its attempt
ran, where, and how it ended ("killed by SIGTERM" rather than -15).

Separate from the commands because both the list and the detail view word these the same way,
and the wording is tested on its own.
"""

from __future__ import annotations

import signal

from schedd_proto import scheduler_pb2 as pb

from .convert import format_duration, relative_time


def shown_state(run: pb.Execution, now_ms: int) -> str:
    """The state for a table: RUNNING only once the run is due. A claim is committed (the
    record says RUNNING) up to the lookahead, or a herd's burst window, before the due time;
    until then the worker only holds it, so it reads "SCHEDULED (claimed, due in 3s)"."""
    if run.state == "RUNNING" and run.due_ms > now_ms:
        return f"SCHEDULED (claimed, due {relative_time(run.due_ms, now_ms)})"
    return run.state


def exit_text(attempt: pb.Attempt) -> str:
    """How an attempt ended: its exit status, its HTTP status, the signal that killed it in
    words (a shell attempt killed by signal N reports -N), or "-" while it runs."""
    if attempt.http_status:
        return f"HTTP {attempt.http_status}"
    if not attempt.ended_ms:
        return "-"
    code = attempt.exit_code
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return str(code)


def duration_text(run: pb.Execution, now_ms: int) -> str:
    """How long its last attempt ran (so far, while it runs); "-" before one started."""
    if not run.attempts:
        return "-"
    a = run.attempts[-1]
    start = max(a.started_ms, run.due_ms) if not a.ended_ms else a.started_ms
    end = a.ended_ms or now_ms
    if not start or end < start:
        return "-"
    return format_duration((end - start) / 1000)


def worker_text(run: pb.Execution) -> str:
    return run.attempts[-1].worker or "-" if run.attempts else "-"


def last_exit_text(run: pb.Execution) -> str:
    return exit_text(run.attempts[-1]) if run.attempts else "-"
