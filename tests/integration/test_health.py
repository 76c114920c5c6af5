"""gRPC health of a node that cannot take writes: a member of a three-node cluster started alone
knows no leader and has no quorum. `schedd.writes` says NOT_SERVING, so a load balancer or a
readiness probe routes around it; liveness (`""`, schedd.liveness) stays SERVING while the
process runs, and so do the per-service names (their status is liveness: a follower that has not
yet heard from a new leader still answers Cluster.Status and stale reads)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from schedd.ports.fakes import wait_until
from tests.support.cluster import NOT_SERVING, SERVING, health

pytestmark = pytest.mark.integration


def probe(config, *args: str) -> subprocess.CompletedProcess[str]:
    """`schedd health --config FILE ...`: exit 0 when SERVING."""
    return subprocess.run([sys.executable, "-m", "schedd", "health", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)


def test_writes_health_follows_quorum_and_liveness_stays_serving(cluster_factory):
    c = cluster_factory(size=3)
    alone = c.start_node("n1")
    wait_until(lambda: health(c, "n1", "schedd.liveness") == SERVING, timeout=60, what="the node to start")
    # the replica watch has judged (it logs its first verdict), and it stays NOT_SERVING
    wait_until(lambda: "writes NOT served: no leader is known" in alone.log.read_text(errors="replace"),
               timeout=30, what="the first writes verdict")
    assert health(c, "n1", "schedd.writes") == NOT_SERVING
    for service in ("", "schedd.liveness", "schedd.v1.Scheduler", "schedd.v1.Cluster"):
        assert health(c, "n1", service) == SERVING, service
    # `schedd health` (the container HEALTHCHECK) says the same from the node's config alone
    assert probe(alone.config).returncode == 0
    writes = probe(alone.config, "--service", "schedd.writes")
    assert writes.returncode == 1 and "NOT_SERVING" in writes.stdout, writes
    # a second member makes a quorum: a leader is elected and writes are served on both
    c.start_node("n2")
    for nid in ("n1", "n2"):
        wait_until(lambda nid=nid: health(c, nid, "schedd.writes") == SERVING, timeout=60,
                   what=f"writes SERVING on {nid} once a quorum formed")
    assert probe(alone.config, "--service", "schedd.writes").returncode == 0
