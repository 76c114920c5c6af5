"""Reads of a history store, with the semantics of the in-memory queries
(schedd.core.queries.list_executions): pages in (scheduled_ms, job) order, newest first unless
asked, the cursor being the (scheduled_ms, job) of a page's last row when more follow, and the
total of the filter. Each function runs on a reader connection inside one read transaction, so a
page and its total come from one committed state.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Container

from schedd.core.model import Execution
from schedd.history import tallies
from schedd.history.codec import Symbol, decode, state_code, state_name
from schedd.history.schema import ALL_STATES, ROW, WHOLE_STORE

Cursor = tuple[int, str]
Page = tuple[list[Execution], Cursor | None, int]

_GET = f"SELECT {ROW} FROM executions WHERE job = ? AND scheduled_ms = ?"
BETWEEN = (f"SELECT {ROW} FROM executions WHERE job = ? AND scheduled_ms BETWEEN ? AND ? "
           "ORDER BY scheduled_ms LIMIT ?")
EXISTS = "SELECT 1 FROM executions WHERE job = ? AND scheduled_ms = ?"
_LAST = f"SELECT {ROW} FROM executions WHERE job = ? ORDER BY scheduled_ms DESC LIMIT 1"
_OUTCOMES = ("SELECT scheduled_ms, state FROM executions INDEXED BY executions_by_key WHERE job = ? "
             "ORDER BY scheduled_ms DESC LIMIT ?")


def decoded(row: tuple[object, ...] | None) -> Execution | None:
    if row is None:
        return None
    return decode(row[:8], row[8])  # type: ignore[arg-type]


def get(conn: sqlite3.Connection, job: str, scheduled_ms: int) -> Execution | None:
    return decoded(conn.execute(_GET, (job, scheduled_ms)).fetchone())


def last(conn: sqlite3.Connection, job: str) -> Execution | None:
    return decoded(conn.execute(_LAST, (job,)).fetchone())


Outcomes = list[tuple[int, str]]       # (scheduled_ms, state) of a job's runs


def outcomes(conn: sqlite3.Connection, job: str, n: int) -> Outcomes:
    """The job's newest `n` (scheduled_ms, state), newest first, from the key index and the
    state column alone: no body is decoded."""
    return [(t, state_name(code)) for t, code in conn.execute(_OUTCOMES, (job, n))]


def team_of(conn: sqlite3.Connection, job: str) -> str | None:
    row = conn.execute("SELECT team FROM teams WHERE job = ?", (job,)).fetchone()
    return str(row[0]) if row else None


def page(conn: sqlite3.Connection, *, job: str, state: str, after: Cursor | None, limit: int,
         oldest_first: bool, visible: Container[str] | None) -> Page:
    """list_executions' page over the store (see the module docstring)."""
    code: Symbol = state_code(state) if state else ALL_STATES
    if job:
        if visible is not None and ((team := team_of(conn, job)) is None or team not in visible):
            return [], None, 0
        keys = _job_keys(conn, job, code, after, limit + 1, oldest_first)
        total = tallies.rows(conn, job, code)
    else:
        keys = _merged_keys(conn, code, after, limit + 1, oldest_first, visible)
        total = _total(conn, code, visible)
    more = len(keys) > limit
    keys = keys[:limit]
    found = [decoded(conn.execute(_GET, (name, t)).fetchone()) for t, name in keys]   # by the key index
    return [ex for ex in found if ex is not None], (keys[-1] if more and keys else None), total


def _job_keys(conn: sqlite3.Connection, job: str, code: Symbol, after: Cursor | None, n: int,
              oldest_first: bool) -> list[Cursor]:
    """One job's keys: on the key index, or for a state other than SUCCEEDED on the partial index
    of such rows (never on the state index, whose rows of other jobs would all be walked)."""
    where = "job = ?"
    params: list[object] = [job]
    index = "executions_by_key"
    if isinstance(code, int) and code > 0:
        where += f" AND state = {code} AND state != 0"     # the partial index's own term: it may serve
        index = "executions_unusual"
    elif code != ALL_STATES:
        where += " AND state = ?"
        params.append(code)
    if after is not None:
        # (t, job) beyond (after_t, after_job) in the page's direction, with job fixed
        t, name = after
        if oldest_first:
            where += " AND scheduled_ms > ?"
            params.append(t - 1 if job > name else t)
        else:
            where += " AND scheduled_ms < ?"
            params.append(t + 1 if job < name else t)
    order = "ASC" if oldest_first else "DESC"
    sql = f"SELECT scheduled_ms FROM executions INDEXED BY {index} WHERE {where} ORDER BY scheduled_ms {order} LIMIT ?"
    return [(t, job) for (t,) in conn.execute(sql, (*params, n))]


def _merged_keys(conn: sqlite3.Connection, code: Symbol, after: Cursor | None, n: int, oldest_first: bool,
                 visible: Container[str] | None) -> list[Cursor]:
    """Keys of the whole store in (scheduled_ms, job) order: each state's run of the state index
    is in that order already, so the page is a merge of at most one page per state present
    (the store holds finished executions: a handful of states)."""
    states = [code] if code != ALL_STATES else [s for (s,) in conn.execute(
        "SELECT state FROM tallies WHERE job = ? AND state != ? AND rows > 0", (WHOLE_STORE, ALL_STATES))]
    op, order = (">", "ASC") if oldest_first else ("<", "DESC")
    where, extra = "state = ?", []
    if after is not None:
        where += f" AND (scheduled_ms, job) {op} (?, ?)"
        extra += [after[0], after[1]]
    if visible is not None:
        teams = _visible_teams(conn, visible)
        where += f" AND job IN (SELECT job FROM teams WHERE team IN ({', '.join('?' * len(teams))}))"
        extra += teams
    sql = (f"SELECT scheduled_ms, job FROM executions INDEXED BY executions_by_state WHERE {where} "
           f"ORDER BY scheduled_ms {order}, job {order} LIMIT ?")
    runs = [[(int(t), str(j)) for t, j in conn.execute(sql, (s, *extra, n))] for s in states]
    merged = heapq.merge(*runs, reverse=not oldest_first)
    return [k for _, k in zip(range(n), merged)]


def _total(conn: sqlite3.Connection, code: Symbol, visible: Container[str] | None) -> int:
    if visible is None:
        return tallies.rows(conn, WHOLE_STORE, code)
    teams = _visible_teams(conn, visible)
    row = conn.execute(
        "SELECT COALESCE(SUM(t.rows), 0) FROM tallies t JOIN teams USING (job) WHERE t.state = ? "
        f"AND teams.team IN ({', '.join('?' * len(teams))})", (code, *teams)).fetchone()
    return int(row[0])


def _visible_teams(conn: sqlite3.Connection, visible: Container[str]) -> list[str]:
    """The stored teams `visible` lets through (it may hold patterns: it is asked team by team).
    O(teams) on the teams index."""
    return [t for (t,) in conn.execute("SELECT DISTINCT team FROM teams") if t in visible]
