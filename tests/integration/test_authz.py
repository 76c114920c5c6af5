"""Access control end to end on a real 3-node cluster with ACL on (plaintext loopback):
every RPC refuses an unauthenticated caller, a forged principal header changes nothing, one team's
token cannot touch another team's jobs, runs or DAGs, workers need a worker token for their pool,
the replicated audit trail records allowed and denied calls with the real principal on every node,
and `audit verify` catches an altered record."""

from __future__ import annotations

import itertools
import json
import time

import grpc
import pytest

from schedd.ports.fakes import wait_until
from schedd_client import Client, SchedError, job_spec
from schedd_client.channels import Security, open_channel
from schedd_proto import acl_pb2, dags_pb2, scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from google.protobuf import message_factory
from tests.support.cluster import schedctl

pytestmark = pytest.mark.timeout(600)

OPEN = {"/schedd.v1.Acl/Bootstrap"}        # open; answers ALREADY_EXISTS once bootstrapped


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    """One cluster for the module, ACL on, bootstrapped; teams a and b with a client token each,
    a worker token for pool cpu and team a (2 slots)."""
    from schedd.runtime.cluster import LocalCluster
    # Plaintext (loopback): the identities under test are bearer tokens alone. Under mTLS every
    # caller would have a certificate principal (no call is unauthenticated), and TLS without
    # client certificates has nodes check their peers against the system roots (docs/deployment.md, "TLS"),
    # which this cluster's private CA is not in, so a follower could not forward.
    c = LocalCluster(tmp_path_factory.mktemp("cluster-acl"), size=3, acl=True, tls=False,
                     scheduler={"lease_ms": 3000}, acl_settings={"rate_per_second": 1000, "rate_burst": 2000})
    c.start()
    try:
        admin = c.bootstrap()
        c.wait_leader()
        with c.client(security=_sec(c, admin), timeout=30) as cl:
            for team in ("a", "b"):
                cl.acl_put_policy(f"team-{team}", {f"team:{team}": ["read", "write", "trigger", "cancel", "backfill"]})
            cl.acl_put_role("team-a", ["team-a"])
            tokens = {"admin": admin,
                      "a": cl.acl_create_token(roles=["team-a"], description="team a").secret,
                      "b": cl.acl_create_token(policies=["team-b"]).secret}
            cl.acl_put_policy("cpu-a", {"pool:cpu": ["serve"], "team:a": ["serve"]})
            tokens["worker"] = cl.acl_create_token(kind="worker", policies=["cpu-a"], max_slots=2).secret
            # Keep every denied record of this module (the default keeps 20 per principal, then
            # one per 3 s): retention is replicated configuration.
            cl.audit_configure(max_age_ms=0, max_records=0, denied_burst=5000, denied_refill_ms=1000)
        c.tokens = tokens
        c.anon_context = c.write_context(kind="client", name="anonymous")   # TLS, no token
        yield c
    finally:
        c.stop()


def _sec(c, token: str | None) -> Security:
    """TLS to the cluster with `token` as the only credential (none: anonymous)."""
    return c.security("client", "token-only", token=token or None)


def _client(c, who: str) -> Client:
    return c.client(security=_sec(c, c.tokens[who] if who else ""), timeout=30)


def _accessor(token: str) -> str:
    return "token:" + token.partition(".")[0]


def _code(fn) -> grpc.StatusCode:
    try:
        fn()
    except SchedError as e:
        return e.code
    return grpc.StatusCode.OK


