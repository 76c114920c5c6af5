"""The web dashboard's login link: what `schedctl dashboard` prints and opens.

The link carries the token in the URL's fragment (`https://node:9101/login#token=...`): a
browser never sends the fragment to the server, so the token appears in no request line, proxy
or access log; the login page's script posts it as the login form would, then drops it from the
address bar. The dashboard's address comes from the context file's `dashboard` key (`schedd
local` writes it), or is given.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import quote, urlsplit

__all__ = ["DashboardError", "login_link", "has_desktop"]


class DashboardError(ValueError):
    """No dashboard address or no token to log in with; the message says how to give one."""


def login_link(url: str, token: str | None) -> str:
    """The login link for `token` on the dashboard at `url` (https://host:port/)."""
    if not url:
        raise DashboardError("no dashboard address: pass --url https://NODE:PORT/ (a node's metrics_address), "
                             "or add dashboard = \"https://NODE:PORT/\" to the context file")
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise DashboardError(f"the dashboard address must be https://host:port/, not {url!r}")
    if not token:
        raise DashboardError("the dashboard logs in with a token, and this context has none: set token or "
                             "token_file in the context file, SCHEDD_TOKEN, or pass --token")
    return f"{parts.scheme}://{parts.netloc}/login#token={quote(token, safe='')}"


def has_desktop() -> bool:
    """Whether a browser can be opened here: a graphical session (or macOS / Windows)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
