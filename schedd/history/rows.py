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
_COLS = "job, scheduled_ms, state, trigger, created_ms, updated_ms, term, log_index, applied, body, id"
COLS = "job, scheduled_ms, state, trigger, created_ms, updated_ms, term, log_index, body"   # a Row
_BY_KEY = f"SELECT {_COLS} FROM executions WHERE job = ? AND scheduled_ms = ?"
_BY_ID = f"SELECT {_COLS} FROM executions WHERE id = ?"
_REPLACE = ("UPDATE executions SET state = ?, trigger = ?, created_ms = ?, updated_ms = ?, term = ?, "
            "log_index = ?, applied = ?, body = ? WHERE id = ?")
_DELETE = "DELETE FROM executions WHERE id = ?"


def _count_out(old: tuple[object, ...], tallies: Tallies) -> None:
    """Take a stored row (selected as _COLS) out of its counters."""
    body = old[9]
    assert isinstance(body, bytes) and isinstance(old[0], str)
    tallies.count(old[0], old[2], row_hash(tuple(old[:8]), raw_body(body)), -1)  # type: ignore[arg-type]


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
        old = conn.execute(_BY_KEY, row.key).fetchone()
        if old[8] >= applied:
            continue
        _count_out(old, tallies)
        conn.execute(_REPLACE, (*c[2:], applied, row.body, old[10]))
        tallies.count(c[0], c[2], row.hash, +1)
        changed += 1
    return changed


def delete(conn: sqlite3.Connection, ids: Iterable[int], tallies: Tallies) -> int:
    """Delete the rows of `ids` (rowids) that exist; returns how many."""
    gone: list[tuple[int]] = []
    for rowid in ids:
        old = conn.execute(_BY_ID, (rowid,)).fetchone()
        if old is not None:
            _count_out(old, tallies)
            gone.append((rowid,))
    conn.executemany(_DELETE, gone)
    return len(gone)


_OF_JOB = f"SELECT {_COLS} FROM executions WHERE job = ? AND applied < ?"


def forget(conn: sqlite3.Connection, job: str, before: int, tallies: Tallies) -> int:
    """Delete a deleted job's rows handed over before entry `before` (rows of a job created again
    under the name by a later entry stay); returns how many. Its team row goes too."""
    gone = conn.execute(_OF_JOB, (job, before)).fetchall()
    for old in gone:
        _count_out(old, tallies)
    conn.executemany(_DELETE, [(old[10],) for old in gone])
    conn.execute("DELETE FROM teams WHERE job = ?", (job,))
    return len(gone)
