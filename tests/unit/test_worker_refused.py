"""A worker given a client credential instead of a worker token logged
"PERMISSION_DENIED ... retrying with backoff" at INFO and retried forever (the SDK, with
Python's default logging, said nothing at all). A credential the cluster refuses is now an error
the operator sees at once: the runtime logs it at ERROR with what to do and raises
CredentialRefused, `schedd-worker` exits 2 and the SDK raises. What can heal (a node that is
down, a replica that refuses while another answers, no leader yet) is still retried. Against
the fake leaders of test_worker_runtime (real gRPC on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import grpc
import pytest

from schedd_worker import CredentialRefused, Worker
from schedd_worker.runtime import WorkerRuntime
from tests.unit.test_worker_runtime import DEADLINE, leaders, until, workers  # noqa: F401 - fixtures

PERMISSION = (grpc.StatusCode.PERMISSION_DENIED, "permission denied: Workers.Connect needs a worker token")
UNAUTH = (grpc.StatusCode.UNAUTHENTICATED, "authentication required: pass a token")


async def _refused(rt: WorkerRuntime) -> CredentialRefused:
    with pytest.raises(CredentialRefused) as e:
        await asyncio.wait_for(rt.run(asyncio.Event()), DEADLINE)
    return e.value


async def test_a_client_token_refused_by_connect_stops_the_worker_at_once(leaders, caplog):
    leader = await leaders()
    leader.refuse_connect = PERMISSION
    caplog.set_level(logging.INFO, "schedd_worker")
    err = await _refused(WorkerRuntime([leader.address], name="w1", drain_grace_s=1))
    assert leader.connects == 1                                  # asked once, not retried
    assert "PERMISSION_DENIED" in str(err) and "worker token" in str(err) and "--worker" in str(err)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name.startswith("schedd")]
    assert errors and "refused this worker's credential" in errors[0].getMessage()
    assert not any("retrying with backoff" in r.getMessage() for r in caplog.records)


async def test_every_node_refusing_status_stops_it_and_a_down_node_does_not_count(leaders):
    a, b = await leaders(), await leaders()
    a.refuse_status = b.refuse_status = UNAUTH
    with socket_closed() as down:
        err = await _refused(WorkerRuntime([a.address, down, b.address], name="w1", drain_grace_s=1))
    assert (a.statuses, b.statuses) == (1, 1) and a.connects == b.connects == 0
    assert sorted(addr for addr, _ in err.refusals) == sorted([a.address, b.address])   # asked at once


async def test_what_can_heal_is_retried(leaders, workers):
    """One replica refuses (e.g. it has not applied the token yet) while another takes it: the
    worker connects. A cluster that is down is retried until it comes up."""
    lagging, leader = await leaders(), await leaders()
    lagging.refuse_status = UNAUTH
    lagging.status_leader = None
    w = workers([lagging.address, leader.address])
    await leader.connected()
    assert not w.task.done()
    with socket_closed() as down:
        w2 = workers([down], name="w2")
        await until(lambda: w2.rt._link.backoff > 0.3, what="a retry against a node that is down")
        assert not w2.task.done()


async def test_the_sdk_raises(leaders):
    leader = await leaders()
    leader.refuse_connect = PERMISSION
    sdk = Worker(leader.address, name="sdk", allow_root=True)       # the suite may run as root
    with pytest.raises(CredentialRefused, match="worker token"):
        await asyncio.wait_for(sdk.run_async(), DEADLINE)


async def test_schedd_worker_exits_2_with_the_error(leaders):
    leader = await leaders()
    leader.refuse_connect = PERMISSION
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "schedd_worker", "--cluster", leader.address, "--allow-root",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = err.decode()
    assert proc.returncode == 2, text
    assert " ERROR " in text and text.count("refused this worker's credential") == 1, text
    # nothing is retried once the credential is refused (a first call that failed otherwise, an
    # INTERNAL from the fake leader's gRPC core while it starts, is retried as it should be)
    assert "retrying" not in text.partition("refused this worker's credential")[2], text


class socket_closed:
    """An address on 127.0.0.1 where nothing listens (a node that is down)."""

    def __enter__(self) -> str:
        import socket
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))          # bound, never listening: connections refused
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        self.sock.close()
