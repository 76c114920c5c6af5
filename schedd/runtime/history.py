"""The node's history store in the daemon: where it lives, the retention each job gets, the
prune loop, and the copy of a gap from a peer.

The store (schedd.history) is opened before the Raft node, which hands it what apply moves out
of the replicated tables (schedd.replication.node) and flushes it before each snapshot. It is
derived from the log, so a store this build cannot read is set aside and rebuilt: what the
journal still holds is replayed into it, and the rest is copied from a peer (a gap).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from schedd.core.model import Job
from schedd.history import HistoryStore, Retention
from schedd.history.codec import stored_row
from schedd.history.retention import DAY_MS
from schedd.settings import HistorySettings
from schedd_proto import backup_pb2 as bpb
from schedd_proto import backup_pb2_grpc as bpb_grpc

log = logging.getLogger("schedd.history")

FILE = "history.sqlite"
COPY_METHOD = "/schedd.v1.Backup/CopyHistory"
IDLE_S = 5.0                  # between prune steps when the last one left nothing to do
BUSY_S = 0.05                 # between prune steps while there is work (a step is one short transaction)
GAP_RETRY_S = 5.0


def default_retention(settings: HistorySettings) -> Retention:
    return Retention(max_age_ms=int(settings.max_age_days * DAY_MS))


def job_retention(job: Job | None, max_age_ms: int, default: Retention) -> Retention:
    """A job keeps its newest `history_limit` runs and none finished longer ago than its
    `history_max_age_seconds`, else the node's default age."""
    if job is None:
        return default
    return Retention(keep=job.history_limit, max_age_ms=max_age_ms or default.max_age_ms)


def open_store(data_dir: str | os.PathLike[str], settings: HistorySettings,
               retention_of: Callable[[str], Retention] | None = None) -> HistoryStore:
    """The store in the node's data dir. One of another format, or unreadable, is moved aside
    (it is derived: the log and the peers rebuild it) and a new one is made."""
    Path(data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    path = Path(data_dir) / FILE
    try:
        return HistoryStore(path, retention=default_retention(settings), retention_of=retention_of)
    except (ValueError, sqlite3.DatabaseError) as e:      # another format; not a database; corrupt
        if not path.exists():
            raise
        return _replace(path, settings, retention_of, e)


def _replace(path: Path, settings: HistorySettings, retention_of: Callable[[str], Retention] | None,
             why: BaseException) -> HistoryStore:
    aside = path.with_name(f"{path.name}.unreadable-{int(time.time())}")
    log.error("history store %s cannot be used (%s): moved to %s; it is rebuilt from the log and "
              "copied from a peer", path, why, aside)
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            p.rename(f"{aside}{suffix}")
    return HistoryStore(path, retention=default_retention(settings), retention_of=retention_of)


async def keep_pruned(store: HistoryStore, now_ms: Callable[[], int], settings: HistorySettings,
                      shortest_age: Callable[[], int]) -> None:
    """Prune a little at a time, forever: a step when the last one left work, else every IDLE_S."""
    next_hint = 0.0
    while True:
        try:
            if time.monotonic() >= next_hint:
                store.set_shortest_age(await asyncio.to_thread(shortest_age))
                next_hint = time.monotonic() + 60.0
            step = await asyncio.to_thread(store.prune_step, now_ms(), settings.prune_rows_per_step)
            await asyncio.sleep(BUSY_S if step.more else IDLE_S)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("history store: a prune step failed")
            await asyncio.sleep(IDLE_S)


async def fill_gaps(store: HistoryStore, peers: Callable[[], list[str]],
                    channel: Callable[[str], grpc.aio.Channel],
                    metadata: Callable[[str], list[tuple[str, str]]]) -> None:
    """While the store has a gap, copy its rows from a peer (any member whose store holds the
    entries: it waits until it does, or refuses when it has a gap of its own)."""
    while True:
        gap = store.gap
        if gap is None:
            await asyncio.sleep(GAP_RETRY_S)
            continue
        for addr in peers():
            try:
                n = await copy_from(store, bpb_grpc.BackupStub(channel(addr)), gap, metadata(COPY_METHOD))
            except grpc.aio.AioRpcError as e:
                log.info("history gap %d..%d: %s could not give it (%s)", gap[0] + 1, gap[1], addr,
                         e.details() or e.code().name)
                continue
            log.info("history gap %d..%d copied from %s: %d rows", gap[0] + 1, gap[1], addr, n)
            break
        await asyncio.sleep(0 if store.gap is None else GAP_RETRY_S)


async def copy_from(store: HistoryStore, stub: bpb_grpc.BackupStub, gap: tuple[int, int],
                    metadata: list[tuple[str, str]]) -> int:
    """Copy the rows of entries in `gap` from one peer; closes the gap once all are in."""
    n = 0
    call = stub.CopyHistory(bpb.CopyHistoryRequest(after=gap[0], upto=gap[1]), metadata=metadata, timeout=3600)
    async for chunk in call:
        rows = [(stored_row(tuple(json.loads(r.cols)), r.body), r.applied) for r in chunk.rows]
        n += await asyncio.to_thread(store.fill, rows, dict(chunk.teams))
    await asyncio.to_thread(store.close_gap, gap[1])
    return n
