"""``schedctl calendar ...`` and ``schedctl blackout ...``: named calendars and blackout windows.

    calendar create NAME [--date D[=NAME]]... [--range A..B[=NAME]]... [--weekdays sat,sun]
                    [--country DE [--subdiv BY]] [--years 2026..2028] [--ics FILE] [--team T]
    calendar apply -f FILE | calendar get NAME | calendar list [--team T] | calendar delete NAME
    blackout create NAME --start T --end T [--team T] [--label K=V]... [--reason TEXT]
    blackout list [--team T] | blackout delete NAME

Times of a blackout: RFC 3339, ``now``, or ``+2h`` (from now). A change to a calendar takes effect
for instants not yet recorded; the command says so when jobs use the calendar.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

from schedd_proto import calendars_pb2 as kpb

from ._cli import UsageError, _file_options, _global_options, _table
from .calendars import calendar_spec, calendar_specs_from_bytes, calendar_to_dict
from .convert import format_time, to_dict
from .documents import read_input
from .errors import ValidationError
from .invocation import Invocation
from .specs import parse_duration

CHANGE_NOTE = ("a change takes effect for instants not yet recorded; instants already in the ledger keep "
               "their disposition")


def add_commands(groups: Any, command: Any) -> None:
    """The ``calendar`` and ``blackout`` groups; ``groups``/``command`` are schedctl's helpers."""
    cals = _group(groups, "calendar", "named calendars: dates a job's instants skip or move on")
    create = command(cals, "create", calendar_create, "create or replace a calendar")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--date", action="append", metavar="D[=NAME]", help="a date YYYY-MM-DD (repeatable)")
    create.add_argument("--range", action="append", metavar="A..B[=NAME]", help="an inclusive range of dates")
    create.add_argument("--weekdays", action="append", metavar="DAYS", help="weekdays, e.g. sat,sun")
    create.add_argument("--country", default="", metavar="CC", help="public holidays of a country (DE, US...)")
    create.add_argument("--subdiv", default="", metavar="S", help="... of a region of it (BY, CA...)")
    create.add_argument("--years", default="", metavar="Y[..Y]",
                        help="years to expand holidays and iCalendar recurrences for (default: this and next)")
    create.add_argument("--ics", metavar="FILE", help="an iCalendar file: its events (RRULE expanded)")
    create.add_argument("--team", default="", metavar="T", help="owner (default: cluster-wide, needs operator)")
    create.add_argument("--description", default="", metavar="D")
    apply = command(cals, "apply", calendar_apply, "create or replace every calendar in a YAML/JSON file")
    _file_options(apply, required=True)
    command(cals, "get", calendar_get, "a calendar's entries and the jobs that use it").add_argument("name")
    listing = command(cals, "list", calendar_list, "calendars with their entries' count and users")
    listing.add_argument("--team", default="", metavar="T")
    command(cals, "delete", calendar_delete, "delete a calendar no job uses").add_argument("name")

    outs = _group(groups, "blackout", "windows in which matching jobs do not fire")
    create = command(outs, "create", blackout_create, "create a blackout window")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--start", required=True, type=_when, metavar="T", help="RFC 3339, now, or +2h")
    create.add_argument("--end", required=True, type=_when, metavar="T", help="RFC 3339, or +D from now")
    create.add_argument("--team", default="", metavar="T", help="only this team's jobs (default: every team)")
    create.add_argument("--label", action="append", metavar="K=V", help="only jobs carrying this label")
    create.add_argument("--reason", default="", metavar="TEXT")
    listing = command(outs, "list", blackout_list, "blackout windows")
    listing.add_argument("--team", default="", metavar="T")
    command(outs, "delete", blackout_delete, "delete a blackout window").add_argument("name")


def _group(groups: Any, name: str, help: str) -> Any:
    sub = groups.add_parser(name, help=help, description=help)
    _global_options(sub, top=False)
    return sub.add_subparsers(dest="command", required=True, metavar="COMMAND")


def _when(text: str) -> Any:
    """A time resolved against the command's clock later: RFC 3339, ``now`` or ``+DURATION``."""
    text = text.strip()
    if text == "now":
        return lambda now: int(now * 1000)
    if text.startswith("+"):
        try:
            seconds = parse_duration(text[1:])
        except ValidationError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return lambda now: int((now + seconds) * 1000)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad time {text!r}: RFC 3339, now, or +DURATION") from None
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"bad time {text!r}: give an offset (Z or +01:00)")
    return lambda now: int(at.timestamp() * 1000)


# ---------------------------------------------------------------- calendars


