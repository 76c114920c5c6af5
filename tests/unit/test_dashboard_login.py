"""One-time dashboard login links: the code table (one use, a lifetime on an injected clock, a
bound, the constant-time comparison) and who may have a link minted (Acl.LoginLink through the
authorizing interceptor and the servicer: a client token yes, a worker token, a certificate
alone or no credential no, each saying why; a minted link and a refusal are audited)."""

from __future__ import annotations

import os
import threading
import types
from typing import Any

import grpc
import pytest

import schedd.dashboard.login_codes as login_codes
from schedd.api import auth
from schedd.api.acl_service import AclService
from schedd.core import acl as A
from schedd.core import commands as C
from schedd.core.state import SchedulerState
from schedd.dashboard.login_codes import LoginCodes
from schedd.runtime.http import advertised_url
from schedd_proto import acl_pb2 as apb

NOW = 1_790_000_000_000
METHOD = "/schedd.v1.Acl/LoginLink"
URL = "https://10.0.0.1:9101/"


# ---------------------------------------------------------------- the code table

def test_a_code_is_256_random_bits_and_logs_in_once() -> None:
    codes = LoginCodes()
    minted = codes.mint("acc.secret")
    assert minted is not None and minted.expires_in_s == 60.0
    assert len(minted.code) == 43                  # 32 bytes, base64url without padding
    assert codes.redeem(minted.code) == "acc.secret"
    assert codes.redeem(minted.code) is None       # spent
    assert len(codes) == 0


def test_a_code_expires_on_the_injected_clock_and_is_spent_by_a_late_try() -> None:
    now = [100.0]
    codes = LoginCodes(ttl_s=60, now=lambda: now[0])
    early, late = codes.mint("a.a"), codes.mint("b.b")
    assert early is not None and late is not None
    now[0] = 159.9
    assert codes.redeem(early.code) == "a.a"
    now[0] = 160.0
    assert codes.redeem(late.code) is None and len(codes) == 0    # expired, and gone


def test_the_table_is_bounded_and_expired_codes_make_room() -> None:
    now = [0.0]
    codes = LoginCodes(ttl_s=10, limit=2, now=lambda: now[0])
    first, second = codes.mint("a.a"), codes.mint("b.b")
    assert first is not None and second is not None
    assert codes.mint("c.c") is None               # refused: the printed links keep working
    assert codes.redeem(first.code) == "a.a"
    assert codes.mint("c.c") is not None
    now[0] = 10.0
    assert codes.mint("d.d") is not None and len(codes) == 1     # both old ones expired


def test_unknown_altered_and_oversized_codes_redeem_nothing() -> None:
    codes = LoginCodes()
    minted = codes.mint("acc.secret")
    assert minted is not None
    flipped = minted.code[:-1] + ("A" if minted.code[-1] != "A" else "B")
    for bad in ("", flipped, minted.code + "x", "x" * 10_000):
        assert codes.redeem(bad) is None
    assert codes.redeem(minted.code) == "acc.secret"          # a wrong guess spends nothing else


def test_the_stored_code_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = login_codes.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(login_codes.hmac, "compare_digest", spy)
    codes = LoginCodes(random=lambda n: bytes(range(n)))
    minted = codes.mint("acc.secret")
    assert minted is not None
    assert codes.redeem(minted.code) == "acc.secret"
    assert compared == [(minted.code.encode(), minted.code.encode())]


# ---------------------------------------------------------------- who may have a link

class _Node:
    def __init__(self, *, acl: bool = True) -> None:
        self.state, self.lock = SchedulerState(), threading.RLock()
        self.cfg = types.SimpleNamespace(node_id="n1", acl=types.SimpleNamespace(enabled=acl))
        self.index = 0

    def apply(self, kind: str, **args: Any) -> None:
        self.index += 1
        assert self.state.apply(C.encode(kind, rid="", now=NOW, term=1, by="t", **args), self.index).ok

    def token(self, kind: str = "client", policies: tuple[str, ...] = ("team-a",)) -> str:
        minted = A.mint_token(os.urandom(A.TOKEN_RANDOM_BYTES))
        self.apply(C.ACL_TOKEN_CREATE, token={"accessor": minted.accessor, "secret_hash": minted.secret_hash,
                                              "kind": kind, "policies": list(policies),
                                              **({"max_slots": 4} if kind == "worker" else {})})
        return minted.bearer


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class _Context:
    async def abort(self, code: grpc.StatusCode, message: str, trailing_metadata: Any = ()) -> None:
        raise Aborted(code, message)


@pytest.fixture
def world():
    node = _Node()
    node.apply(C.ACL_POLICY_PUT, policy={"name": "team-a", "rules": {"team:a": ["read"]}})
    codes, audit = LoginCodes(), []
    codes.url = URL
    service = AclService(node, types.SimpleNamespace(now_ms=lambda: NOW), None, None,  # type: ignore[arg-type]
                         login_links=codes, audit=audit.append)
    interceptor = auth.AuthInterceptor(node, types.SimpleNamespace(now_ms=lambda: NOW),  # type: ignore[arg-type]
                                       auth.NodeSigner("k" * 44))
    return types.SimpleNamespace(node=node, codes=codes, audit=audit, service=service, interceptor=interceptor)