def _all_methods():
    for module in (pb, dags_pb2, acl_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                yield f"/{service.full_name}/{m.name}", m


def _call_raw(c, address: str, path: str, method, metadata=()) -> grpc.StatusCode:
    """The status of one call on a new connection. UNAVAILABLE is the connection's, never an
    authorization answer (a fresh-clone CI run on a loaded machine saw one, once, among some 500
    calls): such a call is made again on a new connection, twice at most, and the last answer
    counts."""
    for _ in range(3):
        code, details = _call_once(c, address, path, method, metadata)
        if code != grpc.StatusCode.UNAVAILABLE:
            return code
        print(f"{address} {path}: UNAVAILABLE ({details}); calling again")
    return code


def _call_once(c, address: str, path: str, method, metadata=()) -> tuple[grpc.StatusCode, str]:
    request = message_factory.GetMessageClass(method.input_type)()
    with open_channel(address, _sec(c, "")) as ch:
        try:
            if method.client_streaming:
                stream = ch.stream_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=lambda b: b)
                for _ in stream(iter([]), timeout=10, metadata=metadata):
                    pass
            else:
                ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=lambda b: b)(request, timeout=10, metadata=metadata)
        except grpc.RpcError as e:
            return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def test_every_rpc_of_every_service_refuses_an_unauthenticated_caller(acl_cluster) -> None:
    c = acl_cluster
    methods = list(_all_methods())
    assert len(methods) >= 44                  # Scheduler, Cluster, Workers, Dags, Acl, Audit
    bad = "0123456789abcdef." + "A" * 43
    for node in c.nodes.values():
        for path, method in methods:
            # An unknown token costs a follower a short wait (it may be one the leader just made):
            # try it on one node, the malformed ones everywhere.
            unknown = ((("authorization", f"Bearer {bad}"),),) if node.id == "n1" else ()
            for md in ((), (("authorization", "Bearer 0123.xyz"),), (("authorization", "Basic xyz"),), *unknown):
                got = _call_raw(c, node.grpc, path, method, md)
                if path in OPEN and not md:
                    assert got == grpc.StatusCode.ALREADY_EXISTS, (node.id, path, got)
                else:
                    assert got == grpc.StatusCode.UNAUTHENTICATED, (node.id, path, md, got)
    # Health stays open.
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    with open_channel(c.nodes["n1"].grpc, _sec(c, "")) as ch:
        assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status == 1


def test_a_forged_principal_header_changes_nothing(acl_cluster) -> None:
    c = acl_cluster
    forged = (("x-schedd-principal", _accessor(c.tokens["admin"])), ("x-schedd-forwarded", "n1"),
              ("x-schedd-source", "10.0.0.1:1"), ("x-schedd-signed-at", str(int(time.time() * 1000))),
              ("x-schedd-node-sig", "00" * 32))
    spec = job_spec("forged-b", schedule="@every 1h", team="b", command="true")
    for node in c.nodes.values():
        with open_channel(node.grpc, _sec(c, "")) as ch:
            stub = pb_grpc.SchedulerStub(ch)
            with pytest.raises(grpc.RpcError) as e:          # no credential: still refused
                stub.PutJob(pb.PutJobRequest(job=spec), timeout=10, metadata=forged)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as e:          # team a's token: still team a
                stub.PutJob(pb.PutJobRequest(job=spec, request_id=f"forged-{node.id}"), timeout=10,
                            metadata=(("authorization", f"Bearer {c.tokens['a']}"), *forged))
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "'write' on team:b" in e.value.details()
    with _client(c, "admin") as admin:
        assert _code(lambda: admin.get_job("forged-b")) == grpc.StatusCode.NOT_FOUND
        # Each node recorded its own refusal (followers propose theirs too), with the real caller.
        want = {f"forged-{nid}" for nid in c.nodes}
        def forged_records():
            rows = [r for r in admin.audit_list(action="Scheduler.PutJob", outcome="denied").records
                    if r.request_id.startswith("forged-")]
            return rows if want <= {r.request_id for r in rows} else None
        denied = wait_until(forged_records, timeout=30, what="every node's denied record")
        assert {r.principal for r in denied} == {_accessor(c.tokens["a"])}
        assert all(not r.source.startswith("10.0.0.1") for r in denied)


