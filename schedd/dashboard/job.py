"""The Job page, /jobs/<name>: one job's spec (readable, and raw as JSON or YAML), its next fires
in its zone and in UTC with DST notes and what its calendars and blackouts make of each, the
ledger of its instants as a timeline, its runs, and the actions the session's grants allow
(trigger with parameters, pause/resume, backfill). An instant of the timeline or the ledger,
clicked (or activated with the keyboard), is explained in a panel: the API's Explain, the
answer `schedctl job explain --at T` gives (and `run explain` for one that ran).

Every value comes from the node's gRPC API with the session's token (GetJob, ListInstants,
ListExecutions, Explain), and every action is the call schedctl makes (TriggerJob, PauseJob, ResumeJob,
BackfillJob), so the API authorizes and audits it; its refusal is shown as it is. The buttons
follow `shell.may`, which only hides what the API would refuse anyway.
"""

from __future__ import annotations

import html
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, UTC
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from aiohttp import web
from google.protobuf.json_format import MessageToDict

from schedd.dashboard import timeline
from schedd.dashboard.backend import Api, ApiError, Unauthenticated
from schedd.dashboard.shell import API, json_answer, may, page_size, shell, status_of, to_login, who
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

UPCOMING = 10                   # next fires shown
MAX_INSTANTS = 10_000           # instants in one timeline window (the API's own cap per call)
RUN_PAGE_SIZES = (25, 50, 100)
WINDOWS_H = (1, 6, 24, 168, 720, 8760)      # the timeline's window choices, in hours
MAX_BACKFILL_BODY = 4096


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/jobs/{name}", job_page)
    router.add_get("/api/jobs/{name}", job_json)
    router.add_get("/api/jobs/{name}/instants", instants_json)
    router.add_get("/api/jobs/{name}/runs", runs_json)
    router.add_get("/api/jobs/{name}/explain", explain_json)
    router.add_post("/api/jobs/{name}/trigger", trigger)
    router.add_post("/api/jobs/{name}/pause", pause)
    router.add_post("/api/jobs/{name}/resume", resume)
    router.add_post("/api/jobs/{name}/backfill", backfill)


def _stub(api: Api) -> pb_grpc.SchedulerStub:
    return pb_grpc.SchedulerStub(api._ch())


# ---------------------------------------------------------------- shaping (pure)

