"""Which node to ask, for how long, and when to give up: the failover policy of both clients
(no I/O, so ``Client`` and ``AsyncClient`` only differ in how they wait and call).

Policy: nodes are tried in order starting from the one that answered last. UNAVAILABLE and
DEADLINE_EXCEEDED move on to the next node; after a full round the client pauses (50 ms, doubling
to 1 s) and starts another, until the client's ``timeout`` is spent. Every other status is final.
A call pinned to one address (``Call.address``) is tried once. Retrying a write is safe only
because the same request (and so the same request_id) is re-sent, see ``_plans``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import grpc

from ._plans import Call
from .errors import SchedError, Unavailable, error_from_rpc

#: An attempt gets an equal share of the timeout, but at least this long (a forwarded write needs
#: a Raft commit; a node that cannot be reached at all usually fails at once).
MIN_ATTEMPT_SECONDS = 5.0
FIRST_ROUND_PAUSE = 0.05
MAX_ROUND_PAUSE = 1.0


class Router:
    """The cluster's addresses and which one to try first."""

    def __init__(
        self,
        addresses: Sequence[str],
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not addresses:
            raise ValueError("no cluster addresses")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.addresses = list(addresses)
        self.timeout = timeout
        self.clock = clock
        self.preferred = 0  # index of the node that answered last

    def attempts(self, call: Call) -> Attempts:
        return Attempts(self, call)


class Attempts:
    """One call's walk over the nodes.

    Iterate for ``(address, pause, timeout)``: wait ``pause`` seconds, then call ``address`` with
    that deadline. Report a failure with ``failed`` (returns the error to raise when it is final)
    and success with ``succeeded``. When the iteration ends, raise ``exhausted()``.
    """

    def __init__(self, router: Router, call: Call) -> None:
        self._router = router
        self._call = call
        self._deadline = router.clock() + router.timeout
        self._errors: dict[str, str] = {}  # address -> its last error, in the order first tried
        self._last_code: grpc.StatusCode | None = None

    def __iter__(self) -> Iterator[tuple[str, float, float]]:
        router = self._router
        if self._call.address is not None:
            yield self._call.address, 0.0, router.timeout
            return
        count = len(router.addresses)
        share = router.timeout if count == 1 else max(router.timeout / count, MIN_ATTEMPT_SECONDS)
        pause, next_pause = 0.0, FIRST_ROUND_PAUSE
        while True:
            first = router.preferred
            for i in range(count):
                left = self._deadline - router.clock() - pause
                if left <= 0.001:
                    return
                yield router.addresses[(first + i) % count], pause, min(share, left)
                pause = 0.0
            pause, next_pause = next_pause, min(next_pause * 2, MAX_ROUND_PAUSE)

    def failed(self, address: str, err: grpc.RpcError) -> SchedError | None:
        """The error to raise now, or None when another node (or round) is worth trying."""
        error = error_from_rpc(err)
        if not isinstance(error, Unavailable):
            return error
        self._errors[address] = f"{error.code.name}: {error.message}"
        self._last_code = error.code
        return None

    def succeeded(self, address: str) -> None:
        if self._call.address is None:
            self._router.preferred = self._router.addresses.index(address)

    def exhausted(self) -> Unavailable:
        tried = "; ".join(f"{address}: {error}" for address, error in self._errors.items())
        tried = tried or "none: no time left"
        if self._call.address is not None:
            message = f"node {self._call.address} did not answer ({tried})"
        else:
            message = f"no schedd node answered within {self._router.timeout:g}s (tried {tried})"
        if self._call.mutating:
            message += "; the write may or may not have been applied"
        return Unavailable(message, self._last_code, tried=list(self._errors))
