"""The Calendars page, /calendars: the calendars the session's token may read (team, the kinds
of entries, the next dates they cover, the jobs that use them) and the blackout windows (range,
which jobs they select, the reason), as `schedctl calendar list` and `schedctl blackout list`
show them.

The rows come from the API (Calendars.ListCalendars, ListBlackouts) with the session's token,
so they are filtered by what it may read; the next dates are worked out by the core's own rule
(schedd.core.calendars.Calendar.entry_on: what firing checks an instant's date against).
"""

from __future__ import annotations

import asyncio
import time
from datetime import date, datetime, timedelta, UTC
from typing import Any

from aiohttp import web

from schedd.core import calendars as K
from schedd.dashboard.backend import Api
from schedd.dashboard.shell import API, json_answer, shell, who
from schedd_proto import calendars_pb2 as cpb
from schedd_proto import calendars_pb2_grpc as cpb_grpc

NEXT_DATES = 5                  # dates shown per calendar
LOOK_AHEAD_DAYS = 400           # how far ahead they are looked for


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/calendars", calendars_page)
    router.add_get("/api/calendars", calendars_json)


# ---------------------------------------------------------------- shaping (pure)

def core_calendar(c: cpb.Calendar) -> K.Calendar:
    """The API's row as the core's Calendar, to ask it which dates it holds."""
    s = c.spec
    dates = tuple(sorted((e.date, e.name) for e in s.entries if not e.last))
    ranges = tuple(sorted((e.date, e.last, e.name) for e in s.entries if e.last))
    weekdays = tuple(K.WEEKDAYS.index(w) for w in s.weekdays if w in K.WEEKDAYS)
    return K.Calendar(s.name, s.team, s.description, dates, ranges, weekdays, tuple(c.sources), c.version,
                      c.updated_ms, c.updated_by)


def next_dates(cal: K.Calendar, today: date, n: int = NEXT_DATES) -> list[dict[str, str]]:
    """The first `n` dates from `today` on that the calendar holds, with their entry's name."""
    out: list[dict[str, str]] = []
    for i in range(LOOK_AHEAD_DAYS):
        d = today + timedelta(days=i)
        entry = cal.entry_on(d.isoformat(), d.weekday())
        if entry is not None:
            out.append({"date": d.isoformat(), "name": entry})
            if len(out) >= n:
                break
    return out


def calendar_row(c: cpb.Calendar, today: date) -> dict[str, Any]:
    s = c.spec
    kinds = [f"{sum(1 for e in s.entries if not e.last)} dates" if any(not e.last for e in s.entries) else "",
             f"{sum(1 for e in s.entries if e.last)} ranges" if any(e.last for e in s.entries) else "",
             "weekdays " + ", ".join(s.weekdays) if s.weekdays else ""]
    return {"name": s.name, "team": s.team or "(cluster-wide)", "description": s.description,
            "kinds": ", ".join(k for k in kinds if k), "sources": list(c.sources), "used_by": list(c.used_by),
            "version": c.version, "next": next_dates(core_calendar(c), today)}


def blackout_row(b: cpb.Blackout, now_ms: int) -> dict[str, Any]:
    selector = ", ".join([f"team {b.team}" if b.team else "every team"]
                         + [f"{k}={v}" for k, v in sorted(b.labels.items())])
    when = "now" if b.start_ms <= now_ms < b.end_ms else "ended" if b.end_ms <= now_ms else "coming"
    return {"name": b.name, "start": _utc(b.start_ms), "end": _utc(b.end_ms), "start_ms": b.start_ms,
            "end_ms": b.end_ms, "selector": selector, "reason": b.reason, "when": when, "by": b.created_by}


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


# ---------------------------------------------------------------- the page and its data

async def calendars_page(request: web.Request) -> web.Response:
    session, principal = await who(request)
    main = """<h1>Calendars and blackouts</h1>
<p class="hint">A job names calendars in its spec (<code>calendar: {skip: [...], only: [...]}</code>): an instant
whose date is in a skip calendar (or in none of its only calendars) is skipped or moved to the next allowed
instant. A blackout holds the jobs it selects for a time range: their instants are skipped, or deferred to its
end (<code>on_blackout: defer</code>).</p>
<h2>Calendars <span class="count" id="calendars-count"></span></h2>
<table id="calendars"><thead><tr><th>Calendar</th><th>Team</th><th>Entries</th><th>Next dates</th>
<th>Used by</th></tr></thead><tbody></tbody></table>
<h2>Blackouts <span class="count" id="blackouts-count"></span></h2>
<table id="blackouts"><thead><tr><th>Blackout</th><th>From</th><th>Until</th><th>Now</th><th>Selects</th>
<th>Reason</th></tr></thead><tbody></tbody></table>
<p class="status" id="status" role="status"></p>"""
    return shell("Calendars", "calendars", session, principal, main, scripts=("calendars.js",))


async def calendars_json(request: web.Request) -> web.Response:
    api = request.app[API]

    async def call(token: str) -> dict[str, Any]:
        return await read(api, token, int(time.time() * 1000))
    return await json_answer(request, call)


async def read(api: Api, token: str, now_ms: int) -> dict[str, Any]:
    stub = cpb_grpc.CalendarsStub(api._ch())
    cals, blackouts = await asyncio.gather(api._call(stub.ListCalendars, cpb.ListCalendarsRequest(), token),
                                           api._call(stub.ListBlackouts, cpb.ListBlackoutsRequest(), token))
    today = datetime.fromtimestamp(now_ms / 1000, UTC).date()
    return {"calendars": [calendar_row(c, today) for c in cals.calendars],
            "blackouts": [blackout_row(b, now_ms) for b in sorted(blackouts.blackouts, key=lambda b: b.start_ms)]}
