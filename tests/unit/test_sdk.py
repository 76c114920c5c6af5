"""The SDK (schedd_client) against an in-process fake of the schedd gRPC API.

``FakeCluster`` serves ``schedd.v1.Scheduler`` and ``schedd.v1.Cluster`` from plain dicts on one or
more loopback ports sharing one state (like nodes that forward to a leader), with injectable
failures (tests/support/fake_api.py).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator

import grpc
import pytest

from schedd_proto import scheduler_pb2 as pb
from schedd_client import (
    AlreadyExists,
    AsyncClient,
    Client,
    Conflict,
    NotFound,
    SchedError,
    Unavailable,
    ValidationError,
    format_duration,
    format_time,
    job_spec,
    parse_cluster,
    parse_duration,
    relative_time,
    spec_from_dict,
    spec_to_dict,
    to_dict,
)
from schedd_client.errors import error_from_rpc
from tests.support.fake_api import (
    MINUTE_MS,
    NOW_MS,
    FakeCluster,
    add_execution,
    dead_address,
)

@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    cluster = FakeCluster(1)
    yield cluster
    cluster.stop()


@pytest.fixture
def fake3() -> Iterator[FakeCluster]:
    cluster = FakeCluster(3)
    yield cluster
    cluster.stop()


@pytest.fixture
def client(fake: FakeCluster) -> Iterator[Client]:
    with Client(fake.cluster, timeout=5) as c:
        yield c


# ---------------------------------------------------------------- jobs through the SDK


def test_put_get_update_job(client: Client, fake: FakeCluster) -> None:
    created = client.put_job_result(job_spec("backup", schedule="0 2 * * *", tz="Europe/Paris", command="backup.sh"))
    assert isinstance(created, pb.PutJobResponse)
    assert created.created and created.job.version == 1

    job = client.get_job("backup", upcoming=3)
    assert isinstance(job, pb.Job)
    assert job.spec.timezone == "Europe/Paris" and job.spec.handler.shell.command == "backup.sh"
    assert list(job.upcoming_ms) == [NOW_MS + MINUTE_MS * i for i in (1, 2, 3)]
    assert fake.state.requests_of("GetJob")[-1].upcoming == 3

    updated = client.put_job(job_spec("backup", schedule="0 3 * * *", command="backup.sh"), expected_version=1)
    assert isinstance(updated, pb.Job) and updated.version == 2 and updated.spec.schedule == "0 3 * * *"


def test_put_job_refusals_map_to_exceptions(client: Client) -> None:
    client.put_job(job_spec("a", command="x"))
    with pytest.raises(AlreadyExists) as exists:
        client.put_job(job_spec("a", command="x"), create_only=True)
    assert exists.value.code == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(Conflict):
        client.put_job(job_spec("a", command="x"), expected_version=7)
    with pytest.raises(ValidationError) as invalid:
        client.put_job(job_spec("b", schedule="bad", command="x"))
    assert invalid.value.message == "schedule 'bad': not a cron expression"
    with pytest.raises(NotFound):
        client.get_job("nope")
    assert isinstance(invalid.value, SchedError)


def test_list_jobs_walks_every_page(client: Client, fake: FakeCluster) -> None:
    for i in range(7):
        fake.add_job(f"job-{i}", team="ops" if i % 2 else "web", paused=i == 3)
    names = [job.spec.name for job in client.list_jobs(page_size=3)]
    assert names == [f"job-{i}" for i in range(7)]
    assert [r.page_token for r in fake.state.requests_of("ListJobs")] == ["", "3", "6"]
    assert [j.spec.name for j in client.list_jobs(team="ops")] == ["job-1", "job-3", "job-5"]
    assert [j.spec.name for j in client.list_jobs(state="paused")] == ["job-3"]


def test_pause_resume_trigger_delete(client: Client, fake: FakeCluster) -> None:
    fake.add_job("nightly")
    paused = client.pause_job("nightly")
    assert isinstance(paused, pb.Job) and paused.paused and paused.version == 2
    assert not client.resume_job("nightly").paused

    run = client.trigger_job("nightly")
    assert isinstance(run, pb.Execution)
    assert run.job == "nightly" and run.trigger == "manual" and run.state == "SCHEDULED"
    assert client.get_execution(run.id) == run

    assert client.delete_job("nightly") is None
    with pytest.raises(NotFound):
        client.delete_job("nightly")
    with pytest.raises(NotFound):
        client.trigger_job("nightly")


def test_put_jobs_sends_one_atomic_request(client: Client, fake: FakeCluster) -> None:
    fake.add_job("job-0")
    result = client.put_jobs(job_spec(f"job-{i}", command="true") for i in range(5001))
    assert isinstance(result, pb.PutJobsResponse)
    assert (result.created, result.updated) == (5000, 1)
    batches = fake.state.requests_of("PutJobs")
    assert [len(b.jobs) for b in batches] == [5001] and not batches[0].create_only
    assert client.put_jobs([]) == pb.PutJobsResponse()
    with pytest.raises(AlreadyExists):
        client.put_jobs([job_spec("job-1", command="true")], create_only=True)


def test_list_executions_pages_and_stops_at_limit(client: Client, fake: FakeCluster) -> None:
    for i in range(12):
        add_execution(fake.state, "a" if i % 3 else "b", NOW_MS - i * MINUTE_MS, "SUCCEEDED")
    newest = list(client.list_executions(limit=7, page_size=5))
    assert [r.scheduled_ms for r in newest] == [NOW_MS - i * MINUTE_MS for i in range(7)]
    assert [r.page_size for r in fake.state.requests_of("ListExecutions")] == [5, 2]

    oldest = list(client.list_executions("a", oldest_first=True, page_size=3))
    assert [r.job for r in oldest] == ["a"] * 8
    assert [r.scheduled_ms for r in oldest] == sorted(r.scheduled_ms for r in oldest)
    assert list(client.list_executions(limit=0)) == []
    assert len(list(client.list_executions(state="SUCCEEDED"))) == 12


def test_get_execution_with_attempts(client: Client, fake: FakeCluster) -> None:
    attempt = pb.Attempt(number=1, worker="w1", fencing_token=41, started_ms=NOW_MS, ended_ms=NOW_MS + 900,
                         exit_code=3, error="exit status 3", output_tail="boom\n", state="FAILED")  # fmt: skip
    run = add_execution(fake.state, "etl", NOW_MS, "FAILED", attempts=[attempt])
    got = client.get_execution(run.id)
    assert got.attempts[0].fencing_token == 41 and got.attempts[0].output_tail == "boom\n"
    with pytest.raises(NotFound):
        client.get_execution("etl@2000-01-01T00:00:00Z")


def test_cluster_status_and_node_info(fake3: FakeCluster) -> None:
    with Client(fake3.cluster, timeout=5) as client:
        status = client.cluster_status()
        assert isinstance(status, pb.ClusterStatus)
        assert status.leader_id == "n1" and [n.id for n in status.nodes] == ["n1", "n2", "n3"]
        node = client.node_info(fake3.nodes[2].address)
        assert isinstance(node, pb.NodeStatus) and node.id == "n3"
        assert fake3.state.calls_to("NodeInfo") == ["n3"]


def test_node_info_does_not_fail_over(fake3: FakeCluster) -> None:
    fake3.nodes[1].fail("NodeInfo", grpc.StatusCode.UNAVAILABLE, "node is starting")
    with Client(fake3.cluster, timeout=5) as client:
        with pytest.raises(Unavailable) as err:
            client.node_info(fake3.nodes[1].address)
    assert err.value.tried == [fake3.nodes[1].address]
    assert "node is starting" in err.value.message
    assert fake3.state.calls_to("NodeInfo") == ["n2"]


def test_stale_ok_sends_metadata(client: Client, fake: FakeCluster) -> None:
    fake.add_job("a")
    client.get_job("a")
    assert "x-schedd-stale-ok" not in fake.nodes[0].metadata["GetJob"]
    client.get_job("a", stale_ok=True)
    list(client.list_executions(stale_ok=True))
    assert fake.nodes[0].metadata["GetJob"]["x-schedd-stale-ok"] == "1"
    assert fake.nodes[0].metadata["ListExecutions"]["x-schedd-stale-ok"] == "1"


# ---------------------------------------------------------------- failover and request ids


def test_failover_past_a_dead_node() -> None:
    cluster = FakeCluster(1)
    try:
        cluster.add_job("a")
        with Client([dead_address(), cluster.addresses[0]], timeout=5) as client:
            assert client.get_job("a").spec.name == "a"
            assert client.pause_job("a").paused
    finally:
        cluster.stop()


@pytest.fixture
def silent_address() -> Iterator[str]:
    """A node that accepts connections and never answers (stopped by SIGSTOP, or cut off with
    its connections left open): its TLS handshake or call never completes."""
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_a_silent_first_node_gets_a_share_of_the_deadline_and_is_named_unreachable(
        silent_address: str) -> None:
    """A 3 s call whose first node never answers moves on to the next within its share
    (a half here, at least MIN_ATTEMPT_SECONDS), and a node that never answered is reported as
    unreachable, not as a TLS failure."""
    import time as _time

    from schedd_client._failover import MIN_ATTEMPT_SECONDS, tls_failure
    cluster = FakeCluster(1)
    try:
        cluster.add_job("a")
        started = _time.monotonic()
        with Client([silent_address, cluster.addresses[0]], timeout=3) as client:
            assert client.get_job("a").spec.name == "a"
        assert _time.monotonic() - started < 1.5 + MIN_ATTEMPT_SECONDS
    finally:
        cluster.stop()
    with pytest.raises(Unavailable) as caught:
        with Client([silent_address], timeout=0.5) as client:
            client.get_job("a")
    assert f"node {silent_address} is unreachable" in caught.value.message, caught.value.message
    assert not tls_failure(caught.value.message)


@pytest.mark.parametrize("message, tls, unreachable", [
    ("failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7071: "
     "Handshake read failed (Endpoint closing)", False, True),
    ("Deadline Exceeded", False, True),
    ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7071: Failed to "
     "connect to remote host: Connection refused", False, True),
    ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7071: Ssl handshake "
     "failed: SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED",
     True, False),
    ("Socket closed", True, False),
    ("leadership could not be confirmed (...); retry (another node)", False, False),
])
def test_unreachable_is_told_from_a_tls_failure(message: str, tls: bool, unreachable: bool) -> None:
    from schedd_client import _failover
    code = grpc.StatusCode.DEADLINE_EXCEEDED if message == "Deadline Exceeded" else grpc.StatusCode.UNAVAILABLE
    assert _failover.tls_failure(message) is tls
    assert _failover.unreachable(code, message) is unreachable


def test_attempt_shares_are_bounded_and_grow_per_round() -> None:
    from schedd_client._failover import MAX_ATTEMPT_SECONDS, MIN_ATTEMPT_SECONDS, Router
    from schedd_client._plans import Call
    now = [0.0]
    router = Router(["a:1", "b:1", "c:1"], timeout=30, clock=lambda: now[0])
    shares = []
    for address, pause, timeout in router.attempts(Call("scheduler", "GetJob", pb.GetJobRequest())):
        shares.append(timeout)
        now[0] += pause + timeout
    assert shares[:3] == [MAX_ATTEMPT_SECONDS] * 3 and shares[3:6] == [2 * MAX_ATTEMPT_SECONDS] * 3
    assert sum(shares) == pytest.approx(30 - sum([0.05, 0.1]), abs=0.2)
    short = Router(["a:1", "b:1", "c:1"], timeout=1, clock=lambda: 0.0)
    first = next(iter(short.attempts(Call("scheduler", "GetJob", pb.GetJobRequest()))))
    assert first[2] == min(1, MIN_ATTEMPT_SECONDS)


def test_failover_sticks_to_the_node_that_answered(fake3: FakeCluster) -> None:
    fake3.add_job("a")
    fake3.nodes[0].fail("GetJob", grpc.StatusCode.UNAVAILABLE, "no leader")
    fake3.nodes[1].fail("GetJob", grpc.StatusCode.DEADLINE_EXCEEDED, "forwarding timed out")
    with Client(fake3.cluster, timeout=5) as client:
        client.get_job("a")
        client.get_job("a")
    assert fake3.state.calls_to("GetJob") == ["n1", "n2", "n3", "n3"]


def test_write_retried_after_unavailable_keeps_its_request_id(fake3: FakeCluster) -> None:
    fake3.nodes[0].fail("PutJob", grpc.StatusCode.UNAVAILABLE, "no leader")
    with Client(fake3.cluster, timeout=5) as client:
        reply = client.put_job_result(job_spec("a", command="x"), create_only=True)
        other = client.pause_job("a")
    assert reply.created and reply.job.version == 1 and other.version == 2
    put_ids = [rid for method, rid in fake3.state.request_ids if method == "PutJob"]
    assert len(put_ids) == 2 and put_ids[0] == put_ids[1] and len(put_ids[0]) == 32
    pause_ids = [rid for method, rid in fake3.state.request_ids if method == "PauseJob"]
    assert pause_ids and pause_ids[0] != put_ids[0]


def test_retry_after_unknown_outcome_is_deduplicated(fake: FakeCluster) -> None:
    fake.nodes[0].fail("PutJob", grpc.StatusCode.UNAVAILABLE,
                       "outcome unknown: retry with the same request_id", after_apply=True)  # fmt: skip
    with Client(fake.cluster, timeout=5) as client:
        reply = client.put_job_result(job_spec("a", command="x"), create_only=True)  # not AlreadyExists
    assert reply.created and reply.job.version == 1
    assert fake.state.jobs["a"].version == 1
    assert len(fake.state.calls_to("PutJob")) == 2


def test_reads_retry_until_a_node_answers(fake: FakeCluster) -> None:
    fake.add_job("a")
    fake.nodes[0].fail("ListJobs", grpc.StatusCode.UNAVAILABLE, "no leader", times=3)
    with Client(fake.cluster, timeout=5) as client:
        assert [j.spec.name for j in client.list_jobs()] == ["a"]
    assert len(fake.state.calls_to("ListJobs")) == 4


@pytest.mark.parametrize(
    "code, error",
    [
        (grpc.StatusCode.INVALID_ARGUMENT, ValidationError),
        (grpc.StatusCode.NOT_FOUND, NotFound),
        (grpc.StatusCode.ALREADY_EXISTS, AlreadyExists),
        (grpc.StatusCode.FAILED_PRECONDITION, Conflict),
        (grpc.StatusCode.ABORTED, Conflict),
        (grpc.StatusCode.PERMISSION_DENIED, SchedError),
    ],
)
def test_final_errors_are_not_retried(fake3: FakeCluster, code, error) -> None:
    fake3.add_job("a")
    fake3.nodes[0].fail("PauseJob", code, "refused")
    with Client(fake3.cluster, timeout=5) as client, pytest.raises(error) as raised:
        client.pause_job("a")
    assert type(raised.value) is error and raised.value.code == code
    assert raised.value.message == "refused"
    assert fake3.state.calls_to("PauseJob") == ["n1"]


def test_unavailable_after_the_deadline_names_the_addresses() -> None:
    addresses = [dead_address(), dead_address()]
    with Client(addresses, timeout=0.4) as client, pytest.raises(Unavailable) as raised:
        client.put_job(job_spec("a", command="x"))
    assert raised.value.tried == addresses
    assert all(address in raised.value.message for address in addresses)
    assert "may or may not have been applied" in raised.value.message
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE


def test_channel_factory_is_used_once_per_node(fake: FakeCluster) -> None:
    made = []

    def factory(address: str) -> grpc.Channel:
        made.append(address)
        return grpc.insecure_channel(address)

    fake.add_job("a")
    with Client(fake.cluster, channel_factory=factory) as client:
        client.get_job("a")
        client.get_job("a")
    assert made == fake.addresses


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str | None) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str | None:
        return self._details


@pytest.mark.parametrize(
    "code, error",
    [
        (grpc.StatusCode.INVALID_ARGUMENT, ValidationError),
        (grpc.StatusCode.NOT_FOUND, NotFound),
        (grpc.StatusCode.ALREADY_EXISTS, AlreadyExists),
        (grpc.StatusCode.FAILED_PRECONDITION, Conflict),
        (grpc.StatusCode.ABORTED, Conflict),
        (grpc.StatusCode.UNAVAILABLE, Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, Unavailable),
        (grpc.StatusCode.INTERNAL, SchedError),
    ],
)
def test_error_from_rpc(code, error) -> None:
    mapped = error_from_rpc(_RpcError(code, "why"))
    assert type(mapped) is error and mapped.code == code and mapped.message == "why" and str(mapped) == "why"
    assert error_from_rpc(_RpcError(code, None)).message == code.name


# ---------------------------------------------------------------- AsyncClient


async def test_async_client_round_trip(fake: FakeCluster) -> None:
    async with AsyncClient(fake.cluster, timeout=5) as client:
        reply = await client.put_job_result(job_spec("a", command="x", team="ops"))
        assert reply.created
        assert (await client.put_job(job_spec("a", command="y", team="ops"))).version == 2
        assert (await client.put_jobs([job_spec(f"b{i}", command="x") for i in range(4)])).created == 4
        assert (await client.get_job("a")).spec.team == "ops"
        assert [j.spec.name async for j in client.list_jobs(page_size=2)] == ["a", "b0", "b1", "b2", "b3"]
        assert (await client.pause_job("a")).paused
        assert not (await client.resume_job("a")).paused
        run = await client.trigger_job("a")
        assert (await client.get_execution(run.id)).id == run.id
        assert [r.id async for r in client.list_executions("a", limit=5)] == [run.id]
        assert await client.delete_job("a") is None
        with pytest.raises(NotFound):
            await client.get_job("a")
        assert (await client.cluster_status()).answered_by == "n1"
        assert (await client.node_info(fake.addresses[0])).id == "n1"


async def test_async_client_fails_over_with_the_same_request_id(fake: FakeCluster) -> None:
    fake.nodes[0].fail("TriggerJob", grpc.StatusCode.UNAVAILABLE, "no leader")
    fake.add_job("a")
    async with AsyncClient([dead_address(), fake.addresses[0]], timeout=5) as client:
        run = await client.trigger_job("a")
    ids = [rid for method, rid in fake.state.request_ids if method == "TriggerJob"]
    assert run.job == "a" and len(ids) == 2 and ids[0] == ids[1]


async def test_async_client_unavailable() -> None:
    async with AsyncClient(dead_address(), timeout=0.3) as client:
        with pytest.raises(Unavailable):
            await client.cluster_status()


def test_both_clients_expose_the_same_typed_methods() -> None:
    public = {name for name in dir(Client) if not name.startswith("_") and name != "close"}
    assert public == {name for name in dir(AsyncClient) if not name.startswith("_") and name != "close"}
    assert {"put_job", "put_jobs", "get_job", "list_jobs", "pause_job", "resume_job", "delete_job",
            "trigger_job", "list_executions", "get_execution", "cluster_status", "node_info"} <= public  # fmt: skip
    get_job = inspect.signature(Client.get_job)
    assert list(get_job.parameters) == ["self", "name", "upcoming", "stale_ok"]
    assert get_job.parameters["upcoming"].kind is inspect.Parameter.KEYWORD_ONLY
    assert get_job.return_annotation is pb.Job
    assert inspect.signature(AsyncClient.get_job) == get_job
    assert inspect.iscoroutinefunction(AsyncClient.trigger_job)
    assert "Iterator[schedd_proto.scheduler_pb2.Execution]" in str(inspect.signature(Client.list_executions))


def test_parse_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCHEDD_CLUSTER", raising=False)
    assert parse_cluster(None) == ["127.0.0.1:7070"]
    monkeypatch.setenv("SCHEDD_CLUSTER", "a:1, b:2,,a:1")
    assert parse_cluster(None) == ["a:1", "b:2"]
    assert parse_cluster(["c:3", " d:4 "]) == ["c:3", "d:4"]
    with pytest.raises(ValueError):
        parse_cluster(" , ")
    assert Client().addresses == ["a:1", "b:2"]


# ---------------------------------------------------------------- job documents


def test_spec_from_dict_shell_command() -> None:
    spec = spec_from_dict({
        "name": "backup", "team": "ops", "schedule": "0 2 * * *", "tz": "Europe/Paris",
        "description": "nightly", "labels": {"tier": "gold", "replicas": 3}, "paused": True,
        "priority": 5, "pool": "db", "overlap": "skip", "catchup": "latest", "timeout": "1h30m",
        "history_limit": 50, "command": "backup.sh --full", "workdir": "/srv", "env": {"PORT": 8080},
        "retry": {"max_attempts": 3, "initial_backoff": "10s", "max_backoff": 300, "multiplier": 2},
    })  # fmt: skip
    assert spec == pb.JobSpec(
        name="backup", team="ops", schedule="0 2 * * *", timezone="Europe/Paris", description="nightly",
        labels={"tier": "gold", "replicas": "3"}, paused=True, priority=5, pool="db", overlap="skip",
        catchup="latest", timeout_seconds=5400, history_limit=50,
        handler=pb.Handler(shell=pb.ShellHandler(command="backup.sh --full", workdir="/srv", env={"PORT": "8080"})),
        retry=pb.RetryPolicy(max_attempts=3, initial_backoff_seconds=10, max_backoff_seconds=300, multiplier=2),
    )  # fmt: skip
    assert spec_from_dict(spec_to_dict(spec)) == spec


@pytest.mark.parametrize(
    "doc, handler",
    [
        ({"argv": ["sleep", 5, True]}, pb.Handler(shell=pb.ShellHandler(argv=["sleep", "5", "true"]))),
        (
            {"http": {"url": "https://x/hook", "method": "PUT", "headers": {"X-Token": "t"}, "body": "{}"}},
            pb.Handler(http=pb.HttpHandler(url="https://x/hook", method="PUT", headers={"X-Token": "t"}, body="{}")),
        ),
        (
            {"python": {"name": "reports.weekly", "args": {"week": 3, "tags": ["a"]}}},
            pb.Handler(python=pb.PythonHandler(name="reports.weekly", args_json='{"tags": ["a"], "week": 3}')),
        ),
        ({"python": {"name": "ping"}}, pb.Handler(python=pb.PythonHandler(name="ping"))),
    ],
)
def test_spec_from_dict_handlers(doc, handler) -> None:
    spec = spec_from_dict({"name": "j", **doc})
    assert spec.handler == handler and spec.timezone == "UTC" and not spec.HasField("retry")
    assert spec_from_dict(spec_to_dict(spec)) == spec


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"name": "j", "command": "x", "scheduel": "@daily"}, "unknown key 'scheduel' (did you mean 'schedule'?)"),
        ({"name": "j", "command": "x", "owner": "me"}, "unknown key 'owner'; known keys: name, team"),
        ({"name": "j", "command": "x", "retry": {"attempts": 3}}, "job 'j': retry: unknown key 'attempts'"),
        ({"name": "j", "http": {"url": "u", "verb": "GET"}}, "http: unknown key 'verb'"),
        ({"name": "j"}, "no handler"),
        ({"name": "j", "command": "x", "argv": ["x"]}, "more than one handler (command, argv)"),
        ({"name": "j", "http": {"url": "u"}, "env": {"A": "1"}}, "workdir, env and inherit_env apply to command/argv"),
        ({"name": "j", "http": {"method": "GET"}}, "http: missing required key 'url'"),
        ({"name": "j", "python": {"args": {}}}, "python: missing required key 'name'"),
        ({"command": "x"}, "missing required key 'name'"),
        ({"name": 7, "command": "x"}, "'name' must be text, got int 7"),
        ({"name": "j", "command": "x", "priority": "high"}, "'priority' must be an integer, got text 'high'"),
        ({"name": "j", "command": "x", "paused": "yes"}, "'paused' must be true or false"),
        ({"name": "j", "command": "x", "timeout": "5 minutes"}, "'timeout': invalid duration '5 minutes'"),
        ({"name": "j", "command": "x", "timeout": -1}, "'timeout': invalid duration -1"),
        ({"name": "j", "command": "x", "labels": ["a"]}, "'labels' must be a mapping"),
        ({"name": "j", "command": "x", "env": {"A": {"b": 1}}}, "'env' items must be text, numbers or booleans"),
        ({"name": "j", "argv": []}, "'argv' must be a non-empty list"),
        ({"name": "j", "command": "x", "tz": "UTC", "timezone": "UTC"}, "not both"),
        ({"name": "j", "command": "x", "retry": 3}, "'retry' must be a mapping, got int"),
        (["name", "j"], "job document must be a mapping, got a list"),
    ],
)
def test_spec_from_dict_refuses_bad_documents(doc, message) -> None:
    with pytest.raises(ValidationError) as raised:
        spec_from_dict(doc)
    assert message in raised.value.message
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_job_spec_needs_exactly_one_handler() -> None:
    with pytest.raises(ValidationError, match="no handler"):
        job_spec("j")
    with pytest.raises(ValidationError, match=r"more than one handler \(command, http\)"):
        job_spec("j", command="x", http_url="u")
    with pytest.raises(ValidationError, match="workdir, env and inherit_env"):
        job_spec("j", http_url="u", workdir="/tmp")
    with pytest.raises(ValidationError, match="JSON"):
        job_spec("j", python="f", python_args={1, 2})
    spec = job_spec("j", http_url="https://x", timeout=90, retry=pb.RetryPolicy(max_attempts=2))
    assert spec.handler.http.url == "https://x" and spec.timeout_seconds == 90 and spec.retry.max_attempts == 2


@pytest.mark.parametrize(
    "text, seconds",
    [("30", 30), ("1.5", 1.5), (45, 45), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25),
     ("2d", 172800), (" 1m 30s ", 90), ("0", 0)],  # fmt: skip
)
def test_parse_duration(text, seconds) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "5x", "1h-3m", "-5s", "inf", True, "1.2.3s"])
def test_parse_duration_refuses(text) -> None:
    with pytest.raises(ValidationError):
        parse_duration(text)


# ---------------------------------------------------------------- display conversions


def test_to_dict_keeps_int64_and_adds_readable_times() -> None:
    job = pb.Job(
        spec=job_spec("a", schedule="@hourly", command="x", labels={"k": "v"}),
        version=2**40,
        next_fire_ms=NOW_MS,
        upcoming_ms=[NOW_MS, NOW_MS + 1234],
        executions_total=9_007_199_254_740_993,  # beyond float precision
    )
    data = to_dict(job)
    assert data["version"] == 2**40 and isinstance(data["version"], int)
    assert data["executions_total"] == 9_007_199_254_740_993
    assert data["next_fire_ms"] == NOW_MS and data["next_fire"] == "2026-11-29T02:00:00Z"
    assert data["upcoming"] == ["2026-11-29T02:00:00Z", "2026-11-29T02:00:01.234Z"]
    assert data["created_ms"] == 0 and data["created"] is None
    assert data["paused"] is False and data["last_state"] == ""
    assert data["spec"]["handler"] == {"shell": {"command": "x", "argv": [], "workdir": "", "env": {}, "inherit_env": []}}
    assert data["spec"]["labels"] == {"k": "v"} and data["spec"]["retry"] is None
    assert json.loads(json.dumps(data)) == data

    run = to_dict(pb.Execution(id="a@t", attempts=[pb.Attempt(number=1, started_ms=NOW_MS)]))
    assert run["attempts"][0]["started"] == "2026-11-29T02:00:00Z" and run["attempts"][0]["ended"] is None
    assert "scheduled" in run and "updated" in run and "created" in run


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0s"), (0.25, "250ms"), (42, "42s"), (1.5, "1.5s"), (252, "4m12s"), (3600, "1h"),
     (3660, "1h1m"), (3601, "1h"), (90061, "1d1h"), (86430, "1d"), (-30, "30s")],  # fmt: skip
)
def test_format_duration(seconds, text) -> None:
    assert format_duration(seconds) == text


def test_relative_time() -> None:
    assert relative_time(NOW_MS + 252_400, NOW_MS) == "in 4m12s"
    assert relative_time(NOW_MS - 3_000, NOW_MS) == "3s ago"
    assert relative_time(NOW_MS + 200, NOW_MS) == "now"
    assert relative_time(0, NOW_MS) == ""
    assert format_time(0) is None


def test_run_state_is_the_servers_states_as_a_str_enum() -> None:
    from schedd.core.model import EXECUTION_STATES, TERMINAL_STATES
    from schedd_client import RunState

    assert [s.value for s in RunState] == list(EXECUTION_STATES)     # the client cannot import the core
    assert {s for s in RunState if s.finished} == TERMINAL_STATES
    assert RunState.FAILED == "FAILED" and isinstance(RunState.FAILED, str) and f"{RunState.LOST}" == "LOST"
    assert RunState.parse(" timed_out ") is RunState.TIMED_OUT and RunState("SKIPPED") is RunState.SKIPPED
    with pytest.raises(ValueError, match="one of: scheduled, running"):
        RunState.parse("done")


async def test_async_client_diffs_and_applies_in_batches(fake: FakeCluster) -> None:
    fake.add_job("same", command="x")
    seen: list[tuple[str, int, int]] = []
    async with AsyncClient(fake.cluster, timeout=5) as client:
        specs = [job_spec("same", command="x"), *(job_spec(f"n{i}", command="y") for i in range(5))]
        changes = await client.diff_jobs(specs[:2])
        assert [(c.name, c.action) for c in changes] == [("same", "unchanged"), ("n0", "create")]
        report = await client.apply_jobs(specs, batch_jobs=2, progress=lambda *p: seen.append(p))
    assert (report.created, report.unchanged) == ([f"n{i}" for i in range(5)], ["same"])
    assert seen == [("check", 2, 6), ("check", 4, 6), ("check", 6, 6), ("write", 2, 5), ("write", 4, 5),
                    ("write", 5, 5)]
    assert [len(r.jobs) for r in fake.state.requests_of("PutJobs")] == [2, 2, 1]     # "same" is not written


RATE_LIMITED = "rate limit: token:x sends mutating calls faster than 200/s (acl.rate_per_second); retry in 30 ms"


def test_a_rate_limited_write_is_sent_again_after_the_nodes_hint(fake3: FakeCluster) -> None:
    """A call the token's rate limit refused did nothing: both clients wait the hinted time and
    send it again to the same node (a loop of writes keeps to acl.rate_per_second instead of
    failing part-way); another cap's refusal, or a hint past the timeout, is final."""
    import time as _time

    from schedd_client.errors import ResourceExhausted
    hint = (("x-schedd-retry-after-ms", "30"),)
    fake3.nodes[0].fail("PutJob", grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED, times=2, trailers=hint)
    started = _time.monotonic()
    with Client(fake3.cluster, timeout=5) as client:
        assert client.put_job_result(job_spec("a", command="x"), create_only=True).created
    assert _time.monotonic() - started >= 0.06
    assert fake3.state.calls_to("PutJob") == ["n1", "n1", "n1"]
    put_ids = {rid for method, rid in fake3.state.request_ids if method == "PutJob"}
    assert len(put_ids) == 1

    fake3.nodes[0].fail("PauseJob", grpc.StatusCode.RESOURCE_EXHAUSTED, "over limits.max_jobs_per_call")
    with Client(fake3.cluster, timeout=5) as client, pytest.raises(ResourceExhausted):
        client.pause_job("a")
    fake3.nodes[0].fail("PauseJob", grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED,
                        trailers=(("x-schedd-retry-after-ms", "9000"),))
    with Client(fake3.cluster, timeout=1) as client, pytest.raises(ResourceExhausted, match="retry in"):
        client.pause_job("a")


async def test_the_async_client_paces_a_rate_limited_write_too(fake3: FakeCluster) -> None:
    fake3.nodes[0].fail("PutJob", grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED,
                        trailers=(("x-schedd-retry-after-ms", "20"),))
    async with AsyncClient(fake3.cluster, timeout=5) as client:
        assert (await client.put_job_result(job_spec("a", command="x"), create_only=True)).created
    assert fake3.state.calls_to("PutJob") == ["n1", "n1"]
