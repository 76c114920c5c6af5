"""Listings never exceed gRPC's 4 MiB message size. Pages are bounded by bytes
as well as by count, `job list` carries summaries (GetJob has the full spec), and the SDK and
schedctl follow page tokens to the end."""

from __future__ import annotations

import json

import pytest

from schedd.core import commands as C
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_client import Client, job_spec
from schedd_client.schedctl import main as schedctl_main
from tests.security._api_harness import NOW_MS, ApiServer, InMemoryNode

import grpc

GRPC_DEFAULT_MAX = 4 * 1024 * 1024


@pytest.fixture
def server():
    s = ApiServer(InMemoryNode())
    yield s
    s.stop()


def _big_job(i: int) -> pb.JobSpec:
    """About 15 KB of spec: a long command, a long description and env values."""
    return job_spec(f"big-{i:03d}", command="echo " + "c" * 7000, description="d" * 1000,
                    env={f"V{k}": "e" * 1000 for k in range(7)}, schedule="@every 1h")


def test_job_list_beyond_4mib_pages_by_bytes(server, capsys):
    with Client(server.address, timeout=60) as client:
        client.put_jobs([_big_job(i) for i in range(300)])           # 4.5 MB of specs
        assert schedctl_main(["--cluster", server.address, "job", "list"]) == 0
        table = capsys.readouterr().out
        assert table.count("big-") == 300

        summaries = list(client.list_jobs())
        assert len(summaries) == 300 and all(j.summary for j in summaries)
        assert not summaries[0].spec.HasField("handler")
        assert summaries[0].spec.schedule == "@every 1h" and summaries[0].next_fire_ms

        full = list(client.list_jobs(full=True, page_size=1000))
        assert len(full) == 300 and not full[0].summary
        assert full[-1].spec.handler.shell.command.startswith("echo ccc")
        assert client.get_job("big-299").spec.handler.shell.command == full[-1].spec.handler.shell.command

    with grpc.insecure_channel(server.address) as ch:
        page = pb_grpc.SchedulerStub(ch).ListJobs(pb.ListJobsRequest(page_size=1000, full=True), timeout=30)
    assert page.next_page_token and 0 < len(page.jobs) < 300 and page.ByteSize() < GRPC_DEFAULT_MAX // 2


def _fail_many_times(node: InMemoryNode, job: str, runs: int, attempts: int) -> None:
    """Executions whose every attempt failed with a full output tail and error text, built from
    the entries the leader and the workers would commit."""
    def put(kind, **args):
        result = node.apply(C.encode(kind, rid="", now=NOW_MS, term=1, by="test", **args))
        assert result.ok, result
        return result

    for _ in range(runs):
        t = put(C.TRIGGER, name=job).payload.scheduled_ms
        for n in range(1, attempts + 1):
            token = put(C.START, job=job, scheduled_ms=t, attempt=n, worker="w1").payload.token
            put(C.FINISH, job=job, scheduled_ms=t, token=token, state="FAILED", exit_code=1,
                error="e" * 2048, output_tail="o" * 4096)


def test_run_list_with_many_attempts_pages(server, capsys):
    with Client(server.address, timeout=60) as client:
        client.put_job(job_spec("flaky", command="false", retry=pb.RetryPolicy(max_attempts=100)))
        _fail_many_times(server.node, "flaky", runs=16, attempts=60)    # ~6 MB of attempts
        assert schedctl_main(["--cluster", server.address, "run", "list", "flaky", "--limit", "0"]) == 0
        assert capsys.readouterr().out.count("flaky@") == 16
        assert schedctl_main(["--cluster", server.address, "-o", "json", "run", "list", "flaky",
                              "--limit", "0"]) == 0
        runs = json.loads(capsys.readouterr().out)
        assert len(runs) == 16 and all(len(r["attempts"]) == 60 for r in runs)
        assert len(list(client.list_executions("flaky", oldest_first=True))) == 16

    with grpc.insecure_channel(server.address) as ch:
        page = pb_grpc.SchedulerStub(ch).ListExecutions(pb.ListExecutionsRequest(job="flaky", page_size=1000),
                                                        timeout=30)
    assert page.next_page_token and 0 < len(page.executions) < 16 and page.ByteSize() < GRPC_DEFAULT_MAX // 2


def test_run_list_all_instants_with_many_attempts_pages(server, capsys):
    """`run list JOB --all-instants` (ListInstants) carries executions too: paged by bytes."""
    later = (NOW_MS + 60_000) / 1000
    with Client(server.address, timeout=60) as client:
        client.put_job(job_spec("flaky", command="false", retry=pb.RetryPolicy(max_attempts=100)))
        _fail_many_times(server.node, "flaky", runs=16, attempts=60)
        assert schedctl_main(["--cluster", server.address, "-o", "json", "run", "list", "flaky",
                              "--all-instants", "--until", "now"], now=lambda: later) == 0
        rows = json.loads(capsys.readouterr().out)
        assert len(rows) == 16 and all(len(r["execution"]["attempts"]) == 60 for r in rows)
        assert "more follow" not in capsys.readouterr().err            # all 16 shown: no note
        # A list cut at --limit (default 50) says so, and how to go on.
        assert schedctl_main(["--cluster", server.address, "-o", "json", "run", "list", "flaky",
                              "--all-instants", "--until", "now", "--limit", "5"], now=lambda: later) == 0
        out = capsys.readouterr()
        assert len(json.loads(out.out)) == 5
        assert "showing the first 5 instants" in out.err and "--since 2026-" in out.err
        window = dict(start_ms=NOW_MS - 1000, end_ms=NOW_MS + 60_000)
        assert len(client.list_instants("flaky", **window)) == 16
        assert [r.instant_ms for r in client.list_instants("flaky", limit=5, **window)] == \
            [NOW_MS + i for i in range(5)]

    with grpc.insecure_channel(server.address) as ch:
        page = pb_grpc.SchedulerStub(ch).ListInstants(
            pb.ListInstantsRequest(job="flaky", from_ms=NOW_MS - 1000, to_ms=NOW_MS + 60_000), timeout=30)
    assert page.next_page_token and 0 < len(page.instants) < 16 and page.ByteSize() < GRPC_DEFAULT_MAX // 2
