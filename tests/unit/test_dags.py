"""DAGs in the pure state machine: validation, run progression, trigger rules, UPSTREAM_FAILED
propagation, sensors, retention, and snapshot/restore. Time is injected (no sleeping)."""

from __future__ import annotations

import pickle

import pytest

from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core.model import ValidationError, parse_execution_id
from schedd.core.specs import dump
from schedd.core.state import SchedulerState
from schedd.leader.planner import plan_fires
from tests.support.state import DagHarness as Harness
from tests.support.state import dag, task

T0 = 1_800_000_000_000          # 2027-01-15T08:00:00Z
SHELL = {"shell": {"command": "true"}}


# ------------------------------------------------------------------ validation


def test_cycle_is_refused_and_named():
    d = dag(tasks=[task("a", "c"), task("b", "a"), task("c", "b"), task("d")])
    with pytest.raises(ValidationError, match=r"cycle: (a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)"):
        D.canonical_dag(d)
    with pytest.raises(ValidationError, match="cycle: a -> a"):
        D.canonical_dag(dag(tasks=[task("a", "a")]))


def test_unknown_upstream_and_duplicate_task_are_refused():
    with pytest.raises(ValidationError, match="task 'load' has unknown upstream 'transfrom'"):
        D.canonical_dag(dag(tasks=[task("extract"), task("load", "transfrom")]))
    with pytest.raises(ValidationError, match="duplicate task name 'extract'"):
        D.canonical_dag(dag(tasks=[task("extract"), task("extract")]))


@pytest.mark.parametrize("bad, message", [
    (dag(name="Bad Name"), "bad DAG name"),
    (dag(tasks=[]), "has no tasks"),
    (dag(tasks=[task("a:b")]), "bad task name"),
    (dag(tasks=[task("a", handler={})]), "exactly one handler"),
    (dag(tasks=[task("a", trigger_rule="sometimes")]), "trigger_rule must be one of"),
    (dag(tasks=[{"name": "s", "sensor": {"file": "/x", "http_url": "http://h"}}]), "exactly one of file"),
    (dag(tasks=[{"name": "s", "sensor": {"file": "relative"}}]), "absolute path"),
    (dag(tasks=[{"name": "s", "sensor": {"file": "/x", "poll_interval_seconds": 0.1,
                                          "timeout_seconds": 86400}}]), "polls"),
    (dag(schedule="not cron"), "DAG 'etl'"),
    (dag(timezone="Mars/Base"), "DAG 'etl'"),
])
def test_bad_dags_are_refused(bad, message):
    with pytest.raises(ValidationError, match=message):
        D.canonical_dag(bad)


def test_canonical_form_is_stable_and_apply_rechecks():
    spec, text = D.canonical_dag(dag(tasks=[task("b", "a", trigger_rule="all_done"), task("a")]))
    assert spec.to_dict()["tasks"][0] == {"name": "b", "handler": SHELL, "upstream": ["a"], "trigger_rule": "all_done"}
    assert D.canonical_dag(spec.to_dict())[1] == text
    h = Harness()
    # A proposer that skipped validation: apply refuses a cyclic graph, and nothing changes.
    bad = dump({"name": "x", "team": "default", "schedule": "", "timezone": "UTC",
                "tasks": [{"name": "a", "handler": SHELL, "upstream": ["a"]}]})
    r = h.apply(C.DAG_PUT, spec=bad)
    assert not r.ok and r.code == "invalid" and not h.state.dags and not h.state.jobs


def test_job_calls_on_dag_rows_are_refused():
    h = Harness()
    assert h.put(dag()).ok
    for kind in (C.TRIGGER, C.DELETE, C.PAUSE):
        r = h.apply(kind, name="etl:load")
        assert not r.ok and "part of DAG 'etl'" in r.msg
    with pytest.raises(ValidationError, match="part of DAG 'etl'"):
        D.canonical_spec({"name": "etl:load", "handler": SHELL})
    assert parse_execution_id("etl:load@2027-01-15T08:00:00Z") == ("etl:load", T0)


# ------------------------------------------------------------------ runs


def test_run_progresses_in_order_with_no_polling():
    h = Harness()
    r = h.put(dag())
    assert r.as_dict() == {"ok": True, "code": "ok", "created": True, "name": "etl", "version": 1}
    assert sorted(h.state.jobs) == ["etl:extract", "etl:load", "etl:transform"]
    run = h.run()
    assert run.run_id == "etl@2027-01-15T08:00:00Z" and run.state == "RUNNING"
    assert h.states(run) == {"extract": "SCHEDULED", "transform": "PENDING", "load": "PENDING"}
    assert run.pending == {"extract": 0, "transform": 1, "load": 1}
    h.now += 1000
    h.finish(run, "extract")
    assert h.states(run) == {"extract": "SUCCEEDED", "transform": "SCHEDULED", "load": "PENDING"}
    assert h.ex(run, "transform").trigger == "dag"
    h.now += 1000
    h.finish(run, "transform")
    h.now += 1000
    h.finish(run, "load")
    assert h.states(run) == dict.fromkeys(run.order, "SUCCEEDED")
    assert run.state == "SUCCEEDED" and run.ended_ms == h.now
    # a second run at the same instant gets its own logical time
    run2 = h.run()
    assert run2.logical_ms == h.now and run2.run_id != run.run_id


