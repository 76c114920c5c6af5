"""Calendars and blackout windows: documents, and the plan builders of the SDK methods.

A calendar document (YAML or JSON; ``schedctl calendar apply -f FILE``, ``Client.put_calendar``)::

    name: bank-holidays-de          # required
    team: finance                   # omitted: cluster-wide (needs operator)
    description: Bavarian bank holidays
    dates: [2026-12-24, {date: 2026-12-31, name: New Year's Eve}]
    ranges: ["2026-08-01..2026-08-15", {from: 2027-08-01, to: 2027-08-15, name: Summer closure}]
    weekdays: [sat, sun]
    country: DE                     # public holidays (expanded by the server) ...
    subdiv: BY                      # ... of a region
    years: 2026..2028               # the years holidays and iCalendar recurrences are expanded for
    ics: holidays.ics               # an iCalendar file, relative to the document's file

The server expands holidays and iCalendar events into dated entries with their names and stores
those: a calendar does not change when a node's holiday tables do. Jobs refer to calendars by
name (``calendar: {skip: [...], only: [...], on_skip: skip|next_allowed}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from schedd_proto import calendars_pb2 as kpb

from ._plans import Call, Plan, _single, new_request_id
from .documents import DocumentError, Limits, build_all, load_documents
from .errors import ValidationError

CALENDAR_KEYS = ("name", "team", "description", "dates", "ranges", "weekdays", "country", "subdiv", "years",
                 "ics", "kind")


def parse_years(text: str) -> tuple[int, int]:
    """``2026`` or ``2026..2028`` as (first, last)."""
    first, sep, last = str(text).partition("..")
    try:
        a, b = int(first), int(last) if sep else int(first)
    except ValueError:
        raise ValidationError(f"bad years {text!r}: YYYY or YYYY..YYYY") from None
    if b < a:
        raise ValidationError(f"bad years {text!r}: the last year is before the first")
    return a, b


def parse_range(text: str, name: str = "") -> kpb.CalendarEntry:
    """``2026-08-01..2026-08-15`` as a range entry."""
    first, sep, last = str(text).partition("..")
    if not sep or not first or not last:
        raise ValidationError(f"bad range {text!r}: FIRST..LAST (YYYY-MM-DD..YYYY-MM-DD)")
    return kpb.CalendarEntry(date=first.strip(), last=last.strip(), name=name)


def calendar_spec(name: str, *, team: str = "", description: str = "", dates: list[str] | None = None,
                  ranges: list[str] | None = None, weekdays: list[str] | None = None, country: str = "",
                  subdiv: str = "", years: str = "", ics: str = "", ics_name: str = "") -> kpb.CalendarSpec:
    """A ``CalendarSpec`` from plain values: ``dates`` as YYYY-MM-DD (or ``YYYY-MM-DD=Name``),
    ``ranges`` as FIRST..LAST, ``weekdays`` as mon..sun, ``years`` as YYYY[..YYYY], ``ics`` the
    text of an iCalendar file."""
    spec = kpb.CalendarSpec(name=name, team=team, description=description, country=country, subdiv=subdiv,
                            ics=ics, ics_name=ics_name)
    for d in dates or ():
        day, _, label = d.partition("=")
        spec.entries.append(kpb.CalendarEntry(date=day.strip(), name=label.strip()))
    for r in ranges or ():
        text, _, label = r.partition("=")
        spec.entries.append(parse_range(text, label.strip()))
    for w in weekdays or ():
        spec.weekdays.extend(x.strip() for x in w.split(",") if x.strip())
    if years:
        spec.year_from, spec.year_to = parse_years(years)
    return spec


def calendar_from_dict(doc: Any, base: Path | None = None) -> kpb.CalendarSpec:
    """A calendar document as a ``CalendarSpec`` (see the module docstring); ``ics`` is read
    relative to ``base``. Raises ``ValidationError`` saying what is wrong."""
    if not isinstance(doc, Mapping):
        raise ValidationError("a calendar document must be a mapping")
    unknown = sorted(set(doc) - set(CALENDAR_KEYS))
    if unknown:
        raise ValidationError(f"calendar {doc.get('name', '?')}: unknown key(s) {', '.join(unknown)}")
    if doc.get("kind", "calendar") != "calendar":
        raise ValidationError(f"kind {doc.get('kind')!r}: this file must hold calendars")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ValidationError("a calendar document needs a name")
    spec = calendar_spec(name, team=str(doc.get("team") or ""), description=str(doc.get("description") or ""),
                         weekdays=[str(w) for w in _list(doc.get("weekdays"))], country=str(doc.get("country") or ""),
                         subdiv=str(doc.get("subdiv") or ""), years=str(doc.get("years") or ""))
    for d in _list(doc.get("dates")):
        if isinstance(d, Mapping):
            spec.entries.append(kpb.CalendarEntry(date=str(d.get("date", "")), name=str(d.get("name") or "")))
        else:
            spec.entries.append(kpb.CalendarEntry(date=str(d)))
    for r in _list(doc.get("ranges")):
        if isinstance(r, Mapping):
            spec.entries.append(kpb.CalendarEntry(date=str(r.get("from", "")), last=str(r.get("to", "")),
                                                  name=str(r.get("name") or "")))
        else:
            spec.entries.append(parse_range(str(r)))
    if doc.get("ics"):
        path = Path(str(doc["ics"]))
        if base is not None and not path.is_absolute():
            path = base / path
        try:
            spec.ics, spec.ics_name = path.read_text(encoding="utf-8"), path.name
        except OSError as e:
            raise ValidationError(f"calendar {name}: cannot read {path}: {e.strerror or e}") from None
    return spec


def calendar_to_dict(spec: kpb.CalendarSpec) -> dict[str, Any]:
    """A stored calendar's spec as a document (entries expanded: what the cluster holds)."""
    out: dict[str, Any] = {"name": spec.name}
    if spec.team:
        out["team"] = spec.team
    if spec.description:
        out["description"] = spec.description
    dates = [{"date": e.date, "name": e.name} if e.name else e.date for e in spec.entries if not e.last]
    ranges = [{"from": e.date, "to": e.last, "name": e.name} if e.name else f"{e.date}..{e.last}"
              for e in spec.entries if e.last]
    if dates:
        out["dates"] = dates
    if ranges:
        out["ranges"] = ranges
    if spec.weekdays:
        out["weekdays"] = list(spec.weekdays)
    return out


