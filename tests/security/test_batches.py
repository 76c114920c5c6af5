"""A batch of jobs (PutJobs, `schedctl job apply -f`, `job create -f`) commits
all of its jobs or none, sizes its Raft entries by bytes, names a refused job by its name and its
position in the file, and never commits after it has answered "failed"."""

from __future__ import annotations

import asyncio
import json
import pickle

import grpc
import pytest
import yaml

from schedd.api import convert
from schedd.core import batches as B
from schedd.core import commands as C
from schedd.core.model import canonical_spec
from schedd.replication.node import NotApplied, OutcomeUnknown
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_client import Client, job_spec
from schedd_client.errors import ResourceExhausted, ValidationError
from schedd_client.schedctl import main as schedctl_main
from tests.security._api_harness import NOW_MS, InMemoryNode, Proposals


def _specs(n: int, *, command_bytes: int = 20, prefix: str = "b", team: str = ""):
    return [job_spec(f"{prefix}-{i:05d}", command="echo " + "x" * command_bytes, team=team)
            for i in range(n)]


def _team_jobs(client: Client, team: str) -> list[str]:
    return [j.spec.name for j in client.list_jobs(team=team)]




# ---------------------------------------------------------------- real processes


@pytest.mark.integration
def test_batch_is_all_or_nothing(cluster_factory):
    """The issue's three cases against a real cluster (pysyncobj's entry limit included): batches
    that used to be refused or half-committed now commit whole, a bad job commits nothing (not
    even later), and the node's [limits] table is what refuses an oversized call."""
    c = cluster_factory(size=3, limits={"max_jobs_per_call": 4000})
    c.start()
    leader = c.wait_leader(timeout=60)
    follower = next(n.grpc for n in c.nodes.values() if n.id != leader)   # every call is forwarded
    with Client(follower, security=c.security(), timeout=60) as client:
        r = client.put_jobs(_specs(100, command_bytes=500, team="t500", prefix="a"))
        assert (r.created, r.updated) == (100, 0)                  # was: refused (entry too large)
        r = client.put_jobs(_specs(250, command_bytes=1024, team="t1k", prefix="k"))
        assert (r.created, r.updated) == (250, 0)                  # was: error, then 50 committed
        assert len(_team_jobs(client, "t1k")) == 250

        specs = _specs(3000, team="bad", prefix="m")
        specs[2998] = job_spec("m-bad", schedule="61 * * * *", command="true", team="bad")
        with pytest.raises(ValidationError) as err:
            client.put_jobs(specs)                                   # was: 5,000 of 10,000 committed
        assert "m-bad" in err.value.message and "#2999" in err.value.message
        assert err.value.position == 2999
        # Nothing later either: a write after the refusal commits, and still no job of the batch.
        client.put_job(job_spec("barrier", command="true", team="bad"))
        assert _team_jobs(client, "bad") == ["barrier"]

        with pytest.raises(ResourceExhausted) as cap:
            client.put_jobs(_specs(4001, team="cap", prefix="c"))
        assert "limits.max_jobs_per_call" in cap.value.message and "4000" in cap.value.message
        assert _team_jobs(client, "cap") == []


# ---------------------------------------------------------------- in process, with faults


def test_batch_entries_are_sized_by_bytes(api):
    server = api()
    with Client(server.address, timeout=30) as client:
        r = client.put_jobs(_specs(250, command_bytes=1024))
    assert r.created == 250
    kinds = server.node.kinds()
    assert kinds.count(C.BATCH_STAGE) >= 5 and kinds.count(C.BATCH_COMMIT) == 1
    assert max(len(e) for e in server.node.entries) <= C.BATCH_ENTRY_BYTES
    with server.node.lock:
        assert len(server.node.state.jobs) == 250 and not B.staged(server.node.state)


