"""SLAs of DAG runs in the pure state machine: validation (the job SLA's rules), the deadline from
the run's logical time, a miss when still running / failed / succeeded late, recorded once through
the ``sla`` entry, stale term refused, snapshot round trip, the leader's driver (metric under the
DAG's name, one webhook POST with ``dag`` and ``run_id``) and the SDK/CLI views. Time is injected."""

from __future__ import annotations

import asyncio
import pickle
import threading
from http.server import HTTPServer

import pytest

from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core import sla as S
from schedd.core.model import ValidationError
from schedd.core.schedule import parse_time
from schedd.core.state import SchedulerState
from schedd.leader import sla as L
from schedd_client.net.policy import make_policy
from tests.support.env import TestEnv
from tests.support.leader import Hook
from tests.support.state import DagHarness, dag

LOOPBACK_OK = make_policy(allow=["127.0.0.1"])   # the webhook receiver is on loopback

T0 = parse_time("2026-06-01T03:00:00Z")        # 05:00 in Berlin


class Harness(DagHarness):
    """The DAG harness at T0, proposing `sla` entries."""

    def __init__(self) -> None:
        super().__init__()
        self.now = T0

    def sla(self, miss: L.Miss, term: int | None = None, rid: str = "") -> dict:
        return self.apply(C.SLA, rid=rid or miss.rid, term=term, dag=miss.dag, logical_ms=miss.scheduled_ms,
                          deadline_ms=miss.deadline_ms, sla=miss.sla)


def with_sla(h: Harness, name="etl", **sla) -> D.DagRun:
    assert h.put(dag(name=name, sla=sla)).ok
    return h.run(name)


# ---------------------------------------------------------------- validation and deadlines


@pytest.mark.parametrize("bad,fragment", [
    ({"by": "6am"}, "sla.by must be a wall time HH:MM"),
    ({"within_seconds": -1}, "within_seconds must be between"),
    ({"within": 3600}, "unknown sla field 'within'"),
    ({"webhook": "ftp://x"}, "sla.webhook must start with http"),
    ({"webhook": "http://x/"}, "sla needs within_seconds or by"),
    ({"within_seconds": 60, "timezone": "Mars/Base"}, "sla.timezone"),
])
def test_a_dag_sla_is_validated_like_a_jobs(bad, fragment):
    with pytest.raises(ValidationError, match=fragment):
        D.canonical_dag(dag(sla=bad))


def test_canonical_dag_keeps_the_sla_and_apply_rechecks_it():
    spec, text = D.canonical_dag(dag(sla={"within_seconds": 7200.0, "by": "06:00", "webhook": "http://h/"}))
    assert spec.to_dict()["sla"] == {"within_seconds": 7200, "by": "06:00", "webhook": "http://h/"}
    assert D.canonical_dag(dag())[0].sla is None and "sla" not in D.canonical_dag(dag())[1]
    h = Harness()
    bad = text.replace('"by":"06:00"', '"by":"6am"')
    r = h.apply(C.DAG_PUT, spec=bad)
    assert r.code == "invalid" and "sla" in r.msg and "etl" not in h.state.dags
    assert h.apply(C.DAG_PUT, spec=text).ok
    # the task rows carry no SLA: the run has it, not each task
    assert not any(h.state.jobs[D.task_job("etl", t)].spec.sla for t in ("extract", "load"))


def test_deadline_counts_from_the_logical_time():
    h = Harness()
    run = with_sla(h, within_seconds=7200)
    assert S.run_deadline(h.state, run) == run.logical_ms + 7_200_000
    assert list(h.state.sla_watch) == [(run.logical_ms + 7_200_000, "dag/etl", run.logical_ms)]
    # by: in the DAG's zone unless the SLA names one; the first 06:00 at or after the logical time
    h.put(dag(name="berlin", timezone="Europe/Berlin", sla={"by": "06:00"}))
    assert S.run_deadline(h.state, h.run("berlin")) == parse_time("2026-06-01T04:00:00Z")
    h.put(dag(name="ny", timezone="Europe/Berlin", sla={"by": "06:00", "timezone": "America/New_York"}))
    assert S.run_deadline(h.state, h.run("ny")) == parse_time("2026-06-01T10:00:00Z")
    # a scheduled run that starts late (catch-up) still counts from its logical instant
    h.put(dag(name="sched", schedule="0 * * * *", sla={"within_seconds": 60}))
    logical = parse_time("2026-06-01T03:00:00Z")
    h.now = logical + 30 * 60_000
    h.apply(C.FIRE, items=[["sched:", logical]])
    run = h.state.dag_runs[("sched", logical)]
    assert S.run_deadline(h.state, run) == logical + 60_000
    [miss] = [m for m in L.due_misses(h.state, h.now) if m.dag == "sched"]
    assert miss.scheduled_ms == logical and miss.execution_id == run.run_id


