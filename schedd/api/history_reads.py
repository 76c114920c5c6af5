"""Reads of executions across the replicated tables and the node's history store.

The tables hold live executions and each job's newest finished ones; the history store
(schedd.history) holds those that left (schedd.core.history). A listing is the merge of a page
from each, in the same (scheduled_ms, job) order with the same cursor, and its total is the sum,
so `run list` pages as it always did, whichever side a row is on.

Order of the two reads: the tables under the node lock first, then the store, after it has
committed every hand-over up to the entry the tables were read at (a row that left memory after
that read may then be on both sides: the merge keeps one, the tables'). A store with a gap (it
missed entries a peer is copying now) answers with what it has, and the listing says so.
"""

from __future__ import annotations

import threading
from collections.abc import Container
from dataclasses import dataclass

from schedd.core import queries
from schedd.core.model import Execution
from schedd.core.state import SchedulerState
from schedd.history import HistoryStore

Cursor = tuple[int, str]


@dataclass(slots=True)
class Listing:
    executions: list[Execution]
    next_after: Cursor | None
    total: int
    note: str = ""                # what the listing may lack, and why


def caught_up(store: HistoryStore, index: int) -> None:
    """Have the store hold every hand-over up to entry `index` (commit what is queued now)."""
    if store.applied_index < index:
        store.flush()


def list_executions(state: SchedulerState, lock: threading.RLock, store: HistoryStore | None, *, job: str,
                    state_filter: str, after: Cursor | None, limit: int, oldest_first: bool,
                    visible: Container[str] | None) -> Listing:
    """Call off the event loop (the store reads the disk). `lock`: the node's apply lock."""
    with lock:
        page, nxt, total = state.list_executions(job=job, state=state_filter, after=after, limit=limit,
                                                 oldest_first=oldest_first, visible=visible)
        index = state.last_index
    if store is None:
        return Listing(page, nxt, total)
    caught_up(store, index)
    disk, disk_next, disk_total = store.list(job=job, state=state_filter, after=after, limit=limit,
                                             oldest_first=oldest_first, visible=visible)
    return _merge(page, nxt, total, disk, disk_next, disk_total, limit, oldest_first, gap_note(store))


def _merge(page: list[Execution], nxt: Cursor | None, total: int, disk: list[Execution], disk_next: Cursor | None,
           disk_total: int, limit: int, oldest_first: bool, note: str) -> Listing:
    seen = {(ex.job, ex.scheduled_ms) for ex in page}
    rows = page + [ex for ex in disk if (ex.job, ex.scheduled_ms) not in seen]
    dup = len(page) + len(disk) - len(rows)
    rows.sort(key=lambda ex: (ex.scheduled_ms, ex.job), reverse=not oldest_first)
    more = len(rows) > limit or nxt is not None or disk_next is not None
    rows = rows[:limit]
    cursor = (rows[-1].scheduled_ms, rows[-1].job) if more and rows else None
    return Listing(rows, cursor, total + disk_total - dup, note)


def recent_runs(state: SchedulerState, lock: threading.RLock, store: HistoryStore | None, names: list[str],
                n: int) -> dict[str, list[tuple[int, str]]]:
    """Each job's last `n` runs as (scheduled_ms, state), oldest first, from the tables and the
    store together (the newest finished runs have mostly left memory): ListJobs' `recent`, for
    one page of jobs in one call. Off the event loop: one index walk of the store per job."""
    with lock:
        out = {name: [(ex.scheduled_ms, ex.state) for ex in queries.recent_runs(state, name, n)] for name in names}
        index = state.last_index
    if store is None or n <= 0:
        return out
    caught_up(store, index)
    for name, disk in store.outcomes(names, n).items():
        kept = {t for t, _ in out[name]}
        out[name] = sorted(out[name] + [row for row in disk if row[0] not in kept])[-n:]
    return out


def get_execution(state: SchedulerState, lock: threading.RLock, store: HistoryStore | None,
                  key: tuple[str, int]) -> Execution | None:
    """The execution from the tables, else from the store. Off the event loop."""
    with lock:
        ex = state.execs.get(key)
        index = state.last_index
    if ex is not None or store is None:
        return ex
    caught_up(store, index)
    return store.get(*key)


def gap_note(store: HistoryStore) -> str:
    gap = store.gap
    if gap is None:
        return ""
    return (f"this node is still copying the history of log entries {gap[0] + 1}..{gap[1]} from a peer: "
            "older runs may be missing here (ask another node, or again shortly)")


def window(state: SchedulerState, lock: threading.RLock, store: HistoryStore | None, job: str, since_ms: int,
           until_ms: int, limit: int) -> dict[int, Execution]:
    """The job's executions in the store scheduled in [since_ms, until_ms] (at most `limit`,
    oldest first), by scheduled time: what the ledger of instants adds to the tables'."""
    if store is None:
        return {}
    with lock:
        index = state.last_index
    caught_up(store, index)
    return {ex.scheduled_ms: ex for ex in store.between(job, since_ms, until_ms, limit)}
