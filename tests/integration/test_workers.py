"""Workers on a real 3-node cluster: retries with backoff, a worker SIGKILLed mid-run, a zombie
worker fenced, the leader SIGKILLed while attempts run, timeouts that kill the process group."""

from __future__ import annotations

import os
import signal

import pytest

from schedd_client import job_spec
from schedd.ports.fakes import wait_until
from tests.support.cluster import finished, workers_of

pytestmark = pytest.mark.integration

LEASE_MS = 3000


def start(cluster_factory, workers=("w1",)):
    c = cluster_factory(size=3, scheduler={"lease_ms": LEASE_MS})
    c.start()
    c.wait_leader(timeout=60)
    for w in workers:
        c.start_worker(w, slots=2, drain_grace_s=5)
    client = c.client(timeout=30)
    wait_until(lambda: len(workers_of(c)) == len(workers), timeout=30, what="workers to connect")
    return c, client


def test_retries_with_backoff_then_success_and_giving_up(cluster_factory, tmp_path):
    c, client = start(cluster_factory)
    counter = tmp_path / "counts"
    counter.mkdir()
    script = (f'f="{counter}/$SCHEDD_EXECUTION_ID"; n=$(cat "$f" 2>/dev/null || echo 0); '
              f'n=$((n+1)); echo $n > "$f"; echo "attempt $SCHEDD_ATTEMPT token $SCHEDD_FENCING_TOKEN"; '
              f'[ $n -ge 3 ]')
    client.put_job(job_spec("flaky", command=script, retry={"max_attempts": 3, "initial_backoff_seconds": 1}))
    client.put_job(job_spec("broken", command="echo nope >&2; exit 7", retry={"max_attempts": 2, "initial_backoff_seconds": 1}))
    flaky = client.trigger_job("flaky").id
    broken = client.trigger_job("broken").id
    ex = wait_until(lambda: finished(client, flaky), timeout=60, what="flaky to finish")
    assert ex.state == "SUCCEEDED" and [a.state for a in ex.attempts] == ["FAILED", "FAILED", "SUCCEEDED"]
    tokens = [a.fencing_token for a in ex.attempts]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    gaps = [b.started_ms - a.ended_ms for a, b in zip(ex.attempts, ex.attempts[1:])]
    assert all(g >= 700 for g in gaps), f"no backoff between attempts: {gaps}"
    assert "attempt 3" in ex.attempts[2].output_tail
    ex = wait_until(lambda: finished(client, broken), timeout=60, what="broken to give up")
    assert ex.state == "FAILED" and len(ex.attempts) == 2 and ex.attempts[0].exit_code == 7
    assert "nope" in ex.attempts[0].output_tail and "gave up after 2" in ex.reason


def test_worker_killed_mid_run_is_retried_elsewhere(cluster_factory, tmp_path):
    c, client = start(cluster_factory, workers=("w1", "w2"))
    client.put_job(job_spec("slow", command="sleep 4; echo done", retry={"max_attempts": 3, "initial_backoff_seconds": 1}))
    eid = client.trigger_job("slow").id
    ex = wait_until(lambda: (e := client.get_execution(eid)).state == "RUNNING" and e, timeout=30,
                    what="slow to start")
    victim = ex.attempts[0].worker
    c.workers[victim].proc.send_signal(signal.SIGKILL)
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="slow to finish elsewhere")
    assert ex.state == "SUCCEEDED"
    assert ex.attempts[0].state == "LOST" and ex.attempts[0].worker == victim
    assert ex.attempts[-1].worker != victim and "done" in ex.attempts[-1].output_tail


def test_zombie_worker_is_fenced(cluster_factory, tmp_path):
    c, client = start(cluster_factory, workers=("w1", "w2"))
    client.put_job(job_spec("zombie", command="sleep 3; echo finished", retry={"max_attempts": 3, "initial_backoff_seconds": 1}))
    eid = client.trigger_job("zombie").id
    ex = wait_until(lambda: (e := client.get_execution(eid)).state == "RUNNING" and e, timeout=30,
                    what="zombie to start")
    stopped = ex.attempts[0].worker
    c.signal_worker(stopped, signal.SIGSTOP)
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="the retry to finish elsewhere")
    assert ex.state == "SUCCEEDED" and ex.attempts[-1].worker != stopped
    c.signal_worker(stopped, signal.SIGCONT)
    ex = wait_until(lambda: (e := client.get_execution(eid)).attempts[0].rejected and e, timeout=60,
                    what="the zombie's late result to be refused")
    assert "refused" in ex.attempts[0].rejected and ex.state == "SUCCEEDED"


