"""The DAGs pages: the DAGs the session may read (ListDags, filtered by the API), and a DAG's page:
its graph with each task's state in the run shown (`dag_graph`), a grid of its recent runs by task
(as Airflow's grid view), and "clear a task and its downstream" (ClearDagTask, what `schedctl dag
clear` calls), offered when the principal's grants allow `trigger` on the DAG's team.

The shaping (`dag_row`, `run_columns`, `dag_view`) is pure, over the API's messages; the handlers
only make the calls with the session's token.
"""

from __future__ import annotations

import html
import uuid
from typing import Any
from urllib.parse import quote

from aiohttp import web

from schedd.dashboard import dag_graph
from schedd.dashboard.backend import Api, ApiError
from schedd.dashboard.shell import API, json_answer, may, shell, who
from schedd_proto import dags_pb2 as dpb
from schedd_proto import dags_pb2_grpc as dpb_grpc

RUNS_SHOWN = 20                   # the grid's columns: the newest runs


def add_routes(router: web.UrlDispatcher) -> None:
    """The list, a DAG's page, their JSON, and the clear (a POST: CSRF-checked by the app)."""
    for path, page, answer in (("/dags", dags_page, dags_json), ("/dags/{name}", dag_page, dag_json)):
        router.add_get(path, page)
        router.add_get("/api" + path, answer)
    router.add_get("/api/dags/{name}/clear", clear_preview_json)      # what a clear would run again
    router.add_post("/api/dags/{name}/clear", clear_json)


# ---------------------------------------------------------------- shaping (pure)

def dag_row(d: dpb.Dag) -> dict[str, Any]:
    s = d.spec
    return {"name": s.name, "team": s.team, "schedule": s.schedule, "timezone": s.timezone,
            "description": s.description, "tasks": len(s.tasks), "next_fire_ms": d.next_fire_ms,
            "last_run_id": d.last_run_id, "last_run_state": d.last_run_state, "runs_total": d.runs_total}


def spec_edges(spec: dpb.DagSpec) -> dict[str, list[str]]:
    """task -> its upstream tasks, in the spec's order."""
    return {t.name: list(t.upstream) for t in spec.tasks}


def run_edges(run: dpb.DagRun) -> dict[str, list[str]]:
    """task -> its upstream tasks as the run has them (the DAG may have changed since)."""
    return {t.task: list(t.upstream) for t in run.tasks}


def run_columns(runs: list[dpb.DagRun]) -> list[dict[str, Any]]:
    """The grid's columns, oldest run first (time runs left to right): each run's id, state and
    times, and per task its state and execution (the cell's link)."""
    return [{"run_id": r.run_id, "state": r.state, "trigger": r.trigger, "logical_ms": r.logical_ms,
             "ended_ms": r.ended_ms, "sla_missed": any(e.kind == "sla_missed" for e in r.events),
             "tasks": {t.task: {"state": t.state, "execution_id": t.execution_id, "attempts": t.attempts,
                                "reason": t.reason} for t in r.tasks}}
            for r in reversed(runs)]


def dag_view(dag: dpb.Dag, runs: list[dpb.DagRun], shown: str, *, may_clear: bool) -> dict[str, Any]:
    """The DAG page's JSON: the DAG, the grid, and the graph of run `shown` ("" or unknown: the
    newest; before any run, the DAG's own tasks with every task not run yet)."""
    run = next((r for r in runs if r.run_id == shown), runs[0] if runs else None)
    edges = run_edges(run) if run is not None else spec_edges(dag.spec)
    states = {t.task: (t.state, t.execution_id) for t in run.tasks} if run is not None else {}
    title = f"{dag.spec.name}: " + (f"run {run.run_id} ({run.state.lower()})" if run is not None else "not run yet")
    grid_tasks = list(spec_edges(dag.spec))
    known = set(grid_tasks)
    for r in runs:                   # tasks a run had that the DAG no longer has, after the DAG's own
        for t in r.tasks:
            if t.task not in known:
                known.add(t.task)
                grid_tasks.append(t.task)
    return {"dag": dag_row(dag), "run_id": run.run_id if run is not None else "",
            "run_state": run.state if run is not None else "",
            "svg": dag_graph.svg(edges, states, title=title),
            "run_tasks": list(edges) if run is not None else [],
            "finished": [t.task for t in run.tasks if t.state not in ("PENDING", "SCHEDULED", "RUNNING", "RETRY_WAIT")]
            if run is not None else [],
            "tasks": grid_tasks, "runs": run_columns(runs), "may_clear": may_clear}


# ---------------------------------------------------------------- calls

def _stub(api: Api) -> dpb_grpc.DagsStub:
    return dpb_grpc.DagsStub(api._ch())


async def list_dags(api: Api, token: str) -> dict[str, Any]:
    r = await api._call(_stub(api).ListDags, dpb.ListDagsRequest(), token)
    return {"dags": [dag_row(d) for d in r.dags]}


