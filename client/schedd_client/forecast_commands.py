"""``schedctl forecast`` (the herd forecast) and ``schedctl run explain`` / ``job explain`` (why an
instant ran or did not): how they are asked for and how their answers read.

The server computes both (schedd.core.forecast, schedd.core.explain); this module only words
them, so the client needs no schedule rules of its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import Any

from schedd_proto import scheduler_pb2 as pb

from ._cli import _count, _fields, _table, time_arg
from ._plans import LATEST
from .convert import format_time, to_dict
from .invocation import Invocation

Command = Callable[..., argparse.ArgumentParser]


def add_commands(groups: Any, jobs: Any, runs: Any, command: Command) -> None:
    fc = command(groups, "forecast", forecast,
                 "how many instants fall due per second and minute, the peaks and the slots serving them")
    fc.add_argument("--from", dest="start", type=time_arg(ahead=True), metavar="T",
                    help="RFC 3339 time, now (the default), or a duration from now (1h) or ago (1h ago)")
    fc.add_argument("--to", dest="end", type=time_arg(ahead=True), metavar="T",
                    help="as --from (default: --from plus 24h; at most 7 days after it)")
    fc.add_argument("--by", default="", choices=("team", "pool"), help="one forecast per team or per pool")
    fc.add_argument("--top", type=_count(1, 100), default=5, metavar="N", help="peaks per group (default 5)")
    why = command(runs, "explain", run_explain, "why a run's instant ran (or did not): intent, claims, attempts, SLA")
    why.add_argument("id", metavar="RUN", help="an execution id, JOB@<RFC 3339 UTC>, or JOB@latest")
    job_why = command(jobs, "explain", job_explain,
                      "why an instant of a job did not run (or did): paused, skipped, waiting, not due, ...")
    job_why.add_argument("name", metavar="NAME")
    job_why.add_argument("--at", dest="at", type=time_arg(ahead=True), required=True, metavar="T",
                         help="the instant: RFC 3339 time, now, or a duration from now (10m) or ago (1h ago)")


def forecast(cmd: Invocation) -> None:
    args, now = cmd.args, cmd.clock()
    start = args.start(now) if args.start else int(now * 1000)
    end = args.end(now) if args.end else 0
    r = cmd.client.forecast(start_ms=start, end_ms=end, by=args.by, top=args.top, stale_ok=args.stale)
    if r.note:
        print(f"note: {r.note}", file=sys.stderr)
    cmd.emit(to_dict(r), lambda: forecast_text(r))


def forecast_text(r: pb.ForecastResponse) -> str:
    head = (f"{r.jobs:,} jobs, {r.instants:,} runs due from {format_time(r.from_ms)} to {format_time(r.to_ms)}"
            + (f", by {r.by}" if r.by else ""))
    parts = [head + _left(r)]
    for g in r.groups:
        label = {"team": f"team {g.key}", "pool": f"pool {g.key or '(none: any worker)'}"}.get(r.by, "all jobs")
        slots = "unknown" if g.slots < 0 else f"{g.slots:,}"
        quota = f", quota {g.quota_key} {g.quota:,}" if g.quota else ""
        parts.append(f"\n{label}: {g.jobs:,} jobs, {g.instants:,} runs due; worker slots {slots}{quota}{_left(g)}")
        parts.append(_peaks("busiest seconds", g.peak_seconds, g.slots))
        parts.append(_peaks("busiest minutes", g.peak_minutes, -1))
    return "\n".join(parts)


def left_text(skipped: int, moved: int, deferred: int) -> str:
    """How many instants due in the window calendars and blackouts leave out or move ("" for none):
    why a peak is lower than the schedules alone make it."""
    words = [f"{skipped:,} skipped" if skipped else "",
             f"{moved:,} moved to the next allowed instant (run with it)" if moved else "",
             f"{deferred:,} deferred to a blackout's end (counted then)" if deferred else ""]
    said = ", ".join(w for w in words if w)
    return f"calendars and blackouts: {said}" if said else ""


def _left(r: pb.ForecastResponse | pb.ForecastGroup) -> str:
    said = left_text(r.skipped, r.moved, r.deferred)
    return f"\n  {said}" if said else ""


def _peaks(title: str, peaks: Iterable[pb.ForecastPeak], slots: int) -> str:
    rows = []
    for p in peaks:
        over = f"{p.due / slots:.1f}x the slots" if p.over and slots > 0 else ""
        makers = "; ".join(f"{c.jobs:,} x {c.schedule} ({c.timezone}: {', '.join(c.examples)}"
                           f"{', ...' if c.jobs > len(c.examples) else ''})" for c in p.contributors[:3])
        rows.append((format_time(p.at_ms), f"{p.due:,}", over, makers))
    return f"  {title}:\n" + _indent(_table(("AT", "DUE", "OVER", "MADE BY"), rows, empty="none"), "    ")


def _indent(text: str, pad: str) -> str:
    return "\n".join(pad + line for line in text.split("\n"))


def run_explain(cmd: Invocation) -> None:
    run = cmd.args.id
    if run.endswith(LATEST):                  # the job's newest run, as `run get` reads it
        run = cmd.client.get_execution(run, stale_ok=cmd.args.stale).id
    x = cmd.client.explain_run(run, stale_ok=cmd.args.stale)
    cmd.emit(to_dict(x), lambda: explanation_text(x))


def job_explain(cmd: Invocation) -> None:
    x = cmd.client.explain_instant(cmd.args.name, cmd.args.at(cmd.clock()), stale_ok=cmd.args.stale)
    cmd.emit(to_dict(x), lambda: explanation_text(x))


def explanation_text(x: pb.Explanation) -> str:
    lines = [_fields(("Instant", x.id), ("Disposition", x.disposition), ("Why", x.summary),
                     ("Read at", f"log index {x.index}"))]
    rows = [(format_time(f.at_ms) if f.at_ms else "", f.kind, f.text) for f in x.findings]
    lines.append(_table(("WHEN", "WHAT", "DETAIL"), rows, empty="(nothing more recorded)"))
    return "\n\n".join(lines)
