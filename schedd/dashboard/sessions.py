"""Dashboard sessions: an opaque cookie id that maps, in this node's memory only, to the token
the user logged in with and the session's CSRF token.

Why server-side: the token never reaches the browser's storage or a log line (the cookie is a
random id, HttpOnly), and a session is only as good as its token is: every request is answered
by the API with that token, so a token that expires or is deleted ends the session at once.
Sessions are per node (a node restart logs the browser out: it logs in again) and bounded: the
oldest is dropped past `limit`, and one idle for `idle_s` is gone.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "schedd_session"
PRE_COOKIE = "schedd_login"        # the login form's CSRF value, before there is a session
IDLE_S = 12 * 3600.0
LIMIT = 10_000


@dataclass(slots=True)
class Session:
    id: str
    token: str                     # "Bearer"-less: the <accessor>.<secret> as typed
    csrf: str
    principal: str
    seen: float


class Sessions:
    """The session table. Not thread-safe: used from the node's event loop only."""

    def __init__(self, *, idle_s: float = IDLE_S, limit: int = LIMIT,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self.idle_s, self.limit, self._now = idle_s, limit, now

    def open(self, token: str, principal: str) -> Session:
        s = Session(secrets.token_urlsafe(32), token, secrets.token_urlsafe(32), principal, self._now())
        self._by_id[s.id] = s
        while len(self._by_id) > self.limit:
            self._by_id.popitem(last=False)
        return s

    def get(self, sid: str | None) -> Session | None:
        """The live session of cookie value `sid` (touched), or None."""
        s = self._by_id.get(sid or "")
        if s is None:
            return None
        now = self._now()
        if now - s.seen > self.idle_s:
            del self._by_id[s.id]
            return None
        s.seen = now
        self._by_id.move_to_end(s.id)
        return s

    def close(self, sid: str | None) -> None:
        self._by_id.pop(sid or "", None)

    def __len__(self) -> int:
        return len(self._by_id)


def same(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a submitted CSRF value with the expected one."""
    return bool(given) and bool(expected) and hmac.compare_digest(str(given), expected)
