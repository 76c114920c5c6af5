"""A replica that stops converging is loud, end to end: a follower frozen by SIGSTOP
while the leader keeps appending is named in `schedctl cluster status`, in the leader's
`schedd_replica_stuck{peer}` and in a WARNING of its log; all of it clears once the follower
resumes and catches up. The writes health service follows quorum; liveness stays SERVING."""

from __future__ import annotations

import signal

import pytest

from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd.ports.fakes import wait_until
from tests.support.cluster import NOT_SERVING, SERVING, health, schedctl

pytestmark = pytest.mark.integration



def gauge(c, nid: str, name: str, peer: str) -> float | None:
    text = c.http_get(nid, "/metrics")
    for line in text.splitlines():
        if line.startswith(f'{name}{{peer="{peer}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_frozen_follower_is_named_then_cleared_and_writes_health_follows_quorum(cluster_factory):
    c = cluster_factory(size=3, raft={"replica_stuck_ms": 1500})
    c.start()
    leader = c.wait_leader(timeout=60)
    lead = c.nodes[leader]
    wait_until(lambda: health(c, leader, "schedd.writes") == SERVING, timeout=30, what="writes SERVING")
    with c.channel(leader) as ch:                # fires append an entry every second
        pb_grpc.SchedulerStub(ch).PutJob(pb.PutJobRequest(job=pb.JobSpec(
            name="tick", schedule="@every 1s", handler=pb.Handler(shell=pb.ShellHandler(command="true")))),
            timeout=15)
    frozen = next(n for n in c.nodes if n != leader)
    peer = c.nodes[frozen].raft
    c.signal_node(frozen, signal.SIGSTOP)
    try:
        def warned():
            out = schedctl(c, "cluster", "status", at=lead.grpc).stdout
            return out if f"WARNING: replica {frozen} ({peer}) is not converging" in out else None
        out = wait_until(warned, timeout=60, what="a warning naming the frozen follower")
        assert "entries behind leader" in out and "log repair stuck at index" in out
        assert gauge(c, leader, "schedd_replica_stuck", peer) == 1.0
        assert gauge(c, leader, "schedd_replica_lag_entries", peer) > 0
        assert health(c, leader, "schedd.writes") == SERVING         # the majority still commits
        log = lead.log.read_text(errors="replace")
        assert f"replica {frozen} ({peer}) is not converging" in log and "WARNING" in log
    finally:
        c.signal_node(frozen, signal.SIGCONT)
    wait_until(lambda: gauge(c, leader, "schedd_replica_stuck", peer) == 0.0, timeout=60,
               what="the follower to catch up")
    # (the status may still warn that the tick runs wait for a worker: this test has none)
    wait_until(lambda: f"replica {frozen}" not in schedctl(c, "cluster", "status", at=lead.grpc).stdout,
               timeout=30, what="the warning to clear")

    # no quorum: writes NOT_SERVING on the survivor, liveness still SERVING
    for nid in c.nodes:
        if nid != leader:
            c.kill_node(nid)
    wait_until(lambda: health(c, leader, "schedd.writes") == NOT_SERVING, timeout=60,
               what="writes NOT_SERVING without quorum")
    assert health(c, leader, "schedd.liveness") == SERVING and health(c, leader, "") == SERVING
