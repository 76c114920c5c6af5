"""The Jobs page: every job the session may read, paged and searched on the server (ListJobs),
so 10,000 jobs page as quickly as 10."""

from __future__ import annotations

from aiohttp import web

from schedd.dashboard.backend import PAGE_SIZES
from schedd.dashboard.shell import API, json_answer, shell, who


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
<label>Per page <select name="size" id="f-size">{sizes}</select></label>
</form>
<table id="jobs"><thead><tr><th>Job</th><th>Team</th><th>Schedule</th><th>Next run</th><th>Last run</th>
<th>Last state</th><th>Runs</th></tr></thead><tbody></tbody></table>
<p class="pager"><button type="button" id="first">First</button> <button type="button" id="prev">Previous</button>
<span id="page"></span> <button type="button" id="next">Next</button></p>
<p class="status" id="status"></p>"""
    return shell("Jobs", "jobs", session, principal, main, scripts=("jobs.js",))


async def jobs_json(request: web.Request) -> web.Response:
    q = request.query
    try:
        size = int(q.get("size", "50"))
    except ValueError:
        size = 0
    if size not in PAGE_SIZES:
        return web.json_response({"error": f"size must be one of {', '.join(map(str, PAGE_SIZES))}"}, status=400)
    team, state, after, text = q.get("team", "").strip(), q.get("state", ""), q.get("after", ""), q.get("text", "")
    return await json_answer(request, lambda token: request.app[API].jobs(token, team=team, state=state,
                                                                          text=text.strip(), after=after, size=size))
