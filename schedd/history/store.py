"""HistoryStore: a node's finished executions on disk, derived from the Raft log.

Contract with the log. The store holds only what apply handed it: `add(executions, index)`
says "applying the entry at `index` finished these executions (or changed finished ones)". It
records `applied_index`, the last entry whose hand-over is committed, in the same transaction as
the rows, and it does not fsync each write (WAL, synchronous=NORMAL). After a crash it says from
where the owner must replay: entries after `applied_index`. A hand-over at or below the index
already queued is ignored, so a replay that starts too early changes nothing, and a row pruned
since is not brought back.

Writes are batched. `add` encodes at once (a snapshot of the executions as the entry left them:
apply may change or drop them afterwards) and queues; a batch is committed as one transaction
when it reaches `batch_rows` or its oldest hand-over is `batch_delay_s` old. The committer is a
thread of the store by default: a commit's I/O (the WAL write, now and then a checkpoint's
fsync) then never runs on the caller's thread, and the age bound holds whether or not the owner
ticks. With `writer_thread=False` the owner drives it (`commit_due` from its tick, `flush`):
what the tests do, to be deterministic.

Reads see committed batches only: a finished execution shows up at most `batch_delay_s` (plus a
commit's time) after its hand-over, or at once after `flush()`. `wait_applied(i)` waits until
the store holds entry i. Readers use their own connections (one per thread): WAL lets them read
while a batch commits.

Retention (schedd.history.retention) is pruned in small transactions by `prune_step`, which the
owner calls; batches and prune steps are serialized on one write lock, so a prune step delays a
batch by at most its own length.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from schedd.core.model import Execution
from schedd.history import reads, rows, tallies
from schedd.history.codec import FORMAT, Row, encode, state_code, stored_row
from schedd.history.retention import DEFAULT_RETENTION, PruneStep, Pruner, Retention
from schedd.history.schema import ALL_STATES, DEFAULT_CACHE_KIB, applied_index, connect, create
from schedd.history.tallies import Tallies

log = logging.getLogger(__name__)

BATCH_ROWS = 1000
BATCH_DELAY_S = 0.1
MAX_PENDING_ROWS = 100_000       # past this, `add` waits for the writer (only when it has a thread)
READER_CACHE_KIB = 2 * 1024

Chunk = tuple[list[tuple[Row, int]], dict[str, str]]    # rows with their entry indexes, their jobs' teams

_TEAMS = "INSERT INTO teams (job, team) VALUES (?, ?) ON CONFLICT (job) DO UPDATE SET team = excluded.team"


def _gap(conn: sqlite3.Connection) -> tuple[int, int] | None:
    lo = conn.execute("SELECT value FROM meta WHERE key = 'gap_after'").fetchone()
    hi = conn.execute("SELECT value FROM meta WHERE key = 'gap_upto'").fetchone()
    return (int(lo[0]), int(hi[0])) if lo and hi else None


@dataclass(slots=True)
class _Handover:
    """What one entry handed over, encoded, waiting for its batch."""

    index: int
    rows: list[Row]
    teams: dict[str, str]
    forgotten: tuple[str, ...] = ()
    queued_at: float = field(default_factory=time.monotonic)


class HistoryStore:
    """See the module docstring. Thread-safe: `add` from apply, reads from any thread."""

    def __init__(self, path: str | Path, *, retention: Retention = DEFAULT_RETENTION, batch_rows: int = BATCH_ROWS,
                 batch_delay_s: float = BATCH_DELAY_S, writer_thread: bool = True,
                 cache_kib: int = DEFAULT_CACHE_KIB, max_pending_rows: int = MAX_PENDING_ROWS,
                 retention_of: Callable[[str], Retention] | None = None) -> None:
        self.path = Path(path)
        self._batch_rows, self._delay, self._max_pending = batch_rows, batch_delay_s, max_pending_rows
        self._conn = connect(self.path, cache_kib=cache_kib)
        create(self._conn, FORMAT)
        self._committed = self._queued = applied_index(self._conn)
        self._gap = _gap(self._conn)
        self._pending: deque[_Handover] = deque()
        self._pending_rows = 0
        self._cond = threading.Condition()
        self._write = threading.RLock()          # the write connection and the pruner (re-entered by flush)
        self._pruner = Pruner(retention, lookup=retention_of)
        self._pruner.load(self._conn)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._closing = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if writer_thread:
            self._thread = threading.Thread(target=self._run, name="history-writer", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------ writes

    @property
    def applied_index(self) -> int:
        """The last entry whose hand-over is committed: replay from the entry after it."""
        return self._committed

    @property
    def queued_index(self) -> int:
        """The last entry handed over, committed or not (equal to applied_index once flushed)."""
        return self._queued

    @property
    def pending_rows(self) -> int:
        return self._pending_rows

    def add(self, executions: Iterable[Execution], applied_index: int,
            teams: Mapping[str, str] | None = None, forgotten: Iterable[str] = ()) -> bool:
        """Queue what applying entry `applied_index` finished (and, in `teams`, the team of
        jobs named: the access filter of reads; in `forgotten`, jobs deleted: their rows from
        earlier entries go). An entry without finished executions may be handed over too (no
        rows): it only moves applied_index. Returns False, and does nothing, for an entry at or
        below one already handed over (a replay)."""
        if applied_index <= self._queued:
            return False
        encoded = [encode(ex) for ex in executions]
        with self._cond:
            if self._closing:
                raise RuntimeError("history store is closed")
            if applied_index <= self._queued:
                return False
            while self._thread is not None and self._pending_rows >= self._max_pending and self._error is None:
                self._cond.wait()
            if not self._pending or self._pending_rows + len(encoded) >= self._batch_rows:
                self._cond.notify_all()
            self._pending.append(_Handover(applied_index, encoded, dict(teams or {}), tuple(forgotten)))
            self._pending_rows += len(encoded)
            self._queued = applied_index
        return True

    def commit_due(self) -> int:
        """Commit a batch if one is due (full, or its oldest hand-over old enough): the call for
        an owner that drives the store from its tick. Returns applied_index."""
        with self._cond:
            due = self._due()
        return self._commit_next(everything=False) if due else self._committed

    def flush(self, durable: bool = False) -> int:
        """Commit everything queued now; returns applied_index. `durable`: fsync the WAL too
        (synchronous=FULL for this commit), as before a Raft snapshot that no longer carries
        what this store holds is written."""
        if not durable:
            return self._commit_next(everything=True)
        with self._write:
            self._conn.execute("PRAGMA synchronous = FULL")
            try:
                self._sync_commit()
            finally:
                self._conn.execute("PRAGMA synchronous = NORMAL")
        return self._committed

    def _sync_commit(self) -> None:
        """Under the write lock: commit what is queued, or (nothing queued) an empty
        transaction, which with synchronous=FULL still syncs the WAL written so far."""
        if self._commit_next(everything=True) == self._committed and not self._pending:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("UPDATE meta SET value = value WHERE key = 'applied_index'")
            self._conn.execute("COMMIT")

    # ------------------------------------------------------------ gaps and copies

    @property
    def gap(self) -> tuple[int, int] | None:
        """(after, upto): entries whose hand-overs this store never saw (a snapshot was installed
        over them, or the store is new beside an older state), so rows they archived may be
        missing until `fill` brings them from a peer. None: complete."""
        return self._gap

    def note_gap(self, upto: int) -> None:
        """The state jumped to entry `upto` without this store seeing the entries since its
        applied_index (a snapshot installed): record the gap (widening one already there) and
        move applied_index to `upto`."""
        with self._write:
            self._commit_next(everything=True)
            with self._cond:
                after = self._committed
                if upto <= after:
                    return
            old = _gap(self._conn)
            lo = min(after, old[0]) if old else after
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('gap_after', ?), ('gap_upto', ?)", (lo, upto))
            conn.execute("UPDATE meta SET value = ? WHERE key = 'applied_index'", (upto,))
            conn.execute("COMMIT")
            self._gap = (lo, upto)
            with self._cond:
                self._committed = self._queued = upto
                self._cond.notify_all()
        log.warning("history store: entries %d..%d were not handed over here (a snapshot was installed); "
                    "their history is copied from a peer", lo + 1, upto)

    def export(self, after: int, upto: int, chunk_rows: int = 2000) -> Iterator[Chunk]:
        """The rows handed over by entries in (after, upto], in chunks with their jobs' teams,
        for a peer's `fill`: read in one snapshot of the store, on a connection of its own (the
        caller may pull chunks from different threads). Call once applied_index >= upto."""
        conn = connect(self.path, cache_kib=READER_CACHE_KIB, readonly=True)
        try:
            conn.execute("BEGIN")
            cur = conn.execute(f"SELECT {rows.COLS}, applied FROM executions WHERE applied > ? AND applied <= ?",
                               (after, upto))
            while batch := cur.fetchmany(chunk_rows):
                jobs = {str(r[0]) for r in batch}
                teams = {job: team for job in sorted(jobs) if (team := reads.team_of(conn, job)) is not None}
                yield [(stored_row(r[:8], r[8]), int(r[9])) for r in batch], teams
            conn.execute("COMMIT")
        finally:
            conn.close()

    def fill(self, chunk: Iterable[tuple[Row, int]], teams: Mapping[str, str]) -> int:
        """Import one chunk of a peer's `export` (a row already here is kept unless the peer's
        came from a later entry); returns rows written."""
        with self._write:
            with self._changing() as (conn, changes):
                n = rows.put(conn, chunk, changes)
                conn.executemany(_TEAMS, teams.items())
            self._pruner.suspects.update(teams)
        return n

    def close_gap(self, upto: int) -> None:
        """A peer's export of (after, upto] is all in: the gap is closed if it ended there."""
        with self._write:
            gap = _gap(self._conn)
            if gap is not None and upto >= gap[1]:
                self._conn.execute("DELETE FROM meta WHERE key IN ('gap_after', 'gap_upto')")
                self._gap = None

    def wait_applied(self, index: int, timeout: float) -> bool:
        """Wait until entry `index` is committed (or the timeout passes)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._committed >= index, timeout)

    def set_retention(self, job: str, retention: Retention | None) -> None:
        """A job's own retention (None: the default again), as its spec says."""
        with self._write:
            self._pruner.set(job, retention)

    def set_shortest_age(self, max_age_ms: int) -> None:
        """The shortest max age among the jobs `retention_of` answers for (0: none shorter than
        the default): where the age sweep starts looking."""
        with self._write:
            if self._pruner.shortest_hint != max_age_ms:
                self._pruner.shortest_hint, self._pruner._shortest = max_age_ms, None

    def prune_step(self, now_ms: int, budget_rows: int) -> PruneStep:
        """Delete at most about `budget_rows` rows that retention no longer keeps, in one short
        transaction. `more` says work was left: call again soon (else at leisure)."""
        with self._write:
            suspects, cursor = set(self._pruner.suspects), self._pruner.cursor
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                step = self._pruner.step(self._conn, now_ms, budget_rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._pruner.suspects, self._pruner.cursor = suspects, cursor
                raise
            return step

    def close(self, flush: bool = True) -> None:
        """Stop the writer, commit what is queued unless `flush` is False (what a crash does:
        the queue is lost, and applied_index says so), and close every connection."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        if flush:
            self._commit_next(everything=True)
        with self._write:
            for conn in [*self._readers, self._conn]:
                conn.close()
            self._readers.clear()

    def _due(self) -> bool:
        return bool(self._pending) and (self._pending_rows >= self._batch_rows
                                        or time.monotonic() - self._pending[0].queued_at >= self._delay)

    def _take(self, everything: bool) -> list[_Handover]:
        batch: list[_Handover] = []
        n = 0
        while self._pending and (everything or n < self._batch_rows):
            item = self._pending.popleft()
            batch.append(item)
            n += len(item.rows)
        self._pending_rows -= n
        self._cond.notify_all()
        return batch

    def _commit_next(self, everything: bool) -> int:
        """Take a batch and commit it; under the write lock, so batches commit in queue order
        (applied_index never names an entry whose rows are not all in). A failed batch goes back
        to the front of the queue."""
        with self._write:
            with self._cond:
                batch = self._take(everything)
            if not batch:
                return self._committed
            try:
                self._commit(batch)
            except BaseException as e:
                with self._cond:
                    self._pending.extendleft(reversed(batch))
                    self._pending_rows += sum(len(h.rows) for h in batch)
                    self._error = e
                raise
            with self._cond:
                self._committed, self._error = batch[-1].index, None
                self._cond.notify_all()
            self._pruner.suspects.update(r.cols[0] for h in batch for r in h.rows)
            for h in batch:
                for job in h.forgotten:
                    self._pruner.set(job, None)
            return self._committed

    def _commit(self, batch: list[_Handover]) -> None:
        teams: dict[str, str] = {}
        with self._changing() as (conn, changes):
            for h in batch:          # in entry order: a job deleted, then created again
                for job in h.forgotten:
                    rows.forget(conn, job, h.index, changes)
                    teams.pop(job, None)
                teams.update(h.teams)
                rows.put(conn, ((r, h.index) for r in h.rows), changes)
            conn.executemany(_TEAMS, teams.items())
            conn.execute("UPDATE meta SET value = ? WHERE key = 'applied_index'", (batch[-1].index,))

    @contextmanager
    def _changing(self) -> Iterator[tuple[sqlite3.Connection, Tallies]]:
        """One write transaction on the write connection (hold the write lock): the rows'
        changes go through the yielded Tallies, written before the commit; any error rolls
        the whole transaction back."""
        conn, changes = self._conn, Tallies()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn, changes
            changes.write(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _run(self) -> None:
        """The writer thread: a batch when one is due, until close."""
        while True:
            with self._cond:
                while not self._closing and not self._due():
                    wait = None if not self._pending else max(
                        0.0, self._delay - (time.monotonic() - self._pending[0].queued_at))
                    self._cond.wait(wait)
                if self._closing:
                    return
            try:
                self._commit_next(everything=False)
            except Exception:
                log.exception("history store: a batch failed to commit (it stays queued); retrying")
                time.sleep(max(self._delay, 0.1))

    # ------------------------------------------------------------ reads

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """This thread's reader connection, inside one read transaction."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, cache_kib=READER_CACHE_KIB, readonly=True)
            self._local.conn = conn
            with self._write:
                self._readers.append(conn)
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def list(self, *, job: str = "", state: str = "", after: reads.Cursor | None = None, limit: int = 100,
             oldest_first: bool = False, visible: Container[str] | None = None) -> reads.Page:
        """A page of executions as schedd.core.queries.list_executions gives it: (page,
        next cursor or None, total)."""
        if limit <= 0:
            return [], None, self.count(job, state)
        with self._read() as conn:
            return reads.page(conn, job=job, state=state, after=after, limit=limit,
                              oldest_first=oldest_first, visible=visible)

    def get(self, job: str, scheduled_ms: int) -> Execution | None:
        with self._read() as conn:
            return reads.get(conn, job, scheduled_ms)

    def between(self, job: str, lo: int, hi: int, limit: int) -> Iterator[Execution]:
        """The job's executions scheduled in [lo, hi], oldest first, at most `limit`."""
        with self._read() as conn:
            rows = conn.execute(reads.BETWEEN, (job, lo, hi, limit)).fetchall()
        for row in rows:
            ex = reads.decoded(row)
            if ex is not None:
                yield ex

    def present(self, job: str, times: Iterable[int]) -> tuple[int, ...]:
        """Which of `times` the job has a row at."""
        with self._read() as conn:
            return tuple(t for t in times if conn.execute(reads.EXISTS, (job, t)).fetchone() is not None)

    def outcomes(self, jobs: Iterable[str], n: int) -> dict[str, reads.Outcomes]:
        """Each job's newest `n` (scheduled_ms, state), newest first, in one read transaction:
        a listing's strip of recent runs costs one index walk per job, no body decoded."""
        with self._read() as conn:
            return {job: reads.outcomes(conn, job, n) for job in jobs}

    def last(self, job: str) -> Execution | None:
        """The job's newest execution in the store (by scheduled time)."""
        with self._read() as conn:
            return reads.last(conn, job)

    def count(self, job: str = "", state: str = "") -> int:
        with self._read() as conn:
            return tallies.rows(conn, job, state_code(state) if state else ALL_STATES)

    def digest(self, job: str = "") -> int:
        """The sum of the row hashes of a job (or of the whole store) modulo 2^62: equal on
        replicas holding the same rows, whatever order and batches they came in."""
        with self._read() as conn:
            return tallies.digest(conn, job)

    @staticmethod
    def file_digest(path: str | Path) -> int:
        """The digest of a store file (a copy) without opening it as a store."""
        conn = connect(path, cache_kib=READER_CACHE_KIB, readonly=True)
        try:
            return tallies.digest(conn)
        finally:
            conn.close()

    def truncate_after(self, index: int) -> int:
        """Keep only rows handed over by entries up to `index` and say the store holds entry
        `index`: a copy taken after a snapshot at `index`, seeding a new cluster whose log goes
        on from there (its later entries are not the old cluster's). Returns rows dropped."""
        with self._write:
            self._commit_next(everything=True)
            with self._changing() as (conn, changes):
                ids = [i for (i,) in conn.execute("SELECT id FROM executions WHERE applied > ?", (index,))]
                n = rows.delete(conn, ids, changes)
                conn.execute("UPDATE meta SET value = ? WHERE key = 'applied_index'", (index,))
                conn.execute("DELETE FROM meta WHERE key IN ('gap_after', 'gap_upto')")
            with self._cond:
                self._committed = self._queued = index
                self._gap = None
            return n

    def copy_to(self, path: str | Path) -> int:
        """An online copy of the store as of one committed batch (sqlite3's backup API, read in
        one snapshot while batches go on committing); returns the copy's applied_index."""
        src = connect(self.path, cache_kib=READER_CACHE_KIB, readonly=True)
        dst = sqlite3.connect(str(path))
        try:
            src.backup(dst)
            return applied_index(dst)
        finally:
            dst.close()
            src.close()
