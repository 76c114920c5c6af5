"""The node's API in a sharded cluster: every call reaches the shard group that owns it.

A node of a cluster with S > 1 shards hosts a replica of shard groups (every one, unless shard
moves placed them elsewhere), each with the services of an unsharded node bound to that group
(schedd.runtime.groups). The gRPC server
registers the servicers built here instead: each method has one rule (`RULES`, checked to cover
every RPC of every service, as the capability table is) saying which group's servicer answers:

- `Key`: the group owning the name the request carries (a job, a DAG or a run id's job:
  `shards.routing_key`, `shards.shard_of`). That servicer answers exactly as an unsharded node
  does, forwarding to its group's leader when this replica does not lead, so any node accepts
  any call.
- `Fan`: a listing asked of every group and merged in the listing's order (`shards.merge_pages`
  with one opaque cursor; totals add up), or a watch whose events interleave.
- `Zero`: group 0, the cluster-wide tables: tokens, roles and policies (authentication reads
  them there), the workers list, the clock of a test node.
- `All`: a cluster-wide write every group must hold because its apply reads it (calendars,
  blackouts, the audit settings): sent to each group in turn with the same request id, so a
  caller's retry after a failure part-way completes the rest (each group deduplicates).
- `Split`: a batch of jobs, split by group (atomic within each group, not across groups).
- `Numbered`: the group a request names by number (one shard's audit trail).
- `Named`: NodeInfo, a read of this node's own replica: the group named in `x-schedd-shard`.
- `Refused`: not supported with S > 1; the caller is told so, and nothing is committed.

A group this node holds no replica of (its replica moved away: `schedctl shard move`) is a
`shard_calls.RemoteGroup`: the same methods, answered by a node that holds one.

A forwarded call (signed by a node) carries `x-schedd-shard`: the group it was forwarded for,
which is then the only one that answers it (so an `All` write is not fanned out again by the
leader it was forwarded to). A worker's stream names its shard the same way (`Welcome.shard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.message import Message

from schedd.api import auth
from schedd.core import commands as C
from schedd.core import shards as sh
from schedd.leader.worker_mux import WorkerMux
from schedd_proto import scheduler_pb2 as pb

SHARD_HEADER = "x-schedd-shard"
SHARES_LEVEL = C.FEATURES.level_of(C.QUOTA_SHARE)
CallContext = Any
# Set while the front makes a write of its own on a caller's behalf (a quota's shares), so a
# group's servicer can tell it from a caller's request asking for the same.
FRONT: contextvars.ContextVar[bool] = contextvars.ContextVar("schedd_shard_front", default=False)


@dataclass(frozen=True, slots=True)
class Key:
    """Route by the name `of(request)` returns; "" (no name) falls back to `otherwise`."""
    of: Callable[[Any], str]
    otherwise: object = None


@dataclass(frozen=True, slots=True)
class Numbered:
    """Route to the group the request names by number (None: `otherwise`)."""
    of: Callable[[Any], int | None]
    otherwise: object = None


@dataclass(frozen=True, slots=True)
class Fan:
    """Ask every group; `merge(requests' answers, request, shards)` makes the one answer (unary)
    or None for a watch, whose events are interleaved."""
    merge: Callable[[list[Any], Any, int], Any] | None = None


@dataclass(frozen=True, slots=True)
class Zero:
    pass


@dataclass(frozen=True, slots=True)
class Named:
    """A read of this node's own replica: the group any caller names in `x-schedd-shard`,
    else group 0 (it forwards nothing and names no job). NodeInfo: the fault suite compares
    each group's replicas (applied index, state digest) shard by shard."""


@dataclass(frozen=True, slots=True)
class All:
    pass


@dataclass(frozen=True, slots=True)
class NodeStreams:
    """A worker's one stream to this node (Workers.ConnectNode): each shard's sub-stream is
    served by this node's replica of that group (`worker_mux`)."""


@dataclass(frozen=True, slots=True)
class Split:
    pass


@dataclass(frozen=True, slots=True)
class Refused:
    why: str


def run_job(run_id: str) -> str:
    """The job of a run id (`<job>@<RFC 3339>`)."""
    return run_id.partition("@")[0]


# ------------------------------------------------------------------------------ merges

