"""The ACL model and evaluator (schedd/core/acl.py): table-driven checks of capability x team x
wildcard x role x expiry x anonymous, input validation, the canonical encoding, and a property
test that a token never holds a capability none of its policies grants, and that expiry wins."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.api.capabilities import RPC_CAPABILITIES, Need, need_of
from schedd.core import acl
from schedd.core.acl import (
    AclInputError, AclTable, Decision, Principal, Refusal, Token, allowed, authenticate, mint_token,
    parse_bearer, parse_policy, parse_role, parse_token, visible_teams,
)

T0 = 1_000_000          # the creating entries' time


def _rand(n: int) -> bytes:
    """Deterministic "random" bytes for token n (tests pass them in, as the shell passes urandom)."""
    return bytes((n * 7 + i) % 256 for i in range(acl.TOKEN_RANDOM_BYTES))


def _token(table: AclTable, n: int, **wire: object) -> str:
    """Create token n in `table` from its wire form; returns the bearer string."""
    minted = mint_token(_rand(n))
    token = parse_token({"accessor": minted.accessor, "secret_hash": minted.secret_hash, **wire}, created_ms=T0)
    assert table.create_token(token) is None
    return minted.bearer


POLICIES = [
    {"name": "pay-rw", "rules": {"team:payments": ["read", "write"]}},
    {"name": "pay-ops", "rules": {"team:payments": ["trigger", "cancel", "backfill"]}},
    {"name": "data-read", "rules": {"team:data-*": ["read"]}},
    {"name": "all-read", "rules": {"team:*": ["read"]}},
    {"name": "cluster-ops", "rules": {"cluster": ["operator", "quota"]}},
    {"name": "gpu-serve", "rules": {"pool:gpu*": ["serve"], "team:ml": ["serve"]}},
    {"name": "public", "rules": {"team:public": ["read"]}},
]
ROLES = [
    {"name": "payments-dev", "policies": ["pay-rw", "pay-ops"]},
    {"name": "analyst", "policies": ["data-read"]},
]


@pytest.fixture(scope="module")
def world() -> tuple[AclTable, dict[str, str]]:
    table = AclTable()
    for p in POLICIES:
        assert table.put_policy(parse_policy(p)) is None
    for r in ROLES:
        assert table.put_role(parse_role(r)) is None
    boot = mint_token(_rand(0))
    assert table.bootstrap(Token(boot.accessor, boot.secret_hash, policies=(acl.MANAGEMENT_POLICY,),
                                 created_ms=T0)) is None
    bearers = {
        "mgmt": boot.bearer,
        "paydev": _token(table, 1, roles=["payments-dev"]),
        "analyst": _token(table, 2, roles=["analyst"], expires_ms=T0 + 1000),
        "reader": _token(table, 3, policies=["all-read"]),
        "ops": _token(table, 4, policies=["cluster-ops"], roles=["analyst"]),
        "worker": _token(table, 5, kind="worker", max_slots=4, policies=["gpu-serve"]),
    }
    assert table.set_anonymous("public") is None
    return table, bearers


def _login(world: tuple[AclTable, dict[str, str]], who: str | None, now: int) -> Principal | Refusal:
    table, bearers = world
    if who is None:
        return authenticate(table, None, None, now)
    parts = parse_bearer(bearers[who])
    assert not isinstance(parts, Refusal)
    return authenticate(table, parts[0], parts[1], now)


NOW = T0 + 10
CASES = [
    # who, capability, resource, allowed
    ("paydev", "read", "team:payments", True),         # through role payments-dev -> pay-rw
    ("paydev", "write", "team:payments", True),
    ("paydev", "trigger", "team:payments", True),      # through the role's second policy
    ("paydev", "backfill", "team:payments", True),
    ("paydev", "read", "team:billing", False),         # another team
    ("paydev", "read", "team:payments-eu", False),     # an exact pattern is not a prefix
    ("paydev", "quota", "cluster", False),
    ("analyst", "read", "team:data-lake", True),       # wildcard team:data-*
    ("analyst", "read", "team:data-", True),           # `*` matches the empty run
    ("analyst", "read", "team:data", False),
    ("analyst", "write", "team:data-lake", False),     # the wildcard grants only read
    ("reader", "read", "team:anything", True),         # team:*
    ("reader", "trigger", "team:anything", False),
    ("reader", "read", "cluster", False),              # read does not apply to the cluster
    ("ops", "operator", "cluster", True),              # direct policy
    ("ops", "quota", "cluster", True),
    ("ops", "acl", "cluster", False),
    ("ops", "read", "team:data-x", True),              # direct policy and role together
    ("mgmt", "acl", "cluster", True),                  # the built-in management policy
    ("mgmt", "cancel", "team:whatever", True),
    ("mgmt", "serve", "pool:any", True),
    ("worker", "serve", "pool:gpu-a100", True),        # pool:gpu*
    ("worker", "serve", "pool:cpu", False),
    ("worker", "serve", "team:ml", True),
    ("worker", "read", "team:ml", False),              # a worker reads nothing unless granted
    (None, "read", "team:public", True),               # the anonymous policy
    (None, "read", "team:payments", False),
    (None, "write", "team:public", False),
    ("paydev", "launch", "team:payments", False),      # unknown capability: denied, not raised
    ("paydev", "read", "team:Payments", False),        # not a valid resource: denied
    ("paydev", "read", "team:payments\n", False),
]


@pytest.mark.parametrize("who,capability,resource,expected", CASES)
def test_allowed_table(world: tuple[AclTable, dict[str, str]], who: str | None, capability: str,
                       resource: str, expected: bool) -> None:
    principal = _login(world, who, NOW)
    assert isinstance(principal, Principal), principal
    decision = allowed(principal, capability, resource)
    assert decision.allowed is expected, decision
    if not expected:
        assert capability in decision.message and (resource in decision.message or repr(resource) in decision.message)
        assert decision.message.startswith("permission denied")


def test_denied_message_names_the_missing_capability(world: tuple[AclTable, dict[str, str]]) -> None:
    principal = _principal(world, "reader")
    assert allowed(principal, "trigger", "team:payments").message == \
        "permission denied: missing capability 'trigger' on team:payments"


@pytest.mark.parametrize("who,now,code", [
    ("analyst", T0 + 999, None),          # the last ms before expiry
    ("analyst", T0 + 1000, "expired"),    # expiry is inclusive of its own instant
    ("analyst", T0 + 10**9, "expired"),
    ("paydev", T0 + 10**9, None),         # no expiry
])
def test_expiry(world: tuple[AclTable, dict[str, str]], who: str, now: int, code: str | None) -> None:
    result = _login(world, who, now)
    if code is None:
        assert isinstance(result, Principal)
    else:
        assert isinstance(result, Refusal) and result.code == code and result.message == "token expired"


def test_refusals(world: tuple[AclTable, dict[str, str]]) -> None:
    table, bearers = world
    accessor, secret = bearers["paydev"].split(".")
    wrong = authenticate(table, accessor, "A" * 43, NOW)
    assert isinstance(wrong, Refusal) and wrong.code == "bad_secret" and wrong.message == "invalid token"
    unknown = authenticate(table, "f" * 16, secret, NOW)
    assert isinstance(unknown, Refusal) and unknown.code == "unknown_token" and unknown.message == "invalid token"
    assert isinstance(parse_bearer("nodot"), Refusal)
    assert isinstance(parse_bearer("0123456789abcdef.short"), Refusal)
    half = authenticate(table, accessor, None, NOW)
    assert isinstance(half, Refusal) and half.code == "malformed"


def test_without_anonymous_policy_a_bare_call_is_unauthenticated() -> None:
    refused = authenticate(AclTable(), None, None, NOW)
    assert isinstance(refused, Refusal) and refused.code == "unauthenticated"


def test_deleted_policy_grants_nothing_and_secret_is_never_stored(world: tuple[AclTable, dict[str, str]]) -> None:
    table, bearers = world
    copy = acl.table_from_dict(acl.table_to_dict(table))
    assert copy.delete_policy("pay-ops") is None
    accessor, secret = bearers["paydev"].split(".")
    principal = authenticate(copy, accessor, secret, NOW)
    assert isinstance(principal, Principal)
    assert not allowed(principal, "trigger", "team:payments")
    assert allowed(principal, "write", "team:payments")
    for bearer in bearers.values():
        assert bearer.split(".")[1] not in acl.encode_table(table).decode()


def _principal(world: tuple[AclTable, dict[str, str]], who: str) -> Principal:
    principal = _login(world, who, NOW)
    assert isinstance(principal, Principal), principal
    return principal


def test_visible_teams(world: tuple[AclTable, dict[str, str]]) -> None:
    paydev = visible_teams(_principal(world, "paydev"))
    assert "payments" in paydev and "billing" not in paydev and paydev.exact == ("payments",)
    analyst = visible_teams(_principal(world, "analyst"))
    assert "data-lake" in analyst and "payments" not in analyst and analyst.exact == ()
    assert visible_teams(_principal(world, "reader")).everything
    assert visible_teams(_principal(world, "mgmt")).everything
    assert "ml" not in visible_teams(_principal(world, "worker"))
    assert "payments" in visible_teams(_principal(world, "paydev"), "trigger")
    assert "data-lake" not in visible_teams(_principal(world, "analyst"), "trigger")


def test_may_serve(world: tuple[AclTable, dict[str, str]]) -> None:
    worker, mgmt = _principal(world, "worker"), _principal(world, "mgmt")
    assert worker.max_slots == 4 and worker.kind == "worker"
    assert acl.may_serve(worker, "gpu1", "ml")
    assert not acl.may_serve(worker, "gpu1", "payments")
    assert not acl.may_serve(worker, "", "ml")                     # no pool: pool:default
    assert not acl.may_serve(mgmt, "gpu1", "ml")                   # a client token serves nothing


# ---------------------------------------------------------------- table rules


def test_bootstrap_once_and_reserved_names() -> None:
    table = AclTable()
    a, b = mint_token(_rand(10)), mint_token(_rand(11))
    first = Token(a.accessor, a.secret_hash, policies=(acl.MANAGEMENT_POLICY,))
    assert table.bootstrap(first) is None and table.bootstrapped
    again = table.bootstrap(Token(b.accessor, b.secret_hash, policies=(acl.MANAGEMENT_POLICY,)))
    assert again is not None and again.code == "already_bootstrapped"
    assert b.accessor not in table.tokens
    reserved = table.put_policy(parse_policy({"name": "management", "rules": {"*": ["read"]}}))
    assert reserved is not None and reserved.code == "reserved"
    assert table.delete_policy("management") is not None
    assert table.set_anonymous("management") is not None


def test_bootstrap_refuses_anything_but_a_management_client_token() -> None:
    minted = mint_token(_rand(12))
    table = AclTable()
    table.put_policy(parse_policy(POLICIES[0]))
    problem = table.bootstrap(Token(minted.accessor, minted.secret_hash, policies=("pay-rw",)))
    assert problem is not None and problem.code == "invalid" and not table.bootstrapped


def test_references_must_exist_when_created() -> None:
    table = AclTable()
    problem = table.put_role(parse_role({"name": "r", "policies": ["nope"]}))
    assert problem is not None and problem.code == "not_found" and "nope" in problem.message
    minted = mint_token(_rand(13))
    token = parse_token({"accessor": minted.accessor, "secret_hash": minted.secret_hash,
                         "roles": ["ghost"], "policies": ["nope"]}, created_ms=T0)
    problem = table.create_token(token)
    assert problem is not None and "ghost" in problem.message and "nope" in problem.message
    assert not table.tokens and not table.roles


def test_accessor_is_never_reused() -> None:
    table = AclTable()
    table.put_policy(parse_policy(POLICIES[0]))
    _token(table, 20, policies=["pay-rw"])
    minted = mint_token(_rand(20))
    again = table.create_token(Token(minted.accessor, minted.secret_hash, policies=("pay-rw",)))
    assert again is not None and again.code == "exists"


@pytest.mark.parametrize("wire,fragment", [
    ({"name": "Bad Name", "rules": {"team:a": ["read"]}}, "bad policy name"),
    ({"name": "p", "rules": {}}, "needs rules"),
    ({"name": "p", "rules": {"teams:a": ["read"]}}, "bad resource pattern"),
    ({"name": "p", "rules": {"team:A*": ["read"]}}, "bad resource pattern"),
    ({"name": "p", "rules": {"team:a?": ["read"]}}, "bad resource pattern"),
    ({"name": "p", "rules": {"team:[ab]": ["read"]}}, "bad resource pattern"),
    ({"name": "p", "rules": {"team:a": ["raed"]}}, "unknown capabilities ['raed']"),
    ({"name": "p", "rules": {"team:a": []}}, "grants no capability"),
    ({"name": "p", "rules": {"team:a": "read"}}, "must be a list"),
    ({"name": "p", "rules": {"cluster": ["read"]}}, "do not apply to 'cluster'"),
    ({"name": "p", "rules": {"pool:gpu": ["trigger"]}}, "do not apply to 'pool:gpu'"),
    ({"name": "p", "rules": {"team:a": ["acl"]}}, "do not apply to 'team:a'"),
    ({"name": "ops\n", "rules": {"team:a": ["read"]}}, "bad policy name"),       # `$` before a newline
    ({"name": "p", "rules": {"team:a\n": ["read"]}}, "bad resource pattern"),
    ({"name": "p", "description": "x" * 300, "rules": {"team:a": ["read"]}}, "bad description"),
])
def test_policy_validation(wire: dict[str, object], fragment: str) -> None:
    with pytest.raises(AclInputError, match=re.escape(fragment)):
        parse_policy(wire)


@pytest.mark.parametrize("wire,fragment", [
    ({"accessor": "XYZ"}, "bad accessor"),
    ({"secret_hash": "abc"}, "bad secret_hash"),
    ({"kind": "robot"}, "bad token kind"),
    ({"kind": "worker"}, "needs max_slots"),
    ({"max_slots": 3}, "for worker tokens only"),
    ({"policies": []}, "at least one role or policy"),
    ({"roles": "admin"}, "must be a list"),
    ({"expires_ms": T0}, "not after its creation time"),
    ({"expires_ms": -5}, "bad expires_ms"),
    ({"policies": ["Bad"]}, "bad policy name"),
])
def test_token_validation(wire: dict[str, object], fragment: str) -> None:
    minted = mint_token(_rand(30))
    base: dict[str, object] = {"accessor": minted.accessor, "secret_hash": minted.secret_hash, "policies": ["p"]}
    with pytest.raises(AclInputError, match=re.escape(fragment)):
        parse_token({**base, **wire}, created_ms=T0)


def test_mint_token_format() -> None:
    minted = mint_token(_rand(40))
    assert re.fullmatch(r"[0-9a-f]{16}\.[A-Za-z0-9_-]{43}", minted.bearer)
    assert minted.secret_hash == acl.hash_secret(minted.accessor, minted.secret)
    assert mint_token(_rand(40)) == minted                     # deterministic in its input
    with pytest.raises(AclInputError):
        mint_token(b"short")


def test_canonical_encoding_ignores_insertion_order(world: tuple[AclTable, dict[str, str]]) -> None:
    table, _ = world
    reversed_table = AclTable(anonymous_policy=table.anonymous_policy, bootstrapped=table.bootstrapped)
    for k in reversed(list(table.policies)):
        reversed_table.policies[k] = table.policies[k]
    for k in reversed(list(table.roles)):
        reversed_table.roles[k] = table.roles[k]
    for k in reversed(list(table.tokens)):
        reversed_table.tokens[k] = table.tokens[k]
    assert acl.encode_table(reversed_table) == acl.encode_table(table)
    assert acl.table_from_dict(acl.table_to_dict(table)) == table
    changed = acl.table_from_dict(acl.table_to_dict(table))
    changed.set_anonymous(None)
    assert acl.encode_table(changed) != acl.encode_table(table)          # negative control


# ---------------------------------------------------------------- property: no capability from nowhere

TEAMS = ("a", "ab", "b", "data-x")
GLOBS = ("a", "a*", "*", "b", "*x", "data-*")
POOLS = ("gpu", "gpu2", "cpu")


def _naive_match(pattern: str, resource: str) -> bool:
    """An independent matcher: a glob turned into a regex over name characters."""
    if pattern == "*":
        return True
    kind, _, glob = pattern.partition(":")
    rkind, _, name = resource.partition(":")
    if pattern == "cluster" or resource == "cluster":
        return pattern == resource
    regex = "".join("[a-z0-9._-]*" if c == "*" else re.escape(c) for c in glob)
    return kind == rkind and re.fullmatch(regex, name) is not None


def _rule() -> st.SearchStrategy[tuple[str, list[str]]]:
    team = st.tuples(st.sampled_from([f"team:{g}" for g in GLOBS]),
                     st.lists(st.sampled_from(acl.TEAM_CAPABILITIES + (acl.SERVE,)), min_size=1, unique=True))
    pool = st.tuples(st.sampled_from([f"pool:{p}" for p in ("gpu*", "cpu", "*")]), st.just([acl.SERVE]))
    cluster = st.tuples(st.just("cluster"),
                        st.lists(st.sampled_from(acl.CLUSTER_CAPABILITIES), min_size=1, unique=True))
    return st.one_of(team, pool, cluster)


POLICY_NAMES = ("p0", "p1", "p2", "p3")
policies_st = st.dictionaries(st.sampled_from(POLICY_NAMES), st.lists(_rule(), min_size=1, max_size=4), min_size=1)
roles_st = st.dictionaries(st.sampled_from(("r0", "r1")), st.lists(st.sampled_from(POLICY_NAMES), min_size=1, unique=True))
query_st = st.tuples(st.sampled_from(acl.CAPABILITIES),
                     st.one_of(st.sampled_from([f"team:{t}" for t in TEAMS]),
                               st.sampled_from([f"pool:{p}" for p in POOLS]), st.just("cluster")))


@settings(max_examples=300, deadline=None)
@given(policies=policies_st, roles=roles_st, token_roles=st.lists(st.sampled_from(("r0", "r1")), unique=True),
       token_policies=st.lists(st.sampled_from(POLICY_NAMES), unique=True),
       expires_in=st.one_of(st.none(), st.integers(1, 100)), now_offset=st.integers(0, 200),
       deleted=st.lists(st.sampled_from(POLICY_NAMES + ("r0", "r1")), unique=True), query=query_st)
def test_no_capability_without_a_granting_policy_and_expiry_wins(
        policies: dict[str, list[tuple[str, list[str]]]], roles: dict[str, list[str]],
        token_roles: list[str], token_policies: list[str], expires_in: int | None, now_offset: int,
        deleted: list[str], query: tuple[str, str]) -> None:
    table = AclTable()
    for name, rules in policies.items():
        table.put_policy(parse_policy({"name": name, "rules": dict(rules)}))
    for name, refs in roles.items():
        table.put_role(parse_role({"name": name, "policies": refs}))
    token_roles = [r for r in token_roles if r in table.roles]
    token_policies = [p for p in token_policies if p in table.policies]
    if not token_roles and not token_policies:
        return
    minted = mint_token(_rand(99))
    expires = None if expires_in is None else T0 + expires_in
    assert table.create_token(parse_token({"accessor": minted.accessor, "secret_hash": minted.secret_hash,
                                           "roles": token_roles, "policies": token_policies,
                                           "expires_ms": expires}, created_ms=T0)) is None
    for name in deleted:                                       # dangling references grant nothing
        table.delete_policy(name) if name.startswith("p") else table.delete_role(name)

    now = T0 + now_offset
    result = authenticate(table, minted.accessor, minted.secret, now)
    if expires is not None and now >= expires:
        assert isinstance(result, Refusal) and result.code == "expired"
        return
    assert isinstance(result, Principal)
    capability, resource = query
    reachable = set(token_policies) | {p for r in token_roles if r in table.roles for p in table.roles[r].policies}
    granting = [name for name in sorted(reachable) if name in table.policies
                for rule in table.policies[name].rules
                if capability in rule.capabilities and _naive_match(rule.pattern, resource)]
    decision: Decision = allowed(result, capability, resource)
    assert decision.allowed == bool(granting), (decision, granting)
    if decision.allowed:
        assert decision.policy in granting
    wrong = authenticate(table, minted.accessor, minted.secret[:-1] + ("A" if minted.secret[-1] != "A" else "B"), now)
    assert isinstance(wrong, Refusal)


# ---------------------------------------------------------------- the per-RPC capability table


def _proto_methods() -> set[str]:
    """Every `/package.Service/Method` declared in proto/schedd_proto, read from the .proto text."""
    out: set[str] = set()
    root = Path(__file__).resolve().parents[2] / "proto" / "schedd_proto"
    for proto in sorted(root.glob("*.proto")):
        text = re.sub(r"//[^\n]*", "", proto.read_text())
        package = re.search(r"^\s*package\s+([\w.]+)\s*;", text, re.M)
        assert package, proto
        for service, body in re.findall(r"service\s+(\w+)\s*\{(.*?)\n\}", text, re.S):
            for method in re.findall(r"\brpc\s+(\w+)\s*\(", body):
                out.add(f"/{package.group(1)}.{service}/{method}")
    return out


def test_every_rpc_has_exactly_one_capability() -> None:
    methods = _proto_methods()
    assert len(methods) >= 28                                   # the parser found all five services
    assert methods == set(RPC_CAPABILITIES), (sorted(methods - set(RPC_CAPABILITIES)),
                                              sorted(set(RPC_CAPABILITIES) - methods))
    assert need_of("/schedd.v1.Scheduler/NotAnRpc") is None
    assert need_of("/schedd.v1.Scheduler/TriggerJob") == Need("trigger", "team")
    with pytest.raises(ValueError):
        Need("quota", "team")
