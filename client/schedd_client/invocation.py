"""One run of a schedctl command: what every command function is handed.

Separate from the entry point (``schedctl``), which decides the exit status, and from the command
modules, which decide what to send and how to word the answer: this holds the parsed arguments,
the connected client and the clock, and answers the questions every command asks of them (which
output format, how far back a time was, how large an input file may be).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .client import Client
from .convert import format_time, relative_time
from .documents import Limits
from .output import Output, colour_wanted


@dataclass(slots=True)
class Invocation:
    args: argparse.Namespace
    client: Client
    clock: Callable[[], float]
    output: Output = field(init=False)

    def __post_init__(self) -> None:
        wide = self.args.output == "wide"
        self.output = Output("table" if wide else self.args.output, colour=colour_wanted(sys.stdout), wide=wide)

    def run(self) -> None:
        """Call the command function the parser chose (``set_defaults(run=...)``)."""
        self.args.run(self)

    def emit(self, data: Any, table: Callable[[], str]) -> None:
        self.output.emit(data, table)

    def warn(self, warnings: Any) -> None:
        """The server's advice (never a refusal) on stderr, one ``warning:`` line each, so that
        ``-o json`` on stdout stays parseable."""
        for line in warnings:
            print(f"warning: {line}", file=sys.stderr)

    def print_data(self, data: Any) -> None:
        self.output.print_data(data)

    def file_limits(self) -> Limits:
        """The bounds on an input file: ``--max-file-size``, else the environment's."""
        size = getattr(self.args, "max_file_size", None)
        return Limits(max_bytes=size) if size else Limits.from_env()

    def ago(self, ms: int) -> str:
        """``in 4m12s`` / ``3s ago``."""
        return relative_time(ms, int(self.clock() * 1000))

    def when(self, ms: int) -> str:
        """``2026-11-29T02:00:00Z (in 4m12s)``; ``-`` for none."""
        return f"{format_time(ms)} ({self.ago(ms)})" if ms else "-"
