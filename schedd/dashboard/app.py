"""The dashboard's routes (aiohttp): login and logout, the pages, their JSON endpoints.

Rules every route keeps:
- No session, or a session whose token no longer authenticates: a page redirects to /login
  (with `next`), a JSON endpoint answers 401 and the page script goes to /login.
- Every POST carries the CSRF token: the session's (a form field `csrf` or the `X-CSRF-Token`
  header); the login form, before a session exists, the value of its own cookie (double
  submit). Without it: 403, nothing done.
- The cookie is an opaque id (sessions.py), HttpOnly, SameSite=Strict, Secure over HTTPS, and
  named for the port: browsers share cookies between ports of one host, and a cluster on one
  machine serves a dashboard per node.
- The token never appears in a URL the server sees: `schedctl dashboard`'s link carries it in
  the fragment (`/login#token=...`), which the login page's script posts as the form would.
- Pages are a shell plus our script; the data comes from the JSON endpoints, polled, so a page
  follows the cluster without a reload. A strict CSP allows only this origin's scripts.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from aiohttp import web

from schedd.dashboard.backend import PAGE_SIZES, Api, ApiError, Unauthenticated
from schedd.dashboard.sessions import COOKIE, PRE_COOKIE, Session, Sessions, same

STATIC = Path(__file__).parent / "static"
STATIC_FILES = {"dashboard.js": "text/javascript", "login.js": "text/javascript", "dashboard.css": "text/css"}
HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
MAX_TOKEN_CHARS = 512

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SESSION: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)
API: web.AppKey[Api] = web.AppKey("api", Api)
SECURE: web.AppKey[bool] = web.AppKey("secure", bool)
PORT: web.AppKey[int] = web.AppKey("port", int)


def build(api: Api, *, secure: bool, port: int, sessions: Sessions | None = None) -> web.Application:
    """The dashboard's application; `secure`: served over HTTPS (the cookie is then Secure)."""
    app = web.Application(middlewares=[_headers, _csrf], client_max_size=64 * 1024)
    app[API], app[SECURE], app[PORT] = api, secure, port
    app[SESSION] = sessions if sessions is not None else Sessions()
    app.router.add_get("/", home)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/jobs", jobs_page)
    app.router.add_get("/cluster", cluster_page)
    app.router.add_get("/api/jobs", jobs_json)
    app.router.add_get("/api/cluster", cluster_json)
    app.router.add_get("/static/{name}", static)
    return app


# ---------------------------------------------------------------- middlewares

@web.middleware
async def _headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as e:          # redirects and refusals: raised, with the same headers
        if request.path != "/metrics":
            e.headers.update(HEADERS)
        raise
    if request.path != "/metrics":
        response.headers.update(HEADERS)
    return response


