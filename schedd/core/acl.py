"""Access control: who may do what, as a pure table and a pure evaluator.

The model is default-deny. A *policy* is a named list of rules, each a resource pattern and the
capabilities it grants on what the pattern matches; a *role* groups policies; a *token* carries
roles and policies directly, an optional expiry, and a kind (a `client` calls the API, a `worker`
also serves pools, up to `max_slots` concurrent attempts). An optional *anonymous policy* is what a
call without a credential gets; without one, such a call is refused. The first management token
is created by *bootstrap*, once per cluster.

Resources and the capabilities that apply to them:

    team:<team>    read write trigger cancel backfill   (a team's jobs, runs and DAGs) and serve
    pool:<pool>    serve                                (a worker may take that pool's work)
    cluster        quota acl operator                   (quotas; ACLs; membership, snapshots)

A rule's pattern is `cluster`, `team:<glob>`, `pool:<glob>` or `*` (every resource); a glob is a
name in which `*` matches any run of name characters (`team:*`, `team:data-*`, `pool:gpu*`). A
rule may only grant capabilities that apply to the resources its pattern can match.

Contracts:
- Pure and deterministic: no clock, no I/O, no randomness. Time (`now_ms`) and random bytes are
  arguments; the state machine passes the entry's time, the API shell passes `os.urandom`.
- The replicated table never holds a secret: only sha256 over a domain tag, the accessor and the
  secret. A secret is 256 random bits, so an unsalted fast hash is enough (there is nothing to
  brute-force); the accessor in the hash binds a secret to its token.
- Every input is validated by the `parse_*` functions (raising `AclInputError` with a one-line
  message) before anything is proposed; the `AclTable` mutators check what depends on the table
  (existence, bootstrap) and return a `Problem` instead of raising, so apply stays total.
- A policy or role deleted while something still names it grants nothing from then on (the
  dangling name is ignored when a token is resolved: default-deny); creating one requires every
  name it references to exist, so a typo is refused rather than silently granting nothing.
- `canonical_rows` / `encode_table` give one encoding per content, for the state digest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from base64 import urlsafe_b64encode
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal

from schedd.core.model import TEAM_RE

# ---------------------------------------------------------------- vocabulary

TEAM_CAPABILITIES = ("read", "write", "trigger", "cancel", "backfill")
CLUSTER_CAPABILITIES = ("quota", "acl", "operator", "membership")
SERVE = "serve"
CAPABILITIES = (*TEAM_CAPABILITIES, *CLUSTER_CAPABILITIES, SERVE)

# What applies where: a team takes the job capabilities and `serve` (a worker's team scope).
KIND_CAPABILITIES: dict[str, frozenset[str]] = {
    "team": frozenset((*TEAM_CAPABILITIES, SERVE)),
    "pool": frozenset((SERVE,)),
    "cluster": frozenset(CLUSTER_CAPABILITIES),
}
CLUSTER = "cluster"
ANY_RESOURCE = "*"
DEFAULT_POOL = "default"        # a worker or a job with no pool is in pool:default

TokenKind = Literal["client", "worker"]
TOKEN_KINDS: tuple[TokenKind, ...] = ("client", "worker")
PrincipalKind = Literal["client", "worker", "anonymous"]

MANAGEMENT_POLICY = "management"       # built in: `*` -> every capability; cannot be put/deleted
ANONYMOUS = "anonymous"                # the principal name of a call without a credential
RESERVED_NAMES = frozenset((MANAGEMENT_POLICY, ANONYMOUS))

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")            # policy and role names
GLOB_RE = re.compile(r"^[a-z0-9.*_-][a-z0-9._*-]{0,63}$")       # a team or pool name with `*`
ACCESSOR_RE = re.compile(r"^[0-9a-f]{16}$")
SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")                   # 32 bytes, base64url, unpadded
HASH_RE = re.compile(r"^[0-9a-f]{64}$")

ACCESSOR_BYTES = 8
SECRET_BYTES = 32
TOKEN_RANDOM_BYTES = ACCESSOR_BYTES + SECRET_BYTES
MAX_DESCRIPTION = 256
MAX_RULES = 64
MAX_REFS = 32                  # policies per role, roles or policies per token
MAX_SLOTS = 100_000
HASH_TAG = b"schedd-token-v1\x00"


class AclInputError(ValueError):
    """Input that can never be valid (a bad name, pattern or capability): INVALID_ARGUMENT."""


# ---------------------------------------------------------------- table rows
#
# Each row validates itself in __post_init__, so an invalid row cannot exist, whoever builds it
# (the API parsing a request, apply decoding an entry, a snapshot being restored).


@dataclass(slots=True, frozen=True)
class Rule:
    """Grants `capabilities` on every resource `pattern` matches."""

    pattern: str
    capabilities: frozenset[str]

    def __post_init__(self) -> None:
        check_pattern(self.pattern)
        check_capabilities(self.pattern, self.capabilities)


@dataclass(slots=True, frozen=True)
class Policy:
    name: str
    rules: tuple[Rule, ...]           # sorted by pattern, one rule per pattern
    description: str = ""

    def __post_init__(self) -> None:
        check_name(self.name, "policy")
        check_description(self.description)
        if not self.rules:
            raise AclInputError(f"policy {self.name!r} needs at least one rule")
        if len(self.rules) > MAX_RULES:
            raise AclInputError(f"policy {self.name!r} has {len(self.rules)} rules: at most {MAX_RULES}")
        patterns = [r.pattern for r in self.rules]
        if patterns != sorted(set(patterns)):
            raise AclInputError(f"policy {self.name!r}: rules must be sorted by pattern, one per pattern")


@dataclass(slots=True, frozen=True)
class Role:
    name: str
    policies: tuple[str, ...]         # sorted, distinct
    description: str = ""

    def __post_init__(self) -> None:
        check_name(self.name, "role")
        check_description(self.description)
        check_refs(self.policies, "policies")
        if not self.policies:
            raise AclInputError(f"role {self.name!r} needs at least one policy")


@dataclass(slots=True, frozen=True)
class Token:
    """A credential's replicated half: the secret itself is only ever in the caller's hands."""

    accessor: str
    secret_hash: str
    kind: TokenKind = "client"
    description: str = ""
    roles: tuple[str, ...] = ()          # sorted, distinct
    policies: tuple[str, ...] = ()       # sorted, distinct
    expires_ms: int | None = None        # None: never
    max_slots: int = 0                   # worker tokens: the most attempts it may hold at once
    created_ms: int = 0                  # the creating entry's time

    def __post_init__(self) -> None:
        if not isinstance(self.accessor, str) or not ACCESSOR_RE.fullmatch(self.accessor):
            raise AclInputError(f"bad accessor {self.accessor!r}: 16 lowercase hex digits")
        if not isinstance(self.secret_hash, str) or not HASH_RE.fullmatch(self.secret_hash):
            raise AclInputError("bad secret_hash: 64 lowercase hex digits (sha256)")
        if self.kind not in TOKEN_KINDS:
            raise AclInputError(f"bad token kind {self.kind!r}: client or worker")
        check_description(self.description)
        check_refs(self.roles, "roles")
        check_refs(self.policies, "policies")
        if not self.roles and not self.policies:
            raise AclInputError("a token needs at least one role or policy")
        _check_ms(self.created_ms, "created_ms")
        if self.expires_ms is not None and _check_ms(self.expires_ms, "expires_ms") <= self.created_ms:
            raise AclInputError(f"token expiry {self.expires_ms} is not after its creation time {self.created_ms}")
        slots = self.max_slots
        if isinstance(slots, bool) or not isinstance(slots, int):
            raise AclInputError(f"bad max_slots {slots!r}: an integer")
        if self.kind == "worker" and not 1 <= slots <= MAX_SLOTS:
            raise AclInputError(f"a worker token needs max_slots in 1..{MAX_SLOTS}, not {slots}")
        if self.kind == "client" and slots:
            raise AclInputError("max_slots is for worker tokens only")


ProblemCode = Literal["not_found", "exists", "reserved", "already_bootstrapped", "invalid"]


@dataclass(slots=True, frozen=True)
class Problem:
    """Why a table change was refused (the caller maps `code` to a gRPC status)."""

    code: ProblemCode
    message: str


@dataclass(slots=True)
class AclTable:
    """The replicated ACL state. Mutate only through the methods: they validate first."""

    policies: dict[str, Policy] = field(default_factory=dict)
    roles: dict[str, Role] = field(default_factory=dict)
    tokens: dict[str, Token] = field(default_factory=dict)      # by accessor
    anonymous_policy: str | None = None
    bootstrapped: bool = False

    def policy(self, name: str) -> Policy | None:
        return MANAGEMENT if name == MANAGEMENT_POLICY else self.policies.get(name)

    def put_policy(self, policy: Policy) -> Problem | None:
        """Create or replace; the built-in management policy is not writable."""
        if policy.name in RESERVED_NAMES:
            return Problem("reserved", f"policy name {policy.name!r} is reserved")
        self.policies[policy.name] = policy
        return None

    def delete_policy(self, name: str) -> Problem | None:
        if name in RESERVED_NAMES:
            return Problem("reserved", f"policy {name!r} is built in")
        if self.policies.pop(name, None) is None:
            return Problem("not_found", f"no policy {name!r}")
        if self.anonymous_policy == name:
            self.anonymous_policy = None
        return None

    def put_role(self, role: Role) -> Problem | None:
        if role.name in RESERVED_NAMES:
            return Problem("reserved", f"role name {role.name!r} is reserved")
        missing = self._missing_policies(role.policies)
        if missing:
            return Problem("not_found", f"role {role.name!r} names unknown policies: {missing}")
        self.roles[role.name] = role
        return None

    def delete_role(self, name: str) -> Problem | None:
        if self.roles.pop(name, None) is None:
            return Problem("not_found", f"no role {name!r}")
        return None

    def create_token(self, token: Token) -> Problem | None:
        """Add a token; an accessor is never reused (it names the token in the audit trail)."""
        if token.accessor in self.tokens:
            return Problem("exists", f"token {token.accessor} exists")
        missing = self._missing_policies(token.policies)
        missing_roles = ", ".join(r for r in token.roles if r not in self.roles)
        if missing or missing_roles:
            what = "; ".join(x for x in (missing and f"unknown policies: {missing}",
                                         missing_roles and f"unknown roles: {missing_roles}") if x)
            return Problem("not_found", f"token names {what}")
        self.tokens[token.accessor] = token
        return None

    def delete_token(self, accessor: str) -> Problem | None:
        if self.tokens.pop(accessor, None) is None:
            return Problem("not_found", f"no token {accessor}")
        return None

    def set_anonymous(self, policy: str | None) -> Problem | None:
        """Grant `policy` to calls without a credential (None: refuse them: the default)."""
        if policy is not None and self.policy(policy) is None:
            return Problem("not_found", f"no policy {policy!r}")
        if policy == MANAGEMENT_POLICY:
            return Problem("reserved", "the management policy cannot be anonymous")
        self.anonymous_policy = policy
        return None

    def bootstrap(self, token: Token) -> Problem | None:
        """The first management token, once per cluster (afterwards `acl` holders make tokens)."""
        if self.bootstrapped:
            return Problem("already_bootstrapped", "ACL bootstrap was already done on this cluster")
        if token.kind != "client" or token.roles or token.policies != (MANAGEMENT_POLICY,):
            return Problem("invalid", "the bootstrap token is a client token with the management policy only")
        problem = self.create_token(token)
        if problem is None:
            self.bootstrapped = True
        return problem

    def _missing_policies(self, names: Iterable[str]) -> str:
        return ", ".join(n for n in names if self.policy(n) is None)


# ---------------------------------------------------------------- validation of inputs


def check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise AclInputError(f"bad {what} name {name!r}: use 1-64 of a-z 0-9 . _ -, starting with a letter or digit")
    return name


def check_pattern(pattern: object) -> str:
    """`*`, `cluster`, `team:<glob>` or `pool:<glob>`; a glob's only wildcard is `*`."""
    if not isinstance(pattern, str):
        raise AclInputError(f"bad resource pattern {pattern!r}: not a string")
    if pattern in (ANY_RESOURCE, CLUSTER):
        return pattern
    kind, sep, glob = pattern.partition(":")
    if not sep or kind not in ("team", "pool"):
        raise AclInputError(f"bad resource pattern {pattern!r}: use cluster, team:<name>, pool:<name> or *")
    if not GLOB_RE.fullmatch(glob):
        raise AclInputError(f"bad resource pattern {pattern!r}: a {kind} name of a-z 0-9 . _ - with * as wildcard")
    return pattern