def test_dags_without_sla_are_not_indexed():
    h = Harness()
    assert h.put(dag()).ok
    run = h.run()
    assert not h.state.sla_watch and S.run_deadline(h.state, run) is None


# ---------------------------------------------------------------- verdicts and the entry


def test_still_running_at_the_deadline_is_one_miss_recorded_once():
    h = Harness()
    run = with_sla(h, within_seconds=60, webhook="http://127.0.0.1:1/hook")
    h.finish(run, "extract")
    assert L.due_misses(h.state, T0 + 59_999) == []
    h.now = T0 + 61_000
    [miss] = L.due_misses(h.state, h.now)
    assert (miss.dag, miss.job, miss.scheduled_ms, miss.deadline_ms, miss.state) == \
        ("etl", "etl", run.logical_ms, T0 + 60_000, "RUNNING")
    assert miss.rid == f"sla-dag/{run.run_id}" and miss.sla == "within 1m"
    assert miss.webhook == "http://127.0.0.1:1/hook"
    r = h.sla(miss)
    assert r.ok and r.payload.run_id == run.run_id and r.payload.state == "RUNNING"
    assert not {"name", "scheduled_ms", "items", "epoch"} & set(r.as_dict())      # the dispatcher's hook ignores it
    [ev] = run.events
    assert ev.kind == "sla_missed" and ev.time_ms == h.now
    assert "within 1m" in ev.message and "still RUNNING at the deadline" in ev.message
    assert not h.state.sla_watch and L.due_misses(h.state, h.now + 60_000) == []
    assert h.sla(miss).deduplicated and len(run.events) == 1     # same rid
    other = h.sla(miss, rid="sla-other")                                 # another rid: still once
    assert other.code == "recorded" and len(run.events) == 1
    h.finish(run, "transform")
    h.finish(run, "load")                                                # the late success adds nothing
    assert run.state == "SUCCEEDED" and len(run.events) == 1
    # no task execution got an event: the miss is the run's
    assert not any(h.ex(run, t).events for t in run.order)


def test_failed_and_late_success_are_misses_and_in_time_is_not():
    h = Harness()
    failed = with_sla(h, "failed", within_seconds=60)
    late = with_sla(h, "late", within_seconds=60)
    ok = with_sla(h, "ok", within_seconds=60)
    h.finish(failed, "extract", state="FAILED")                # downstream UPSTREAM_FAILED: the run FAILED
    assert failed.state == "FAILED" and L.due_misses(h.state, h.now) == []     # not before the deadline
    for t in ok.order:
        h.finish(ok, t)
    h.now = T0 + 90_000                                        # the detector did not run in time
    for t in late.order:
        h.finish(late, t)
    assert ok.state == late.state == "SUCCEEDED"
    misses = {m.dag: m for m in L.due_misses(h.state, h.now)}
    assert set(misses) == {"failed", "late"}
    assert misses["failed"].state == "FAILED" and "ended FAILED" in misses["failed"].message
    assert misses["late"].state == "SUCCEEDED" and "30s after the deadline" in misses["late"].message
    for m in misses.values():
        assert h.sla(m).ok
    assert [e.kind for e in failed.events] == [e.kind for e in late.events] == ["sla_missed"]
    assert not ok.events and L.due_misses(h.state, h.now) == []
    # a verdict proposed for the run that succeeded in time is refused by apply
    r = h.apply(C.SLA, rid="x", dag="ok", logical_ms=ok.logical_ms, deadline_ms=T0 + 60_000)
    assert r.code == "met" and not ok.events


def test_not_yet_due_unknown_run_and_bad_args_are_refused():
    h = Harness()
    run = with_sla(h, within_seconds=60)
    r = h.apply(C.SLA, rid="early", dag="etl", logical_ms=run.logical_ms, deadline_ms=T0 + 60_000)
    assert r.code == "pending" and h.state.sla_watch                  # kept in the index
    assert h.apply(C.SLA, dag="etl", logical_ms=run.logical_ms + 1, deadline_ms=0).code == "not_found"
    assert h.apply(C.SLA, dag="etl", logical_ms=True, deadline_ms=0).code == "not_found"
    assert h.apply(C.SLA, dag="etl", logical_ms=run.logical_ms, deadline_ms="x").code == "invalid"
    assert not run.events


