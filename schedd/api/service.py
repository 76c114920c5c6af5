"""gRPC servicers: validate, propose, map results to status codes; forward to the leader.

A node that is not the leader forwards writes (and reads, unless the caller sent
`x-schedd-stale-ok: 1`) to the leader's gRPC address, once: a forwarded call that lands on a
non-leader is refused with UNAVAILABLE rather than bounced around during an election.
Bad input is refused before anything is proposed, so it commits nothing.

Reads. A plain read is linearizable: the leader answers it only after
`RaftNode.read_index` confirmed that it still led after the read arrived (a majority answered a
heartbeat round sent after it: ReadIndex) and applied what was committed then; if that cannot
be confirmed in time (a leader cut off from its peers believes it leads for up to
leader_fallback_ms), the read is refused UNAVAILABLE, retryable, and the client tries another
node. `x-schedd-stale-ok: 1` answers from whatever node was asked, at once, from its own state,
which may be behind. Either way the answer's trailing metadata says which it was
(`x-schedd-read`: `linearizable; index=N`, or `stale; index=N; behind=K; age_ms=M`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import Message

from schedd.api import auth, convert, forecasts, history_reads, quota_reads, shard_routing
from schedd.core.quota_shares import cluster_limit
from schedd.core.shards import ShardMap
from schedd.api.limits import call_overflow
from schedd.api.shard_calls import CALL_TIMEOUT_S, GroupCallError
from schedd.api.membership_view import cluster_membership, node_membership
from schedd.api.templates import SpecTemplates
from schedd.history import HistoryStore
from schedd.api.watch import MAX_ROWS, WORKER_TICK_S, Built, Rows, WatchSlots, follow, reads
from schedd.security.secrets import EnvSealer
from schedd.core import batches as B
from schedd.core.audit import short_history
from schedd.core import calendars
from schedd.core import commands as C
from schedd.core import explain as explaining
from schedd.core import forecast as herd
from schedd.core import ledger
from schedd.core import params as run_params
from schedd.core import queries
from schedd.core.param_rules import PARAMS_FEATURE_LEVEL
from schedd.core.features import FeatureUnavailable, behind_message, refusal
from schedd.core import schedule as sched
from schedd.core.policy import BACKFILL, QUOTA_KINDS, quota_limit
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code
from schedd.core.tables import MIN_MS, Tables
from schedd.core.state import MAX_BACKFILL_PER_ENTRY, UNAUDITED, SchedulerState, schedule_of
from schedd.core.model import EXECUTION_STATES, Job, ValidationError, parse_execution_id
from schedd.core.specs import CALENDAR_FEATURE_LEVEL, WINDOW_FEATURE_LEVEL, DagTask, JobSpec, SealedSecret, handler_level
from schedd.leader.assigner import DispatchLoad, overload_warning, unserved_warnings
from schedd.replication.node import NotApplied, OutcomeUnknown, RaftNode, ReadUnconfirmed
from schedd.versions import build_info
from schedd.ports.clock import Clock
from schedd.ports.metrics import Metrics
from schedd.ports.rpc import CallContext
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

log = logging.getLogger("schedd.api")
T = TypeVar("T")

STALE_OK = "x-schedd-stale-ok"
READ_KIND = "x-schedd-read"            # trailing metadata: what a read served (module doc)
READ_SHARE = 0.8                       # of the caller's time left, at most, to confirm a read
COMMIT_TIMEOUT_S = 10.0
PAST_AT_GRACE_MS = 60_000
LEADER_TRAILER = "x-schedd-leader"          # a forwarded call's answer: the gRPC address of the leader that gave it
SHARD_TRAILER = "x-schedd-shard"            # ... and in a sharded cluster, "K/S": which shard of how many
POSITION = "x-schedd-batch-position"   # trailing metadata: 1-based position of the refused job
PAGE_BYTES = 1024 * 1024               # a list page stops growing past this (gRPC's cap is 4 MiB)
MAX_BACKFILL = 100_000            # instants per backfill request
MAX_RECENT_RUNS = 20                   # ListJobs.recent: outcomes per job

RESULT_STATUS: dict[Code, grpc.StatusCode] = {      # apply's refusals (schedd.core.results.Code)
    Code.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Code.CONFLICT: grpc.StatusCode.FAILED_PRECONDITION,
    Code.STALE_TERM: grpc.StatusCode.UNAVAILABLE,
    Code.BLOCKED: grpc.StatusCode.FAILED_PRECONDITION,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
    Code.EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Code.ABORTED: grpc.StatusCode.UNAVAILABLE,
    Code.FEATURE_LEVEL: grpc.StatusCode.FAILED_PRECONDITION,
    Code.BUILD_BEHIND: grpc.StatusCode.FAILED_PRECONDITION,
}


def _metadata(context: CallContext) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def principal(context: CallContext) -> str:
    """The call's principal as the authenticating interceptor verified it (schedd.api.auth)."""
    info = auth.current()
    return info.name if info is not None else context.peer() or "unknown"