def test_team_a_cannot_read_list_trigger_update_cancel_or_delete_team_b(acl_cluster) -> None:
    c = acl_cluster
    with _client(c, "b") as b:
        b.put_job(job_spec("b-job", schedule="@every 1h", team="b", command="true", pool="nowhere"))
        ex = b.trigger_job("b-job")
        b.put_dag({"name": "b-dag", "team": "b", "tasks": [{"name": "t1", "command": "true", "pool": "nowhere"}]})
        run = b.run_dag("b-dag")
        version = b.get_job("b-job").version
    with _client(c, "a") as a:
        a.put_job(job_spec("a-job", schedule="@every 1h", team="a", command="true", pool="nowhere"))
        denied = grpc.StatusCode.PERMISSION_DENIED
        now = int(time.time() * 1000)
        checks = {
            "get job": lambda: a.get_job("b-job"),
            "list runs of job": lambda: list(a.list_executions("b-job")),
            "get run": lambda: a.get_execution(ex.id),
            "instants": lambda: a.list_instants("b-job"),
            "trigger": lambda: a.trigger_job("b-job"),
            "update": lambda: a.put_job(job_spec("b-job", schedule="@every 2h", team="b", command="true")),
            "move to own team": lambda: a.put_job(job_spec("b-job", schedule="@every 2h", team="a", command="true")),
            "pause": lambda: a.pause_job("b-job"),
            "resume": lambda: a.resume_job("b-job"),
            "cancel": lambda: a.cancel_execution(ex.id),
            "backfill": lambda: a.backfill_job("b-job", now - 7_200_000, now - 3_600_000),
            "delete": lambda: a.delete_job("b-job"),
            "get dag": lambda: a.get_dag("b-dag"),
            "dag runs": lambda: a.list_dag_runs("b-dag"),
            "dag run": lambda: a.get_dag_run("b-dag", run.run_id),
            "run dag": lambda: a.run_dag("b-dag"),
            "update dag": lambda: a.put_dag({"name": "b-dag", "team": "b", "tasks": [{"name": "t", "command": "x"}]}),
            "delete dag": lambda: a.delete_dag("b-dag"),
            "quota": lambda: a.set_quota("team:b", 1),
            "retry": lambda: a.retry_execution(ex.id),
            "watch runs of job": lambda: next(a.watch_executions("b-job")),
            "watch dag run": lambda: next(a.watch_dag_run("b-dag", run.run_id)),
            "clear dag task": lambda: a.clear_dag_task("b-dag", run.run_id, "t1"),
            "diff": lambda: a.diff_jobs([job_spec("b-job", schedule="@every 2h", team="b", command="true")]),
            "diff into own team": lambda: a.diff_jobs([job_spec("b-job", schedule="@every 2h", team="a",
                                                                command="true")]),
        }
        # What a caller may not read is answered as if it did not exist, word
        # for word as for a missing object; a write that would take another team's name cannot
        # hide that the name is taken, but does not name the team.
        taken = {"update", "move to own team", "update dag", "quota", "diff", "diff into own team"}
        codes = {what: _code(fn) for what, fn in checks.items()}
        assert codes == {what: denied if what in taken else grpc.StatusCode.NOT_FOUND for what in checks}, codes
        missing_ex = ex.id.replace("b-job@", "no-such-job@")
        for theirs, missing in ((lambda: a.get_job("b-job"), lambda: a.get_job("no-such-job")),
                                (lambda: a.pause_job("b-job"), lambda: a.pause_job("no-such-job")),
                                (lambda: a.get_execution(ex.id), lambda: a.get_execution(missing_ex)),
                                (lambda: a.run_dag("b-dag"), lambda: a.run_dag("no-such-dag"))):
            with pytest.raises(SchedError) as mine_e:
                theirs()
            with pytest.raises(SchedError) as none_e:
                missing()
            assert mine_e.value.code == none_e.value.code == grpc.StatusCode.NOT_FOUND
            assert "team:b" not in str(mine_e.value)
            assert str(mine_e.value).replace("b-job", "X").replace("b-dag", "X") == \
                str(none_e.value).replace("no-such-job", "X").replace("no-such-dag", "X")
        # Lists show only team a's objects.
        assert [j.spec.name for j in a.list_jobs()] == ["a-job"]
        assert _code(lambda: list(a.list_jobs(team="b"))) == denied       # asking for b's list by name
        watch = a.watch_jobs()                   # a watch lists what the list does, and no more
        assert [e.key for e in itertools.takewhile(lambda e: e.type != "synced", watch)] == ["a-job"]
        watch.close()
        assert _code(lambda: next(a.watch_jobs(team="b"))) == denied
        assert _code(lambda: next(a.watch_workers())) == denied            # an operator's, as ListWorkers
        mine = a.trigger_job("a-job")
        assert [e.id for e in a.list_executions()] == [mine.id]
        assert "b-dag" not in [d.spec.name for d in a.list_dags().dags]
        assert all(not q.key.startswith(("team:b", "pool:", "lane:")) for q in a.list_quotas())
    with _client(c, "b") as b:
        # Nothing of the refused calls was committed: same version, not paused, run not cancelled.
        job = b.get_job("b-job")
        assert job.version == version and not job.spec.paused and job.spec.schedule == "@every 1h"
        assert b.get_execution(ex.id).state != "CANCELLED"
        assert b.get_dag("b-dag").spec.tasks[0].name == "t1"
        assert [j.spec.name for j in b.list_jobs()] == ["b-dag:t1", "b-job"]     # a DAG's task is a job
        # Runs that can never start (pool nowhere) would sit ahead of later tests' runs.
        b.cancel_execution(ex.id)
        b.delete_dag("b-dag")
    with _client(c, "a") as a:
        a.cancel_execution(mine.id)
    with _client(c, "admin") as admin:
        a_name = _accessor(c.tokens["a"])
        mine = admin.audit_list(principal=a_name).records
        assert not [r for r in mine if r.outcome == "allowed" and r.target in ("b-job", ex.id, "b-dag")]
        assert wait_until(lambda: len([r for r in admin.audit_list(principal=a_name, outcome="denied").records
                                       if r.action != "Scheduler.PutJob" or r.target == "b-job"]) >= 15,
                          timeout=30, what="denied records of team a")


