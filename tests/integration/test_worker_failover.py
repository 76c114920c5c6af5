"""A worker finds the next leader when its leader goes: it asks every node it
knows of at once, the configured ones and the members the leader's Welcome listed, and a stream to
a frozen leader is dropped by its keepalive. How fast is measured in
bench/bench_worker_failover.py, not asserted here: these bounds are generous, for a loaded machine."""

from __future__ import annotations

import signal

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from tests.support.cluster import finished

pytestmark = pytest.mark.integration


def on_node(c, nid: str) -> list[str]:
    """The workers registered on node `nid` itself (ListWorkers on a leader is not forwarded)."""
    with c.channel(nid) as ch:
        return [w.name for w in pb_grpc.WorkersStub(ch).ListWorkers(pb.ListWorkersRequest(), timeout=5).workers]


def runs_a_job(client, name: str) -> None:
    client.put_job(job_spec(name, command="echo ran"))
    eid = client.trigger_job(name).id
    ex = wait_until(lambda: finished(client, eid), timeout=60, what=f"{name} to run")
    assert ex.state == "SUCCEEDED" and ex.attempts[-1].worker == "w1", ex


def test_a_worker_told_only_the_leader_finds_the_next_one_through_the_welcomes_members(cluster_factory):
    """Configured with the leader's address alone, the worker learns the others from its Welcome:
    after a SIGKILL of that leader it reaches the new one and runs a job there."""
    c = cluster_factory(size=3)
    c.start()
    old = c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2, extra_args=("--cluster", c.nodes[old].grpc))
    wait_until(lambda: "w1" in on_node(c, old), timeout=30, what="w1 on the leader")
    c.kill_node(old)
    new = c.wait_leader(timeout=60, exclude=old)
    wait_until(lambda: "w1" in on_node(c, new), timeout=30, what=f"w1 on the new leader {new}")
    runs_a_job(c.client(timeout=30), "after-kill")


def test_a_worker_leaves_a_frozen_leader_for_the_new_one(cluster_factory):
    """A SIGSTOPped leader keeps its TCP connections open: the stream's keepalive drops it and the
    worker reaches the new leader and runs a job there, while the old one is still frozen."""
    c = cluster_factory(size=3)
    c.start()
    old = c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2)
    wait_until(lambda: "w1" in on_node(c, old), timeout=30, what="w1 on the leader")
    c.signal_node(old, signal.SIGSTOP)
    try:
        new = c.wait_leader(timeout=60, exclude=old)
        wait_until(lambda: "w1" in on_node(c, new), timeout=30, what=f"w1 on the new leader {new}")
        runs_a_job(c.client(timeout=30), "while-frozen")
    finally:
        c.signal_node(old, signal.SIGCONT)
