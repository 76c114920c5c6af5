"""A real 3-node cluster on 127.0.0.1: fire an every-second job, SIGKILL the leader while it fires,
restart the node, restart the whole cluster; the history never holds an instant twice, misses
none, and keeps every committed execution."""

from __future__ import annotations

import gzip


import re
import time

import grpc
import pytest

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd.ports.fakes import wait_until
from schedd.runtime.daemon import SERVICES

pytestmark = pytest.mark.integration

EVERY_S = 1


def stub(c, nid: str) -> pb_grpc.SchedulerStub:
    return pb_grpc.SchedulerStub(c.channel(nid))


def history(c, nid: str, job: str, *, stale: bool = False) -> list[pb.Execution]:
    """Every execution of `job` as node `nid` answers, oldest first, across pages."""
    s, out, token = stub(c, nid), [], ""
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
    any_node = "n1" if leader != "n1" else "n2"  # a follower: forwarded
    spec = pb.JobSpec(name="tick", schedule=f"@every {EVERY_S}s",
                      handler=pb.Handler(shell=pb.ShellHandler(command="true")))
    stub(c, any_node).PutJob(pb.PutJobRequest(job=spec, request_id="create-tick"), timeout=15)

    wait_until(lambda: len(history(c, any_node, "tick")) >= 4, timeout=30, what="first fires")

    # SIGKILL the leader while it fires
    c.kill_node(leader)
    survivor = next(n for n in c.nodes if n != leader)
    new_leader = c.wait_leader(timeout=30, exclude=leader)
    assert new_leader != leader
    n_at_failover = len(history(c, survivor, "tick"))
    wait_until(lambda: len(history(c, survivor, "tick")) >= n_at_failover + 4,
               timeout=30, what="fires after failover")
    before_restart = history(c, survivor, "tick")
    assert_contiguous(before_restart, EVERY_S * 1000)
    assert len({e.term for e in before_restart}) >= 2, "the fires should span two leader terms"

    # the killed node restarts and catches up from the log (stale read served locally)
    c.start_node(leader)
    def caught_up():
        mine = {e.id for e in history(c, leader, "tick", stale=True)}
        return {e.id for e in before_restart} <= mine
    wait_until(caught_up, timeout=60, what="the restarted node to catch up")

    # stop all three, start them again: every committed execution is still there, and the
    # instants that fell due while the cluster was down are fired (catch-up), none missing
    committed = history(c, survivor, "tick")
    c.stop()
    down_ms = int(time.time() * 1000)
    c.start()
    c.wait_leader(timeout=60)
    up_ms = int(time.time() * 1000)
    after = wait_until(lambda: (h := history(c, "n1", "tick")) and len(h) >= len(committed) + 3 and h,
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
    c.wait_feature_level()          # the leader's raise is an entry too: before `before`
    s = stub(c, "n2")
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
    before = pb_grpc.ClusterStub(c.channel("n2")).Status(
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
    after = pb_grpc.ClusterStub(c.channel("n2")).Status(
        pb.ClusterStatusRequest(), timeout=5).commit_index
    # PauseJob of an unknown job is refused by apply (it needs the committed state), the
    # invalid specs never reach the log
    assert after - before <= 1

    # health checking and reflection, so grpcurl and load balancers work
    ch = c.channel("n3")
    health = health_pb2_grpc.HealthStub(ch)
    for service in ("", "schedd.v1.Scheduler", "schedd.v1.Cluster"):
        r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert r.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(ch)
    reply = next(iter(refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)))
    listed = {svc.name for svc in reply.list_services_response.service}
    assert {*(full for full, _, _ in SERVICES.values()), "grpc.health.v1.Health"} <= listed   # every one served


def test_multi_node_cluster_refuses_to_start_without_a_secret(cluster_factory):
    c = cluster_factory(size=3)
    cfg = c.nodes["n1"].config
    cfg.write_text("\n".join(l for l in cfg.read_text().splitlines() if not l.startswith("secret_file")))
    c.start_node("n1")
    proc = c.nodes["n1"].proc
    assert proc.wait(timeout=30) == 2
    assert "refusing to start a multi-node cluster without a cluster secret" in c.nodes["n1"].log.read_text()


def test_snapshots_compact_the_log_and_bring_a_lagging_node_back(cluster_factory):
    """With a tiny compaction threshold: nodes snapshot and truncate their logs; a node that was
    down across compactions is rebuilt from the leader's snapshot; a restart restores from the
    local snapshot plus the journal tail. All replicas end with the same jobs. The cluster is at
    this build's feature level first, so the snapshots are format 6: one loader call with one
    string of plain values."""
    c = cluster_factory(size=3, raft={"compaction_entries": 40})
    c.start()
    leader = c.wait_leader(timeout=60)
    c.wait_feature_level(timeout=60)
    leader = c.wait_leader(timeout=60)
    lagging = next(n for n in c.nodes if n != leader)
    c.stop_node(lagging)
    s = stub(c, leader)
    for i in range(120):
        spec = pb.JobSpec(name=f"job-{i:03d}", schedule="@every 1h",
                          handler=pb.Handler(shell=pb.ShellHandler(command="true")))
        s.PutJob(pb.PutJobRequest(job=spec), timeout=15)
    up = [n for n in c.nodes if n != lagging]
    wait_until(lambda: all((c.root / n / "raft.dump").exists() for n in up), timeout=60,
               what="the running nodes to write a snapshot")

    def names(nid: str) -> list[str]:
        r = stub(c, nid).ListJobs(pb.ListJobsRequest(page_size=1000), timeout=10,
                                             metadata=[("x-schedd-stale-ok", "1")])
        return [j.spec.name for j in r.jobs]

    expected = names(leader)
    assert len(expected) == 120
    with gzip.open(c.root / leader / "raft.dump") as g:
        assert b"schedd.core.state\n_from_plain\n" in g.read(), "the snapshot should be format 6"
    c.start_node(lagging)
    wait_until(lambda: names(lagging) == expected, timeout=60, what="the lagging node to catch up")
    # it had no snapshot of its own when it stopped, so this restore is the leader's snapshot
    assert re.search(r"restored snapshot: 1[0-9]{2} jobs", c.nodes[lagging].log.read_text()), \
        "the lagging node should have been rebuilt from a snapshot"

    c.stop()
    c.start()
    c.wait_leader(timeout=60)
    for nid in c.nodes:
        wait_until(lambda nid=nid: names(nid) == expected, timeout=60, what=f"{nid} to restore its jobs")
