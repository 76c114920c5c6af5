"""The SQLite layout of a history store and how its connections are opened.

Tables (one file per node, 4 KiB pages):

- `executions`: one row per finished execution, in a rowid table, with a UNIQUE index on
  (job, scheduled_ms). The columns are those reads filter and sort on: state and trigger as
  codes (schedd.history.codec), created_ms, updated_ms, term, log_index. `applied` is the Raft
  index of the entry that handed the row over (a row is replaced only by a newer one), and
  `body` holds the rest, encoded. Rows are appended in rowid order, which is about the order
  they finish. The alternative was a clustered WITHOUT ROWID table keyed by (job,
  scheduled_ms), measured against this layout in bench/bench_history.py. It saves the key index
  but inserts at random places, and its rows must fit a quarter of an index page. A body of
  ~1 KB (a 4 KiB output tail, zlib'd) therefore spills into an overflow page of its own: 4,750 B
  per row against about 1,450 here.
- `executions_by_state` (state, scheduled_ms, job): a state filter, and the whole-store
  listing in (scheduled_ms, job) order, merged across the few states present.
- `executions_unusual` (job, state, scheduled_ms) of the rows not SUCCEEDED (code 0): one job's
  rows in a rarer state without walking the job's rows, for the few bytes per row of the rows
  that failed (a job's SUCCEEDED rows are found on the key index, being most of it).
- `executions_by_updated` (updated_ms [, rowid]): retention by age. Age counts from when an
  execution finished (`updated_ms`, as prune_history measures it in memory), not from when it
  was recorded, because a run backfilled for last year may finish today. Rows arrive in roughly
  updated_ms order, so this index, like the table, grows at its right edge.
- `tallies` (job, state) -> rows, digest: counts for `total` and for retention in O(1), and the
  digests. job '' is the whole store, and state -1 is all states. A digest is a sum of row
  hashes modulo 2^62. It is kept in SQL by one UPSERT that cannot overflow SQLite's signed 64-bit
  integers (both terms are below 2^62), which a sum modulo 2^64 would.
- `teams` job -> team: the read filter of access control, as the job's team is *now*.
- `meta`: `format` (codec.FORMAT) and `applied_index`, written in the same transaction as
  the rows they describe.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

ALL_STATES = -1                       # tallies.state of a job's (or the store's) all-states row
WHOLE_STORE = ""                      # tallies.job of the store's rows

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS executions (
    id INTEGER PRIMARY KEY, job TEXT NOT NULL, scheduled_ms INTEGER NOT NULL, state INTEGER NOT NULL,
    trigger INTEGER NOT NULL, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, term INTEGER NOT NULL,
    log_index INTEGER NOT NULL, applied INTEGER NOT NULL, body BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS executions_by_key ON executions (job, scheduled_ms);
CREATE INDEX IF NOT EXISTS executions_by_state ON executions (state, scheduled_ms, job);
CREATE INDEX IF NOT EXISTS executions_unusual ON executions (job, state, scheduled_ms) WHERE state != 0;
CREATE INDEX IF NOT EXISTS executions_by_updated ON executions (updated_ms);
CREATE TABLE IF NOT EXISTS tallies (
    job TEXT NOT NULL, state INTEGER NOT NULL, rows INTEGER NOT NULL, digest INTEGER NOT NULL,
    PRIMARY KEY (job, state)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS teams (job TEXT PRIMARY KEY, team TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS teams_by_team ON teams (team);
"""

COLUMNS = "job, scheduled_ms, state, trigger, created_ms, updated_ms, term, log_index"
ROW = f"{COLUMNS}, body"              # what a read selects to decode an execution

DEFAULT_CACHE_KIB = 8 * 1024          # SQLite's page cache per connection: bounds the RSS
# Set before the file's first table, and fixed for its life. Every batch dirties the last
# page of the key index of each job it holds, so each row costs about one page of WAL write:
# 16 KiB pages would keep a zlib'd 4 KiB tail's row 15% smaller, but write 4x as much per row.
PAGE_SIZE = 4 * 1024
# A checkpoint copies each page once however many commits rewrote it. Between two checkpoints
# every batch rewrites the same tail pages (each job's newest), so a longer WAL (40 MiB here)
# makes the copies rarer: 7.5 -> 4.6 KB written per row at 300,000 rows of 2,000 jobs (6.5 KB at
# 1M), the WAL's own share being about one page per row.
WAL_CHECKPOINT_PAGES = 10_000
WAL_KEEP_BYTES = 64 * 1024 * 1024     # the WAL file is truncated to this after a checkpoint


def connect(path: str | Path, *, cache_kib: int = DEFAULT_CACHE_KIB, readonly: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit BEGIN/COMMIT), WAL with
    synchronous=NORMAL (a commit writes the WAL without fsync; a crash can lose the last
    commits, never corrupt: meta.applied_index is in the same transactions, so it says what
    survived), a bounded page cache, no memory map (the RSS stays the cache's, whatever the
    file's size). Usable from any thread; the store serializes its use."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute(f"PRAGMA cache_size = -{int(cache_kib)}")
    conn.execute("PRAGMA mmap_size = 0")
    conn.execute("PRAGMA temp_store = MEMORY")
    if readonly:
        conn.execute("PRAGMA query_only = 1")
    else:
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")      # a no-op on an existing file
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_KEEP_BYTES}")
    return conn


def create(conn: sqlite3.Connection, fmt: int) -> None:
    """Make the tables of an empty file, or check an existing file's format (a store of another
    format is refused, not guessed at: it is derived, so the owner can delete it and replay)."""
    conn.executescript(DDL)
    row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    if row is None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO meta VALUES ('format', ?), ('applied_index', 0)", (fmt,))
        conn.execute("COMMIT")
    elif row[0] != fmt:
        raise ValueError(f"history store format {row[0]}, this build reads format {fmt}")


def applied_index(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'applied_index'").fetchone()
    return int(row[0]) if row else 0
