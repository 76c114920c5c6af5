"""The clock port. Only the shell reads time; the state machine gets it inside entries.

`SystemClock` has a settable offset so fault tests can skew a node's clock (libfaketime hangs
pysyncobj here). Tests use `schedd.ports.fakes.ManualClock`, which moves only when told.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    __slots__ = ("offset_ms",)

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms
