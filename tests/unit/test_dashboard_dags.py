"""The DAG graph's layout (layers by longest path, barycentre order), its SVG, and the JSON the
DAG and cluster pages are answered with (pure shaping over the API's messages)."""

from __future__ import annotations

import re
import time

import pytest

from schedd.core import audit as U
from schedd.dashboard import cluster, dag_graph, dags
from schedd.dashboard.backend import leader_changes
from schedd_proto import acl_pb2
from schedd_proto import dags_pb2 as dpb
from schedd_proto import scheduler_pb2 as pb

G = dag_graph

LAYOUTS = [
    # (case, tasks: name -> upstream, layers expected, crossings at most)
    ("chain", {"a": [], "b": ["a"], "c": ["b"], "d": ["c"]}, {"a": 0, "b": 1, "c": 2, "d": 3}, 0),
    ("diamond", {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, {"a": 0, "b": 1, "c": 1, "d": 2}, 0),
    ("longest path, not shortest", {"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]},
     {"a": 0, "b": 1, "c": 2, "d": 3}, 0),
    ("wide fan-out and in", {"src": [], **{f"t{i}": ["src"] for i in range(12)}, "sink": [f"t{i}" for i in range(12)]},
     {"src": 0, **{f"t{i}": 1 for i in range(12)}, "sink": 2}, 0),
    ("disconnected parts", {"a1": [], "a2": ["a1"], "b1": [], "b2": ["b1"], "lone": []},
     {"a1": 0, "a2": 1, "b1": 0, "b2": 1, "lone": 0}, 0),
    # Given in an order that crosses: x1->y2, x2->y1; the sweep uncrosses them.
    ("crossed input", {"x1": [], "x2": [], "y2": ["x1"], "y1": ["x2"]}, {"x1": 0, "x2": 0, "y2": 1, "y1": 1}, 0),
    ("two crossing pairs", {"a": [], "b": [], "c": [], "p": ["c"], "q": ["b"], "r": ["a"], "s": ["p", "r"]},
     {"a": 0, "b": 0, "c": 0, "p": 1, "q": 1, "r": 1, "s": 2}, 1),
]


@pytest.mark.parametrize("case,tasks,layers,most", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_layout_layers_by_longest_path_and_few_crossings(case, tasks, layers, most):
    placed = G.layout(tasks)
    assert {n: p.layer for n, p in placed.items()} == layers
    for name, ups in tasks.items():                       # every edge points right
        assert all(placed[u].layer < placed[name].layer for u in ups)
    for layer in set(layers.values()):                    # rows 0..n-1 in each layer, no overlap
        rows = sorted(p.row for p in placed.values() if p.layer == layer)
        assert rows == list(range(len(rows)))
    assert G.crossings(tasks, placed) <= most


def test_layout_of_nothing_and_of_unknown_upstreams():
    assert G.layout({}) == {}
    assert G.layout({"a": ["gone"]}) == {"a": G.Placed(0, 0)}


def _timed_svg(tasks: dict[str, list[str]]) -> tuple[str, float]:
    start = time.perf_counter()
    svg = G.svg(tasks, {}, title="big")
    return svg, time.perf_counter() - start


def test_200_task_dags_lay_out_in_well_under_a_second():
    # 20 layers of 10, each task after 1-3 tasks of the layers just before; and a 200-deep chain
    # with edges spanning up to 100 layers (their waypoints are budgeted: MAX_WAYPOINTS).
    wide = {f"t{i:03}": [f"t{j:03}" for j in {i - 10 - i % 3, i - 10, i - 20 + (i * 7) % 10} if 0 <= j < i - i % 10]
            for i in range(200)}
    deep = {f"t{i:03}": [f"t{j:03}" for j in (i - 1, i // 2, i - 7) if 0 <= j < i] for i in range(200)}
    for tasks in (wide, deep):
        svg, elapsed = _timed_svg(tasks)
        assert svg.count('class="node state-none"') == 200 and elapsed < 2.0, elapsed   # ~0.05 s on an idle core
    assert sum(len(v) for v in G.routed(deep).bends.values()) <= G.MAX_WAYPOINTS


def test_a_long_edge_goes_around_the_boxes_between():
    tasks = {"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]}
    drawn = G.routed(tasks)
    bends = drawn.bends[("a", "d")]
    assert [p.layer for p in bends] == [1, 2]
    assert all(p != q for p in bends for q in drawn.placed.values())      # never under a task's box
    assert list(drawn.bends) == [("a", "d")]


DOWN = {"extract": [], "clean": ["extract"], "load": ["clean"], "report": ["load"], "audit": ["extract"], "x": []}


@pytest.mark.parametrize("task,expected", [
    ("extract", ["extract", "clean", "load", "report", "audit"]), ("load", ["load", "report"]),
    ("report", ["report"]), ("x", ["x"])])
def test_downstream_is_the_task_and_all_that_depends_on_it_in_order(task, expected):
    assert G.downstream(DOWN, task) == expected


def test_svg_says_each_state_in_words_and_links_runs():
    svg = G.svg({"a": [], "b": ["a"]}, {"a": ("FAILED", "d:a@2026-01-01T00:00:00Z")}, title="d <&>")
    assert "<title>d &lt;&amp;&gt;</title>" in svg
    assert 'data-task="a" data-state="failed"' in svg and ">✗<" in svg
    assert 'data-task="b" data-state="not run yet"' in svg and ">not run yet<" in svg
    assert '<a href="/runs/d%3Aa%402026-01-01T00%3A00%3A00Z">' in svg
    assert svg.count('class="edge"') == 1
    assert "style=" not in svg                          # the CSP allows no inline style


def _run(run_id: str, state: str, tasks: list[tuple[str, str, list[str]]], sla: bool = False) -> dpb.DagRun:
    r = dpb.DagRun(run_id=run_id, dag="d", state=state, logical_ms=int(run_id.rsplit("-", 1)[1]))
    for name, s, ups in tasks:
        r.tasks.append(dpb.DagTaskRun(task=name, state=s, upstream=ups,
                                      execution_id=f"d:{name}@{run_id}" if s != "PENDING" else ""))
    if sla:
        r.events.append(pb.ExecutionEvent(time_ms=5, kind="sla_missed", message="late"))
    return r


def _dag() -> dpb.Dag:
    return dpb.Dag(spec=dpb.DagSpec(name="d", team="a", tasks=[dpb.DagTask(name="a"), dpb.DagTask(name="b", upstream=["a"])]),
                   runs_total=2)


def test_dag_view_before_the_first_run_shows_every_task_not_run_yet():
    v = dags.dag_view(_dag(), [], "", may_clear=True)
    assert v["run_id"] == "" and v["runs"] == [] and v["tasks"] == ["a", "b"]
    assert re.findall(r'data-task="(\w+)" data-state="([^"]+)"', v["svg"]) == [("a", "not run yet"), ("b", "not run yet")]


def test_dag_view_shows_the_chosen_run_and_the_grid_oldest_first():
    old = _run("run-1", "SUCCEEDED", [("a", "SUCCEEDED", []), ("b", "SUCCEEDED", ["a"]), ("gone", "SUCCEEDED", [])])
    new = _run("run-2", "RUNNING", [("a", "FAILED", []), ("b", "PENDING", ["a"])], sla=True)
    v = dags.dag_view(_dag(), [new, old], "", may_clear=False)      # the API lists newest first
    assert v["run_id"] == "run-2" and v["may_clear"] is False
    assert [r["run_id"] for r in v["runs"]] == ["run-1", "run-2"]
    assert v["tasks"] == ["a", "b", "gone"]                        # a task the DAG no longer has, last
    assert v["runs"][1]["tasks"]["a"] == {"state": "FAILED", "execution_id": "d:a@run-2", "attempts": 0, "reason": ""}
    assert v["runs"][1]["sla_missed"] and not v["runs"][0]["sla_missed"]
    assert v["finished"] == ["a"] and v["run_tasks"] == ["a", "b"]
    chosen = dags.dag_view(_dag(), [new, old], "run-1", may_clear=True)
    assert chosen["run_id"] == "run-1" and 'data-task="gone"' in chosen["svg"]
    assert dags.dag_view(_dag(), [new, old], "no-such-run", may_clear=True)["run_id"] == "run-2"


def test_sla_misses_newest_first_from_runs_and_dag_runs():
    e = pb.Execution(id="j@1", job="j", state="SUCCEEDED", events=[pb.ExecutionEvent(time_ms=3, kind="sla_missed")])
    quiet = pb.Execution(id="j@2", job="j", state="FAILED", events=[pb.ExecutionEvent(time_ms=9, kind="retried")])
    misses = cluster.sla_misses([e, quiet], [_run("run-3", "FAILED", [], sla=True)])
    assert [(m["kind"], m["id"]) for m in misses] == [("dag", "run-3"), ("job", "j@1")]


def test_audit_request_from_the_page_filters():
    r = cluster.audit_request({"principal": " token:ab ", "outcome": "denied", "since": "60m", "until": "15m",
                               "before": "42"}, now_ms=10_000_000)
    assert (r.principal, r.outcome, r.since_ms, r.until_ms, r.before_seq) == ("token:ab", "denied", 6_400_000, 9_100_000, 42)
    assert r.newest_first and r.limit == cluster.AUDIT_PAGE + 1
    for bad in ({"outcome": "maybe"}, {"since": "yesterday"}, {"before": "x"}):
        with pytest.raises(ValueError):
            cluster.audit_request(bad, now_ms=0)


def test_audit_page_knows_whether_an_older_page_exists():
    full = acl_pb2.ListAuditResponse(records=[acl_pb2.AuditRecord(seq=s) for s in range(100, 100 - cluster.AUDIT_PAGE - 1, -1)])
    page = cluster.audit_page(full)
    assert len(page["records"]) == cluster.AUDIT_PAGE and page["next"] == str(100 - cluster.AUDIT_PAGE + 1)
    assert cluster.audit_page(acl_pb2.ListAuditResponse(records=[acl_pb2.AuditRecord(seq=1)]))["next"] == ""


def test_audit_select_pages_newest_first():
    records = [U.AuditRecord(seq=i, time_ms=i * 10, principal="p", source="api", action="a", target="t",
                             outcome="allowed", request_id="", log_index=0, detail="", suppressed=0, hash="")
               for i in range(1, 8)]
    assert [r.seq for r in U.select(records, newest_first=True, limit=3)] == [7, 6, 5]
    assert [r.seq for r in U.select(records, newest_first=True, limit=3, before_seq=5)] == [4, 3, 2]
    assert [r.seq for r in U.select(records, until_ms=30)] == [1, 2]


def test_leader_changes_merge_every_nodes_record_newest_first():
    status = pb.ClusterStatus(nodes=[
        pb.NodeStatus(id="n1", leader_terms=[pb.LeaderTerm(term=1, since_ms=100, until_ms=200)]),
        pb.NodeStatus(id="n2", leader_terms=[pb.LeaderTerm(term=2, since_ms=210)])])
    assert [(c["node"], c["term"], c["until_ms"]) for c in leader_changes(status)] == [("n2", 2, 0), ("n1", 1, 200)]


def test_quota_and_worker_rows():
    assert cluster.quota_row(pb.Quota(key="pool:gpu", limit=4, running=3))["use"] == 0.75
    assert cluster.quota_row(pb.Quota(key="team:a", limit=0, running=3))["use"] == 0.0
    w = cluster.worker_row(pb.WorkerInfo(name="w1", slots=2, labels={"z": "1", "a": "2"}, handlers=["http", "shell"],
                                         running=["j@1"]))
    assert list(w["labels"]) == ["a", "z"] and w["handlers"] == ["http", "shell"] and w["running"] == ["j@1"]