def calendar_create(cmd: Invocation) -> None:
    a = cmd.args
    ics, ics_name = "", ""
    if a.ics:
        data, _ = read_input(a.ics, cmd.file_limits())
        ics, ics_name = data.decode("utf-8", "replace"), Path(a.ics).name
    spec = calendar_spec(a.name, team=a.team, description=a.description, dates=a.date or [], ranges=a.range or [],
                         weekdays=a.weekdays or [], country=a.country, subdiv=a.subdiv, years=a.years,
                         ics=ics, ics_name=ics_name)
    _put(cmd, [spec])


def calendar_apply(cmd: Invocation) -> None:
    data, where = read_input(cmd.args.file, cmd.file_limits())
    base = Path(cmd.args.file).parent if cmd.args.file != "-" else Path.cwd()
    _put(cmd, calendar_specs_from_bytes(data, where, cmd.file_limits(), base))


def _put(cmd: Invocation, specs: list[kpb.CalendarSpec]) -> None:
    out = [cmd.client.put_calendar(spec) for spec in specs]

    def line(r: kpb.PutCalendarResponse) -> str:
        c = r.calendar
        text = (f"calendar {c.spec.name} {'created' if r.created else 'replaced'} (version {c.version}, "
                f"{_summary(c)})")
        if c.used_by:
            text += f"\nused by {', '.join(c.used_by)}: {CHANGE_NOTE}"
        return text

    cmd.emit([to_dict(r) for r in out], lambda: "\n".join(line(r) for r in out))


def _summary(c: kpb.Calendar) -> str:
    days = sum(1 for e in c.spec.entries if not e.last)
    ranges = sum(1 for e in c.spec.entries if e.last)
    parts = [f"{days} dates"] + ([f"{ranges} ranges"] if ranges else [])
    if c.spec.weekdays:
        parts.append("every " + ",".join(c.spec.weekdays))
    return ", ".join(parts)


def calendar_get(cmd: Invocation) -> None:
    c = cmd.client.get_calendar(cmd.args.name)
    rows = [(e.date + (f"..{e.last}" if e.last else ""), e.name or "-") for e in c.spec.entries]
    rows += [(f"every {w}", "") for w in c.spec.weekdays]

    def render() -> str:
        head = [f"Name: {c.spec.name}", f"Team: {c.spec.team or '(cluster-wide)'}",
                f"Version: {c.version}, updated {format_time(c.updated_ms)} by {c.updated_by or '-'}"]
        head += [f"Source: {s}" for s in c.sources]
        head.append(f"Used by: {', '.join(c.used_by) or '-'}")
        return "\n".join(head) + "\n" + _table(("DATE", "NAME"), rows, empty="No entries.")

    cmd.emit({**to_dict(c), "document": calendar_to_dict(c.spec)}, render)


def calendar_list(cmd: Invocation) -> None:
    cals = cmd.client.list_calendars(team=cmd.args.team)
    cmd.emit([to_dict(c) for c in cals], lambda: _table(
        ("NAME", "TEAM", "ENTRIES", "VERSION", "USED BY"),
        [(c.spec.name, c.spec.team or "(cluster)", _summary(c), c.version, ", ".join(c.used_by) or "-")
         for c in cals], empty="No calendars."))


def calendar_delete(cmd: Invocation) -> None:
    cmd.client.delete_calendar(cmd.args.name)
    cmd.emit({"name": cmd.args.name, "deleted": True}, lambda: f"calendar {cmd.args.name} deleted")


# ---------------------------------------------------------------- blackouts


def blackout_create(cmd: Invocation) -> None:
    a = cmd.args
    now = cmd.clock()
    labels = {}
    for item in a.label or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--label wants KEY=VALUE, got {item!r}")
        labels[key] = value
    b = cmd.client.put_blackout(a.name, start_ms=a.start(now), end_ms=a.end(now), team=a.team, labels=labels,
                                reason=a.reason)
    cmd.emit(to_dict(b), lambda: f"blackout {b.name}: {format_time(b.start_ms)} .. {format_time(b.end_ms)} "
                                 f"({_selector(b)}); matching jobs skip or defer (on_blackout) their instants in it")


def _selector(b: kpb.Blackout) -> str:
    who = f"team {b.team}" if b.team else "every team"
    if b.labels:
        who += " with " + ",".join(f"{k}={v}" for k, v in sorted(b.labels.items()))
    return who


def blackout_list(cmd: Invocation) -> None:
    rows = cmd.client.list_blackouts(team=cmd.args.team)
    cmd.emit([to_dict(b) for b in rows], lambda: _table(
        ("NAME", "START", "END", "JOBS", "REASON"),
        [(b.name, format_time(b.start_ms), format_time(b.end_ms), _selector(b), b.reason or "-") for b in rows],
        empty="No blackout windows."))


def blackout_delete(cmd: Invocation) -> None:
    cmd.client.delete_blackout(cmd.args.name)
    cmd.emit({"name": cmd.args.name, "deleted": True}, lambda: f"blackout {cmd.args.name} deleted")
