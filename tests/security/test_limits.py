"""API limits: configurable caps with clear RESOURCE_EXHAUSTED errors that name the
cap: jobs per call, bytes per call, jobs per team, requests in flight per connection."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from schedd.runtime import config
from schedd.runtime.config import Limits
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_client import Client, job_spec
from schedd_client.errors import ResourceExhausted
from schedd.ports.fakes import wait_until
from schedd.core import commands as C
from tests.security._api_harness import NOW_MS, Proposals
from tests.support.state import text




def test_put_jobs_over_cap_is_resource_exhausted(api):
    """With the default limits, one PutJobs of 50,000 jobs is refused before anything is proposed."""
    server = api()
    specs = [pb.JobSpec(name=f"j{i}", handler=pb.Handler(shell=pb.ShellHandler(command="true")))
             for i in range(50_000)]
    with Client(server.address, timeout=60) as client, pytest.raises(ResourceExhausted) as err:
        client.put_jobs(specs)
    assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "50000 jobs" in err.value.message and "limits.max_jobs_per_call" in err.value.message
    assert server.node.kinds() == ["epoch"]


def test_put_jobs_over_byte_cap_is_resource_exhausted(api):
    server = api(limits=Limits(max_bytes_per_call=100_000))
    specs = [job_spec(f"j{i}", command="echo " + "x" * 1000) for i in range(200)]
    with Client(server.address) as client, pytest.raises(ResourceExhausted) as err:
        client.put_jobs(specs)
    assert "limits.max_bytes_per_call" in err.value.message and "100000" in err.value.message
    assert server.node.kinds() == ["epoch"]


def test_team_job_quota_is_resource_exhausted(api):
    server = api(limits=Limits(max_jobs_per_team=5))
    with Client(server.address) as client:
        client.put_jobs([job_spec(f"ops-{i}", command="true", team="ops") for i in range(4)])
        with pytest.raises(ResourceExhausted) as err:
            client.put_jobs([job_spec(f"new-{i}", command="true", team="ops") for i in range(2)])
        assert "team 'ops'" in err.value.message and "limits.max_jobs_per_team" in err.value.message
        client.put_job(job_spec("ops-4", command="true", team="ops"))          # the 5th fits
        with pytest.raises(ResourceExhausted):
            client.put_job(job_spec("ops-5", command="true", team="ops"))
        client.put_job(job_spec("ops-0", command="echo updated", team="ops"))  # updates still do
        client.put_job(job_spec("other", command="true", team="dev"))          # other teams too
        with pytest.raises(ResourceExhausted):                                 # moving in counts
            client.put_job(job_spec("other", command="true", team="ops"))
    with server.node.lock:
        assert len(server.node.state.by_team["ops"]) == 5


class _Slow(Proposals):
    """Proposals wait until released, so calls stay in flight."""

    def __init__(self) -> None:
        self.release = threading.Event()

    async def propose(self, node, entry):
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return node.apply(entry)


def test_inflight_requests_per_connection_are_capped(api):
    slow = _Slow()
    server = api(limits=Limits(max_inflight_per_connection=2), proposals=slow)
    _seed_jobs(server, 3)                 # a write naming a missing job is refused before proposing
    ch = grpc.insecure_channel(server.address)
    stub = pb_grpc.SchedulerStub(ch)

    def pause(i):
        return stub.PauseJob.future(pb.JobRef(name=f"j{i}", request_id=f"r{i}"), timeout=30)

    try:
        held = [pause(i) for i in range(2)]
        # wait until both are in flight on the server, then a third one on the same connection
        wait_until(lambda: _inflight(server) == 2, timeout=30, what="two calls in flight")
        with pytest.raises(grpc.RpcError) as err:
            pause(2).result()
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "limits.max_inflight_per_connection" in err.value.details()
        own_connection = [("grpc.use_local_subchannel_pool", 1)]   # channels share one otherwise
        with grpc.insecure_channel(server.address, options=own_connection) as other:  # it is served
            with ThreadPoolExecutor(1) as pool:
                f = pool.submit(pb_grpc.SchedulerStub(other).GetJob, pb.GetJobRequest(name="x"), timeout=30)
                with pytest.raises(grpc.RpcError) as missing:
                    f.result()
                assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        slow.release.set()
    for f in held:                                                 # they complete
        assert f.result().spec.paused
    ch.close()


def test_a_client_sent_forwarded_header_does_not_skip_the_inflight_cap(api):
    """Only a node-signed forwarded call is exempt; a client writing x-schedd-forwarded (and a
    principal) itself is counted like any other (it used to skip the cap)."""
    slow = _Slow()
    server = api(limits=Limits(max_inflight_per_connection=1), proposals=slow)
    _seed_jobs(server, 2)
    ch = grpc.insecure_channel(server.address)
    stub = pb_grpc.SchedulerStub(ch)
    forged = (("x-schedd-forwarded", "n1"), ("x-schedd-principal", "token:admin"))
    try:
        held = stub.PauseJob.future(pb.JobRef(name="j0", request_id="r0"), timeout=30, metadata=forged)
        wait_until(lambda: _inflight(server) == 1, timeout=30, what="one call in flight")
        with pytest.raises(grpc.RpcError) as err:
            stub.PauseJob(pb.JobRef(name="j1", request_id="r1"), timeout=30, metadata=forged)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        slow.release.set()
    assert held.result().spec.paused
    ch.close()


def _seed_jobs(server, n: int) -> None:
    """Jobs j0..j(n-1), applied straight to the state (the API's proposals are held here)."""
    for i in range(n):
        assert server.node.apply(C.encode(C.PUT, rid="", now=NOW_MS, term=1, spec=text(name=f"j{i}"),
                                          name=f"j{i}")).ok


def _inflight(server) -> int:
    limit = server.server_interceptor
    return sum(limit.inflight.values())


def test_limits_table_in_node_config(tmp_path):
    p = tmp_path / "node.toml"
    base = 'node_id = "n1"\ndata_dir = "d"\nraft_address = "127.0.0.1:7001"\ngrpc_address = "127.0.0.1:7070"\n'
    assert config.load(_write(p, base)).limits == Limits()
    cfg = config.load(_write(p, base + "[limits]\nmax_jobs_per_call = 100\nmax_jobs_per_team = 0\n"))
    assert cfg.limits.max_jobs_per_call == 100 and cfg.limits.max_jobs_per_team == 0
    with pytest.raises(config.ConfigError, match="max_jobs_per_cal"):
        config.load(_write(p, base + "[limits]\nmax_jobs_per_cal = 100\n"))
    with pytest.raises(config.ConfigError, match=r"\[limits\].max_bytes_per_call"):
        config.load(_write(p, base + "[limits]\nmax_bytes_per_call = -1\n"))


def _write(p, text):
    p.write_text(text)
    return p
