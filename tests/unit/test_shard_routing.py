"""The routing servicers of a sharded node (schedd.api.shard_routing) over fake groups: which group
answers each call, merged listings with one cursor, batches split and refused at the caller's
positions, watches with one "synced", cluster-wide writes to every group."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from schedd.api import auth
from schedd.api import shard_routing as R
from schedd.core.shards import shard_of
from schedd.runtime.daemon import SERVICES
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

S = 3


class Aborted(Exception):
    def __init__(self, code: Any, details: str, meta: tuple) -> None:
        super().__init__(details)
        self.code, self.details, self.meta = code, details, dict(meta)


class Context:
    def __init__(self, metadata: tuple = ()) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple:
        return self.metadata

    async def abort(self, code: Any, details: str = "", trailing_metadata: Any = ()) -> None:
        raise Aborted(code, details, tuple(trailing_metadata or ()))


class Group:
    """One group's Scheduler servicer: jobs by name, executions, calls recorded."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.jobs: dict[str, pb.Job] = {}
        self.calls: list[tuple[str, Any]] = []
        self.gate: asyncio.Barrier | None = None       # set: each call waits until every group is in one
        self.delay = 0.0

    async def _meet(self) -> None:
        await asyncio.sleep(self.delay)
        if self.gate is not None:
            await asyncio.wait_for(self.gate.wait(), 5)

    async def GetJob(self, request, context):
        self.calls.append(("GetJob", request.name))
        return self.jobs[request.name]

    async def ListJobs(self, request, context):
        names = sorted(n for n in self.jobs if n > request.page_token)
        page = names[:request.page_size]
        more = len(names) > request.page_size
        return pb.ListJobsResponse(jobs=[self.jobs[n] for n in page], next_page_token=page[-1] if more else "",
                                   total=len(self.jobs))

    async def DiffJobs(self, request, context):
        self.calls.append(("DiffJobs", request.actions_only))
        await self._meet()
        changes = []
        for i, spec in enumerate(request.jobs, 1):
            if spec.schedule == "bad":
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"job {spec.name!r} (#{i}): bad schedule",
                                    trailing_metadata=((R.POSITION, str(i)),))
            changes.append(pb.JobChange(name=spec.name, action="update" if spec.name in self.jobs else "create"))
        return pb.DiffJobsResponse(changes=changes)

    async def PutJobs(self, request, context):
        self.calls.append(("PutJobs", [s.name for s in request.jobs]))
        await self._meet()
        created = sum(1 for s in request.jobs if s.name not in self.jobs)
        for s in request.jobs:
            self.jobs[s.name] = pb.Job(spec=s)
        return pb.PutJobsResponse(created=created, updated=len(request.jobs) - created)

    async def WatchJobs(self, request, context):
        for n in sorted(self.jobs):
            yield pb.WatchEvent(type="added", key=n)
        yield pb.WatchEvent(type="synced")
        yield pb.WatchEvent(type="changed", key=f"late{self.k}")


def front_of(groups: list[Group]) -> tuple[R.ShardFront, Any]:
    front = R.ShardFront(S, [{"Scheduler": g} for g in groups])
    servicer = R.build(front, "Scheduler", "schedd.v1.Scheduler", R.RULES["Scheduler"], pb_grpc.SchedulerServicer)
    return front, servicer


def run(coro):
    return asyncio.run(coro)


def names(n: int) -> list[str]:
    return [f"job{i:03d}" for i in range(n)]


def test_every_rpc_of_every_service_has_a_rule():
    front = R.ShardFront(1, [{name: object() for name in SERVICES}])
    for name, (full, base, _) in SERVICES.items():
        R.build(front, name, full, R.RULES[name], base)          # raises on a method without a rule
    with pytest.raises(KeyError, match="no shard routing rule"):
        R.build(front, "Scheduler", "schedd.v1.Scheduler", {}, pb_grpc.SchedulerServicer)


