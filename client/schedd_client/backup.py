"""Backups: ``Client.save_snapshot(path)`` and ``schedctl cluster snapshot save FILE``.

The leader streams a consistent image (the daemon's Backup.SaveSnapshot); this writes it as a
snapshot file (``schedd_client.snapshot_file``) atomically: the header as the leader signed it
(the client holds no key: ``schedd restore`` checks the MAC), then the body, into a private
temporary file beside ``path`` (mode 0600), checked against the header's length and sha256 as it arrives, fsynced,
then renamed over ``path``. A stream that breaks leaves no file, and the call moves on to the
next node as any call does (UNAVAILABLE). Restore with ``schedd restore`` on each node of a new
cluster (see docs/operations.md, "Backup and restore").
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
import time
from collections.abc import AsyncIterable, Iterable
from pathlib import Path
from typing import Any

import grpc

from schedd_proto import backup_pb2 as bpb

from ._failover import Router
from ._plans import Call
from ._transport import AsyncTransport, BlockingTransport
from ._cli import shard_count
from .errors import SchedError
from .snapshot_file import SnapshotFileError, SnapshotMeta, unverified_header

SAVE_TIMEOUT_S = 600.0        # a million jobs take tens of seconds to image and stream
SHARD_SUFFIX = ".shard-"      # a sharded cluster: FILE.shard-K holds shard K's snapshot (K >= 1)
MANIFEST_SUFFIX = ".shards.json"
MANIFEST_FORMAT = 1


def meta_of(header: bpb.SnapshotHeader) -> SnapshotMeta:
    return SnapshotMeta(index=header.index, term=header.term, digest=header.digest,
                        schedd_version=header.schedd_version, snapshot_format=header.snapshot_format,
                        tzdata=header.tzdata, croniter=header.croniter, created_ms=header.created_ms,
                        body_encoding=header.body_encoding, body_length=header.body_length,
                        body_sha256=header.body_sha256)


def _signed_meta(header: bpb.SnapshotHeader) -> SnapshotMeta:
    """What the signed file header says, which must be what the stream's fields say."""
    if not header.file_header:
        raise SnapshotFileError("the server did not sign the snapshot (a build older than this client's "
                                "file format 2): upgrade the cluster, or save with the schedctl of its build")
    meta = unverified_header(header.file_header)
    if meta != meta_of(header):
        raise SnapshotFileError("the server's signed file header does not match the stream's header")
    return meta


class _Writer:
    """One snapshot file being written from a stream: a private temp file beside ``path``, the
    header from the stream's first message, the body checked as it arrives; ``finish`` fsyncs
    and renames it over ``path``, ``abort`` removes it (nothing is left behind either way)."""

    def __init__(self, path: str) -> None:
        self.path, self.directory = path, os.path.dirname(os.path.abspath(path))
        fd, self.tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        self.f = os.fdopen(fd, "wb")
        self.meta: SnapshotMeta | None = None
        self.sha, self.length = hashlib.sha256(), 0

    def add(self, chunk: bpb.SnapshotChunk) -> None:
        if self.meta is None:
            if not chunk.HasField("header"):
                raise SnapshotFileError("the server's stream did not start with a snapshot header")
            self.meta = _signed_meta(chunk.header)
            self.f.write(chunk.header.file_header)
            return
        self.sha.update(chunk.data)
        self.length += len(chunk.data)
        self.f.write(chunk.data)

    def finish(self) -> SnapshotMeta:
        meta = self.meta
        if meta is None:
            raise SnapshotFileError("the server's stream ended before a snapshot header")
        if self.length != meta.body_length or self.sha.hexdigest() != meta.body_sha256:
            raise SnapshotFileError(f"the stream carried {self.length} bytes (sha256 {self.sha.hexdigest()[:16]}...), "
                                    f"the header says {meta.body_length} ({meta.body_sha256[:16]}...)")
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return meta

    def abort(self) -> None:
        self.f.close()
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass


