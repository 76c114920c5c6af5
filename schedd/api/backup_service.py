"""Backup.SaveSnapshot: a consistent image of the state, streamed from the leader; and
Backup.CopyHistory: a range of this node's history store, for a peer's gap.

Consistent and current: the leader first commits a no-op (a read barrier: it proves this node
still leads, and the image then holds at least every entry committed before the call), then
forks the image under the node lock (schedd.replication.backup: the lock is held only for the
fork; encoding, compressing and hashing happen in the child). The stream is a SnapshotHeader,
then the body in chunks of at most 1 MiB read off the event loop. The header carries the
snapshot file's header signed under the cluster's backup key (`seal`, chosen by the composition
root: schedd.runtime.restore.header_sealer), so `schedd restore` can tell a file this cluster
wrote from a forged one; a node without a cluster secret refuses to take backups. A follower asked relays the
leader's stream (once: a forwarded call that lands on a non-leader is refused with UNAVAILABLE).
The body is written to a private temporary file in the data dir and removed when the call ends,
however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable

import grpc

from schedd.api.service import Router
from schedd.core import commands as C
from schedd.history import HistoryStore
from schedd.history.codec import Row
from schedd.ports.clock import Clock
from schedd.replication import backup
from schedd.replication.node import NotApplied, OutcomeUnknown, RaftNode
from schedd.ports.rpc import CallContext
from schedd.versions import build_info
from schedd_proto import backup_pb2 as bpb
from schedd_proto import backup_pb2_grpc as bpb_grpc

log = logging.getLogger("schedd.backup")

METHOD = "/schedd.v1.Backup/SaveSnapshot"
HISTORY_METHOD = "/schedd.v1.Backup/SaveHistory"
HISTORY_ENCODING = "schedd-history-sqlite-1"     # a SaveHistory body: a history store file
BARRIER_TIMEOUT_S = 10.0
CHUNK = 1 << 20


Seal = Callable[[bpb.SnapshotHeader], bytes]     # a header -> the signed file header


def chunk_message(rows: list[tuple[Row, int]], teams: dict[str, str]) -> bpb.HistoryChunk:
    """A chunk of `HistoryStore.export` as the wire carries it (schedd.runtime.history reads it)."""
    return bpb.HistoryChunk(rows=[bpb.HistoryRow(cols=json.dumps(list(row.cols)), body=row.body, applied=applied)
                                  for row, applied in rows], teams=teams)


class BackupService(bpb_grpc.BackupServicer):
    def __init__(self, node: RaftNode, router: Router, clock: Clock, seal: Seal | None) -> None:
        self.node, self.router, self.clock, self.seal = node, router, clock, seal

    async def SaveSnapshot(self, request: bpb.SaveSnapshotRequest,
                           context: CallContext) -> AsyncIterator[bpb.SnapshotChunk]:
        if not self.node.is_leader():
            async for chunk in self._forward(request, context):
                yield chunk
            return
        if self.seal is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "backups are signed with a key derived from the cluster secret, and this "
                                "node has none: set secret_file in its config")
        seal = self.seal
        term = await self._barrier(context)
        path = os.path.join(str(self.node.cfg.data_dir), f"backup-{uuid.uuid4().hex}.tmp")
        started = time.monotonic()
        # Forked from a thread of our own: never from the event loop's thread, which is inside
        # gRPC (a child forked there aborted in gRPC's epoll code before it could write a byte).
        pending = await asyncio.to_thread(backup.fork_image, self.node.state, self.node.lock, path)
        try:
            try:
                info = await asyncio.to_thread(pending.wait)
            except (OSError, RuntimeError, ValueError) as e:
                await context.abort(grpc.StatusCode.INTERNAL, f"snapshot failed: {e}")
            log.info("snapshot at index %d (term %d): %d bytes in %.2fs", info.index, term,
                     info.length, time.monotonic() - started)
            async for chunk in _signed_file(_header(info, term, self.clock.now_ms()), seal, path):
                yield chunk
        finally:
            pending.discard()

    async def SaveHistory(self, request: bpb.SaveHistoryRequest,
                          context: CallContext) -> AsyncIterator[bpb.SnapshotChunk]:
        """The leader's history store as a signed file (schedd restore seeds each new node's store
        with it). After a read barrier, the store is caught up to the state and copied with
        SQLite's online backup; the copy's index is at or after that of a snapshot saved before."""
        if not self.node.is_leader():
            async for chunk in self._forward(request, context, HISTORY_METHOD):
                yield chunk
            return
        store = self.node.history
        if not isinstance(store, HistoryStore):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this node keeps no history store")
        if self.seal is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "backups are signed with a key derived "
                                "from the cluster secret, and this node has none: set secret_file in its config")
        seal = self.seal
        term = await self._barrier(context)
        if store.gap is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the leader's history is still being copied from "
                                "a peer; retry shortly")
        path = os.path.join(str(self.node.cfg.data_dir), f"history-backup-{uuid.uuid4().hex}.tmp")
        try:
            with self.node.lock:
                index = self.node.state.last_index
            info = await asyncio.to_thread(_history_copy, store, index, path)
            header = _header(info, term, self.clock.now_ms())
            header.body_encoding = HISTORY_ENCODING
            async for chunk in _signed_file(header, seal, path):
                yield chunk
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    async def CopyHistory(self, request: bpb.CopyHistoryRequest,
                          context: CallContext) -> AsyncIterator[bpb.HistoryChunk]:
        """The rows this node's history store holds from entries in (after, upto], for a peer
        whose store missed them (schedd.runtime.history.fill_gaps). Waits (a while) until this
        store holds entry `upto`; refuses when its own gap overlaps the range."""
        store = self.node.history
        if not isinstance(store, HistoryStore):
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this node keeps no history store")
        if request.upto <= request.after or request.after < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "need 0 <= after < upto")
        if not await asyncio.to_thread(store.wait_applied, request.upto, 30.0):
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"this node's history reaches entry {store.applied_index}, not {request.upto} yet")
        gap = store.gap
        if gap is not None and gap[0] < request.upto and request.after < gap[1]:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"this node's history misses entries {gap[0] + 1}..{gap[1]} itself")
        chunks = store.export(request.after, request.upto)
        while (item := await asyncio.to_thread(next, chunks, None)) is not None:
            yield chunk_message(*item)

    async def _barrier(self, context: CallContext) -> int:
        """Commit a no-op of this node's term; returns the term it proved leadership in."""
        term = self.node.term
        entry = C.encode(C.NOOP, rid="", now=self.clock.now_ms(), term=term, by="snapshot")
        try:
            result = await self.node.propose(entry, timeout=BARRIER_TIMEOUT_S)
        except (NotApplied, OutcomeUnknown) as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"leadership not confirmed ({e}); retry")
        if not result.ok or self.node.term != term:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "leadership changed while taking the snapshot; retry")
        return term

    def _forward(self, request: bpb.SaveSnapshotRequest | bpb.SaveHistoryRequest, context: CallContext,
                 method: str = METHOD) -> AsyncIterator[bpb.SnapshotChunk]:
        return self.router.forward_stream(method, request, bpb.SnapshotChunk, context)


