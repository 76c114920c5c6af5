"""Row writes that keep the tallies in step: put (insert, or replace by a newer entry) and
delete. Both run inside a transaction the caller opened, with the tallies it writes at the end.

Replace rule: a row is replaced only by one handed over by a *later* Raft entry (`applied`
greater than the stored one); an entry at the same or an older index is a no-op. So replaying
the log over a store that already holds part of it changes nothing, and a finished execution
that a later entry changed again (an SLA event, a late result refused by fencing and kept for the
history, a job deleted and created again that reused an instant) ends as that later entry left
it, whatever order batches were cut in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from schedd.history.codec import Row, raw_body, row_hash
from schedd.history.tallies import Tallies

_INSERT = ("INSERT INTO executions (job, scheduled_ms, state, trigger, created_ms, updated_ms, term, "
           "log_index, applied, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
           "ON CONFLICT (job, scheduled_ms) DO NOTHING")
_STORED = ("SELECT job, scheduled_ms, state, trigger, created_ms, updated_ms, term, log_index, applied, body "
           "FROM executions WHERE job = ? AND scheduled_ms = ?")
_REPLACE = ("UPDATE executions SET state = ?, trigger = ?, created_ms = ?, updated_ms = ?, term = ?, "
            "log_index = ?, applied = ?, body = ? WHERE job = ? AND scheduled_ms = ?")
_DELETE = "DELETE FROM executions WHERE job = ? AND scheduled_ms = ?"


def put(conn: sqlite3.Connection, rows: Iterable[tuple[Row, int]], tallies: Tallies) -> int:
    """Insert each (row, applied) or replace the stored row by a newer one; returns how many
    rows changed."""
    changed = 0
    for row, applied in rows:
        c = row.cols
        if conn.execute(_INSERT, (*c, applied, row.body)).rowcount:
            tallies.count(c[0], c[2], row.hash, +1)
            changed += 1
            continue
        old = conn.execute(_STORED, row.key).fetchone()
        if old[8] >= applied:
            continue
        tallies.count(old[0], old[2], row_hash(tuple(old[:8]), raw_body(old[9])), -1)
        conn.execute(_REPLACE, (*c[2:], applied, row.body, *row.key))
        tallies.count(c[0], c[2], row.hash, +1)
        changed += 1
    return changed


def delete(conn: sqlite3.Connection, keys: Iterable[tuple[str, int]], tallies: Tallies) -> int:
    """Delete the rows of `keys` that exist; returns how many."""
    gone: list[tuple[str, int]] = []
    for key in keys:
        old = conn.execute(_STORED, key).fetchone()
        if old is None:
            continue
        tallies.count(old[0], old[2], row_hash(tuple(old[:8]), raw_body(old[9])), -1)
        gone.append(key)
    conn.executemany(_DELETE, gone)
    return len(gone)
