"""The Jobs page: every job the session may read, paged and searched on the server (ListJobs),
so 10,000 jobs page as quickly as 10. Each row: the schedule in words (the API's), the next run,
a strip of the last 20 outcomes (ListJobs' `recent`, in the same call: no call per job) and a
link to the job's page (job.py)."""

from __future__ import annotations

from aiohttp import web

from schedd.dashboard.backend import PAGE_SIZES
from schedd.dashboard.shell import API, json_answer, page_size, shell, who


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/jobs", jobs_page)
    router.add_get("/api/jobs", jobs_json)


async def jobs_page(request: web.Request) -> web.Response:
    session, principal = await who(request)
    sizes = "".join(f'<option value="{n}"{" selected" if n == 50 else ""}>{n}</option>' for n in PAGE_SIZES)
    main = f"""<h1>Jobs <span class="count" id="total"></span></h1>
<form class="filters" id="filters">
<label>Name <input name="text" id="f-text" placeholder="part of a job's name"></label>
<label>Team <input name="team" id="f-team" placeholder="every team you may read"></label>
<label>State <select name="state" id="f-state"><option value="">all</option><option value="active">active</option>
<option value="paused">paused</option></select></label>
<label>Pool <input name="pool" id="f-pool" placeholder="any pool"></label>
<label>Per page <select name="size" id="f-size">{sizes}</select></label>
</form>
<table id="jobs"><thead><tr><th>Job</th><th>Team</th><th>Schedule</th><th>Next run</th><th>Last run</th>
<th>Last state</th><th>Last 20 runs</th><th>Runs</th></tr></thead><tbody></tbody></table>
<p class="hint" id="strip-legend">Last runs, oldest first: <span class="run-mark run-succeeded">S</span> succeeded
<span class="run-mark run-failed">F</span> failed <span class="run-mark run-running">R</span> running or waiting
<span class="run-mark run-skipped">K</span> skipped <span class="run-mark run-cancelled">C</span> cancelled</p>
<p class="pager"><button type="button" id="first">First</button> <button type="button" id="prev">Previous</button>
<span id="page"></span> <button type="button" id="next">Next</button></p>
<p class="status" id="status"></p>"""
    return shell("Jobs", "jobs", session, principal, main, scripts=("jobs.js",))


async def jobs_json(request: web.Request) -> web.Response:
    q = request.query
    size = page_size(request, PAGE_SIZES, 50)
    team, state, after, text = q.get("team", "").strip(), q.get("state", ""), q.get("after", ""), q.get("text", "")
    pool = q.get("pool", "").strip()
    return await json_answer(request, lambda token: request.app[API].jobs(token, team=team, state=state,
                                                                          text=text.strip(), after=after, size=size,
                                                                          pool=pool))
