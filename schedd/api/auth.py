"""Who is calling, and may they: the one authenticating, authorizing gRPC interceptor.

For every call, first in the interceptor chain:
1. Headers a client could forge are never trusted: `x-schedd-principal`, `x-schedd-forwarded`
   and the other forwarding fields count only when `x-schedd-node-sig` is a valid HMAC over them,
   keyed from the cluster secret (`NodeSigner`): only a node can forward a call (and skip
   `InflightLimit`, which reads `current().forwarded_by`), and a forwarded call keeps its
   caller's principal and address. Servicers read the call's identity from `current()` only.
2. With ACL enabled, the principal comes from the credential only: `authorization: Bearer
   <accessor>.<secret>` against this node's replicated table (the leader re-authenticates a
   forwarded bearer against its own, so a token revoked there cannot write through a lagging
   follower), else the mTLS peer principal (an `admin` certificate holds the management policy;
   `node` and `worker` ones hold nothing without a token; a `user` certificate is only a way in
   under `[tls] client_ca`, so without a token its caller is anonymous: the anonymous policy if
   there is one, else UNAUTHENTICATED), else the anonymous policy. A bad or missing credential
   is UNAUTHENTICATED and queued as a login failure in the audit trail.
3. The method's need (`schedd.api.capabilities.need_of`) is checked with the resource its
   resolver finds (the named job's, execution's or DAG's team): a denial is PERMISSION_DENIED
   naming the missing capability, queued as a denied record, and nothing is proposed. A caller
   who may not read the object's team is answered as if it did not exist (NOT_FOUND, the
   servicer's own text: `Owner`), so denials are no existence oracle. Lists are
   filtered by the servicers with `read_filter()`. Health and reflection stay open; any other
   method missing from the table is refused.
4. Mutating calls are rate-limited per principal (RESOURCE_EXHAUSTED with a retry hint).

The call's identity is handed to the servicers in a context variable (`current()`), never in
metadata they would have to trust.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
import inspect
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from schedd.api.capabilities import Need, need_of
from schedd.core import acl as A
from schedd.core.access import MAX_EVENTS_PER_ENTRY
from schedd.core import commands as C
from schedd.core.model import DEFAULT_TEAM, ValidationError, parse_execution_id
from schedd.ports.clock import Clock
from schedd.security.tls import peer_principal

log = logging.getLogger("schedd.auth")

AUTHORIZATION = "authorization"
PRINCIPAL = "x-schedd-principal"
USER_CERT = "user/"            # a team member's certificate: a way in under mTLS, no rights
FORWARDED = "x-schedd-forwarded"
SOURCE = "x-schedd-source"
SIGNED_AT = "x-schedd-signed-at"
SIGNATURE = "x-schedd-node-sig"
RETRY_AFTER = "x-schedd-retry-after-ms"
SIGNATURE_WINDOW_MS = 60_000
OPEN_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
MUTATING_CAPABILITIES = frozenset(("write", "trigger", "cancel", "backfill", "quota", "acl"))
AUDIT_FLUSH_S = 0.2
CATCH_UP_S = 2.0                 # how long a follower waits to learn a token the leader just made
SETTLE_S = 0.3                   # ...and at least this long (the leader's commit index reaches it
                                 # with the next heartbeat): an unknown token costs this on followers
# What one node asks another for while answering a call it already authorized (Cluster.Status).
# JoinCluster is a node asking for itself: its signature (the cluster secret) is its credential.
# CopyHistory is a node filling a gap of its history store (schedd.runtime.history) from a peer.
# ListShards: a node asks a peer for the row of a shard group it holds no replica of.
NODE_CALLS = frozenset(("/schedd.v1.Cluster/NodeInfo", "/schedd.v1.Membership/JoinCluster",
                        "/schedd.v1.Backup/CopyHistory", "/schedd.v1.Cluster/ListShards"))
# A worker finds the leader through Cluster.Status, or by asking every node its NodeInfo at once
# (its own role and term; Status's node list shows a worker as much): its token may call these
# without `operator`.
WORKER_READS = frozenset(("/schedd.v1.Cluster/Status", "/schedd.v1.Cluster/NodeInfo"))


@dataclass(slots=True, frozen=True)
class CallInfo:
    """The verified identity of one call."""

    name: str                          # the principal's name: audit records and entries' `by`
    source: str                        # the caller's address (the original caller's, if forwarded)
    method: str
    principal: A.Principal | None      # None: ACL disabled (no checks, nothing filtered)
    bearer: str = ""                   # the credential as sent, passed along when forwarding
    forwarded_by: str = ""             # the node that forwarded it (signature verified)
    request_id: str = ""

    def audit(self, target: str = "") -> dict[str, str]:
        """The audit fields an allowed mutating call carries inside its entry."""
        return {"principal": self.name, "source": self.source, "action": action_of(self.method),
                "target": target, "request_id": self.request_id}


CALL: contextvars.ContextVar[CallInfo | None] = contextvars.ContextVar("schedd_call", default=None)


def current() -> CallInfo | None:
    return CALL.get()


def read_filter(capability: str = "read") -> A.TeamFilter | None:
    """The teams the current caller may list; None: no restriction (ACL disabled)."""
    info = CALL.get()
    if info is None or info.principal is None:
        return None
    return A.visible_teams(info.principal, capability)


def may(capability: str, resource: str) -> bool:
    """Whether the current caller holds `capability` on `resource` (ACL disabled: yes)."""
    info = CALL.get()
    return info is None or info.principal is None or bool(A.allowed(info.principal, capability, resource))


def action_of(method: str) -> str:
    """`/schedd.v1.Scheduler/PutJob` -> `Scheduler.PutJob`."""
    service, _, name = method.rpartition("/")
    return f"{service.rpartition('.')[2]}.{name}" if service else method


# ---------------------------------------------------------------- node authentication


class NodeSigner:
    """HMAC-SHA256 over a forwarded call's identity fields, keyed from the cluster secret: what
    makes a forwarded call's principal trustworthy (a client does not know the key)."""

    def __init__(self, secret: str) -> None:
        seed = secret.encode() if secret else os.urandom(32)   # one node: nothing forwards to it
        self.key = hmac.new(seed, b"schedd-forwarding-v1", hashlib.sha256).digest()

    def _mac(self, node: str, principal: str, source: str, method: str, at: str) -> str:
        text = "\n".join((node, principal, source, method, at)).encode()
        return hmac.new(self.key, text, hashlib.sha256).hexdigest()

    def metadata(self, node: str, info: CallInfo | None, method: str, now_ms: int,
                 fallback_principal: str = "") -> list[tuple[str, str]]:
        """What a node sends with a call it makes for a caller: the caller's bearer (so the
        receiver re-authenticates it) and the signed identity."""
        name = info.name if info is not None else fallback_principal or f"node:{node}"
        source = info.source if info is not None else ""
        at = str(now_ms)
        out = [(FORWARDED, node), (PRINCIPAL, name), (SOURCE, source), (SIGNED_AT, at),
               (SIGNATURE, self._mac(node, name, source, method, at))]
        if info is not None and info.bearer:
            out.append((AUTHORIZATION, info.bearer))
        return out

    def verify(self, md: dict[str, str], method: str, now_ms: int) -> tuple[str, str, str] | None:
        """(node, principal, source) of a validly signed, fresh call; None otherwise."""
        sig = md.get(SIGNATURE)
        if not sig:
            return None
        node, name, source, at = (md.get(k, "") for k in (FORWARDED, PRINCIPAL, SOURCE, SIGNED_AT))
        try:
            fresh = abs(now_ms - int(at)) <= SIGNATURE_WINDOW_MS
        except ValueError:
            return None
        if not node or not fresh or not hmac.compare_digest(sig, self._mac(node, name, source, method, at)):
            return None
        return node, name, source


