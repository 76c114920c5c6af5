"""`schedctl dashboard`: print (and on a desktop open) a login link to the web dashboard for the
current context, like a notebook server's token link (`--no-open`: only print it)."""

from __future__ import annotations

import webbrowser

from .context import context_from_env, load_context, resolve
from .dashboard import DashboardError, has_desktop, login_link
from ._cli import UsageError
from .invocation import Invocation


def dashboard(inv: Invocation) -> None:
    args = inv.args
    ctx = load_context(args.context) if args.context else context_from_env()
    url = args.url or (ctx.dashboard if ctx is not None else "")
    _, security = resolve(args.cluster, token=args.token, context=args.context)
    try:
        link = login_link(url, security.token)
    except DashboardError as e:
        raise UsageError(str(e)) from None
    print(link, flush=True)
    if not args.no_open and has_desktop():
        webbrowser.open(link)
