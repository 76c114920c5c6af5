"""An in-process fake of the schedd gRPC API for the SDK and schedctl tests: ``FakeCluster``
serves ``schedd.v1.Scheduler`` and ``schedd.v1.Cluster`` from plain dicts on one or more loopback
ports sharing one state (like nodes that forward to a leader), with injectable failures."""

from __future__ import annotations

import socket
import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd.api.convert import upcoming_fires
from schedd.core import schedule as sched
from schedd_client import format_time, job_spec

NOW_MS = 1_795_917_600_000  # 2026-11-29T02:00:00Z
MINUTE_MS = 60_000


# ---------------------------------------------------------------- the fake cluster


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


@dataclass
class Fault:
    code: grpc.StatusCode
    details: str = "injected"
    after_apply: bool = False  # apply, then fail: the caller cannot know the outcome
    trailers: tuple[tuple[str, str], ...] = ()


@dataclass
class FakeState:
    jobs: dict[str, pb.Job] = field(default_factory=dict)
    executions: dict[str, pb.Execution] = field(default_factory=dict)
    replies: dict[str, object] = field(default_factory=dict)  # request_id -> first reply
    request_ids: list[tuple[str, str]] = field(default_factory=list)  # (method, id), arrival order
    calls: list[tuple[str, str]] = field(default_factory=list)  # (node, method)
    requests: list[tuple[str, object]] = field(default_factory=list)  # (method, request)
    log_index: int = 100
    lock: threading.Lock = field(default_factory=threading.Lock)

    def calls_to(self, method: str) -> list[str]:
        return [node for node, m in self.calls if m == method]

    def requests_of(self, method: str) -> list:
        return [r for m, r in self.requests if m == method]


def _page(items: list, request) -> tuple[list, str, int]:
    size = min(request.page_size or 100, 1000)
    start = int(request.page_token or 0)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else ""), len(items)


