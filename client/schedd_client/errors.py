"""The SDK's exceptions and the one mapping from gRPC status codes to them.

The hierarchy is drawn in the package docstring (``help(schedd_client)``).
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any

import grpc

__all__ = [
    "SchedError",
    "ValidationError",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Unavailable",
    "TlsRequired",
    "ResourceExhausted",
    "error_from_rpc",
    "POSITION_METADATA",
    "brief",
    "clip",
]


class SchedError(Exception):
    """Base of every error the SDK raises.

    ``code`` is the gRPC status code the server answered with (or that describes a local failure,
    e.g. INVALID_ARGUMENT for a malformed job document); ``message`` is meant for humans.
    ``position`` is, for a refused batch (``put_jobs``), the 1-based position of the job the error
    is about in the list sent, else ``None``.
    """

    default_code = grpc.StatusCode.UNKNOWN

    def __init__(
        self, message: str, code: grpc.StatusCode | None = None, *, position: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else self.default_code
        self.position = position

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code.name})"


class ValidationError(SchedError):
    """The input was refused (INVALID_ARGUMENT); the message says what to fix."""

    default_code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(SchedError):
    """No such job or execution (NOT_FOUND)."""

    default_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(SchedError):
    """A create-only write named a job that exists (ALREADY_EXISTS)."""

    default_code = grpc.StatusCode.ALREADY_EXISTS


class Conflict(SchedError):
    """The job changed under an expected_version write (FAILED_PRECONDITION or ABORTED)."""

    default_code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(SchedError):
    """Over a cap of the cluster (RESOURCE_EXHAUSTED): the message names the cap, e.g.
    ``limits.max_jobs_per_call``; send less, or fewer calls at once."""

    default_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(SchedError):
    """No node gave an answer before the deadline (UNAVAILABLE or DEADLINE_EXCEEDED after retries).

    ``tried`` lists the addresses that were tried, in order. For a mutating call the outcome is
    unknown: the write may or may not have been applied.
    """

    default_code = grpc.StatusCode.UNAVAILABLE

    def __init__(
        self,
        message: str,
        code: grpc.StatusCode | None = None,
        *,
        tried: Sequence[str] = (),
        position: int | None = None,
    ) -> None:
        super().__init__(message, code, position=position)
        self.tried = list(tried)


class TlsRequired(Unavailable):
    """A plaintext client reached a node that speaks only TLS. Raised at once, not after the
    client's whole timeout: no retry can change it, only the client's settings can."""


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 2, 4, 4, 60, 60


def brief(value: Any, limit: int = 80) -> str:
    """A bounded ``repr`` of ``value`` for an error message. Bad input can be a 60 MB string or a
    list whose aliases stand for billions of items, and a message must never grow with it:
    nested containers are cut after a few items and levels, and the text after ``limit`` chars."""
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int past the int-to-text limit; describe it instead
        text = f"<{type(value).__name__}>"
    return clip(text, limit)


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to at most ``limit`` characters, marking the cut with "…"."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


_BY_CODE: dict[grpc.StatusCode, type[SchedError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: ValidationError,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}

#: Trailing metadata of a refused batch: the refused job's 1-based position in the request.
POSITION_METADATA = "x-schedd-batch-position"


def _position(err: grpc.RpcError) -> int | None:
    try:
        metadata = err.trailing_metadata() or ()
    except Exception:  # noqa: BLE001 - a local error carries none
        return None
    for key, value in metadata:
        if key == POSITION_METADATA:
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None


def error_from_rpc(err: grpc.RpcError) -> SchedError:
    """The SDK exception for a failed call (sync ``grpc.RpcError`` or ``grpc.aio.AioRpcError``)."""
    code: grpc.StatusCode = err.code()
    details: str = err.details() or code.name
    return _BY_CODE.get(code, SchedError)(details, code, position=_position(err))
