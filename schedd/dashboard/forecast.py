"""The Forecast page, /forecast: the herd forecast in a window the user chooses (from now, the
next 24 h by default), for the whole table or by team or pool: the busiest seconds and minutes,
each busiest second against the worker slots of its pool, which schedules make it, and how many
instants calendars and blackouts leave out (why a peak is lower than the schedules make it).

The numbers are the API's Forecast (what `schedctl forecast` prints), with the session's token:
a token that may read some teams is forecast their jobs, and the slots are shown to operators.
"""

from __future__ import annotations

import html
import time
from typing import Any

from aiohttp import web

from schedd.dashboard.backend import Api
from schedd.dashboard.shell import API, json_answer, shell, who
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

WINDOWS_H = (1, 6, 24, 72, 168)          # the window choices, in hours (the API's limit is 7 days)
TOPS = (3, 5, 10, 20)
BYS = (("", "all jobs"), ("pool", "pool"), ("team", "team"))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/forecast", forecast_page)
    router.add_get("/api/forecast", forecast_json)


# ---------------------------------------------------------------- shaping (pure)

def peak_row(p: pb.ForecastPeak, slots: int) -> dict[str, Any]:
    """One peak; `slots` < 0: unknown (a minute's peak is not compared: runs spread over it)."""
    return {"at_ms": p.at_ms, "width_ms": p.width_ms, "due": p.due, "over": p.over,
            "ratio": round(p.due / slots, 2) if slots > 0 else None,
            "made_by": [{"schedule": c.schedule, "timezone": c.timezone, "jobs": c.jobs, "examples": list(c.examples)}
                        for c in p.contributors]}


def forecast_row(r: pb.ForecastResponse) -> dict[str, Any]:
    return {"from_ms": r.from_ms, "to_ms": r.to_ms, "by": r.by, "jobs": r.jobs, "instants": r.instants,
            "note": r.note, "left": {"skipped": r.skipped, "moved": r.moved, "deferred": r.deferred},
            "groups": [{"key": g.key, "jobs": g.jobs, "instants": g.instants, "slots": g.slots,
                        "quota_key": g.quota_key, "quota": g.quota,
                        "left": {"skipped": g.skipped, "moved": g.moved, "deferred": g.deferred},
                        "seconds": [peak_row(p, g.slots) for p in g.peak_seconds],
                        "minutes": [peak_row(p, -1) for p in g.peak_minutes]} for g in r.groups]}


def request_of(query: Any, now_ms: int) -> pb.ForecastRequest:
    """The form's choices as a ForecastRequest (ValueError: one not offered)."""
    by, hours, top = query.get("by", ""), int(query.get("hours", "24")), int(query.get("top", "5"))
    if by not in dict(BYS) or hours not in WINDOWS_H or top not in TOPS:
        raise ValueError(f"by is one of pool, team or nothing; hours one of {WINDOWS_H}; top one of {TOPS}")
    start = int(query.get("from") or now_ms)
    return pb.ForecastRequest(from_ms=start, to_ms=start + hours * 3_600_000, by=by, top=top)


# ---------------------------------------------------------------- the page and its data

async def forecast_page(request: web.Request) -> web.Response:
    session, principal = await who(request)
    e = html.escape
    windows = "".join(f'<option value="{h}"{" selected" if h == 24 else ""}>next {h} h</option>' for h in WINDOWS_H)
    bys = "".join(f'<option value="{k}">{e(label)}</option>' for k, label in BYS)
    tops = "".join(f'<option value="{n}"{" selected" if n == 5 else ""}>{n}</option>' for n in TOPS)
    main = f"""<h1>Forecast</h1>
<p class="hint">Runs due per second and per minute from the job table (nothing is fired), the busiest of them
against the worker slots that serve them: a second holding more runs than its pool's slots starts late.
Add <code>jitter</code> or a window to a herd. Instants that calendars and blackouts skip are not counted;
deferred ones are counted when the blackout ends.</p>
<form class="filters" id="forecast-form">
<label>Window <select id="fc-hours">{windows}</select></label>
<label>By <select id="fc-by">{bys}</select></label>
<label>Top <select id="fc-top">{tops}</select></label>
<button type="submit" id="fc-go">Forecast</button>
</form>
<p id="fc-summary" class="summary"></p>
<p id="fc-left" class="hint"></p>
<p id="fc-note" class="hint"></p>
<div id="fc-groups"></div>
<p class="status" id="status" role="status"></p>"""
    return shell("Forecast", "forecast", session, principal, main, scripts=("forecast.js",))


async def forecast_json(request: web.Request) -> web.Response:
    try:
        req = request_of(request.query, int(time.time() * 1000))
    except ValueError as e:
        return web.json_response({"error": str(e)}, status=400)
    api = request.app[API]

    async def call(token: str) -> dict[str, Any]:
        return await read(api, token, req)
    return await json_answer(request, call)


async def read(api: Api, token: str, req: pb.ForecastRequest) -> dict[str, Any]:
    r = await api._call(pb_grpc.SchedulerStub(api._ch()).Forecast, req, token)
    return forecast_row(r)
