"""The Cluster page (operators): the nodes as this node sees them (Cluster.Status, with the state
and history digests on demand), a sharded cluster's shards (Cluster.ListShards: each one's
leader, replicas, term, jobs and lag), the recent leader changes (each node's record of the terms it
led), the workers connected to the leader (ListWorkers) and the quotas with their use
(ListQuotas), the recent SLA misses (the newest runs' and DAG runs' `sla_missed` events: the API
keeps no list of misses of its own), and, for a principal holding `acl` (what Audit.List needs),
the audit trail, filtered and paged on the server (`schedctl audit list --newest` is its twin).

Each section is its own JSON endpoint, so a section the API refuses says why and the others show.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from schedd.dashboard.backend import Api
from schedd.dashboard.shell import API, json_answer, may, shell, who
from schedd_proto import acl_pb2, acl_pb2_grpc
from schedd_proto import dags_pb2 as dpb
from schedd_proto import dags_pb2_grpc as dpb_grpc
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

AUDIT_PAGE = 50
SLA_RUNS = 200                    # the newest executions looked at for misses
SLA_DAGS, SLA_DAG_RUNS = 50, 10   # DAGs looked at, and runs of each
OUTCOMES = ("allowed", "denied", "error")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/cluster", cluster_page)
    router.add_get("/api/cluster", cluster_json)
    router.add_get("/api/cluster/workers", workers_json)
    router.add_get("/api/cluster/sla", sla_json)
    router.add_get("/api/cluster/audit", audit_json)


# ---------------------------------------------------------------- shaping (pure)

def worker_row(w: pb.WorkerInfo) -> dict[str, Any]:
    return {"name": w.name, "pool": w.pool, "labels": dict(sorted(w.labels.items())), "handlers": list(w.handlers),
            "slots": w.slots, "running": list(w.running), "draining": w.draining,
            "connected_ms": w.connected_ms, "last_heartbeat_ms": w.last_heartbeat_ms}


def quota_row(q: pb.Quota) -> dict[str, Any]:
    return {"key": q.key, "limit": q.limit, "running": q.running,
            "use": round(q.running / q.limit, 3) if q.limit else 0.0}


def sla_misses(executions: list[pb.Execution], runs: list[dpb.DagRun]) -> list[dict[str, Any]]:
    """The `sla_missed` events of the runs given, newest first: (what, its run id, state, when)."""
    out = [{"kind": "job", "name": e.job, "id": e.id, "state": e.state, "time_ms": ev.time_ms, "message": ev.message}
           for e in executions for ev in e.events if ev.kind == "sla_missed"]
    out += [{"kind": "dag", "name": r.dag, "id": r.run_id, "state": r.state, "time_ms": ev.time_ms,
             "message": ev.message} for r in runs for ev in r.events if ev.kind == "sla_missed"]
    return sorted(out, key=lambda m: m["time_ms"], reverse=True)


def audit_request(query: dict[str, str], now_ms: int) -> acl_pb2.ListAuditRequest:
    """The page's filters as a ListAuditRequest, newest first, one page (ValueError: a bad filter).
    `since`/`until`: minutes back from now (the form's choices) or epoch ms; `before`: the seq
    the next page starts below."""
    outcome = query.get("outcome", "")
    if outcome and outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}")

    def instant(key: str) -> int:
        text = query.get(key, "").strip()
        if not text:
            return 0
        if text.endswith("m") and text[:-1].isdigit():
            return now_ms - int(text[:-1]) * 60_000
        if text.isdigit():
            return int(text)
        raise ValueError(f"{key} must be minutes back (30m) or epoch milliseconds")

    before = query.get("before", "").strip()
    if before and not before.isdigit():
        raise ValueError("before must be a sequence number")
    return acl_pb2.ListAuditRequest(principal=query.get("principal", "").strip(), action=query.get("action", "").strip(),
                                    outcome=outcome, since_ms=instant("since"), until_ms=instant("until"),
                                    newest_first=True, before_seq=int(before or 0), limit=AUDIT_PAGE + 1)


def audit_page(r: acl_pb2.ListAuditResponse) -> dict[str, Any]:
    """One page (`AUDIT_PAGE` records, newest first) and where the next starts ("": none): one more
    record than a page was asked for, so a next page is known to exist."""
    records = list(r.records)[:AUDIT_PAGE]
    more = len(r.records) > AUDIT_PAGE
    return {"records": [{"seq": x.seq, "time_ms": x.time_ms, "principal": x.principal, "source": x.source,
                         "action": x.action, "target": x.target, "outcome": x.outcome, "detail": x.detail,
                         "log_index": x.log_index} for x in records],
            "next": str(records[-1].seq) if more and records else "", "answered_by": r.answered_by}


# ---------------------------------------------------------------- calls

async def workers(api: Api, token: str) -> dict[str, Any]:
    ws, qs = await asyncio.gather(
        api._call(pb_grpc.WorkersStub(api._ch()).ListWorkers, pb.ListWorkersRequest(), token),
        api._call(pb_grpc.SchedulerStub(api._ch()).ListQuotas, pb.ListQuotasRequest(), token))
    return {"workers": [worker_row(w) for w in ws.workers], "quotas": [quota_row(q) for q in qs.quotas]}


async def sla(api: Api, token: str) -> dict[str, Any]:
    execs = await api._call(pb_grpc.SchedulerStub(api._ch()).ListExecutions,
                            pb.ListExecutionsRequest(page_size=SLA_RUNS), token)
    dags = dpb_grpc.DagsStub(api._ch())
    listed = await api._call(dags.ListDags, dpb.ListDagsRequest(), token)
    named = [d.spec.name for d in listed.dags if d.spec.HasField("sla")][:SLA_DAGS]
    answers = await asyncio.gather(*(api._call(dags.ListDagRuns, dpb.ListDagRunsRequest(name=n, limit=SLA_DAG_RUNS),
                                               token) for n in named))
    runs = [r for a in answers for r in a.runs]
    return {"misses": sla_misses(list(execs.executions), runs), "runs_looked_at": len(execs.executions) + len(runs)}


async def audit(api: Api, token: str, request: acl_pb2.ListAuditRequest) -> dict[str, Any]:
    return audit_page(await api._call(acl_pb2_grpc.AuditStub(api._ch()).List, request, token))


# ---------------------------------------------------------------- handlers

async def cluster_page(request: web.Request) -> web.Response:
    session, principal = await who(request)
    audit_section = """<section class="cluster-section" id="audit-section"><h2>Audit trail</h2>
<form class="filters" id="audit-filters">
<label>Principal <input name="principal" id="a-principal" placeholder="token:… or a name"></label>
<label>Action <input name="action" id="a-action" placeholder="Scheduler.PutJob"></label>
<label>Outcome <select name="outcome" id="a-outcome"><option value="">all</option><option>allowed</option>
<option>denied</option><option>error</option></select></label>
<label>Since <select name="since" id="a-since"><option value="">the start</option><option value="15m">15 min ago</option>
<option value="60m">1 h ago</option><option value="1440m">1 day ago</option><option value="10080m">7 days ago</option></select></label>
<label>Until <select name="until" id="a-until"><option value="">now</option><option value="15m">15 min ago</option>
<option value="60m">1 h ago</option><option value="1440m">1 day ago</option></select></label>
</form>
<table id="audit"><thead><tr><th>Seq</th><th>Time</th><th>Principal</th><th>Source</th><th>Action</th><th>Target</th>
<th>Outcome</th><th>Detail</th></tr></thead><tbody></tbody></table>
<p class="pager"><button type="button" id="a-first">Newest</button> <button type="button" id="a-next">Older</button>
<span id="a-page"></span></p></section>""" if may(principal, "acl", "cluster") else ""
    main = f"""<h1>Cluster</h1>
<p id="summary"></p>
<table id="nodes"><thead><tr><th>Node</th><th>Role</th><th>Term</th><th>Commit</th><th>Applied</th><th>Lag</th>
<th>Version</th><th>Level</th><th>Address</th><th>State digest</th><th>History</th></tr></thead><tbody></tbody></table>
<p><label><input type="checkbox" id="with-digest"> Show each node's state and history digests
(a pass over the state on every node: equal digests at equal indexes mean equal replicas)</label></p>
<ul class="warnings" id="warnings"></ul>
<section class="cluster-section" id="shards-section" hidden><h2>Shards <span class="count" id="shards-total"></span></h2>
<table id="shards"><thead><tr><th>Shard</th><th>Leader</th><th>Replicas</th><th>Term</th><th>Jobs</th><th>Runs</th>
<th>Lag</th></tr></thead><tbody></tbody></table>
<p class="hint">Each shard group has its own leader; the nodes above are shard 0's view. Counts are this node's
replicas'.</p></section>
<section class="cluster-section"><h2>Leader changes</h2>
<table id="leaders"><thead><tr><th>Term</th><th>Leader</th><th>Since</th><th>Until</th></tr></thead><tbody></tbody></table>
<p class="hint">Each node remembers the terms it led since it started.</p></section>
<section class="cluster-section"><h2>Workers <span class="count" id="workers-total"></span></h2>
<table id="workers"><thead><tr><th>Worker</th><th>Pool</th><th>Labels</th><th>Handlers</th><th>Slots</th><th>Running</th>
<th>State</th><th>Last heartbeat</th></tr></thead><tbody></tbody></table></section>
<section class="cluster-section"><h2>Quotas</h2>
<table id="quotas"><thead><tr><th>Quota</th><th>Limit</th><th>Running</th><th>Use</th></tr></thead><tbody></tbody></table></section>
<section class="cluster-section"><h2>SLA misses <span class="count" id="sla-scope"></span></h2>
<table id="sla"><thead><tr><th>When</th><th>Job or DAG</th><th>Run</th><th>State now</th><th>Detail</th></tr></thead>
<tbody></tbody></table></section>
{audit_section}
<p class="status" id="status"></p>"""
    return shell("Cluster", "cluster", session, principal, main, scripts=("cluster.js",))


async def cluster_json(request: web.Request) -> web.Response:
    digest = request.query.get("digest") == "1"
    return await json_answer(request, lambda token: request.app[API].cluster(token, with_digest=digest))


async def workers_json(request: web.Request) -> web.Response:
    return await json_answer(request, lambda token: workers(request.app[API], token))


async def sla_json(request: web.Request) -> web.Response:
    return await json_answer(request, lambda token: sla(request.app[API], token))


async def audit_json(request: web.Request) -> web.Response:
    try:
        req = audit_request(dict(request.query), int(time.time() * 1000))
    except ValueError as e:
        return web.json_response({"error": str(e)}, status=400)
    return await json_answer(request, lambda token: audit(request.app[API], token, req))
