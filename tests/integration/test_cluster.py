"""A real 3-node cluster on 127.0.0.1: fire an every-second job, SIGKILL the leader while it fires,
restart the node, restart the whole cluster; the history never holds an instant twice, misses
none, and keeps every committed execution."""

from __future__ import annotations


import time

import grpc
import pytest

from schedd.v1 import scheduler_pb2 as pb
from schedd.v1 import scheduler_pb2_grpc as pb_grpc
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

EVERY_S = 1


def stub(addr: str) -> pb_grpc.SchedulerStub:
    return pb_grpc.SchedulerStub(grpc.insecure_channel(addr))


def history(addr: str, job: str, *, stale: bool = False) -> list[pb.Execution]:
    """Every execution of `job`, oldest first, across pages."""
    s, out, token = stub(addr), [], ""
    md = [("x-schedd-stale-ok", "1")] if stale else []
    while True:
        r = s.ListExecutions(pb.ListExecutionsRequest(job=job, page_size=1000, page_token=token,
                                                      oldest_first=True), timeout=10, metadata=md)
        out.extend(r.executions)
        token = r.next_page_token
        if not token:
            return out


def assert_contiguous(execs: list[pb.Execution], period_ms: int) -> None:
    times = [e.scheduled_ms for e in execs]
    assert len(times) == len(set(times)), "an instant was recorded twice"
    assert len({e.id for e in execs}) == len(execs)
    gaps = [(a, b) for a, b in zip(times, times[1:]) if b - a != period_ms]
    assert not gaps, f"instants missing between {gaps[:5]}"


def test_failover_restart_and_full_restart_keep_history_exact(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    leader = c.wait_leader(timeout=60)
    any_addr = c.nodes["n1"].grpc if leader != "n1" else c.nodes["n2"].grpc  # a follower: forwarded
    spec = pb.JobSpec(name="tick", schedule=f"@every {EVERY_S}s",
                      handler=pb.Handler(shell=pb.ShellHandler(command="true")))
    stub(any_addr).PutJob(pb.PutJobRequest(job=spec, request_id="create-tick"), timeout=15)

    wait_until(lambda: len(history(any_addr, "tick")) >= 4, timeout=30, what="first fires")

    # SIGKILL the leader while it fires
    c.kill_node(leader)
    survivor = next(n for n in c.nodes if n != leader)
    new_leader = c.wait_leader(timeout=30, exclude=leader)
    assert new_leader != leader
    n_at_failover = len(history(c.nodes[survivor].grpc, "tick"))
    wait_until(lambda: len(history(c.nodes[survivor].grpc, "tick")) >= n_at_failover + 4,
               timeout=30, what="fires after failover")
    before_restart = history(c.nodes[survivor].grpc, "tick")
    assert_contiguous(before_restart, EVERY_S * 1000)
    assert len({e.term for e in before_restart}) >= 2, "the fires should span two leader terms"

    # the killed node restarts and catches up from the log (stale read served locally)
    c.start_node(leader)
    def caught_up():
        mine = {e.id for e in history(c.nodes[leader].grpc, "tick", stale=True)}
        return {e.id for e in before_restart} <= mine
    wait_until(caught_up, timeout=60, what="the restarted node to catch up")

    # stop all three, start them again: every committed execution is still there, and the
    # instants that fell due while the cluster was down are fired (catch-up), none missing
    committed = history(c.nodes[survivor].grpc, "tick")
    c.stop()
    down_ms = int(time.time() * 1000)
    c.start()
    c.wait_leader(timeout=60)
    up_ms = int(time.time() * 1000)
    addr = c.nodes["n1"].grpc
    after = wait_until(lambda: (h := history(addr, "tick")) and len(h) >= len(committed) + 3 and h,
                       timeout=60, what="fires after a full restart")
    assert {e.id for e in committed} <= {e.id for e in after}, "a committed execution was lost"
    assert_contiguous(after, EVERY_S * 1000)
    # contiguous from before the stop to after the restart: the instants that fell due while the
    # cluster was down were fired too
    assert after[0].scheduled_ms < down_ms < up_ms < after[-1].scheduled_ms


def test_bad_input_is_refused_with_clear_status_and_commits_nothing(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    s = stub(c.nodes["n2"].grpc)
    cases = [
        (pb.JobSpec(name="x", schedule="61 * * * *", handler=pb.Handler(shell=pb.ShellHandler(command="t"))),
         grpc.StatusCode.INVALID_ARGUMENT, "minute"),
        (pb.JobSpec(name="x", schedule="@daily", timezone="Europe/Berln",
                    handler=pb.Handler(shell=pb.ShellHandler(command="t"))),
         grpc.StatusCode.INVALID_ARGUMENT, "Europe/Berln"),
        (pb.JobSpec(name="x", schedule="@daily", description="d" * 5000,
                    handler=pb.Handler(shell=pb.ShellHandler(command="t"))),
         grpc.StatusCode.INVALID_ARGUMENT, "too long"),
        (pb.JobSpec(name="x", schedule="at 2001-01-01T00:00:00Z",
                    handler=pb.Handler(shell=pb.ShellHandler(command="t"))),
         grpc.StatusCode.INVALID_ARGUMENT, "in the past"),
    ]
    before = pb_grpc.ClusterStub(grpc.insecure_channel(c.nodes["n2"].grpc)).Status(
        pb.ClusterStatusRequest(), timeout=5).commit_index
    for spec, code, fragment in cases:
        with pytest.raises(grpc.RpcError) as e:
            s.PutJob(pb.PutJobRequest(job=spec), timeout=10)
        assert e.value.code() == code and fragment in e.value.details(), e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        s.PauseJob(pb.JobRef(name="nope"), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        s.GetExecution(pb.GetExecutionRequest(id="garbage"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    after = pb_grpc.ClusterStub(grpc.insecure_channel(c.nodes["n2"].grpc)).Status(
        pb.ClusterStatusRequest(), timeout=5).commit_index
    # PauseJob of an unknown job is refused by apply (it needs the committed state), the
    # invalid specs never reach the log
    assert after - before <= 1


def test_multi_node_cluster_refuses_to_start_without_a_secret(cluster_factory):
    c = cluster_factory(size=3)
    cfg = c.nodes["n1"].config
    cfg.write_text("\n".join(l for l in cfg.read_text().splitlines() if not l.startswith("secret_file")))
    c.start_node("n1")
    proc = c.nodes["n1"].proc
    assert proc.wait(timeout=30) == 2
    assert "refusing to start a multi-node cluster without a cluster secret" in c.nodes["n1"].log.read_text()