def test_workers_need_a_worker_token_for_their_pool(acl_cluster) -> None:
    c = acl_cluster
    with _client(c, "a") as a, _client(c, "admin") as admin:
        a.put_job(job_spec("cpu-a", team="a", command="echo ran", pool="cpu"))
        c.start_worker("no-token", pool="cpu", slots=1, token="")
        c.start_worker("other-pool", pool="gpu", slots=1, token=c.tokens["worker"])
        c.start_worker("too-many-slots", pool="cpu", slots=4, token=c.tokens["worker"])
        c.start_worker("client-token", pool="cpu", slots=1, token=c.tokens["a"])
        ex = a.trigger_job("cpu-a")
        # Every refused worker never connects and stops at once (it retried
        # forever, at INFO, before), exit status 2, the reason logged at ERROR.
        for name, why in (("no-token", "UNAUTHENTICATED"), ("other-pool", "pool:gpu"),
                          ("too-many-slots", "at most 2"), ("client-token", "PERMISSION_DENIED")):
            proc = c.workers[name].proc
            assert proc is not None and proc.wait(timeout=60) == 2, name
            log = (c.root / "logs" / f"worker-{name}.log").read_text()
            assert why in log and " ERROR " in log and "refused this worker's credential" in log, log
        assert admin.list_workers().workers == [] and a.get_execution(ex.id).state == "SCHEDULED"
        # The positive control: the right token, pool and slots gets the run.
        c.start_worker("good", pool="cpu", slots=2, token=c.tokens["worker"])
        done = wait_until(lambda: (e := a.get_execution(ex.id)).state == "SUCCEEDED" and e, timeout=90,
                          what="the run on the good worker")
        assert done.attempts[-1].worker == "good"
        # A team b job in the same pool is not the worker's to take (serve only on team:a).
        with _client(c, "b") as b:
            b.put_job(job_spec("cpu-b", team="b", command="true", pool="cpu"))
            eb = b.trigger_job("cpu-b")
            wait_until(lambda: "waiting" in b.get_execution(eb.id).reason, timeout=30, what="team b waits")
            assert b.get_execution(eb.id).state == "SCHEDULED"
        # Revoking the worker token closes the stream (re-checked at each heartbeat) and the
        # worker cannot come back.
        admin.acl_delete_token(c.tokens["worker"].partition(".")[0])
        wait_until(lambda: "good" not in [w.name for w in admin.list_workers().workers], timeout=60,
                   what="the revoked worker's stream closed")
        wait_until(lambda: "invalid token" in (c.root / "logs" / "worker-good.log").read_text(), timeout=60,
                   what="the revoked worker refused")
        assert c.workers["good"].proc.wait(timeout=60) == 2      # and it stops, saying so
    for name in ("no-token", "other-pool", "too-many-slots", "client-token", "good"):
        c.workers[name].proc.kill()
        c.workers[name].proc.wait(timeout=30)


