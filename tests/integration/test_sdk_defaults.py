"""The SDK finds its cluster as schedctl does and says when it cannot: `Client()` with no
arguments follows SCHEDD_CONTEXT (addresses, CA, certificate, token) on a real TLS cluster,
`Worker.from_context()` reads a worker's context file, a `Worker` that cannot reach any node says
so at WARNING on stderr with Python's default logging, `put_job` returns the job, and run states
come back as `RunState`, a str-valued enum."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import Client, RunState, job_spec
from schedd_worker import Worker

pytestmark = pytest.mark.integration


def test_client_and_worker_from_the_environment(cluster_factory, monkeypatch):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    c.bootstrap()
    monkeypatch.delenv("SCHEDD_CLUSTER", raising=False)
    monkeypatch.delenv("SCHEDD_TOKEN", raising=False)
    monkeypatch.setenv("SCHEDD_CONTEXT", str(c.write_context()))
    with Client(timeout=30) as client:                 # TLS, client certificate, token: all from the file
        job = client.put_job(job_spec("hello", command="echo hi", pool="sdk"))
        assert job.spec.name == "hello" and job.version == 1
        again = client.put_job_result(job_spec("hello", command="echo hi again", pool="sdk"))
        assert again.version == 2 and not again.created
        run = client.trigger_job("hello")
        assert RunState(run.state) is RunState.SCHEDULED and run.state == "SCHEDULED"

    worker_context = c.write_context(kind="worker", name="sdk-w", token=c.worker_token())
    monkeypatch.setenv("SCHEDD_WORKER_CONTEXT", str(worker_context))
    worker = Worker.from_context(pool="sdk", name="sdk-w", allow_root=True)
    assert worker.cluster == list(c.grpc_addresses) and worker.security.token == c.worker_token()
    assert worker.pool == "sdk"


def test_worker_that_cannot_connect_warns_on_stderr(tmp_path):
    with socket.socket() as s:                         # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = textwrap.dedent(f"""
        from schedd_worker import Worker
        Worker("127.0.0.1:{port}", allow_root=True).run()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    err = tmp_path / "stderr"
    with open(err, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", script], stderr=f, env=env)
    try:
        wait_until(lambda: "cannot connect to the leader" in err.read_text(), timeout=20,
                   what="the worker to warn that it cannot connect")
    finally:
        proc.kill()
        proc.wait(timeout=10)
