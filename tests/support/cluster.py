"""Helpers for tests that drive a real cluster (schedd.runtime.cluster.LocalCluster): schedctl as
a user runs it, metrics summed over the nodes, the connected workers, a finished execution."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import traceback

from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedd_client.schedctl import main as schedctl_main


def schedctl(cluster, *args: str, at: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run schedctl as a user would against `cluster`: a LocalCluster (its admin context file,
    write_context()) or the path of a context file, named in SCHEDD_CONTEXT as a user's terminal
    would, with no other SCHEDD_* setting; `at`: the node address(es) to talk to instead
    (--cluster). Returns what a process would have given: exit status, stdout, stderr.

    It runs schedctl's `main` in this process (its own Client, closed when it returns): a fresh
    interpreter costs about a second of CPU per call, and the suite makes over a hundred. What
    only a real process shows is tested where it matters: the installed `schedctl` script
    (tests/integration/test_packaging.py), exit status, encoding and broken pipes of
    `python -m schedd_client.schedctl` (tests/security/test_cli_output.py), and `schedd local`'s
    printed context line (tests/integration/test_local_secure.py)."""
    context = cluster.write_context() if hasattr(cluster, "write_context") else cluster
    argv = [*(("--cluster", at) if at else ()), *args]
    with _SCHEDCTL_LOCK, _schedctl_environment(str(context)):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = schedctl_main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:  # noqa: BLE001 - as the interpreter does with an uncaught exception
                traceback.print_exc()
                code = 1
    p = subprocess.CompletedProcess(["schedctl", *argv], code, out.getvalue(), err.getvalue())
    if check and p.returncode != 0:
        raise AssertionError(f"schedctl {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


_SCHEDCTL_LOCK = threading.Lock()     # os.environ and sys.stdout/stderr are the process's


def schedctl_process(context, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """schedctl in a process of its own, as a user's shell runs it (`python -m
    schedd_client.schedctl`, SCHEDD_CONTEXT set and no other SCHEDD_* variable): for the calls a
    test means to make as a user does; the others go through `schedctl`, in this process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    env["SCHEDD_CONTEXT"] = str(context)
    p = subprocess.run([sys.executable, "-m", "schedd_client.schedctl", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"schedctl {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


@contextlib.contextmanager
def _schedctl_environment(context: str):
    """os.environ as a user's terminal would have it for schedctl: SCHEDD_CONTEXT set, no other
    SCHEDD_* variable but SCHEDD_TEST_MODE; put back as it was afterwards."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("SCHEDD_")}
    for k in saved:
        if k != "SCHEDD_TEST_MODE":
            del os.environ[k]
    os.environ["SCHEDD_CONTEXT"] = context
    try:
        yield
    finally:
        for k in [k for k in os.environ if k.startswith("SCHEDD_")]:
            del os.environ[k]
        os.environ.update(saved)


def metric_total(cluster, name: str, label: str = "") -> float:
    """The sum over every node of a Prometheus sample `name{...}` whose labels contain `label`."""
    total = 0.0
    for nid in cluster.nodes:
        try:
            text = cluster.http_get(nid, "/metrics")
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


def stop_local(proc: subprocess.Popen, timeout: float = 60) -> None:
    """Stop a `schedd local` started in a session of its own as Ctrl-C would (SIGINT to its
    group), SIGKILL the group if it is still there after `timeout`; reaped either way."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