class BatchRefused(Exception):
    """A job of a batch is refused before anything is proposed: its 1-based position and why."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(message)
        self.position = position


# The node's validated shapes, for PutJob on the event loop and batches in worker threads alike:
# a batch split across shard groups, and the check before its write, meet the same shapes again
# in every group's part, so a cache per call rebuilt each shape up to twice per group.
_SHAPES = SpecTemplates(limit=2048)


@functools.lru_cache(maxsize=4)
def _sealer(secret: str) -> EnvSealer | None:
    """The sealer of env_secret values under this cluster secret (None: no secret configured)."""
    return EnvSealer(secret) if secret else None


def _stored_secrets_of(node: RaftNode) -> convert.StoredSecrets:
    """name -> the sealed env_secret the job has now (a write may keep them by their mask)."""
    def stored(name: str) -> Mapping[str, SealedSecret]:
        with node.lock:
            job = node.state.jobs.get(name)
            return job.spec.env_secret if job is not None else {}
    return stored


def spec_levels(specs: Iterable[JobSpec | DagTask]) -> dict[str, Any]:
    """The `fl` to stamp on an entry that carries these specs (jobs, or a DAG's tasks): {} when
    their entry kind's own level is enough, {"fl": 6} when one has a container handler (an older
    build would refuse it as invalid: schedd.core.features Level 6), 7 with default run
    parameters, 8 with calendars or a blackout policy, 9 with a window (an older build would
    ignore them)."""
    level = max((max(handler_level(s.handler), PARAMS_FEATURE_LEVEL if getattr(s, "params", None) else 1,
                     CALENDAR_FEATURE_LEVEL if isinstance(s, JobSpec) and (s.calendar is not None or s.on_blackout)
                     else 1,
                     WINDOW_FEATURE_LEVEL if isinstance(s, JobSpec) and s.window is not None else 1)
                 for s in specs), default=1)
    return {"fl": level} if level > 1 else {}


def _spec_refusal(kind: str, args: Mapping[str, Any], cluster_level: int) -> str | None:
    """Why an entry must not be proposed yet because of what it carries (its `fl`)."""
    needed = args.get("fl", 1)
    return behind_message(kind, needed, cluster_level) if needed > cluster_level else None


async def watch_rows(context: CallContext, page_size: int) -> int:
    """How many rows a watch follows: `page_size`, default 100, at most MAX_ROWS."""
    if not 0 <= page_size <= MAX_ROWS:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"page_size must be between 1 and {MAX_ROWS}")
    return page_size or 100


async def checked_params(context: CallContext, given: Mapping[str, str]) -> dict[str, str]:
    """A request's run parameters, checked before anything is proposed (INVALID_ARGUMENT with
    what is wrong; apply checks them again)."""
    try:
        return run_params.check(dict(given))
    except ValidationError as e:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
    return {}


def _canonical_batch(specs: Sequence[pb.JobSpec], stored_of: convert.StoredSecrets,
                     sealer: EnvSealer | None) -> list[tuple[JobSpec, str]]:
    out = []
    budget = C.BATCH_ENTRY_BYTES - C.BATCH_ENVELOPE_BYTES
    seen: dict[str, int] = {}

    def label(i: int) -> str:             # built only for a refusal
        return f"job {specs[i - 1].name or 'unnamed'!r} (#{i} of {len(specs)})"

    for i, spec in enumerate(specs, 1):
        try:
            done = _SHAPES.canonical(spec)       # jobs differing only by name: validated once
            checked, text = done if done is not None else convert.job_spec_from_pb(spec, stored_of, sealer)
        except ValidationError as e:
            raise BatchRefused(i, f"{label(i)}: {e}") from None
        size = C.encoded_size(text)
        if size > budget:
            raise BatchRefused(i, f"{label(i)}: its spec takes {size} bytes in the log, more than {budget}")
        if checked.name in seen:
            raise BatchRefused(i, f"{label(i)} appears more than once in the batch (first at #{seen[checked.name]})")
        seen[checked.name] = i
        out.append((checked, text))
    return out


def _bounded(items: Iterable[T], to_pb: Callable[[T], Message], budget: int = PAGE_BYTES) -> tuple[list, bool]:
    """The messages of `items`, in order, until they would pass `budget` bytes (always at least
    one); and whether some were left out."""
    out: list = []
    size = 0
    for item in items:
        message = to_pb(item)
        n = message.ByteSize() + 8
        if out and size + n > budget:
            return out, True
        out.append(message)
        size += n
    return out, False


class Router:
    """Forwards a call to the current leader, generically by service and method name (any
    schedd.v1 service whose generated module is loaded: Scheduler, Cluster, Workers, Dags)."""

    def __init__(self, node: RaftNode, signer: auth.NodeSigner | None = None, clock: Clock | None = None,
                 channel_factory: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel) -> None:
        self.node = node
        self.signer = signer or auth.NodeSigner(node.cfg.secret)
        self.clock = clock
        self._channel_factory = channel_factory     # TLS or not: the composition root decides
        self._channels: dict[str, grpc.aio.Channel] = {}
        # In a sharded cluster, the shard group this router's node replicates: a call it
        # forwards names it, so the peer hands it to that group only (schedd.api.shard_routing).
        self.shard: int | None = None
        self.shards = 1

    def node_metadata(self, method: str) -> list[tuple[str, str]]:
        """The signed identity of the current call, for a call this node makes on its behalf."""
        now = self.clock.now_ms() if self.clock is not None else int(time.time() * 1000)
        meta = self.signer.metadata(self.node.cfg.node_id, auth.current(), method, now)
        if self.shard is not None:
            meta.append(("x-schedd-shard", str(self.shard)))
        return meta

    def _channel(self, addr: str) -> grpc.aio.Channel:
        ch = self._channels.get(addr)
        if ch is None:
            ch = self._channels[addr] = self._channel_factory(addr)
        return ch

    async def forward(self, service: str, method: str, request, context: CallContext, *,
                      first_hop: bool = False, cap_s: float = 30.0):
        """`first_hop`: the signed caller is a node asking for itself (Membership.JoinCluster),
        not a node forwarding someone's call, so this is the call's first forward. `cap_s`:
        the longest the leader is given (within the caller's own deadline)."""
        info = auth.current()
        if info is not None and info.forwarded_by and not first_hop:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "this node is no longer the leader (an election is under way); retry")
        addr = self.node.leader_grpc_address()
        if not addr or addr == self.node.cfg.grpc_address:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no leader is elected yet; retry shortly")
        out_type = descriptor_pool.Default().FindServiceByName(f"schedd.v1.{service}") \
            .FindMethodByName(method).output_type
        call = self._channel(addr).unary_unary(
            f"/schedd.v1.{service}/{method}", request_serializer=type(request).SerializeToString,
            response_deserializer=message_factory.GetMessageClass(out_type).FromString)
        remaining = context.time_remaining()
        timeout = min(remaining, cap_s) if remaining is not None else cap_s
        meta = self.node_metadata(f"/schedd.v1.{service}/{method}")
        try:
            pending = call(request, timeout=timeout, metadata=meta)
            response = await pending
            passed = tuple((k, v) for k, v in await pending.trailing_metadata() or ()
                           if k == READ_KIND and isinstance(v, str))
            # What the leader's read served, and who the leader is: a client that routes by
            # shard (schedd_client._routing) goes there directly next time.
            where = ((SHARD_TRAILER, f"{self.shard}/{self.shards}"),) if self.shard is not None else ()
            context.set_trailing_metadata((*passed, (LEADER_TRAILER, addr), *where))
            return response
        except grpc.aio.AioRpcError as e:
            # The leader's own answer passes through unchanged; the status says whether retrying
            # is safe (UNAVAILABLE) and the message says why.
            await context.abort(e.code(), e.details() or f"leader {addr}: {e.code().name}",
                                trailing_metadata=tuple((k, v) for k, v in e.trailing_metadata() or ()
                                                        if k.startswith("x-schedd-")))

    async def forward_stream(self, method: str, request: Message, response: type[Message],
                             context: CallContext) -> AsyncIterator[Any]:
        """A server-streaming call relayed from the leader, chunk by chunk (once, as `forward`:
        a call already forwarded to a node that no longer leads is refused UNAVAILABLE)."""
        info = auth.current()
        if info is not None and info.forwarded_by:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "this node is no longer the leader (an election is under way); retry")
        addr = self.node.leader_grpc_address()
        if not addr or addr == self.node.cfg.grpc_address:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no leader is elected yet; retry shortly")
        call = self._channel(addr).unary_stream(
            method, request_serializer=type(request).SerializeToString, response_deserializer=response.FromString)
        stream = call(request, timeout=context.time_remaining(), metadata=self.node_metadata(method))
        try:
            async for chunk in stream:
                yield chunk
        except grpc.aio.AioRpcError as e:
            await context.abort(e.code(), e.details() or f"leader {addr}: {e.code().name}")

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()

    async def replace_channels(self, channel_factory: Callable[[str], grpc.aio.Channel],
                               grace: float = 5.0) -> int:
        """Dial peers with `channel_factory` from now on (new TLS files after a SIGHUP: channel
        credentials are fixed per channel). Calls in flight on the old channels get `grace`.
        Returns how many channels were closed."""
        old, self._channels, self._channel_factory = self._channels, {}, channel_factory
        await asyncio.gather(*(ch.close(grace) for ch in old.values()), return_exceptions=True)
        return len(old)


def _confirm_timeout(node: RaftNode, context: CallContext) -> float:
    """How long a read may wait for its leadership confirmation: an election timeout at most
    (past it, a leader that heard no majority has likely been replaced: the client had better
    ask another node), and a share of the caller's time left, so the refusal reaches it."""
    bound = node.cfg.raft.election_timeout_ms[1] / 1000
    left = context.time_remaining()
    return bound if left is None else max(0.0, min(bound, left * READ_SHARE))


async def confirm_read(node: RaftNode, context: CallContext) -> None:
    """A linearizable read may be served here now (it says so in its trailing metadata), or the
    call ends UNAVAILABLE: this leader could not confirm its leadership (retry elsewhere)."""
    try:
        index = await node.read_index(timeout=_confirm_timeout(node, context))
    except ReadUnconfirmed as e:
        await context.abort(grpc.StatusCode.UNAVAILABLE,
                            f"leadership could not be confirmed ({e}): this node may have been "
                            "replaced as leader; retry (another node)")
    context.set_trailing_metadata(((READ_KIND, f"linearizable; index={index}"),))


def mark_stale(node: RaftNode, context: CallContext) -> None:
    """A stale read says how far behind it may be: the applied index, the committed entries this
    node knows of and has not applied, and how long since it last had proof it was current."""
    r = node.read_age()
    age = "unknown" if r.age_s is None else str(int(r.age_s * 1000))
    context.set_trailing_metadata(((READ_KIND, f"stale; index={r.index}; behind={r.behind}; age_ms={age}"),))


def routed(*, write: bool):
    """Writes: run here if this node leads, else forward. Reads: stale ones here; linearizable
    ones here once this leader confirmed it leads (`confirm_read`), else forward (module doc)."""
    def deco(fn):
        @functools.wraps(fn)
        async def wrapper(self, request, context):
            started = time.perf_counter()
            code = "OK"
            try:
                if not write and _metadata(context).get(STALE_OK) == "1":
                    mark_stale(self.node, context)
                    return await fn(self, request, context)
                if self.node.is_leader():
                    if not write:
                        await confirm_read(self.node, context)
                    return await fn(self, request, context)
                return await self.router.forward(self.SERVICE, fn.__name__, request, context)
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception:
                code = context.code().name if context.code() else "UNKNOWN"
                raise
            finally:
                self.metrics.requests.labels(fn.__name__, code).inc()
                log.debug("%s %s in %.1f ms", fn.__name__, code, (time.perf_counter() - started) * 1000)
        return wrapper
    return deco


