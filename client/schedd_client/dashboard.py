"""The web dashboard's login link: what `schedctl dashboard` prints and opens.

The link is minted by a node (``Client.login_link``: the Acl.LoginLink call, authenticated with
the client's token): ``https://<that node's dashboard>/login#code=<code>``, where the code is
worth one login as that token, on that node, within a minute (the node keeps it in memory
only). It rides in the fragment, which a browser never sends to the server, so it appears in no
request line, proxy or access log, and the login page's script drops it from the address bar
before posting it. A link seen later (shell history, a screen share, a chat) is spent or expired:
it is not the token.
"""

from __future__ import annotations

import os
import sys

__all__ = ["has_desktop"]


def has_desktop() -> bool:
    """Whether a browser can be opened here: a graphical session (or macOS / Windows)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
