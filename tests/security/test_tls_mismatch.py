"""A plaintext client on a node that speaks only TLS waited its whole timeout
(15 s for schedctl) and then said "unavailable". gRPC reports the mismatch as UNAVAILABLE "Socket
closed", which a stopping node can say too, so the client asks the node for a TLS handshake
(`channels.speaks_tls`) and, when it answers, fails at once with `TlsRequired`, saying to use
--context / SCHEDD_CONTEXT. A node that is down or speaks plaintext is still retried."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from concurrent import futures

import grpc
import pytest

from schedd_client import AsyncClient, Client, TlsRequired
from schedd_client._failover import Router
from schedd_client._plans import Call
from schedd_client.channels import speaks_tls

SLOW = 15.0          # the client's timeout: failing "at once" is far below it
AT_ONCE = 6.0        # generous for a loaded 2-core machine


class _Err(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


CLOSED = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed"
REFUSED = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Connection refused"


@pytest.mark.parametrize(("details", "speaks", "final"), [
    (CLOSED, True, True),          # a TLS node closed a plaintext connection: stop now
    (CLOSED, False, False),        # a node closing as it stops: try the next
    (REFUSED, True, False),        # not a TLS-looking error: the probe is not even asked
])
def test_the_router_stops_only_on_a_confirmed_tls_node(details, speaks, final):
    asked: list[str] = []

    def probe(address: str) -> bool:
        asked.append(address)
        return speaks

    attempts = Router(["a:1", "b:1"], SLOW, tls_probe=probe).attempts(Call("cluster", "Status", None))
    got = attempts.failed("a:1", _Err(grpc.StatusCode.UNAVAILABLE, details))
    assert isinstance(got, TlsRequired) if final else got is None
    assert asked == (["a:1"] if details == CLOSED else [])
    if final:
        assert "requires TLS" in got.message and "--context" in got.message and "SCHEDD_CONTEXT" in got.message
    no_probe = Router(["a:1"], SLOW).attempts(Call("cluster", "Status", None))
    assert no_probe.failed("a:1", _Err(grpc.StatusCode.UNAVAILABLE, details)) is None   # TLS clients


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_speaks_tls_tells_a_tls_node_from_plaintext_and_from_nothing(cluster_factory):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=90)
    assert speaks_tls(c.nodes["n1"].grpc)                    # TLS, client certificates required
    plain = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = plain.add_insecure_port("127.0.0.1:0")
    plain.start()
    try:
        assert not speaks_tls(f"127.0.0.1:{port}")          # a plaintext gRPC server
    finally:
        plain.stop(grace=None)
    assert not speaks_tls(f"127.0.0.1:{_free_port()}")      # nothing listening


def test_a_plaintext_client_on_a_tls_node_fails_at_once(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=90)
    addresses = c.cluster_arg

    started = time.monotonic()
    with Client(addresses, timeout=SLOW) as plain, pytest.raises(TlsRequired) as e:
        plain.get_job("nope")
    assert time.monotonic() - started < AT_ONCE
    assert "requires TLS" in e.value.message and "--context" in e.value.message

    async def aio() -> None:
        async with AsyncClient(addresses, timeout=SLOW) as client:
            await client.get_job("nope")
    started = time.monotonic()
    with pytest.raises(TlsRequired):
        asyncio.run(aio())
    assert time.monotonic() - started < AT_ONCE

    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")} | {"SCHEDD_CLUSTER": addresses}
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "schedd_client.schedctl", "--timeout", str(SLOW), "job", "list"],
                       capture_output=True, text=True, timeout=60, env=env)
    took = time.monotonic() - started
    assert p.returncode == 1 and "requires TLS" in p.stderr and "SCHEDD_CONTEXT" in p.stderr, p.stderr
    assert took < SLOW, f"schedctl took {took:.1f}s"       # a fresh interpreter's start-up included

    # a worker: it used to retry forever ("cannot connect to the leader ... retrying with
    # backoff"); now it stops at once and says what it needs (the CLI exits 2, the SDK raises)
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "schedd_worker", "--cluster", addresses, "--name", "plain",
                        "--allow-root", "--container-runtime", "off"],
                       capture_output=True, text=True, timeout=60, env=env | {"SCHEDD_TOKEN": "x" * 32})
    took = time.monotonic() - started
    assert p.returncode == 2 and "requires TLS" in p.stderr and "--context" in p.stderr, p.stderr[-2000:]
    assert took < SLOW, f"the worker took {took:.1f}s"
