"""One-time login codes: what `schedctl dashboard`'s link carries instead of the token itself.

A link that held the token would be the token for as long as the token lives, for anyone who
sees it (shell history, a screen share, a pasted chat). A code is worth one login, within a
minute, on this node only: the API (Acl.LoginLink) mints it for the token its caller
authenticated with, and the login page redeems it (`redeem`), which removes it whatever the
outcome. The table is in this node's memory only (a restart forgets every code: run
`schedctl dashboard` again), bounded (`limit` live codes; past it minting is refused until some
expire or are used), and its codes are 256 random bits. `url` is the dashboard the codes open
(set once the node's HTTP port serves: schedd.runtime.http), what the API answers with the code.

Lookup is by the code's SHA-256, then the stored code is compared with `hmac.compare_digest`,
so neither the dict lookup nor the comparison times how much of a guess was right.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

TTL_S = 60.0
LIMIT = 1_000
CODE_BYTES = 32                    # 256 bits
MAX_CODE_CHARS = 64                # a submitted code longer than any we mint is not looked up


@dataclass(slots=True, frozen=True)
class Minted:
    """What the API answers: the code (only in the link's fragment) and how long it is good for."""

    code: str
    expires_in_s: float


@dataclass(slots=True)
class _Entry:
    """One live code, kept under its SHA-256 (`_key`)."""

    code: str
    token: str                     # the bearer's <accessor>.<secret> ("" with access control off)
    expires: float


def _key(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


class LoginCodes:
    """code -> token, each redeemable once before `ttl_s` has passed. Not thread-safe: used from
    the node's event loop only (the gRPC servicer mints, the dashboard redeems)."""

    def __init__(self, *, ttl_s: float = TTL_S, limit: int = LIMIT,
                 now: Callable[[], float] = time.monotonic,
                 random: Callable[[int], bytes] = secrets.token_bytes) -> None:
        if ttl_s <= 0 or limit < 1:
            raise ValueError("ttl_s must be > 0 and limit >= 1")
        self.ttl_s, self.limit, self._now, self._random = ttl_s, limit, now, random
        self._by_key: OrderedDict[str, _Entry] = OrderedDict()     # oldest first: expiry order
        self.url = ""

    def mint(self, token: str) -> Minted | None:
        """A new code for `token`; None when `limit` codes are live (refused, so a link already
        printed keeps working for its whole lifetime)."""
        now = self._now()
        self._forget_expired(now)
        if len(self._by_key) >= self.limit:
            return None
        code = base64.urlsafe_b64encode(self._random(CODE_BYTES)).rstrip(b"=").decode()
        self._by_key[_key(code)] = _Entry(code, token, now + self.ttl_s)
        return Minted(code, self.ttl_s)

    def redeem(self, code: str) -> str | None:
        """The token of `code` if it is live, and the code is gone from now on; None if it is
        unknown, used already or expired."""
        if not code or len(code) > MAX_CODE_CHARS:
            return None
        entry = self._by_key.pop(_key(code), None)
        if entry is None or not hmac.compare_digest(entry.code.encode(), code.encode()):
            return None
        return entry.token if self._now() < entry.expires else None

    def _forget_expired(self, now: float) -> None:
        while self._by_key:
            key, entry = next(iter(self._by_key.items()))
            if entry.expires > now:
                break
            del self._by_key[key]

    def __len__(self) -> int:
        return len(self._by_key)
