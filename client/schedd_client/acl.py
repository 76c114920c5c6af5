"""Access control and the audit trail in the SDK: the plan builders of the ``acl_*`` and
``audit_*`` methods of ``Client`` / ``AsyncClient`` (declared in ``_methods``) and the audit file
helpers (``schedctl acl`` / ``schedctl audit``).

Every call authenticates with the client's ``token=`` (``SCHEDD_TOKEN``). ``acl_bootstrap`` needs
none: it works once per cluster and returns the first management token, whose ``secret`` is
shown this once (the cluster keeps only a hash). ``acl_create_token`` returns a new token's
secret the same way.

An audit export is JSON lines: the anchor first (where the kept trail starts), then one record
per line; ``verify_jsonl`` re-computes the hash chain (``sha256(previous hash || record)``) and
names the first record that breaks it. The encoding is the daemon's
(``schedd.core.audit.encode``); tests/unit/test_access.py keeps the two equal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from schedd_proto import acl_pb2 as apb

from ._plans import Call, Plan, _single, new_request_id

FORMAT = 1
GENESIS = "0" * 64
HASHED_FIELDS = ("seq", "time_ms", "principal", "source", "action", "target", "outcome", "request_id",
                 "log_index", "detail", "suppressed")


def _acl(method: str, request: Any, *, mutating: bool = False) -> Call:
    return Call("acl", method, request, mutating=mutating)


def _audit(method: str, request: Any, *, mutating: bool = False, address: str | None = None) -> Call:
    return Call("audit", method, request, mutating=mutating, address=address)


def acl_bootstrap() -> Plan[apb.TokenSecret]:
    return _single(_acl("Bootstrap", apb.BootstrapRequest(request_id=new_request_id()), mutating=True),
                   apb.TokenSecret)


def acl_whoami() -> Plan[apb.WhoAmIResponse]:
    return _single(_acl("WhoAmI", apb.WhoAmIRequest()), apb.WhoAmIResponse)


def login_link(*, url_only: bool = False) -> Plan[str]:
    def link(responses: list[Any]) -> str:
        r = responses[0]
        assert isinstance(r, apb.LoginLinkResponse)
        return str(r.dashboard_url if url_only else r.link)

    return Plan([_acl("LoginLink", apb.LoginLinkRequest(url_only=url_only))], link)


def acl_put_policy(name: str, rules: Mapping[str, Sequence[str]], description: str = "") -> Plan[apb.AclPolicy]:
    policy = apb.AclPolicy(name=name, description=description,
                           rules=[apb.AclRule(pattern=p, capabilities=list(c)) for p, c in sorted(rules.items())])
    return _single(_acl("PutPolicy", apb.PutPolicyRequest(policy=policy, request_id=new_request_id()),
                        mutating=True), apb.AclPolicy)


def acl_get_policy(name: str) -> Plan[apb.AclPolicy]:
    return _single(_acl("GetPolicy", apb.AclName(name=name)), apb.AclPolicy)


def acl_list_policies() -> Plan[apb.ListPoliciesResponse]:
    return _single(_acl("ListPolicies", apb.ListAclRequest()), apb.ListPoliciesResponse)


def acl_delete_policy(name: str) -> Plan[apb.AclDeleted]:
    return _single(_acl("DeletePolicy", apb.AclName(name=name, request_id=new_request_id()), mutating=True),
                   apb.AclDeleted)


def acl_put_role(name: str, policies: Sequence[str], description: str = "") -> Plan[apb.AclRole]:
    role = apb.AclRole(name=name, description=description, policies=list(policies))
    return _single(_acl("PutRole", apb.PutRoleRequest(role=role, request_id=new_request_id()), mutating=True),
                   apb.AclRole)


def acl_get_role(name: str) -> Plan[apb.AclRole]:
    return _single(_acl("GetRole", apb.AclName(name=name)), apb.AclRole)


def acl_list_roles() -> Plan[apb.ListRolesResponse]:
    return _single(_acl("ListRoles", apb.ListAclRequest()), apb.ListRolesResponse)


def acl_delete_role(name: str) -> Plan[apb.AclDeleted]:
    return _single(_acl("DeleteRole", apb.AclName(name=name, request_id=new_request_id()), mutating=True),
                   apb.AclDeleted)


def acl_create_token(*, roles: Sequence[str] = (), policies: Sequence[str] = (), kind: str = "client",
                     ttl_ms: int = 0, max_slots: int = 0, description: str = "") -> Plan[apb.TokenSecret]:
    request = apb.CreateTokenRequest(kind=kind, roles=list(roles), policies=list(policies), ttl_ms=ttl_ms,
                                     max_slots=max_slots, description=description, request_id=new_request_id())
    return _single(_acl("CreateToken", request, mutating=True), apb.TokenSecret)


def acl_get_token(accessor: str) -> Plan[apb.AclToken]:
    return _single(_acl("GetToken", apb.AclName(name=accessor)), apb.AclToken)


def acl_list_tokens() -> Plan[apb.ListTokensResponse]:
    return _single(_acl("ListTokens", apb.ListAclRequest()), apb.ListTokensResponse)


def acl_delete_token(accessor: str) -> Plan[apb.AclDeleted]:
    return _single(_acl("DeleteToken", apb.AclName(name=accessor, request_id=new_request_id()), mutating=True),
                   apb.AclDeleted)


def acl_set_anonymous(policy: str) -> Plan[apb.SetAnonymousResponse]:
    return _single(_acl("SetAnonymous", apb.SetAnonymousRequest(policy=policy, request_id=new_request_id()),
                        mutating=True), apb.SetAnonymousResponse)


def audit_list(*, since_ms: int = 0, principal: str = "", target: str = "", action: str = "", outcome: str = "",
               limit: int = 0, address: str | None = None, until_ms: int = 0, newest_first: bool = False,
               before_seq: int = 0, shard: int | None = None) -> Plan[apb.ListAuditResponse]:
    request = apb.ListAuditRequest(since_ms=since_ms, principal=principal, target=target, action=action,
                                   outcome=outcome, limit=limit, until_ms=until_ms, newest_first=newest_first,
                                   before_seq=before_seq, shard=shard)
    return _single(_audit("List", request, address=address), apb.ListAuditResponse)


def audit_verify(*, address: str | None = None) -> Plan[apb.VerifyAuditResponse]:
    return _single(_audit("Verify", apb.VerifyAuditRequest(), address=address), apb.VerifyAuditResponse)


def audit_configure(*, max_age_ms: int, max_records: int, denied_burst: int = 20,
                    denied_refill_ms: int = 3000) -> Plan[apb.AuditConfig]:
    request = apb.ConfigureAuditRequest(max_age_ms=max_age_ms, max_records=max_records, denied_burst=denied_burst,
                                        denied_refill_ms=denied_refill_ms, request_id=new_request_id())
    return _single(_audit("Configure", request, mutating=True), apb.AuditConfig)


def audit_note(note: str) -> Plan[apb.AuditNoteResponse]:
    request = apb.AuditNoteRequest(note=note, request_id=new_request_id())
    return _single(_audit("Note", request, mutating=True), apb.AuditNoteResponse)


# ---------------------------------------------------------------- audit files


def record_dict(record: apb.AuditRecord) -> dict[str, Any]:
    """A record as the daemon hashes and exports it (every field, proto3 defaults included)."""
    return {n: getattr(record, n) for n in (*HASHED_FIELDS, "hash")}


def export_jsonl(listing: apb.ListAuditResponse, shard: int | None = None) -> str:
    """JSON lines: the anchor, then each record (what ``schedctl audit verify FILE`` reads). A
    sharded cluster's export is one such section per shard group, its anchor naming the shard."""
    anchor: dict[str, Any] = {"next_seq": listing.anchor_seq, "hash": listing.anchor_hash or GENESIS}
    if shard is not None:
        anchor["shard"] = shard
    head = json.dumps({"anchor": anchor}, separators=(",", ":"))
    rows = [json.dumps(record_dict(r), separators=(",", ":"), ensure_ascii=False) for r in listing.records]
    return "".join(line + "\n" for line in (head, *rows))


