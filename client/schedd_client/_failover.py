"""Which node to ask, for how long, and when to give up: the failover policy of both clients
(no I/O, so ``Client`` and ``AsyncClient`` only differ in how they wait and call).

Policy: nodes are tried in order starting from the one that answered last. UNAVAILABLE and
DEADLINE_EXCEEDED move on to the next node; after a full round the client pauses (50 ms, doubling
to 1 s) and starts another, until the client's ``timeout`` is spent. Every other status is final.
A call pinned to one address (``Call.address``) is tried once. Retrying a write is safe only
because the same request (and so the same request_id) is re-sent, see ``_plans``.

Each attempt of a round gets a bounded share of the timeout (``attempt_share``): a node that is
cut off or stopped does not answer at all, and an attempt that waited for it the whole timeout
left nothing for the nodes that would have answered (a write whose first node was a
cut-off leader stalled 5 s per attempt; a 3 s ``schedctl`` call failed without trying the
others). The share doubles every round, so a slow but healthy call still gets its time. A node
that did not answer is reported as unreachable, not as a TLS failure (``unreachable``,
``tls_failure``): a handshake that never completes is what a stopped node looks like too.

A call the token's rate limit refused (RESOURCE_EXHAUSTED with the node's hint,
``RETRY_AFTER_KEY``, in its trailers) did nothing, so it is sent again to the same node after the
hinted wait, while the timeout allows; without the time to wait it fails at once with the node's
message. A loop of writes (a delete of thousands of jobs, a script) so keeps to the cluster's
``acl.rate_per_second`` instead of failing part-way.

A call naming a job in a sharded cluster goes first to its shard's leader when a forwarded
answer named it (``schedd_client._routing``), skipping the node-to-leader hop.

A plaintext client on a node that speaks only TLS is not retried (it used to wait the whole
timeout, then say "unavailable"). gRPC reports it as UNAVAILABLE "Socket closed", which a node
closing a connection as it stops can say too, so the router's ``tls_probe`` (given to plaintext
clients: ``channels.speaks_tls``, the one piece of I/O here, on that error path only) asks the
node for a TLS handshake; if it answers, the call fails at once with ``TlsRequired``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from ._plans import Call
from ._routing import ShardMap, route_of
from .errors import ResourceExhausted, SchedError, TlsRequired, Unavailable, error_from_rpc

#: An attempt of the first round gets an equal share of the timeout, within these bounds: at least
#: MIN (a forwarded write needs a Raft commit, a read a heartbeat round trip; an election takes
#: about one election timeout), at most MAX (a node that has not answered by then is likely cut
#: off: the others deserve the time). Each later round doubles it.
MIN_ATTEMPT_SECONDS = 0.75
MAX_ATTEMPT_SECONDS = 2.5
FIRST_ROUND_PAUSE = 0.05
MAX_ROUND_PAUSE = 1.0
#: The trailer in which a node's rate limit says how long to wait (milliseconds).
RETRY_AFTER_KEY = "x-schedd-retry-after-ms"


class Router:
    """The cluster's addresses and which one to try first."""

    def __init__(
        self,
        addresses: Sequence[str],
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        tls_probe: Callable[[str], bool] | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("no cluster addresses")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.addresses = list(addresses)
        self.timeout = timeout
        self.clock = clock
        self.tls_probe = tls_probe  # plaintext clients: does this node speak TLS? (module doc)
        self.preferred = 0  # index of the node that answered last
        self.shard_map = ShardMap()  # a sharded cluster: each shard's leader (schedd_client._routing)

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
        self._total = call.timeout or router.timeout
        self._deadline = router.clock() + self._total
        self._errors: dict[str, str] = {}  # address -> its last error, in the order first tried
        self._last_code: grpc.StatusCode | None = None
        self._again: tuple[str, float] | None = None  # (address, wait): a rate-limited call, paced
        self.route = route_of(call.service, call.method, call.request) if call.address is None else ""
        leader = router.shard_map.leader_for(self.route)
        self._leader = leader if leader in router.addresses else None

    def __iter__(self) -> Iterator[tuple[str, float, float]]:
        for address, pause, timeout in self._walk():
            yield address, pause, timeout
            while self._again is not None:
                (address, wait), self._again = self._again, None
                yield address, wait, max(0.001, self._deadline - self._router.clock() - wait)

    def _walk(self) -> Iterator[tuple[str, float, float]]:
        router = self._router
        if self._call.address is not None:
            yield self._call.address, 0.0, self._total
            return
        count = len(router.addresses)
        share = attempt_share(self._total, count)
        pause, next_pause = 0.0, FIRST_ROUND_PAUSE
        while True:
            first = router.addresses.index(self._leader) if self._leader else router.preferred
            for i in range(count):
                left = self._deadline - router.clock() - pause
                if left <= 0.001:
                    return
                yield router.addresses[(first + i) % count], pause, min(share, left)
                pause = 0.0
            pause, next_pause = next_pause, min(next_pause * 2, MAX_ROUND_PAUSE)
            share *= 2

    def failed(self, address: str, err: grpc.RpcError) -> SchedError | None:
        """The error to raise now, or None when another node (or round) is worth trying."""
        error = error_from_rpc(err)
        if address == self._leader:           # the shard's leader as the map had it did not answer
            self._router.shard_map.forget(self.route)
            self._leader = None
        if isinstance(error, ResourceExhausted):
            wait = retry_after(err)
            if wait is None or self._deadline - self._router.clock() - wait < MIN_ATTEMPT_SECONDS / 10:
                return error
            self._again = (address, wait)
            return None
        if not isinstance(error, Unavailable):
            return error
        probe = self._router.tls_probe
        if probe is not None and tls_failure(error.message) and probe(address):
            return TlsRequired(f"node {address} requires TLS and this client connects in plaintext; "
                               "use --context or SCHEDD_CONTEXT (a context file with the cluster's CA, "
                               "your client certificate and token), or --ca/--cert/--key",
                               error.code, tried=[address])
        if unreachable(error.code, error.message):
            self._errors[address] = f"node {address} is unreachable ({error.code.name}: {error.message})"
        else:
            self._errors[address] = f"{address}: {error.code.name}: {error.message}"
        self._last_code = error.code
        return None

    def succeeded(self, address: str, trailers: Sequence[tuple[str, Any]] = ()) -> None:
        if self._call.address is None and not self._leader:
            self._router.preferred = self._router.addresses.index(address)
        if trailers:                          # a node forwarded the call: its shard's leader is there
            self._router.shard_map.heard(trailers)


    def exhausted(self) -> Unavailable:
        tried = "; ".join(self._errors.values())
        tried = tried or "none: no time left"
        if self._call.address is not None:
            message = f"node {self._call.address} did not answer ({tried})"
        else:
            message = f"no schedd node answered within {self._router.timeout:g}s (tried {tried})"
        if self._call.mutating:
            message += "; the write may or may not have been applied"
        return Unavailable(message, self._last_code, tried=list(self._errors))


def retry_after(err: grpc.RpcError) -> float | None:
    """The seconds a node's rate limit asks the caller to wait, or None (another cap refused)."""
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == RETRY_AFTER_KEY:
            try:
                return max(int(value), 1) / 1000
            except ValueError:
                return None
    return None


def attempt_share(timeout: float, count: int) -> float:
    """The first round's time per node: all of it for one node, else an equal share within
    [MIN_ATTEMPT_SECONDS, MAX_ATTEMPT_SECONDS] (module doc)."""
    if count <= 1:
        return timeout
    return min(max(timeout / count, MIN_ATTEMPT_SECONDS), MAX_ATTEMPT_SECONDS)


#: What gRPC says when the other end never answered or could not be reached: a stopped or
#: cut-off node (its TLS handshake then never completes: "Handshake read failed (Endpoint
#: closing)"), a closed port, a timeout.
_UNREACHABLE = ("deadline exceeded", "connection refused", "endpoint closing", "handshaker shutdown",
                "timeout occurred", "timed out", "no route to host", "network is unreachable",
                "connection reset", "failed to connect to remote host")
#: What only a TLS disagreement produces (a certificate, a protocol version, an alert), or a
#: plaintext client whose connection a TLS server closes ("Socket closed").
_TLS = ("ssl", "certificate", "wrong_version_number", "alert", "tsi_", "socket closed")


def unreachable(code: grpc.StatusCode, message: str) -> bool:
    """Did the node not answer at all (as opposed to answering UNAVAILABLE itself)?"""
    if tls_failure(message):
        return False
    text = message.lower()
    return code == grpc.StatusCode.DEADLINE_EXCEEDED or any(marker in text for marker in _UNREACHABLE)


def tls_failure(message: str) -> bool:
    """Does an error (or a list of them) show a TLS failure, not a node that did not answer?"""
    text = message.lower()
    return any(marker in text for marker in _TLS)