class _Desc:
    """Reverses an order (newest first), for `merge_pages`' ascending keys."""
    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        return bool(other.v < self.v)


def _merge_dags(answers: list[Any], request: Any, shards: int) -> Any:
    out = type(answers[0])()
    out.dags.extend(sorted((d for a in answers for d in a.dags), key=lambda d: d.name))
    return out


def _merge_verify(answers: list[Any], request: Any, shards: int) -> Any:
    """Each group's audit chain is verified on its own: the answer is the first broken group's
    (its head names it), else group 0's with the records of every group counted."""
    out = type(answers[0])()
    out.CopyFrom(next((a for a in answers if not a.ok), answers[0]))
    if out.ok:
        out.records = sum(a.records for a in answers)
    return out


def _merge_audit(answers: list[Any], request: Any, shards: int) -> Any:
    """Every group's trail (each group records the writes it applies), by time; `limit` keeps
    the newest with `newest_first`, else the oldest. A record's `seq` counts within its group."""
    out = type(answers[0])()
    out.CopyFrom(answers[0])
    del out.records[:]
    for k, a in enumerate(answers):
        for r in a.records:
            r.shard = k
    rows = sorted((r for a in answers for r in a.records), key=lambda r: (r.time_ms, r.shard, r.seq),
                  reverse=request.newest_first)
    out.records.extend(rows[:request.limit] if request.limit else rows)
    return out


# ------------------------------------------------------------------------------ the front

class ShardFront:
    """What every routing servicer shares: the servicers of the groups this node hosts, by
    shard (`local`: None for a group it holds no replica of), and `remote` for the others
    (schedd.api.shard_calls: a group held elsewhere, answered by a node holding it)."""

    def __init__(self, shards: int, local: Sequence[dict[str, object]] | Callable[[int], dict[str, object] | None],
                 remote: Callable[[int, str], object] | None = None) -> None:
        if not callable(local):               # every group here (a list, by shard)
            if shards != len(local):
                raise ValueError(f"{len(local)} groups for {shards} shards")
            every = list(local)
            local = lambda k: every[k] if 0 <= k < len(every) else None   # noqa: E731
        self.shards = shards
        self.local = local
        self.remote = remote

    def of_name(self, name: str) -> int:
        return sh.shard_of(sh.routing_key(name), self.shards)

    def hosts(self, k: int) -> bool:
        return self.local(k) is not None

    def target(self, service: str, k: int) -> Any:
        servicers = self.local(k)
        if servicers is not None:
            return servicers[service]
        if self.remote is None:
            raise LookupError(f"shard {k} has no replica on this node")
        return self.remote(k, service)

    @staticmethod
    def forwarded_shard(context: CallContext, *, anyone: bool = False) -> int | None:
        """The shard a node forwarded this call for (a worker's stream: anyone may name it)."""
        info = auth.current()
        if not anyone and (info is None or not info.forwarded_by):
            return None
        for k, v in context.invocation_metadata() or ():
            if k == SHARD_HEADER:
                try:
                    return int(v)
                except ValueError:
                    return None
        return None


def build(front: ShardFront, service: str, full_name: str, rules: dict[str, object], base: type,
          mux: WorkerMux | None = None) -> object:
    """A servicer of `service` (a subclass of its generated base `base`) whose every method
    follows its rule (`mux`: the node's worker streams, `worker_mux(front)` if not given)."""
    desc = descriptor_pool.Default().FindServiceByName(full_name)
    attrs: dict[str, Any] = {}
    for m in desc.methods:
        rule = rules.get(m.name)
        if rule is None:
            raise KeyError(f"{full_name}/{m.name} has no shard routing rule")
        if isinstance(rule, NodeStreams):
            attrs[m.name] = _node_streams(mux or worker_mux(front))
        elif m.client_streaming:
            attrs[m.name] = _bidi(front, service, m.name)
        elif m.server_streaming:
            attrs[m.name] = _streaming(front, service, m.name, rule)
        else:
            attrs[m.name] = _unary(front, service, m.name, rule)
    cls = type(f"Sharded{service}", (base,), attrs)
    return cls()


def _in_range(front: ShardFront, k: int | None) -> int | None:
    return k if k is not None and 0 <= k < front.shards else None


