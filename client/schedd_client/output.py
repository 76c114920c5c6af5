"""How a command's result is written to stdout: a table for people, or JSON/YAML for programs.

Separate from the commands so that the choice of format, the escaping of human output and the
encoding fallback of machine output are decided in one place; a command only says what its
data is and how its table reads.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from .convert import printable


# States in tables, coloured on a terminal: green done, red failed, cyan running, yellow waiting
# or skipped, magenta cancelled. Whole words only, after `printable` escaped the text.
_COLOURS = {"SUCCEEDED": "32", "FAILED": "31", "TIMED_OUT": "31", "LOST": "31", "UPSTREAM_FAILED": "31",
            "RUNNING": "36", "SCHEDULED": "36", "RETRY_WAIT": "33", "SKIPPED": "33", "CANCELLED": "35",
            "active": "32", "paused": "33", "unreachable": "31", "leader": "1"}
_STATE_WORD = re.compile(r"(?<![\w@.-])(" + "|".join(sorted(_COLOURS, key=len, reverse=True)) + r")(?![\w@.-])")


def colour_wanted(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Colour only on a terminal, never in a pipe or a file, and never with ``NO_COLOR`` set to
    anything but "" (https://no-color.org) or ``TERM=dumb``."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR", "") != "" or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str) -> str:
    """``text`` with each state word in its colour (ANSI SGR)."""
    return _STATE_WORD.sub(lambda m: f"\x1b[{_COLOURS[m[1]]}m{m[1]}\x1b[0m", text)


@dataclass(frozen=True, slots=True)
class Output:
    """``-o table|json|yaml``, as given on the command line, and whether tables are coloured.
    ``-o wide`` is a table (``format`` "table") with more columns where a command has them."""

    format: str
    colour: bool = False
    wide: bool = False

    def emit(self, data: Any, table: Callable[[], str]) -> None:
        """Print ``data`` as one JSON/YAML document, or ``table()`` for -o table. This is the one
        place human output is written: it goes through ``printable``, so a description, label or
        job output cannot send the terminal escape sequences; JSON and YAML stay exact."""
        if self.format in ("json", "yaml"):
            self.print_data(data)
        else:
            text = printable(table())
            print(paint(text) if self.colour else text)

    def print_data(self, data: Any) -> None:
        """``data`` as JSON or YAML (``-o``), exact: where stdout cannot encode a character (an
        ASCII terminal), the format's own escapes carry it (``\\u00e9``), never a lossy one."""
        for ascii_only in (False, True):
            text = self._render(data, ascii_only=ascii_only)
            try:
                text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
                break
            except UnicodeEncodeError:
                continue
        sys.stdout.write(text)

    def _render(self, data: Any, *, ascii_only: bool) -> str:
        if self.format == "json":
            return json.dumps(data, indent=2, ensure_ascii=ascii_only) + "\n"
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=not ascii_only)