def pattern_kinds(pattern: str) -> tuple[str, ...]:
    """The resource kinds a (valid) pattern can match."""
    if pattern == ANY_RESOURCE:
        return tuple(KIND_CAPABILITIES)
    return (pattern.partition(":")[0],)


def check_capabilities(pattern: str, caps: object) -> frozenset[str]:
    """A non-empty frozenset of known capabilities that apply to what `pattern` can match."""
    if not isinstance(caps, frozenset) or not all(isinstance(c, str) for c in caps):
        raise AclInputError(f"capabilities of {pattern!r} must be a set of names")
    if not caps:
        raise AclInputError(f"rule {pattern!r} grants no capability")
    unknown = sorted(c for c in caps if c not in CAPABILITIES)
    if unknown:
        raise AclInputError(f"unknown capabilities {unknown} in rule {pattern!r}: known are {', '.join(CAPABILITIES)}")
    fits = frozenset[str]().union(*(KIND_CAPABILITIES[k] for k in pattern_kinds(pattern)))
    wrong = sorted(caps - fits)
    if wrong:
        raise AclInputError(f"capabilities {wrong} do not apply to {pattern!r} (it takes {', '.join(sorted(fits))})")
    return caps


def check_description(text: object) -> str:
    if not isinstance(text, str) or len(text) > MAX_DESCRIPTION or not text.isprintable():
        raise AclInputError(f"bad description: at most {MAX_DESCRIPTION} printable characters")
    return text