# ---------------------------------------------------------------- resources of a request


@dataclass(slots=True, frozen=True)
class Owner:
    """A team a request touches (None: the object it names does not exist), and how to answer a
    caller who may not read that team (no existence oracle). `hidden` is "" for a team the caller
    named itself (a spec's team: naming it back reveals nothing); otherwise it is what the call
    answers for an object that does not exist, so a caller who cannot read the team cannot tell
    "exists in another team" from "does not exist" (an existence oracle)."""

    team: str | None
    hidden: str = ""
    code: grpc.StatusCode = grpc.StatusCode.NOT_FOUND


def _job_team(st: Any, name: str) -> str | None:
    job = st.jobs.get(name)
    return None if job is None else job.team


def _dag_team(st: Any, name: str) -> str | None:
    dag = st.dags.get(name)
    return None if dag is None else dag.team


def _job(st: Any, name: str) -> list[Owner]:
    return [Owner(_job_team(st, name), f"job {name!r} not found")]


def _dag(st: Any, name: str) -> list[Owner]:
    return [Owner(_dag_team(st, name), f"DAG {name!r} not found")]


def _execution(st: Any, execution_id: str) -> list[Owner]:
    try:
        name, _ = parse_execution_id(execution_id)
    except ValidationError:
        team = None
    else:
        team = _job_team(st, name)
    return [Owner(team, f"execution {execution_id!r} not found")]


