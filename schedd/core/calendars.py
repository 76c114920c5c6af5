"""Named calendars and blackout windows: replicated tables, and what they make of a job's instants.

A calendar is a set of dated entries, each with its name ("2026-12-25 Christmas Day"): explicit
dates, inclusive date ranges and weekday rules. Public holidays and iCalendar files are expanded
into explicit dated entries at the API edge (schedd.api.calendar_import), never here: apply must
not depend on which version of a holiday table a node has installed. A calendar is owned by a
team, or is cluster-wide (team ""). A job refers to calendars by name (`calendar: {skip, only,
on_skip}`); a calendar a job refers to cannot be deleted.

A blackout is a time range [start, end) with an optional team and label selector and a reason;
matching jobs do not fire inside it: their instants are skipped, or deferred to its end
(`on_blackout: skip | defer`).

What an instant becomes (`verdict`) is decided when the instant is recorded (schedd.core.firing
calls `shape` from `record`), from the tables as they are then: changing a calendar or a
blackout changes instants not yet recorded, never those already in the ledger. Dates are the
job's local dates (its time zone). Every decision leaves a record: a skipped or moved instant is
an execution SKIPPED with the reason ("calendar bank-holidays-de: 2026-12-25 Christmas Day"), a
deferred one an execution that waits until the window's end, with an event saying why.

Pure: no clock (time comes in the entry), no I/O; nothing here reads an installed data set.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, UTC
from functools import lru_cache
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core import schedule as sched
from schedd.core import windows
from schedd.core.ledger import MOVED
from schedd.core.model import MAX_ERROR_CHARS, SCHEDULED, SKIPPED, Execution, ExecutionEvent, Job, ValidationError
from schedd.core.results import ApplyResult, Code, ok, reject
from schedd.core.specs import NAME_RE
from schedd.core.tables import Tables, schedule_of

CALENDAR_LEVEL = 8                  # schedd.core.commands Level 8: the kinds and the job fields here
MAX_ENTRIES = 4000                  # dated entries (dates and ranges) of one calendar
MAX_ENTRY_NAME = 120
MAX_REASON = 500
MAX_RANGE_DAYS = 3660
MAX_LOOKAHEAD = 2000                # instants walked to find the next allowed one (next_allowed)
TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass(frozen=True, slots=True)
class Calendar:
    """One calendar row. `dates` sorted by date, `ranges` by first day; dates are ISO
    YYYY-MM-DD in whatever zone the job that reads them has. `sources`: how the edge built
    the entries (e.g. "holidays DE-BY 2026..2028"), shown to people, never evaluated."""

    name: str
    team: str                                   # "" = cluster-wide
    description: str
    dates: tuple[tuple[str, str], ...]          # (day, entry name)
    ranges: tuple[tuple[str, str, str], ...]    # (first day, last day inclusive, entry name)
    weekdays: tuple[int, ...]                   # 0 = Monday
    sources: tuple[str, ...]
    version: int
    updated_ms: int
    updated_by: str

    def entry_on(self, day: str, weekday: int) -> str | None:
        """The name of the entry `day` (ISO, its weekday 0 = Monday) falls on, or None."""
        i = bisect.bisect_left(self.dates, (day,))
        if i < len(self.dates) and self.dates[i][0] == day:
            return self.dates[i][1]
        for first, last, name in self.ranges:
            if first > day:
                break
            if day <= last:
                return name
        if weekday in self.weekdays:
            return WEEKDAY_NAMES[weekday]
        return None


@dataclass(frozen=True, slots=True)
class Blackout:
    """One blackout window [start_ms, end_ms). A job matches when `team` is "" or its team, and
    it carries every label of `labels`; no team and no labels: every job of the cluster."""

    name: str
    start_ms: int
    end_ms: int
    team: str
    labels: tuple[tuple[str, str], ...]
    reason: str
    created_ms: int
    created_by: str

    def matches(self, team: str, labels: tuple[tuple[str, str], ...]) -> bool:
        """`labels`: the job's, as (key, value) pairs."""
        if self.team and self.team != team:
            return False
        return all(pair in labels for pair in self.labels)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What becomes of one instant: `action` skip | move | defer, why, and for defer until when."""

    action: str
    reason: str
    until_ms: int = 0


# ------------------------------------------------------------------ rows as plain values (schedd.core.plain)


def calendar_row(c: Calendar) -> list[Any]:
    return [c.name, c.team, c.description, [list(d) for d in c.dates], [list(r) for r in c.ranges],
            list(c.weekdays), list(c.sources), c.version, c.updated_ms, c.updated_by]


def calendar_of_row(row: Any) -> Calendar:
    name, team, description, dates, ranges, weekdays, sources, version, updated_ms, updated_by = row
    return Calendar(str(name), str(team), str(description), tuple((str(d), str(n)) for d, n in dates),
                    tuple((str(a), str(b), str(n)) for a, b, n in ranges), tuple(int(w) for w in weekdays),
                    tuple(str(x) for x in sources), int(version), int(updated_ms), str(updated_by))


def blackout_row(b: Blackout) -> list[Any]:
    return [b.name, b.start_ms, b.end_ms, b.team, [list(kv) for kv in b.labels], b.reason, b.created_ms,
            b.created_by]


def blackout_of_row(row: Any) -> Blackout:
    name, start_ms, end_ms, team, labels, reason, created_ms, created_by = row
    return Blackout(str(name), int(start_ms), int(end_ms), str(team), tuple((str(k), str(v)) for k, v in labels),
                    str(reason), int(created_ms), str(created_by))


# ------------------------------------------------------------------ validation (proposer and apply)


def _day(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise ValidationError(f"{what}: a date must be YYYY-MM-DD")
    try:
        d = date.fromisoformat(v)
    except ValueError:
        raise ValidationError(f"{what}: bad date {v!r} (YYYY-MM-DD)") from None
    if d.isoformat() != v:
        raise ValidationError(f"{what}: bad date {v!r} (YYYY-MM-DD)")
    return v


def _entry_name(v: Any, what: str) -> str:
    if not isinstance(v, str) or len(v) > MAX_ENTRY_NAME:
        raise ValidationError(f"{what}: an entry name is text of at most {MAX_ENTRY_NAME} characters")
    return v


def check_calendar(doc: Any) -> dict[str, Any]:
    """The canonical form of a calendar document (what a `calendar_put` entry carries), or
    ValidationError saying what is wrong. Same dates merged (names joined with "; "), sorted."""
    if not isinstance(doc, dict):
        raise ValidationError("calendar must be an object")
    name = doc.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(f"bad calendar name {name!r}: lowercase letters, digits, '.', '_', '-'")
    team = doc.get("team", "")
    if not isinstance(team, str) or (team and not TEAM_RE.match(team)):
        raise ValidationError(f"calendar {name}: bad team {team!r}")
    description = doc.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_REASON:
        raise ValidationError(f"calendar {name}: description is text of at most {MAX_REASON} characters")
    merged: dict[str, list[str]] = {}
    for item in doc.get("dates") or []:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ValidationError(f"calendar {name}: a date entry is [YYYY-MM-DD, name]")
        names = merged.setdefault(_day(item[0], f"calendar {name}"), [])
        label = _entry_name(item[1], f"calendar {name}")
        if label and label not in names:
            names.append(label)
    ranges = []
    for item in doc.get("ranges") or []:
        if not isinstance(item, (list, tuple)) or len(item) != 3:
            raise ValidationError(f"calendar {name}: a range entry is [first, last, name]")
        first, last = _day(item[0], f"calendar {name}"), _day(item[1], f"calendar {name}")
        if last < first:
            raise ValidationError(f"calendar {name}: range {first}..{last} ends before it starts")
        if (date.fromisoformat(last) - date.fromisoformat(first)).days > MAX_RANGE_DAYS:
            raise ValidationError(f"calendar {name}: range {first}..{last} is longer than {MAX_RANGE_DAYS} days")
        ranges.append([first, last, _entry_name(item[2], f"calendar {name}")])
    weekdays = doc.get("weekdays") or []
    if not isinstance(weekdays, list) or not all(type(w) is int and 0 <= w <= 6 for w in weekdays):
        raise ValidationError(f"calendar {name}: weekdays are numbers 0 (Monday) .. 6 (Sunday)")
    if len(merged) + len(ranges) > MAX_ENTRIES:
        raise ValidationError(f"calendar {name}: {len(merged) + len(ranges)} dated entries, at most {MAX_ENTRIES}")
    if not merged and not ranges and not weekdays:
        raise ValidationError(f"calendar {name}: no entries (give dates, ranges, weekdays, a country or an "
                              "iCalendar file)")
    sources = doc.get("sources") or []
    if not isinstance(sources, list) or not all(isinstance(s, str) and len(s) <= MAX_REASON for s in sources):
        raise ValidationError(f"calendar {name}: sources are short texts")
    return {"name": name, "team": team, "description": description,
            "dates": [[d, "; ".join(merged[d])] for d in sorted(merged)],
            "ranges": sorted(ranges), "weekdays": sorted(set(weekdays)), "sources": list(sources)}


def check_blackout(doc: Any) -> dict[str, Any]:
    """The canonical form of a blackout document, or ValidationError."""
    if not isinstance(doc, dict):
        raise ValidationError("blackout must be an object")
    name = doc.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(f"bad blackout name {name!r}: lowercase letters, digits, '.', '_', '-'")
    start, end = doc.get("start_ms"), doc.get("end_ms")
    if type(start) is not int or type(end) is not int or end <= start:
        raise ValidationError(f"blackout {name}: give a start and an end after it")
    team = doc.get("team", "")
    if not isinstance(team, str) or (team and not TEAM_RE.match(team)):
        raise ValidationError(f"blackout {name}: bad team {team!r}")
    labels = doc.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) and k
                                               for k, v in labels.items()) or len(labels) > 16:
        raise ValidationError(f"blackout {name}: labels are at most 16 KEY=VALUE pairs")
    reason = doc.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValidationError(f"blackout {name}: the reason is text of at most {MAX_REASON} characters")
    return {"name": name, "start_ms": start, "end_ms": end, "team": team,
            "labels": dict(sorted(labels.items())), "reason": reason}


# ------------------------------------------------------------------ apply


def _refs(spec_source: Any) -> tuple[str, ...]:
    """The calendar names a committed spec (a dict or a JobSpec) refers to."""
    ref = spec_source.get("calendar") if isinstance(spec_source, dict) else getattr(spec_source, "calendar", None)
    if isinstance(ref, dict):
        return tuple(n for key in ("skip", "only") for n in (ref.get(key) or []) if isinstance(n, str))
    if ref is not None:
        return (*ref.skip, *ref.only)
    return ()


def unknown_refs(st: Tables, heads: list[tuple[str, Any]]) -> str:
    """Why a put must be refused for calendars it names that do not exist ("" = none). From the
    calendar level on only: below it a build without calendars stores such a spec as it is."""
    if st.feature_level < CALENDAR_LEVEL:
        return ""
    for name, source in heads:
        for ref in _refs(source):
            if ref not in st.calendars:
                return (f"job {name!r} refers to calendar {ref!r}, which does not exist (create it first: "
                        f"schedctl calendar create {ref} ...)")
    return ""


def users_of(st: Tables, calendar: str) -> list[str]:
    """The jobs that refer to `calendar`, sorted (a spec template is parsed only if it names one)."""
    return sorted(job.name for job in st.jobs.values()
                  if '"calendar"' in job.spec_t and calendar in _refs(job.spec))


def _checked(check: Any, value: Any) -> dict[str, Any] | ApplyResult:
    try:
        doc: dict[str, Any] = check(value)
    except ValidationError as e:
        return reject(Code.INVALID, str(e))
    return doc


def put_calendar(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    doc = _checked(check_calendar, cmd.args.get("calendar"))
    if isinstance(doc, ApplyResult):
        return doc
    old = st.calendars.get(doc["name"])
    if old is not None and cmd.args.get("create_only"):
        return reject(Code.EXISTS, f"calendar {doc['name']!r} already exists")
    if old is not None and old.team != doc["team"]:
        return reject(Code.CONFLICT, f"calendar {doc['name']!r} belongs to "
                      f"{'team ' + repr(old.team) if old.team else 'the cluster'}: delete it first to move it")
    row = Calendar(doc["name"], doc["team"], doc["description"], tuple(tuple(d) for d in doc["dates"]),
                   tuple(tuple(r) for r in doc["ranges"]), tuple(doc["weekdays"]), tuple(doc["sources"]),
                   (old.version + 1) if old is not None else 1, cmd.now, cmd.by)
    st.calendars[row.name] = row
    return ok(R.Stored(old is None, row.name, row.version))


def delete_calendar(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    name = str(cmd.args.get("name", ""))
    if name not in st.calendars:
        return reject(Code.NOT_FOUND, f"calendar {name!r} not found")
    users = users_of(st, name)
    if users:
        shown = ", ".join(users[:10]) + (f" and {len(users) - 10} more" if len(users) > 10 else "")
        return reject(Code.CONFLICT, f"calendar {name!r} is in use by {len(users)} job(s): {shown}; "
                      "remove it from their `calendar:` first")
    del st.calendars[name]
    return ok(R.Named(name))


def put_blackout(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    doc = _checked(check_blackout, cmd.args.get("blackout"))
    if isinstance(doc, ApplyResult):
        return doc
    old = st.blackouts.get(doc["name"])
    if old is not None:
        return reject(Code.EXISTS, f"blackout {doc['name']!r} already exists (delete it first)")
    st.blackouts[doc["name"]] = Blackout(doc["name"], doc["start_ms"], doc["end_ms"], doc["team"],
                                         tuple(doc["labels"].items()), doc["reason"], cmd.now, cmd.by)
    return ok(R.Stored(True, doc["name"], 1))


def delete_blackout(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    name = str(cmd.args.get("name", ""))
    if st.blackouts.pop(name, None) is None:
        return reject(Code.NOT_FOUND, f"blackout {name!r} not found")
    return ok(R.Named(name))


HANDLERS = {C.CALENDAR_PUT: put_calendar, C.CALENDAR_DELETE: delete_calendar,
            C.BLACKOUT_PUT: put_blackout, C.BLACKOUT_DELETE: delete_blackout}


# ------------------------------------------------------------------ what an instant becomes


@lru_cache(maxsize=64)
def _zone(tz: str) -> ZoneInfo | None:
    return None if tz in ("", "UTC") else ZoneInfo(tz)


@lru_cache(maxsize=4096)
def local_day(t_ms: int, tz: str) -> tuple[str, int]:
    """The ISO date and weekday (0 = Monday) of instant `t_ms` in zone `tz` (cached: a herd of
    jobs shares its instants, and a pure function of its arguments may be)."""
    d = datetime.fromtimestamp(t_ms / 1000, _zone(tz) or UTC).date()
    return d.isoformat(), d.weekday()


class Book(Protocol):
    """What the decisions read: the calendar and blackout tables (a state's, or a copy of them
    taken under the node lock for a computation off it, schedd.core.forecast)."""

    @property
    def calendars(self) -> Mapping[str, Calendar]: ...

    @property
    def blackouts(self) -> Mapping[str, Blackout]: ...


@dataclass(frozen=True, slots=True)
class Tablet:
    """A copy of the two tables (a `Book`), small enough to take under the node lock."""

    calendars: Mapping[str, Calendar] = field(default_factory=dict)
    blackouts: Mapping[str, Blackout] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rules:
    """What of a job the decisions read: its calendars, what becomes of an instant they exclude
    or a blackout holds, and what a blackout selects by (its team and labels)."""

    team: str = ""
    skip: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    on_skip: str = "skip"
    on_blackout: str = "skip"
    labels: tuple[tuple[str, str], ...] = ()


def book_of(st: Tables) -> Tablet:
    """The tables the decisions read, copied (empty below the calendar level: no decision then)."""
    if st.feature_level < CALENDAR_LEVEL:
        return Tablet()
    return Tablet(dict(st.calendars), dict(st.blackouts))


def rules_of(st: Tables, job: Job) -> Rules:
    p = st.policy(job)
    return Rules(job.team, p.calendar_skip, p.calendar_only, p.on_skip, p.on_blackout, p.labels)


def calendar_reason(st: Book, skip: tuple[str, ...], only: tuple[str, ...], t_ms: int, tz: str) -> str:
    """Why the calendars exclude instant `t_ms` ("" = they allow it): the first `skip` calendar
    holding its date, or, with `only` calendars, that none holds it."""
    if not skip and not only:
        return ""
    day, weekday = local_day(t_ms, tz)
    for name in skip:
        cal = st.calendars.get(name)
        entry = cal.entry_on(day, weekday) if cal is not None else None
        if entry is not None:
            return f"calendar {name}: {day} {entry}".rstrip()
    if only:
        for name in only:
            cal = st.calendars.get(name)
            if cal is not None and cal.entry_on(day, weekday) is not None:
                return ""
        return f"calendar {', '.join(only)}: {day} ({WEEKDAY_NAMES[weekday]}) is not in it (only)"
    return ""


def blackout_at(st: Book, team: str, labels: tuple[tuple[str, str], ...], t_ms: int) -> Blackout | None:
    """The blackout matching the job whose window holds `t_ms` (the one ending last, then by name)."""
    found: Blackout | None = None
    for b in st.blackouts.values():
        if b.start_ms <= t_ms < b.end_ms and b.matches(team, labels):
            if found is None or (b.end_ms, b.name) > (found.end_ms, found.name):
                found = b
    return found


def verdict(st: Tables, job: Job, t_ms: int, at_ms: int | None = None) -> Verdict | None:
    """What the calendars and blackouts make of the job's scheduled instant `t_ms` (None: it runs);
    blackouts at `at_ms` when the run starts elsewhere than its instant (a window's placed second:
    schedd.core.windows)."""
    if st.feature_level < CALENDAR_LEVEL or (not st.calendars and not st.blackouts):
        return None
    return decide(st, rules_of(st, job), schedule_of(job), t_ms, at_ms=at_ms)


def decide(book: Book, rules: Rules, s: sched.Schedule, t_ms: int, *, locate: bool = True,
           at_ms: int | None = None) -> Verdict | None:
    """What the calendars and blackouts of `book` make of instant `t_ms` of schedule `s` of a job
    with `rules` (None: it runs). Calendars first (a holiday is no run at all), then blackouts.
    The one decision: firing records it (`shape`), `job get --next` previews it, the forecast
    counts by it (`locate` False: a moved instant's reason does not look for where it moves, a
    walk of up to MAX_LOOKAHEAD instants that a count does not need). Blackouts are read at
    `at_ms` when the run starts elsewhere than its instant (a window's placed second)."""
    why = calendar_reason(book, rules.skip, rules.only, t_ms, s.tz)
    if why:
        if rules.on_skip != "next_allowed":
            return Verdict("skip", why)
        if not locate:
            return Verdict("move", why + MOVED)
        target = allowed_after(book, rules, s, t_ms)
        where = sched.format_ms(target, s.tz) if target is not None else "none within reach"
        return Verdict("move", f"{why}{MOVED} {where}")
    if book.blackouts:
        b = blackout_at(book, rules.team, rules.labels, t_ms if at_ms is None else at_ms)
        if b is not None:
            text = f"blackout {b.name}" + (f": {b.reason}" if b.reason else "")
            if rules.on_blackout == "defer":
                return Verdict("defer", f"{text}; deferred to its end {sched.format_ms(b.end_ms, s.tz)}", b.end_ms)
            return Verdict("skip", text)
    return None


def next_allowed(st: Tables, job: Job, t_ms: int) -> int | None:
    """The next instant of the job's schedule after `t_ms` that its calendars allow (None: none
    within MAX_LOOKAHEAD instants)."""
    return allowed_after(st, rules_of(st, job), schedule_of(job), t_ms)


def allowed_after(book: Book, rules: Rules, s: sched.Schedule, t_ms: int) -> int | None:
    """`next_allowed` for a schedule and rules (what `decide` reads)."""
    x = sched.next_after(s, t_ms)
    for _ in range(MAX_LOOKAHEAD):
        if x is None or not calendar_reason(book, rules.skip, rules.only, x, s.tz):
            return x
        x = sched.next_after(s, x)
    return None


def shape(st: Tables, job: Job, ex: Execution, now: int) -> None:
    """Apply the verdict on a scheduled execution `record` is about to add (schedule or catch-up
    trigger): skipped and moved instants are SKIPPED with the reason; a deferred one waits until
    the window's end (its due time) with an event; a run that a moved instant landed on says so."""
    if ex.state != SCHEDULED:
        return
    v = verdict(st, job, ex.scheduled_ms, ex.due if windows.of(st, job) else None)
    if v is None:
        if _moved_into(st, job, ex.scheduled_ms):
            ex.events += (ExecutionEvent(now, "calendar", "also runs for the instant(s) before it that its "
                                                          "calendar moved here (on_skip next_allowed; the "
                                                          "ledger lists them as moved)"),)
        return
    if v.action == "defer":
        ex.due_ms = max(ex.due, v.until_ms)
        ex.reason = v.reason[:MAX_ERROR_CHARS]
        ex.events += (ExecutionEvent(now, "deferred", ex.reason),)
        return
    ex.state = SKIPPED
    ex.reason = v.reason[:MAX_ERROR_CHARS]


def _moved_into(st: Tables, job: Job, t_ms: int) -> bool:
    """Whether the job's execution just before `t_ms` is an instant moved onto it (next_allowed):
    recorded SKIPPED with a "moved to" reason. (That newest one stays in memory whatever the
    history level retires, so this is the same on every replica.)"""
    if st.policy(job).on_skip != "next_allowed":
        return False
    times = st.by_job.get(job.name, ())
    i = bisect.bisect_left(times, t_ms) - 1
    prev = st.execs.get((job.name, times[i])) if i >= 0 else None
    return prev is not None and prev.state == SKIPPED and MOVED in prev.reason


def preview_note(st: Tables, job: Job, t_ms: int) -> str:
    """What `job get --next` shows beside a coming instant: "" or the verdict, as it reads now."""
    at = windows.placed(st, job, t_ms, windows.of(st, job)) if windows.of(st, job) else None
    v = verdict(st, job, t_ms, at)
    if v is None:
        return ""
    return {"skip": "skipped: ", "move": "moved: ", "defer": "deferred: "}[v.action] + v.reason


def years(first: int, last: int) -> list[int]:
    """The years of an inclusive range, checked (the edge's expansions take one)."""
    if not 1900 <= first <= last <= 2200 or last - first > 10:
        raise ValidationError(f"bad year range {first}..{last}: at most 11 years, within 1900..2200")
    return list(range(first, last + 1))

