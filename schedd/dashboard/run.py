"""The Run page (/runs/<execution id>, the id URL-encoded): one run, its attempts, how each
ended in words, and the running attempt's output followed live.

The log comes from the API's log service (ReadRunLogs with follow, `schedctl run logs --follow`'s
call) as server-sent events on /api/run/log (`live.relay`: bounded per session, the gRPC stream
cancelled when the browser goes). Retry and cancel are RetryExecution and CancelExecution, as
`schedctl run retry` / `run cancel` call them; the buttons show when the principal's grants
allow (`may`) and the run's state does, and the API's refusal is shown as it is.
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from schedd.dashboard.backend import ApiError, Unauthenticated
from schedd.dashboard.live import frame, pumped, relay
from schedd.dashboard.shell import API, SESSION, json_answer, may, shell, status_of, text, to_login, who

MAX_ID_CHARS = 512


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/runs/{id:.+}", run_page)
    router.add_get("/api/run", run_json)
    router.add_get("/api/run/log", run_log)
    router.add_post("/api/run/cancel", cancel)
    router.add_post("/api/run/retry", retry)


def _id(value: str) -> str:
    return value.strip() if 0 < len(value.strip()) <= MAX_ID_CHARS else ""


async def run_page(request: web.Request) -> web.Response:
    """The page; what the buttons may do is decided here, once (the job's team does not change)."""
    session, principal = await who(request)
    run_id = _id(request.match_info["id"])
    try:
        run = await request.app[API].run(session.token, run_id)
    except Unauthenticated:
        request.app[SESSION].close(session.id)
        raise to_login(request) from None
    except ApiError as e:
        main = (f'<h1>Run</h1><p class="error" id="error">{html.escape(e.message)}</p>'
                '<p><a href="/jobs">All jobs</a></p>')
        response = shell("Run", "jobs", session, principal, main, scripts=())
        response.set_status(status_of(e))
        return response
    team = f"team:{run['team']}"
    meta = {"run": run["id"], "job": run["job"],
            "may-cancel": "1" if may(principal, "cancel", team) else "",
            "may-retry": "1" if may(principal, "trigger", team) else ""}
    main = f"""<h1>Run <span class="run-id" id="run-id">{html.escape(run["id"])}</span></h1>
<p class="actions"><button type="button" id="cancel" hidden>Cancel</button>
<button type="button" id="retry" hidden>Retry</button> <span class="error" id="action-error"></span></p>
<dl class="fields" id="fields"></dl>
<h2>Attempts</h2>
<table id="attempts"><thead><tr><th>#</th><th>State</th><th>Worker</th><th>Fencing token</th><th>Started</th>
<th>Ended</th><th>Duration</th><th>Outcome</th></tr></thead><tbody></tbody></table>
<h2>Output <span class="count" id="log-state"></span></h2>
<pre class="log" id="log"></pre>
<div id="tails"></div>
<p class="status" id="status"></p>"""
    return shell(f"Run {run['id']}", "jobs", session, principal, main, scripts=("run.js",), meta=meta)


async def run_json(request: web.Request) -> web.Response:
    run_id = _id(text(request.query.get("id")))
    if not run_id:
        return web.json_response({"error": "give the run's id (?id=<job>@<time>)"}, status=400)
    return await json_answer(request, lambda token: request.app[API].run(token, run_id))


async def run_log(request: web.Request) -> web.StreamResponse:
    """The attempt's output as it is written: `log` events, then `end` with its outcome."""
    run_id = _id(text(request.query.get("id")))
    try:
        attempt = int(request.query.get("attempt", "0"))
    except ValueError:
        attempt = -1
    if not run_id or attempt < 0:
        return web.json_response({"error": "give the run's id and an attempt number (0: the latest)"}, status=400)

    async def on_chunk(chunk: dict[str, Any], send: Callable[[bytes], Awaitable[None]]) -> bool:
        await send(frame("log", chunk))
        return chunk["kind"] != "end"

    return await relay(request, pumped(lambda token: request.app[API].logs(token, run_id, attempt)), on_chunk)


async def _act(request: web.Request, act: Callable[[Any, str, str], Awaitable[Any]]) -> web.Response:
    try:
        body = await request.json()
    except ValueError:
        body = None
    run_id = _id(text(body.get("id"))) if isinstance(body, dict) else ""
    if not run_id:
        return web.json_response({"error": "give the run's id"}, status=400)
    return await json_answer(request, lambda token: act(request.app[API], token, run_id))


async def cancel(request: web.Request) -> web.Response:
    return await _act(request, lambda api, token, run_id: api.cancel(token, run_id))


async def retry(request: web.Request) -> web.Response:
    return await _act(request, lambda api, token, run_id: api.retry(token, run_id))