def _taken(kind: str, name: str, old: str) -> Owner:
    """The team of an object a write would replace: the name is taken, which cannot be hidden
    (names are global), but the team is not named to a caller who may not read it."""
    return Owner(old, f"permission denied: the name {name!r} belongs to a {kind} of a team you cannot read",
                 grpc.StatusCode.PERMISSION_DENIED)


def _spec_teams(st: Any, specs: Iterable[Any]) -> list[Owner]:
    """A spec's own team and, for a job that exists, the team it moves away from."""
    out: list[Owner] = []
    for spec in specs:
        out.append(Owner(spec.team or DEFAULT_TEAM))
        old = _job_team(st, spec.name)
        if old is not None:
            out.append(_taken("job", spec.name, old))
    return out


def _dag_spec_teams(st: Any, spec: Any) -> list[Owner]:
    old = _dag_team(st, spec.name)
    return [Owner(spec.team or DEFAULT_TEAM), *([_taken("DAG", spec.name, old)] if old is not None else [])]


def _row_team(rows: Any, kind: str, name: str) -> list[Owner]:
    """A calendar's or blackout's team; none for a cluster-wide one (the servicer checks operator)."""
    row = rows.get(name)
    if row is not None and not row.team:
        return []
    return [Owner(None if row is None else row.team, f"{kind} {name!r} not found")]


def _owned(rows: Any, kind: str, name: str, team: str) -> list[Owner]:
    """The team a write names and, for a row that exists, the team it belongs to now."""
    out = [Owner(team)] if team else []
    row = rows.get(name)
    if row is not None and row.team:
        out.append(_taken(kind, name, row.team))
    return out


Resolver = Callable[[Any, Any], list[Owner]]
_S, _D, _K = "/schedd.v1.Scheduler/", "/schedd.v1.Dags/", "/schedd.v1.Calendars/"
RESOLVERS: dict[str, Resolver] = {
    _S + "PutJob": lambda st, r: _spec_teams(st, [r.job]),
    _S + "PutJobs": lambda st, r: _spec_teams(st, r.jobs),
    _S + "DiffJobs": lambda st, r: _spec_teams(st, r.jobs),
    **{_S + m: (lambda st, r: _job(st, r.name)) for m in (
        "GetJob", "PauseJob", "ResumeJob", "DeleteJob", "TriggerJob", "BackfillJob")},
    _S + "ListInstants": lambda st, r: _job(st, r.job),
    _S + "GetExecution": lambda st, r: _execution(st, r.id),
    _S + "CancelExecution": lambda st, r: _execution(st, r.id),
    _S + "RetryExecution": lambda st, r: _execution(st, r.id),
    _S + "ListExecutions": lambda st, r: _job(st, r.job) if r.job else [],
    _S + "ListJobs": lambda st, r: [Owner(r.team)] if r.team else [],
    _S + "WatchExecutions": lambda st, r: _job(st, r.job) if r.job else [],
    _S + "WatchJobs": lambda st, r: [Owner(r.team)] if r.team else [],
    _S + "ListQuotas": lambda st, r: [],
    _S + "Forecast": lambda st, r: [],
    _S + "Explain": lambda st, r: _execution(st, r.id) if r.id else _job(st, r.job),
    _D + "PutDag": lambda st, r: _dag_spec_teams(st, r.dag),
    **{_D + m: (lambda st, r: _dag(st, r.name)) for m in (
        "GetDag", "DeleteDag", "RunDag", "ListDagRuns", "GetDagRun", "ClearDagTask", "WatchDagRun")},
    _D + "ListDags": lambda st, r: [],
    "/schedd.v1.Logs/ReadRunLogs": lambda st, r: _execution(st, r.id),
    _K + "PutCalendar": lambda st, r: _owned(st.calendars, "calendar", r.calendar.name, r.calendar.team),
    _K + "GetCalendar": lambda st, r: _row_team(st.calendars, "calendar", r.name),
    _K + "DeleteCalendar": lambda st, r: _row_team(st.calendars, "calendar", r.name),
    _K + "ListCalendars": lambda st, r: [Owner(r.team)] if r.team else [],
    _K + "PutBlackout": lambda st, r: _owned(st.blackouts, "blackout", r.blackout.name, r.blackout.team),
    _K + "DeleteBlackout": lambda st, r: _row_team(st.blackouts, "blackout", r.name),
    _K + "ListBlackouts": lambda st, r: [Owner(r.team)] if r.team else [],
}