def utc_text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _zone(tz: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(tz) if tz and tz != "UTC" else None
    except (ZoneInfoNotFoundError, ValueError):
        return None


def local_text(ms: int, zone: ZoneInfo | None) -> str:
    """The instant as a wall time of the job's zone, with the zone's abbreviation (isoformat, not
    strftime: a long ledger formats 10,000 of them)."""
    d = datetime.fromtimestamp(ms / 1000, zone or UTC)
    return d.isoformat(" ", "seconds")[:19] + " " + ((d.tzname() or "") if zone else "UTC")


def run_url(execution_id: str) -> str:
    return "/runs/" + quote(execution_id, safe="")


def _handler_text(spec: pb.JobSpec) -> str:
    kind = spec.handler.WhichOneof("kind")
    if kind == "shell":
        h = spec.handler.shell
        return "shell: " + (h.command or " ".join(h.argv))
    if kind == "http":
        return f"http: {spec.handler.http.method or 'POST'} {spec.handler.http.url}"
    if kind == "python":
        return "python: " + spec.handler.python.name
    if kind == "container":
        c = spec.handler.container
        return "container: " + c.image + (f" ({c.command})" if c.command else "")
    return "-"


def job_detail(job: pb.Job) -> dict[str, Any]:
    """GetJob's answer as the page shows it: the readable fields, the raw spec, the next fires."""
    s = job.spec
    zone = _zone(s.timezone)
    raw = MessageToDict(s, preserving_proto_field_name=True)
    readable = [
        ("Team", s.team), ("Description", s.description),
        ("Schedule", s.schedule or "(on demand)"), ("In words", job.schedule_words),
        ("Time zone", s.timezone or "UTC"), ("Handler", _handler_text(s)), ("Pool", s.pool or "(any)"),
        ("Overlap", s.overlap or "allow"), ("Catch-up", s.catchup or "all"),
        ("Retry", f"{s.retry.max_attempts} attempts" if s.retry.max_attempts > 1 else "no retry"),
        ("Timeout", f"{s.timeout_seconds:g} s" if s.timeout_seconds else "none"),
        ("Priority", str(s.priority) if s.priority else ""),
        ("DST policy", f"gap {job.effective_dst_gap}, fold {job.effective_dst_fold}" if job.effective_dst_gap else ""),
        ("Labels", ", ".join(f"{k}={v}" for k, v in sorted(s.labels.items()))),
        ("Parameters", ", ".join(f"{k}={v}" for k, v in sorted(s.params.items()))),
        ("Window", f"{s.window.start}–{s.window.end} {s.timezone or 'UTC'}: each run placed at the window's "
                   "least-loaded second; its end is the deadline" if s.HasField("window") and s.window.start else ""),
        ("Calendars", calendar_text(s)),
        ("Blackouts", "deferred to the window's end" if s.on_blackout == "defer" else "skipped (on_blackout: skip)"),
        ("Version", str(job.version)),
    ]
    fires = [{"ms": ms, "utc": utc_text(ms), "local": local_text(ms, zone), "zone": f.zone_abbreviation,
              "dst": f.dst_note, "calendar": f.calendar_note, "window": f.window_note} for ms, f in zip(job.upcoming_ms, job.upcoming_fires)]
    return {"name": s.name, "team": s.team, "paused": job.paused, "schedule": s.schedule,
            "words": job.schedule_words, "timezone": s.timezone or "UTC", "next_fire_ms": job.next_fire_ms,
            "created_ms": job.created_ms,
            "last_state": job.last_state, "last_execution_id": job.last_execution_id,
            "last_run_url": run_url(job.last_execution_id) if job.last_execution_id else "",
            "readable": [{"label": k, "value": v} for k, v in readable if v],
            "params": dict(sorted(s.params.items())), "fires": fires,
            "calendars": [{"name": n, "how": how} for how, names in (("skip", s.calendar.skip), ("only", s.calendar.only))
                          for n in names],
            "spec_json": json.dumps(raw, indent=2, sort_keys=True),
            "spec_yaml": yaml.safe_dump(raw, sort_keys=True, default_flow_style=False, allow_unicode=True)}


def calendar_text(s: pb.JobSpec) -> str:
    """The job's calendars as `job get` words them: "skip bank-holidays-de; on skip: next allowed"."""
    parts = [f"{how} {', '.join(names)}" for how, names in (("skip", s.calendar.skip), ("only", s.calendar.only))
             if names]
    if not parts:
        return ""
    on_skip = "run at the next allowed instant" if s.calendar.on_skip == "next_allowed" else "skip the instant"
    return "; ".join(parts) + f"; a date they exclude: {on_skip}"


def explanation(x: pb.Explanation) -> dict[str, Any]:
    """Explain's answer as the panel shows it: the summary, the log index it was read at, and each
    finding with its values (log index, term, worker, fencing token, SLA verdict, ...)."""
    return {"id": x.id, "job": x.job, "instant_ms": x.instant_ms, "instant": utc_text(x.instant_ms),
            "disposition": x.disposition, "summary": x.summary, "index": x.index,
            "run_url": run_url(x.id) if x.disposition in ("ran", "running", "pending", "cancelled") else "",
            "findings": [{"kind": f.kind, "text": f.text, "at": utc_text(f.at_ms) if f.at_ms else "",
                          "details": dict(sorted(f.details.items()))} for f in x.findings]}


def instant_rows(records: list[pb.InstantRecord], tz: str) -> list[dict[str, Any]]:
    """The ledger's rows as the page shows them (the script writes UTC, the lane's label from the
    legend and the run's link): lean, as a window holds up to 10,000 of them."""
    zone = _zone(tz)
    rows = []
    for r in records:
        ex = r.execution if r.HasField("execution") else None
        cat = timeline.category(r.disposition, ex.state if ex else "", ex.trigger if ex else "")
        rows.append({"t": r.instant_ms, "local": local_text(r.instant_ms, zone), "disposition": r.disposition,
                     "detail": r.detail, "category": cat, "letter": timeline.LETTERS[cat], "id": ex.id if ex else ""})
    return rows


def run_row(ex: pb.Execution, now_ms: int) -> dict[str, Any]:
    """One run as the runs table shows it: duration from the first attempt's start to the last
    one's end (or now, while it runs)."""
    started = [a.started_ms for a in ex.attempts if a.started_ms]
    ended = [a.ended_ms for a in ex.attempts if a.ended_ms]
    duration = 0
    if started:
        end = max(ended) if ended and ex.state not in ("RUNNING", "RETRY_WAIT") else now_ms
        duration = max(0, end - min(started))
    last = ex.attempts[-1] if ex.attempts else None
    return {"id": ex.id, "url": run_url(ex.id), "state": ex.state, "scheduled_ms": ex.scheduled_ms,
            "scheduled": utc_text(ex.scheduled_ms), "trigger": ex.trigger + (f" ({ex.lane})" if ex.lane else ""),
            "duration_ms": duration, "worker": last.worker if last else "", "attempts": len(ex.attempts),
            "params": dict(sorted(ex.params.items())), "reason": ex.reason}


def parse_when(text: str, tz: str) -> int:
    """A backfill bound as typed: RFC 3339 with an offset or Z, or a wall time ("2026-12-01 10:00")
    read in the job's zone. ValueError says what is wrong."""
    value = text.strip()
    if not value:
        raise ValueError("give both times")
    try:
        d = datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is not a time like 2026-12-01 10:00 or 2026-12-01T10:00:00Z") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_zone(tz) or UTC)
    return int(d.timestamp() * 1000)


# ---------------------------------------------------------------- the page

async def job_page(request: web.Request) -> web.Response:
    session, principal = await who(request)
    name = request.match_info["name"]
    api = request.app[API]
    try:
        job = await api._call(_stub(api).GetJob, pb.GetJobRequest(name=name, upcoming=1), session.token)
    except Unauthenticated:
        raise to_login(request) from None
    except ApiError as e:
        main = (f'<p class="crumbs"><a href="/jobs">Jobs</a> /</p><h1>{html.escape(name)}</h1>'
                f'<p class="error" id="status">{status_of(e)}: {html.escape(e.message)}</p>')
        response = shell(name, "jobs", session, principal, main, scripts=())
        response.set_status(status_of(e))
        return response
    resource = f"team:{job.spec.team}"
    can = {c: may(principal, c, resource) for c in ("trigger", "write", "backfill")}
    main = _main(name, job, can)
    return shell(name, "jobs", session, principal, main, scripts=("job.js",), meta={"job": name})


def _main(name: str, job: pb.Job, can: dict[str, bool]) -> str:
    e = html.escape
    params = "".join(
        f'<label>{e(k)} <input name="param" data-param="{e(k)}" value="{e(v)}"></label>'
        for k, v in sorted(job.spec.params.items()))
    actions = []
    if can["trigger"]:
        actions.append(f"""<form id="trigger-form" class="action"><h3>Trigger now</h3>
<div id="trigger-params">{params}</div>
<p><button type="button" id="add-param">Add a parameter</button>
<button type="submit" id="trigger">Trigger</button></p></form>""")
    if can["write"]:
        actions.append('<div class="action"><h3>Schedule</h3><button type="button" id="pause">Pause</button> '
                       '<button type="button" id="resume">Resume</button></div>')
    if can["backfill"]:
        actions.append("""<form id="backfill-form" class="action"><h3>Backfill</h3>
<label>From <input id="bf-from" placeholder="2026-12-01 00:00 (job's zone) or RFC 3339"></label>
<label>To <input id="bf-to" placeholder="2026-12-02 00:00"></label>
<p><button type="submit" id="bf-count">Count instants</button>
<button type="button" id="bf-confirm" hidden>Backfill them</button></p>
<p id="bf-result"></p></form>""")
    windows = "".join(f'<option value="{h}"{" selected" if h == 24 else ""}>{_window_label(h)}</option>'
                      for h in WINDOWS_H)
    sizes = "".join(f'<option value="{n}">{n}</option>' for n in RUN_PAGE_SIZES)
    return f"""<p class="crumbs"><a href="/jobs">Jobs</a> /</p>
<h1 id="job-name">{e(name)} <span class="tag" id="paused-tag" hidden>paused</span></h1>
<p class="words" id="words"></p>
<section class="actions" id="actions">{''.join(actions) or '<p class="hint" id="no-actions">Your token may only read this job.</p>'}
<p class="action-result" id="action-result" role="status"></p></section>
<section class="columns">
<div><h2>Spec <button type="button" id="raw-toggle">Show JSON</button> <button type="button" id="yaml-toggle">Show YAML</button></h2>
<dl id="spec"></dl><pre id="raw" hidden></pre></div>
<div><h2>Next fires</h2>
<table id="fires"><thead><tr><th>#</th><th>Local (<span id="fires-zone"></span>)</th><th>UTC</th><th>In</th>
<th>DST</th><th>Calendars, blackouts, window</th></tr></thead><tbody></tbody></table>
<p class="hint" id="job-calendars"></p></div>
</section>
<h2>Instants <span class="count" id="instant-count"></span></h2>
<form class="filters" id="window-form">
<label>Window <select id="window">{windows}</select></label>
<button type="button" id="earlier">Earlier</button> <button type="button" id="later">Later</button>
<button type="button" id="latest">Now</button> <span id="window-text" class="hint"></span>
<button type="button" id="more" hidden>Continue this window</button>
</form>
<div id="legend" class="legend"></div>
<p class="hint">Why did an instant run, or not? Click it on the timeline or its Explain button in the table; with
the keyboard, Tab to the timeline, move with the arrow keys and press Enter.</p>
<div id="timeline" class="timeline-box"></div>
<section class="explain-panel" id="explain" hidden aria-live="polite" tabindex="-1">
<h2>Why <span id="explain-title"></span> <button type="button" id="explain-close">Close</button></h2>
<p id="explain-summary"></p><dl id="explain-facts"></dl>
<table id="explain-findings"><thead><tr><th>When</th><th>What</th><th>Detail</th><th>Values</th></tr></thead>
<tbody></tbody></table></section>
<table id="instants"><thead><tr><th></th><th>Instant (local)</th><th>UTC</th><th>Outcome</th><th>Why</th>
<th>Run</th><th>Explain</th></tr></thead><tbody></tbody></table>
<p class="pager"><button type="button" id="inst-prev">Previous</button> <span id="inst-page"></span>
<button type="button" id="inst-next">Next</button></p>
<h2>Runs <span class="count" id="runs-total"></span></h2>
<table id="runs"><thead><tr><th>Run</th><th>State</th><th>Scheduled</th><th>Trigger</th><th>Duration</th>
<th>Worker</th><th>Attempts</th><th>Parameters</th></tr></thead><tbody></tbody></table>
<p class="pager"><button type="button" id="runs-first">Newest</button> <button type="button" id="runs-next">Older</button>
<label>Per page <select id="runs-size">{sizes}</select></label></p>
<p class="status" id="status"></p>"""


def _window_label(hours: int) -> str:
    if hours < 24:
        return f"{hours} h"
    return f"{hours // 24} d" if hours < 8760 else "1 year"


# ---------------------------------------------------------------- JSON endpoints

async def _answer(request: web.Request, call: Callable[[Api, str], Awaitable[Any]]) -> web.Response:
    api = request.app[API]
    return await json_answer(request, lambda token: call(api, token))


async def job_json(request: web.Request) -> web.Response:
    name = request.match_info["name"]

    async def call(api: Api, token: str) -> dict[str, Any]:
        job = await api._call(_stub(api).GetJob, pb.GetJobRequest(name=name, upcoming=UPCOMING), token)
        return job_detail(job)
    return await _answer(request, call)


async def instants_json(request: web.Request) -> web.Response:
    """The instants of [from, to] (default: the day before now), at most MAX_INSTANTS, drawn."""
    name, q = request.match_info["name"], request.query
    now = int(time.time() * 1000)
    try:
        until = int(q.get("to") or now)
        since = int(q.get("from") or until - 86_400_000)
    except ValueError:
        return web.json_response({"error": "from and to are epoch milliseconds"}, status=400)
    if since > until:
        return web.json_response({"error": "from must not be after to"}, status=400)
    start = since

    async def call(api: Api, token: str) -> dict[str, Any]:
        job = await api._call(_stub(api).GetJob, pb.GetJobRequest(name=name, upcoming=1), token)
        records: list[pb.InstantRecord] = []
        page = ""
        while len(records) < MAX_INSTANTS:
            r = await api._call(_stub(api).ListInstants, pb.ListInstantsRequest(
                job=name, from_ms=start, to_ms=until, limit=MAX_INSTANTS - len(records), page_token=page), token)
            records.extend(r.instants)
            page = r.next_page_token
            if not page:
                break
        rows = instant_rows(records, job.spec.timezone)
        full = len(records) >= MAX_INSTANTS
        return {"from": since, "to": until, "rows": rows, "svg": timeline.svg(rows, since, until),
                "legend": timeline.legend(rows), "next_from": records[-1].instant_ms + 1 if full else 0}
    return await _answer(request, call)


async def explain_json(request: web.Request) -> web.Response:
    """Why the job's instant `at` (epoch ms) ran or did not: Explain, as `schedctl job explain`."""
    name = request.match_info["name"]
    try:
        at = int(request.query.get("at", ""))
    except ValueError:
        return web.json_response({"error": "at is an instant in epoch milliseconds"}, status=400)

    async def call(api: Api, token: str) -> dict[str, Any]:
        x = await api._call(_stub(api).Explain, pb.ExplainRequest(job=name, at_ms=at), token)
        return explanation(x)
    return await _answer(request, call)


async def runs_json(request: web.Request) -> web.Response:
    name, size = request.match_info["name"], page_size(request, RUN_PAGE_SIZES, 25)
    after = request.query.get("after", "")

    async def call(api: Api, token: str) -> dict[str, Any]:
        r = await api._call(_stub(api).ListExecutions,
                            pb.ListExecutionsRequest(job=name, page_size=size, page_token=after), token)
        now = int(time.time() * 1000)
        return {"runs": [run_row(ex, now) for ex in r.executions], "next": r.next_page_token, "total": r.total,
                "note": r.note}
    return await _answer(request, call)


# ---------------------------------------------------------------- actions

async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise web.HTTPBadRequest(text="the body must be JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object")
    return body


def trigger_params(body: dict[str, Any]) -> dict[str, str]:
    """The parameters of a trigger as typed (names and values as strings; the API checks them)."""
    params = body.get("params") or {}
    if not isinstance(params, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in params.items()):
        raise ValueError("params must map names to text")
    return {k.strip(): v for k, v in params.items() if k.strip()}


async def trigger(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        params = trigger_params(await _body(request))
    except ValueError as e:
        return web.json_response({"error": str(e)}, status=400)

    async def call(api: Api, token: str) -> dict[str, Any]:
        ex = await api._call(_stub(api).TriggerJob, pb.TriggerJobRequest(
            name=name, params=params, request_id=uuid.uuid4().hex), token)
        return {"id": ex.id, "state": ex.state, "url": run_url(ex.id), "params": dict(ex.params)}
    return await _answer(request, call)


async def pause(request: web.Request) -> web.Response:
    return await _pause_or_resume(request, "PauseJob")


async def resume(request: web.Request) -> web.Response:
    return await _pause_or_resume(request, "ResumeJob")


async def _pause_or_resume(request: web.Request, method: str) -> web.Response:
    name = request.match_info["name"]

    async def call(api: Api, token: str) -> dict[str, Any]:
        job = await api._call(getattr(_stub(api), method), pb.JobRef(name=name, request_id=uuid.uuid4().hex), token)
        return {"paused": job.paused}
    return await _answer(request, call)


async def backfill(request: web.Request) -> web.Response:
    """A dry run counts the instants (the API's BackfillJob dry_run); the page shows the count
    and asks before it posts again without dry_run."""
    name = request.match_info["name"]
    body = await _body(request)
    dry_run = bool(body.get("dry_run", True))

    async def call(api: Api, token: str) -> dict[str, Any]:
        job = await api._call(_stub(api).GetJob, pb.GetJobRequest(name=name, upcoming=1), token)
        tz = job.spec.timezone or "UTC"
        try:
            start, end = parse_when(str(body.get("from", "")), tz), parse_when(str(body.get("to", "")), tz)
        except ValueError as e:
            raise ApiError("INVALID_ARGUMENT", str(e)) from None
        r = await api._call(_stub(api).BackfillJob, pb.BackfillRequest(
            name=name, from_ms=start, to_ms=end, dry_run=dry_run, request_id=uuid.uuid4().hex), token)
        return {"dry_run": dry_run, "instants": r.instants, "created": r.created, "duplicates": r.duplicates,
                "first": utc_text(r.first_ms) if r.first_ms else "", "last": utc_text(r.last_ms) if r.last_ms else ""}
    return await _answer(request, call)
