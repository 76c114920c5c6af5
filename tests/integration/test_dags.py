"""DAGs on a real 3-node cluster with a worker: a 3-task DAG runs in upstream order; a failing
middle task marks its downstream UPSTREAM_FAILED (seen through `schedctl dag show`); the leader
SIGKILLed mid-run neither reruns a succeeded task nor loses the run; a sensor waits for a file."""

from __future__ import annotations

import json

import pytest
import yaml

from schedd_client import ValidationError, job_spec
from schedd.ports.fakes import wait_until
from tests.support.cluster import metric_total, schedctl

pytestmark = pytest.mark.integration

LEASE_MS = 3000
DONE = ("SUCCEEDED", "FAILED")


def start(cluster_factory, slots=2):
    # the SLA webhook receiver is this test's own 127.0.0.1 server: the nodes opt in to loopback
    c = cluster_factory(size=3, scheduler={"lease_ms": LEASE_MS}, webhook_allow=("127.0.0.1",))
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=slots, drain_grace_s=5)
    client = c.client(timeout=30)
    wait_until(lambda: client.list_workers().workers, timeout=30, what="the worker to connect")
    return c, client


def run_done(client, name, run_id):
    run = client.get_dag_run(name, run_id)
    return run if run.state in DONE else None


def test_three_tasks_succeed_in_upstream_order(cluster_factory, tmp_path):
    c, client = start(cluster_factory)
    log = tmp_path / "order.log"
    doc = {"name": "etl", "tasks": [
        {"name": "extract", "command": f"echo extract >> {log}; sleep 0.3"},
        {"name": "transform", "upstream": ["extract"], "command": f"echo transform >> {log}; sleep 0.3"},
        {"name": "load", "upstream": ["transform"], "command": f"echo load >> {log}"},
    ]}
    f = tmp_path / "etl.yaml"
    f.write_text(yaml.safe_dump(doc))
    out = schedctl(c, "dag", "apply", "-f", str(f)).stdout
    assert "dag etl created (version 1, 3 tasks" in out
    started = json.loads(schedctl(c, "dag", "run", "etl", "-o", "json").stdout)
    run = wait_until(lambda: run_done(client, "etl", started["run_id"]), timeout=45, what="the run to end")
    assert run.state == "SUCCEEDED", run
    assert [t.task for t in run.tasks] == ["extract", "transform", "load"]
    assert [t.state for t in run.tasks] == ["SUCCEEDED"] * 3
    assert log.read_text().split() == ["extract", "transform", "load"]
    e, t, l = run.tasks
    assert e.ended_ms <= t.started_ms and t.ended_ms <= l.started_ms, run
    # every task ran exactly once, as an ordinary execution keyed by the run's logical time
    for task in run.tasks:
        ex = client.get_execution(task.execution_id)
        assert ex.scheduled_ms == run.logical_ms and len(ex.attempts) == 1 and ex.trigger == "dag"
    listing = schedctl(c, "dag", "runs", "etl").stdout
    assert started["run_id"] in listing and "SUCCEEDED" in listing and "3 succeeded" in listing
    # invalid graphs are refused with the reason, and nothing changes
    bad = {"name": "etl", "tasks": [{"name": "a", "upstream": ["b"], "command": "true"},
                                    {"name": "b", "upstream": ["a"], "command": "true"}]}
    with pytest.raises(ValidationError, match="cycle: (a -> b -> a|b -> a -> b)"):
        client.put_dag(bad)
    assert client.get_dag("etl").version == 1
    p = schedctl(c, "job", "trigger", "etl:load", check=False)
    assert p.returncode == 1 and "part of DAG 'etl'" in p.stderr
    # the document comes back as it was applied; list and delete
    assert yaml.safe_load(schedctl(c, "dag", "get", "etl", "-o", "yaml").stdout) == doc
    assert "etl" in schedctl(c, "dag", "list").stdout
    schedctl(c, "dag", "delete", "etl")
    assert not client.list_dags().dags and not [j for j in client.list_jobs() if j.spec.name.startswith("etl:")]


