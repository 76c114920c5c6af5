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
- The token never appears in a URL: `schedctl dashboard`'s link carries a one-time code
  (`login_codes`: minted by the API for the caller's token, 256 random bits, one use, a minute)
  in the fragment (`/login#code=...`), which no request line, log or Referer holds; the login
  page's script posts it with the form's CSRF value, and the server redeems it once, checks
  that its token still authenticates and opens the session as a token login does. A used or
  expired code is refused with the same message, and no session.
- Pages are a shell plus their script; the data comes from the JSON endpoints, so a page
  follows the cluster without a reload. A strict CSP allows only this origin's scripts.
- A JSON answer of GZIP_MIN bytes or more is compressed when the browser accepts it.

Each page lives in a module of its own (`PAGES`: its routes, HTML and calls); what they share
is in `shell`.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote, urlsplit

from aiohttp import web

from schedd.dashboard import calendars, cluster, dags, forecast, job, jobs, live, run
from schedd.dashboard.backend import Api, ApiError, Unauthenticated
from schedd.dashboard.login_codes import LoginCodes
from schedd.dashboard.sessions import Sessions, same
from schedd.dashboard.shell import (API, CODES, HEADERS, PORT, SECURE, SESSION, cookie_name, page, pre_cookie_name,
                                    session_of, text)

STATIC = Path(__file__).parent / "static"
TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml", ".map": "application/json"}
MAX_TOKEN_CHARS = 512
GZIP_MIN = 1024          # a JSON answer this large or larger is compressed (a Jobs page: 95 kB to about 6)
CODE_REFUSED = "this login link was already used or has expired: run schedctl dashboard again"
PAGES = (jobs, job, dags, calendars, forecast, cluster, run)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build(api: Api, *, secure: bool, port: int, sessions: Sessions | None = None,
          codes: LoginCodes | None = None) -> web.Application:
    """The dashboard's application; `secure`: served over HTTPS (the cookie is then Secure);
    `codes`: the one-time login codes this node's API mints (shared with its Acl servicer)."""
    app = web.Application(middlewares=[_headers, _csrf], client_max_size=64 * 1024)
    app[API], app[SECURE], app[PORT] = api, secure, port
    app[SESSION] = sessions if sessions is not None else Sessions()
    app[CODES] = codes if codes is not None else LoginCodes()
    app.router.add_get("/", home)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/static/{path:.+}", static)
    live.install(app)
    for module in (*PAGES, live):
        module.add_routes(app.router)
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
    if request.path != "/metrics" and not response.prepared:
        response.headers.update(HEADERS)
        if (isinstance(response, web.Response) and response.content_type == "application/json"
                and isinstance(response.body, bytes) and len(response.body) >= GZIP_MIN):
            gz = "gzip" in request.headers.get("Accept-Encoding", "")
            response.enable_compression(web.ContentCoding.gzip if gz else None)   # else as accepted, if any
    return response


@web.middleware
async def _csrf(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a state-changing request that does not carry the expected CSRF token."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return await handler(request)
    if request.path == "/login":
        form = await request.post()
        expected = request.cookies.get(pre_cookie_name(request), "")
        if not same(text(form.get("csrf")), expected):
            raise web.HTTPForbidden(text="the login form expired: reload the login page")
        return await handler(request)
    session = session_of(request)
    given = request.headers.get("X-CSRF-Token")
    if given is None and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        given = text((await request.post()).get("csrf"))
    if session is None or not same(given, session.csrf):
        raise web.HTTPForbidden(text="missing or wrong CSRF token: reload the page")
    return await handler(request)


async def home(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/jobs")


def _safe_next(value: str) -> str:
    """Only a path of this site (no scheme, host or protocol-relative URL): no open redirect."""
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/jobs"
    return value


# ---------------------------------------------------------------- login, logout

async def login_page(request: web.Request) -> web.Response:
    csrf = request.cookies.get(pre_cookie_name(request)) or secrets.token_urlsafe(32)
    error = text(request.query.get("error"))
    nxt = _safe_next(text(request.query.get("next")) or "/jobs")
    body = f"""<main class="login">
<h1>schedd</h1>
<form method="post" action="/login" id="login">
<input type="hidden" name="csrf" value="{html.escape(csrf)}">
<input type="hidden" name="next" value="{html.escape(nxt)}">
<label for="token">Token</label>
<input type="password" id="token" name="token" autocomplete="off" required autofocus>
<button type="submit">Log in</button>
{f'<p class="error" id="error">{html.escape(error)}</p>' if error else ''}
<p class="hint">Paste a token (<code>schedctl acl token create</code>), or open the one-time link
that <code>schedctl dashboard</code> prints.</p>
</form></main>"""
    response = page("Log in", body, scripts=("login.js",))
    response.set_cookie(pre_cookie_name(request), csrf, httponly=True, secure=request.app[SECURE],
                        samesite="Strict", path="/login")
    return response


async def login(request: web.Request) -> web.Response:
    """A token typed in the form, or a one-time code from a link (redeemed here, once: whatever
    happens next, the code is spent)."""
    form = await request.post()
    nxt = _safe_next(text(form.get("next")) or "/jobs")
    code = text(form.get("code")).strip()
    if code:
        redeemed = request.app[CODES].redeem(code)
        if redeemed is None:
            raise web.HTTPSeeOther("/login?error=" + quote(CODE_REFUSED))
        token = redeemed
    else:
        token = text(form.get("token")).strip()
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
    response.set_cookie(cookie_name(request), session.id, httponly=True, secure=request.app[SECURE],
                        samesite="Strict", path="/")
    response.del_cookie(pre_cookie_name(request), path="/login")
    raise response


async def logout(request: web.Request) -> web.Response:
    request.app[SESSION].close(request.cookies.get(cookie_name(request)))
    response = web.HTTPSeeOther("/login")
    response.del_cookie(cookie_name(request), path="/")
    raise response


# ---------------------------------------------------------------- static files

async def static(request: web.Request) -> web.Response:
    """A file under static/ (our scripts and style; vendor/: the pinned third-party assets)."""
    rel = request.match_info["path"]
    path = (STATIC / rel).resolve()
    kind = TYPES.get(path.suffix)
    if kind is None or not path.is_file() or STATIC.resolve() not in path.parents:
        raise web.HTTPNotFound()
    response = web.Response(body=path.read_bytes(), content_type=kind, charset="utf-8")
    return response