def test_retry_then_success_keeps_the_run_going():
    h = Harness()
    h.put(dag(tasks=[task("a", retry={"max_attempts": 2, "initial_backoff_seconds": 1}), task("b", "a")]))
    run = h.run()
    h.finish(run, "a", state="FAILED", error="boom")
    assert h.ex(run, "a").state == "RETRY_WAIT" and h.states(run)["b"] == "PENDING"
    h.now += 2000
    h.finish(run, "a")
    assert h.states(run) == {"a": "SUCCEEDED", "b": "SCHEDULED"}


def test_failure_marks_every_downstream_upstream_failed():
    h = Harness()
    h.put(dag(tasks=[task("a"), task("b", "a"), task("c", "b"), task("d", "c"), task("side", "a")]))
    run = h.run()
    h.finish(run, "a")
    h.finish(run, "b", state="FAILED", error="exit status 1")
    s = h.states(run)
    assert s == {"a": "SUCCEEDED", "b": "FAILED", "c": "UPSTREAM_FAILED", "d": "UPSTREAM_FAILED",
                 "side": "SCHEDULED"}
    assert h.ex(run, "c").reason == "upstream b ended FAILED"
    assert h.ex(run, "d").reason == "upstream c ended UPSTREAM_FAILED"
    assert run.state == "RUNNING"          # side is still under way
    h.finish(run, "side")
    assert run.state == "FAILED"


def test_trigger_rules():
    h = Harness()
    h.put(dag(tasks=[
        task("a"), task("b"),
        task("cleanup", "a", "b", trigger_rule="all_done"),
        task("alert", "a", "b", trigger_rule="one_failed"),
        task("report", "a", "b"),
    ]))
    run = h.run()
    h.finish(run, "a", state="FAILED")
    s = h.states(run)
    # one_failed runs at once; all_success is doomed at once; all_done waits for b
    assert s["alert"] == "SCHEDULED" and s["report"] == "UPSTREAM_FAILED" and s["cleanup"] == "PENDING"
    h.finish(run, "b")
    assert h.states(run)["cleanup"] == "SCHEDULED"
    h.finish(run, "cleanup")
    h.finish(run, "alert")
    assert run.state == "FAILED"

    # nothing failed: one_failed is SKIPPED, and the run still succeeds
    h.now += 10
    run = h.run()
    h.finish(run, "a")
    h.finish(run, "b")
    s = h.states(run)
    assert s["alert"] == "SKIPPED" and s["cleanup"] == "SCHEDULED" and s["report"] == "SCHEDULED"
    h.finish(run, "cleanup")
    h.finish(run, "report")
    assert run.state == "SUCCEEDED"


def test_cancelled_task_fails_its_downstream():
    h = Harness()
    h.put(dag(tasks=[task("a"), task("b", "a")]))
    run = h.run()
    ex = h.ex(run, "a")
    assert h.apply(C.CANCEL, job=ex.job, scheduled_ms=ex.scheduled_ms).ok
    assert h.states(run) == {"a": "CANCELLED", "b": "UPSTREAM_FAILED"} and run.state == "FAILED"


def test_scheduled_dag_fires_through_the_wheel():
    h = Harness()
    assert h.put(dag(schedule="*/10 * * * * *")).ok
    row = h.state.jobs["etl:"]
    assert row.next_fire == T0
    h.apply(C.FIRE, items=[["etl:", T0]])
    h.now = T0 + 10_000
    items = plan_fires(h.state, h.now, 0, limit=10)
    assert items == [("etl:", T0 + 10_000)]
    h.apply(C.FIRE, items=[list(i) for i in items])
    run = h.state.dag_runs[("etl", T0 + 10_000)]
    assert run.trigger == "schedule" and h.states(run)["extract"] == "SCHEDULED"
    marker = h.state.execs[("etl:", T0 + 10_000)]
    assert marker.state == "SUCCEEDED" and marker.reason == f"started DAG run {run.run_id}"
    # a duplicate fire is a no-op
    h.apply(C.FIRE, items=[["etl:", T0 + 10_000]])
    assert len(h.state.dag_runs) == 2
    # unscheduling removes the row
    assert h.put(dag()).ok and "etl:" not in h.state.jobs and h.state.dags["etl"].version == 2