def check_refs(names: object, what: str) -> tuple[str, ...]:
    """A sorted tuple of distinct valid names (policies or roles a row refers to)."""
    if not isinstance(names, tuple):
        raise AclInputError(f"{what} must be a tuple of names")
    if len(names) > MAX_REFS:
        raise AclInputError(f"at most {MAX_REFS} {what}, not {len(names)}")
    for n in names:
        check_name(n, {"policies": "policy", "roles": "role"}.get(what, what))
    if list(names) != sorted(set(names)):
        raise AclInputError(f"{what} must be sorted and distinct: {list(names)}")
    return names


def _check_ms(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AclInputError(f"bad {what} {value!r}: a non-negative integer (ms)")
    return value


MANAGEMENT = Policy(MANAGEMENT_POLICY, (Rule(ANY_RESOURCE, frozenset(CAPABILITIES)),),
                    "built in: every capability on every resource")


# ---------------------------------------------------------------- wire form (requests, entries, snapshots)
#
# JSON-able dicts: what a request carries after proto conversion, what an entry and a snapshot
# hold. The parse functions accept lists in any order and repeated names (normalized: sorted,
# distinct), and raise AclInputError with a one-line message on anything else.


def _name_list(values: object, what: str) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise AclInputError(f"{what} must be a list of names")
    if not all(isinstance(v, str) for v in values):
        raise AclInputError(f"{what} must be a list of names, not {values!r}")
    return tuple(sorted(set(values)))


def _text(d: Mapping[str, object], key: str) -> str:
    value = d.get(key)
    return "" if value is None else check_description(value)


def parse_policy(d: Mapping[str, object]) -> Policy:
    """A policy from {"name", "description", "rules": {pattern: [capability, ...]}}."""
    name = check_name(d.get("name"), "policy")
    rules = d.get("rules")
    if not isinstance(rules, Mapping) or not rules:
        raise AclInputError(f"policy {name!r} needs rules: a mapping of resource pattern to capabilities")
    parsed = []
    for pattern in sorted(rules, key=str):
        caps = rules[pattern]
        if isinstance(caps, str) or not isinstance(caps, (list, tuple)) \
                or not all(isinstance(c, str) for c in caps):
            raise AclInputError(f"capabilities of {pattern!r} must be a list of names")
        parsed.append(Rule(check_pattern(pattern), frozenset(caps)))
    return Policy(name, tuple(parsed), _text(d, "description"))


def parse_role(d: Mapping[str, object]) -> Role:
    """A role from {"name", "description", "policies": [name, ...]}."""
    return Role(check_name(d.get("name"), "role"), _name_list(d.get("policies"), "policies"),
                _text(d, "description"))


def parse_token(d: Mapping[str, object], *, created_ms: int) -> Token:
    """A token from its wire form; `created_ms` is the entry's time (expiry must be after it)."""
    kind = d.get("kind") or "client"
    if kind not in TOKEN_KINDS:
        raise AclInputError(f"bad token kind {kind!r}: client or worker")
    expires, slots = d.get("expires_ms"), d.get("max_slots") or 0
    for key, value in (("accessor", d.get("accessor")), ("secret_hash", d.get("secret_hash"))):
        if not isinstance(value, str):
            raise AclInputError(f"bad {key} {value!r}")
    if not isinstance(slots, int):
        raise AclInputError(f"bad max_slots {slots!r}: an integer")
    return Token(str(d["accessor"]), str(d["secret_hash"]), "worker" if kind == "worker" else "client",
                 _text(d, "description"), _name_list(d.get("roles"), "roles"),
                 _name_list(d.get("policies"), "policies"),
                 None if expires is None else _check_ms(expires, "expires_ms"), slots, created_ms)


def check_resource(resource: str) -> str | None:
    """Why `resource` is not one concrete resource (`cluster`, `team:<t>`, `pool:<p>`), or None."""
    if resource == CLUSTER:
        return None
    kind, sep, name = resource.partition(":")
    if sep and kind in ("team", "pool") and TEAM_RE.fullmatch(name):
        return None
    return f"bad resource {resource!r}: cluster, team:<name> or pool:<name>"


def policy_to_dict(p: Policy) -> dict[str, object]:
    return {"name": p.name, "description": p.description,
            "rules": {r.pattern: sorted(r.capabilities) for r in p.rules}}


def role_to_dict(r: Role) -> dict[str, object]:
    return {"name": r.name, "description": r.description, "policies": list(r.policies)}


def token_to_dict(t: Token) -> dict[str, object]:
    """The replicated form: a hash, never a secret."""
    return {"accessor": t.accessor, "secret_hash": t.secret_hash, "kind": t.kind,
            "description": t.description, "roles": list(t.roles), "policies": list(t.policies),
            "expires_ms": t.expires_ms, "max_slots": t.max_slots, "created_ms": t.created_ms}


def table_to_dict(table: AclTable) -> dict[str, object]:
    """A JSON-able form of the whole table, for snapshots; `table_from_dict` reads it back."""
    return {"policies": [policy_to_dict(table.policies[k]) for k in sorted(table.policies)],
            "roles": [role_to_dict(table.roles[k]) for k in sorted(table.roles)],
            "tokens": [token_to_dict(table.tokens[k]) for k in sorted(table.tokens)],
            "anonymous_policy": table.anonymous_policy, "bootstrapped": table.bootstrapped}


def table_from_dict(d: Mapping[str, object]) -> AclTable:
    """Inverse of `table_to_dict`; every row is validated as if it were new input."""
    table = AclTable(bootstrapped=d.get("bootstrapped") is True)
    for p in map(parse_policy, _rows(d, "policies")):
        table.policies[p.name] = p
    for r in map(parse_role, _rows(d, "roles")):
        table.roles[r.name] = r
    for row in _rows(d, "tokens"):
        t = parse_token(row, created_ms=_check_ms(row.get("created_ms", 0), "created_ms"))
        table.tokens[t.accessor] = t
    anon = d.get("anonymous_policy")
    table.anonymous_policy = None if anon is None else check_name(anon, "policy")
    return table


def _rows(d: Mapping[str, object], key: str) -> list[Mapping[str, object]]:
    rows = d.get(key) or []
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise AclInputError(f"{key}: a list of objects")
    return rows


def canonical_rows(table: AclTable) -> list[list[object]]:
    """One row per fact, sorted by kind then name: what the state digest hashes for the ACLs."""
    rows: list[list[object]] = [["anonymous_policy", table.anonymous_policy],
                                ["bootstrapped", table.bootstrapped]]
    rows += [["policy", policy_to_dict(table.policies[k])] for k in sorted(table.policies)]
    rows += [["role", role_to_dict(table.roles[k])] for k in sorted(table.roles)]
    rows += [["token", token_to_dict(table.tokens[k])] for k in sorted(table.tokens)]
    return rows


def encode_table(table: AclTable) -> bytes:
    """Canonical bytes: equal tables encode equal, whatever order their dicts were filled in."""
    return json.dumps(canonical_rows(table), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


# ---------------------------------------------------------------- tokens and authentication


def hash_secret(accessor: str, secret: str) -> str:
    return hashlib.sha256(HASH_TAG + accessor.encode() + b"\x00" + secret.encode()).hexdigest()


@dataclass(slots=True, frozen=True)
class MintedToken:
    """What the API shell hands the user once (`bearer`) and what it proposes (`secret_hash`)."""

    accessor: str
    secret: str
    secret_hash: str

    @property
    def bearer(self) -> str:
        return f"{self.accessor}.{self.secret}"


def mint_token(random_bytes: bytes) -> MintedToken:
    """A new `<accessor>.<secret>` from exactly TOKEN_RANDOM_BYTES random bytes (os.urandom)."""
    if len(random_bytes) != TOKEN_RANDOM_BYTES:
        raise AclInputError(f"mint_token needs {TOKEN_RANDOM_BYTES} random bytes, got {len(random_bytes)}")
    accessor = random_bytes[:ACCESSOR_BYTES].hex()
    secret = urlsafe_b64encode(random_bytes[ACCESSOR_BYTES:]).rstrip(b"=").decode()
    return MintedToken(accessor, secret, hash_secret(accessor, secret))


RefusalCode = Literal["unauthenticated", "malformed", "unknown_token", "bad_secret", "expired"]


@dataclass(slots=True, frozen=True)
class Refusal:
    """An authentication failure: UNAUTHENTICATED for the caller, `reason` for the audit trail.

    `message` is what the caller sees: it does not say whether the accessor exists.
    """

    code: RefusalCode
    reason: str
    accessor: str | None = None

    @property
    def message(self) -> str:
        if self.code == "expired":
            return "token expired"
        if self.code == "unauthenticated":
            return "authentication required: pass a token"
        return "invalid token"


@dataclass(slots=True, frozen=True)
class Grant:
    """One resolved rule: where it came from is kept for `explain` and tests."""

    pattern: str
    capabilities: frozenset[str]
    policy: str


@dataclass(slots=True, frozen=True)
class Principal:
    """Who is calling, with every grant resolved once at authentication."""

    name: str                       # "token:<accessor>" | "anonymous"
    kind: PrincipalKind
    grants: tuple[Grant, ...]
    accessor: str | None = None
    expires_ms: int | None = None
    max_slots: int = 0

    def expired(self, now_ms: int) -> bool:
        """For long-lived streams: re-check at every heartbeat, with the leader's time."""
        return self.expires_ms is not None and now_ms >= self.expires_ms


def parse_bearer(bearer: str) -> tuple[str, str] | Refusal:
    """`<accessor>.<secret>` into its parts."""
    accessor, sep, secret = bearer.partition(".")
    if not sep or not ACCESSOR_RE.fullmatch(accessor) or not SECRET_RE.fullmatch(secret):
        return Refusal("malformed", "token is not <accessor>.<secret>")
    return accessor, secret


_DUMMY_HASH = "0" * 64


def authenticate(table: AclTable, accessor: str | None, secret: str | None,
                 now_ms: int) -> Principal | Refusal:
    """The principal of a credential (both None: the anonymous policy, if any).

    The secret is compared by hash with `hmac.compare_digest`, and an unknown accessor costs
    the same hash and compare, so timing tells nothing about which accessors exist. Expiry is
    checked after the secret (an expired token is reported as expired only to its holder).
    """
    if accessor is None and secret is None:
        return _anonymous(table)
    if accessor is None or secret is None:
        return Refusal("malformed", "token needs both an accessor and a secret")
    token = table.tokens.get(accessor)
    presented = hash_secret(accessor, secret)
    ok = hmac.compare_digest(presented, token.secret_hash if token else _DUMMY_HASH)
    if token is None:
        return Refusal("unknown_token", f"no token {accessor[:16]!r}", None)
    if not ok:
        return Refusal("bad_secret", f"wrong secret for token {accessor}", accessor)
    if token.expires_ms is not None and now_ms >= token.expires_ms:
        return Refusal("expired", f"token {accessor} expired at {token.expires_ms} (now {now_ms})", accessor)
    return Principal(f"token:{accessor}", token.kind, resolve(table, token), accessor,
                     token.expires_ms, token.max_slots)


def _anonymous(table: AclTable) -> Principal | Refusal:
    name = table.anonymous_policy
    policy = table.policy(name) if name is not None else None
    if policy is None:
        return Refusal("unauthenticated", "no credential and no anonymous policy")
    return Principal(ANONYMOUS, "anonymous", tuple(_grants(policy)))


def resolve(table: AclTable, token: Token) -> tuple[Grant, ...]:
    """The grants of a token: its policies and its roles' policies, each once, sorted by name.

    Names that no longer exist grant nothing (default-deny).
    """
    names = set(token.policies)
    for role_name in token.roles:
        role = table.roles.get(role_name)
        if role is not None:
            names.update(role.policies)
    out: list[Grant] = []
    for name in sorted(names):
        policy = table.policy(name)
        if policy is not None:
            out.extend(_grants(policy))
    return tuple(out)


def _grants(policy: Policy) -> list[Grant]:
    return [Grant(r.pattern, r.capabilities, policy.name) for r in policy.rules]


# ---------------------------------------------------------------- authorization


def matches(pattern: str, resource: str) -> bool:
    """Whether a (valid) pattern matches a (valid, concrete) resource."""
    if pattern == ANY_RESOURCE or pattern == resource:
        return True
    kind, _, glob = pattern.partition(":")
    rkind, _, name = resource.partition(":")
    return kind == rkind and "*" in glob and fnmatchcase(name, glob)


@dataclass(slots=True, frozen=True)
class Decision:
    """The answer to one check. When denied, `message` names what is missing (PERMISSION_DENIED)."""

    allowed: bool
    capability: str
    resource: str
    reason: str = ""
    policy: str = ""                 # the policy that granted it, when allowed

    def __bool__(self) -> bool:
        return self.allowed

    @property
    def message(self) -> str:
        if self.allowed:
            return f"{self.capability} on {self.resource} granted by policy {self.policy}"
        return self.reason or f"permission denied: missing capability {self.capability!r} on {self.resource}"


def allowed(principal: Principal, capability: str, resource: str) -> Decision:
    """Whether `principal` holds `capability` on the concrete `resource`. Total: never raises."""
    bad = check_resource(resource)
    if bad is None and capability not in KIND_CAPABILITIES[resource.partition(":")[0]]:
        bad = f"capability {capability!r} does not apply to {resource}"
    if bad is not None:
        return Decision(False, capability, resource, f"permission denied: cannot check {capability!r}: {bad}")
    for g in principal.grants:
        if capability in g.capabilities and matches(g.pattern, resource):
            return Decision(True, capability, resource, policy=g.policy)
    return Decision(False, capability, resource)


def team_resource(team: str) -> str:
    return f"team:{team}"


def pool_resource(pool: str) -> str:
    return f"pool:{pool or DEFAULT_POOL}"


def may_serve(principal: Principal, pool: str, team: str) -> Decision:
    """A worker may take an attempt of `team`'s job in `pool`: `serve` on both, worker kind only."""
    if principal.kind != "worker":
        return Decision(False, SERVE, pool_resource(pool), "permission denied: not a worker token")
    on_pool = allowed(principal, SERVE, pool_resource(pool))
    return on_pool if not on_pool else allowed(principal, SERVE, team_resource(team))


@dataclass(slots=True, frozen=True)
class TeamFilter:
    """The teams whose objects a listing may show: everything, or those matching `patterns`.

    `exact` holds the patterns without a wildcard, so a caller with a by-team index can look
    those up directly instead of scanning.
    """

    everything: bool
    patterns: tuple[str, ...]

    @property
    def exact(self) -> tuple[str, ...]:
        return tuple(p for p in self.patterns if "*" not in p)

    def __contains__(self, team: object) -> bool:
        return isinstance(team, str) and (self.everything or any(fnmatchcase(team, p) for p in self.patterns))


def visible_teams(principal: Principal, capability: str = "read") -> TeamFilter:
    """The teams on which `principal` holds `capability` (for filtering lists: default-deny)."""
    globs: set[str] = set()
    for g in principal.grants:
        if capability not in g.capabilities:
            continue
        if g.pattern == ANY_RESOURCE:
            return TeamFilter(True, ())
        kind, _, glob = g.pattern.partition(":")
        if kind == "team":
            if glob == "*":
                return TeamFilter(True, ())
            globs.add(glob)
    return TeamFilter(False, tuple(sorted(globs)))

