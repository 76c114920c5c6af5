"""The dashboard's HTTP rules, against an in-process server and a fake API: sessions, CSRF on
every POST, where a login may send the browser, a session that ends with its token, and the
one-time code of a `schedctl dashboard` link (one login, then refused; its token checked)."""

from __future__ import annotations

import gzip
import json
import re
from urllib.parse import unquote

import pytest
from aiohttp.test_utils import TestClient, TestServer

from schedd.dashboard import app as dashboard
from schedd.dashboard.backend import ApiError, Unauthenticated
from schedd.dashboard.login_codes import LoginCodes
from schedd.dashboard.sessions import Sessions

PORT = 9101


class FakeApi:
    """Answers like the API for the tokens in `valid`; a token removed from it stops working."""

    def __init__(self) -> None:
        self.valid = {"good.token": "token:good", "team.token": "token:team"}
        self.calls: list[tuple[str, str]] = []

    async def whoami(self, token: str) -> dict:
        self.calls.append(("whoami", token))
        if token not in self.valid:
            raise Unauthenticated("UNAUTHENTICATED", "unknown token")
        return {"principal": self.valid[token], "kind": "client", "grants": [], "operator": token == "good.token"}

    async def jobs(self, token: str, **kw) -> dict:
        self.calls.append(("jobs", token))
        if token not in self.valid:
            raise Unauthenticated("UNAUTHENTICATED", "token expired")
        return {"jobs": [{"name": "j1", "team": kw["team"] or "a"}], "next": "", "total": 1}

    async def cluster(self, token: str, with_digest: bool = False) -> dict:
        raise ApiError("PERMISSION_DENIED", "missing capability 'operator'")


@pytest.fixture
async def client():
    api = FakeApi()
    codes = LoginCodes()
    app = dashboard.build(api, secure=False, port=PORT, codes=codes)  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as c:
        c.api, c.codes = api, codes
        yield c


async def login(c: TestClient, token: str = "good.token", nxt: str = "/jobs"):
    page = await c.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)
    return await c.post("/login", data={"token": token, "csrf": csrf, "next": nxt}, allow_redirects=False)


def session_csrf(text: str) -> str:
    return re.search(r'<meta name="csrf" content="([^"]+)"', text).group(1)


async def test_pages_without_a_session_go_to_login_and_json_answers_401(client):
    r = await client.get("/jobs", allow_redirects=False)
    assert r.status == 303 and unquote(r.headers["Location"]) == "/login?next=/jobs"
    r = await client.get("/api/jobs")
    assert r.status == 401 and (await r.json())["login"] == "/login"
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]


async def test_login_sets_a_strict_httponly_cookie_and_lands_on_next(client):
    r = await login(client, nxt="/cluster")
    assert r.status == 303 and r.headers["Location"] == "/cluster"
    cookie = r.headers.getall("Set-Cookie")
    session = next(h for h in cookie if h.startswith(f"schedd_session_{PORT}="))
    assert "HttpOnly" in session and "SameSite=Strict" in session and "good.token" not in session
    r = await client.get("/api/jobs?team=b&size=25")
    assert r.status == 200 and (await r.json())["jobs"] == [{"name": "j1", "team": "b"}]


@pytest.mark.parametrize("nxt", ["//evil.example/x", "https://evil.example/", "/\\evil", "jobs"])
async def test_login_never_redirects_off_the_site(client, nxt):
    r = await login(client, nxt=nxt)
    assert r.headers["Location"] == "/jobs"


async def test_login_refuses_a_post_without_its_csrf_cookie_value(client):
    await client.get("/login")
    r = await client.post("/login", data={"token": "good.token", "csrf": "forged"}, allow_redirects=False)
    assert r.status == 403
    assert ("whoami", "good.token") not in client.api.calls


async def test_a_bad_token_is_sent_back_with_the_reason(client):
    r = await login(client, token="bad.token")
    assert r.status == 303 and r.headers["Location"].startswith("/login?error=")
    assert (await client.get("/api/jobs")).status == 401


async def test_every_post_needs_the_session_csrf_token(client):
    await login(client)
    page = await client.get("/jobs")
    csrf = session_csrf(await page.text())
    assert (await client.post("/logout", allow_redirects=False)).status == 403
    assert (await client.post("/logout", headers={"X-CSRF-Token": "x" + csrf}, allow_redirects=False)).status == 403
    assert (await client.get("/api/jobs")).status == 200           # still logged in
    r = await client.post("/logout", data={"csrf": csrf}, allow_redirects=False)
    assert r.status == 303 and r.headers["Location"] == "/login"
    assert (await client.get("/api/jobs")).status == 401


async def test_the_session_ends_when_its_token_stops_authenticating(client):
    await login(client, token="team.token")
    assert (await client.get("/api/jobs")).status == 200
    del client.api.valid["team.token"]                               # deleted, or expired
    assert (await client.get("/api/jobs")).status == 401
    client.api.valid["team.token"] = "token:team"                    # the session is gone for good
    assert (await client.get("/api/jobs")).status == 401