@web.middleware
async def _csrf(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a state-changing request that does not carry the expected CSRF token."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return await handler(request)
    if request.path == "/login":
        form = await request.post()
        expected = request.cookies.get(_pre_cookie(request), "")
        if not same(_text(form.get("csrf")), expected):
            raise web.HTTPForbidden(text="the login form expired: reload the login page")
        return await handler(request)
    session = _session(request)
    given = request.headers.get("X-CSRF-Token")
    if given is None and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        given = _text((await request.post()).get("csrf"))
    if session is None or not same(given, session.csrf):
        raise web.HTTPForbidden(text="missing or wrong CSRF token: reload the page")
    return await handler(request)


# ---------------------------------------------------------------- sessions

def _cookie(request: web.Request) -> str:
    return f"{COOKIE}_{request.app[PORT]}"


def _pre_cookie(request: web.Request) -> str:
    return f"{PRE_COOKIE}_{request.app[PORT]}"


def _session(request: web.Request) -> Session | None:
    return request.app[SESSION].get(request.cookies.get(_cookie(request)))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


async def home(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/jobs")


def _to_login(request: web.Request) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")


def _safe_next(value: str) -> str:
    """Only a path of this site (no scheme, host or protocol-relative URL): no open redirect."""
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/jobs"
    return value


async def _who(request: web.Request) -> tuple[Session, dict[str, Any]]:
    """The session and its principal, the token checked now; else off to /login."""
    session = _session(request)
    if session is None:
        raise _to_login(request)
    try:
        who = await request.app[API].whoami(session.token)
    except Unauthenticated:
        request.app[SESSION].close(session.id)
        raise _to_login(request) from None
    return session, who


async def _json(request: web.Request, call: Callable[[str], Awaitable[dict[str, Any]]]) -> web.Response:
    session = _session(request)
    if session is None:
        return web.json_response({"error": "not logged in", "login": "/login"}, status=401)
    try:
        return web.json_response(await call(session.token))
    except Unauthenticated as e:
        request.app[SESSION].close(session.id)
        return web.json_response({"error": e.message, "login": "/login"}, status=401)
    except ApiError as e:
        status = {"PERMISSION_DENIED": 403, "INVALID_ARGUMENT": 400, "NOT_FOUND": 404}.get(e.code, 503)
        return web.json_response({"error": e.message, "code": e.code}, status=status)


# ---------------------------------------------------------------- login, logout

async def login_page(request: web.Request) -> web.Response:
    csrf = request.cookies.get(_pre_cookie(request)) or secrets.token_urlsafe(32)
    error = _text(request.query.get("error"))
    nxt = _safe_next(_text(request.query.get("next")) or "/jobs")
    body = f"""<main class="login">
<h1>schedd</h1>
<form method="post" action="/login" id="login">
<input type="hidden" name="csrf" value="{html.escape(csrf)}">
<input type="hidden" name="next" value="{html.escape(nxt)}">
<label for="token">Token</label>
<input type="password" id="token" name="token" autocomplete="off" required autofocus>
<button type="submit">Log in</button>
{f'<p class="error" id="error">{html.escape(error)}</p>' if error else ''}
<p class="hint">Paste a token (<code>schedctl acl token create</code>), or open the link that
<code>schedctl dashboard</code> prints.</p>
</form></main>"""
    response = _page("Log in", body, scripts=("login.js",))
    response.set_cookie(_pre_cookie(request), csrf, httponly=True, secure=request.app[SECURE],
                        samesite="Strict", path="/login")
    return response


async def login(request: web.Request) -> web.Response:
    form = await request.post()
    token = _text(form.get("token")).strip()
    nxt = _safe_next(_text(form.get("next")) or "/jobs")
    if token.lower().startswith("bearer "):
        token = token[len("bearer "):].strip()
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise web.HTTPSeeOther("/login?error=" + quote("enter a token"))
    try:
        who = await request.app[API].whoami(token)
    except Unauthenticated as e:
        raise web.HTTPSeeOther("/login?error=" + quote(f"not logged in: {e.message}")) from None
    except ApiError as e:
        raise web.HTTPSeeOther("/login?error=" + quote(f"cannot log in now: {e.message}")) from None
    session = request.app[SESSION].open(token, who["principal"])
    response = web.HTTPSeeOther(nxt)
    response.set_cookie(_cookie(request), session.id, httponly=True, secure=request.app[SECURE],
                        samesite="Strict", path="/")
    response.del_cookie(_pre_cookie(request), path="/login")
    raise response


async def logout(request: web.Request) -> web.Response:
    request.app[SESSION].close(request.cookies.get(_cookie(request)))
    response = web.HTTPSeeOther("/login")
    response.del_cookie(_cookie(request), path="/")
    raise response


# ---------------------------------------------------------------- pages

def _page(title: str, body: str, *, scripts: tuple[str, ...] = (), meta: dict[str, str] | None = None) -> web.Response:
    metas = "".join(f'<meta name="{html.escape(k)}" content="{html.escape(v)}">' for k, v in (meta or {}).items())
    tags = "".join(f'<script src="/static/{s}" defer></script>' for s in scripts)
    text = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} - schedd</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">{metas}'
            f'<link rel="stylesheet" href="/static/dashboard.css">{tags}</head><body>{body}</body></html>')
    return web.Response(text=text, content_type="text/html")