def test_batch_error_names_the_job_and_its_position(api, tmp_path, capsys):
    """The server names the refused job and its position in the call; schedctl turns the
    position into the place in the file (document, item). Nothing is committed."""
    server = api()
    f = tmp_path / "jobs.yaml"
    f.write_text(yaml.safe_dump_all([
        {"name": "one", "command": "true"},
        {"name": "two", "command": "true"},
        [{"name": "three", "command": "true"}, {"name": "bad-cron", "schedule": "* * *", "command": "x"}],
    ]))
    for verb in ("apply", "create"):
        code = schedctl_main(["--cluster", server.address, "job", verb, "-f", str(f)])
        err = capsys.readouterr().err
        assert code == 1, err
        assert "bad-cron" in err and "#4" in err and "document 3, item 2" in err, err
        with server.node.lock:
            assert server.node.state.jobs == {}

    # create -f is one batch too: an existing job refuses the whole file, naming it
    with Client(server.address) as client:
        client.put_job(job_spec("two", command="true"))
    f.write_text(yaml.safe_dump_all([{"name": "one", "command": "true"}, {"name": "two", "command": "true"}]))
    assert schedctl_main(["--cluster", server.address, "job", "create", "-f", str(f)]) == 1
    err = capsys.readouterr().err
    assert "'two'" in err and "already exists" in err and "document 2" in err, err
    with server.node.lock:
        assert sorted(server.node.state.jobs) == ["two"]
    assert schedctl_main(["--cluster", server.address, "-o", "json", "job", "apply", "-f", str(f)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["created"], report["updated"], report["unchanged"]) == (1, 0, 1)    # "two" is as the file says


class _LoseStage(Proposals):
    """The second stage entry is refused (not applied); every other entry applies."""

    def __init__(self) -> None:
        self.stages = 0

    async def propose(self, node, entry):
        if C.decode(entry).kind == C.BATCH_STAGE:
            self.stages += 1
            if self.stages == 2:
                raise NotApplied("queue full")
        return node.apply(entry)


class _HoldCommit(Proposals):
    """The commit entry's fate is unknown to the proposer and it applies late: after the next
    entry (the abort), as a forwarded command can after a leader change."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.late: list[dict] = []

    async def propose(self, node, entry):
        if C.decode(entry).kind in (C.BATCH_COMMIT, C.PUT_MANY):
            self.held.append(entry)
            raise OutcomeUnknown("no commit within 10s")
        result = node.apply(entry)
        self.late += [node.apply(e) for e in self.held]
        self.held.clear()
        return result


class _LoseCommitAnswer(Proposals):
    """The commit applies, but its answer is lost."""

    async def propose(self, node, entry):
        result = node.apply(entry)
        if C.decode(entry).kind == C.BATCH_COMMIT:
            raise OutcomeUnknown("leader changed")
        return result


class _StagesAnswerAfterTheCommit(Proposals):
    """Each entry applies when proposed, but no stage is answered before the commit entry is
    proposed: a proposer that waits for its stages before proposing the commit never finishes."""

    def __init__(self) -> None:
        self.commit_proposed = asyncio.Event()

    async def propose(self, node, entry):
        result = node.apply(entry)
        if C.decode(entry).kind == C.BATCH_COMMIT:
            self.commit_proposed.set()
        else:
            await asyncio.wait_for(self.commit_proposed.wait(), 20)
        return result


def test_a_staged_batch_commits_in_one_round(api):
    """The commit entry goes with the stages (behind them in the log), not a commit round after
    them: the call needs one round trip of the log, not two; and a stage apply
    refuses still names its job, with nothing committed."""
    server = api(proposals=_StagesAnswerAfterTheCommit())
    specs = _specs(200, command_bytes=1024)
    with Client(server.address, timeout=30) as client:
        r = client.put_jobs(specs)
    assert (r.created, r.updated) == (200, 0)
    kinds = server.node.kinds()
    assert kinds.count(C.BATCH_STAGE) > 1 and kinds[-1] == C.BATCH_COMMIT

    server = api(proposals=_SpoilSecondStage())
    with grpc.insecure_channel(server.address) as ch, pytest.raises(grpc.RpcError) as err:
        pb_grpc.SchedulerStub(ch).PutJobs(pb.PutJobsRequest(jobs=specs, request_id="r2"), timeout=30)
    stages = [json.loads(e) for e in server.node.entries if json.loads(e)["k"] == C.BATCH_STAGE]
    first = stages[1]["first"]                                            # the spoiled stage's first job
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == f"job #{first}: spec is not valid JSON"
    assert dict(err.value.trailing_metadata())["x-schedd-batch-position"] == str(first)
    with server.node.lock:
        assert server.node.state.jobs == {} and not B.staged(server.node.state)


class _SpoilSecondStage(_StagesAnswerAfterTheCommit):
    """As above, and the second stage's first spec text is not JSON when it applies."""

    stages = 0

    async def propose(self, node, entry):
        body = json.loads(entry)
        if body["k"] == C.BATCH_STAGE:
            self.stages += 1
            if self.stages == 2:
                body["specs"][0] = "{not json"
                entry = json.dumps(body)
        return await super().propose(node, entry)


def test_batch_never_commits_after_failed(api):
    """Once PutJobs answers "failed", no job of the batch ever commits: the proposer aborts the
    batch, and apply refuses a commit that arrives after the abort. When the abort finds the
    commit already applied, the answer is the commit's, not a failure."""
    specs = _specs(200, command_bytes=1024)

    request = pb.PutJobsRequest(jobs=specs, request_id="r1")

    server = api(proposals=_LoseStage())
    with grpc.insecure_channel(server.address) as ch, pytest.raises(grpc.RpcError) as err:
        pb_grpc.SchedulerStub(ch).PutJobs(request, timeout=30)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "nothing of the batch" in err.value.details()
    assert server.node.kinds()[-1] == C.BATCH_ABORT
    with server.node.lock:
        assert server.node.state.jobs == {} and not B.staged(server.node.state)

    for batch in (request, pb.PutJobsRequest(jobs=specs[:3], request_id="r2")):   # staged, one entry
        hold = _HoldCommit()
        server = api(proposals=hold)
        with grpc.insecure_channel(server.address) as ch, pytest.raises(grpc.RpcError) as err:
            pb_grpc.SchedulerStub(ch).PutJobs(batch, timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "not committed" in err.value.details()
        assert [r.ok for r in hold.late] == [False] and hold.late[0].code == "aborted"
        with server.node.lock:
            assert server.node.state.jobs == {}

    server = api(proposals=_LoseCommitAnswer())
    with Client(server.address, timeout=5) as client:
        r = client.put_jobs(specs)
    assert (r.created, r.updated) == (200, 0)
    with server.node.lock:
        assert len(server.node.state.jobs) == 200


def test_staged_batch_is_invisible_and_discarded_after_a_timeout():
    """Staged chunks are not jobs (not listed, not scheduled); the leader finds a batch nobody
    committed once its entry time is past the timeout, and its abort entry discards it for
    good: a commit proposed afterwards is refused. Staging survives a snapshot."""
    node = InMemoryNode()
    texts = [canonical_spec(convert.spec_to_dict(s))[1] for s in _specs(3)]
    stage = C.encode(C.BATCH_STAGE, rid="", now=NOW_MS, term=1, batch="b1", seq=0, specs=texts)
    assert node.apply(stage).ok
    st = node.state
    assert st.jobs == {} and st.wheel.get("b-00000") is None and B.staged(st) == ["b1"]

    restored = type(st)()
    restored.restore(pickle.loads(pickle.dumps(st.snapshot())))
    assert B.staged(restored) == ["b1"]

    assert B.expired(st, NOW_MS + B.BATCH_TTL_MS - 1) == []
    assert B.expired(st, NOW_MS + B.BATCH_TTL_MS + 1) == ["b1"]
    later = NOW_MS + B.BATCH_TTL_MS + 1
    assert node.apply(C.encode(C.BATCH_ABORT, rid="", now=later, term=1, batch="b1", reason="timeout")).payload.aborted
    commit = node.apply(C.encode(C.BATCH_COMMIT, rid="r1", now=later, term=1, batch="b1", chunks=1, jobs=3))
    assert commit.code == "aborted" and st.jobs == {} and not B.staged(st)
    # a commit of a batch that is past its timeout is refused even before the leader aborts it
    assert node.apply(stage.replace('"b1"', '"b2"')).ok
    late = node.apply(C.encode(C.BATCH_COMMIT, rid="r2", now=later + B.BATCH_TTL_MS, term=1, batch="b2",
                               chunks=1, jobs=3))
    assert late.code == "aborted" and st.jobs == {}


def test_leader_discards_an_abandoned_batch():
    """A batch whose proposer vanished after staging is aborted by the leader's loop, once."""
    from schedd.leader.dispatcher import Dispatcher
    from schedd.runtime.metrics import Metrics
    from schedd.ports.fakes import ManualClock

    node = InMemoryNode()
    texts = [canonical_spec(convert.spec_to_dict(s))[1] for s in _specs(2)]
    node.apply(C.encode(C.BATCH_STAGE, rid="", now=NOW_MS, term=1, batch="gone", seq=0, specs=texts))
    clock = ManualClock(NOW_MS + B.BATCH_TTL_MS // 2)
    dispatcher = Dispatcher(node, clock, Metrics())  # type: ignore[arg-type]

    async def steps() -> None:
        dispatcher._loop = asyncio.get_running_loop()
        dispatcher._step()                              # not yet expired: nothing proposed
        clock.now = NOW_MS + B.BATCH_TTL_MS + 1
        dispatcher._step()
        dispatcher._step()                              # the abort is in flight: not asked twice
        while dispatcher._tasks:
            await asyncio.sleep(0.01)
        await dispatcher.close()

    asyncio.run(steps())
    assert node.kinds().count(C.BATCH_ABORT) == 1 and not B.staged(node.state)
    assert node.state.jobs == {}