class FakeApiNode(pb_grpc.SchedulerServicer, pb_grpc.ClusterServicer):
    def __init__(self, name: str, state: FakeState) -> None:
        self.name = name
        self.state = state
        self.address = ""
        self.faults: dict[str, list[Fault]] = {}
        self.metadata: dict[str, dict[str, str]] = {}  # method -> metadata of its last call

    def fail(self, method: str, code: grpc.StatusCode, details: str = "injected", *,
             times: int = 1, after_apply: bool = False,
             trailers: tuple[tuple[str, str], ...] = ()) -> None:  # fmt: skip
        self.faults.setdefault(method, []).extend([Fault(code, details, after_apply, trailers)] * times)

    def _serve(self, method: str, request, context, handler):
        with self.state.lock:
            self.state.calls.append((self.name, method))
            self.state.requests.append((method, request))
            self.metadata[method] = dict(context.invocation_metadata())
            request_id = getattr(request, "request_id", None)
            if request_id is not None:
                self.state.request_ids.append((method, request_id))
            queue = self.faults.get(method)
            fault = queue.pop(0) if queue else None
            if fault and not fault.after_apply:
                context.set_trailing_metadata(fault.trailers)
                context.abort(fault.code, fault.details)
            if request_id and request_id in self.state.replies:
                reply = self.state.replies[request_id]
            else:
                try:
                    reply = handler(request)
                except Refused as refused:
                    context.abort(refused.code, refused.details)
                if request_id:
                    self.state.replies[request_id] = reply
            if fault:
                context.abort(fault.code, fault.details)
            return reply

    # -- state changes (called under the lock)

    def _job(self, name: str) -> pb.Job:
        if name not in self.state.jobs:
            raise Refused(grpc.StatusCode.NOT_FOUND, f"job {name!r} not found")
        return self.state.jobs[name]

    def _check(self, spec: pb.JobSpec) -> None:
        if not spec.name:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "job name is empty")
        if spec.schedule == "bad":
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "schedule 'bad': not a cron expression")

    def _store(self, spec: pb.JobSpec) -> tuple[pb.Job, bool]:
        old = self.state.jobs.get(spec.name)
        job = pb.Job(
            spec=spec,
            version=(old.version + 1) if old else 1,
            paused=old.paused if old else spec.paused,
            next_fire_ms=NOW_MS + MINUTE_MS,
            created_ms=old.created_ms if old else NOW_MS,
            updated_ms=NOW_MS,
            created_by="tester",
            last_scheduled_ms=old.last_scheduled_ms if old else 0,
            last_execution_id=old.last_execution_id if old else "",
            last_state=old.last_state if old else "",
        )
        self.state.jobs[spec.name] = job
        return job, old is None

    def _put_job(self, request: pb.PutJobRequest) -> pb.PutJobResponse:
        self._check(request.job)
        old = self.state.jobs.get(request.job.name)
        if old and request.create_only:
            raise Refused(grpc.StatusCode.ALREADY_EXISTS, f"job {request.job.name!r} already exists")
        if request.expected_version and (old.version if old else 0) != request.expected_version:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, "version conflict")
        job, created = self._store(request.job)
        return pb.PutJobResponse(job=job, created=created)

    def _put_jobs(self, request: pb.PutJobsRequest) -> pb.PutJobsResponse:
        for spec in request.jobs:
            self._check(spec)
            if request.create_only and spec.name in self.state.jobs:
                raise Refused(grpc.StatusCode.ALREADY_EXISTS, f"job {spec.name!r} already exists")
        reply = pb.PutJobsResponse()
        for spec in request.jobs:
            _, created = self._store(spec)
            reply.created += created
            reply.updated += not created
        return reply

    def _diff_jobs(self, request: pb.DiffJobsRequest) -> pb.DiffJobsResponse:
        """As the server answers, with the spec as sent standing for its canonical form."""
        reply = pb.DiffJobsResponse()
        for spec in request.jobs:
            self._check(spec)
            old = self.state.jobs.get(spec.name)
            if old is not None and old.spec == spec:
                reply.changes.add(name=spec.name, action="unchanged", version=old.version)
                continue
            change = reply.changes.add(name=spec.name, proposed=spec, action="create" if old is None else "update")
            if old is not None:
                change.current.CopyFrom(old.spec)
                change.version = old.version
        return reply

    def _get_job(self, request: pb.GetJobRequest) -> pb.Job:
        job = pb.Job()
        job.CopyFrom(self._job(request.name))
        job.upcoming_ms.extend(job.next_fire_ms + i * MINUTE_MS for i in range(request.upcoming or 5))
        s = _schedule_of(job.spec)
        job.upcoming_fires.extend(upcoming_fires(s, job.upcoming_ms))  # as the server does
        if s.kind == "cron":
            job.effective_dst_gap, job.effective_dst_fold = s.gap, s.fold
        return job

    def _list_jobs(self, request: pb.ListJobsRequest) -> pb.ListJobsResponse:
        jobs = [
            job
            for name, job in sorted(self.state.jobs.items())
            if (not request.team or job.spec.team == request.team)
            and (not request.state or request.state == ("paused" if job.paused else "active"))
        ]
        page, token, total = _page(jobs, request)
        return pb.ListJobsResponse(jobs=page, next_page_token=token, total=total)

    def _set_paused(self, name: str, paused: bool) -> pb.Job:
        job = self._job(name)
        job.paused = paused
        job.version += 1
        return job

    def _delete_job(self, request: pb.JobRef) -> pb.DeleteJobResponse:
        self._job(request.name)
        del self.state.jobs[request.name]
        return pb.DeleteJobResponse(name=request.name)

    def _trigger_job(self, request: pb.TriggerJobRequest) -> pb.Execution:
        job = self._job(request.name)
        scheduled = NOW_MS + len(self.state.executions) * 1000
        run = add_execution(self.state, job.spec.name, scheduled, "SCHEDULED", trigger="manual")
        job.last_execution_id, job.last_scheduled_ms, job.last_state = run.id, scheduled, run.state
        return run

    def _list_executions(self, request: pb.ListExecutionsRequest) -> pb.ListExecutionsResponse:
        runs = sorted(
            (
                run
                for run in self.state.executions.values()
                if (not request.job or run.job == request.job)
                and (not request.state or run.state == request.state)
            ),
            key=lambda run: (run.scheduled_ms, run.id),
            reverse=not request.oldest_first,
        )
        page, token, total = _page(runs, request)
        return pb.ListExecutionsResponse(executions=page, next_page_token=token, total=total)

    def _get_execution(self, request: pb.GetExecutionRequest) -> pb.Execution:
        if request.id not in self.state.executions:
            raise Refused(grpc.StatusCode.NOT_FOUND, f"execution {request.id!r} not found")
        return self.state.executions[request.id]

    def node_status(self, with_digest: bool = False) -> pb.NodeStatus:
        return pb.NodeStatus(
            state_digest=f"{self.state.log_index:064x}" if with_digest else "",
            digest_index=self.state.log_index if with_digest else 0,
            id=self.name,
            raft_address=self.address.replace(":", ":1"),
            grpc_address=self.address,
            role="leader" if self.name == "n1" else "follower",
            term=3,
            commit_index=self.state.log_index,
            applied_index=self.state.log_index - (0 if self.name == "n1" else 2),
            lag=0 if self.name == "n1" else 2,
            has_quorum=True,
            # n2 led term 2 until n1 took over in term 3 (the times a node records: NodeStatus.leader_terms)
            leader_terms={"n1": [pb.LeaderTerm(term=3, since_ms=1_000_000)],
                          "n2": [pb.LeaderTerm(term=2, since_ms=500_000, until_ms=999_000)]}.get(self.name, []),
        )

    # -- the RPCs

    def PutJob(self, request, context):
        return self._serve("PutJob", request, context, self._put_job)

    def PutJobs(self, request, context):
        return self._serve("PutJobs", request, context, self._put_jobs)

    def GetJob(self, request, context):
        return self._serve("GetJob", request, context, self._get_job)

    def DiffJobs(self, request, context):
        return self._serve("DiffJobs", request, context, self._diff_jobs)

    def ListJobs(self, request, context):
        return self._serve("ListJobs", request, context, self._list_jobs)

    def PauseJob(self, request, context):
        return self._serve("PauseJob", request, context, lambda r: self._set_paused(r.name, True))

    def ResumeJob(self, request, context):
        return self._serve("ResumeJob", request, context, lambda r: self._set_paused(r.name, False))

    def DeleteJob(self, request, context):
        return self._serve("DeleteJob", request, context, self._delete_job)

    def TriggerJob(self, request, context):
        return self._serve("TriggerJob", request, context, self._trigger_job)

    def ListExecutions(self, request, context):
        return self._serve("ListExecutions", request, context, self._list_executions)

    def GetExecution(self, request, context):
        return self._serve("GetExecution", request, context, self._get_execution)

    def Status(self, request, context):
        return self._serve("Status", request, context, lambda r: self.cluster.status(answered_by=self.name, with_digest=r.with_digest))

    def NodeInfo(self, request, context):
        return self._serve("NodeInfo", request, context, lambda r: self.node_status(r.with_digest))