def calendar_specs_from_bytes(data: bytes, where: str, limits: Limits = Limits(),
                              base: Path | None = None) -> list[kpb.CalendarSpec]:
    """Every calendar in a file's bytes (one document, a list, or several YAML documents), all
    checked before the caller sends any. Raises ``DocumentError`` with one line."""
    located = load_documents(data, where, limits)
    if not located:
        raise DocumentError(f"{where}: no calendar documents")
    return build_all(located, lambda doc: calendar_from_dict(doc, base))


def _list(v: Any) -> list[Any]:
    if v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else [v]


# ---------------------------------------------------------------- the plan builders of the SDK methods


def _calendars(method: str, request: Message, *, mutating: bool = False, stale_ok: bool = False) -> Call:
    return Call("calendars", method, request, mutating=mutating, stale_ok=stale_ok)


def put_calendar(spec: kpb.CalendarSpec | Mapping[str, Any], *, create_only: bool = False
                 ) -> Plan[kpb.PutCalendarResponse]:
    if not isinstance(spec, kpb.CalendarSpec):
        spec = calendar_from_dict(spec)
    request = kpb.PutCalendarRequest(calendar=spec, create_only=create_only, request_id=new_request_id())
    return _single(_calendars("PutCalendar", request, mutating=True), kpb.PutCalendarResponse)


def get_calendar(name: str, *, stale_ok: bool = False) -> Plan[kpb.Calendar]:
    return _single(_calendars("GetCalendar", kpb.GetCalendarRequest(name=name), stale_ok=stale_ok), kpb.Calendar)


def _rows(method: str, request: Message, field: str, stale_ok: bool) -> Plan[list[Any]]:
    call = _calendars(method, request, stale_ok=stale_ok)
    return Plan([call], lambda responses: list(getattr(responses[0], field)))


def _deleted(method: str, request: Message) -> Plan[None]:
    return Plan([_calendars(method, request, mutating=True)], lambda responses: None)


def list_calendars(*, team: str = "", stale_ok: bool = False) -> Plan[list[kpb.Calendar]]:
    return _rows("ListCalendars", kpb.ListCalendarsRequest(team=team), "calendars", stale_ok)


def delete_calendar(name: str) -> Plan[None]:
    return _deleted("DeleteCalendar", kpb.DeleteCalendarRequest(name=name, request_id=new_request_id()))


def put_blackout(name: str, *, start_ms: int, end_ms: int, team: str = "", labels: Mapping[str, str] | None = None,
                 reason: str = "") -> Plan[kpb.Blackout]:
    blackout = kpb.Blackout(name=name, start_ms=start_ms, end_ms=end_ms, team=team, labels=dict(labels or {}),
                            reason=reason)
    request = kpb.PutBlackoutRequest(blackout=blackout, request_id=new_request_id())
    return _single(_calendars("PutBlackout", request, mutating=True), kpb.Blackout)


def list_blackouts(*, team: str = "", stale_ok: bool = False) -> Plan[list[kpb.Blackout]]:
    return _rows("ListBlackouts", kpb.ListBlackoutsRequest(team=team), "blackouts", stale_ok)


def delete_blackout(name: str) -> Plan[None]:
    return _deleted("DeleteBlackout", kpb.DeleteBlackoutRequest(name=name, request_id=new_request_id()))
