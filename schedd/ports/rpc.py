"""The call context a gRPC servicer is handed, typed: the part of `grpc.aio.ServicerContext` the
servicers (schedd.api, the leader's worker stream) use.

grpc ships no annotations mypy reads, so without this every `context` is `Any` and mypy cannot
know the one fact the servicers rely on: `abort` never returns (it raises, ending the call). With
`abort` typed `NoReturn`, code after an abort is known unreachable, so a value checked for None
before an abort is narrowed and a method ending in an abort needs no dead `return`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn, Protocol


class CallContext(Protocol):
    """What a servicer may ask of its call (`code` is a `grpc.StatusCode`)."""

    async def abort(self, code: Any, details: str = "",
                    trailing_metadata: Sequence[tuple[str, str]] = ()) -> NoReturn:
        """End the call with this status: raises, never returns."""

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str]]) -> None:
        """Metadata sent with the status at the end of the call."""

    def code(self) -> Any:
        """The status set so far (None while the call runs)."""

    def invocation_metadata(self) -> Sequence[tuple[str, Any]] | None:
        """The caller's metadata."""

    def peer(self) -> str:
        """The caller's address, as grpc names it (`ipv4:127.0.0.1:port`)."""

    def time_remaining(self) -> float | None:
        """Seconds until the caller's deadline (None: no deadline)."""