def _chain(prev: str, d: Mapping[str, Any]) -> str:
    body = json.dumps([FORMAT, *(d[n] for n in HASHED_FIELDS)], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(bytes.fromhex(prev) + body.encode()).hexdigest()


def verify_jsonl(text: str) -> tuple[int | None, int]:
    """(line number of the first record that breaks the chain, or None; records checked).

    A line that is not a record with exactly the exported fields breaks the chain there too.
    An anchor starts a chain on the first line only, or, in a sharded cluster's export, at the
    start of each shard's section: every anchor then names its shard, in increasing order.
    """
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    prev, seq = GENESIS, 0
    n = 0
    shard: int | None = None
    for position, (lineno, line) in enumerate(lines):
        if line.startswith('{"anchor"'):           # a chain starts (a sharded export: one per shard)
            try:
                a = json.loads(line)["anchor"]
                prev, seq = str(a["hash"]), int(a["next_seq"])
                bytes.fromhex(prev)
                named = a.get("shard")
                if position > 0 and (not isinstance(named, int) or shard is None or named <= shard):
                    return lineno, n
                shard = named if isinstance(named, int) else None
            except (ValueError, KeyError, TypeError, AttributeError):
                return lineno, n
            continue
        try:
            d = json.loads(line)
            ok = isinstance(d, dict) and set(d) == {*HASHED_FIELDS, "hash"} and d["seq"] == seq \
                and _chain(prev, d) == d["hash"]
        except (ValueError, TypeError):
            ok = False
        if not ok:
            return lineno, n
        prev, seq = d["hash"], seq + 1
        n += 1
    return None, n