class CommittingService:
    """What every servicer that writes shares: propose an entry for the caller, and answer a
    failed proposal or apply's refusal with its gRPC status. A subclass sets node, clock and
    metrics (SchedulerService, DagsService)."""

    node: RaftNode
    clock: Clock
    metrics: Metrics

    async def _propose(self, context: CallContext, kind: str, rid: str, **args: Any) -> ApplyResult:
        """One entry proposed and applied: apply's result. A client's request id is put in the
        client namespace (`commands.client_rid`: no id a client sends can stand for a leader's
        entry); "" stays "" (no dedup). Raises ValueError (request id too long), C.EntryTooLarge,
        NotApplied or OutcomeUnknown (see schedd.replication.node for what each says), or
        FeatureUnavailable (a kind above the cluster's feature level: nothing is proposed)."""
        state = self.node.state
        why = refusal(state.features, state.feature_level, kind) or _spec_refusal(kind, args, state.feature_level)
        if why is not None:
            raise FeatureUnavailable(why)
        info = auth.current()
        if info is not None and "audit" not in args and kind not in UNAUDITED:
            args["audit"] = info.audit()          # recorded by apply with the entry's outcome
        entry = C.encode(kind, rid=C.client_rid(rid) if rid else "", now=self.clock.now_ms(),
                         term=self.node.term, by=principal(context), **args)
        started = time.perf_counter()
        try:
            result = await self.node.propose(entry, timeout=COMMIT_TIMEOUT_S, groupable=kind in C.GROUPABLE)
        except NotApplied:
            self.metrics.proposals.labels(kind, "not_applied").inc()
            raise
        except OutcomeUnknown:
            self.metrics.proposals.labels(kind, "unknown").inc()
            raise
        self.metrics.commit_latency.labels(kind).observe(time.perf_counter() - started)
        self.metrics.proposals.labels(kind, result.code.value).inc()
        return result

    async def _commit(self, context: CallContext, kind: str, rid: str, *, refuse: bool = True,
                      **args: Any) -> ApplyResult:
        """Propose and wait for the result; a refusal is answered (the call aborts) unless
        `refuse` is False, when the caller looks at it."""
        try:
            result = await self._propose(context, kind, rid or uuid.uuid4().hex, **args)
        except C.EntryTooLarge as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request too large: {e}")
        except FeatureUnavailable as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except NotApplied as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"not committed ({e}); safe to retry")
        except OutcomeUnknown as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{e}; retry with the same request_id")
        if refuse and not result.ok:
            await self._refuse(context, result)
        return result

    async def _known_or_abort(self, context: CallContext, known: Callable[[Any], bool], missing: str) -> None:
        """NOT_FOUND before anything is proposed when the object a write names does not exist
        (on the leader, whose state decides): such a write used to commit, be refused by apply
        and leave an audit record each, so one token could roll the audit trail over."""
        with self.node.lock:
            present = known(self.node.state)
        if not present:
            await context.abort(grpc.StatusCode.NOT_FOUND, missing)

    @staticmethod
    async def _refuse(context: CallContext, result: ApplyResult) -> NoReturn:
        """Answer apply's refusal: its status, its message, and the refused job's position."""
        position = result.payload.position if isinstance(result.payload, R.Refused) else None
        await context.abort(RESULT_STATUS.get(result.code, grpc.StatusCode.INTERNAL), result.msg or "rejected",
                            trailing_metadata=((POSITION, str(position)),) if position else ())


