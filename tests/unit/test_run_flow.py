"""Run flow in the pure state machine: run parameters on a trigger and a DAG run (checked,
recorded, gated by the feature level), a retry of a finished run, and clearing a DAG run's task
with what depends on it. Every case calls apply; time is injected."""

from __future__ import annotations

import json

import pytest

from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core import params as P
from schedd.core.model import FAILED, RUNNING, SCHEDULED, SUCCEEDED, UPSTREAM_FAILED, ValidationError
from tests.support.state import TOP_LEVEL, DagHarness, Harness, dag, task


def _finish(h: Harness, name: str, t: int, state: str = SUCCEEDED, worker: str = "w1") -> int:
    ex = h.state.execs[(name, t)]
    claim = h.apply(C.START, job=name, scheduled_ms=t, attempt=len(ex.attempts) + 1, worker=worker)
    assert claim.ok, claim.msg
    token = claim.payload.token
    assert h.apply(C.FINISH, job=name, scheduled_ms=t, token=token, state=state, exit_code=1).ok
    return int(token)


# ------------------------------------------------------------------ params


@pytest.mark.parametrize("bad, message", [
    ({"9lives": "x"}, "bad param name '9lives'"),
    ({"a-b": "x"}, "bad param name 'a-b'"),
    ({"a" * 65: "x"}, "at most 64 characters"),
    ({"n": 3}, "param 'n' must be a string"),
    ({"n": "x" * 4097}, "too long (4097 bytes, at most 4096)"),
    ({"date": "1", "DATE": "2"}, "differ only in case"),
    ({f"p{i}": "x" for i in range(65)}, "too many params: 65"),
    ({f"p{i}": "x" * 4000 for i in range(5)}, "params are too large"),
    (["a=b"], "params must be a map"),
])
def test_bad_params_are_refused_with_what_is_wrong(bad, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        P.check(bad)


def test_a_trigger_records_its_params_on_the_run():
    h = Harness(level=TOP_LEVEL)
    assert h.put(name="report", schedule="").ok
    r = h.apply(C.TRIGGER, name="report", **P.entry_args({"date": "2027-01-01", "mode": "full"}))
    assert r.ok, r.msg
    ex = h.state.execs[("report", r.payload.scheduled_ms)]
    assert P.of_events(ex.events) == {"date": "2027-01-01", "mode": "full"}
    assert json.loads(C.encode(C.TRIGGER, rid="", now=1, term=1, **P.entry_args({"a": "b"})))["fl"] == P.PARAMS_FEATURE_LEVEL
    # no params: the entry and the run are what they were
    r2 = h.apply(C.TRIGGER, name="report", **P.entry_args({}))
    assert r2.ok and h.state.execs[("report", r2.payload.scheduled_ms)].events == ()


def test_a_trigger_with_bad_params_commits_nothing():
    h = Harness(level=TOP_LEVEL)
    assert h.put(name="report", schedule="").ok
    r = h.apply(C.TRIGGER, name="report", params={"bad name": "x"}, fl=P.PARAMS_FEATURE_LEVEL)
    assert not r.ok and r.code == "invalid" and "bad param name 'bad name'" in r.msg
    assert not h.state.execs and not h.state.by_job.get("report")


def test_params_need_the_feature_level_and_an_unstamped_entry_ignores_them():
    h = Harness(level=6)                     # a cluster mid rolling upgrade
    assert h.put(name="report", schedule="").ok
    r = h.apply(C.TRIGGER, name="report", **P.entry_args({"a": "b"}))
    assert not r.ok and r.code == "feature_level" and "needs feature level 7" in r.msg
    # a hand-made entry without the stamp: read as a build without params reads it
    r = h.apply(C.TRIGGER, name="report", params={"a": "b"})
    assert r.ok and h.state.execs[("report", r.payload.scheduled_ms)].events == ()


def test_dag_run_params_reach_every_task_run():
    h = DagHarness()
    assert h.apply(C.FEATURE_LEVEL, level=TOP_LEVEL).ok
    assert h.put(dag()).ok
    r = h.apply(C.DAG_RUN, name="etl", **P.entry_args({"day": "monday"}))
    assert r.ok, r.msg
    run = h.state.dag_runs[("etl", r.payload.logical_ms)]
    assert P.of_events(run.events) == {"day": "monday"}
    assert h.finish(run, "extract").ok
    assert P.of_events(h.ex(run, "transform").events) == {"day": "monday"}


# ------------------------------------------------------------------ run retry


def test_retry_starts_a_new_attempt_of_a_failed_run_with_a_new_token():
    h = Harness(level=TOP_LEVEL)
    assert h.put(name="report", schedule="").ok
    t = h.apply(C.TRIGGER, name="report").payload.scheduled_ms
    first = _finish(h, "report", t, FAILED)
    ex = h.state.execs[("report", t)]
    assert ex.state == FAILED
    h.now += 5_000
    r = h.apply(C.RUN_RETRY, job="report", scheduled_ms=t)
    assert r.ok and r.payload.attempt == 2
    assert ex.state == SCHEDULED and ex.id == "report@2027-01-15T08:00:00Z"
    assert ex.events[-1].kind == "retry" and "requested by test" in ex.events[-1].message
    second = _finish(h, "report", t, SUCCEEDED)
    assert second != first and ex.state == SUCCEEDED and [a.number for a in ex.attempts] == [1, 2]


def test_retry_refuses_a_run_under_way_a_dag_task_and_one_not_held():
    h = Harness(level=TOP_LEVEL)
    assert h.put(name="report", schedule="").ok
    t = h.apply(C.TRIGGER, name="report").payload.scheduled_ms
    r = h.apply(C.RUN_RETRY, job="report", scheduled_ms=t)
    assert not r.ok and r.code == "conflict" and "only a finished run can be retried" in r.msg
    assert h.apply(C.START, job="report", scheduled_ms=t, attempt=1, worker="w").ok
    assert h.state.execs[("report", t)].state == RUNNING
    assert h.apply(C.RUN_RETRY, job="report", scheduled_ms=t).code == "conflict"
    gone = h.apply(C.RUN_RETRY, job="report", scheduled_ms=t - 60_000)
    assert gone.code == "not_found" and "is in history only; retry the latest run or trigger the job" in gone.msg
    assert h.apply(C.RUN_RETRY, job="nope", scheduled_ms=t).code == "not_found"
    dag_task = h.apply(C.RUN_RETRY, job="etl:load", scheduled_ms=t)
    assert dag_task.code == "invalid" and "dag clear" in dag_task.msg


def test_retry_is_a_level_7_kind():
    h = Harness(level=6)
    r = h.apply(C.RUN_RETRY, job="report", scheduled_ms=1)
    assert r.code == "feature_level" and "needs feature level 7" in r.msg


# ------------------------------------------------------------------ dag clear


def _failed_run() -> tuple[DagHarness, D.DagRun]:
    h = DagHarness()
    assert h.apply(C.FEATURE_LEVEL, level=TOP_LEVEL).ok
    assert h.put(dag(tasks=[task("extract"), task("transform", "extract"), task("load", "transform"),
                            task("report", "extract")])).ok
    run = h.run()
    assert h.finish(run, "extract").ok
    assert h.finish(run, "transform", "FAILED").ok
    assert h.finish(run, "report").ok
    assert run.state == D.RUN_FAILED and h.states(run)["load"] == UPSTREAM_FAILED
    return h, run


def test_clear_downstream_reruns_the_task_and_what_depends_on_it():
    h, run = _failed_run()
    r = h.apply(C.DAG_CLEAR, name="etl", logical_ms=run.logical_ms, task="transform", downstream=True)
    assert r.ok, r.msg
    assert tuple(r.payload.tasks) == ("transform", "load")
    assert run.state == D.RUN_RUNNING
    assert h.states(run) == {"extract": SUCCEEDED, "transform": SCHEDULED, "load": D.PENDING, "report": SUCCEEDED}
    assert run.events[-1].kind == "cleared" and "transform, load cleared by t" in run.events[-1].message
    assert h.finish(run, "transform").ok
    assert h.states(run)["load"] == SCHEDULED
    assert h.finish(run, "load").ok
    assert run.state == D.RUN_SUCCEEDED


def test_clear_without_downstream_leaves_the_doomed_tasks_as_they_are():
    h, run = _failed_run()
    r = h.apply(C.DAG_CLEAR, name="etl", logical_ms=run.logical_ms, task="transform")
    assert r.ok and tuple(r.payload.tasks) == ("transform",)
    assert h.finish(run, "transform").ok
    assert h.states(run)["load"] == UPSTREAM_FAILED and run.state == D.RUN_FAILED


def test_clear_refuses_what_cannot_be_cleared_and_changes_nothing():
    h, run = _failed_run()
    t = run.logical_ms
    before = h.states(run), run.state, len(h.state.execs)
    assert h.apply(C.DAG_CLEAR, name="etl", logical_ms=t, task="nope").code == "not_found"
    assert h.apply(C.DAG_CLEAR, name="etl", logical_ms=t + 1, task="load").code == "not_found"
    assert h.apply(C.DAG_CLEAR, name="etl", logical_ms=t, task=3).code == "invalid"
    assert (h.states(run), run.state, len(h.state.execs)) == before
    other = h.run()
    busy = h.apply(C.DAG_CLEAR, name="etl", logical_ms=other.logical_ms, task="extract")
    assert busy.code == "conflict" and "has not ended" in busy.msg


def test_clear_refuses_while_a_chosen_task_is_under_way():
    h, run = _failed_run()
    assert h.apply(C.DAG_CLEAR, name="etl", logical_ms=run.logical_ms, task="transform").ok
    h.start(run, "transform")
    r = h.apply(C.DAG_CLEAR, name="etl", logical_ms=run.logical_ms, task="extract", downstream=True)
    assert r.code == "conflict" and "transform" in r.msg and "still under way" in r.msg


# ------------------------------------------------------------------ a job's default params


def test_a_jobs_default_params_ride_on_every_run_and_a_trigger_overrides_them():
    h = Harness(level=TOP_LEVEL)
    assert h.put(name="sync", schedule="@every 10s", params={"region": "eu", "mode": "full"}).ok
    fired = h.plan_and_fire()
    (name, t, code), = fired
    assert code == "created"
    assert P.of_events(h.state.execs[(name, t)].events) == {"region": "eu", "mode": "full"}
    r = h.apply(C.TRIGGER, name="sync", **P.entry_args({"region": "us"}))
    assert P.of_events(h.state.execs[("sync", r.payload.scheduled_ms)].events) == {"region": "us", "mode": "full"}


def test_default_params_are_read_only_at_the_params_level():
    """Below level 7 an older build applies the fire too, and knows nothing of defaults: a run
    records none there, on every replica alike."""
    h = Harness(level=6)
    assert h.put(name="sync", schedule="@every 10s", params={"region": "eu"}).ok    # a hand-made put
    (name, t, _), = h.plan_and_fire()
    assert h.state.execs[(name, t)].events == ()


def test_bad_default_params_are_refused_at_validation():
    from schedd.core.model import canonical_spec
    with pytest.raises(ValidationError, match="bad param name 'a b'"):
        canonical_spec({"name": "j", "schedule": "", "handler": {"shell": {"command": "true"}}, "params": {"a b": "x"}})
