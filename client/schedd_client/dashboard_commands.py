"""`schedctl dashboard`: print (and on a desktop open) a one-time login link to the web dashboard,
like a notebook server's token link, but worth one login within a minute (`--no-open`: only print
it; `--url`: only the dashboard's address; `--token`: log in as that token instead).

The node the client reaches mints the code and answers its own dashboard's address, so the link
always opens the one dashboard that can redeem it; `--cluster ADDRESS` picks the node.
"""

from __future__ import annotations

import webbrowser

from ._cli import UsageError
from .dashboard import has_desktop
from .invocation import Invocation


def dashboard(inv: Invocation) -> None:
    args = inv.args
    if isinstance(args.url, str):
        raise UsageError(f"--url takes no address now ({args.url!r}): the link opens the dashboard of the node "
                         "that minted its code; pick the node with --cluster ADDRESS")
    if args.url:
        print(inv.client.login_link(url_only=True), flush=True)
        return
    link = inv.client.login_link()
    print(link, flush=True)
    if not args.no_open and has_desktop():
        webbrowser.open(link)
