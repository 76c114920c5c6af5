"""Audit trail files for tests: the JSON lines an export holds (what `schedctl audit export`
writes and `schedctl audit verify FILE` reads), made from the daemon's records and read back.

The daemon never writes or reads such a file itself (the SDK does, schedd_client.acl); the tests
make one from the daemon's own records to check that the SDK verifies what the daemon chained."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from schedd.core.audit import HASHED_FIELDS, Anchor, AuditInputError, AuditRecord, from_json

_HASH = re.compile(r"[0-9a-f]{64}")


def export_jsonl(records: Iterable[AuditRecord], anchor: Anchor | None = None) -> str:
    """JSON lines: first the anchor (default: the genesis anchor), then one record per line."""
    anchor = anchor or Anchor()
    head = json.dumps({"anchor": {"next_seq": anchor.next_seq, "hash": anchor.hash}}, separators=(",", ":"))
    rows = (json.dumps({n: getattr(r, n) for n in (*HASHED_FIELDS, "hash")}, separators=(",", ":"),
                       ensure_ascii=False) for r in records)
    return "".join(line + "\n" for line in (head, *rows))


def parse_jsonl(text: str) -> tuple[Anchor, list[AuditRecord]]:
    """Inverse of `export_jsonl`; a file without an anchor line starts at the genesis anchor."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    anchor = Anchor()
    if lines and lines[0].startswith('{"anchor"'):
        a = json.loads(lines.pop(0)).get("anchor")
        if not isinstance(a, dict) or not isinstance(a.get("hash"), str) or not _HASH.fullmatch(a["hash"]) \
                or type(a.get("next_seq")) is not int or a["next_seq"] < 0:
            raise AuditInputError("bad anchor line")
        anchor = Anchor(a["next_seq"], a["hash"])
    return anchor, [from_json(ln) for ln in lines]