def test_leader_killed_while_attempts_run(cluster_factory, tmp_path):
    c, client = start(cluster_factory, workers=("w1", "w2"))
    effects = tmp_path / "effects.log"
    cmd = (f'echo "start $SCHEDD_EXECUTION_ID $SCHEDD_FENCING_TOKEN" >> {effects}; sleep 2; '
           f'echo "end $SCHEDD_EXECUTION_ID $SCHEDD_FENCING_TOKEN" >> {effects}')
    client.put_job(job_spec("work", command=cmd, retry={"max_attempts": 3, "initial_backoff_seconds": 1}))
    ids = [client.trigger_job("work").id for _ in range(4)]
    wait_until(lambda: sum(client.get_execution(i).state == "RUNNING" for i in ids) >= 2, timeout=30,
               what="attempts to run")
    c.kill_node(c.leader())
    for i in ids:
        ex = wait_until(lambda i=i: finished(client, i), timeout=90, what=f"{i} to finish")
        assert ex.state == "SUCCEEDED", (i, ex.state, ex.reason)
    # never two attempts of one execution at the same time
    running: dict[str, str] = {}
    for line in effects.read_text().splitlines():
        kind, eid, token = line.split()
        if kind == "start":
            assert eid not in running, f"{eid} started twice concurrently"
            running[eid] = token
        else:
            running.pop(eid, None)


def test_timeout_kills_the_whole_process_group(cluster_factory, tmp_path):
    c, client = start(cluster_factory)
    pidfile = tmp_path / "child.pid"
    cmd = f"sh -c 'trap \"\" TERM; echo $$ > {pidfile}; sleep 60' & wait"
    client.put_job(job_spec("stuck", command=cmd, timeout=1))
    eid = client.trigger_job("stuck").id
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="stuck to time out")
    assert ex.state == "TIMED_OUT"
    pid = int(pidfile.read_text())
    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    wait_until(gone, timeout=20, what="the TERM-ignoring child to be killed")


def test_pool_wait_cancel_python_handler_and_at_most_once(cluster_factory, tmp_path):
    import asyncio
    import threading

    from schedd_worker import Worker

    c, client = start(cluster_factory)
    # a job for a pool nobody serves waits, visibly; so does one needing labels nobody has
    client.put_job(job_spec("gpu-job", command="true", pool="gpu"))
    gpu = client.trigger_job("gpu-job").id
    ex = wait_until(lambda: (e := client.get_execution(gpu)).reason and e, timeout=30, what="a waiting reason")
    assert ex.state == "SCHEDULED" and "pool 'gpu'" in ex.reason
    client.put_job(job_spec("eu-job", command="true", worker_labels={"zone": "eu-1"}))
    eu = client.trigger_job("eu-job").id
    ex = wait_until(lambda: (e := client.get_execution(eu)).reason and e, timeout=30, what="a waiting reason")
    assert ex.state == "SCHEDULED" and "labels zone=eu-1" in ex.reason

    # a Python handler in an embedded SDK worker serves that pool
    py = Worker(c.cluster_arg, security=c.security("worker", "py-worker", c.worker_token()), name="py-worker", slots=2, pool="gpu", labels={"zone": "eu-1"},
                allow_root=True)     # Python handlers only; the suite may run as root

    @py.handler("hello")
    def hello(ctx):
        return f"hello {ctx.execution_id} attempt {ctx.attempt}"

    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(py.run_async(stop),), daemon=True)
    thread.start()
    try:
        client.put_job(job_spec("py-job", python="hello", pool="gpu"))
        eid = client.trigger_job("py-job").id
        ex = wait_until(lambda: finished(client, eid), timeout=60, what="the python handler")
        assert ex.state == "SUCCEEDED" and f"hello {eid} attempt 1" in ex.attempts[0].output_tail
        assert wait_until(lambda: finished(client, gpu), timeout=60, what="the waiting job").state == "SUCCEEDED"
        assert wait_until(lambda: finished(client, eu), timeout=60, what="the labelled job").state == "SUCCEEDED"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)

    # cancel a running attempt: its process group is killed
    client.put_job(job_spec("long", command="sleep 60"))
    eid = client.trigger_job("long").id
    wait_until(lambda: client.get_execution(eid).state == "RUNNING", timeout=30, what="long to run")
    assert client.cancel_execution(eid).cancel_requested
    ex = wait_until(lambda: finished(client, eid), timeout=30, what="the cancel")
    assert ex.state == "CANCELLED" and ex.attempts[0].state == "CANCELLED"

    # at_most_once: a lost worker's attempt ends LOST and is never run again
    client.put_job(job_spec("once", command="sleep 60", delivery="at_most_once",
                            retry={"max_attempts": 5, "initial_backoff_seconds": 1}))
    eid = client.trigger_job("once").id
    wait_until(lambda: client.get_execution(eid).state == "RUNNING", timeout=30, what="once to run")
    c.workers["w1"].proc.send_signal(signal.SIGKILL)
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="once to be declared lost")
    assert ex.state == "LOST" and len(ex.attempts) == 1 and "at_most_once" in ex.reason