async def _held_here(front: ShardFront, k: int, context: CallContext) -> None:
    """A call naming its group (forwarded, a worker's stream, a replica's read) is answered by
    this node's replica only: a node holding none says so, and the caller asks another."""
    if not front.hosts(k):
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"this node holds no replica of shard {k} "
                                                         "(it moved): ask a node that does")


def _unary(front: ShardFront, service: str, method: str, rule: object) -> Callable[..., Any]:
    async def call(self: object, request: Message, context: CallContext) -> Any:
        k = _in_range(front, front.forwarded_shard(context, anyone=isinstance(rule, Named)))
        if k is not None:
            await _held_here(front, k, context)
            return await getattr(front.target(service, k), method)(request, context)
        return await _unary_by(front, service, method, rule, request, context)
    return call


async def _one_group(front: ShardFront, method: str, rule: object, request: Message,
                     context: CallContext) -> tuple[int | None, object]:
    """The one group that answers the call, or None and the rule that spreads it (All, Fan,
    Split, ...); a `Refused` call or a shard that does not exist is aborted here."""
    while True:
        if isinstance(rule, Key):
            name = rule.of(request)
            if name or rule.otherwise is None:
                return front.of_name(name), rule
            rule = rule.otherwise
        elif isinstance(rule, Numbered):
            k = rule.of(request)
            if k is None:
                rule = rule.otherwise
            elif not 0 <= k < front.shards:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"shard {k} does not exist: the cluster has shards 0 to {front.shards - 1}")
            else:
                return k, rule
        elif isinstance(rule, Zero | Named):
            return 0, rule
        elif isinstance(rule, Refused):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"{method} in a sharded cluster ({front.shards} shards): {rule.why}")
        else:
            return None, rule


async def _unary_by(front: ShardFront, service: str, method: str, rule: object, request: Message,
                    context: CallContext) -> Any:
    k, rule = await _one_group(front, method, rule, request, context)
    if k is not None:
        return await getattr(front.target(service, k), method)(request, context)
    if isinstance(rule, All):
        first = None
        for k in range(front.shards):
            answer = await getattr(front.target(service, k), method)(request, context)
            first = answer if k == 0 else first
        return first
    if isinstance(rule, Fan):
        if rule.merge is None:
            raise TypeError(f"{method}: a unary Fan needs a merge")
        answers = [await getattr(front.target(service, k), method)(request, context) for k in range(front.shards)]
        return rule.merge(answers, request, front.shards)
    if isinstance(rule, PagedFan | QuotaWrite):
        return await rule.run(front, service, method, request, context)
    if isinstance(rule, Split):
        return await _split(front, service, method, request, context)
    raise TypeError(f"{method}: unknown rule {rule!r}")


def _streaming(front: ShardFront, service: str, method: str, rule: object) -> Callable[..., Any]:
    async def call(self: object, request: Message, context: CallContext) -> AsyncIterator[Any]:
        k = _in_range(front, front.forwarded_shard(context))
        if k is not None:
            await _held_here(front, k, context)
        else:
            k, _ = await _one_group(front, method, rule, request, context)
        if k is not None:
            async for x in getattr(front.target(service, k), method)(request, context):
                yield x
            return
        async for x in _interleave(front, service, method, request, context):
            yield x
    return call


def _bidi(front: ShardFront, service: str, method: str) -> Callable[..., Any]:
    async def call(self: object, request_iterator: Any, context: CallContext) -> AsyncIterator[Any]:
        k = _in_range(front, front.forwarded_shard(context, anyone=True)) or 0
        await _held_here(front, k, context)
        async for x in getattr(front.target(service, k), method)(request_iterator, context):
            yield x
    return call


def worker_mux(front: ShardFront) -> WorkerMux:
    """The node's worker streams: shard k's sub-stream is served by this node's replica of
    group k (its Connect refuses it as a Connect naming shard k: "leader=" when it does not
    lead), UNAVAILABLE when this node holds none; limits and identity are group 0's hub's."""
    def route(k: int) -> Any:
        if not 0 <= k < front.shards:
            return grpc.StatusCode.INVALID_ARGUMENT, (f"shard {k} does not exist: the cluster has shards 0 to "
                                                      f"{front.shards - 1}")
        if not front.hosts(k):
            return grpc.StatusCode.UNAVAILABLE, f"this node holds no replica of shard {k} (it moved): ask a node that does"
        return front.target("Workers", k).Connect

    def hub0() -> Any:
        return front.target("Workers", 0)
    return WorkerMux(route, lambda: front.shards, lambda: hub0().mux_limits(), lambda: hub0().call_token())