def test_stale_term_is_refused():
    h = Harness()
    run = with_sla(h, within_seconds=1)
    h.now = T0 + 5000
    [miss] = L.due_misses(h.state, h.now)
    r = h.sla(miss, term=0)
    assert r.code == "stale_term" and not run.events
    assert L.due_misses(h.state, h.now)                                  # still due for the real leader
    r = h.sla(miss)                                                      # same rid: not deduplicated
    assert r.ok and not r.deduplicated and len(run.events) == 1


def test_deleted_or_pruned_runs_leave_the_index():
    h = Harness()
    with_sla(h, within_seconds=1)
    assert h.apply(C.DAG_DELETE, name="etl").ok
    h.now = T0 + 5000
    assert L.due_misses(h.state, h.now) == []
    S.collect(h.state, h.now)
    assert not h.state.sla_watch


# ---------------------------------------------------------------- replicas and snapshots


def _script(h: Harness) -> tuple[D.DagRun, D.DagRun]:
    missed = with_sla(h, "missed", within_seconds=10)
    h.now += 1
    pending = with_sla(h, "pending", by="06:00", timezone="Europe/Berlin")
    h.now = T0 + 20_000
    [miss] = L.due_misses(h.state, h.now)
    assert h.sla(miss).ok
    return missed, pending


def test_replicas_agree_and_the_snapshot_carries_events_and_rebuilds_the_index():
    h = Harness()
    missed, pending = _script(h)
    replica = SchedulerState()
    for i, entry in enumerate(h.entries, start=2):
        replica.apply(entry, i)
    assert replica.log_hash_hex() == h.state.log_hash_hex()
    assert replica.dag_runs[("missed", missed.logical_ms)].events == missed.events
    restored = SchedulerState()
    restored.restore(pickle.loads(pickle.dumps(h.state.snapshot())))
    assert restored.dag_runs[("missed", missed.logical_ms)].events == missed.events
    assert restored.dag_runs[("pending", pending.logical_ms)].events == ()
    assert list(restored.sla_watch) == list(h.state.sla_watch) == \
        [(parse_time("2026-06-01T04:00:00Z"), "dag/pending", pending.logical_ms)]
    # a miss found after the restore is recorded the same way on both
    later = parse_time("2026-06-01T04:00:01Z")
    assert L.due_misses(restored, later) == L.due_misses(h.state, later)


def test_a_run_from_an_older_snapshot_has_no_events():
    h = Harness()
    _script(h)
    image = pickle.loads(pickle.dumps(h.state.snapshot()))
    for run in image[-1]["dag_runs"].values():
        del run.events                                      # as unpickled from before the field
    restored = SchedulerState()
    restored.restore(image)
    assert all(run.events == () for run in restored.dag_runs.values())
    # the missed run's event is gone with the old format, so its miss is due again
    assert [m.dag for m in L.due_misses(restored, h.now)] == ["missed"]


# ---------------------------------------------------------------- the leader's driver


def test_driver_records_counts_under_the_dag_and_posts_once():
    server = HTTPServer(("127.0.0.1", 0), Hook)
    Hook.posts = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hook"
        h = Harness()
        run = with_sla(h, within_seconds=2, webhook=url)
        h.now = T0 + 2500
        env = TestEnv(h)
        metrics = env.metrics

        async def main():
            driver = L.SlaDriver(env.node, env.clock, metrics, env.spawn, webhooks=LOOPBACK_OK)
            for step in range(3):
                h.now += L.RETRY_AFTER_MS if step else 0
                driver.step(h.now)
                await env.settle()
        asyncio.run(main())
        assert [e.kind for e in run.events] == ["sla_missed"]
        assert metrics.sla_missed.counts == {("etl",): 1}
        [(path, body, key)] = Hook.posts
        assert path == "/hook" and key == f"sla-dag/{run.run_id}"
        assert body == {"job": "etl", "dag": "etl", "run_id": run.run_id, "execution_id": run.run_id,
                        "scheduled_time": "2026-06-01T03:00:00Z", "deadline": "2026-06-01T03:00:02Z",
                        "state": "RUNNING", "message": run.events[0].message}
    finally:
        server.shutdown()
        server.server_close()