def test_scheduled_dag_fires_on_its_schedule(cluster_factory, tmp_path):
    c, client = start(cluster_factory)
    client.put_dag({"name": "tick", "schedule": "@every 2s", "tasks": [
        {"name": "a", "command": "true"}, {"name": "b", "upstream": ["a"], "command": "true"}]})
    dag = client.get_dag("tick")
    assert dag.next_fire_ms % 2000 == 0

    def two_done():
        runs = [r for r in client.list_dag_runs("tick").runs if r.state == "SUCCEEDED"]
        return runs if len(runs) >= 2 else None

    runs = wait_until(two_done, timeout=40, what="two scheduled runs")
    assert all(r.trigger == "schedule" and r.logical_ms % 2000 == 0 for r in runs)
    assert len({r.run_id for r in runs}) == len(runs)


def test_failing_middle_task_marks_downstream_upstream_failed(cluster_factory, tmp_path):
    c, client = start(cluster_factory)
    client.put_dag({"name": "broken", "tasks": [
        {"name": "extract", "command": "true"},
        {"name": "transform", "upstream": ["extract"], "command": "echo bad input >&2; exit 3",
         "retry": {"max_attempts": 2, "initial_backoff": "0.2s"}},
        {"name": "load", "upstream": ["transform"], "command": "true"},
        {"name": "publish", "upstream": ["load"], "command": "true"},
        {"name": "cleanup", "upstream": ["transform"], "trigger_rule": "all_done", "command": "true"},
    ]})
    run_id = client.run_dag("broken").run_id
    run = wait_until(lambda: run_done(client, "broken", run_id), timeout=45, what="the run to end")
    states = {t.task: t.state for t in run.tasks}
    assert run.state == "FAILED"
    assert states == {"extract": "SUCCEEDED", "transform": "FAILED", "load": "UPSTREAM_FAILED",
                      "publish": "UPSTREAM_FAILED", "cleanup": "SUCCEEDED"}, states
    transform = next(t for t in run.tasks if t.task == "transform")
    assert transform.attempts == 2
    shown = schedctl(c, "dag", "show", "broken", "--run", run_id).stdout
    assert f"run {run_id}  FAILED" in shown
    lines = {line.split()[1] if line.split()[0] in "●└─" else line.split()[0]: line
             for line in shown.splitlines()[1:]}
    assert "UPSTREAM_FAILED" in lines["load"] and "upstream transform ended FAILED" in lines["load"]
    assert "UPSTREAM_FAILED" in lines["publish"] and "FAILED" in lines["transform"]
    assert "all_done" in lines["cleanup"] and "SUCCEEDED" in lines["cleanup"]
    data = json.loads(schedctl(c, "dag", "show", "broken", "-o", "json").stdout)
    assert data["run_id"] == run_id and data["state"] == "FAILED"


def test_leader_killed_mid_run(cluster_factory, tmp_path):
    c, client = start(cluster_factory)
    marks = tmp_path / "marks"
    marks.mkdir()
    go = tmp_path / "go"

    def step(name, wait=False):
        body = f'echo "$SCHEDD_FENCING_TOKEN" >> {marks}/{name}'
        if wait:   # the middle task holds until the test has killed the leader
            body = f"while [ ! -e {go} ]; do sleep 0.1; done; " + body
        return body

    client.put_dag({"name": "failover", "tasks": [
        {"name": "first", "command": step("first")},
        {"name": "middle", "upstream": ["first"], "command": step("middle", wait=True),
         "retry": {"max_attempts": 3, "initial_backoff": "0.5s"}},
        {"name": "last", "upstream": ["middle"], "command": step("last")},
    ]})
    run_id = client.run_dag("failover").run_id

    def middle_running():
        run = client.get_dag_run("failover", run_id)
        return run if run.tasks[1].state == "RUNNING" else None

    wait_until(middle_running, timeout=30, what="the middle task to start")
    old = c.leader()
    c.kill_node(old)
    c.wait_leader(timeout=60, exclude=old)
    go.touch()
    run = wait_until(lambda: run_done(client, "failover", run_id), timeout=50, what="the run to end")
    assert run.state == "SUCCEEDED", run
    assert [t.state for t in run.tasks] == ["SUCCEEDED"] * 3
    # the succeeded first task was not run again by the new leader; the run was not lost
    assert len((marks / "first").read_text().split()) == 1
    assert run.tasks[0].attempts == 1
    assert len((marks / "last").read_text().split()) == 1
    assert len(client.list_dag_runs("failover").runs) == 1


