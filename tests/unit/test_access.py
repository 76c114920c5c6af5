"""Access control wired into the state machine and the API edge: the ACL and audit
entry kinds, snapshot and digest, the node signature of forwarded calls, the interceptor's
decision, the rate limit, and the SDK's audit file verification agreeing with the daemon's."""

from __future__ import annotations

import asyncio
import os
import pickle
import types

import grpc
import pytest

from schedd.api import auth
from schedd.core import acl as A
from schedd.core import audit as U
from schedd.core import commands as C
from schedd.core.state import SchedulerState
from schedd_client import acl as client_acl
from schedd_proto import scheduler_pb2 as pb
from tests.support.audit import export_jsonl

NOW = 1_790_000_000_000


class Log:
    """A state and a log index: entries applied one after another."""

    def __init__(self) -> None:
        self.state = SchedulerState()
        self.index = 0

    def apply(self, kind: str, *, rid: str = "", now: int = NOW, by: str = "t", **args) -> dict:
        self.index += 1
        return self.state.apply(C.encode(kind, rid=rid, now=now, term=1, by=by, **args), self.index)


def _token(minted: A.MintedToken, **kw) -> dict:
    return {"accessor": minted.accessor, "secret_hash": minted.secret_hash, **kw}


def test_bootstrap_once_then_tokens_policies_roles_and_refusals() -> None:
    log = Log()
    first, second = (A.mint_token(os.urandom(A.TOKEN_RANDOM_BYTES)) for _ in range(2))
    assert log.apply(C.ACL_BOOTSTRAP, token=_token(first, policies=["management"])).ok
    again = log.apply(C.ACL_BOOTSTRAP, token=_token(second, policies=["management"]))
    assert again.code == "exists" and "already" in again.msg
    assert set(log.state.acl.tokens) == {first.accessor}
    assert first.secret not in repr(log.state.acl.tokens[first.accessor])     # a hash only
    assert log.apply(C.ACL_ROLE_PUT, role={"name": "r", "policies": ["nope"]}).code == "not_found"
    assert log.apply(C.ACL_POLICY_PUT, policy={"name": "p", "rules": {"team:a": ["read"]}}).ok
    assert log.apply(C.ACL_POLICY_PUT, policy={"name": "bad", "rules": {"team:a": ["fly"]}}).code == "invalid"
    assert log.apply(C.ACL_ROLE_PUT, role={"name": "r", "policies": ["p"]}).ok
    assert log.apply(C.ACL_TOKEN_CREATE, token=_token(second, roles=["r"])).ok
    assert log.state.acl.tokens[second.accessor].created_ms == NOW         # the entry's time
    p = A.authenticate(log.state.acl, second.accessor, second.secret, NOW)
    assert isinstance(p, A.Principal) and A.allowed(p, "read", "team:a") and not A.allowed(p, "write", "team:a")
    assert log.apply(C.ACL_TOKEN_DELETE, accessor=second.accessor).ok
    assert isinstance(A.authenticate(log.state.acl, second.accessor, second.secret, NOW), A.Refusal)
    assert log.apply(C.ACL_POLICY_DELETE, name="management").code == "invalid"


def test_audited_entries_carry_the_caller_and_outcome_and_denied_ones_are_rate_limited() -> None:
    log = Log()
    caller = {"principal": "token:aaaa", "source": "ipv4:127.0.0.1:5", "action": "Acl.PutPolicy",
              "target": "", "request_id": "r1"}
    log.apply(C.ACL_POLICY_PUT, policy={"name": "p", "rules": {"cluster": ["quota"]}}, audit=caller)
    log.apply(C.ACL_POLICY_DELETE, name="missing", audit={**caller, "action": "Acl.DeletePolicy"})
    r1, r2 = log.state.audit.records
    assert (r1.principal, r1.source, r1.action, r1.outcome, r1.log_index) == \
        ("token:aaaa", "ipv4:127.0.0.1:5", "Acl.PutPolicy", "allowed", 1)
    assert r1.target == "p"                 # filled from the entry when the API sent none
    assert (r2.outcome, r2.result, r2.log_index) == ("error", "not_found", 2)
    denied = {"principal": "unauthenticated", "source": "x", "action": "Scheduler.PutJob", "target": "j",
              "request_id": "", "outcome": "denied", "detail": "login failure"}
    out = log.apply(C.AUDIT_APPEND, events=[denied] * 30)
    assert out.payload.kept == U.DeniedLimit().burst and out.payload.dropped == 10
    assert log.state.audit.verify() is None
    assert log.apply(C.AUDIT_APPEND, events=[{"principal": 1}]).payload.kept == 0       # junk: nothing