async def _signed_file(header: bpb.SnapshotHeader, seal: Seal, path: str) -> AsyncIterator[bpb.SnapshotChunk]:
    """The stream of a backup file: the header, signed, then the body read off the event loop."""
    header.file_header = seal(header)
    yield bpb.SnapshotChunk(header=header)
    with open(path, "rb") as f:
        while data := await asyncio.to_thread(f.read, CHUNK):
            yield bpb.SnapshotChunk(data=data)


def _history_copy(store: HistoryStore, index: int, path: str) -> backup.BodyInfo:
    """Copy the store, caught up to entry `index`, to `path`; its index, digest, length, sha256.

    The store's index moves only with entries that hand it finished runs. `index` was read under
    the apply lock, so every hand-over up to it is queued; once flushed with nothing else
    queued, the store holds everything up to `index` even when its own index is older (a cluster
    where no run finished since), and the copy is as of `index`: without that, the history of
    an idle cluster was saved as of an older entry than its snapshot, which restore refuses."""
    store.flush()
    complete = store.applied_index >= index or store.queued_index == store.applied_index
    if not complete:
        store.wait_applied(index, 30.0)
    copied = store.copy_to(path)
    if complete:
        copied = max(copied, index)
    os.chmod(path, 0o600)
    sha, length = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while data := f.read(CHUNK):
            sha.update(data)
            length += len(data)
    return backup.BodyInfo(index=copied, digest=f"{HistoryStore.file_digest(path):016x}", length=length,
                           sha256=sha.hexdigest())


def _header(info: backup.BodyInfo, term: int, now_ms: int) -> bpb.SnapshotHeader:
    b = build_info()
    return bpb.SnapshotHeader(index=info.index, term=term, digest=info.digest, schedd_version=b.version,
                              snapshot_format=b.snapshot_format, tzdata=b.tzdb, croniter=b.croniter,
                              created_ms=now_ms, body_encoding=backup.BODY_ENCODING,
                              body_length=info.length, body_sha256=info.sha256)
