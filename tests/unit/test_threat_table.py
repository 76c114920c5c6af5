"""The security threat table (docs/security.md, "holder of | can | cannot | proved by") names,
for every "cannot", the test that proves it: each named test must exist, so the table cannot
promise what no test checks any more."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_CELL = re.compile(r"`([\w/]+\.py)?::(test_\w+)`|`([\w/]+\.py)::(test_\w+)`")


def _named_tests() -> list[tuple[str, str]]:
    """(file under tests/, test name) for every `file::test` or `::test` (same file as the one
    before it) in the table's last column."""
    text = (REPO / "docs" / "security.md").read_text()
    table = text[text.index("| holder of | can | cannot | proved by |"):]
    table = table[:table.index("\n\n")]
    out: list[tuple[str, str]] = []
    for row in table.splitlines()[2:]:
        last = ""
        for ref in re.findall(r"`([^`]*::test_\w+)`", row.rsplit("|", 2)[-2]):
            path, _, name = ref.partition("::")
            last = path or last
            out.append((last, name))
    return out


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_test_the_security_table_names_exists() -> None:
    named = _named_tests()
    assert len(named) >= 20
    missing = [f"{f}::{t}" for f, t in named if t not in _tests_in(REPO / "tests" / f)]
    assert not missing, missing
