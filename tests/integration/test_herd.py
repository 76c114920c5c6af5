"""A herd of one-offs due at the same instant on a real 3-node cluster: every one runs exactly
once, the leader stays the leader (no election caused by the load), and old runs of a pool no
worker serves do not hold back the herd behind them (head-of-line blocking by pool);
they wait, and `cluster status` names the pool and how many wait for it, apart from the
leader's dispatch backlog (no capacity would take them: they are no sign of a leader behind). The herd
is pushed ahead of its instant: before it is due the worker holds more of it than its slots
(`--ahead`).
No timing is asserted: the deadlines are generous, the figures are bench/bench_herd.py's."""

from __future__ import annotations

import math
import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from tests.support.cluster import schedctl, workers_of

pytestmark = pytest.mark.integration

HERD = 2_000
SLOTS = 64
UNSERVED = 300        # runs of pool "gpu", due before the herd: no worker serves that pool


def _at(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _count(client, prefix: str) -> Counter:
    return Counter(e.job for e in client.list_executions("", page_size=1000) if e.job.startswith(prefix)
                   and e.state == "SUCCEEDED")


def _held(c, name: str) -> int:
    from schedd_proto import scheduler_pb2 as pb
    from schedd_proto import scheduler_pb2_grpc as pb_grpc
    with c.channel(c.leader() or "n1") as ch:
        workers = pb_grpc.WorkersStub(ch).ListWorkers(pb.ListWorkersRequest(), timeout=5).workers
    return next((len(w.running) for w in workers if w.name == name), 0)


def test_a_herd_runs_exactly_once_without_an_election_and_past_an_unserved_pool(cluster_factory):
    c = cluster_factory(size=3, acl_settings={"rate_per_second": 0})
    c.start()
    leader = c.wait_leader(timeout=60)
    term = c.node_info(leader).term
    c.start_worker("w1", slots=SLOTS, extra_args=("--ahead", str(HERD)))
    client = c.client(timeout=120)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=60, what="the worker to connect")
    soon = _at(math.ceil(time.time()) + 1)
    client.put_jobs([job_spec(f"gpu-{i:04d}", schedule=f"at {soon}", command="true", pool="gpu")
                     for i in range(UNSERVED)])
    T = math.ceil(time.time()) + 8
    client.put_jobs([job_spec(f"herd-{i:05d}", schedule=f"at {_at(T)}", command="true") for i in range(HERD)])
    held = 0                               # the most the worker held before the instant
    while time.time() < T - 0.5:
        held = max(held, _held(c, "w1"))
        time.sleep(0.2)
    assert held > SLOTS, f"the worker held {held} of the herd before it was due, no more than its slots"
    done = wait_until(lambda: (n := _count(client, "herd-")) and len(n) == HERD and n, timeout=300,
                      interval=2.0, what=f"all {HERD} herd runs to succeed")
    assert set(done.values()) == {1}
    runs = [e for e in client.list_executions("", page_size=1000) if e.job.startswith("herd-")]
    assert len(runs) == HERD and all(len(e.attempts) == 1 for e in runs)    # once each, one attempt
    assert all(e.scheduled_ms == T * 1000 for e in runs)
    gpu = [e for e in client.list_executions("", page_size=1000) if e.job.startswith("gpu-")]
    assert len(gpu) == UNSERVED and {e.state for e in gpu} == {"SCHEDULED"}   # still waiting, none lost
    assert c.leader() == leader and c.node_info(leader).term == term         # no election
    # the unserved runs are named with their pool in cluster status, as a user reads it, and
    # are not the leader's dispatch backlog
    unserved = f"{UNSERVED} run(s) wait for pool 'gpu', which no connected worker serves"
    st = wait_until(lambda: (s := c.status()) is not None and any(w.startswith(unserved) for w in s.warnings) and s,
                    timeout=30, what="the unserved pool warning")
    ours = next(n for n in st.nodes if n.id == leader)
    assert (ours.dispatch_backlog, ours.dispatch_lag_ms) == (0, 0)
    assert not any("dispatch is behind" in w for w in st.warnings)
    assert unserved in schedctl(c, "cluster", "status").stdout.replace("\n  ", " ")