def test_refused_writes_are_audited_under_the_denied_limit_from_feature_level_5() -> None:
    """A refused write's record counts under the denied-record limit once the
    cluster is at feature level 5 (decided by the replicated level: every replica alike)."""
    from tests.support.state import at_top_level
    caller = {"principal": "token:aaaa", "source": "s", "action": "Scheduler.PauseJob", "target": "ghost",
              "request_id": ""}
    kept = {}
    for level in ("below", "top"):
        log = Log()
        log.apply(C.EPOCH)
        if level == "top":
            log.index += 1
            at_top_level(log.state, log.index)
        for _ in range(30):
            assert log.apply(C.PAUSE, name="ghost", audit=caller).code == "not_found"
        kept[level] = sum(r.principal == "token:aaaa" for r in log.state.audit.records)
    assert kept == {"below": 30, "top": U.DeniedLimit().burst}


def test_snapshot_round_trip_and_digest_cover_acl_and_audit() -> None:
    log = Log()
    minted = A.mint_token(os.urandom(A.TOKEN_RANDOM_BYTES))
    log.apply(C.ACL_BOOTSTRAP, token=_token(minted, policies=["management"]))
    log.apply(C.ACL_POLICY_PUT, policy={"name": "p", "rules": {"team:a": ["read"]}})
    before = log.state.state_digest()
    restored = SchedulerState()
    restored.restore(pickle.loads(pickle.dumps(log.state.snapshot())))
    assert A.encode_table(restored.acl) == A.encode_table(log.state.acl)
    assert restored.audit.head == log.state.audit.head and restored.state_digest() == before
    log.apply(C.ACL_ANONYMOUS_SET, policy="p")
    assert log.state.state_digest() != before
    # A tampered trail in a snapshot is refused on load.
    image = list(pickle.loads(pickle.dumps(log.state.snapshot())))
    image[-1]["audit"]["records"][0][2] = "token:forged"
    with pytest.raises(U.AuditInputError):
        SchedulerState().restore(tuple(image))


def test_a_node_signature_binds_node_principal_source_method_and_time() -> None:
    signer = auth.NodeSigner("s" * 44)
    info = auth.CallInfo("token:abc", "ipv4:1.2.3.4:5", "/schedd.v1.Scheduler/PutJob", None, "Bearer x")
    md = dict(signer.metadata("n1", info, info.method, NOW))
    assert md["authorization"] == "Bearer x"
    assert signer.verify(md, info.method, NOW + 1000) == ("n1", "token:abc", "ipv4:1.2.3.4:5")
    assert signer.verify(md, "/schedd.v1.Scheduler/DeleteJob", NOW) is None
    assert signer.verify({**md, auth.PRINCIPAL: "token:admin"}, info.method, NOW) is None
    assert signer.verify(md, info.method, NOW + auth.SIGNATURE_WINDOW_MS + 1) is None
    assert auth.NodeSigner("t" * 44).verify(md, info.method, NOW) is None           # another cluster
    assert signer.verify({k: v for k, v in md.items() if k != auth.SIGNATURE}, info.method, NOW) is None


class _Node:
    def __init__(self, state: SchedulerState) -> None:
        import threading
        self.state, self.lock = state, threading.RLock()
        self.cfg = types.SimpleNamespace(node_id="n1")


def _interceptor(log: Log, **kw) -> auth.AuthInterceptor:
    clock = types.SimpleNamespace(now_ms=lambda: NOW)
    return auth.AuthInterceptor(_Node(log.state), clock, auth.NodeSigner("k" * 44), **kw)  # type: ignore[arg-type]


def _with_team_token(log: Log, team: str) -> str:
    minted = A.mint_token(os.urandom(A.TOKEN_RANDOM_BYTES))
    log.apply(C.ACL_POLICY_PUT, policy={"name": f"t-{team}", "rules": {f"team:{team}": ["read", "write"]}})
    log.apply(C.ACL_TOKEN_CREATE, token=_token(minted, policies=[f"t-{team}"]))
    return minted.bearer