def write_stream(chunks: Iterable[bpb.SnapshotChunk], path: str) -> SnapshotMeta:
    """Write a SaveSnapshot stream to ``path`` atomically; raises SnapshotFileError when the
    stream is not what its header says (``path`` is then left as it was)."""
    w = _Writer(path)
    try:
        for chunk in chunks:
            w.add(chunk)
        return w.finish()
    except BaseException:
        w.abort()
        raise


async def write_stream_async(chunks: AsyncIterable[bpb.SnapshotChunk], path: str) -> SnapshotMeta:
    """``write_stream`` for an aio stream (the writes are local and small: 1 MiB a chunk)."""
    w = _Writer(path)
    try:
        async for chunk in chunks:
            w.add(chunk)
        return w.finish()
    except BaseException:
        w.abort()
        raise


HISTORY_SUFFIX = ".history"   # the history file saved beside a snapshot file (schedd restore finds it)


def history_path(path: str | os.PathLike[str]) -> str:
    return os.fspath(path) + HISTORY_SUFFIX


def shard_path(path: str | os.PathLike[str], shard: int) -> str:
    """Where a sharded cluster's snapshot of `shard` goes: FILE for shard 0, FILE.shard-K beside it."""
    return os.fspath(path) if shard == 0 else f"{os.fspath(path)}{SHARD_SUFFIX}{shard}"


def manifest_path(path: str | os.PathLike[str]) -> str:
    return os.fspath(path) + MANIFEST_SUFFIX


def _call(history: bool, shard: int | None = None) -> Call:
    return (Call("backup", "SaveHistory", bpb.SaveHistoryRequest(shard=shard)) if history
            else Call("backup", "SaveSnapshot", bpb.SaveSnapshotRequest(shard=shard)))


def save_snapshot(client: BlockingTransport, path: str | os.PathLike[str], *,
                  timeout: float = SAVE_TIMEOUT_S, history: bool = False, shard: int | None = None) -> SnapshotMeta:
    """Save a consistent snapshot of the cluster to ``path`` (written 0600, atomically); any
    node will do (a follower relays the leader's stream). Needs the ``acl`` capability.
    ``history=True`` saves the leader's history store instead (finished runs that left the
    replicated state), in the same signed file form: save it after the snapshot, beside it
    (``history_path``), and ``schedd restore`` seeds each node's history with it. A sharded
    cluster is saved one shard group at a time (``shard``; ``schedctl cluster snapshot save``
    saves every one, with a manifest)."""
    call = _call(history, shard)
    attempts = Router(client.addresses, timeout).attempts(call)
    for address, pause, _share in attempts:
        if pause:
            time.sleep(pause)
        stream = client._method(address, call)(call.request, timeout=timeout,
                                               metadata=(*call.metadata, *client._auth))
        try:
            meta = write_stream(stream, os.fspath(path))
        except grpc.RpcError as err:
            if (final := attempts.failed(address, err)) is not None:
                raise final from None
        else:
            attempts.succeeded(address)
            return meta
    raise attempts.exhausted()


async def save_snapshot_async(client: AsyncTransport, path: str | os.PathLike[str], *,
                              timeout: float = SAVE_TIMEOUT_S, history: bool = False,
                              shard: int | None = None) -> SnapshotMeta:
    """``save_snapshot`` for the AsyncClient."""
    call = _call(history, shard)
    attempts = Router(client.addresses, timeout).attempts(call)
    for address, pause, _share in attempts:
        if pause:
            await asyncio.sleep(pause)
        stream = client._method(address, call)(call.request, timeout=timeout,
                                               metadata=(*call.metadata, *client._auth))
        try:
            meta = await write_stream_async(stream, os.fspath(path))
        except grpc.RpcError as err:
            if (final := attempts.failed(address, err)) is not None:
                raise final from None
        else:
            attempts.succeeded(address)
            return meta
    raise attempts.exhausted()


# ---------------------------------------------------------------- schedctl