async def test_the_cluster_link_and_page_follow_the_token_rights(client):
    await login(client, token="team.token")
    page = await (await client.get("/jobs")).text()
    assert 'id="nav-cluster"' not in page and "token:team" in page
    r = await client.get("/api/cluster")
    assert r.status == 403 and "operator" in (await r.json())["error"]


async def test_a_page_size_outside_the_choices_is_refused(client):
    await login(client)
    assert (await client.get("/api/jobs?size=100000")).status == 400


def test_sessions_expire_when_idle_and_are_bounded():
    now = [0.0]
    s = Sessions(idle_s=10, limit=2, now=lambda: now[0])
    a, b, c = (s.open(t, t) for t in ("a", "b", "c"))
    assert s.get(a.id) is None and s.get(b.id) is b and len(s) == 2
    now[0] = 11.0
    assert s.get(c.id) is None and s.get(b.id) is None


async def login_with_code(c: TestClient, code: str, *, csrf: str | None = None):
    page = await c.get("/login")
    form_csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)
    return await c.post("/login", data={"code": code, "csrf": form_csrf if csrf is None else csrf, "next": "/jobs"},
                        allow_redirects=False)


async def test_a_login_code_opens_one_session_and_then_is_refused(client):
    minted = client.codes.mint("team.token")
    r = await login_with_code(client, minted.code)
    assert r.status == 303 and r.headers["Location"] == "/jobs"
    assert ("whoami", "team.token") in client.api.calls                # checked it still authenticates
    assert (await client.get("/api/jobs")).status == 200
    await client.post("/logout", data={"csrf": session_csrf(await (await client.get("/jobs")).text())})
    r = await login_with_code(client, minted.code)                     # the same link again
    assert r.status == 303 and unquote(r.headers["Location"]) == "/login?error=" + dashboard.CODE_REFUSED
    assert not any(h.startswith(f"schedd_session_{PORT}=") and "Max-Age=0" not in h
                   for h in r.headers.getall("Set-Cookie", []))
    assert (await client.get("/api/jobs")).status == 401
    page = await client.get(r.headers["Location"])
    assert "already used or has expired: run schedctl dashboard again" in await page.text()


async def test_a_login_code_needs_the_form_csrf_and_a_token_that_still_works(client):
    minted = client.codes.mint("team.token")
    assert (await login_with_code(client, minted.code, csrf="forged")).status == 403
    assert len(client.codes) == 1                                      # refused before redeeming
    del client.api.valid["team.token"]
    r = await login_with_code(client, minted.code)
    assert r.status == 303 and "not%20logged%20in" in r.headers["Location"]
    assert len(client.codes) == 0 and (await client.get("/api/jobs")).status == 401


async def test_an_unknown_code_is_refused_like_a_used_one(client):
    r = await login_with_code(client, "x" * 43)
    assert unquote(r.headers["Location"]) == "/login?error=" + dashboard.CODE_REFUSED


async def test_a_dag_clear_needs_the_csrf_token_and_a_task(client):
    await login(client)
    csrf = session_csrf(await (await client.get("/dags/etl")).text())
    assert (await client.post("/api/dags/etl/clear", json={"task": "load"})).status == 403
    r = await client.post("/api/dags/etl/clear", json={"run_id": "x"}, headers={"X-CSRF-Token": csrf})
    assert r.status == 400 and (await r.json())["error"] == "give the task to clear"
    assert (await client.get("/api/dags/etl/clear?run=x")).status == 400      # the confirmation's preview


async def test_the_audit_section_is_for_a_principal_holding_acl(client):
    await login(client)
    page = await (await client.get("/cluster")).text()
    assert 'id="nav-cluster"' in page and 'id="audit-section"' not in page    # an operator without acl
    r = await client.get("/api/cluster/audit?outcome=maybe")
    assert r.status == 400 and "outcome must be one of" in (await r.json())["error"]
    real = client.api.whoami

    async def with_acl(token: str) -> dict:
        return {**await real(token), "grants": [{"pattern": "cluster", "capabilities": ["operator", "acl"]}]}
    client.api.whoami = with_acl
    assert 'id="audit-section"' in await (await client.get("/cluster")).text()


async def test_a_large_json_answer_is_gzipped_when_the_browser_accepts_it(client, monkeypatch):
    from schedd.dashboard import app as dashboard_app
    await login(client)
    monkeypatch.setattr(dashboard_app, "GZIP_MIN", 10)
    r = await client.get("/api/jobs", headers={"Accept-Encoding": "gzip, deflate, br"}, auto_decompress=False)
    assert r.headers.get("Content-Encoding") == "gzip"
    assert json.loads(gzip.decompress(await r.read()))["jobs"][0]["name"] == "j1"
    r = await client.get("/api/jobs", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in r.headers and (await r.json())["total"] == 1
    monkeypatch.setattr(dashboard_app, "GZIP_MIN", 10_000)      # a small answer: as it is
    r = await client.get("/api/jobs", headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in r.headers
