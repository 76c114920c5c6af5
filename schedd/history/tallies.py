"""Row counts and digests per (job, state), kept in step with the rows in the same transaction.

Every insert, replace and delete of a row goes through `Tallies`: it sums the changes of a
transaction in memory and writes each touched counter once, by an UPSERT whose arithmetic stays
in SQLite's signed 64-bit integers (see schedd.history.schema). Four counters move per row: the
row's (job, state), its job's all-states row, the store's row for the state, and the store's
all-states row. So `count(job)`, the `total` of a listing and both digests are one lookup.

Digest: the sum of row hashes modulo 2^62. A sum (like XOR) is the same whatever order rows were
inserted and pruned in and however they were batched, which replicas differ in; unlike XOR, a
row counted twice does not cancel out. A hash chain in key order would need rehashing from the
first changed row on every insert into the middle (a backfill) and every prune at the front.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from schedd.history.codec import DIGEST_MOD, Symbol
from schedd.history.schema import ALL_STATES, WHOLE_STORE

_UPSERT = ("INSERT INTO tallies (job, state, rows, digest) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (job, state) DO UPDATE SET rows = rows + excluded.rows, "
           f"digest = (digest + excluded.digest) % {DIGEST_MOD}")


@dataclass(slots=True)
class Tallies:
    """The counter changes of one transaction: (job, state) -> [rows, digest]."""

    changes: dict[tuple[str, Symbol], list[int]] = field(default_factory=dict)

    def count(self, job: str, state: Symbol, row_hash: int, sign: int) -> None:
        """Count a row in (+1) or out (-1) of its four counters."""
        h = row_hash if sign > 0 else (DIGEST_MOD - row_hash) % DIGEST_MOD
        for key in ((job, state), (job, ALL_STATES), (WHOLE_STORE, state), (WHOLE_STORE, ALL_STATES)):
            c = self.changes.get(key)
            if c is None:
                self.changes[key] = [sign, h]
            else:
                c[0] += sign
                c[1] = (c[1] + h) % DIGEST_MOD

    def write(self, conn: sqlite3.Connection) -> None:
        conn.executemany(_UPSERT, [(job, state, n, d) for (job, state), (n, d) in self.changes.items()])
        self.changes.clear()


def rows(conn: sqlite3.Connection, job: str = WHOLE_STORE, state: Symbol = ALL_STATES) -> int:
    row = conn.execute("SELECT rows FROM tallies WHERE job = ? AND state = ?", (job, state)).fetchone()
    return int(row[0]) if row else 0


def digest(conn: sqlite3.Connection, job: str = WHOLE_STORE) -> int:
    row = conn.execute("SELECT digest FROM tallies WHERE job = ? AND state = ?", (job, ALL_STATES)).fetchone()
    return int(row[0]) if row else 0
