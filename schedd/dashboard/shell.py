"""What every dashboard page module shares: the app's keys, the session of a request, the page
shell (header, navigation, the page's scripts), and JSON answers from API calls.

A page module (`jobs`, `cluster`, ...) holds its routes (`add_routes`), its HTML and its calls;
it reaches the state only through `Api` (backend.py) with the session's token, never directly.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from schedd.core.acl import matches
from schedd.dashboard.backend import Api, ApiError, Unauthenticated
from schedd.dashboard.login_codes import LoginCodes
from schedd.dashboard.sessions import COOKIE, PRE_COOKIE, Session, Sessions

SESSION: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)
API: web.AppKey[Api] = web.AppKey("api", Api)
SECURE: web.AppKey[bool] = web.AppKey("secure", bool)
PORT: web.AppKey[int] = web.AppKey("port", int)
CODES: web.AppKey[LoginCodes] = web.AppKey("login_codes", LoginCodes)

#: Every answer's (a stream sets them itself: they must precede its first byte).
HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

#: The navigation: (key, path, label, operators only). A page module's `active` key is one of these.
NAV = (("jobs", "/jobs", "Jobs", False), ("dags", "/dags", "DAGs", False), ("calendars", "/calendars", "Calendars", False),
       ("forecast", "/forecast", "Forecast", False), ("cluster", "/cluster", "Cluster", True))


def cookie_name(request: web.Request) -> str:
    """Named for the port: browsers share cookies between ports of one host, and a cluster on
    one machine serves a dashboard per node."""
    return f"{COOKIE}_{request.app[PORT]}"


def pre_cookie_name(request: web.Request) -> str:
    return f"{PRE_COOKIE}_{request.app[PORT]}"


def session_of(request: web.Request) -> Session | None:
    return request.app[SESSION].get(request.cookies.get(cookie_name(request)))


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def to_login(request: web.Request) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")


async def who(request: web.Request) -> tuple[Session, dict[str, Any]]:
    """The session and its principal, the token checked now; else off to /login."""
    session = session_of(request)
    if session is None:
        raise to_login(request)
    try:
        principal = await request.app[API].whoami(session.token)
    except Unauthenticated:
        request.app[SESSION].close(session.id)
        raise to_login(request) from None
    return session, principal


def may(principal: dict[str, Any], capability: str, resource: str) -> bool:
    """Whether `principal` (`Api.whoami`'s answer) holds `capability` on `resource` (`team:<t>`,
    `cluster`): which buttons a page shows. Only that: the API decides again on every call, so a
    forged request gets the API's refusal."""
    if principal.get("acl_off"):
        return True
    return any(capability in g["capabilities"] and matches(g["pattern"], resource) for g in principal["grants"])


def status_of(e: ApiError) -> int:
    return {"PERMISSION_DENIED": 403, "INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "ALREADY_EXISTS": 409,
            "FAILED_PRECONDITION": 409, "RESOURCE_EXHAUSTED": 429}.get(e.code, 503)


def page_size(request: web.Request, sizes: tuple[int, ...], default: int) -> int:
    """The `size` a JSON endpoint was asked for, one of `sizes`; else a 400 saying which."""
    try:
        size = int(request.query.get("size", str(default)))
    except ValueError:
        size = 0
    if size not in sizes:
        raise web.HTTPBadRequest(text=json.dumps({"error": f"size must be one of {', '.join(map(str, sizes))}"}),
                                 content_type="application/json")
    return size


async def json_answer(request: web.Request, call: Callable[[str], Awaitable[Any]]) -> web.Response:
    """`call(token)`'s value as JSON; 401 (the page goes to /login) when the session is gone or
    its token no longer authenticates; the API's refusal with its HTTP status otherwise."""
    session = session_of(request)
    if session is None:
        return web.json_response({"error": "not logged in", "login": "/login"}, status=401)
    try:
        return web.json_response(await call(session.token))
    except Unauthenticated as e:
        request.app[SESSION].close(session.id)
        return web.json_response({"error": e.message, "login": "/login"}, status=401)
    except ApiError as e:
        return web.json_response({"error": e.message, "code": e.code}, status=status_of(e))


def page(title: str, body: str, *, scripts: tuple[str, ...] = (), meta: dict[str, str] | None = None) -> web.Response:
    metas = "".join(f'<meta name="{html.escape(k)}" content="{html.escape(v)}">' for k, v in (meta or {}).items())
    tags = "".join(f'<script src="/static/{s}" defer></script>' for s in scripts)
    body_text = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} - schedd</title>'
                 f'<meta name="viewport" content="width=device-width, initial-scale=1">{metas}'
                 f'<link rel="stylesheet" href="/static/dashboard.css">{tags}</head><body>{body}</body></html>')
    return web.Response(text=body_text, content_type="text/html")


def shell(title: str, active: str, session: Session, principal: dict[str, Any], main: str, *,
          scripts: tuple[str, ...], meta: dict[str, str] | None = None) -> web.Response:
    """A logged-in page: the header (navigation, principal, logout) and `main`; `scripts` after
    common.js (the shared helpers every page script uses)."""
    nav = "".join(f'<a href="{href}"{" class=active" if key == active else ""} id="nav-{key}">{label}</a>'
                  for key, href, label, operators in NAV if principal["operator"] or not operators)
    body = f"""<header><a class="brand" href="/jobs">schedd</a><nav>{nav}</nav>
<span class="who" id="principal">{html.escape(principal["principal"])}</span>
<form method="post" action="/logout" class="logout"><input type="hidden" name="csrf" value="{html.escape(session.csrf)}">
<button type="submit" id="logout">Log out</button></form></header>
<main>{main}</main>"""
    return page(title, body, scripts=("common.js", *scripts),
                meta={"csrf": session.csrf, "page": active, **(meta or {})})