class SchedulerService(CommittingService, pb_grpc.SchedulerServicer):
    SERVICE = "Scheduler"

    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, router: Router,
                 dispatcher=None, watchers: WatchSlots | None = None) -> None:
        self.node, self.clock, self.metrics, self.router = node, clock, metrics, router
        self.dispatcher = dispatcher
        self.watchers = watchers if watchers is not None else WatchSlots()   # shared per node (daemon)
        self.load = forecasts.LoadCache()       # the forecast put warnings read
        # sharded, group 0's: the groups' replicas this node hosts, by shard (the forecast)
        self.groups: Callable[[], dict[int, RaftNode]] | None = None
        self.calls: Any = None             # ... and a group held elsewhere (schedd.api.shard_calls.GroupCalls)

    def _exec_pb(self, ex) -> pb.Execution:
        """The replicated record, plus the leader's own note on why a SCHEDULED one still waits."""
        out = convert.execution_to_pb(ex)
        assigner = getattr(self.dispatcher, "assigner", None)
        if assigner is not None and ex.state == "SCHEDULED" and not out.reason:
            out.reason = assigner.waiting_reason(ex.job, ex.scheduled_ms)
        return out

    # ------------------------------------------------------------ helpers

    async def _valid_spec(self, context: CallContext, spec: pb.JobSpec) -> tuple[JobSpec, str]:
        """Validate before proposing: bad input is refused and nothing is committed."""
        try:
            done = _SHAPES.canonical(spec)
            checked, text = done if done is not None else convert.job_spec_from_pb(
                spec, _stored_secrets_of(self.node), _sealer(self.node.cfg.secret))
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        await self._refuse_past_at(context, checked)
        return checked, text

    async def _refuse_past_at(self, context: CallContext, spec: JobSpec, *, position: int = 0) -> None:
        """A new one-off whose time is long past is almost surely a mistake: refuse it (in a
        batch, as BatchRefused at its position)."""
        if not spec.schedule.startswith("at "):
            return
        at = sched.next_after(sched.parse(spec.schedule, spec.timezone, hash_key=spec.name), -(2 ** 62))
        with self.node.lock:
            exists = spec.name in self.node.state.jobs
        if not exists and at is not None and at < self.clock.now_ms() - PAST_AT_GRACE_MS:
            if position:
                raise BatchRefused(position, f"job {spec.name!r} (#{position}): schedule {spec.schedule!r} "
                                             "is in the past")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"schedule {spec.schedule!r} is in the past")

    def _job_pb(self, name: str, upcoming: int = 0) -> pb.Job | None:
        with self.node.lock:
            job = self.node.state.jobs.get(name)
            return None if job is None else convert.job_to_pb(job, self.node.state, upcoming=upcoming)

    async def _job_or_abort(self, context: CallContext, name: str, upcoming: int = 0) -> pb.Job:
        job = self._job_pb(name, upcoming)
        if job is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {name!r} not found")
        return job

    # ------------------------------------------------------------ jobs

    @routed(write=True)
    async def PutJob(self, request: pb.PutJobRequest, context: CallContext) -> pb.PutJobResponse:
        spec, text = await self._valid_spec(context, request.job)
        cap = self.node.cfg.limits.max_jobs_per_team
        with self.node.lock:
            over = B.team_overflow(self.node.state, [(spec.name, spec.team)], cap)
            missing = calendars.unknown_refs(self.node.state, [(spec.name, spec)])
        if over:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, over)
        if missing:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, missing + "; nothing was committed")
        result = await self._commit(context, C.PUT, request.request_id, spec=text,
                                    name=spec.name, create_only=request.create_only,
                                    expected_version=request.expected_version, team_cap=cap,
                                    **spec_levels([spec]))
        stored = result.of(R.Stored)
        return pb.PutJobResponse(job=await self._job_or_abort(context, spec.name),
                                 created=stored.created, version=stored.version,
                                 warnings=await self._crowding([spec]))

    @routed(write=True)
    async def PutJobs(self, request: pb.PutJobsRequest, context: CallContext) -> pb.PutJobsResponse:
        """All or nothing (schedd.core.batches): the whole batch is checked here first, then
        proposed as one entry or as staged chunks and one commit entry."""
        limits = self.node.cfg.limits
        over = call_overflow(limits, len(request.jobs), request.ByteSize())
        if over:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, over)
        # Validation of a big batch is CPU work: off the event loop, so the dispatcher and
        # other calls keep their timing while it runs.
        try:
            checked = await asyncio.to_thread(_canonical_batch, request.jobs,
                                              _stored_secrets_of(self.node),
                                              _sealer(self.node.cfg.secret))
            for i, (spec, _) in enumerate(checked, 1):
                await self._refuse_past_at(context, spec, position=i)
        except BatchRefused as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e),
                                trailing_metadata=((POSITION, str(e.position)),))
        with self.node.lock:
            st = self.node.state
            over = B.team_overflow(st, [(spec.name, spec.team) for spec, _ in checked], limits.max_jobs_per_team)
            missing = calendars.unknown_refs(st, [(spec.name, spec) for spec, _ in checked])
        if missing:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, missing + "; nothing was committed")
        with self.node.lock:
            st = self.node.state
            exists = next((i for i, (spec, _) in enumerate(checked, 1) if spec.name in st.jobs), 0) \
                if request.create_only else 0
        if exists:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                f"job {checked[exists - 1][0].name!r} (#{exists} of {len(checked)}) "
                                "already exists", trailing_metadata=((POSITION, str(exists)),))
        if over:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, over)
        rid = request.request_id or uuid.uuid4().hex
        try:
            C.client_rid(rid)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        result = await self._put_batch(context, rid, [text for _, text in checked], create_only=request.create_only,
                                       team_cap=limits.max_jobs_per_team, **spec_levels(spec for spec, _ in checked))
        return pb.PutJobsResponse(created=result.created, updated=result.updated,
                                  warnings=await self._crowding(spec for spec, _ in checked))

    @routed(write=False)
    async def DiffJobs(self, request: pb.DiffJobsRequest, context: CallContext) -> pb.DiffJobsResponse:
        """What PutJobs of these specs would change, committing nothing: the same checks and caps,
        then each job's committed text compared with the text the write would commit (a secret
        sent again unchanged, or as its mask, keeps its ciphertext, so it compares equal).
        `actions_only` leaves out the specs: converting them back is most of a big answer's
        cost, and a check before a write reads only the actions."""
        over = call_overflow(self.node.cfg.limits, len(request.jobs), request.ByteSize())
        if over:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, over)
        try:
            checked = await asyncio.to_thread(_canonical_batch, request.jobs, _stored_secrets_of(self.node),
                                              _sealer(self.node.cfg.secret))
            for i, (spec, _) in enumerate(checked, 1):       # what PutJobs would refuse, refused here too
                await self._refuse_past_at(context, spec, position=i)
        except BatchRefused as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e),
                                trailing_metadata=((POSITION, str(e.position)),))
        cap = self.node.cfg.limits.max_jobs_per_team
        with self.node.lock:
            over = B.team_overflow(self.node.state, [(spec.name, spec.team) for spec, _ in checked], cap)
            rows = [(self.node.state.jobs.get(spec.name), spec, text) for spec, text in checked]
            stored = [(row.version, row.spec, row.spec_text) if row is not None else None for row, _, _ in rows]
        if over:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, over)
        changes = []
        for (_, spec, text), now in zip(rows, stored):
            if now is not None and now[2] == text:      # the common case of a re-apply: names only
                changes.append(pb.JobChange(name=spec.name, action="unchanged", version=now[0]))
                continue
            if request.actions_only:                    # a check before a write: no specs back
                changes.append(pb.JobChange(name=spec.name, action="create" if now is None else "update",
                                            version=now[0] if now is not None else 0))
                continue
            change = pb.JobChange(name=spec.name, proposed=convert.job_spec_to_pb(spec))
            if now is None:
                change.action = "create"
            else:
                change.action, change.version = "update", now[0]
                change.current.CopyFrom(convert.job_spec_to_pb(now[1]))
            changes.append(change)
        return pb.DiffJobsResponse(changes=changes)

    async def _put_batch(self, context: CallContext, rid: str, texts: list[str],
                         **common: Any) -> R.PutMany:
        """Propose a checked batch and answer only what the log decided. Once this answers
        "failed", the batch can never commit: its commit entry was refused, or the abort
        proposed after it was applied first (an abort that finds the commit applied turns the
        answer into the commit's).

        The commit entry is proposed with the stages, behind them in the log, not after their
        answers: one commit round per call instead of two. Apply makes it all or nothing: a
        commit that finds a chunk missing (a stage refused or lost) aborts the batch, so a
        commit that succeeds proves every stage applied."""
        batch = uuid.uuid4().hex
        chunks = C.chunk_by_bytes(texts)
        committing = False
        try:
            if len(chunks) == 1:
                committing = True
                result = await self._propose(context, C.PUT_MANY, rid, batch=batch, specs=texts, **common)
            else:
                firsts = list(itertools.accumulate((len(c) for c in chunks), initial=1))
                level = common.pop("fl", None)      # a stage carries the specs; the commit none
                stage_level = {"fl": level} if level else {}
                *staged, outcome = await asyncio.gather(*(
                    self._propose(context, C.BATCH_STAGE, "", batch=batch, seq=i, first=firsts[i], specs=chunk,
                                  **stage_level)
                    for i, chunk in enumerate(chunks)), self._propose(
                    context, C.BATCH_COMMIT, rid, batch=batch, chunks=len(chunks), jobs=len(texts), **common),
                    return_exceptions=True)
                result = self._batch_outcome(staged, outcome)
                committing = result is outcome
                if isinstance(result, BaseException):
                    raise result
        except (NotApplied, OutcomeUnknown, C.EntryTooLarge) as e:
            counts = await self._abort_batch(context, batch, e, committing)
            assert counts is not None             # with an error it answers or aborts the call
            return counts
        if not result.ok:
            await self._abort_batch(context, batch, None, committing)
            await self._refuse(context, result)
        if result.deduplicated and len(chunks) > 1:
            # an earlier call with this request id committed: this call's staged copy goes
            await self._abort_quietly(context, batch, "duplicate request")
        return result.of(R.PutMany)

    @staticmethod
    def _batch_outcome(staged: list[Any], outcome: Any) -> Any:
        """What a staged batch's call answers: the commit's result when it applied, or its
        error; when apply refused it, the first failed stage says why, if one did."""
        if isinstance(outcome, BaseException) or outcome.ok:
            return outcome
        failed = next((r for r in staged if isinstance(r, BaseException) or not r.ok), None)
        return outcome if failed is None else failed

    async def _abort_batch(self, context: CallContext, batch: str, error: Exception | None,
                           committing: bool) -> R.PutMany | None:
        """Abort `batch` after a failure. Returns the commit's counts if the log had already
        committed it; else answers the failure `error` (aborts the call), or returns None when
        there is none (apply refused the batch: the caller answers that)."""
        reason = str(error) if error is not None else "refused"
        outcome = R.BatchAborted(True)
        try:
            answer = await self._propose(context, C.BATCH_ABORT, "", batch=batch, reason=reason)
            if answer.ok:
                outcome = answer.of(R.BatchAborted)
        except (NotApplied, OutcomeUnknown) as e:
            log.warning("batch %s: abort not confirmed (%s); the leader discards it after %ds", batch, e,
                        B.BATCH_TTL_MS // 1000)
            if committing:
                await context.abort(grpc.StatusCode.UNAVAILABLE,
                                    f"{error}; outcome unknown, retry with the same request_id")
        if outcome.committed:
            return R.PutMany(outcome.created or 0, outcome.updated or 0)
        if isinstance(error, C.EntryTooLarge):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request too large: {error}")
        if error is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"not committed ({error}); nothing of the batch was committed, safe to retry")
        return None

    async def _abort_quietly(self, context: CallContext, batch: str, reason: str) -> None:
        try:
            await self._propose(context, C.BATCH_ABORT, "", batch=batch, reason=reason)
        except Exception as e:  # noqa: BLE001 - cleanup only; the leader's timeout covers it
            log.info("batch %s: abort not confirmed (%s)", batch, e)

    @routed(write=False)
    async def GetJob(self, request: pb.GetJobRequest, context: CallContext) -> pb.Job:
        upcoming = request.upcoming or 5
        if not 0 < upcoming <= 100:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "upcoming must be between 1 and 100")
        return await self._job_or_abort(context, request.name, upcoming)

    @routed(write=False)
    async def ListJobs(self, request: pb.ListJobsRequest, context: CallContext) -> pb.ListJobsResponse:
        size = request.page_size or 100
        if not 0 < size <= 1000:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size must be between 1 and 1000")
        if request.state not in ("", "active", "paused"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "state must be active or paused")
        if not 0 <= request.recent <= MAX_RECENT_RUNS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"recent must be between 0 and {MAX_RECENT_RUNS}")
        with self.node.lock:
            jobs, nxt, total = queries.list_jobs(self.node.state, team=request.team, state=request.state,
                                                 after=request.page_token, limit=size, visible=auth.read_filter(),
                                                 contains=request.name_contains, pool=request.pool)
        recent: dict[str, list[tuple[int, str]]] = {}
        if request.recent:          # the store reads the disk: off the loop, then the page as listed
            recent = await asyncio.to_thread(history_reads.recent_runs, self.node.state, self.node.lock,
                                             self._history(), [j.name for j in jobs], request.recent)
        with self.node.lock:
            st = self.node.state
            page, cut = _bounded(jobs, lambda j: convert.job_to_pb(j, st, summary=not request.full,
                                                                   recent=recent.get(j.name, ())))
            return pb.ListJobsResponse(jobs=page, next_page_token=page[-1].spec.name if cut else nxt,
                                       total=total)

    async def _job_known(self, context: CallContext, name: str) -> None:
        await self._known_or_abort(context, lambda st: name in st.jobs, f"job {name!r} not found")

    @routed(write=True)
    async def PauseJob(self, request: pb.JobRef, context: CallContext) -> pb.Job:
        await self._job_known(context, request.name)
        await self._commit(context, C.PAUSE, request.request_id, name=request.name)
        self.load.forget()
        return await self._job_or_abort(context, request.name)

    @routed(write=True)
    async def ResumeJob(self, request: pb.JobRef, context: CallContext) -> pb.Job:
        await self._job_known(context, request.name)
        await self._commit(context, C.RESUME, request.request_id, name=request.name,
                           catch_up=request.catch_up)
        self.load.forget()
        return await self._job_or_abort(context, request.name)

    @routed(write=True)
    async def DeleteJob(self, request: pb.JobRef, context: CallContext) -> pb.DeleteJobResponse:
        await self._job_known(context, request.name)
        await self._commit(context, C.DELETE, request.request_id, name=request.name)
        self.load.forget()
        return pb.DeleteJobResponse(name=request.name)

    @routed(write=True)
    async def TriggerJob(self, request: pb.TriggerJobRequest, context: CallContext) -> pb.Execution:
        await self._job_known(context, request.name)
        given = await checked_params(context, request.params)
        result = await self._commit(context, C.TRIGGER, request.request_id, name=request.name,
                                    force=request.force, **run_params.entry_args(given))
        with self.node.lock:
            fired = result.of(R.Triggered)
            ex = self.node.state.execs.get((fired.name, fired.scheduled_ms))
            if ex is not None:
                return convert.execution_to_pb(ex)
        await context.abort(grpc.StatusCode.NOT_FOUND, "the execution was recorded but is already pruned")

    # ------------------------------------------------------------ executions

    @routed(write=False)
    async def ListExecutions(self, request: pb.ListExecutionsRequest, context: CallContext) -> pb.ListExecutionsResponse:
        size = request.page_size or 100
        if not 0 < size <= 1000:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size must be between 1 and 1000")
        if request.state and request.state not in EXECUTION_STATES:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"state must be one of {', '.join(EXECUTION_STATES)}")
        try:
            after = convert.parse_exec_token(request.page_token)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        with self.node.lock:
            known = not request.job or request.job in self.node.state.jobs
        if not known:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job!r} not found")
        listing = await asyncio.to_thread(
            history_reads.list_executions, self.node.state, self.node.lock, self._history(), job=request.job,
            state_filter=request.state, after=after, limit=size, oldest_first=request.oldest_first,
            visible=auth.read_filter())
        out, cut = _bounded(listing.executions, self._exec_pb)
        nxt = (out[-1].scheduled_ms, out[-1].job) if cut else listing.next_after
        return pb.ListExecutionsResponse(executions=out, next_page_token=convert.exec_token(nxt),
                                         total=listing.total, note=listing.note)

    @routed(write=False)
    async def GetExecution(self, request: pb.GetExecutionRequest, context: CallContext) -> pb.Execution:
        try:
            key = parse_execution_id(request.id)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        ex = await asyncio.to_thread(history_reads.get_execution, self.node.state, self.node.lock,
                                     self._history(), key)
        if ex is not None:
            return self._exec_pb(ex)
        note = history_reads.gap_note(h) if (h := self._history()) is not None else ""
        await context.abort(grpc.StatusCode.NOT_FOUND, f"execution {request.id!r} not found" + (f" ({note})" if note else ""))

    def _history(self) -> HistoryStore | None:
        h = self.node.history
        return h if isinstance(h, HistoryStore) else None

    @routed(write=True)
    async def CancelExecution(self, request: pb.CancelExecutionRequest, context: CallContext) -> pb.Execution:
        try:
            name, t = parse_execution_id(request.id)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        await self._known_or_abort(context, lambda st: (name, t) in st.execs, f"execution {request.id!r} not found")
        await self._commit(context, C.CANCEL, request.request_id, job=name, scheduled_ms=t)
        # the leader pushes the cancel to the worker from the entry's effect (Dispatcher.on_applied)
        with self.node.lock:
            return self._exec_pb(self.node.state.execs[(name, t)])

    @routed(write=True)
    async def RetryExecution(self, request: pb.RetryExecutionRequest, context: CallContext) -> pb.Execution:
        """A new attempt of a finished run (schedd.core.attempts.retry decides; its refusals,
        a run held in history only among them, come back as they are)."""
        try:
            name, t = parse_execution_id(request.id)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        await self._commit(context, C.RUN_RETRY, request.request_id, job=name, scheduled_ms=t)
        with self.node.lock:
            ex = self.node.state.execs.get((name, t))
            if ex is not None:
                return self._exec_pb(ex)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"execution {request.id!r} was retried but is already pruned")

    # ------------------------------------------------------------ watches (schedd.api.watch)

    async def WatchJobs(self, request: pb.ListJobsRequest, context: CallContext) -> AsyncIterator[pb.WatchEvent]:
        """A listing's jobs (one page of ListJobs: its filters, `page_token` and `page_size`),
        then their changes; `recent` (the dashboard's Jobs page): each job
        also with its last `recent` runs *this node holds in memory*, the ones whose state may
        still change (ListJobs' `recent` reads the history too: a finished run there no longer
        changes, so a watch need not read the disk to follow the outcomes)."""
        if request.state not in ("", "active", "paused"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "state must be active or paused")
        if not 0 <= request.recent <= MAX_RECENT_RUNS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"recent must be between 0 and {MAX_RECENT_RUNS}")
        limit, visible = await watch_rows(context, request.page_size), auth.read_filter()

        built = Built()

        def runs(st: Tables, name: str) -> tuple[tuple[int, str], ...]:
            return tuple((ex.scheduled_ms, ex.state) for ex in queries.recent_runs(st, name, request.recent))

        def summary(st: SchedulerState, j: Job) -> Message:
            recent = runs(st, j.name) if request.recent else ()
            return built.row(j.name, convert.job_pb_inputs(j, st, recent),
                             lambda: convert.job_to_pb(j, st, summary=not request.full, recent=recent))

        async def read() -> Rows:
            with self.node.lock:
                st = self.node.state
                jobs, _, _ = queries.list_jobs(st, team=request.team, state=request.state, limit=limit,
                                               visible=visible, contains=request.name_contains,
                                               after=request.page_token, pool=request.pool)
                rows = {j.name: summary(st, j) for j in jobs}
            built.keep(rows)
            return rows

        async for event in self._watch_events(context, read, "job", request.batch):
            yield event

    async def WatchExecutions(self, request: pb.ListExecutionsRequest,
                              context: CallContext) -> AsyncIterator[pb.WatchEvent]:
        if request.state and request.state not in EXECUTION_STATES:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"state must be one of {', '.join(EXECUTION_STATES)}")
        await self._known_or_abort(context, lambda st: not request.job or request.job in st.jobs,
                                   f"job {request.job!r} not found")
        limit, visible = await watch_rows(context, request.page_size), auth.read_filter()

        async def read() -> Rows:          # the tables and the history store, as run list reads them
            listing = await asyncio.to_thread(
                history_reads.list_executions, self.node.state, self.node.lock, self._history(), job=request.job,
                state_filter=request.state, after=None, limit=limit, oldest_first=False, visible=visible)
            return {ex.id: convert.execution_to_pb(ex) for ex in listing.executions}

        async for event in self._watch_events(context, read, "execution", request.batch):
            yield event

    async def _watch_events(self, context: CallContext, read: Callable[[], Awaitable[Rows]], field: str,
                            batch: bool) -> AsyncIterator[pb.WatchEvent]:
        """A watch's events as messages: one each, or with `batch` the events of one read as the
        `events` of one message (schedd.api.watch.reads)."""
        def message(kind: str, key: str, row: Message | None) -> pb.WatchEvent:
            return pb.WatchEvent(type=kind, key=key, **({field: row} if row is not None else {}))

        if not batch:
            async for kind, key, row in follow(context, self.watchers, read, self._applied_index):
                yield message(kind, key, row)
            return
        async with contextlib.aclosing(reads(context, self.watchers, read, self._applied_index)) as batches:
            async for events in batches:
                yield pb.WatchEvent(type="batch", events=[message(*e) for e in events])

    async def WatchWorkers(self, request: pb.ListWorkersRequest, context: CallContext) -> AsyncIterator[pb.WatchEvent]:
        hub = getattr(self.dispatcher, "hub", None)
        if hub is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node has no worker registry")
        reads = itertools.count()

        async def read() -> Rows:
            rows: Rows = {}
            for w in (await hub.ListWorkers(pb.ListWorkersRequest(), context)).workers:
                w.last_heartbeat_ms = 0          # a heartbeat is not a change worth a line
                rows[w.name] = w
            return rows

        async for kind, key, row in follow(context, self.watchers, read, lambda: next(reads), WORKER_TICK_S):
            yield pb.WatchEvent(type=kind, key=key, **({"worker": row} if row is not None else {}))

    def _applied_index(self) -> int:
        return self.node.state.last_index

    # ------------------------------------------------------------ backfill, ledger, quotas

    @routed(write=True)
    async def BackfillJob(self, request: pb.BackfillRequest, context: CallContext) -> pb.BackfillResponse:
        """Instants are listed here, on the leader, and committed in entries of at most
        MAX_BACKFILL_PER_ENTRY; apply checks each one is an instant of the schedule."""
        if not request.from_ms or not request.to_ms or request.from_ms > request.to_ms:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "give from and to times, from <= to")
        now = self.clock.now_ms()
        if request.to_ms > now:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"backfill covers the past only: to {sched.format_ms(request.to_ms)} is in "
                                "the future")
        with self.node.lock:
            job = self.node.state.jobs.get(request.name)
            s = None if job is None else schedule_of(job)
        if s is None:                    # no such job
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.name!r} not found")
        if s.kind in ("none", "at"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"job {request.name!r} has no recurring schedule to backfill")
        times: list[int] = []
        x = sched.next_after(s, request.from_ms - 1)
        while x is not None and x <= request.to_ms:
            if len(times) == MAX_BACKFILL:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"the range holds more than {MAX_BACKFILL} instants; backfill it in parts")
            times.append(x)
            x = sched.next_after(s, x)
        out = pb.BackfillResponse(instants=len(times), first_ms=times[0] if times else 0,
                                  last_ms=times[-1] if times else 0)
        if request.dry_run or not times:
            return out
        rid = request.request_id or uuid.uuid4().hex
        step = MAX_BACKFILL_PER_ENTRY
        results = await asyncio.gather(*(
            self._backfill_part(context, f"{rid}-{i}", request.name, times[i:i + step])
            for i in range(0, len(times), step)))
        out.created = sum(r.of(R.Backfilled).created for r in results)
        out.duplicates = sum(r.of(R.Backfilled).duplicates for r in results)
        return out

    async def _backfill_part(self, context: CallContext, rid: str, name: str, times: list[int]) -> ApplyResult:
        """One backfill entry. Instants at or before the job's history floor may have records only
        in the history store, which apply cannot read: this leader looks them up in its own store
        (caught up to the state it read the floor in) and says so in the entry (schedd.core.history).
        A run that left memory meanwhile makes apply refuse the check: look again (a few times)."""
        for attempt in range(5):
            with self.node.lock:
                floor, _ = self.node.state.archived.get(name, (MIN_MS, 0))
                index = self.node.state.last_index
            older = [x for x in times if x <= floor]
            store = self._history()
            args: dict[str, Any] = {}
            part = times
            if older and store is not None:
                history_reads.caught_up(store, index)
                present = set(await asyncio.to_thread(store.present, name, older))
                args = {"checked": store.applied_index, "stored": len(present)}
                part = [x for x in times if x not in present]
            key = rid if attempt == 0 else f"{rid}.{attempt}"
            result = await self._commit(context, C.BACKFILL, key, refuse=False, name=name, times=part, **args)
            if result.code is not Code.CONFLICT:
                break
        if not result.ok:
            await self._refuse(context, result)
        return result

    @routed(write=False)
    async def ListInstants(self, request: pb.ListInstantsRequest, context: CallContext) -> pb.ListInstantsResponse:
        now = self.clock.now_ms()
        until = request.to_ms or now
        since = request.from_ms or until - 86_400_000
        limit = request.limit or 1000
        if since > until or not 0 < limit <= ledger.MAX_INSTANTS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"need from <= to and 1 <= limit <= {ledger.MAX_INSTANTS}")
        if request.page_token:
            try:
                since = max(since, int(request.page_token))
            except ValueError:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad page_token {request.page_token!r}")
        response = None                  # None: no such job (answered once the lock is released)
        on_disk = await asyncio.to_thread(history_reads.window, self.node.state, self.node.lock, self._history(),
                                          request.job, since, until, limit)
        with self.node.lock:
            st = self.node.state
            job = st.jobs.get(request.job)
            if job is not None:
                rows = ledger.instants(st, job, since, until, limit, on_disk)
                out, cut = _bounded(rows, lambda r: pb.InstantRecord(
                    instant_ms=r.instant_ms, disposition=r.disposition, detail=r.detail,
                    execution=self._exec_pb(r.execution) if r.execution is not None else None))
                response = pb.ListInstantsResponse(
                    instants=out, next_page_token=str(rows[len(out)].instant_ms) if cut else "")
        if response is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job!r} not found")
        return response

    @routed(write=True)
    async def SetQuota(self, request: pb.SetQuotaRequest, context: CallContext) -> pb.Quota:
        kind, _, name = request.key.partition(":")
        if kind not in QUOTA_KINDS or not name or (kind == "lane" and name != BACKFILL):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"bad quota key {request.key!r}: use team:<name>, pool:<name> or lane:backfill")
        if request.limit < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit must be >= 0 (0 removes the quota)")
        if request.share:
            info = auth.current()
            if not shard_routing.FRONT.get() and not (info is not None and info.forwarded_by):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    "share: a shard group's share of a quota is set by the cluster, not by callers")
            await self._commit(context, C.QUOTA_SHARE, request.request_id, key=request.key,
                               share=None if request.unset else request.limit, version=0)
        else:
            await self._commit(context, C.QUOTA, request.request_id, key=request.key, limit=request.limit)
        with self.node.lock:
            st = self.node.state
            return pb.Quota(key=request.key, limit=cluster_limit(st.quotas, request.key) or 0,
                            running=st.held.get(request.key, 0))

    @routed(write=False)
    async def ListQuotas(self, request: pb.ListQuotasRequest, context: CallContext) -> pb.ListQuotasResponse:
        with self.node.lock:
            st = self.node.state
            # the quotas set, and the backfill lane's (it has a default): a team or pool that runs
            # attempts without a quota has no row (it was shown with no limit, as if it had one)
            keys = sorted({*st.quotas, *st.shares, f"lane:{BACKFILL}"})
            teams, cluster = auth.read_filter(), auth.may("quota", "cluster")
            if teams is not None:       # team rows by read on the team; pool/lane rows by quota
                keys = [k for k in keys if (k.partition(":")[2] in teams if k.startswith("team:") else cluster)]
            return pb.ListQuotasResponse(quotas=[
                pb.Quota(key=k, limit=cluster_limit(st.quotas, k) or quota_limit(st, k) or 0, running=st.held.get(k, 0))
                for k in keys])

    # ------------------------------------------------------------ forecast and explain

    async def _crowding(self, specs: Iterable[JobSpec]) -> list[str]:
        """Warnings (never refusals) for jobs just written that land on a crowded second."""
        now = self.clock.now_ms()
        cap = forecasts.capacity(getattr(self.dispatcher, "hub", None), {}, now)
        return await self.load.warnings(self.node, list(specs), cap, now)

    @routed(write=False)
    async def Forecast(self, request: pb.ForecastRequest, context: CallContext) -> pb.ForecastResponse:
        now = self.clock.now_ms()
        start = request.from_ms or now
        end = request.to_ms or start + forecasts.DAY_MS
        top = request.top or herd.DEFAULT_TOP
        try:
            herd.check_window(start, end, request.by, top)
        except herd.ForecastError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        hosted = self.groups() if self.groups is not None else {self.router.shard or 0: self.node}
        # group 0's service counts every group: a group hosted elsewhere (schedctl shard move) is
        # forecast by its leader and merged in; another group's service (asked so) only its own
        elsewhere = [k for k in range(self.router.shards) if k not in hosted] if self.groups is not None else []
        remote = [asyncio.ensure_future(self._remote_forecast(k, start, end, request.by, context)) for k in elsewhere]
        try:
            return await self._forecast(request, context, now, start, end, top, hosted, elsewhere, remote)
        finally:
            for task in remote:
                task.cancel()

    async def _forecast(self, request: pb.ForecastRequest, context: CallContext, now: int, start: int, end: int,
                        top: int, hosted: dict[int, RaftNode], elsewhere: list[int],
                        remote: Sequence[asyncio.Future[pb.ForecastResponse | str]]) -> pb.ForecastResponse:
        read = await asyncio.to_thread(forecasts.read_groups, list(hosted.values()), auth.read_filter())
        hub = getattr(self.dispatcher, "hub", None) if self.node.is_leader() else None
        notes = [read.note()]
        if not auth.may("operator", "cluster"):
            hub = None
            notes.append("worker slots are shown to callers with the operator capability")
        elif hub is None:
            notes.append("this node does not lead: it knows no workers, so slots are unknown (ask without --stale)")
        cap = forecasts.capacity(hub, read.quotas, now)
        fc = await asyncio.to_thread(herd.compute, read.rows, start, end, by=request.by,
                                     top=herd.MAX_TOP if elsewhere else top, capacity=cap, book=read.book)
        if elsewhere:
            answers = await asyncio.gather(*remote)
            parts = [fc] + [forecasts.forecast_of_pb(a) for a in answers if isinstance(a, pb.ForecastResponse)]
            fc, short = herd.merge(parts, top, cap)
            lost = [(k, a) for k, a in zip(elsewhere, answers) if isinstance(a, str)]
            for k, why in lost:
                notes.append(f"shard {k} could not be counted (no node holding it answered: {why}): "
                             "its jobs are missing")
            notes += [n for a in answers if isinstance(a, pb.ForecastResponse) for n in a.note.split("; ")
                      if n and n not in notes]
            if short:
                notes.append(f"shards {', '.join(map(str, elsewhere))} are forecast by their leaders and merged: "
                             f"a peak adds each shard's {herd.MAX_TOP} busiest seconds and minutes, so a second "
                             "busy in several shards but in none's busiest may be counted short")
        return forecasts.forecast_to_pb(fc, "; ".join(n for n in notes if n))

    async def _remote_forecast(self, k: int, start: int, end: int, by: str,
                               context: CallContext) -> pb.ForecastResponse | str:
        """Shard `k`'s own forecast, from its leader (for the caller: its holder authorizes the
        call again and reads only the teams the caller may), or why none came."""
        if self.calls is None:
            return "this node cannot call other nodes"
        left = context.time_remaining()
        request = pb.ForecastRequest(from_ms=start, to_ms=end, by=by, top=herd.MAX_TOP)
        try:
            return await self.calls.unary(k, "Scheduler", "Forecast", request,
                                          timeout=min(left, CALL_TIMEOUT_S) if left is not None else None)
        except GroupCallError as e:
            return e.details

    @routed(write=False)
    async def Explain(self, request: pb.ExplainRequest, context: CallContext) -> pb.Explanation:
        try:
            name, t = parse_execution_id(request.id) if request.id else (request.job, request.at_ms)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if not name or (not request.id and not request.at_ms):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "give an execution id, or a job and a time")
        found = await asyncio.to_thread(history_reads.window, self.node.state, self.node.lock, self._history(),
                                        name, t, t, 1)
        readable = auth.may("acl", "cluster")       # a deleted job is named in the audit trail only
        with self.node.lock:
            st = self.node.state
            known = name in st.jobs
            x = explaining.explain(st, name, t, on_disk=found.get(t), audit=st.audit if readable else None)
        if not known and not readable:               # as the interceptor answers for a hidden one
            await context.abort(grpc.StatusCode.NOT_FOUND, f"execution {request.id!r} not found" if request.id
                                else f"job {name!r} not found")
        return forecasts.explanation_to_pb(x)