def test_sensor_waits_for_a_file_without_holding_the_slot(cluster_factory, tmp_path):
    c, client = start(cluster_factory, slots=1)
    ready = tmp_path / "ready"
    client.put_dag({"name": "sensed", "tasks": [
        {"name": "wait", "sensor": {"file": str(ready), "poll_interval": "0.5s", "timeout": "60s"}},
        {"name": "use", "upstream": ["wait"], "command": "true"},
    ]})
    client.put_job(job_spec("other", command="true"))
    run_id = client.run_dag("sensed").run_id

    def polled_twice():
        ex = client.get_execution(client.get_dag_run("sensed", run_id).tasks[0].execution_id)
        return ex if sum(a.state == "NOT_READY" for a in ex.attempts) >= 2 else None

    ex = wait_until(polled_twice, timeout=30, what="the sensor to poll twice")
    assert ex.state in ("RETRY_WAIT", "RUNNING")
    # the only slot is free between polls: another job runs meanwhile
    other = client.trigger_job("other").id
    wait_until(lambda: client.get_execution(other).state == "SUCCEEDED", timeout=30, what="other to run")
    ready.touch()
    run = wait_until(lambda: run_done(client, "sensed", run_id), timeout=30, what="the run to end")
    assert run.state == "SUCCEEDED" and [t.state for t in run.tasks] == ["SUCCEEDED", "SUCCEEDED"]
    ex = client.get_execution(run.tasks[0].execution_id)
    assert ex.attempts[-1].state == "SUCCEEDED" and all(a.state == "NOT_READY" for a in ex.attempts[:-1])


def test_dag_sla_miss_is_recorded_once_shown_counted_and_posted(cluster_factory, tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    posts: list = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            posts.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/sla"
    try:
        c, client = start(cluster_factory)
        f = tmp_path / "dags.yaml"
        f.write_text(yaml.safe_dump_all([
            {"name": "slow", "sla": {"within": "1s", "webhook": url},
             "tasks": [{"name": "nap", "command": "sleep 3"}]},
            {"name": "quick", "sla": {"within": "60s", "webhook": url},
             "tasks": [{"name": "a", "command": "true"}]},
        ]))
        schedctl(c, "dag", "apply", "-f", str(f))
        slow = client.run_dag("slow").run_id
        quick = client.run_dag("quick").run_id

        run = wait_until(lambda: (r := client.get_dag_run("slow", slow)).events and r, timeout=30,
                         what="the DAG run's SLA miss to be recorded")
        [ev] = run.events
        assert ev.kind == "sla_missed" and "within 1s" in ev.message
        assert "still RUNNING at the deadline" in ev.message or "after the deadline" in ev.message
        assert run.sla_deadline_ms == run.logical_ms + 1000
        run = wait_until(lambda: run_done(client, "slow", slow), timeout=30, what="slow to end")
        assert run.state == "SUCCEEDED" and [e.kind for e in run.events] == ["sla_missed"]
        q = wait_until(lambda: run_done(client, "quick", quick), timeout=30, what="quick to end")
        assert q.state == "SUCCEEDED" and not q.events

        wait_until(lambda: posts, timeout=30, what="the webhook POST")
        [body] = posts
        assert body["dag"] == body["job"] == "slow" and body["run_id"] == body["execution_id"] == slow
        assert body["message"] == ev.message and body["deadline"].endswith("Z")

        wait_until(lambda: metric_total(c, "schedd_sla_missed_total", 'job_name="slow"') == 1, timeout=30,
                   what="the miss to be counted")

        listing = schedctl(c, "dag", "runs", "slow").stdout.splitlines()
        assert listing[0].split()[-1] == "SLA"
        [row] = [line for line in listing if line.startswith(slow)]
        assert row.rstrip().endswith("! missed")
        assert "! missed" not in schedctl(c, "dag", "runs", "quick").stdout
        shown = schedctl(c, "dag", "show", "slow", "--run", slow).stdout
        assert "events:" in shown and "sla_missed" in shown and "within 1s" in shown
        got = json.loads(schedctl(c, "dag", "show", "slow", "--run", slow, "-o", "json").stdout)
        assert got["events"][0]["kind"] == "sla_missed"
        assert len(posts) == 1 and len(client.get_dag_run("slow", slow).events) == 1
        client.close()
    finally:
        server.shutdown()
        server.server_close()