def test_a_named_job_goes_to_its_group_only():
    groups = [Group(k) for k in range(S)]
    _, servicer = front_of(groups)
    for n in names(12):
        groups[shard_of(n, S)].jobs[n] = pb.Job(spec=pb.JobSpec(name=n))
    for n in names(12):
        assert run(servicer.GetJob(pb.GetJobRequest(name=n), Context())).spec.name == n
    assert all(call[1] in g.jobs for g in groups for call in g.calls)
    assert R.run_job("etl:load@2026-12-07T01:00:00Z") == "etl:load"


def test_a_forwarded_call_names_its_group_and_only_a_node_may():
    groups = [Group(k) for k in range(S)]
    _, servicer = front_of(groups)
    n = names(1)[0]
    other = (shard_of(n, S) + 1) % S
    groups[other].jobs[n] = pb.Job(spec=pb.JobSpec(name="here"))
    groups[shard_of(n, S)].jobs[n] = pb.Job(spec=pb.JobSpec(name="owner"))
    ctx = Context(((R.SHARD_HEADER, str(other)),))
    assert run(servicer.GetJob(pb.GetJobRequest(name=n), ctx)).spec.name == "owner"     # a caller's header: ignored
    token = auth.CALL.set(auth.CallInfo("node:n2", "", "", None, forwarded_by="n2"))
    try:
        assert run(servicer.GetJob(pb.GetJobRequest(name=n), ctx)).spec.name == "here"  # a node's: honoured
    finally:
        auth.CALL.reset(token)


def test_node_info_answers_for_the_group_any_caller_names():
    class Info:
        def __init__(self, k: int) -> None:
            self.k = k

        async def NodeInfo(self, request, context):
            return pb.NodeStatus(id=f"group{self.k}")
    front = R.ShardFront(S, [{"Cluster": Info(k)} for k in range(S)])
    servicer = R.build(front, "Cluster", "schedd.v1.Cluster", R.RULES["Cluster"], pb_grpc.ClusterServicer)
    assert run(servicer.NodeInfo(pb.NodeInfoRequest(), Context())).id == "group0"
    assert run(servicer.NodeInfo(pb.NodeInfoRequest(), Context(((R.SHARD_HEADER, "2"),)))).id == "group2"
    assert run(servicer.NodeInfo(pb.NodeInfoRequest(), Context(((R.SHARD_HEADER, "9"),)))).id == "group0"