def test_audit_trail_on_every_node_and_verify_catches_an_altered_record(acl_cluster, tmp_path) -> None:
    c = acl_cluster
    with _client(c, "a") as a:
        a.put_job(job_spec("audited", schedule="@every 1h", team="a", command="true"))
        assert _code(lambda: a.delete_job("b-job-never")) in (grpc.StatusCode.PERMISSION_DENIED,
                                                              grpc.StatusCode.NOT_FOUND)
        assert _code(lambda: a.set_quota("pool:x", 1)) == grpc.StatusCode.PERMISSION_DENIED
    a_name = _accessor(c.tokens["a"])
    with _client(c, "admin") as admin:
        for node in c.nodes.values():
            def seen():
                recs = admin.audit_list(principal=a_name, address=node.grpc).records
                return any(r.action == "Scheduler.PutJob" and r.target == "audited" and r.outcome == "allowed"
                           and r.log_index > 0 and r.source.startswith("ipv4:127.0.0.1") for r in recs) and \
                    any(r.action == "Scheduler.SetQuota" and r.outcome == "denied" and "quota" in r.detail
                        for r in recs)
            wait_until(seen, timeout=30, what=f"the audit records on {node.id}")
            v = admin.audit_verify(address=node.grpc)
            assert v.ok and v.answered_by == node.id and v.records > 0
    env_token = ["--token", c.tokens["admin"]]
    out = schedctl(c.anon_context, *env_token, "audit", "list", "--principal", a_name, "--since", "1h", "-o", "json")
    rows = json.loads(out.stdout)
    assert any(r["action"] == "Scheduler.PutJob" and r["target"] == "audited" for r in rows)
    assert "Scheduler.SetQuota" in schedctl(c.anon_context, *env_token, "audit", "list", "--principal", a_name).stdout
    assert schedctl(c.anon_context, *env_token, "audit", "verify").returncode == 0
    export = tmp_path / "audit.jsonl"
    schedctl(c.anon_context, *env_token, "audit", "export", "--file", str(export))
    assert schedctl(c.anon_context, "audit", "verify", str(export)).returncode == 0
    lines = export.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if '"target":"audited"' in ln)
    lines[i] = lines[i].replace(f'"principal":"{a_name}"', '"principal":"token:0000000000000000"')
    export.write_text("\n".join(lines) + "\n")
    broken = schedctl(c.anon_context, "audit", "verify", str(export), check=False)
    assert broken.returncode == 1 and f"line {i + 1}" in broken.stderr


