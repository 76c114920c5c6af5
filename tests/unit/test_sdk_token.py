"""The SDK's clients put the token in each call's metadata themselves: gRPC's call credentials
(access_token_call_credentials) start a thread for every call, which cost a third of a client's
CPU per call at 64 calls in flight. The connection stays secured as before: a token
without TLS still gets gRPC's local (loopback-only) credentials, never a plaintext channel."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from schedd_client import AsyncClient, Client
from schedd_client.channels import Security
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

TOKEN = "acc0123456789abc.s3cret"


class _Recorder(pb_grpc.SchedulerServicer):
    def __init__(self) -> None:
        self.seen: list[str | None] = []

    async def GetJob(self, request, context):
        self.seen.append(dict(context.invocation_metadata() or ()).get("authorization"))
        return pb.Job(spec=pb.JobSpec(name=request.name))


@pytest.fixture
async def local_server():
    """A loopback server that only accepts gRPC local credentials (as a token without TLS needs)."""
    server = grpc.aio.server()
    rec = _Recorder()
    pb_grpc.add_SchedulerServicer_to_server(rec, server)
    port = server.add_secure_port("127.0.0.1:0", grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP))
    await server.start()
    try:
        yield f"127.0.0.1:{port}", rec
    finally:
        await server.stop(None)


class _ThreadStarts:
    def __init__(self, monkeypatch) -> None:
        self.n = 0
        real = threading.Thread.start

        def counting(thread):
            self.n += 1
            return real(thread)
        monkeypatch.setattr(threading.Thread, "start", counting)


async def test_async_client_calls_carry_the_token_and_start_no_thread(local_server, monkeypatch):
    address, rec = local_server
    async with AsyncClient([address], token=TOKEN, timeout=30) as ac:
        await ac.get_job("warm")                     # the channel is up
        starts = _ThreadStarts(monkeypatch)
        for _ in range(20):
            await ac.get_job("j")
    assert rec.seen == [f"Bearer {TOKEN}"] * 21
    assert starts.n == 0


async def test_blocking_client_calls_carry_the_token_and_start_no_thread(local_server, monkeypatch):
    address, rec = local_server

    def calls() -> int:
        with Client([address], token=TOKEN, timeout=30) as cl:
            cl.get_job("warm")
            starts = _ThreadStarts(monkeypatch)
            for _ in range(20):
                cl.get_job("j")
            return starts.n
    assert await asyncio.to_thread(calls) == 0
    assert rec.seen == [f"Bearer {TOKEN}"] * 21


def test_a_token_never_rides_a_plaintext_channel():
    assert Security(token=TOKEN).transport_credentials() is not None      # local credentials
    assert Security().transport_credentials() is None                     # no token: plaintext allowed