def test_the_interceptor_decides_from_the_credential_only() -> None:
    log = Log()
    bearer = _with_team_token(log, "a")
    put_b = pb.PutJobRequest(job=pb.JobSpec(name="j", team="b"))
    put_a = pb.PutJobRequest(job=pb.JobSpec(name="j", team="a"))
    method = "/schedd.v1.Scheduler/PutJob"
    forged = {auth.PRINCIPAL: "token:admin", auth.FORWARDED: "n1", auth.SIGNATURE: "00"}
    ic = _interceptor(log)
    with pytest.raises(auth.Denied) as e:
        ic.check(method, forged, None, put_a, "ipv4:127.0.0.1:9")
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    md = {**forged, "authorization": f"Bearer {bearer}"}
    with pytest.raises(auth.Denied) as e:
        ic.check(method, md, None, put_b, "ipv4:127.0.0.1:9")
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "'write' on team:b" in e.value.message
    info = ic.check(method, md, None, put_a, "ipv4:127.0.0.1:9")
    assert info.name == f"token:{bearer.partition('.')[0]}" and info.forwarded_by == ""
    with pytest.raises(auth.Denied):                           # not in the capability table: refused
        ic.check("/schedd.v1.Scheduler/NotAnRpc", md, None, put_a, "p")
    # ACL disabled: no checks, and still no trust in a client's principal header.
    off = _interceptor(log, enabled=False).check(method, forged, None, put_b, "ipv4:127.0.0.1:9")
    assert off.principal is None and off.name == "ipv4:127.0.0.1:9" and off.forwarded_by == ""


def test_a_worker_stream_of_either_kind_needs_a_worker_token() -> None:
    """Workers.ConnectNode (one stream per worker and node) is refused to a client token exactly
    as Workers.Connect is: both need `serve`, which only a worker token carries."""
    log = Log()
    md = {"authorization": f"Bearer {_with_team_token(log, 'a')}"}
    ic = _interceptor(log)
    for method in ("/schedd.v1.Workers/Connect", "/schedd.v1.Workers/ConnectNode"):
        with pytest.raises(auth.Denied) as e:
            ic.check(method, md, None, None, "ipv4:127.0.0.1:9")
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert f"Workers.{method.rpartition('/')[2]} needs a worker token" in e.value.message


def test_mutating_calls_are_rate_limited_per_principal_with_a_retry_hint() -> None:
    log = Log()
    bearer = _with_team_token(log, "a")
    ic = _interceptor(log, limiter=auth.RateLimiter(rate=1.0, burst=2))
    md = {"authorization": f"Bearer {bearer}"}
    put = pb.PutJobRequest(job=pb.JobSpec(name="j", team="a"))
    for _ in range(2):
        ic.check("/schedd.v1.Scheduler/PutJob", md, None, put, "p")
    ic.check("/schedd.v1.Scheduler/GetJob", md, None, pb.GetJobRequest(name="j"), "p")   # reads: free
    with pytest.raises(auth.Denied) as e:
        ic.check("/schedd.v1.Scheduler/PutJob", md, None, put, "p")
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "retry in" in e.value.message
    assert dict(e.value.trailing)[auth.RETRY_AFTER].isdigit()
    limiter = auth.RateLimiter(rate=10.0, burst=1)
    assert limiter.take("x", 0.0) == 0.0 and limiter.take("x", 0.0) > 0 and limiter.take("x", 0.2) == 0.0


def test_the_sdk_verifies_exports_exactly_as_the_daemon_chains_them() -> None:
    trail = U.AuditTrail(retention=U.Retention(max_age_ms=0, max_records=3))
    for i in range(5):
        trail.append(U.event(time_ms=NOW + i, principal=f"token:{i}", source="s", action="a", target="ü t",
                             outcome="allowed", log_index=i + 1))
    text = export_jsonl(trail.records, trail.anchor)          # pruned: starts at its anchor
    assert client_acl.verify_jsonl(text) == (None, 3)
    lines = text.splitlines()
    lines[2] = lines[2].replace('"token:3"', '"token:9"')
    assert client_acl.verify_jsonl("\n".join(lines)) == (3, 1)
    dropped = text.splitlines()
    del dropped[1]
    assert client_acl.verify_jsonl("\n".join(dropped))[0] == 2


def test_a_sharded_export_verifies_section_by_section_and_a_forged_anchor_breaks_it() -> None:
    """A sharded cluster's export: one section per shard, each its own chain behind its anchor."""
    sections = []
    for k in range(2):
        trail = U.AuditTrail()
        for i in range(3):
            trail.append(U.event(time_ms=NOW + i, principal=f"s{k}", source="s", action="a", target="t",
                                 outcome="allowed", log_index=i + 1))
        text = export_jsonl(trail.records, trail.anchor)
        sections.append(text.replace('{"anchor":{', f'{{"anchor":{{"shard":{k},', 1))
    both = "".join(sections)
    assert client_acl.verify_jsonl(both) == (None, 6)
    lines = both.splitlines()
    assert client_acl.verify_jsonl("\n".join(lines[:4] + [lines[0]] + lines[5:]))[0] == 5   # shard 0 again
    unnamed = "\n".join(lines[:4] + ['{"anchor":{"next_seq":0,"hash":"' + "0" * 64 + '"}}'] + lines[5:])
    assert client_acl.verify_jsonl(unnamed)[0] == 5                  # a later anchor must name its shard
    assert client_acl.verify_jsonl("\n".join(lines[:2] + lines[3:])) [0] == 3   # a record dropped