def _shell(title: str, active: str, session: Session, who: dict[str, Any], main: str) -> web.Response:
    links = [("jobs", "/jobs", "Jobs")] + ([("cluster", "/cluster", "Cluster")] if who["operator"] else [])
    nav = "".join(f'<a href="{href}"{" class=active" if key == active else ""} id="nav-{key}">{label}</a>'
                  for key, href, label in links)
    body = f"""<header><span class="brand">schedd</span><nav>{nav}</nav>
<span class="who" id="principal">{html.escape(who["principal"])}</span>
<form method="post" action="/logout" class="logout"><input type="hidden" name="csrf" value="{html.escape(session.csrf)}">
<button type="submit" id="logout">Log out</button></form></header>
<main>{main}</main>"""
    return _page(title, body, scripts=("dashboard.js",), meta={"csrf": session.csrf, "page": active})


async def jobs_page(request: web.Request) -> web.Response:
    session, who = await _who(request)
    sizes = "".join(f'<option value="{n}"{" selected" if n == 50 else ""}>{n}</option>' for n in PAGE_SIZES)
    main = f"""<h1>Jobs <span class="count" id="total"></span></h1>
<form class="filters" id="filters">
<label>Name <input name="text" id="f-text" placeholder="part of a job's name"></label>
<label>Team <input name="team" id="f-team" placeholder="every team you may read"></label>
<label>State <select name="state" id="f-state"><option value="">all</option><option value="active">active</option>
<option value="paused">paused</option></select></label>
<label>Per page <select name="size" id="f-size">{sizes}</select></label>
</form>
<table id="jobs"><thead><tr><th>Job</th><th>Team</th><th>Schedule</th><th>Next run</th><th>Last run</th>
<th>Last state</th><th>Runs</th></tr></thead><tbody></tbody></table>
<p class="pager"><button type="button" id="first">First</button> <button type="button" id="prev">Previous</button>
<span id="page"></span> <button type="button" id="next">Next</button></p>
<p class="status" id="status"></p>"""
    return _shell("Jobs", "jobs", session, who, main)


async def cluster_page(request: web.Request) -> web.Response:
    session, who = await _who(request)
    main = """<h1>Cluster</h1>
<p id="summary"></p>
<table id="nodes"><thead><tr><th>Node</th><th>Role</th><th>Term</th><th>Commit</th><th>Applied</th><th>Lag</th>
<th>Version</th><th>Level</th><th>Address</th></tr></thead><tbody></tbody></table>
<ul class="warnings" id="warnings"></ul>
<p class="status" id="status"></p>"""
    return _shell("Cluster", "cluster", session, who, main)


# ---------------------------------------------------------------- JSON

async def jobs_json(request: web.Request) -> web.Response:
    q = request.query
    try:
        size = int(q.get("size", "50"))
    except ValueError:
        size = 0
    if size not in PAGE_SIZES:
        return web.json_response({"error": f"size must be one of {', '.join(map(str, PAGE_SIZES))}"}, status=400)
    team, state, after, text = q.get("team", "").strip(), q.get("state", ""), q.get("after", ""), q.get("text", "")
    return await _json(request, lambda token: request.app[API].jobs(token, team=team, state=state, text=text.strip(),
                                                                     after=after, size=size))


async def cluster_json(request: web.Request) -> web.Response:
    return await _json(request, request.app[API].cluster)


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kind = STATIC_FILES.get(name)
    if kind is None:
        raise web.HTTPNotFound()
    return web.Response(body=(STATIC / name).read_bytes(), content_type=kind, charset="utf-8")
