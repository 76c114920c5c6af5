"""Run flow on a real 3-node cluster with a worker, as a user drives it: `schedctl job trigger
--wait` (exit 0 on success, 3 on failure, 7 when --timeout passes first; the exit status of a
real schedctl process too), `--param` reaching a shell job as SCHEDD_PARAM_*, `run get
JOB@latest`, `run retry` (same id, a new fencing token, who asked), `dag run --param` and
`dag clear --downstream`, and the SDK's trigger/wait with params, blocking and awaited."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
import yaml

from schedd_client import AsyncClient, WaitTimeout, job_spec
from schedd.ports.fakes import wait_until
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration


def started(factory):
    c = factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=4, drain_grace_s=5)
    client = c.client(timeout=30)
    wait_until(lambda: client.list_workers().workers, timeout=30, what="the worker to connect")
    wait_until(lambda: client.cluster_status().feature_level >= 7, timeout=60, what="the cluster at feature level 7")
    return c, client


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """One cluster for the module: each test names its own jobs, and none stops a process."""
    return started(module_cluster_factory)


@pytest.fixture
def fresh_cluster(cluster_factory):
    """A cluster of its own, for a test that reads the whole job listing."""
    return started(cluster_factory)


def test_trigger_wait_params_latest_and_retry(cluster, tmp_path):
    c, client = cluster
    flag = tmp_path / "ok"
    client.put_job(job_spec("greet", command=f'echo "hello $SCHEDD_PARAM_WHO from $SCHEDD_PARAM_PLACE"; '
                                              f'test -e {flag}'))
    # a failing run: --wait exits 3 and shows the recorded output tail
    p = schedctl(c, "job", "trigger", "greet", "--param", "who=ann", "--param", "place=Oslo", "--wait",
                 "--timeout", "60s", check=False)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "hello ann from Oslo" in p.stdout and "FAILED" in p.stdout
    # the run keeps its params, and JOB@latest names it
    latest = json.loads(schedctl(c, "run", "get", "greet@latest", "-o", "json").stdout)
    assert latest["params"] == {"who": "ann", "place": "Oslo"} and latest["state"] == "FAILED"
    shown = schedctl(c, "run", "get", "greet", "--latest").stdout
    assert latest["id"] in shown and "Params" in shown and "place=Oslo, who=ann" in shown
    # retry: same id, a new attempt with a new fencing token, who asked recorded; succeeds now
    flag.write_text("")
    p = schedctl(c, "run", "retry", latest["id"], "--wait", "--timeout", "60s", check=False)
    assert p.returncode == 0, (p.stdout, p.stderr)
    run = client.get_execution(latest["id"])
    assert run.state == "SUCCEEDED" and [a.number for a in run.attempts] == [1, 2]
    assert run.attempts[1].fencing_token != run.attempts[0].fencing_token
    assert any(e.kind == "retry" and "requested by" in e.message for e in run.events)
    assert "hello ann from Oslo" in run.attempts[1].output_tail
    # a run still under way cannot be retried; bad params commit nothing
    client.put_job(job_spec("slow", command="sleep 30"))
    p = schedctl(c, "job", "trigger", "slow", "--wait", "--timeout", "1s", check=False)
    assert p.returncode == 7 and "goes on" in p.stderr
    slow = client.get_execution("slow@latest")
    p = schedctl(c, "run", "retry", slow.id, check=False)
    assert p.returncode == 1 and "only a finished run can be retried" in p.stderr
    before = len(list(client.list_executions("greet")))
    p = schedctl(c, "job", "trigger", "greet", "--param", "bad-name=x", check=False)
    assert p.returncode == 1 and "bad param name 'bad-name'" in p.stderr
    assert len(list(client.list_executions("greet"))) == before
    client.cancel_execution(slow.id)


def test_wait_exit_status_of_a_real_schedctl_process(cluster):
    c, client = cluster
    client.put_job(job_spec("fine", command="echo fine"))
    context = c.write_context()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    env["SCHEDD_CONTEXT"] = str(context)
    p = subprocess.run([sys.executable, "-m", "schedd_client.schedctl", "job", "trigger", "fine", "--wait",
                        "--timeout", "60s"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "fine" in p.stdout and "SUCCEEDED" in p.stdout


def test_dag_run_params_and_clear_downstream(cluster, tmp_path):
    c, client = cluster
    flag = tmp_path / "fixed"
    doc = {"name": "etl", "tasks": [
        {"name": "extract", "command": "echo extract $SCHEDD_PARAM_DAY"},
        {"name": "transform", "upstream": ["extract"], "command": f"test -e {flag}"},
        {"name": "load", "upstream": ["transform"], "command": "echo load $SCHEDD_PARAM_DAY"},
    ]}
    f = tmp_path / "etl.yaml"
    f.write_text(yaml.safe_dump(doc))
    schedctl(c, "dag", "apply", "-f", str(f))
    p = schedctl(c, "dag", "run", "etl", "--param", "day=monday", "--wait", "--timeout", "60s", check=False)
    assert p.returncode == 3, (p.stdout, p.stderr)
    run = client.get_dag_run("etl")
    assert run.params == {"day": "monday"}
    assert [t.state for t in run.tasks] == ["SUCCEEDED", "FAILED", "UPSTREAM_FAILED"]
    assert "extract monday" in client.get_execution(run.tasks[0].execution_id).attempts[0].output_tail
    flag.write_text("")
    watch = client.watch_dag_run("etl", run.run_id)       # the run now, then each change
    assert next(watch).state == "FAILED"
    out = schedctl(c, "dag", "clear", run.run_id, "--task", "transform", "--downstream").stdout
    assert "transform, load to run again" in out
    # The watch sends the run as it finds it on each read: a quick rerun may go from FAILED to
    # SUCCEEDED between two reads, so RUNNING may or may not be seen; FAILED never again.
    done = next(r for r in watch if r.state != "RUNNING")
    watch.close()
    assert done.state == "SUCCEEDED" and [t.state for t in done.tasks] == ["SUCCEEDED"] * 3
    assert "load monday" in client.get_execution(done.tasks[2].execution_id).attempts[-1].output_tail
    assert any(e.kind == "cleared" for e in done.events)


def test_sdk_trigger_with_params_and_wait_sync_and_async(cluster):
    c, client = cluster
    client.put_job(job_spec("echo", command="echo got $SCHEDD_PARAM_N"))
    run = client.trigger_job("echo", params={"n": "1"}, wait=True, timeout=60)
    assert run.state == "SUCCEEDED" and "got 1" in run.attempts[-1].output_tail and run.params == {"n": "1"}
    started = client.trigger_job("echo", params={"n": "2"})
    assert client.wait_for(started.id, timeout=60).state == "SUCCEEDED"
    client.put_job(job_spec("nap", command="sleep 20"))
    with pytest.raises(WaitTimeout):
        client.trigger_job("nap", wait=True, timeout=0.5)

    async def awaited() -> None:
        async with AsyncClient(c.cluster_arg, security=c.security(), timeout=30) as ac:
            done = await ac.trigger_job("echo", params={"n": "3"}, wait=True, timeout=60)
            assert done.state == "SUCCEEDED" and "got 3" in done.attempts[-1].output_tail
            later = await ac.trigger_job("echo", params={"n": "4"})
            assert (await ac.wait_for(later.id, timeout=60)).params == {"n": "4"}
            assert (await ac.get_execution("echo@latest")).id == later.id

    asyncio.run(awaited())


def test_job_list_watch_in_a_pipe_prints_a_line_when_a_job_is_added(fresh_cluster):
    """A real schedctl process, its stdout a pipe, watching through a follower: the listing, then
    a line for the job added afterwards; the node frees the watch when the process goes away."""
    c, client = fresh_cluster
    client.put_job(job_spec("first", command="true"))
    leader = c.leader()
    follower = next(n.grpc for nid, n in c.nodes.items() if nid != leader)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    env["SCHEDD_CONTEXT"] = str(c.write_context())
    proc = subprocess.Popen([sys.executable, "-m", "schedd_client.schedctl", "--cluster", follower,
                             "job", "list", "--watch"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("ADDED first ")
        client.put_job(job_spec("second", command="true"))
        line = proc.stdout.readline()
        assert line.startswith("ADDED second "), line
        client.pause_job("second")
        assert proc.stdout.readline().startswith("CHANGED second paused")
    finally:
        proc.kill()
        proc.wait(timeout=30)
    # the SDK's watch of runs (blocking), ended by leaving the loop
    events = client.watch_executions("first")
    assert next(events).type == "synced"
    run = client.trigger_job("first")
    seen = next(e for e in events if e.type in ("added", "changed"))
    assert seen.key == run.id
    events.close()
    workers = client.watch_workers()
    first = next(workers)
    assert (first.type, first.key, first.worker.slots) == ("added", "w1", 4)
    assert next(workers).type == "synced"
    workers.close()


def test_scheduled_runs_carry_the_jobs_default_params(cluster):
    c, client = cluster
    schedctl(c, "job", "create", "region", "--schedule", "@every 2s", "--default-param", "region=eu",
             "--command", 'echo "in $SCHEDD_PARAM_REGION"')
    assert client.get_job("region").spec.params == {"region": "eu"}
    ran = wait_until(lambda: next((r for r in client.list_executions("region", state="SUCCEEDED")
                                   if r.trigger == "schedule"), None), timeout=60, what="a scheduled run")
    assert ran.params == {"region": "eu"} and "in eu" in ran.attempts[-1].output_tail
    p = schedctl(c, "job", "trigger", "region", "--param", "region=us", "--wait", "--timeout", "60s", check=False)
    assert p.returncode == 0 and "in us" in p.stdout, (p.stdout, p.stderr)
    client.pause_job("region")