def _target(method: str, request: Any) -> str:
    """What an audit record of `request` names (best effort: the first naming field)."""
    for attr, prefix in (("name", ""), ("id", "execution:"), ("key", "quota:"), ("job", "")):
        value = getattr(request, attr, None)
        if isinstance(value, str) and value:
            return prefix + value
        inner = getattr(value, "name", None) if attr == "job" and value is not None else None
        if isinstance(inner, str) and inner:
            return inner
    dag = getattr(request, "dag", None)
    dag_name = getattr(dag, "name", None) if dag is not None and not isinstance(dag, str) else None
    if isinstance(dag_name, str) and dag_name:
        return f"dag:{dag_name}"
    return ""


# ---------------------------------------------------------------- rate limits


@dataclass(slots=True)
class RateLimiter:
    """A token bucket per principal for mutating calls: `rate` per second, up to `burst`."""

    rate: float
    burst: int
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)   # name -> (tokens, at)

    def take(self, name: str, now: float) -> float:
        """0 when allowed; else the seconds until one call would be."""
        if self.rate <= 0:
            return 0.0
        tokens, at = self.buckets.get(name, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self.buckets[name] = (tokens - 1.0, now)
            if len(self.buckets) > 10_000:              # forget the idle (full) buckets
                self.buckets = {k: v for k, v in self.buckets.items() if v[0] < self.burst - 1}
            return 0.0
        self.buckets[name] = (tokens, now)
        return (1.0 - tokens) / self.rate


# ---------------------------------------------------------------- the audit queue


class AuditQueue:
    """Denied calls and login failures, proposed in batches (`audit_append`) so a flood of them
    costs one entry per tick; the trail's per-principal limit decides what is kept."""

    def __init__(self, propose: Callable[[str], Any], clock: Clock, limit: int = 2_000) -> None:
        self.propose, self.clock, self.limit = propose, clock, limit
        self.pending: list[dict[str, str]] = []
        self.dropped = 0
        self._wake = asyncio.Event()

    def add(self, row: dict[str, str]) -> None:
        if len(self.pending) >= self.limit:
            self.dropped += 1                 # the node's own bound: the trail's is per principal
            return
        self.pending.append(row)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending:
                batch, self.pending = self.pending[:MAX_EVENTS_PER_ENTRY], self.pending[MAX_EVENTS_PER_ENTRY:]
                try:
                    await self.propose(C.encode(C.AUDIT_APPEND, rid="", now=self.clock.now_ms(), term=0,
                                                by="audit", events=batch))
                except Exception as e:  # noqa: BLE001 - best effort; logged, never raised
                    log.warning("audit: %d denied records not committed (%s)", len(batch), e)
                    await asyncio.sleep(1.0)
            await asyncio.sleep(AUDIT_FLUSH_S)


# ---------------------------------------------------------------- the interceptor


class Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, trailing: tuple[tuple[str, str], ...] = (),
                 *, unknown_token: bool = False) -> None:
        super().__init__(message)
        self.code, self.message, self.trailing = code, message, trailing
        self.unknown_token = unknown_token      # perhaps only not applied here yet