@pytest.mark.parametrize("size", [1, 2, 5, 100])
def test_listing_pages_merge_every_group_in_order_with_one_cursor(size):
    groups = [Group(k) for k in range(S)]
    _, servicer = front_of(groups)
    for n in names(23):
        groups[shard_of(n, S)].jobs[n] = pb.Job(spec=pb.JobSpec(name=n))
    seen, token = [], ""
    while True:
        page = run(servicer.ListJobs(pb.ListJobsRequest(page_size=size, page_token=token), Context()))
        assert page.total == 23 and len(page.jobs) <= size
        seen += [j.spec.name for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == names(23)
    with pytest.raises(Aborted, match="list again from the start"):
        bad = R.sh.encode_cursor([R.sh.Position("x")] * (S + 1))
        run(servicer.ListJobs(pb.ListJobsRequest(page_size=5, page_token=bad), Context()))


def test_a_batch_is_split_checked_whole_and_refused_at_the_callers_position():
    groups = [Group(k) for k in range(S)]
    _, servicer = front_of(groups)
    specs = [pb.JobSpec(name=n) for n in names(9)]
    r = run(servicer.PutJobs(pb.PutJobsRequest(jobs=specs, request_id="r1"), Context()))
    assert (r.created, r.updated) == (9, 0)
    assert sorted(n for g in groups for n in g.jobs) == names(9)
    specs2 = [pb.JobSpec(name=n) for n in names(12)]
    specs2[10].schedule = "bad"
    before = [list(g.calls) for g in groups]
    with pytest.raises(Aborted) as e:
        run(servicer.PutJobs(pb.PutJobsRequest(jobs=specs2), Context()))
    assert e.value.meta[R.POSITION] == "11" and "(#11)" in e.value.details
    assert [[c for c in g.calls if c[0] == "PutJobs"] for g in groups] == \
        [[c for c in b if c[0] == "PutJobs"] for b in before]          # nothing committed anywhere
    with pytest.raises(Aborted) as e:
        run(servicer.PutJobs(pb.PutJobsRequest(jobs=[pb.JobSpec(name="new1"), specs[4]], create_only=True),
                             Context()))
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS and e.value.meta[R.POSITION] == "2"
    diff = run(servicer.DiffJobs(pb.DiffJobsRequest(jobs=specs2[:10]), Context()))
    assert [c.name for c in diff.changes] == names(10)
    assert [c.action for c in diff.changes] == ["update"] * 9 + ["create"]


def test_a_batchs_groups_are_asked_at_once_and_the_earliest_refusal_is_the_answer():
    """Every group's check and commit are in flight together (a group's call returns only once
    every group's is waiting: asked one after another, the first would time out), the checks ask
    for actions only, and of two refused jobs the answer names the earlier, even when its group
    answers last."""
    groups = [Group(k) for k in range(S)]
    _, servicer = front_of(groups)
    specs = [pb.JobSpec(name=n) for n in names(12)]
    assert len({shard_of(s.name, S) for s in specs}) == S

    async def put(request):
        gate = asyncio.Barrier(S)
        for g in groups:
            g.gate = gate
        try:
            return await servicer.PutJobs(request, Context())
        finally:
            for g in groups:
                g.gate = None
    r = run(put(pb.PutJobsRequest(jobs=specs)))
    assert (r.created, r.updated) == (12, 0)
    assert all(("DiffJobs", True) in g.calls for g in groups)
    bad = [specs[i] for i in (2, 9)]
    assert shard_of(bad[0].name, S) != shard_of(bad[1].name, S)
    for s in bad:
        s.schedule = "bad"
    groups[shard_of(bad[0].name, S)].delay = 0.2                      # the earlier bad job's group answers last
    for _ in range(3):
        with pytest.raises(Aborted) as e:
            run(servicer.PutJobs(pb.PutJobsRequest(jobs=specs), Context()))
        assert e.value.meta[R.POSITION] == "3" and "(#3)" in e.value.details
    diff = run(servicer.DiffJobs(pb.DiffJobsRequest(jobs=specs[:2]), Context()))
    assert [c.action for c in diff.changes] == ["update", "update"]
    assert groups[shard_of(specs[0].name, S)].calls[-1] == ("DiffJobs", False)     # a user's diff: in full


def test_a_watch_of_every_group_says_synced_once_after_all_listed():
    groups = [Group(k) for k in range(S)]
    _, servicer = front_of(groups)
    for n in names(6):
        groups[shard_of(n, S)].jobs[n] = pb.Job(spec=pb.JobSpec(name=n))

    async def take(n: int) -> list[pb.WatchEvent]:
        out = []
        async for e in servicer.WatchJobs(pb.ListJobsRequest(), Context()):
            out.append(e)
            if len(out) == n:
                break
        return out
    events = run(take(6 + 1 + S))
    kinds = [e.type for e in events]
    assert kinds.count("synced") == 1
    synced = kinds.index("synced")
    assert sorted(e.key for e in events[:synced] if e.type == "added") == names(6)
    assert R._without_synced(pb.WatchEvent(type="batch", events=[pb.WatchEvent(type="synced")])) == (None, True)


def test_the_sdk_routes_a_call_to_the_shard_the_node_would():
    """The SDK's table of which job a request names agrees with the node's `Key` rules."""
    from schedd_client import _routing as client
    from schedd_proto import dags_pb2 as dpb
    from schedd_proto import logs_pb2 as lpb
    samples = {
        "PutJob": pb.PutJobRequest(job=pb.JobSpec(name="etl:load")), "GetJob": pb.GetJobRequest(name="a"),
        "PauseJob": pb.JobRef(name="b"), "TriggerJob": pb.TriggerJobRequest(name="c"),
        "ListExecutions": pb.ListExecutionsRequest(job="d"), "GetExecution": pb.GetExecutionRequest(id="e@2026-12-07T00:00:00Z"),
        "CancelExecution": pb.CancelExecutionRequest(id="f@x"), "Explain": pb.ExplainRequest(id="g@x"),
        "BackfillJob": pb.BackfillRequest(name="h"), "ListInstants": pb.ListInstantsRequest(job="i"),
        "RetryExecution": pb.RetryExecutionRequest(id="j@x"), "ResumeJob": pb.JobRef(name="k"),
        "DeleteJob": pb.JobRef(name="l"),
    }
    for method, request in samples.items():
        rule = R.RULES["Scheduler"][method]
        assert isinstance(rule, R.Key)
        assert client.route_of("scheduler", method, request) == R.sh.routing_key(rule.of(request)), method
    dag = {"PutDag": dpb.PutDagRequest(dag=dpb.DagSpec(name="etl")), "RunDag": dpb.RunDagRequest(name="etl"),
           "GetDagRun": dpb.GetDagRunRequest(name="etl"), "ClearDagTask": dpb.ClearDagTaskRequest(name="etl")}
    for method, request in dag.items():
        assert client.route_of("dags", method, request) == R.RULES["Dags"][method].of(request) == "etl"
    assert client.route_of("logs", "ReadRunLogs", lpb.ReadRunLogsRequest(id="m@x")) == "m"
    assert client.route_of("scheduler", "ListJobs", pb.ListJobsRequest()) == ""
    assert client.route_of("scheduler", "ListExecutions", pb.ListExecutionsRequest()) == ""
    # a batch: to the group of its first job, which is where the node sends a one-group batch whole
    front = R.ShardFront(S, [{"Scheduler": Group(k)} for k in range(S)])
    batch = pb.PutJobsRequest(jobs=[pb.JobSpec(name=n) for n in names(3)])
    for method, request in {"PutJobs": batch, "DiffJobs": pb.DiffJobsRequest(jobs=batch.jobs)}.items():
        assert isinstance(R.RULES["Scheduler"][method], R.Split)
        key = client.route_of("scheduler", method, request)
        assert client.shard_of(key, S) == front.of_name(names(3)[0]) == shard_of(names(3)[0], S), method
        assert client.route_of("scheduler", method, type(request)()) == ""


def test_the_sdk_learns_a_shards_leader_from_a_forwarded_answer():
    from schedd_client._routing import LEADER_TRAILER, SHARD_TRAILER, ShardMap, shard_of
    m = ShardMap()
    assert m.leader_for("a") is None
    m.heard([(LEADER_TRAILER, "10.0.0.2:7070")])                # an unsharded cluster: nothing to learn
    assert m.shards == 0
    k = shard_of("a", 4)
    m.heard([(LEADER_TRAILER, "10.0.0.2:7070"), (SHARD_TRAILER, f"{k}/4")])
    assert m.leader_for("a") == "10.0.0.2:7070"
    m.heard([(LEADER_TRAILER, "x:1"), (SHARD_TRAILER, "9/4")])   # nonsense: ignored
    assert m.leaders == {k: "10.0.0.2:7070"}
    m.forget("a")
    assert m.leader_for("a") is None


def test_a_batch_is_authorized_in_each_group_against_its_own_jobs_only():
    front = R.ShardFront(S, [{"Scheduler": Group(k)} for k in range(S)])
    specs = [pb.JobSpec(name=n, team=f"t{i % 2}") for i, n in enumerate(names(12))]
    request = pb.PutJobsRequest(jobs=specs, create_only=True)
    parts = R.owning_parts(front, "/schedd.v1.Scheduler/PutJobs", request)
    assert [k for k, _ in parts] == list(range(S))
    for k, part in parts:
        assert [s.name for s in part.jobs] == [s.name for s in specs if shard_of(s.name, S) == k]
        assert part.create_only is True                            # the other fields are the request's
    one = pb.PutJobsRequest(jobs=[specs[0]])
    assert R.owning_parts(front, "/schedd.v1.Scheduler/PutJobs", one) == [(shard_of(specs[0].name, S), one)]
    assert R.owning_parts(front, "/schedd.v1.Scheduler/GetJob", pb.GetJobRequest(name=specs[1].name)) == \
        [(shard_of(specs[1].name, S), pb.GetJobRequest(name=specs[1].name))]
