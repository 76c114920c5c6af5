"""gRPC servicers of the Acl and Audit services (proto/schedd_proto/acl.proto).

Same rules as `schedd.api.service`: writes go to the leader (forwarded once), input is validated
here (`schedd.core.acl.parse_*`) before anything is proposed, apply decides what depends on the
table. A token's secret is minted here from `os.urandom` (never inside apply), only its hash is
proposed, and the bearer is answered once. Audit reads answer from this node's own replica (so a
test or an operator can check every node), never forwarded.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from schedd.api import auth
from schedd.api.service import CommittingService, Router, routed
from schedd.core import acl as A
from schedd.core import audit as U
from schedd.core import commands as C
from schedd.core.access import MAX_NOTE
from schedd.ports.clock import Clock
from schedd.ports.metrics import Metrics
from schedd.replication.node import RaftNode
from schedd_proto import acl_pb2 as apb
from schedd_proto import acl_pb2_grpc as apb_grpc


def policy_to_pb(p: A.Policy) -> apb.AclPolicy:
    return apb.AclPolicy(name=p.name, description=p.description,
                         rules=[apb.AclRule(pattern=r.pattern, capabilities=sorted(r.capabilities)) for r in p.rules])


def role_to_pb(r: A.Role) -> apb.AclRole:
    return apb.AclRole(name=r.name, description=r.description, policies=list(r.policies))


def token_to_pb(t: A.Token) -> apb.AclToken:
    return apb.AclToken(accessor=t.accessor, kind=t.kind, description=t.description, roles=list(t.roles),
                        policies=list(t.policies), expires_ms=t.expires_ms or 0, max_slots=t.max_slots,
                        created_ms=t.created_ms)


def record_to_pb(r: U.AuditRecord) -> apb.AuditRecord:
    return apb.AuditRecord(seq=r.seq, time_ms=r.time_ms, principal=r.principal, source=r.source,
                           action=r.action, target=r.target, outcome=r.outcome, request_id=r.request_id,
                           log_index=r.log_index, detail=r.detail, suppressed=r.suppressed, hash=r.hash)


class _Writes(CommittingService):
    """What both servicers share: commit an entry (CommittingService) and map input errors."""

    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, router: Router) -> None:
        self.node, self.clock, self.metrics, self.router = node, clock, metrics, router

    @staticmethod
    async def _invalid(context, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except (A.AclInputError, U.AuditInputError) as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))


class Minted(Protocol):
    @property
    def code(self) -> str: ...

    @property
    def expires_in_s(self) -> float: ...


class LoginLinks(Protocol):
    """This node's one-time dashboard login codes (schedd.dashboard.login_codes.LoginCodes):
    `url` is its dashboard ("" while it serves none), `mint` None when too many are live."""

    url: str
    ttl_s: float

    def mint(self, token: str) -> Minted | None: ...


class AclService(_Writes, apb_grpc.AclServicer):
    SERVICE = "Acl"

    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, router: Router, *,
                 login_links: LoginLinks | None = None,
                 audit: Callable[[dict[str, str]], None] | None = None) -> None:
        super().__init__(node, clock, metrics, router)
        self.login_links, self.audit = login_links, audit

    def _read(self, fn):
        with self.node.lock:
            return fn(self.node.state.acl)

    async def _one(self, context, what: str, name: str, find, to_pb):
        """One policy, role or token by name (NOT_FOUND naming it)."""
        row = self._read(lambda t: find(t, name))
        if row is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no {what} {name!r}")
        return to_pb(row)

    async def _mint(self, context, kind: str, request, *, bootstrap: bool) -> apb.TokenSecret:
        minted = A.mint_token(os.urandom(A.TOKEN_RANDOM_BYTES))
        now = self.clock.now_ms()
        if bootstrap:
            row: dict[str, Any] = {"accessor": minted.accessor, "secret_hash": minted.secret_hash, "kind": "client",
                   "description": "bootstrap management token", "policies": [A.MANAGEMENT_POLICY]}
        else:
            if request.ttl_ms < 0:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ttl must be >= 0 (0: never expires)")
            row = {"accessor": minted.accessor, "secret_hash": minted.secret_hash, "kind": request.kind or "client",
                   "description": request.description, "roles": list(request.roles),
                   "policies": list(request.policies), "max_slots": request.max_slots,
                   "expires_ms": now + request.ttl_ms if request.ttl_ms else None}
        # Validated here with the proposal's time standing in for the entry's (apply re-checks).
        token = await self._invalid(context, A.parse_token, row, created_ms=now)
        await self._commit(context, kind, request.request_id, token=row)
        with self.node.lock:
            stored = self.node.state.acl.tokens.get(token.accessor, token)
        return apb.TokenSecret(token=token_to_pb(stored), secret=minted.bearer)

    @routed(write=True)
    async def Bootstrap(self, request: apb.BootstrapRequest, context) -> apb.TokenSecret:
        if self._read(lambda t: t.bootstrapped):
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, "ACL bootstrap was already done on this cluster")
        return await self._mint(context, C.ACL_BOOTSTRAP, request, bootstrap=True)

    async def WhoAmI(self, request, context) -> apb.WhoAmIResponse:
        info = auth.current()
        p = info.principal if info is not None else None
        if info is None or p is None:
            if self.node.cfg.acl.enabled:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authentication required: pass a token")
            return apb.WhoAmIResponse(principal=info.name if info else "", acl_enabled=False)
        return apb.WhoAmIResponse(principal=p.name, kind=p.kind, acl_enabled=True, grants=[
            apb.AclRule(pattern=g.pattern, capabilities=sorted(g.capabilities)) for g in p.grants])

    async def LoginLink(self, request: apb.LoginLinkRequest, context) -> apb.LoginLinkResponse:
        """A one-time link to THIS node's dashboard for the token the call was authenticated with
        (never forwarded: the code lives in this node's memory, and the link must open the
        dashboard that can redeem it). The dashboard logs in with a client token only: a caller
        with a certificate alone, the anonymous policy or a worker token is refused, saying why
        (denied records, like the interceptor's). A minted link is audited: it is a login."""
        links = self.login_links
        if links is None or not links.url:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"node {self.node.cfg.node_id} serves no dashboard (its metrics_address is off)")
        assert links is not None
        base = links.url if links.url.endswith("/") else links.url + "/"
        info = auth.current()
        scheme, _, value = (info.bearer if info is not None else "").partition(" ")
        token = value.strip() if scheme.lower() == "bearer" else ""
        p = info.principal if info is not None else None
        if self.node.cfg.acl.enabled and p is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authentication required: pass a token")
        if request.url_only:                   # the address alone logs nobody in
            return apb.LoginLinkResponse(dashboard_url=base)
        if self.node.cfg.acl.enabled:
            why = ""
            assert p is not None
            if not token:
                why = (f"the dashboard logs in with a token, and this call carried none (it is {p.name}): "
                       "pass --token, or set token / token_file in the context (SCHEDD_TOKEN)")
            elif p.kind == "worker":
                why = "a worker token cannot log in to the dashboard: use a client token"
            if why:
                self._record(info, "denied", f"permission denied: {why}")
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"permission denied: {why}")
        minted = links.mint(token)
        if minted is None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"too many unused login links on node {self.node.cfg.node_id}: "
                                f"try again within {links.ttl_s:g} s")
        assert minted is not None
        self._record(info, "allowed", f"one-time dashboard login link, valid {minted.expires_in_s:g} s")
        return apb.LoginLinkResponse(link=f"{base}login#code={minted.code}", dashboard_url=base,
                                     expires_in_ms=int(minted.expires_in_s * 1000))

    def _record(self, info: auth.CallInfo | None, outcome: str, detail: str) -> None:
        """An audit record of a login link (committed in the next batch of the audit queue)."""
        if self.audit is None or info is None:
            return
        self.audit({"principal": info.name, "source": info.source, "action": auth.action_of(info.method),
                    "target": f"dashboard:{self.node.cfg.node_id}", "request_id": info.request_id,
                    "outcome": outcome, "detail": detail})

    @routed(write=True)
    async def PutPolicy(self, request: apb.PutPolicyRequest, context) -> apb.AclPolicy:
        d = {"name": request.policy.name, "description": request.policy.description,
             "rules": {r.pattern: list(r.capabilities) for r in request.policy.rules}}
        policy = await self._invalid(context, A.parse_policy, d)
        await self._commit(context, C.ACL_POLICY_PUT, request.request_id, policy=A.policy_to_dict(policy),
                           name=policy.name)
        return policy_to_pb(policy)

    @routed(write=False)
    async def GetPolicy(self, request: apb.AclName, context) -> apb.AclPolicy:
        return await self._one(context, "policy", request.name, A.AclTable.policy, policy_to_pb)

    @routed(write=False)
    async def ListPolicies(self, request, context) -> apb.ListPoliciesResponse:
        policies, anon = self._read(lambda t: ([A.MANAGEMENT, *(t.policies[k] for k in sorted(t.policies))],
                                               t.anonymous_policy))
        return apb.ListPoliciesResponse(policies=[policy_to_pb(p) for p in policies], anonymous_policy=anon or "")

    @routed(write=True)
    async def DeletePolicy(self, request: apb.AclName, context) -> apb.AclDeleted:
        await self._known_or_abort(context, lambda st: request.name in st.acl.policies or request.name in A.RESERVED_NAMES,
                                   f"no policy {request.name!r}")
        await self._commit(context, C.ACL_POLICY_DELETE, request.request_id, name=request.name)
        return apb.AclDeleted(name=request.name)

    @routed(write=True)
    async def PutRole(self, request: apb.PutRoleRequest, context) -> apb.AclRole:
        d = {"name": request.role.name, "description": request.role.description,
             "policies": list(request.role.policies)}
        role = await self._invalid(context, A.parse_role, d)
        await self._commit(context, C.ACL_ROLE_PUT, request.request_id, role=A.role_to_dict(role), name=role.name)
        return role_to_pb(role)

    @routed(write=False)
    async def GetRole(self, request: apb.AclName, context) -> apb.AclRole:
        return await self._one(context, "role", request.name, lambda t, n: t.roles.get(n), role_to_pb)

    @routed(write=False)
    async def ListRoles(self, request, context) -> apb.ListRolesResponse:
        roles = self._read(lambda t: [t.roles[k] for k in sorted(t.roles)])
        return apb.ListRolesResponse(roles=[role_to_pb(r) for r in roles])

    @routed(write=True)
    async def DeleteRole(self, request: apb.AclName, context) -> apb.AclDeleted:
        await self._known_or_abort(context, lambda st: request.name in st.acl.roles, f"no role {request.name!r}")
        await self._commit(context, C.ACL_ROLE_DELETE, request.request_id, name=request.name)
        return apb.AclDeleted(name=request.name)

    @routed(write=True)
    async def CreateToken(self, request: apb.CreateTokenRequest, context) -> apb.TokenSecret:
        return await self._mint(context, C.ACL_TOKEN_CREATE, request, bootstrap=False)

    @routed(write=False)
    async def GetToken(self, request: apb.AclName, context) -> apb.AclToken:
        return await self._one(context, "token", request.name, lambda t, n: t.tokens.get(n), token_to_pb)

    @routed(write=False)
    async def ListTokens(self, request, context) -> apb.ListTokensResponse:
        tokens = self._read(lambda t: [t.tokens[k] for k in sorted(t.tokens)])
        return apb.ListTokensResponse(tokens=[token_to_pb(t) for t in tokens])

    @routed(write=True)
    async def DeleteToken(self, request: apb.AclName, context) -> apb.AclDeleted:
        await self._known_or_abort(context, lambda st: request.name in st.acl.tokens, f"no token {request.name}")
        await self._commit(context, C.ACL_TOKEN_DELETE, request.request_id, accessor=request.name,
                           name=f"token:{request.name}")
        return apb.AclDeleted(name=request.name)

    @routed(write=True)
    async def SetAnonymous(self, request: apb.SetAnonymousRequest, context) -> apb.SetAnonymousResponse:
        await self._commit(context, C.ACL_ANONYMOUS_SET, request.request_id, policy=request.policy or None,
                           name="anonymous")
        return apb.SetAnonymousResponse(policy=request.policy)


