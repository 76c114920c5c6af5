"""The journal's log file on disk: open and recover it, append, truncate, rewrite, read back, sync.

Why a module of its own: this is the one place that holds the file descriptor and knows where
the file ends; what the bytes mean is journal_records.py, when a sync is due is the fsync policy,
and what is known to be on disk is journal_sync.py. Plain ``os.write``/``fdatasync``, no mmap:
pysyncobj's stock journal writes through ``mmap``, never syncs it, and dies with SIGBUS when the
disk is full.

Recovery on open: a torn tail from a crash is truncated away (and logged); mid-file corruption
raises :class:`JournalCorruptError`, so the node refuses to start rather than serve divergent
state (see journal_records.py). What was loaded is fdatasynced before the node can ack any of it:
the previous incarnation may have crashed before syncing, leaving it only in the page cache.

A rewrite (compaction, ``clear``) is atomic: a new file is written beside the log, fsynced,
renamed over it, and the directory fsynced. Any I/O error after opening is fatal (FailStop).
"""

from __future__ import annotations

import os
import struct
from array import array

from schedd.replication.disk_sync import fdatasync, fsync_dir, write_all
from schedd.replication.journal_failure import FailStop, JournalCorruptError, logger
from schedd.replication.journal_records import (
    MIN_PAYLOAD,
    REC,
    REC_SIZE,
    Entry,
    Scan,
    check_header,
    encode_header,
    encode_record,
    find_valid_record,
    record_matches,
    scan_records,
)

Stats = dict[str, int]
_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
_CHUNK = 1 << 20  # a rewrite writes in chunks of about this many bytes


class LogFile:
    """The append-only log file and its descriptor; ``durable`` says whether opens and rewrites
    fsync (every fsync policy but ``never``)."""

    __slots__ = ("path", "dir", "fd", "size", "_rewrite_tmp", "_durable", "_failure", "_stats")

    def __init__(self, path: str, *, durable: bool, failure: FailStop, stats: Stats) -> None:
        self.path = path
        self.dir = os.path.dirname(path)
        self.fd = -1
        self.size = 0                  # where the next record goes
        self._rewrite_tmp = path + ".rewrite.tmp"
        self._durable = durable
        self._failure = failure
        self._stats = stats

    # ------------------------------------------------------------------ open / recovery

    def open(self) -> Scan:
        """Open the file (a new one if there is none), drop a torn tail, and return its records."""
        try:
            os.unlink(self._rewrite_tmp)
        except FileNotFoundError:
            pass
        if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            if os.path.exists(self.path):
                logger.warning("journal %s is empty (0 bytes); starting a new journal", self.path)
            self._write_new([])
        with open(self.path, "rb") as f:
            buf = f.read()
        check_header(buf, self.path)
        scan = scan_records(buf, self.path)
        self.fd = os.open(self.path, _OPEN_FLAGS)
        try:
            if scan.bad_reason is not None:
                self._drop_torn_tail(buf, scan)
            self.size = scan.end
            if self._durable:
                fdatasync(self.fd)
                self._stats["fdatasync"] += 1
                fsync_dir(self.dir)
                self._stats["fsync"] += 1
        except BaseException:
            self.close()
            raise
        return scan

    def _drop_torn_tail(self, buf: bytes, scan: Scan) -> None:
        pos, size = scan.end, len(buf)
        found = find_valid_record(buf, pos + 1, size, scan.last_idx)
        if found is not None:
            raise JournalCorruptError(
                "%s: record at offset %d (after index %d) is invalid (%s), but a valid "
                "record (index %d) follows at offset %d: the journal is corrupted in the "
                "middle, not torn at the tail. Refusing to start rather than serve "
                "divergent state. Move the data directory away and let this node resync "
                "from the cluster (or restore a backup)."
                % (self.path, pos, scan.last_idx, scan.bad_reason, found[1], found[0]))
        dropped = size - pos
        logger.warning("journal %s: dropping torn tail of %d bytes at offset %d (%s) after "
                    "index %d; this is expected after a crash", self.path, dropped, pos,
                    scan.bad_reason, scan.last_idx)
        os.ftruncate(self.fd, pos)
        self._stats["torn_bytes_dropped"] = dropped

    # ------------------------------------------------------------------ writing

    def append(self, command: bytes, idx: int, term: int) -> int:
        """Write one record at the end; return its offset."""
        rec = encode_record(command, idx, term)
        try:
            write_all(self.fd, rec)
        except OSError as e:
            self._failure.fatal("append", e)
        offset = self.size
        self.size += len(rec)
        self._stats["appends"] += 1
        return offset

    def truncate(self, offset: int) -> None:
        """Cut the file back to ``offset`` (a record boundary)."""
        try:
            os.ftruncate(self.fd, offset)
        except OSError as e:
            self._failure.fatal("truncate", e)
        self.size = offset

    def rewrite(self, entries: list[Entry]) -> array[int]:
        """Atomically replace the file with header + entries; return the records' offsets."""
        try:
            offsets = self._write_new(entries)
            newfd = os.open(self.path, _OPEN_FLAGS)
            os.close(self.fd)
            self.fd = newfd
        except OSError as e:
            self._failure.fatal("rewrite", e)
        return offsets

    def _write_new(self, entries: list[Entry]) -> array[int]:
        """tmp, fsync, rename, fsync dir (the fsyncs only if durable); sets ``size``."""
        fd = os.open(self._rewrite_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            offsets = self._write_records(fd, entries)
            if self._durable:
                os.fsync(fd)
                self._stats["fsync"] += 1
        finally:
            os.close(fd)
        os.rename(self._rewrite_tmp, self.path)
        if self._durable:
            fsync_dir(self.dir)
            self._stats["fsync"] += 1
        self._stats["rewrites"] += 1
        return offsets

    def _write_records(self, fd: int, entries: list[Entry]) -> array[int]:
        offsets = array("q")
        chunk = [encode_header()]
        pos = pending = len(chunk[0])
        for command, idx, term in entries:
            rec = encode_record(command, idx, term)
            offsets.append(pos)
            pos += len(rec)
            chunk.append(rec)
            pending += len(rec)
            if pending >= _CHUNK:
                write_all(fd, b"".join(chunk))
                chunk, pending = [], 0
        if chunk:
            write_all(fd, b"".join(chunk))
        self.size = pos
        return offsets

    # ------------------------------------------------------------------ reading, syncing

    def read_command(self, offset: int, idx: int, term: int) -> bytes:
        """The command of entry ``(idx, term)`` whose record starts at ``offset``."""
        try:
            head = os.pread(self.fd, REC_SIZE, offset)
            plen, crc = REC.unpack(head)
            payload = os.pread(self.fd, plen, offset + REC_SIZE)
        except (OSError, struct.error) as e:
            self._failure.fatal("read back index %d" % idx, e)
        if not record_matches(payload, plen, crc, idx, term):
            self._failure.fatal("read back index %d" % idx, JournalCorruptError("record changed on disk"))
        return payload[MIN_PAYLOAD:]

    def datasync(self) -> None:
        """fdatasync the file (fatal on error)."""
        try:
            fdatasync(self.fd)
        except OSError as e:
            self._failure.fatal("fdatasync", e)
        self._stats["fdatasync"] += 1

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