def test_schedctl_acl_commands_and_revocation(acl_cluster) -> None:
    c = acl_cluster
    tok = ["--token", c.tokens["admin"]]
    schedctl(c.anon_context, *tok, "acl", "policy", "create", "readers", "--rule", "team:a=read")
    out = schedctl(c.anon_context, *tok, "acl", "token", "create", "--policy", "readers", "--ttl", "1h", "-o", "json")
    secret = json.loads(out.stdout)["secret"]
    accessor = secret.partition(".")[0]
    assert accessor in schedctl(c.anon_context, *tok, "acl", "token", "list").stdout
    assert "readers" in schedctl(c.anon_context, *tok, "acl", "policy", "list").stdout
    who = schedctl(c.anon_context, "--token", secret, "acl", "whoami").stdout
    assert f"token:{accessor}" in who and "team:a: read" in who
    assert schedctl(c.anon_context, "--token", secret, "job", "list").returncode == 0
    assert schedctl(c.anon_context, "--token", secret, "acl", "token", "list", check=False).returncode == 1
    again = schedctl(c.anon_context, "acl", "bootstrap", check=False)
    assert again.returncode == 1 and "already" in again.stderr
    # The anonymous policy: calls without a token get it (here: read on team a), then refused again.
    schedctl(c.anon_context, *tok, "acl", "anonymous", "readers")
    for node in c.nodes.values():     # every replica has the policy: the next call may go to any
        wait_until(lambda: schedctl(c.anon_context, "--token", "", "job", "list", at=node.grpc,
                                    check=False).returncode == 0,
                   timeout=30, what=f"anonymous reads on {node.id}")
    anon_write = schedctl(c.anon_context, "--token", "", "job", "delete", "a-job", check=False)
    assert anon_write.returncode == 1 and "missing capability 'write' on team:a" in anon_write.stderr
    schedctl(c.anon_context, *tok, "acl", "anonymous")
    for node in c.nodes.values():
        wait_until(lambda: schedctl(c.anon_context, "--token", "", "job", "list", at=node.grpc, check=False).returncode == 1,
                   timeout=30, what=f"anonymous refused again on {node.id}")
    schedctl(c.anon_context, *tok, "acl", "token", "delete", accessor)
    # Revoked on every node once applied there.
    for node in c.nodes.values():
        wait_until(lambda: schedctl(c.anon_context, "--token", secret, "job", "list", at=node.grpc, check=False).returncode == 1,
                   timeout=30, what=f"revocation applied on {node.id}")


def test_mutating_calls_are_rate_limited_per_principal(cluster_factory) -> None:
    # TLS without client certificates (one node: nothing to forward): the principals are the tokens
    c = cluster_factory(size=1, acl=True, mtls=False, acl_settings={"rate_per_second": 1, "rate_burst": 3})
    c.start()
    admin = c.bootstrap()
    c.wait_leader()
    with c.client(security=_sec(c, admin), timeout=30) as cl:
        cl.acl_put_policy("a", {"team:a": ["read", "write"]})
        other = cl.acl_create_token(policies=["a"]).secret
        # past the burst, the node refuses with how long to wait; the SDK waits that long and
        # sends the call again, so a loop of writes is paced (1/s here), not failed part-way
        started = time.monotonic()
        for i in range(6):
            cl.put_job(job_spec(f"r{i}", schedule="@every 1h", team="a", command="true"))
        assert time.monotonic() - started >= 2.5
        assert sorted(j.spec.name for j in cl.list_jobs(team="a")) == [f"r{i}" for i in range(6)]
    with c.client(security=_sec(c, admin), timeout=0.5) as quick:    # no time to wait: the refusal itself
        with pytest.raises(SchedError) as e:
            for i in range(10):
                quick.pause_job("r0")
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "retry in" in e.value.message
        assert quick.get_job("r0").spec.name == "r0"         # reads are not limited
    with c.client(security=_sec(c, other), timeout=30) as cl:     # another principal has its own bucket
        cl.put_job(job_spec("mine", schedule="@every 1h", team="a", command="true"))
