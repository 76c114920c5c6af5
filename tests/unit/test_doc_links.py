"""Links between the docs resolve: every relative `[text](path#anchor)` of the README, CONTRIBUTING,
docs/ and the package and bench READMEs names a file that exists and, for a Markdown file, a
heading it has (anchors as GitHub makes them), so moving a section cannot leave a dead link."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "CONTRIBUTING.md", "docs/*.md", "client/README.md", "worker/README.md",
         "bench/README.md", "bench/profiles/README.md")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code removed."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((n, re.sub(r"`[^`]*`", "", line)))
    return out


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6} (.*)$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower().replace("`", "")).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_anchors_follow_githubs_rule() -> None:
    assert {"configuration-one-toml-file-per-node-flags-of-schedd-serve-override-it",
            "membership-add-remove-replace-a-node", "tls"} <= anchors(REPO / "docs" / "deployment.md") | \
        anchors(REPO / "docs" / "operations.md")


def test_every_relative_link_and_anchor_resolves() -> None:
    pages = sorted({p for pattern in PAGES for p in REPO.glob(pattern)})
    assert len(pages) >= 15
    dead = []
    for page in pages:
        for n, line in _prose(page):
            for target in _LINK.findall(line):
                if re.match(r"^[a-z]+:", target):          # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(REPO)}:{n}: {target}"
                if not dest.exists():
                    dead.append(f"{where} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    dead.append(f"{where} (no such heading)")
    assert not dead, "\n".join(dead)
