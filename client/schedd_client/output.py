"""How a command's result is written to stdout: a table for people, or JSON/YAML for programs.

Separate from the commands so that the choice of format, the escaping of human output and the
encoding fallback of machine output are decided in one place; a command only says what its
data is and how its table reads.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from .convert import printable


@dataclass(frozen=True, slots=True)
class Output:
    """``-o table|json|yaml``, as given on the command line."""

    format: str

    def emit(self, data: Any, table: Callable[[], str]) -> None:
        """Print ``data`` as one JSON/YAML document, or ``table()`` for -o table. This is the one
        place human output is written: it goes through ``printable``, so a description, label or
        job output cannot send the terminal escape sequences; JSON and YAML stay exact."""
        if self.format in ("json", "yaml"):
            self.print_data(data)
        else:
            print(printable(table()))

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
