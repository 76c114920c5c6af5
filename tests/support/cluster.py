"""Helpers for tests that drive a real cluster (schedd.runtime.cluster.LocalCluster): schedctl as
a user runs it, metrics summed over the nodes, the connected workers, a finished execution."""

from __future__ import annotations

import os
import subprocess
import sys

from grpc_health.v1 import health_pb2, health_pb2_grpc


def schedctl(cluster, *args: str, at: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run schedctl as a user would (a fresh process) against `cluster`: a LocalCluster (its
    admin context file, write_context()) or the path of a context file, named in SCHEDD_CONTEXT
    as a user's terminal would; `at`: the node address(es) to talk to instead (--cluster)."""
    context = cluster.write_context() if hasattr(cluster, "write_context") else cluster
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_") or k == "SCHEDD_TEST_MODE"}
    env["SCHEDD_CONTEXT"] = str(context)
    cmd = [sys.executable, "-c", "import sys; from schedd_client.schedctl import main; sys.exit(main())",
           *(("--cluster", at) if at else ()), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"schedctl {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def metric_total(cluster, name: str, label: str = "") -> float:
    """The sum over every node of a Prometheus sample `name{...}` whose labels contain `label`."""
    import urllib.request
    total = 0.0
    for node in cluster.nodes.values():
        try:
            text = urllib.request.urlopen(f"http://{node.metrics}/metrics", timeout=5).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(name + "{") and label in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def workers_of(c) -> list[str]:
    from schedd_proto import scheduler_pb2 as pb
    from schedd_proto import scheduler_pb2_grpc as pb_grpc
    with c.channel(c.leader() or "n1") as ch:
        return [w.name for w in pb_grpc.WorkersStub(ch).ListWorkers(pb.ListWorkersRequest(), timeout=5).workers]


def finished(client, eid, states=("SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "LOST")):
    ex = client.get_execution(eid)
    return ex if ex.state in states else None


SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health(c, nid: str, service: str) -> int:
    """Node `nid`'s health status of `service`, over the cluster's own (secured) channel."""
    with c.channel(nid) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service),
                                                    timeout=5).status
