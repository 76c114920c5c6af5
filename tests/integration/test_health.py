"""gRPC health of a node that cannot take writes: a member of a three-node cluster started alone
knows no leader and has no quorum. Its writes and the services that need the leader (Scheduler,
Dags: their calls are writes or leader reads) say NOT_SERVING, so a load balancer or a readiness
probe routes around it; liveness (`""`, schedd.liveness) and Cluster (its status explains why)
stay SERVING while the process runs."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedd.ports.fakes import wait_until

pytestmark = pytest.mark.integration

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health(addr: str, service: str) -> int:
    with grpc.insecure_channel(addr) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service),
                                                    timeout=5).status


def test_a_node_without_quorum_serves_liveness_but_not_writes(cluster_factory):
    c = cluster_factory(size=3)
    alone = c.start_node("n1")
    wait_until(lambda: health(alone.grpc, "schedd.liveness") == SERVING, timeout=60, what="the node to start")
    for service in ("schedd.writes", "schedd.v1.Scheduler", "schedd.v1.Dags"):
        assert health(alone.grpc, service) == NOT_SERVING, service
    for service in ("", "schedd.liveness", "schedd.v1.Cluster"):
        assert health(alone.grpc, service) == SERVING, service