def test_a_batch_in_one_team_is_authorized_once_per_team(monkeypatch) -> None:
    """PutJobs of 5,000 jobs named every team once per job; the decision is per team, so it is
    asked once per distinct team (it cost ~25 ms a call), and a refused team is still named."""
    log = Log()
    bearer = _with_team_token(log, "a")
    md = {"authorization": f"Bearer {bearer}"}
    method = "/schedd.v1.Scheduler/PutJobs"
    asked: list[str] = []
    real = A.allowed
    monkeypatch.setattr(A, "allowed", lambda p, cap, res: asked.append(res) or real(p, cap, res))
    ic = _interceptor(log)
    batch = pb.PutJobsRequest(jobs=[pb.JobSpec(name=f"j{i}", team="a") for i in range(5000)])
    ic.check(method, md, None, batch, "p")
    assert asked == ["team:a"]
    batch.jobs.append(pb.JobSpec(name="x", team="b"))
    with pytest.raises(auth.Denied) as e:
        ic.check(method, md, None, batch, "p")
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "'write' on team:b" in e.value.message


def _with_rules(log: Log, name: str, rules: dict[str, list[str]]) -> str:
    minted = A.mint_token(os.urandom(A.TOKEN_RANDOM_BYTES))
    log.apply(C.ACL_POLICY_PUT, policy={"name": name, "rules": rules})
    log.apply(C.ACL_TOKEN_CREATE, token=_token(minted, policies=[name]))
    return minted.bearer