STALE_LEADER = "stale leader"


def _ago(now_ms: int, t_ms: int) -> str:
    return f"since {sched.format_ms(t_ms // 1000 * 1000)} ({max(0, now_ms - t_ms) / 1000:.0f} s)"


def summarize(nodes: list[pb.NodeStatus], now_ms: int) -> tuple[pb.NodeStatus | None, list[str]]:
    """The leader and the warnings of a cluster status, from every node's own report. Two nodes
    may both report leadership (a leader resumed after SIGCONT has not yet heard of the next
    term): only the one of the highest term is the leader; the other is shown as a stale leader.
    A replica stuck in log repair is named once, as the leader sees it if the leader says so,
    else as it sees itself."""
    leaders = [n for n in nodes if n.role == "leader"]
    leader = max(leaders, key=lambda n: n.term) if leaders else None
    warnings = []
    for n in leaders:
        if leader is not None and n is not leader and n.term < leader.term:
            n.role = STALE_LEADER
            warnings.append(f"{n.id} still acts as leader of term {n.term}, but {leader.id} leads "
                            f"term {leader.term}: a stale leader")
    ids = {n.raft_address: n.id for n in nodes}
    views = ([leader] if leader is not None else []) + [n for n in nodes if n is not leader]
    named: set[str] = set()
    for n in views:
        if n.role == "unreachable":
            continue
        for r in n.replicas:
            if not r.stuck or r.peer in named:
                continue
            named.add(r.peer)
            who = f"{ids.get(r.peer) or r.peer_id or '?'} ({r.peer})"
            if r.peer == n.raft_address:
                warnings.append(f"replica {who} is not converging: commit index {r.match_index}, the "
                                f"leader's {r.last_index} ({r.lag} entries behind), no progress "
                                f"{_ago(now_ms, r.progress_ms)}; log repair stuck at index {r.match_index + 1}")
            else:
                warnings.append(f"replica {who} is not converging: {r.lag} entries behind leader {n.id}, "
                                f"matchIndex {r.match_index} unchanged {_ago(now_ms, r.progress_ms)}; "
                                f"log repair stuck at index {r.match_index + 1}")
    if leader is not None and (behind := overload_warning(leader.dispatch_backlog, leader.dispatch_lag_ms)):
        warnings.append(f"{leader.id}: {behind}")
    if leader is not None:
        warnings += unserved_warnings({u.pool: u.runs for u in leader.unserved_pools})
    return leader, warnings + _build_warnings(nodes, leader)


