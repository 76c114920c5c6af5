"""How the worker reads a failed call to the cluster: heal by waiting, go elsewhere, or stop.

Why one place: the leader search, the stream's handshake and the connection loop all meet the
same gRPC errors, and each must sort them the same way. A refused credential cannot heal by
waiting (`CredentialRefused`, raised once and never retried); "leader=<host:port>" in a
FAILED_PRECONDITION names where to go instead; anything else (UNAVAILABLE, a stream that ended,
`StreamEnded`) is retried with backoff. The log lines name an error the same way everywhere
(`describe`).
"""

from __future__ import annotations

import logging
import re
from typing import NoReturn

import grpc
import grpc.aio

__all__ = ["REFUSALS", "CredentialRefused", "StreamEnded", "is_refusal", "redirect_target", "describe",
           "refuse"]

log = logging.getLogger("schedd.worker")

REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)

_LEADER_RE = re.compile(r"leader=([A-Za-z0-9_.\-\[\]:]+)")


class CredentialRefused(RuntimeError):
    """The cluster refused this worker's credential; waiting will not change that.

    The message names who refused what, and what the operator should do about it."""

    def __init__(self, refusals: list[tuple[str, grpc.aio.AioRpcError]], *, tls: bool = False) -> None:
        self.refusals = refusals
        said = "; ".join(f"{addr}: {describe(e)}" for addr, e in refusals)
        if tls:                          # a plaintext worker at a node that speaks only TLS
            super().__init__(f"the cluster requires TLS and this worker connects in plaintext ({said}): "
                             "give it the cluster's CA, a worker certificate and its key (--ca, --cert, "
                             "--key) or a context file (--context, SCHEDD_CONTEXT), and its worker token")
            return
        super().__init__(f"the cluster refused this worker's credential ({said}). A worker needs "
                         "a worker token (schedctl acl token create --worker --policy POLICY "
                         "--max-slots N) whose policy may serve its pool, passed in SCHEDD_TOKEN, "
                         "--token or the context file's token_file, not a client token or "
                         "certificate; check that it is not revoked or expired and that --slots "
                         "is within its max_slots")


class StreamEnded(Exception):
    """The stream to the leader ended, or none could be opened: reconnect after a backoff."""


def is_refusal(err: BaseException) -> bool:
    return isinstance(err, grpc.aio.AioRpcError) and err.code() in REFUSALS


def redirect_target(err: grpc.aio.AioRpcError) -> str | None:
    """The leader a node that is not the leader named in its refusal, if it named one."""
    if err.code() != grpc.StatusCode.FAILED_PRECONDITION:
        return None
    m = _LEADER_RE.search(err.details() or "")
    return m.group(1) if m else None


def describe(err: BaseException) -> str:
    if isinstance(err, grpc.aio.AioRpcError):
        return f"{err.code().name}: {err.details()}"
    if isinstance(err, StreamEnded):
        return str(err)
    return f"{type(err).__name__}: {err}"


def refuse(name: str, refusals: list[tuple[str, grpc.aio.AioRpcError]], *, tls: bool = False) -> NoReturn:
    """Stop: the credential was refused (logged here, once, for the CLI and the SDK alike)."""
    err = CredentialRefused(refusals, tls=tls)
    log.error("worker %s: %s", name, err)
    raise err