def test_an_object_of_a_team_the_caller_cannot_read_is_answered_as_missing() -> None:
    """No existence oracle. Every RPC naming a job, execution or DAG of team b
    answers a team-a caller exactly what it answers for one that does not exist (NOT_FOUND, the
    servicer's text), and the denied record still names the real reason for the audit trail."""
    from schedd.core import dags as D
    from schedd_proto import dags_pb2 as dpb
    from tests.support.state import dag, task, text
    log = Log()
    log.apply(C.PUT, spec=text(name="b-job", team="b"), name="b-job")
    log.apply(C.DAG_PUT, spec=D.canonical_dag(dag("b-dag", [task("t")], team="b"))[1], name="b-dag")
    assert "b-job" in log.state.jobs and "b-dag" in log.state.dags
    ex = "b-job@2026-09-21T00:00:00Z"
    S, D = "/schedd.v1.Scheduler/", "/schedd.v1.Dags/"
    calls = {   # method -> (request naming b's object, request naming a missing one, NOT_FOUND text)
        S + "GetJob": (pb.GetJobRequest(name="b-job"), pb.GetJobRequest(name="nope"), "job 'b-job' not found"),
        S + "PauseJob": (pb.JobRef(name="b-job"), pb.JobRef(name="nope"), "job 'b-job' not found"),
        S + "ResumeJob": (pb.JobRef(name="b-job"), pb.JobRef(name="nope"), "job 'b-job' not found"),
        S + "DeleteJob": (pb.JobRef(name="b-job"), pb.JobRef(name="nope"), "job 'b-job' not found"),
        S + "TriggerJob": (pb.TriggerJobRequest(name="b-job"), pb.TriggerJobRequest(name="nope"),
                           "job 'b-job' not found"),
        S + "BackfillJob": (pb.BackfillRequest(name="b-job"), pb.BackfillRequest(name="nope"),
                            "job 'b-job' not found"),
        S + "ListInstants": (pb.ListInstantsRequest(job="b-job"), pb.ListInstantsRequest(job="nope"),
                             "job 'b-job' not found"),
        S + "ListExecutions": (pb.ListExecutionsRequest(job="b-job"), pb.ListExecutionsRequest(job="nope"),
                               "job 'b-job' not found"),
        S + "GetExecution": (pb.GetExecutionRequest(id=ex), pb.GetExecutionRequest(id="nope@" + ex[6:]),
                             f"execution {ex!r} not found"),
        S + "CancelExecution": (pb.CancelExecutionRequest(id=ex), pb.CancelExecutionRequest(id="nope@" + ex[6:]),
                                f"execution {ex!r} not found"),
        S + "Explain": (pb.ExplainRequest(id=ex), pb.ExplainRequest(id="nope@" + ex[6:]), f"execution {ex!r} not found"),
        S + "Explain ": (pb.ExplainRequest(job="b-job", at_ms=NOW), pb.ExplainRequest(job="nope", at_ms=NOW),
                         "job 'b-job' not found"),
        **{D + m: (dpb.GetDagRequest(name="b-dag"), dpb.GetDagRequest(name="nope"), "DAG 'b-dag' not found")
           for m in ("GetDag", "ListDagRuns", "GetDagRun")},
        D + "DeleteDag": (dpb.DagRef(name="b-dag"), dpb.DagRef(name="nope"), "DAG 'b-dag' not found"),
        D + "RunDag": (dpb.RunDagRequest(name="b-dag"), dpb.RunDagRequest(name="nope"), "DAG 'b-dag' not found"),
    }
    queue = auth.AuditQueue(lambda entry: None, types.SimpleNamespace(now_ms=lambda: NOW))  # type: ignore[arg-type]
    ic = _interceptor(log, queue=queue)
    md = {"authorization": "Bearer " + _with_rules(log, "a-all", {"team:a": sorted(A.KIND_CAPABILITIES["team"])})}
    for method, (theirs, missing, answer) in calls.items():
        method = method.strip()              # "Explain " is Explain asked by job and time
        with pytest.raises(auth.Denied) as e:
            ic.check(method, md, None, theirs, "p")
        assert (e.value.code, e.value.message) == (grpc.StatusCode.NOT_FOUND, answer), method
        assert "team:b" not in e.value.message
        ic.check(method, md, None, missing, "p")       # passes: the servicer answers NOT_FOUND alike
    assert all("team:b" in row["detail"] for row in queue.pending)            # the trail knows why
    # A caller who may read team b is told what it lacks, naming the team it can see.
    reader = {"authorization": "Bearer " + _with_rules(log, "b-read", {"team:b": ["read"]})}
    with pytest.raises(auth.Denied) as e:
        ic.check(S + "PauseJob", reader, None, pb.JobRef(name="b-job"), "p")
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "'write' on team:b" in e.value.message
    # A caller with the capability on no team is told so, whether the object exists or not.
    none = {"authorization": "Bearer " + _with_rules(log, "nothing", {"team:z": ["read"]})}
    answers = set()
    for request in (pb.JobRef(name="b-job"), pb.JobRef(name="nope")):
        with pytest.raises(auth.Denied) as e:
            ic.check(S + "PauseJob", none, None, request, "p")
        answers.add((e.value.code, e.value.message))
    assert answers == {(grpc.StatusCode.PERMISSION_DENIED, "permission denied: missing capability 'write' on any team")}
    # A name taken by another team's job cannot be hidden, but its team is not named.
    with pytest.raises(auth.Denied) as e:
        ic.check(S + "PutJob", md, None, pb.PutJobRequest(job=pb.JobSpec(name="b-job", team="a")), "p")
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and "team:b" not in e.value.message


def test_a_halted_node_says_why_it_cannot_judge_an_unknown_token() -> None:
    """A node that halted (its build is below the cluster's level) stopped applying, so a token
    made since is unknown there but may be good: it answers FAILED_PRECONDITION with the halt's
    reason, not "invalid token"; a node that did not halt still says the token is invalid."""
    log = Log()
    _with_team_token(log, "a")
    stranger = A.mint_token(os.urandom(A.TOKEN_RANDOM_BYTES)).bearer
    md = {"authorization": f"Bearer {stranger}"}
    method, request = "/schedd.v1.Scheduler/GetJob", pb.GetJobRequest(name="j")

    class Aborted(Exception):
        pass

    class Context:
        code = message = None

        def peer(self) -> str:
            return "ipv4:127.0.0.1:9"

        async def abort(self, code, message, trailing_metadata=()):
            self.code, self.message = code, message
            raise Aborted

    def admit(halted: str) -> Context:
        ic = _interceptor(log)
        ic.node.halted = halted                               # type: ignore[attr-defined]
        ic._behind = lambda: False                            # type: ignore[method-assign]
        ctx = Context()
        with pytest.raises((Aborted, auth.Denied)):
            asyncio.run(ic._admit(method, md, None, request, ctx))
        return ctx

    why = "this node runs schedd 0.1.0, feature level 4; the cluster is at 5: upgrade this node"
    halted = admit(why)
    assert halted.code == grpc.StatusCode.FAILED_PRECONDITION and halted.message.startswith(why)
    assert "cannot check a token made since" in halted.message
    running = admit("")
    assert running.code == grpc.StatusCode.UNAUTHENTICATED and running.message == "invalid token"