def _build_warnings(nodes: list[pb.NodeStatus], leader: pb.NodeStatus | None) -> list[str]:
    """What differs between builds and matters: the zone data or croniter of a node unlike the
    leader's (replicas would compute different firing instants), and a node whose build does
    not support the cluster's feature level (it must be upgraded before anything else)."""
    warnings = []
    for n in nodes:
        if n.role == "unreachable" or n is leader:
            continue
        if leader is not None and leader.tzdata and n.tzdata and (n.tzdata, n.croniter) != (leader.tzdata, leader.croniter):
            warnings.append(f"{n.id} schedules with tzdata {n.tzdata} and croniter {n.croniter}, the leader "
                            f"{leader.id} with tzdata {leader.tzdata} and croniter {leader.croniter}: replicas may "
                            f"compute different firing instants; install the same versions on every node")
    for n in nodes:
        if n.role != "unreachable" and n.halted:
            warnings.append(f"{n.id} halted (it applies, votes and serves nothing): {n.halted}")
            continue
        if n.role != "unreachable" and n.max_feature_level and n.feature_level > n.max_feature_level:
            warnings.append(f"{n.id} runs schedd {n.version}, which supports feature levels up to "
                            f"{n.max_feature_level}, but the cluster is at {n.feature_level}: upgrade it")
    return warnings


