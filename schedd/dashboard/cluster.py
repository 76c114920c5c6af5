"""The Cluster page (operators): the nodes as this node sees them (Cluster.Status)."""

from __future__ import annotations

from aiohttp import web

from schedd.dashboard.shell import API, json_answer, shell, who


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/cluster", cluster_page)
    router.add_get("/api/cluster", cluster_json)


async def cluster_page(request: web.Request) -> web.Response:
    session, principal = await who(request)
    main = """<h1>Cluster</h1>
<p id="summary"></p>
<table id="nodes"><thead><tr><th>Node</th><th>Role</th><th>Term</th><th>Commit</th><th>Applied</th><th>Lag</th>
<th>Version</th><th>Level</th><th>Address</th></tr></thead><tbody></tbody></table>
<ul class="warnings" id="warnings"></ul>
<p class="status" id="status"></p>"""
    return shell("Cluster", "cluster", session, principal, main, scripts=("cluster.js",))


async def cluster_json(request: web.Request) -> web.Response:
    return await json_answer(request, request.app[API].cluster)