def test_redefinition_while_running_and_delete():
    h = Harness()
    h.put(dag())
    run = h.run()
    r = h.put(dag(tasks=[task("extract"), task("transform", "extract")]))
    assert not r.ok and r.code == "conflict" and "load" in r.msg
    # adding a task and changing a handler is fine; the running run keeps its own graph
    r = h.put(dag(tasks=[task("extract", handler={"shell": {"command": "echo v2"}}),
                         task("transform", "extract"), task("load", "transform"), task("extra", "load")]))
    assert r.ok and r.payload.version == 2
    assert "v2" in h.state.jobs["etl:extract"].spec_text and run.order == ("extract", "transform", "load")
    for t in run.order:
        h.finish(run, t)
    assert run.state == "SUCCEEDED"
    assert h.apply(C.DAG_DELETE, name="etl").ok
    assert not h.state.jobs and not h.state.execs and not h.state.dag_runs and not h.state.dags
    assert h.apply(C.DAG_DELETE, name="etl").code == "not_found"


def test_retention_keeps_the_last_runs():
    h = Harness()
    h.put(dag(tasks=[task("a")], max_runs=3))
    runs = []
    for _ in range(5):
        h.now += 1000
        runs.append(h.run())
        h.finish(runs[-1], "a")
    assert D.runs_of(h.state, "etl") == [r.logical_ms for r in runs[-3:]]
    assert len(h.state.by_job["etl:a"]) == 3
    assert h.state.dags["etl"].runs_total == 5
    # running runs are never pruned
    h.now += 1000
    live = [h.run() for _ in range(4)]
    assert all((r.dag, r.logical_ms) in h.state.dag_runs for r in live)


# ------------------------------------------------------------------ sensors


def sensor_dag(name="etl", **sensor):
    return dag(name=name, tasks=[{"name": "wait", "sensor": {"file": "/data/ready", **sensor}}, task("load", "wait")])


def test_sensor_not_ready_waits_without_consuming_attempts_then_succeeds():
    h = Harness()
    h.put(sensor_dag(poll_interval_seconds=5, timeout_seconds=60))
    assert '"sensor"' in h.state.jobs["etl:wait"].spec_text
    run = h.run()
    for i in range(3):
        r = h.finish(run, "wait", state=D.NOT_READY, error="/data/ready does not exist")
        ex = h.ex(run, "wait")
        assert r.ok and ex.state == "RETRY_WAIT" and ex.retry_at == h.now + 5000, r
        assert ex.attempts[-1].state == "NOT_READY" and "poll" in ex.reason
        h.now += 5000
    h.finish(run, "wait")
    ex = h.ex(run, "wait")
    assert ex.state == "SUCCEEDED" and len(ex.attempts) == 4
    assert h.states(run)["load"] == "SCHEDULED"


def test_malformed_sensor_poll_is_refused_before_it_changes_the_attempt():
    """The sensor's NOT_READY takes the same checked path as any result (schedd.core.attempts)."""
    h = Harness()
    h.put(sensor_dag(poll_interval_seconds=5, timeout_seconds=60))
    run = h.run()
    r = h.finish(run, "wait", state=D.NOT_READY, started_ms="soon")
    ex = h.ex(run, "wait")
    assert r.ok is False and r.code == "invalid", r
    assert ex.state == "RUNNING" and ex.attempts[-1].state == "RUNNING"


def test_sensor_times_out_from_the_first_poll():
    h = Harness()
    h.put(sensor_dag(poll_interval_seconds=10, timeout_seconds=25))
    run = h.run()
    first = h.now
    h.finish(run, "wait", state=D.NOT_READY)
    h.now += 10_000
    h.finish(run, "wait", state=D.NOT_READY)
    h.now += 10_000
    h.finish(run, "wait", state=D.NOT_READY)
    assert h.ex(run, "wait").retry_at == first + 25_000          # the last poll lands on the deadline
    h.now = first + 25_000
    h.finish(run, "wait", state=D.NOT_READY)
    ex = h.ex(run, "wait")
    assert ex.state == "TIMED_OUT" and "sensor timed out" in ex.reason
    assert h.states(run)["load"] == "UPSTREAM_FAILED" and run.state == "FAILED"


def test_not_ready_from_a_plain_task_or_a_stale_token_is_refused():
    h = Harness()
    h.put(dag(tasks=[task("a")]))
    run = h.run()
    r = h.finish(run, "a", state=D.NOT_READY)
    assert not r.ok and "not a sensor" in r.msg
    h.put(sensor_dag("sense"))
    run = h.run("sense")
    ex = h.ex(run, "wait")
    h.start(run, "wait")
    r = h.apply(C.FINISH, job=ex.job, scheduled_ms=ex.scheduled_ms, token=1, state=D.NOT_READY)
    assert r.code == "stale"