def test_sigterm_drains_a_worker_and_loses_nothing(cluster_factory, tmp_path):
    c, client = start(cluster_factory, workers=("w1",))
    started = tmp_path / "started"
    client.put_job(job_spec("short", command=f"touch {started}; sleep 2; echo drained-ok"))
    eid = client.trigger_job("short").id
    # RUNNING is the leader's record of the claim, committed before the worker receives the
    # assignment: wait until the worker has started the job itself, then drain it.
    wait_until(started.exists, timeout=30, what="short to run on the worker")
    c.signal_worker("w1", signal.SIGTERM)                  # drain: the running attempt finishes
    ex = wait_until(lambda: finished(client, eid), timeout=30, what="the drained attempt to finish")
    assert ex.state == "SUCCEEDED" and "drained-ok" in ex.attempts[0].output_tail
    assert c.workers["w1"].proc.wait(timeout=30) == 0
    # work that arrives while no worker is connected waits, and runs when one comes back
    eid2 = client.trigger_job("short").id
    ex = wait_until(lambda: (e := client.get_execution(eid2)).reason and e, timeout=30, what="a waiting reason")
    assert ex.state == "SCHEDULED" and "no worker" in ex.reason
    c.start_worker("w2", slots=2)
    assert wait_until(lambda: finished(client, eid2), timeout=60, what="the queued run").state == "SUCCEEDED"


def test_a_herd_due_at_one_instant_starts_together_at_that_instant(cluster_factory):
    """One-offs due at one instant are claimed and pushed ahead (in LeaderBatches to
    this worker), held by the worker's one timer and started together at the instant: every
    handler sees the scheduled time, starts at or after it, and all run at once (a barrier of
    HERD parties passes only if none waits for another to end)."""
    import asyncio
    import threading
    import time
    from datetime import UTC, datetime

    from schedd_worker import Worker

    herd = 12
    c, client = start(cluster_factory, workers=())
    py = Worker(c.cluster_arg, security=c.security("worker", "herd", c.worker_token()), name="herd",
                slots=herd, allow_root=True)     # Python handlers only; the suite may run as root
    barrier = threading.Barrier(herd, timeout=30)
    starts: dict[str, tuple[int, int]] = {}

    @py.handler("herd")
    def on_due(ctx):
        starts[ctx.job] = (ctx.scheduled_ms, time.time_ns() // 1_000_000)
        barrier.wait()

    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(py.run_async(stop),), daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(workers_of(c)) == 1, timeout=30, what="the worker to connect")
        due = int(time.time()) + 8
        at = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        client.put_jobs([job_spec(f"h{i:02d}", schedule=f"at {at}", python="herd") for i in range(herd)])

        def done(job: str):
            ex = next(iter(client.list_executions(job)), None)
            return ex is not None and finished(client, ex.id)

        execs = [wait_until(lambda j=f"h{i:02d}": done(j), timeout=60, what=f"h{i:02d} to finish")
                 for i in range(herd)]
        assert [e.state for e in execs] == ["SUCCEEDED"] * herd, [e.attempts[-1].error for e in execs]
        assert sorted(starts) == [f"h{i:02d}" for i in range(herd)]
        assert all(sched == due * 1000 and started >= sched for sched, started in starts.values())
        assert all(e.attempts[0].started_ms >= due * 1000 for e in execs)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