def supported_level(nodes: list[pb.NodeStatus]) -> int:
    """The highest feature level every node supports; 0 when a node did not say (unreachable,
    or a build from before feature levels)."""
    levels = [n.max_feature_level if n.role != "unreachable" else 0 for n in nodes]
    return min(levels) if levels else 0


MOVE_CAP_S = 900.0       # a shard move waits for a replica to catch up: minutes for a large shard


def shard_status(shard: int, node: RaftNode, answered_by: str = "") -> pb.ShardStatus:
    """One group's row of `schedctl shard list`, from this node's replica of it."""
    st = node.status()
    with node.lock:
        jobs, runs = len(node.state.jobs), len(node.state.execs)
    members = node.membership
    leader_id = members.id_of_raft(st.leader) if st.leader else ""
    return pb.ShardStatus(
        shard=shard, leader_id=leader_id, leader_grpc_address=members.grpc_of_raft(st.leader) if st.leader else "",
        replicas=sorted(m.id for m in members.members()), term=st.term, jobs=jobs, executions=runs,
        lag=max(0, st.leader_commit_index - st.applied_index), commit_index=st.commit_index,
        applied_index=st.applied_index, raft_address=node.cfg.raft_address, answered_by=answered_by)


class ClusterService(pb_grpc.ClusterServicer):
    """Status is answered by whichever node is asked (never forwarded), from every member's
    NodeInfo, so it works during an election and shows unreachable nodes."""

    def __init__(self, node: RaftNode, router: Router, replicas, clock: Clock,
                 load: DispatchLoad | None = None, accepts_pings_ms: int = 0,
                 leader_terms: Callable[[], Iterable[tuple[int, int, int]]] | None = None) -> None:
        self.node, self.router = node, router
        self.leader_terms = leader_terms  # the terms this node led (schedd.runtime.leader_terms)
        self.accepts_pings_ms = accepts_pings_ms   # what the server accepts (NodeStatus.accepts_pings_ms)
        self.replicas = replicas          # a ReplicaWatch (schedd/runtime/replica_watch.py)
        self.clock = clock
        self.load = load                  # the dispatcher's backlog (schedd.leader.assigner)
        # A sharded cluster (schedd.runtime.groups): S, and the groups' replicas this node hosts
        # now (group 0's service answers ListShards for all of them, asking a node that holds
        # a replica for the others: `calls`) and carries out shard moves (`mover`, on group 0's leader).
        self.shards = 1
        self.shard = 0                    # which group this service's node replicates
        self.hosted: Callable[[], dict[int, RaftNode]] | None = None
        self.calls: Any = None            # schedd.api.shard_calls.GroupCalls
        self.mover: Any = None            # schedd.runtime.shard_moves.ShardMover
        self.shard_map: Callable[[], ShardMap | None] = lambda: None   # group 0's recorded map

    def _now_ms(self) -> int:
        return self.clock.now_ms()

    def local_info(self, with_digest: bool = False) -> pb.NodeStatus:
        st = self.node.status()           # role, term and indexes of one moment
        me = self.node.cfg
        digest, digest_index = "", 0
        with self.node.lock:            # the digest and the index it was taken at, together
            state = self.node.state
            state_hash, epoch, level = state.log_hash_hex(), state.epoch, state.feature_level
            if with_digest:
                digest, digest_index = state.state_digest(), state.last_index
        b = build_info(state.features)
        info = pb.NodeStatus(
            version=b.version, protocol=b.protocol, entry_codec=b.entry_codec, max_feature_level=b.feature_level,
            feature_level=level, snapshot_formats=b.readable_snapshot_formats, snapshot_format=b.snapshot_format,
            tzdata=b.tzdb, croniter=b.croniter, halted=self.node.halted,
            id=me.node_id, raft_address=me.raft_address, grpc_address=me.grpc_address, role=st.role,
            term=st.term, commit_index=st.commit_index, applied_index=st.applied_index,
            lag=max(0, st.leader_commit_index - st.applied_index), has_quorum=st.has_quorum,
            state_hash=state_hash, uptime_seconds=st.uptime_s, leader_epoch=epoch,
            state_digest=digest, digest_index=digest_index, accepts_pings_ms=self.accepts_pings_ms,
            leader_grpc_address=self.node.membership.grpc_of_raft(st.leader) if st.leader else "",
            shards=self.shards if self.shards > 1 else 0, shard=self.shard)
        for key, value in node_membership(self.node).items():
            if isinstance(value, list):
                getattr(info, key).extend(value)
            else:
                setattr(info, key, value)
        if self.leader_terms is not None:
            info.leader_terms.extend(pb.LeaderTerm(term=t, since_ms=a, until_ms=b) for t, a, b in self.leader_terms())
        if self.load is not None and st.role == "leader":
            info.dispatch_backlog, info.dispatch_lag_ms = self.load.backlog, self.load.lag_ms
            info.unserved_pools.extend(pb.UnservedPool(pool=p, runs=n) for p, n in sorted(self.load.unserved.items()))
        history = self.node.history
        if with_digest and isinstance(history, HistoryStore):
            history_reads.caught_up(history, digest_index)
            info.history_digest, info.history_index = f"{history.digest():016x}", history.applied_index
            info.history_rows = history.count()
            gap = history.gap
            info.history_gap = f"{gap[0] + 1}..{gap[1]}" if gap else ""
        w = self.replicas
        if w is not None:
            info.writable, info.not_writable_reason = w.writable, w.why_not_writable
            info.replicas.extend(
                pb.ReplicaProgress(peer=r.peer, peer_id=self.node.membership.id_of_raft(r.peer), match_index=r.match_index,
                                   last_index=r.last_index, lag=r.lag, stuck=r.stuck,
                                   progress_ms=w.progress_wall_ms(r))
                for r in w.rows)
        return info

    def _hosted(self) -> dict[int, RaftNode]:
        return self.hosted() if self.hosted is not None else {self.shard: self.node}

    async def ListShards(self, request, context: CallContext) -> pb.ListShardsResponse:
        """Every shard group as this node's replica of it sees it (no forwarding: a replica knows
        its group's leader, term and progress; `lag` is its own); a group it holds no replica
        of, as a node holding one sees it. `shard`: that group only, from this node's replica."""
        me = self.node.cfg.node_id
        m = self.shard_map()
        version = m.version if m is not None else (0 if self.shards > 1 else 1)
        out = pb.ListShardsResponse(shards=max(1, self.shards), answered_by=me, map_version=version)
        if len(request.quota_keys) > quota_reads.MAX_KEYS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"at most {quota_reads.MAX_KEYS} quota keys")
        if request.HasField("shard"):
            node = self._hosted().get(request.shard) if request.shard != self.shard else self.node
            if node is None:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"this node holds no replica of shard {request.shard}")
            row = shard_status(request.shard, node, me)
            row.quota_uses.extend(quota_reads.uses_pb(node, request.quota_keys))
            out.items.append(row)
            return out
        out.items.extend(await self.shard_rows())
        return out

    async def shard_rows(self) -> list[pb.ShardStatus]:
        """Every group's row (ListShards), in shard order."""
        hosted = self._hosted()
        rows = {k: shard_status(k, node, self.node.cfg.node_id) for k, node in hosted.items()}
        for k in range(max(1, self.shards)):
            if k not in rows and self.calls is not None:
                rows[k] = await self._remote_row(k)
        m = self.shard_map()
        for k, row in rows.items():
            # the map's replicas (a replica given up is not one a moment later), but shard 0's:
            # group 0's members (every node), not the map's entry
            if m is not None and k:
                row.ClearField("replicas")
                row.replicas.extend(sorted(m.shard(k).replicas))
        return [rows[k] for k in sorted(rows)]

    async def _remote_row(self, k: int) -> pb.ShardStatus:
        try:
            answer = await self.calls.unary(k, "Cluster", "ListShards", pb.ListShardsRequest(shard=k), timeout=3.0)
            return answer.items[0]
        except (GroupCallError, IndexError):
            return pb.ShardStatus(shard=k)          # no holder answered: no leader, nothing known

    async def MoveShard(self, request: pb.MoveShardRequest, context: CallContext) -> pb.MoveShardResponse:
        """Group 0's leader carries the move out (schedd.runtime.shard_moves); any other node
        forwards the call there."""
        if self.mover is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "shard move: this cluster has one shard group (shards = 1): there is nothing to move")
        if not self.node.is_leader():
            return await self.router.forward("Cluster", "MoveShard", request, context, cap_s=MOVE_CAP_S)
        try:
            return await self.mover.move(request)
        except GroupCallError as e:
            await context.abort(e.code, e.details)

    async def NodeInfo(self, request, context: CallContext) -> pb.NodeStatus:
        if request.with_digest:         # O(state) under the lock: off the event loop
            info = await asyncio.to_thread(self.local_info, True)
        else:
            info = self.local_info()
        if request.digest_at > 0:
            points = self.node.digests
            with self.node.lock:
                points.ask(request.digest_at, self.node.state.last_index)
                info.at_digest = points.get(request.digest_at)
        return info

    async def _peer_info(self, peer, with_digest: bool = False) -> pb.NodeStatus:
        if not peer.grpc_address:       # a voter no member table or config names
            return pb.NodeStatus(id=peer.id, raft_address=peer.raft_address, role="unreachable",
                                 error="its gRPC address is not recorded")
        stub = pb_grpc.ClusterStub(self.router._channel(peer.grpc_address))
        try:
            return await stub.NodeInfo(pb.NodeInfoRequest(with_digest=with_digest), timeout=1.5 + 3 * with_digest,
                                       metadata=self.router.node_metadata("/schedd.v1.Cluster/NodeInfo"))
        except grpc.aio.AioRpcError as e:
            return pb.NodeStatus(id=peer.id, raft_address=peer.raft_address,
                                 grpc_address=peer.grpc_address, role="unreachable",
                                 error=e.details() or e.code().name)

    async def member_infos(self, with_digest: bool = False) -> list[pb.NodeStatus]:
        """Every member's NodeInfo, in membership order, this node's own included; a member that
        does not answer is "unreachable" with the error (the leader's feature raiser reads this)."""
        me = self.node.cfg
        voters = self.node.membership.members()
        # the member table's non-voters too (an add between its record and its Raft change): the
        # feature raiser must count every node that will apply the log
        members = voters + [m for m in self.node.membership.recorded() if m.id not in {v.id for v in voters}]
        peers = [p for p in members if p.id != me.node_id]
        infos = {me.node_id: await asyncio.to_thread(self.local_info, True) if with_digest else self.local_info()}
        for p, info in zip(peers, await asyncio.gather(*(self._peer_info(p, with_digest) for p in peers))):
            infos[p.id] = info
        return [infos[p.id] for p in members if p.id in infos]

    async def Status(self, request, context: CallContext) -> pb.ClusterStatus:
        me = self.node.cfg
        nodes = await self.member_infos(request.with_digest)
        leader, warnings = summarize(nodes, self._now_ms())
        voters, change, last_change, membership_warnings = cluster_membership(nodes, leader, self.node)
        with self.node.lock:
            jobs, execs = len(self.node.state.jobs), len(self.node.state.execs)
            short = short_history(self.node.state.audit, self._now_ms())
        if self.shards > 1:                      # sharded: every group's jobs, here or where it is held
            rows = [r for r in await self.shard_rows() if r.shard != self.shard]
            jobs, execs = jobs + sum(r.jobs for r in rows), execs + sum(r.executions for r in rows)
        if short is not None:
            warnings.append(short)
        if leader is not None:
            for n in nodes:
                if n.role != "unreachable":
                    n.lag = max(0, leader.commit_index - n.applied_index)
        return pb.ClusterStatus(
            leader_id=leader.id if leader else "", leader_grpc_address=leader.grpc_address if leader else "",
            term=max(n.term for n in nodes), commit_index=leader.commit_index if leader else 0,
            nodes=nodes, jobs=jobs, executions=execs, answered_by=me.node_id,
            warnings=warnings + membership_warnings, members=voters, membership_change=change,
            last_membership_change=last_change,
            feature_level=leader.feature_level if leader else 0, supported_feature_level=supported_level(nodes))
