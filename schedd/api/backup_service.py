"""Backup.SaveSnapshot: a consistent image of the state, streamed from the leader.

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
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable

import grpc

from schedd.api.service import Router
from schedd.core import commands as C
from schedd.ports.clock import Clock
from schedd.replication import backup
from schedd.replication.node import NotApplied, OutcomeUnknown, RaftNode
from schedd.ports.rpc import CallContext
from schedd.versions import build_info
from schedd_proto import backup_pb2 as bpb
from schedd_proto import backup_pb2_grpc as bpb_grpc

log = logging.getLogger("schedd.backup")

METHOD = "/schedd.v1.Backup/SaveSnapshot"
BARRIER_TIMEOUT_S = 10.0
CHUNK = 1 << 20


Seal = Callable[[bpb.SnapshotHeader], bytes]     # a header -> the signed file header


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
            header = _header(info, term, self.clock.now_ms())
            header.file_header = seal(header)
            yield bpb.SnapshotChunk(header=header)
            with open(path, "rb") as f:
                while data := await asyncio.to_thread(f.read, CHUNK):
                    yield bpb.SnapshotChunk(data=data)
        finally:
            pending.discard()

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

    def _forward(self, request: bpb.SaveSnapshotRequest,
                 context: CallContext) -> AsyncIterator[bpb.SnapshotChunk]:
        return self.router.forward_stream(METHOD, request, bpb.SnapshotChunk, context)


def _header(info: backup.BodyInfo, term: int, now_ms: int) -> bpb.SnapshotHeader:
    b = build_info()
    return bpb.SnapshotHeader(index=info.index, term=term, digest=info.digest, schedd_version=b.version,
                              snapshot_format=b.snapshot_format, tzdata=b.tzdb, croniter=b.croniter,
                              created_ms=now_ms, body_encoding=backup.BODY_ENCODING,
                              body_length=info.length, body_sha256=info.sha256)