def add_commands(cluster: Any, command: Any) -> None:
    """``schedctl cluster snapshot save FILE``; ``cluster``/``command`` are schedctl's helpers."""
    snap = cluster.add_parser("snapshot", help="save a consistent snapshot of the state (backup)",
                              description="save a consistent snapshot of the state (backup); restore "
                                          "it into a new cluster with `schedd restore`")
    sub = snap.add_subparsers(dest="snapshot_command", required=True, metavar="COMMAND")
    save = command(sub, "save", snapshot_save, "stream a snapshot from the leader into FILE (0600), and its "
                   "history store (finished runs) into FILE.history")
    save.add_argument("file", metavar="FILE")
    save.add_argument("--without-history", action="store_true",
                      help="save the replicated state only (no FILE.history): a restored cluster then "
                           "starts with the runs in the snapshot and an empty history")


def snapshot_save(cmd: Any) -> None:
    """The snapshot (and its history) of every shard group: FILE alone for an unsharded cluster;
    FILE, FILE.shard-1 ... and the manifest FILE.shards.json for a sharded one (each group is
    consistent on its own; `schedd restore --from FILE` restores them all)."""
    shards = shard_count(cmd.client)
    docs, lines = [], []
    for k in range(shards):
        doc, line = _save_one(cmd, shard_path(cmd.args.file, k), k if shards > 1 else None)
        docs.append({"shard": k, **doc} if shards > 1 else doc)
        lines.append(line)
    if shards == 1:
        cmd.emit(docs[0], lambda: lines[0])
        return
    manifest = {"format": MANIFEST_FORMAT, "shards": shards,
                "files": [{"shard": d["shard"], "snapshot": os.path.basename(d["file"]), "index": d["index"],
                           "term": d["term"], "digest": d["digest"],
                           "history": os.path.basename(d["history"]["file"]) if "history" in d else None}
                          for d in docs]}
    Path(manifest_path(cmd.args.file)).write_text(json.dumps(manifest, indent=1) + "\n")
    os.chmod(manifest_path(cmd.args.file), 0o600)
    cmd.emit({"shards": shards, "manifest": manifest_path(cmd.args.file), "files": docs},
             lambda: "\n".join(lines) + f"\nsaved {manifest_path(cmd.args.file)}: the {shards} shards' files")


def _save_one(cmd: Any, path: str, shard: int | None) -> tuple[dict[str, Any], str]:
    started = time.monotonic()
    timeout = max(cmd.args.rpc_timeout, SAVE_TIMEOUT_S)
    try:
        meta = save_snapshot(cmd.client, path, timeout=timeout, shard=shard)
    except (SnapshotFileError, OSError) as e:
        raise SchedError(f"snapshot not saved: {e}") from None
    size = os.path.getsize(path)
    doc: dict[str, Any] = {
        "file": path, "index": meta.index, "term": meta.term, "size": size, "digest": meta.digest,
        "created_ms": meta.created_ms, "schedd_version": meta.schedd_version, "tzdata": meta.tzdata,
        "croniter": meta.croniter, "seconds": round(time.monotonic() - started, 3)}
    line = (f"saved {path}{f' (shard {shard})' if shard is not None else ''}: index {meta.index}, term "
            f"{meta.term}, {size:,} bytes, digest {meta.digest}, taken {cmd.when(meta.created_ms)} "
            f"({doc['seconds']:.1f}s; schedd {meta.schedd_version}, tzdata {meta.tzdata}, "
            f"croniter {meta.croniter})")
    if not cmd.args.without_history:
        target = history_path(path)
        try:
            h = save_snapshot(cmd.client, target, timeout=timeout, history=True, shard=shard)
        except (SnapshotFileError, OSError) as e:
            raise SchedError(f"snapshot saved in {path}, but its history not: {e} "
                             f"(--without-history saves the snapshot alone)") from None
        hsize = os.path.getsize(target)
        doc["history"] = {"file": target, "index": h.index, "size": hsize, "digest": h.digest}
        line += f"\nsaved {target}: history as of index {h.index}, {hsize:,} bytes, digest {h.digest}"
    return doc, line