async def view_dag(api: Api, token: str, name: str, shown: str) -> dict[str, Any]:
    dag = await api._call(_stub(api).GetDag, dpb.GetDagRequest(name=name), token)
    runs = await api._call(_stub(api).ListDagRuns, dpb.ListDagRunsRequest(name=name, limit=RUNS_SHOWN), token)
    principal = await api.whoami(token)
    return dag_view(dag, list(runs.runs), shown, may_clear=may(principal, "trigger", f"team:{dag.spec.team}"))


async def clear_preview(api: Api, token: str, name: str, run_id: str, task: str, downstream: bool) -> dict[str, Any]:
    """What a clear would run again, for the confirmation: the task and (with `downstream`) what
    depends on it in that run, as schedd.core.dags.clear chooses them (the API decides again)."""
    run = await api._call(_stub(api).GetDagRun, dpb.GetDagRunRequest(name=name, run_id=run_id), token)
    edges = run_edges(run)
    if task not in edges:
        raise ApiError("NOT_FOUND", f"run {run.run_id} has no task {task!r}")
    return {"run_id": run.run_id, "tasks": dag_graph.downstream(edges, task) if downstream else [task]}


async def clear_task(api: Api, token: str, name: str, run_id: str, task: str, downstream: bool) -> dict[str, Any]:
    req = dpb.ClearDagTaskRequest(name=name, run_id=run_id, task=task, downstream=downstream,
                                  request_id=str(uuid.uuid4()))
    run = await api._call(_stub(api).ClearDagTask, req, token)
    cleared = next((e.message for e in reversed(run.events) if e.kind == "cleared"), "")
    return {"run_id": run.run_id, "state": run.state, "cleared": cleared}


# ---------------------------------------------------------------- handlers

async def dags_page(request: web.Request) -> web.Response:
    session, principal = await who(request)
    main = """<h1>DAGs <span class="count" id="total"></span></h1>
<table id="dags"><thead><tr><th>DAG</th><th>Team</th><th>Schedule</th><th>Tasks</th><th>Next run</th>
<th>Last run</th><th>Last state</th><th>Runs</th></tr></thead><tbody></tbody></table>
<p class="status" id="status"></p>"""
    return shell("DAGs", "dags", session, principal, main, scripts=("dags.js",))


async def dags_json(request: web.Request) -> web.Response:
    return await json_answer(request, lambda token: list_dags(request.app[API], token))


async def dag_page(request: web.Request) -> web.Response:
    session, principal = await who(request)
    name = request.match_info["name"]
    main = f"""<p class="crumbs"><a href="/dags">DAGs</a> /</p>
<h1 id="dag-name">{html.escape(name)}</h1>
<p id="dag-summary"></p>
<section class="panel"><h2>Graph <span class="count" id="graph-run"></span></h2>
<label>Run <select id="run-select"><option value="">newest</option></select></label>
<div id="graph" class="graph"></div>
<p class="legend" id="legend"></p></section>
<section class="panel" id="clear-panel" hidden><h2>Clear a task</h2>
<form id="clear-form" class="filters">
<label>Task <select id="clear-task" name="task"></select></label>
<label><input type="checkbox" id="clear-downstream" name="downstream" checked> and its downstream</label>
<button type="submit" id="clear-button">Clear…</button></form>
<p class="hint">Cleared tasks run again in the run shown above; a task still under way cannot be cleared.</p>
<p class="error" id="clear-error" role="alert"></p><p id="clear-done"></p></section>
<section class="panel"><h2>Recent runs</h2><div class="grid-wrap"><table id="grid" class="grid"></table></div></section>
<p class="status" id="status"></p>"""
    return shell(f"DAG {name}", "dags", session, principal, main, scripts=("dags.js",),
                 meta={"dag": name, "dag-api": f"/api/dags/{quote(name, safe='')}"})


async def dag_json(request: web.Request) -> web.Response:
    name, shown = request.match_info["name"], request.query.get("run", "")
    return await json_answer(request, lambda token: view_dag(request.app[API], token, name, shown))


async def clear_preview_json(request: web.Request) -> web.Response:
    q = request.query
    if not q.get("task"):
        return web.json_response({"error": "give the task to clear"}, status=400)
    name, run_id, task, downstream = request.match_info["name"], q.get("run", ""), q["task"], q.get("downstream") == "1"
    return await json_answer(request, lambda token: clear_preview(request.app[API], token, name, run_id, task,
                                                                  downstream))


async def clear_json(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("task"), str) or not body["task"]:
        return web.json_response({"error": "give the task to clear"}, status=400)
    given = body.get("run_id")
    run_id: str = given if isinstance(given, str) else ""
    name, task, downstream = request.match_info["name"], str(body["task"]), body.get("downstream") is True
    return await json_answer(request, lambda token: clear_task(request.app[API], token, name, run_id, task, downstream))
