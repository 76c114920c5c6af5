"""The code says why in its own words: no source, test, benchmark or deployment file cites a
ticket or patch by number, or a design file outside the repository.

A number means nothing to a reader without the tracker it came from, and such notes go stale
where the code does not. The mechanisms keep their names instead (the Raft repairs of
schedd/replication/raft_patches.py are named there: log repair, pre-vote, ReadIndex, ...), and
the facts the code relies on are in docs/architecture.md, section 4. Versions stay numbers
(feature level 6, snapshot format 6): they are not tickets, and the pattern does not match them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("schedd", "client", "worker", "tests", "bench", "tools", "deploy")
SUFFIXES = (".py", ".md", ".toml", ".sh")
SKIP_DIRS = frozenset({".venv", "venv", "build", "dist", "__pycache__", ".mypy_cache", ".pytest_cache",
                       ".ruff_cache", ".hypothesis", "store", "results"})

CITATION = re.compile(r"\b(?:issues?|patch(?:es)?)\s*#?\d+|\bDESIGN\.md\b", re.IGNORECASE)

#: (path relative to the root, the matched text) of a hit that is a true version identifier.
ALLOWED: frozenset[tuple[str, str]] = frozenset()


def files() -> list[Path]:
    """The tracked files of TREES (every file there when this is not a git checkout)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", *TREES], cwd=ROOT, capture_output=True,
                                check=True, timeout=60).stdout.decode().split("\0")
        found = [ROOT / name for name in listed if name]
    except (OSError, subprocess.SubprocessError):
        found = [p for tree in TREES for p in (ROOT / tree).rglob("*")]
    return sorted(p for p in found if p.suffix in SUFFIXES and p.is_file()
                  and not SKIP_DIRS & set(p.relative_to(ROOT).parts) and not p.parent.name.endswith(".egg-info"))


def citations(text: str) -> list[tuple[int, str]]:
    """(line, matched text) of each citation; one split over a line break counts too."""
    return [(text.count("\n", 0, m.start()) + 1, " ".join(m.group().split())) for m in CITATION.finditer(text)]


def test_no_file_cites_a_ticket_a_patch_number_or_an_outside_design_file():
    hits = []
    for path in files():
        rel = path.relative_to(ROOT).as_posix()
        for line, found in citations(path.read_text(encoding="utf-8", errors="replace")):
            if (rel, found) not in ALLOWED:
                hits.append(f"{rel}:{line}: {found!r}")
    assert hits == [], ("say what the code does and why instead of citing a number:\n  "
                        + "\n  ".join(hits))


def _(*words: str) -> str:
    """Words joined by a space: the cases below hold no citation as written, only as run."""
    return " ".join(words)


@pytest.mark.parametrize("text, found", [
    (f"retried ({_('issue', '14')})", [_("issue", "14")]),
    (f"the {_('Issue', '#174')} of pysyncobj", [_("Issue", "#174")]),
    (f"halting (raft_patches {_('patch', '')}\n    13)", [_("patch", "13")]),
    (f"see {_('patches', '6')} and 8", [_("patches", "6")]),
    ("the reasons are in " + "DESIGN" + ".md", ["DESIGN" + ".md"]),
])
def test_a_citation_is_found(text, found):
    """The check itself can fail, a number split over two lines included."""
    assert [f for _, f in citations(text)] == found


@pytest.mark.parametrize("text", [
    "feature level 6", "snapshot format 6", "a dispatch 5 ms late", "the patched follower", "issued 3 certificates",
    "Raft §5.3", "py.typed",
])
def test_what_is_not_a_citation(text):
    assert citations(text) == []


def test_the_scan_sees_the_tree():
    seen = {p.relative_to(ROOT).as_posix() for p in files()}
    assert {"schedd/replication/raft_patches.py", "client/schedd_client/client.py", "bench/README.md",
            "tests/jepsen_like/README.md", "worker/pyproject.toml"} <= seen