def test_a_job_and_a_dag_of_the_same_name_do_not_collide():
    from schedd.core.model import validate_spec
    h = Harness()
    r = h.apply(C.PUT, spec=validate_spec({"name": "etl", "schedule": "", "sla": {"within_seconds": 1},
                                                     "handler": {"shell": {"command": "true"}}}).text())
    assert r.ok, r
    t = h.apply(C.TRIGGER, name="etl").payload.scheduled_ms
    run = with_sla(h, within_seconds=1)
    assert t == run.logical_ms
    h.now = T0 + 5000
    misses = L.due_misses(h.state, h.now)
    assert sorted((m.dag, m.rid) for m in misses) == [
        ("", f"sla-{run.run_id}#{h.state.execs[('etl', t)].log_index}"), ("etl", f"sla-dag/{run.run_id}")]
    for m in misses:
        if m.dag:
            assert h.sla(m).ok
        else:
            assert h.apply(C.SLA, rid=m.rid, job=m.job, scheduled_ms=m.scheduled_ms,
                           deadline_ms=m.deadline_ms).ok
    assert len(run.events) == 1 and len(h.state.execs[("etl", t)].events) == 1


# ---------------------------------------------------------------- SDK document and CLI views


def test_dag_document_sla_roundtrip_and_errors():
    from google.protobuf.json_format import MessageToDict

    from schedd_client import ValidationError as ClientValidationError
    from schedd_client.dags import dag_from_dict, dag_to_dict
    doc = {"name": "etl", "timezone": "Europe/Berlin",
           "sla": {"within": "2h", "by": "06:00", "webhook": "http://127.0.0.1:9/sla"},
           "tasks": [{"name": "a", "command": "true"}]}
    spec = dag_from_dict(doc)
    assert spec.sla.within_seconds == 7200 and spec.sla.by == "06:00"
    assert dag_to_dict(spec) == {**doc, "sla": {"within": 7200, "by": "06:00", "webhook": "http://127.0.0.1:9/sla"}}
    canon, _ = D.canonical_dag(MessageToDict(spec, preserving_proto_field_name=True))
    assert canon.to_dict()["sla"] == {"within_seconds": 7200, "by": "06:00", "webhook": "http://127.0.0.1:9/sla"}
    with pytest.raises(ClientValidationError, match="quoted"):
        dag_from_dict({**doc, "sla": {"by": 360}})
    with pytest.raises(ClientValidationError, match="unknown key 'deadline'"):
        dag_from_dict({**doc, "sla": {"deadline": "1h"}})


def test_show_and_runs_mark_the_miss():
    from types import SimpleNamespace

    from schedd.api.dag_convert import run_to_pb
    from schedd_proto import dags_pb2 as dpb
    from schedd_client.dag_commands import dag_runs, render_run
    h = Harness()
    missed, _ = _script(h)
    pb_run = run_to_pb(h.state, missed)
    assert [e.kind for e in pb_run.events] == ["sla_missed"] and pb_run.sla_deadline_ms == T0 + 10_000
    text = render_run(pb_run, lambda: h.now / 1000)
    assert "SLA deadline 2026-06-01T03:00:10Z" in text and "! SLA missed" in text.splitlines()[0]
    assert "events:" in text and "! sla_missed" in text and "within 10s" in text
    plain = with_sla(h, "plain", within_seconds=3600)
    assert "events:" not in render_run(run_to_pb(h.state, plain), lambda: h.now / 1000)

    def table(runs) -> str:
        out = []
        client = SimpleNamespace(list_dag_runs=lambda name, limit: dpb.ListDagRunsResponse(runs=runs))
        cmd = SimpleNamespace(client=client, clock=lambda: h.now / 1000,
                              args=SimpleNamespace(name="x", limit=20), emit=lambda data, text: out.append(text()))
        dag_runs(cmd)
        return out[0]
    both = table([pb_run, run_to_pb(h.state, plain)]).splitlines()
    assert both[0].split()[-1] == "SLA"
    assert both[1].startswith(missed.run_id) and both[1].rstrip().endswith("! missed")
    assert both[2].startswith(plain.run_id) and "! missed" not in both[2]
    assert "SLA" not in table([run_to_pb(h.state, plain)]).splitlines()[0]      # no column without a miss