def _node_streams(mux: WorkerMux) -> Callable[..., Any]:
    async def call(self: object, request_iterator: Any, context: CallContext) -> AsyncIterator[Any]:
        async for x in mux.ConnectNode(request_iterator, context):
            yield x
    return call


async def _interleave(front: ShardFront, service: str, method: str, request: Message,
                      context: CallContext) -> AsyncIterator[Any]:
    """Every group's watch as one: their events as they come, with one "synced" once every
    group has sent its first listing (a batched message keeps its other events)."""
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue(maxsize=64)
    done = object()

    async def pump(k: int) -> None:
        try:
            async for x in getattr(front.target(service, k), method)(request, context):
                await queue.put((k, x))
        finally:
            await queue.put((k, done))

    tasks = [asyncio.create_task(pump(k)) for k in range(front.shards)]
    synced: set[int] = set()
    ended = 0
    try:
        while ended < front.shards:
            k, x = await queue.get()
            if x is done:
                ended += 1
                for t in tasks:
                    if t.done() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                continue
            out, saw = _without_synced(x)
            last = saw and k not in synced and len(synced) == front.shards - 1
            if saw:
                synced.add(k)
            if last and getattr(x, "type", "") == "batch":
                batch = out if out is not None else type(x)(type="batch")
                batch.events.add(type="synced")
                yield batch
                continue
            if out is not None:
                yield out
            if last:
                yield type(x)(type="synced")
    finally:
        for t in tasks:
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)


def _without_synced(event: Any) -> tuple[Any | None, bool]:
    """The event without its "synced" marker (None if nothing is left), and whether it had one."""
    if getattr(event, "type", "") == "synced":
        return None, True
    if getattr(event, "type", "") == "batch":
        kept = [e for e in event.events if e.type != "synced"]
        if len(kept) == len(event.events):
            return event, False
        out = type(event)(type="batch")
        out.events.extend(kept)
        return (out if kept else None), True
    return event, False


POSITION = "x-schedd-batch-position"      # a refused batch's 1-based position (schedd.api.service)


class _Refused(Exception):
    """One part's refusal, held until every part has answered (`_each`)."""

    def __init__(self, code: Any, details: str, trailers: tuple[tuple[str, str], ...]) -> None:
        super().__init__(details)
        self.code, self.details, self.trailers = code, details, trailers

    @property
    def position(self) -> float:
        """The refused job's place in the whole batch; a refusal of no job (UNAVAILABLE) last."""
        return next((int(v) for k, v in self.trailers if k == POSITION), float("inf"))


class _PartContext:
    """A call's context as a group sees it when it answers one part of a batch: a refusal it
    raises names the job's position in the caller's whole batch, not in the part, and is held
    (`_Refused`) rather than ending the call, since the other parts are still answering."""

    def __init__(self, context: CallContext, index: list[int], total: int) -> None:
        self._context, self._index, self._total = context, index, total

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def _where(self, position: int) -> int:
        return self._index[position - 1] + 1 if 0 < position <= len(self._index) else position

    async def abort(self, code: Any, details: str = "", trailing_metadata: Any = ()) -> Any:
        meta = []
        for k, v in trailing_metadata or ():
            if k == POSITION and str(v).isdigit():
                old, new = int(v), self._where(int(v))
                details = details.replace(f"#{old} of {len(self._index)}", f"#{new} of {self._total}") \
                    .replace(f"#{old})", f"#{new})").replace(f"#{old}:", f"#{new}:")
                v = str(new)
            meta.append((k, v))
        raise _Refused(code, details, tuple(meta))