def _schedule_of(spec: pb.JobSpec) -> sched.Schedule:
    """The job's schedule as the server parses it (for the fires' local times and DST notes)."""
    return sched.parse(spec.schedule, spec.timezone or "UTC", hash_key=spec.name, gap=spec.dst_gap,
                       fold=spec.dst_fold)


class FakeCluster:
    """``size`` fake nodes on loopback ports, sharing one state."""

    def __init__(self, size: int = 1) -> None:
        self.state = FakeState()
        self.nodes: list[FakeApiNode] = []
        self._servers: list[grpc.Server] = []
        for i in range(size):
            node = FakeApiNode(f"n{i + 1}", self.state)
            node.cluster = self
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            pb_grpc.add_SchedulerServicer_to_server(node, server)
            pb_grpc.add_ClusterServicer_to_server(node, server)
            node.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
            server.start()
            self.nodes.append(node)
            self._servers.append(server)

    @property
    def addresses(self) -> list[str]:
        return [node.address for node in self.nodes]

    @property
    def cluster(self) -> str:
        return ",".join(self.addresses)

    def status(self, answered_by: str, with_digest: bool = False) -> pb.ClusterStatus:
        return pb.ClusterStatus(
            leader_id="n1",
            leader_grpc_address=self.nodes[0].address,
            term=3,
            commit_index=self.state.log_index,
            nodes=[node.node_status(with_digest) for node in self.nodes],
            jobs=len(self.state.jobs),
            executions=len(self.state.executions),
            answered_by=answered_by,
        )

    def add_job(self, name: str, **kwargs) -> pb.Job:
        if not {"command", "argv", "http_url", "python"} & kwargs.keys():
            kwargs["command"] = f"echo {name}"
        with self.state.lock:
            return self.nodes[0]._store(job_spec(name, **kwargs))[0]

    def stop(self) -> None:
        for server in self._servers:
            server.stop(None)


def add_execution(state: FakeState, job: str, scheduled_ms: int, run_state: str, *,
                  trigger: str = "schedule", attempts=()) -> pb.Execution:  # fmt: skip
    state.log_index += 1
    run = pb.Execution(
        id=f"{job}@{format_time(scheduled_ms)}",
        job=job,
        scheduled_ms=scheduled_ms,
        state=run_state,
        trigger=trigger,
        created_ms=scheduled_ms - 1500,
        term=3,
        updated_ms=scheduled_ms,
        log_index=state.log_index,
        attempts=list(attempts),
    )
    state.executions[run.id] = run
    return run


def dead_address() -> str:
    """A loopback address nobody listens on (connections are refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"
