"""A job's identity includes its incarnation.

Delete a job and create another with the same name: nothing derived from the deleted one (its
parsed spec, policy or SLA, a claim still in flight, an SLA miss under the same execution key)
may apply to the new one. The incarnation is the log index of the entry that created the job;
it is replicated and carried by snapshots, so a restarted replica agrees with one that kept its
caches warm.
"""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest

from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core.state import SchedulerState
from schedd.leader.sla import due_misses
from tests.support.leader import add_worker, assigner_rig, step
from tests.support.state import T0, Harness


@pytest.fixture
def setup():
    h = Harness()
    return (h, *assigner_rig(h))


def assignments(conn) -> list:
    out = []
    while not conn.out.empty():
        msg = conn.out.get_nowait()
        if msg is not None and msg.WhichOneof("kind") == "assignment":
            out.append(msg.assignment)
    return out


def recreate(h: Harness, **kw) -> None:
    assert h.apply(C.DELETE, name="j1").ok
    assert h.put(name="j1", **kw).ok


async def test_recreated_job_runs_its_own_command(setup):
    """The intent for T0 is committed ahead (lookahead) and claimed; the job is deleted and
    created again before T0 with another command: the new run gets the new command and env."""
    h, node, hub, assigner, tasks = setup
    h.now = T0 - 1_000
    h.put(name="j1", schedule="@every 60s", handler={"shell": {"command": "echo old", "env": {"WHO": "old"}}})
    h.plan_and_fire(lookahead=1_500)
    conn = add_worker(hub, h, slots=1)
    await step(assigner, tasks, h.now)
    [old] = assignments(conn)
    assert json.loads(old.handler_json)["shell"]["command"] == "echo old"
    h.now += 100
    recreate(h, schedule="@every 60s", handler={"shell": {"command": "echo new", "env": {"WHO": "new"}}})
    conn.running.clear()                       # the worker was told to drop it (or it ended)
    h.plan_and_fire(lookahead=1_500)
    await step(assigner, tasks, h.now)
    [new] = assignments(conn)
    assert (new.job, new.scheduled_ms) == ("j1", T0)          # the same execution key...
    assert json.loads(new.handler_json)["shell"] == {"command": "echo new", "env": {"WHO": "new"}}
    assert new.fencing_token != old.fencing_token             # ...under a claim of its own
    ex = h.state.execs[("j1", T0)]
    assert ex.state == "RUNNING" and ex.attempts[-1].fencing_token == new.fencing_token
    # the deleted incarnation's late result does not finish the new one
    late = h.apply(C.FINISH, job="j1", scheduled_ms=T0, token=old.fencing_token, state="SUCCEEDED")
    assert late.code == "stale" and h.state.execs[("j1", T0)].state == "RUNNING"


async def test_claim_in_flight_for_a_deleted_job_does_not_apply_to_its_successor(setup):
    h, node, hub, assigner, tasks = setup
    h.now = T0 - 1_000
    h.put(name="j1", schedule="@every 60s", handler={"shell": {"command": "echo old"}})
    h.plan_and_fire(lookahead=1_500)
    conn = add_worker(hub, h, slots=1)
    assigner.step(h.now)                       # the claim is proposed, not applied yet
    assert len(tasks) == 1
    recreate(h, schedule="@every 60s", handler={"shell": {"command": "echo new"}})
    h.plan_and_fire(lookahead=1_500)           # the successor's intent for the same instant
    await asyncio.gather(*tasks)
    tasks.clear()
    ex = h.state.execs[("j1", T0)]
    assert ex.state == "SCHEDULED" and not ex.attempts, "the old claim applied to the new job"
    assert not assignments(conn)
    await step(assigner, tasks, h.now)         # the successor is claimed in its own right
    [a] = assignments(conn)
    assert json.loads(a.handler_json)["shell"]["command"] == "echo new"
    assert h.state.execs[("j1", T0)].state == "RUNNING"