async def _ask(w, info: auth.CallInfo, *, url_only: bool = False) -> apb.LoginLinkResponse:
    reset = auth.CALL.set(info)
    try:
        return await w.service.LoginLink(apb.LoginLinkRequest(url_only=url_only), _Context())
    finally:
        auth.CALL.reset(reset)


def _admitted(w, bearer: str) -> auth.CallInfo:
    md = {"authorization": f"Bearer {bearer}"} if bearer else {}
    return w.interceptor.check(METHOD, md, None, apb.LoginLinkRequest(), "ipv4:10.0.0.9:5000")


async def test_a_client_token_without_any_capability_gets_a_link_for_itself(world) -> None:
    bearer = world.node.token(policies=("team-a",))        # may read team a: nothing of the cluster
    r = await _ask(world, _admitted(world, bearer))
    assert r.link.startswith(URL + "login#code=") and r.dashboard_url == URL and r.expires_in_ms == 60_000
    code = r.link.partition("#code=")[2]
    assert world.codes.redeem(code) == bearer
    [row] = world.audit
    assert (row["principal"], row["action"], row["outcome"], row["source"], row["target"]) == \
        ("token:" + bearer.partition(".")[0], "Acl.LoginLink", "allowed", "ipv4:10.0.0.9:5000", "dashboard:n1")
    assert bearer.partition(".")[2] not in repr(world.audit)                   # never the secret


async def test_a_bad_token_or_none_is_unauthenticated(world) -> None:
    with pytest.raises(auth.Denied) as e:
        _admitted(world, "nope.nope")
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(Aborted) as a:
        await _ask(world, _admitted(world, ""))            # open method: the servicer refuses it
    assert a.value.code == grpc.StatusCode.UNAUTHENTICATED and len(world.codes) == 0


async def test_a_worker_token_is_refused_and_audited(world) -> None:
    bearer = world.node.token(kind="worker")
    with pytest.raises(Aborted) as a:
        await _ask(world, _admitted(world, bearer))
    assert a.value.code == grpc.StatusCode.PERMISSION_DENIED and "worker token" in a.value.message
    assert len(world.codes) == 0 and [r["outcome"] for r in world.audit] == ["denied"]


async def test_a_certificate_alone_is_told_to_log_in_with_a_token_but_may_read_the_address(world) -> None:
    admin = A.Principal("cert:admin/ops", "client", tuple(A._grants(A.MANAGEMENT)))
    info = auth.CallInfo(admin.name, "ipv4:10.0.0.9:5000", METHOD, admin)
    with pytest.raises(Aborted) as a:
        await _ask(world, info)
    assert a.value.code == grpc.StatusCode.PERMISSION_DENIED and "--token" in a.value.message
    assert len(world.codes) == 0
    r = await _ask(world, info, url_only=True)
    assert (r.dashboard_url, r.link, r.expires_in_ms) == (URL, "", 0) and len(world.codes) == 0


async def test_no_dashboard_or_too_many_links_are_refused(world) -> None:
    bearer = world.node.token()
    world.codes.url = ""
    with pytest.raises(Aborted) as a:
        await _ask(world, _admitted(world, bearer))
    assert a.value.code == grpc.StatusCode.FAILED_PRECONDITION and "metrics_address" in a.value.message
    world.codes.url, world.codes.limit = URL, 1
    await _ask(world, _admitted(world, bearer))
    with pytest.raises(Aborted) as a:
        await _ask(world, _admitted(world, bearer))
    assert a.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_with_access_control_off_a_link_needs_no_token() -> None:
    codes = LoginCodes()
    codes.url = URL
    service = AclService(_Node(acl=False), None, None, None, login_links=codes)  # type: ignore[arg-type]
    reset = auth.CALL.set(auth.CallInfo("ipv4:127.0.0.1:1", "ipv4:127.0.0.1:1", METHOD, None))
    try:
        r = await service.LoginLink(apb.LoginLinkRequest(), _Context())
    finally:
        auth.CALL.reset(reset)
    assert codes.redeem(r.link.partition("#code=")[2]) == ""


@pytest.mark.parametrize("bind, grpc_address, expected", [
    ("127.0.0.1:9101", "10.0.0.5:7070", "https://127.0.0.1:9101/"),       # a loopback dashboard stays so
    ("10.0.0.5:9101", "0.0.0.0:7070", "https://10.0.0.5:9101/"),
    ("0.0.0.0:9101", "n1.example:7070", "https://n1.example:9101/"),      # reached where clients dial the node
    ("[::]:9101", "[fd00::1]:7070", "https://[fd00::1]:9101/"),
    ("0.0.0.0:9101", "0.0.0.0:7070", "https://127.0.0.1:9101/"),          # nothing better known
])
def test_a_link_names_the_host_clients_reach_the_node_at(bind: str, grpc_address: str, expected: str) -> None:
    host = bind.rpartition(":")[0].strip("[]")
    served = f"https://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:9101/"
    assert advertised_url(served, bind, grpc_address) == expected
