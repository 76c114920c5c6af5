"""Apply for access control and the audit trail: the ACL entry kinds, `audit_append`,
`audit_config`, and the audit record every other audited entry leaves.

The table (`schedd.core.acl.AclTable`) and the trail (`schedd.core.audit.AuditTrail`) are pure;
this module decodes their entries and maps a table `Problem` to a typed refusal:
not_found -> NOT_FOUND, exists / already_bootstrapped -> EXISTS, reserved / invalid -> INVALID.
Input that can never be valid was refused by the API before proposing; apply re-validates
(a row validates itself on construction) so a hand-made entry is refused, never half-applied.

An allowed mutating call carries its own audit fields in the entry (`audit`: principal, source,
action, target, request id), so apply records it atomically with its outcome (`allowed`, or
`error` when apply refused it) and the entry's log index. Denied calls and login failures never
reach a handler: the API node batches them into `audit_append`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from collections.abc import Callable

from schedd.core import acl as A
from schedd.core import audit as U
from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code, ok, reject
from schedd.core.tables import Tables

PROBLEM_CODES: dict[str, Code] = {
    "not_found": Code.NOT_FOUND, "exists": Code.EXISTS, "already_bootstrapped": Code.EXISTS,
    "reserved": Code.INVALID, "invalid": Code.INVALID,
}
MAX_EVENTS_PER_ENTRY = 200          # what one audit_append may carry (the API batches per tick)
AUDIT_FIELDS = ("principal", "source", "action", "target", "request_id")
# From this feature level, records of writes apply refused count under the denied-record limit
# (schedd.core.features: a replica below it would keep them, and the trails would differ).
ERRORS_LIMITED_LEVEL = 5


def _answer(problem: A.Problem | None, payload: R.Payload) -> ApplyResult:
    if problem is None:
        return ok(payload)
    return reject(PROBLEM_CODES.get(problem.code, Code.INVALID), problem.message, problem=problem.code)


def _mapping(cmd: C.Command, key: str) -> Mapping[str, Any]:
    value = cmd.args.get(key)
    if not isinstance(value, Mapping):
        raise A.AclInputError(f"{cmd.kind}: {key} must be an object")
    return value


def _guarded(fn: Callable[[Tables, C.Command], ApplyResult]) -> Callable[[Tables, C.Command, int], ApplyResult]:
    """Input errors become INVALID refusals before anything changed (rows validate on build)."""
    def handler(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
        try:
            return fn(st, cmd)
        except (A.AclInputError, U.AuditInputError, KeyError, TypeError, ValueError) as e:
            return reject(Code.INVALID, f"{cmd.kind}: {e}")
    return handler


def _policy_put(st: Tables, cmd: C.Command) -> ApplyResult:
    policy = A.parse_policy(_mapping(cmd, "policy"))
    created = policy.name not in st.acl.policies
    return _answer(st.acl.put_policy(policy), R.AclStored(policy.name, created))


def _policy_delete(st: Tables, cmd: C.Command) -> ApplyResult:
    return _answer(st.acl.delete_policy(str(cmd.args["name"])), R.Named(str(cmd.args["name"])))


def _role_put(st: Tables, cmd: C.Command) -> ApplyResult:
    role = A.parse_role(_mapping(cmd, "role"))
    created = role.name not in st.acl.roles
    return _answer(st.acl.put_role(role), R.AclStored(role.name, created))


def _role_delete(st: Tables, cmd: C.Command) -> ApplyResult:
    return _answer(st.acl.delete_role(str(cmd.args["name"])), R.Named(str(cmd.args["name"])))


def _token_create(st: Tables, cmd: C.Command) -> ApplyResult:
    token = A.parse_token(_mapping(cmd, "token"), created_ms=cmd.now)
    return _answer(st.acl.create_token(token), R.Accessor(token.accessor))


def _token_delete(st: Tables, cmd: C.Command) -> ApplyResult:
    accessor = str(cmd.args["accessor"])
    return _answer(st.acl.delete_token(accessor), R.Accessor(accessor))


def _anonymous_set(st: Tables, cmd: C.Command) -> ApplyResult:
    policy = cmd.args.get("policy")
    if policy is not None and not isinstance(policy, str):
        raise A.AclInputError("policy must be a name or null")
    return _answer(st.acl.set_anonymous(policy or None), R.Anonymous(policy or ""))


def _bootstrap(st: Tables, cmd: C.Command) -> ApplyResult:
    token = A.parse_token(_mapping(cmd, "token"), created_ms=cmd.now)
    return _answer(st.acl.bootstrap(token), R.Accessor(token.accessor))


def _audit_append(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    rows = cmd.args.get("events")
    if not isinstance(rows, list) or len(rows) > MAX_EVENTS_PER_ENTRY:
        return reject(Code.INVALID, f"audit_append: events must be a list of at most {MAX_EVENTS_PER_ENTRY}")
    kept = 0
    for row in rows:
        ev = _event(row, outcome=None, time_ms=cmd.now, index=index)
        if ev is not None and st.audit.append(ev) is not None:
            kept += 1
    return ok(R.AuditAppended(kept, len(rows) - kept))


MAX_NOTE = U.MAX_TEXT


def _audit_note(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """An operator's note: the entry's own audit record (its target is the note) is the note."""
    note = cmd.args.get("note")
    if not isinstance(note, str) or not note.strip() or len(note) > MAX_NOTE:
        return reject(Code.INVALID, f"audit_note: note must be 1 to {MAX_NOTE} characters")
    return ok(R.AuditNote(note))


def _audit_config(st: Tables, cmd: C.Command) -> ApplyResult:
    a = cmd.args
    retention = U.Retention(a["max_age_ms"], a["max_records"])
    limit = U.DeniedLimit(a["burst"], a["refill_ms"])
    return ok(R.AuditPruned(st.audit.configure(retention, limit, cmd.now)))


HANDLERS: dict[str, Callable[[Tables, C.Command, int], ApplyResult]] = {
    C.ACL_POLICY_PUT: _guarded(_policy_put), C.ACL_POLICY_DELETE: _guarded(_policy_delete),
    C.ACL_ROLE_PUT: _guarded(_role_put), C.ACL_ROLE_DELETE: _guarded(_role_delete),
    C.ACL_TOKEN_CREATE: _guarded(_token_create), C.ACL_TOKEN_DELETE: _guarded(_token_delete),
    C.ACL_ANONYMOUS_SET: _guarded(_anonymous_set), C.ACL_BOOTSTRAP: _guarded(_bootstrap),
    C.AUDIT_APPEND: _audit_append, C.AUDIT_CONFIG: _guarded(_audit_config), C.AUDIT_NOTE: _audit_note,
}


# ---------------------------------------------------------------- the record of an entry


def _event(row: object, *, outcome: U.Outcome | None, time_ms: int, index: int,
           detail: str = "") -> U.AuditEvent | None:
    """An event from an entry's audit fields (None: not an object of strings: nothing recorded).
    `outcome` None takes the row's own (denied, for login failures and refusals)."""
    if not isinstance(row, Mapping):
        return None
    texts = {k: row.get(k, "") for k in (*AUDIT_FIELDS, "detail")}
    if not all(isinstance(v, str) for v in texts.values()):
        return None
    out = outcome or row.get("outcome")
    if out not in U.OUTCOMES:
        return None
    return U.event(time_ms=time_ms, outcome=out, log_index=index,
                   **{k: texts[k] for k in AUDIT_FIELDS}, detail=detail or texts["detail"])


def record(st: Tables, cmd: C.Command, index: int, result: ApplyResult, target: str) -> None:
    """The audit record of an audited entry: its own audit fields when the API sent them (the
    authenticated principal, the caller's address, the RPC), else what the entry itself says.
    Never raises (apply is total)."""
    row = cmd.args.get("audit")
    if not isinstance(row, Mapping):
        row = {"principal": cmd.by, "source": "", "action": cmd.kind, "target": target,
               "request_id": cmd.rid}
    elif not row.get("target"):
        row = {**row, "target": target}
    outcome: U.Outcome = "allowed" if result.code is Code.OK else "error"
    ev = _event(row, outcome=outcome, time_ms=cmd.now, index=index,
                detail="" if outcome == "allowed" else f"{result.code.value}: {result.msg}")
    if ev is not None:
        st.audit.append(ev, limit_errors=st.feature_level >= ERRORS_LIMITED_LEVEL)