@dataclass(slots=True)
class AuthInterceptor(grpc.aio.ServerInterceptor):
    """See the module docstring. `table()` returns a consistent view of the ACL table and the
    state (the caller holds no lock: resolution copies what it needs under `lock`)."""

    node: Any                          # RaftNode: .lock, .state, .cfg
    clock: Clock
    signer: NodeSigner
    enabled: bool = True
    queue: AuditQueue | None = None
    limiter: RateLimiter | None = None
    # What a call over the node's own unix socket is recorded as: only the web dashboard dials it
    # (schedd.runtime.http), so its audit records name the dashboard as the channel.
    local_source: str = ""
    # A sharded cluster (schedd.api.shard_routing): the groups whose replicas hold the objects a
    # call names (a batch of jobs may name several). The ACL table is group 0's, `node`.
    groups_of: Callable[[str, Any], list[tuple[Any, Any]]] | None = None

    def nodes_for(self, method: str, request: Any) -> list[tuple[Any, Any]]:
        """The replicas a call's teams are resolved against, each with the part of the request
        it holds (a sharded node: the owning groups it hosts)."""
        return self.groups_of(method, request) if self.groups_of is not None else [(self.node, request)]

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        raw = tuple(handler_call_details.invocation_metadata or ())
        md = {k: v for k, v in raw if isinstance(v, str)}
        signed = self.signer.verify(md, method, self.clock.now_ms())
        handler = await continuation(handler_call_details)
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        return self._wrap(handler, method, md, signed)

    def _wrap(self, handler, method: str, md: dict[str, str], signed):
        admit = self._admit

        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(request, context):
                token = CALL.set(await admit(method, md, signed, request, context))
                try:
                    return await inner(request, context)
                finally:
                    CALL.reset(token)
            return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=handler.request_deserializer,
                                                       response_serializer=handler.response_serializer)
        if handler.stream_stream is not None:
            inner_s = handler.stream_stream

            async def stream(request_iterator, context):
                CALL.set(await admit(method, md, signed, None, context))
                if inspect.isasyncgenfunction(inner_s):
                    async for msg in inner_s(request_iterator, context):
                        yield msg
                else:
                    await inner_s(request_iterator, context)
            return grpc.stream_stream_rpc_method_handler(stream, request_deserializer=handler.request_deserializer,
                                                         response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:     # Backup.SaveSnapshot
            inner_us = handler.unary_stream

            async def unary_stream(request, context):
                CALL.set(await admit(method, md, signed, request, context))
                async for msg in inner_us(request, context):
                    yield msg
            return grpc.unary_stream_rpc_method_handler(unary_stream, request_deserializer=handler.request_deserializer,
                                                        response_serializer=handler.response_serializer)
        return handler                      # no stream-unary RPCs in schedd.v1

    async def _admit(self, method: str, md: dict[str, str], signed, request, context) -> CallInfo:
        """`check`, answering a refusal. A token this replica does not know may be one the
        leader just created (a client uses it at once, on a follower that lags by a few
        entries): such a call waits up to CATCH_UP_S for this replica to apply what the leader
        has committed, then is judged again."""
        deadline = time.monotonic() + CATCH_UP_S
        peer = context.peer() or ""
        if peer.startswith("unix:") and self.local_source:
            peer = self.local_source
        while True:
            try:
                return self.check(method, md, signed, request, peer, context, quiet=True)
            except Denied as d:
                denied = d
            settled = time.monotonic() >= deadline - CATCH_UP_S + SETTLE_S and not self._behind()
            if not denied.unknown_token or time.monotonic() >= deadline or settled or self._leads():
                break
            await asyncio.sleep(0.05)
        halted = self._halted()
        if denied.unknown_token and halted:
            # A halted node stopped applying at some index (its build is below the cluster's
            # level): a token made after that is unknown here but may be good. Say why this node
            # cannot judge it, rather than call a good token unknown (nothing is audited: a
            # halted node commits nothing).
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"{halted} (this node stopped applying, so it cannot check a token made since)")
        if denied.unknown_token:            # judged for good now: audited this time
            try:
                return self.check(method, md, signed, request, peer, context)
            except Denied as d:
                denied = d
        await context.abort(denied.code, denied.message, trailing_metadata=denied.trailing)
        raise denied                        # unreachable: abort raises

    def _halted(self) -> str:
        """Why this node halted ("" if it did not): schedd.api.halted, raft_patches: halting."""
        try:
            return str(getattr(self.node, "halted", "") or "")
        except Exception:  # noqa: BLE001 - a node without the attribute has not halted
            return ""

    def _leads(self) -> bool:
        try:
            return bool(self.node.is_leader())
        except Exception:  # noqa: BLE001
            return True

    def _behind(self) -> bool:
        """Whether this replica has yet to apply entries the leader has committed."""
        try:
            st = self.node.status()
        except Exception:  # noqa: BLE001 - a node without a status: judge now
            return False
        return st.applied_index < max(st.leader_commit_index, 1)

    # The decision, synchronous and separately testable.
    def check(self, method: str, md: dict[str, str], signed, request, peer: str, context=None,
              *, quiet: bool = False) -> CallInfo:
        """The call's identity, or Denied. `quiet`: an unknown token is not audited yet (the
        caller will ask again once this replica has caught up)."""
        node, signed_name, signed_source = signed if signed is not None else ("", "", "")
        source = signed_source or peer
        bearer = md.get(AUTHORIZATION, "")
        rid = str(getattr(request, "request_id", "") or "") if request is not None else ""
        need = need_of(method)
        if not self.enabled or (signed is not None and method in NODE_CALLS):
            # ACL off; or a node asking a peer for its part of a call it already authorized
            return CallInfo(signed_name or peer or "unknown", source, method, None, bearer, node, rid)
        principal = self._authenticate(bearer, signed_name, context, method, source, request, rid,
                                       open_call=need is not None and need.scope == "open", quiet=quiet)
        name = principal.name if principal is not None else "unauthenticated"
        info = CallInfo(name, source, method, principal, bearer, node, rid)
        if need is None:
            self._deny(info, request, "", f"permission denied: {method} is not in the capability table")
        elif need.scope != "open":
            assert principal is not None
            self._authorize(info, principal, need, request)
        self._rate_limit(info, need)
        return info

    def _authenticate(self, bearer: str, signed_name: str, context, method: str, source: str, request,
                      rid: str, *, open_call: bool, quiet: bool = False) -> A.Principal | None:
        """The principal of the credential; raises Denied(UNAUTHENTICATED) (open calls: None)."""
        result: A.Principal | A.Refusal
        now = self.clock.now_ms()
        cert_name = ""
        with self.node.lock:
            table = self.node.state.acl
            if bearer:
                scheme, _, value = bearer.partition(" ")
                parsed = A.parse_bearer(value.strip()) if scheme.lower() == "bearer" else \
                    A.Refusal("malformed", "authorization is not 'Bearer <token>'")
                result = parsed if isinstance(parsed, A.Refusal) else A.authenticate(table, *parsed, now)
            else:
                cert_name = self._cert_name(context, signed_name)
                cert = self._cert_principal(cert_name)
                result = cert if cert is not None else A.authenticate(table, None, None, now)
        if isinstance(result, A.Principal):
            return result
        if open_call and result.code == "unauthenticated":
            return None
        unknown = result.code == "unknown_token"
        message, reason = result.message, result.reason
        if cert_name.startswith(USER_CERT):
            message = (f"authentication required: a user certificate ({cert_name}) holds no rights "
                       "of its own; pass your team's token (SCHEDD_TOKEN, --token or token_file)")
            reason = f"{cert_name} without a token: {reason}"
        if not (unknown and quiet):
            self._queue(CallInfo("unauthenticated", source, method, None, request_id=rid), request,
                        f"login failure: {reason}", accessor=result.accessor)
        raise Denied(grpc.StatusCode.UNAUTHENTICATED, message, unknown_token=unknown)

    @staticmethod
    def _cert_name(context, signed_name: str) -> str:
        """The principal (``kind/name``) of the mTLS peer, or of the certificate a node forwarded
        the call for; "" without one."""
        if signed_name.startswith("cert:"):
            return signed_name[len("cert:"):]
        if context is None:
            return ""
        try:
            return peer_principal(context) or ""
        except Exception:  # noqa: BLE001 - no auth context: plaintext
            return ""

    @staticmethod
    def _cert_principal(name: str) -> A.Principal | None:
        """What a certificate grants by its kind alone: an admin certificate is management, node
        and worker ones name a caller that holds nothing; a user certificate (or none) is None,
        so the caller is anonymous: its token, never its certificate, gives it rights."""
        if not name or name.startswith(USER_CERT):
            return None
        grants = A._grants(A.MANAGEMENT) if name.startswith("admin/") else []
        return A.Principal(f"cert:{name}", "client", tuple(grants))

    def _authorize(self, info: CallInfo, principal: A.Principal, need: Need, request) -> None:
        if need.scope == "cluster":
            if principal.kind == "worker" and info.method in WORKER_READS:
                return
            decision = A.allowed(principal, need.capability, A.CLUSTER)
            if not decision:
                self._deny(info, request, "cluster", decision.message)
            return
        if need.scope == "worker":
            if principal.kind != "worker":
                self._deny(info, request, "", "permission denied: missing capability 'serve': "
                                              f"Workers.{info.method.rpartition('/')[2]} needs a worker token")
            return
        resolve = RESOLVERS.get(info.method)
        owners: list[Owner] = []
        if resolve is not None and request is not None:
            for node, part in self.nodes_for(info.method, request):     # a sharded cluster: the owning groups
                with node.lock:
                    owners.extend(resolve(node.state, part))
        if not owners and need.filtered:
            return                              # a list: the servicer filters its rows
        # Each distinct team once, in order (a batch names its team once per job): the same
        # decisions, and the first refused team is still the one named.
        first: dict[str | None, Owner] = {}
        for owner in owners or [Owner(None)]:
            first.setdefault(owner.team, owner)
        for owner in first.values():
            self._decide(info, principal, need, owner, request)

    def _decide(self, info: CallInfo, principal: A.Principal, need: Need, owner: Owner, request) -> None:
        """Allow, or refuse revealing nothing the caller may not read: a team the caller cannot
        read is answered as if the object did not exist (`Owner.hidden`), and a caller who holds
        the capability on no team at all is told just that, whether the object exists or not."""
        resource = A.team_resource(owner.team) if owner.team is not None else ""
        decision = A.allowed(principal, need.capability, resource) if resource else None
        if decision:
            return
        if decision is not None and (not owner.hidden or A.allowed(principal, "read", resource)):
            self._deny(info, request, resource, decision.message)
        visible = A.visible_teams(principal, need.capability)
        if not visible.everything and not visible.patterns:
            self._deny(info, request, "", f"permission denied: missing capability "
                                          f"{need.capability!r} on any team")
        if decision is not None:                # exists, in a team the caller cannot read
            self._queue(info, request, decision.message)
            raise Denied(owner.code, owner.hidden)
        # Unknown object: the servicer says NOT_FOUND (on the leader, which may know it already).

    def _deny(self, info: CallInfo, request, resource: str, message: str) -> None:
        self._queue(info, request, message)
        raise Denied(grpc.StatusCode.PERMISSION_DENIED, message)

    def _rate_limit(self, info: CallInfo, need: Need | None) -> None:
        if self.limiter is None or need is None or need.capability not in MUTATING_CAPABILITIES \
                or info.forwarded_by:
            return
        wait = self.limiter.take(info.name, time.monotonic())
        if wait > 0:
            ms = max(1, int(wait * 1000))
            raise Denied(grpc.StatusCode.RESOURCE_EXHAUSTED,
                         f"rate limit: {info.name} sends mutating calls faster than "
                         f"{self.limiter.rate:g}/s (acl.rate_per_second); retry in {ms} ms",
                         ((RETRY_AFTER, str(ms)),))

    def _queue(self, info: CallInfo, request, detail: str, accessor: str | None = None) -> None:
        if self.queue is None:
            return
        target = _target(info.method, request) if request is not None else ""
        if accessor:
            target = target or f"token:{accessor}"
        self.queue.add({"principal": info.name, "source": info.source, "action": action_of(info.method),
                        "target": target[:A.MAX_DESCRIPTION], "request_id": info.request_id[:256],
                        "outcome": "denied", "detail": detail[:1024]})