async def _each(context: CallContext, calls: dict[int, Any]) -> dict[int, Any]:
    """Every group's part at once, their answers by group. The parts' Raft commits overlap
    instead of queueing one after another (a batch over 8 groups waited for 8 commits in a
    row). A refusal is answered once every part has answered, and it is the refusal of the
    batch's earliest job, so the answer does not depend on which group answered first."""
    results = await asyncio.gather(*calls.values(), return_exceptions=True)
    refused = [r for r in results if isinstance(r, _Refused)]
    if refused:
        first = min(refused, key=lambda r: r.position)
        await context.abort(first.code, first.details, trailing_metadata=first.trailers)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return dict(zip(calls, results))


async def _split(front: ShardFront, service: str, method: str, request: Message, context: CallContext) -> Any:
    """PutJobs and DiffJobs: each group gets its jobs (in request order) and the answers
    combine (counts add up; DiffJobs' changes come back in request order). A refusal names the
    job's position in the whole batch. A PutJobs spanning groups is checked whole first
    (DiffJobs in every group, `actions_only`: the specs, the caps, `create_only`), so a batch
    with a bad job commits nothing; then each group commits its part, all or nothing within it.
    The groups are asked at once, in both steps. Only a group that refuses its part after the
    check passed (another writer got in between) leaves the others' parts committed; the
    answer names the refused job, and a retry with the same request id commits each committed
    part once (each part's request id is the call's plus its group)."""
    groups: dict[int, list[int]] = {}
    for i, spec in enumerate(request.jobs):
        groups.setdefault(front.of_name(spec.name), []).append(i)
    if len(groups) <= 1:
        k = next(iter(groups), 0)
        return await getattr(front.target(service, k), method)(request, context)
    total = len(request.jobs)

    def part_of(idx: list[int], kind: type) -> Any:
        part = kind()
        part.jobs.extend(request.jobs[i] for i in idx)
        return part

    def check(idx: list[int]) -> Any:
        part = part_of(idx, pb.DiffJobsRequest)
        part.actions_only = method != "DiffJobs"
        return part

    diffs = await _each(context, {k: front.target(service, k).DiffJobs(check(idx), _PartContext(context, idx, total))
                                  for k, idx in sorted(groups.items())})
    if method == "DiffJobs":
        placed = {i: change for k, idx in groups.items() for i, change in zip(idx, diffs[k].changes)}
        out = pb.DiffJobsResponse()
        out.changes.extend(placed[i] for i in range(total))
        return out
    if request.create_only:
        exists = sorted(i for k, idx in groups.items() for i, ch in zip(idx, diffs[k].changes) if ch.action != "create")
        if exists:
            i = exists[0]
            await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                f"job {request.jobs[i].name!r} (#{i + 1} of {total}) already exists",
                                trailing_metadata=((POSITION, str(i + 1)),))

    def commit(k: int, idx: list[int]) -> Any:
        part = part_of(idx, type(request))
        part.create_only = request.create_only
        part.request_id = f"{request.request_id}/s{k}" if request.request_id else ""
        return getattr(front.target(service, k), method)(part, _PartContext(context, idx, total))

    answers = await _each(context, {k: commit(k, idx) for k, idx in sorted(groups.items())})
    out = type(answers[min(answers)])()
    for k in sorted(answers):
        a = answers[k]
        out.created += a.created
        out.updated += a.updated
        out.warnings.extend(a.warnings)
    return out


