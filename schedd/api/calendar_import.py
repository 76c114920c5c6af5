"""Calendars as a writer gives them, expanded at the API edge into what apply stores.

Public holidays (the `holidays` package) and iCalendar files (the `icalendar` package, RRULE
recurrences expanded with dateutil) become explicit dated entries with their names, for a range
of years, here on the node that takes the call, before anything is proposed. Apply then stores
dates only (schedd.core.calendars): a calendar never changes because a node has another version
of a holiday table installed, and replaying the log gives the same state on every build.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from schedd.core.calendars import WEEKDAYS, check_calendar, years
from schedd.core.model import ValidationError
from schedd_proto import calendars_pb2 as cpb

MAX_ICS_BYTES = 1024 * 1024
MAX_OCCURRENCES = 4000


def expand(spec: cpb.CalendarSpec, this_year: int) -> dict[str, Any]:
    """The canonical calendar document (schedd.core.calendars.check_calendar) of a request:
    explicit entries and weekdays as given, holidays and iCalendar events expanded for
    year_from..year_to (default: `this_year` and the next). Raises ValidationError."""
    dates: list[list[str]] = []
    ranges: list[list[str]] = []
    for e in spec.entries:
        if e.last and e.last != e.date:
            ranges.append([e.date, e.last, e.name])
        else:
            dates.append([e.date, e.name])
    weekdays = []
    for w in spec.weekdays:
        key = w.strip().lower()[:3]
        if key not in WEEKDAYS:
            raise ValidationError(f"bad weekday {w!r}: use {', '.join(WEEKDAYS)}")
        weekdays.append(WEEKDAYS.index(key))
    span = _span(spec, this_year)
    sources: list[str] = []
    if spec.country:
        got = holidays_of(spec.country, spec.subdiv, span)
        dates += got
        where = spec.country.upper() + (f"-{spec.subdiv.upper()}" if spec.subdiv else "")
        sources.append(f"holidays {where} {span[0]}..{span[-1]} ({len(got)} days, holidays {_version('holidays')})")
    elif spec.subdiv:
        raise ValidationError("--subdiv needs --country")
    if spec.ics:
        one, many = ics_entries(spec.ics, span)
        dates += one
        ranges += many
        sources.append(f"ics {spec.ics_name or '(text)'} {span[0]}..{span[-1]} ({len(one) + len(many)} entries)")
    return check_calendar({"name": spec.name, "team": spec.team, "description": spec.description,
                           "dates": dates, "ranges": ranges, "weekdays": weekdays, "sources": sources})


def _span(spec: cpb.CalendarSpec, this_year: int) -> list[int]:
    first = spec.year_from or this_year
    last = spec.year_to or (first + 1 if not spec.year_from else first)
    return years(first, last)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def holidays_of(country: str, subdiv: str, span: list[int]) -> list[list[str]]:
    """[day, names] of the public holidays of `country` (ISO code) and `subdiv` in the years of
    `span`, sorted; several holidays on one day are named together ("A; B")."""
    import holidays

    try:
        table = holidays.country_holidays(country.upper(), subdiv=subdiv.upper() or None, years=span)
    except NotImplementedError:
        raise ValidationError(f"unknown country {country!r} (an ISO 3166 code the holidays package knows, "
                              "e.g. DE, FR, US)") from None
    except (KeyError, ValueError) as e:      # older versions: an unknown subdivision
        raise ValidationError(f"country {country.upper()}: unknown subdivision {subdiv!r} ({e})") from None
    return [[day.isoformat(), "; ".join(table.get_list(day))] for day in sorted(table)]


def _as_date(v: Any) -> date:
    return v.date() if isinstance(v, datetime) else v


def ics_entries(text: str, span: list[int]) -> tuple[list[list[str]], list[list[str]]]:
    """(dates, ranges) of the VEVENTs of an iCalendar text within the years of `span`: each
    event's SUMMARY is its name; an RRULE is expanded (EXDATEs removed); an event over several
    days is a range; a timed event counts for the date of its start in its own zone."""
    import icalendar
    from dateutil.rrule import rrulestr

    if len(text.encode()) > MAX_ICS_BYTES:
        raise ValidationError(f"iCalendar file larger than {MAX_ICS_BYTES} bytes")
    try:
        cal = icalendar.Calendar.from_ical(text)
    except ValueError as e:
        raise ValidationError(f"not an iCalendar file: {e}") from None
    lo, hi = date(span[0], 1, 1), date(span[-1], 12, 31)
    dates: list[list[str]] = []
    ranges: list[list[str]] = []
    for ev in cal.walk("VEVENT"):
        if "DTSTART" not in ev:
            continue
        start = ev.decoded("DTSTART")
        name = str(ev.get("SUMMARY", "")).strip()[:120]
        if "DTEND" in ev:
            end = ev.decoded("DTEND")
        elif "DURATION" in ev:
            end = start + ev.decoded("DURATION")
        else:
            end = start + timedelta(days=1) if not isinstance(start, datetime) else start
        length = max(0, _days_spanned(start, end) - 1)
        excluded = {_as_date(x.dt) for prop in _list(ev.get("EXDATE")) for x in prop.dts}
        if "RRULE" in ev:
            anchor = start if isinstance(start, datetime) else datetime(start.year, start.month, start.day)
            raw = ev["RRULE"].to_ical()
            rule = rrulestr(raw.decode() if isinstance(raw, bytes) else str(raw), dtstart=anchor)
            tz = anchor.tzinfo
            starts = rule.between(datetime(lo.year, 1, 1, tzinfo=tz) - timedelta(days=length),
                                  datetime(hi.year, 12, 31, 23, 59, 59, tzinfo=tz), inc=True)
            days = [_as_date(x) for x in starts]
        else:
            days = [_as_date(start)]
        for day in days:
            if day in excluded:
                continue
            last = day + timedelta(days=length)
            if last < lo or day > hi:
                continue
            if length:
                ranges.append([day.isoformat(), last.isoformat(), name])
            else:
                dates.append([day.isoformat(), name])
            if len(dates) + len(ranges) > MAX_OCCURRENCES:
                raise ValidationError(f"the iCalendar file expands to more than {MAX_OCCURRENCES} entries "
                                      "in the years given: give fewer years")
    return dates, ranges


def _days_spanned(start: Any, end: Any) -> int:
    """Days an event covers: DTEND is exclusive (an all-day event, or a timed one ending at
    midnight, does not cover the end's date)."""
    days = (_as_date(end) - _as_date(start)).days
    if isinstance(start, datetime) and not (end > start and (end.hour, end.minute, end.second) == (0, 0, 0)):
        days += 1
    return max(1, days)


def _list(v: Any) -> list[Any]:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]