class AuditService(_Writes, apb_grpc.AuditServicer):
    SERVICE = "Audit"

    async def List(self, request: apb.ListAuditRequest, context) -> apb.ListAuditResponse:
        if request.outcome and request.outcome not in U.OUTCOMES:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"outcome must be one of {', '.join(U.OUTCOMES)}")
        with self.node.lock:
            trail = self.node.state.audit
            rows = U.select(trail.records, since_ms=request.since_ms or None, principal=request.principal or None,
                            target=request.target or None, action=request.action or None,
                            outcome=request.outcome or None, limit=request.limit or None,  # type: ignore[arg-type]
                            until_ms=request.until_ms or None, before_seq=request.before_seq or None,
                            newest_first=request.newest_first)
            anchor, head = trail.anchor, trail.head
        return apb.ListAuditResponse(records=[record_to_pb(r) for r in rows], anchor_seq=anchor.next_seq,
                                     anchor_hash=anchor.hash, head=head, answered_by=self.node.cfg.node_id)

    async def Verify(self, request, context) -> apb.VerifyAuditResponse:
        with self.node.lock:
            trail = self.node.state.audit
            bad, n, head = trail.verify(), len(trail.records), trail.head
            seq = trail.records[bad].seq if bad is not None else 0
        return apb.VerifyAuditResponse(ok=bad is None, broken_at_seq=seq, records=n, head=head,
                                       answered_by=self.node.cfg.node_id)

    @routed(write=True)
    async def Configure(self, request: apb.ConfigureAuditRequest, context) -> apb.AuditConfig:
        await self._invalid(context, U.Retention, request.max_age_ms, request.max_records)
        await self._invalid(context, U.DeniedLimit, request.denied_burst, request.denied_refill_ms)
        await self._commit(context, C.AUDIT_CONFIG, request.request_id or uuid.uuid4().hex,
                           max_age_ms=request.max_age_ms, max_records=request.max_records,
                           burst=request.denied_burst, refill_ms=request.denied_refill_ms, name="audit")
        with self.node.lock:
            t = self.node.state.audit
            return apb.AuditConfig(max_age_ms=t.retention.max_age_ms, max_records=t.retention.max_records,
                                   denied_burst=t.denied_limit.burst, denied_refill_ms=t.denied_limit.refill_ms)

    @routed(write=True)
    async def Note(self, request: apb.AuditNoteRequest, context) -> apb.AuditNoteResponse:
        """An operator's note (feature level 2: refused with FAILED_PRECONDITION, by _commit,
        until the leader has raised the cluster's level)."""
        note = request.note
        if not note.strip() or len(note) > MAX_NOTE:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"a note is 1 to {MAX_NOTE} characters")
        rid = request.request_id or uuid.uuid4().hex
        await self._commit(context, C.AUDIT_NOTE, rid, note=note)
        with self.node.lock:
            record = next((r for r in reversed(self.node.state.audit.records)
                           if r.target == note and r.action in ("Audit.Note", C.AUDIT_NOTE)), None)
        return apb.AuditNoteResponse(record=record_to_pb(record) if record is not None else None)