def test_recreated_job_sla_miss_goes_to_its_own_webhook():
    h = Harness(now=T0 - 1_000)
    h.put(name="j1", schedule="@every 60s", sla={"within_seconds": 1, "webhook": "http://old.example/"})
    h.plan_and_fire(lookahead=1_500)
    h.now = T0 + 2_000
    [miss] = due_misses(h.state, h.now)        # the old SLA is parsed (and cached) ...
    assert miss.webhook == "http://old.example/"
    assert h.apply(C.SLA, rid=miss.rid, job="j1", scheduled_ms=T0, deadline_ms=miss.deadline_ms,
                   sla=miss.sla, **miss.entry_args()).ok
    h.now = T0 - 500                           # (the leader's clock, as seen in the next entries)
    recreate(h, schedule="@every 60s", sla={"within_seconds": 1, "webhook": "http://new.example/"})
    h.plan_and_fire(lookahead=1_500)
    h.now = T0 + 2_000
    [miss2] = due_misses(h.state, h.now)
    assert miss2.webhook == "http://new.example/"
    assert miss2.rid != miss.rid               # the old miss's request id does not answer for it
    r = h.apply(C.SLA, rid=miss2.rid, job="j1", scheduled_ms=T0, deadline_ms=miss2.deadline_ms,
                sla=miss2.sla, **miss2.entry_args())
    assert r.ok and not r.deduplicated
    # a miss proposed for the deleted incarnation (still in flight) does not land on the new one
    h.now = T0 - 400
    recreate(h, schedule="@every 60s", sla={"within_seconds": 1})
    h.plan_and_fire(lookahead=1_500)
    h.now = T0 + 2_000
    stale = h.apply(C.SLA, rid=miss2.rid + "x", job="j1", scheduled_ms=T0,
                    deadline_ms=miss2.deadline_ms, sla=miss2.sla, **miss2.entry_args())
    assert not stale.ok and not h.state.execs[("j1", T0)].events


def test_replicas_agree_after_restore_when_a_dag_task_is_recreated():
    """Replica A keeps its caches warm across a DAG's delete and re-creation; replica B restores
    a snapshot taken after it (cold caches). The re-created task row starts at version 1 again,
    in another pool: both must claim it into the new pool."""
    a = SchedulerState()
    index = [0]

    def apply(*states, kind, **args):
        index[0] += 1
        entry = C.encode(kind, rid="", now=T0 + index[0], term=1, by="t", **args)
        return [s.apply(entry, index[0]) for s in states]

    def dag(pool: str) -> str:
        return D.canonical_dag({"name": "d", "tasks": [{"name": "a", "handler": {"shell": {"command": "true"}},
                                                        "pool": pool}]})[1]

    apply(a, kind=C.EPOCH)
    apply(a, kind=C.DAG_PUT, spec=dag("p1"))
    [r] = apply(a, kind=C.DAG_RUN, name="d")           # the task's policy is read (and cached)
    assert r.ok
    apply(a, kind=C.DAG_DELETE, name="d")
    apply(a, kind=C.DAG_PUT, spec=dag("p2"))
    b = SchedulerState()
    b.restore(pickle.loads(pickle.dumps(a.snapshot(), protocol=2)))
    assert b.jobs["d:a"].incarnation == a.jobs["d:a"].incarnation > 0
    ra, rb = apply(a, b, kind=C.DAG_RUN, name="d")
    assert ra == rb and ra.ok
    t = ra.payload.logical_ms
    ra, rb = apply(a, b, kind=C.START, job="d:a", scheduled_ms=t, attempt=1, worker="w1")
    assert ra == rb and ra.ok
    assert a.execs[("d:a", t)].holds == b.execs[("d:a", t)].holds == ("team:default", "pool:p2")
    assert a.held == b.held


@pytest.mark.integration
def test_recreated_job_runs_its_own_command_end_to_end(cluster_factory):
    """The same, with real processes: a run of the deleted job warms every cache first."""
    from schedd_client import job_spec
    from schedd.ports.fakes import wait_until
    from tests.support.cluster import workers_of

    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2, drain_grace_s=5)
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to connect")

    def run(command: str, env: dict) -> str:
        client.put_job(job_spec("j1", command=command, env=env))
        eid = client.trigger_job("j1").id
        ex = wait_until(lambda: (e := client.get_execution(eid)).state == "SUCCEEDED" and e,
                        timeout=60, what=f"{command!r} to succeed")
        return ex.attempts[-1].output_tail

    assert run('echo "old $WHO"', {"WHO": "one"}).strip() == "old one"
    client.delete_job("j1")
    assert run('echo "new $WHO"', {"WHO": "two"}).strip() == "new two"