# ------------------------------------------------------------------ replicas and snapshots


def _script(h: Harness) -> None:
    h.put(dag(schedule="@every 10s"))
    h.put(sensor_dag("sense"))
    h.put(dag(name="other", tasks=[task("x"), task("y", "x", trigger_rule="all_done")]))
    run = h.run()
    h.finish(run, "extract")
    h.finish(run, "transform", state="FAILED")
    run2 = h.run("other")
    h.finish(run2, "x")


def test_snapshot_restore_roundtrip_including_dags():
    a = Harness()
    _script(a)
    b = SchedulerState()
    b.restore(pickle.loads(pickle.dumps(a.state.snapshot(), protocol=2)))
    assert set(b.dags) == {"etl", "other", "sense"} and len(b.dag_runs) == 2
    assert b.dag_run_times == a.state.dag_run_times
    for key, run in a.state.dag_runs.items():
        assert b.dag_runs[key].states == run.states and b.dag_runs[key].pending == run.pending
    assert b.jobs["etl:"].next_fire == a.state.jobs["etl:"].next_fire
    assert "etl:" in {name for _, name in b.wheel.due(2 ** 62)}
    # the restored replica keeps agreeing with the original on what follows
    twin = Harness.__new__(Harness)
    twin.state, twin.index, twin.now, twin.term, twin.entries = b, a.index, a.now, a.term, []
    run_a = a.state.dag_runs[("other", max(D.runs_of(a.state, "other")))]
    run_b = b.dag_runs[("other", run_a.logical_ms)]
    a.finish(run_a, "y")
    twin.finish(run_b, "y")
    assert run_b.state == run_a.state == "SUCCEEDED"
    assert b.log_hash_hex() == a.state.log_hash_hex()


def test_replicas_agree():
    a, b = Harness(), Harness()
    _script(a)
    _script(b)
    assert a.state.log_hash_hex() == b.state.log_hash_hex()
    assert pickle.dumps(a.state.dag_runs) == pickle.dumps(b.state.dag_runs)


# ------------------------------------------------------------------ the SDK document and the CLI view


def test_dag_document_roundtrip_and_errors():
    from schedd_client import ValidationError as ClientValidationError
    from schedd_client.dags import dag_from_dict, dag_to_dict
    doc = {"name": "etl", "schedule": "0 2 * * *", "timezone": "Europe/Berlin", "tasks": [
        {"name": "wait", "sensor": {"file": "/data/ready", "poll_interval": "30s", "timeout": "2h"}},
        {"name": "extract", "upstream": ["wait"], "command": "./extract.sh",
         "retry": {"max_attempts": 3}, "timeout": 600},
        {"name": "notify", "upstream": ["extract"], "trigger_rule": "all_done",
         "http": {"url": "https://hooks.example.com/x"}},
    ]}
    spec = dag_from_dict(doc)
    assert spec.tasks[0].sensor.timeout_seconds == 7200 and spec.tasks[1].timeout_seconds == 600
    assert dag_to_dict(spec) == doc
    # the server's validation accepts what the document gives, in canonical form
    from google.protobuf.json_format import MessageToDict
    canon, _ = D.canonical_dag(MessageToDict(spec, preserving_proto_field_name=True))
    assert canon.to_dict()["tasks"][0]["handler"] == {"sensor": {"file": "/data/ready", "poll_interval_seconds": 30,
                                                       "timeout_seconds": 7200}}
    with pytest.raises(ClientValidationError, match="unknown key 'upstreams'"):
        dag_from_dict({"name": "x", "tasks": [{"name": "a", "command": "true", "upstreams": ["b"]}]})


def test_show_renders_layers_with_states():
    from schedd.api.dag_convert import run_to_pb
    from schedd_client.dag_commands import render_run
    h = Harness()
    h.put(dag(tasks=[task("extract"), task("transform", "extract"), task("load", "transform"),
                     task("cleanup", "transform", trigger_rule="all_done")]))
    run = h.run()
    h.finish(run, "extract")
    h.finish(run, "transform", state="FAILED", error="exit status 3")
    text = render_run(run_to_pb(h.state, run), lambda: h.now / 1000)
    lines = text.splitlines()
    assert lines[0].startswith("run etl@2027-01-15T08:00:00Z  RUNNING")
    assert lines[1].split()[:3] == ["●", "extract", "✓"]
    assert "└─ transform" in lines[2] and "FAILED" in lines[2]
    assert lines[3].index("load") > lines[2].index("transform")          # one layer deeper
    assert "UPSTREAM_FAILED" in lines[3] and "upstream transform ended FAILED" in lines[3]
    assert "SCHEDULED" in lines[4] and "all_done" in lines[4]