@dataclass(frozen=True, slots=True)
class QuotaWrite:
    """SetQuota: the cluster's quota lives in group 0, each group enforces a share of it
    (schedd.core.quota_shares). A new quota first gets share 0 in every group, so no group is
    without a limit once group 0 holds it (group 0's leader then hands out the shares); a
    removed one is forgotten by every group after group 0 drops it."""

    async def run(self, front: ShardFront, service: str, method: str, request: Message, context: CallContext) -> Any:
        if request.share:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "share: a shard group's share of a quota is set by the cluster, not by callers")
        zero = front.target(service, 0)
        with zero.node.lock:
            known = request.key in zero.node.state.quotas
        if not await self._levels(front, service):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"quotas of a sharded cluster need feature level {SHARES_LEVEL} in every shard "
                                "group; a new cluster's leaders raise it within seconds of starting: retry")
        token = FRONT.set(True)
        try:
            if request.limit > 0 and not known:
                await self._shares(front, service, request, context, unset=False)
            answer = await zero.SetQuota(request, context)
            if request.limit == 0:
                await self._shares(front, service, request, context, unset=True)
            return answer
        finally:
            FRONT.reset(token)

    @staticmethod
    async def _levels(front: ShardFront, service: str, timeout_s: float = 10.0) -> bool:
        """Every group's replica here at the quota-share level (a cluster just made raises its
        level within seconds: wait that long rather than refuse)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if all(front.target(service, k).node.state.feature_level >= SHARES_LEVEL
                   for k in range(front.shards) if front.hosts(k)):       # the others refuse a share below it
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.1)

    @staticmethod
    async def _shares(front: ShardFront, service: str, request: Any, context: CallContext, *, unset: bool) -> None:
        for k in range(front.shards):
            part = type(request)(key=request.key, limit=0, share=True, unset=unset,
                                 request_id=f"{request.request_id}/share{k}" if request.request_id else "")
            await front.target(service, k).SetQuota(part, context)


def _merge_quotas(answers: list[Any], request: Any, shards: int) -> Any:
    """The cluster's quotas (group 0's) with what every group runs under each."""
    running: dict[str, int] = {}
    for a in answers:
        for q in a.quotas:
            running[q.key] = running.get(q.key, 0) + q.running
    out = type(answers[0])()
    out.CopyFrom(answers[0])
    for q in out.quotas:
        q.running = running.get(q.key, q.running)
    return out


@dataclass(frozen=True, slots=True)
class PagedFan:
    """A paged listing merged across groups: each group is asked for a page after its own
    position, and `merge_pages` keeps the global order with one opaque cursor."""
    items: str
    key: Callable[[Any, Any], Any]            # (item, request) -> its sort key
    token_of: Callable[[Any], str]            # a group's own page token "after item"
    size: Callable[[Any], int]

    async def run(self, front: ShardFront, service: str, method: str, request: Message, context: CallContext) -> Any:
        try:
            at = sh.positions(request.page_token, front.shards)
        except sh.CursorError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        limit = self.size(request)
        pages: list[sh.ShardPage[Any]] = []
        template: Any = None
        for k, p in enumerate(at):
            part = type(request)()
            part.CopyFrom(request)
            part.page_token = p.after
            answer = await getattr(front.target(service, k), method)(part, context)
            template = template if template is not None else answer
            items = tuple(getattr(answer, self.items)) if not p.done else ()
            nxt = answer.next_page_token if not p.done else ""
            pages.append(sh.ShardPage(items, nxt or None, int(answer.total)))
        merged = sh.merge_pages(at, pages, limit=limit, key=lambda x: self.key(x, request), token_of=self.token_of)
        out = type(template)()
        getattr(out, self.items).extend(merged.items)
        out.next_page_token = merged.cursor
        out.total = merged.total
        return out


# ------------------------------------------------------------------------------ the rules

def _job_name(r: Any) -> str:
    return str(r.job.name)


def _name(r: Any) -> str:
    return str(r.name)


def _run(r: Any) -> str:
    return run_job(str(r.id))


def _job_field(r: Any) -> str:
    return str(r.job)


def _explained(r: Any) -> str:
    return str(r.job) or run_job(str(r.id))


def _named_shard(r: Any) -> int | None:
    return int(r.shard) if r.HasField("shard") else None


def _size(default: int) -> Callable[[Any], int]:
    return lambda r: int(r.page_size) or default


JOBS_PAGE = PagedFan("jobs", key=lambda j, r: j.spec.name, token_of=lambda j: str(j.spec.name), size=_size(100))
RUNS_PAGE = PagedFan(
    "executions",
    key=lambda e, r: (e.scheduled_ms, e.job) if r.oldest_first else _Desc((e.scheduled_ms, e.job)),
    token_of=lambda e: f"{e.scheduled_ms}:{e.job}", size=_size(100))

MEMBERS = ("a new node joins with `schedd serve --join` (it then holds group 0), and `schedctl shard move` "
           "places replicas of the other groups on it")
BACKUP = ("name the shard (`shard`): each shard group is saved on its own, and `schedctl cluster snapshot save` "
          "saves every one")

RULES: dict[str, dict[str, object]] = {
    "Scheduler": {
        "PutJob": Key(_job_name), "PutJobs": Split(), "GetJob": Key(_name), "ListJobs": JOBS_PAGE,
        "PauseJob": Key(_name), "ResumeJob": Key(_name), "DeleteJob": Key(_name), "TriggerJob": Key(_name),
        "ListExecutions": Key(_job_field, RUNS_PAGE), "GetExecution": Key(_run), "CancelExecution": Key(_run),
        "BackfillJob": Key(_name), "ListInstants": Key(_job_field), "SetQuota": QuotaWrite(),
        "ListQuotas": Fan(_merge_quotas), "RetryExecution": Key(_run), "WatchJobs": Fan(),
        "WatchExecutions": Key(_job_field, Fan()), "WatchWorkers": Zero(), "DiffJobs": Split(),
        "Forecast": Zero(),              # group 0's leader: its replicas, and the leaders of groups it does not host
        "Explain": Key(_explained),
    },
    "Workers": {"Connect": Zero(), "ConnectNode": NodeStreams(), "ListWorkers": Zero()},
    "Cluster": {"Status": Zero(), "NodeInfo": Named(), "ListShards": Zero(), "MoveShard": Zero()},
    "Dags": {"PutDag": Key(lambda r: str(r.dag.name)), "GetDag": Key(_name), "ListDags": Fan(_merge_dags),
             "DeleteDag": Key(_name), "RunDag": Key(_name), "ListDagRuns": Key(_name), "GetDagRun": Key(_name),
             "ClearDagTask": Key(_name), "WatchDagRun": Key(_name)},
    "Acl": {m: Zero() for m in ("Bootstrap", "WhoAmI", "PutPolicy", "GetPolicy", "ListPolicies", "DeletePolicy",
                                "PutRole", "GetRole", "ListRoles", "DeleteRole", "CreateToken", "GetToken",
                                "ListTokens", "DeleteToken", "SetAnonymous", "LoginLink")},
    "Audit": {"List": Numbered(_named_shard, Fan(_merge_audit)), "Verify": Fan(_merge_verify), "Configure": All(), "Note": Zero()},
    # a node joins and leaves group 0 (every node holds it); the other groups' replicas move
    "Membership": {"AddNode": Refused(MEMBERS), "RemoveNode": Zero(), "JoinCluster": Zero()},
    "Backup": {"SaveSnapshot": Numbered(_named_shard, Refused(BACKUP)),
               "SaveHistory": Numbered(_named_shard, Refused(BACKUP)),
               "CopyHistory": Refused("only a node asks, for a history gap, of its peer's replica of the "
                                       "same shard")},
    "Logs": {"ReadRunLogs": Key(_run)},
    "Calendars": {"PutCalendar": All(), "GetCalendar": Zero(), "ListCalendars": Zero(), "DeleteCalendar": All(),
                  "PutBlackout": All(), "ListBlackouts": Zero(), "DeleteBlackout": All()},
    "Testing": {"SetClockOffset": Zero(), "GetClockOffset": Zero()},
}


class _Part:
    """A batch request as one group's authorization sees it: that group's jobs only, every
    other field the request's."""

    __slots__ = ("_request", "jobs")

    def __init__(self, request: Any, jobs: list[Any]) -> None:
        self._request, self.jobs = request, jobs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


def owning_parts(front: ShardFront, method: str, request: Any) -> list[tuple[int, Any]]:
    """The groups holding what a call names (`/schedd.v1.Scheduler/PutJob`), each with the part
    of the request it holds: what the authorizing interceptor resolves the call's teams
    against. A batch's group sees its own jobs only (resolving the whole batch in every group
    looked each job up S times, in S - 1 groups that cannot hold it). Calls naming nothing:
    group 0."""
    service, _, name = method.rpartition("/")
    rule = RULES.get(service.rpartition(".")[2], {}).get(name)
    if isinstance(rule, Key):
        key = rule.of(request)
        return [(front.of_name(key) if key else 0, request)]
    if isinstance(rule, Split):
        parts: dict[int, list[Any]] = {}
        for spec in request.jobs:
            parts.setdefault(front.of_name(spec.name), []).append(spec)
        if len(parts) <= 1:
            return [(next(iter(parts), 0), request)]
        return [(k, _Part(request, jobs)) for k, jobs in sorted(parts.items())]
    return [(0, request)]
