"""The journal file's bytes: its header, its records, and how a file read back is judged.

Why a module of its own: the on-disk format is a promise to every journal already written, so it
lives in one place, apart from the I/O (journal_file.py) and from when anything is synced. Nothing
here opens a file.

Format: a 16-byte header (``SCHDJRNL``, u32 format version, u32 flags), then records
``[u32 payload_len][u32 crc32(payload)][payload = u64 idx, u64 term, command]``, little endian.

Judging a file read back (:func:`scan_records`): the first truncated or CRC-failing record ends
the valid log. Whether what follows is a torn tail from a crash (dropped) or mid-file corruption
(refuse to start) is decided by :func:`find_valid_record`: a valid record after the bad one means
corruption. Limitation: if a power loss persists unsynced pages out of order, a torn
*unacknowledged* tail can look like mid-file corruption; the node then also refuses to start, and
the remedy is the same (move the data dir away and let the node resync from the leader).
"""

from __future__ import annotations

import struct
import zlib
from array import array
from dataclasses import dataclass

from schedd.replication.journal_failure import JournalCorruptError, logger

MAGIC = b"SCHDJRNL"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sII")  # magic, format version, flags
HEADER_SIZE = HEADER.size  # 16
REC = struct.Struct("<II")  # payload length, crc32(payload)
REC_SIZE = REC.size  # 8
IDX_TERM = struct.Struct("<QQ")
MIN_PAYLOAD = IDX_TERM.size  # 16
STOCK_MAGIC = b"PYSYNCOBJ"

Entry = tuple[bytes, int, int]          # (command, log index, term), as pysyncobj keeps them


def encode_header() -> bytes:
    return HEADER.pack(MAGIC, FORMAT_VERSION, 0)


def encode_record(command: bytes, idx: int, term: int) -> bytes:
    payload = IDX_TERM.pack(idx, term) + command
    return REC.pack(len(payload), zlib.crc32(payload)) + payload


def record_matches(payload: bytes, plen: int, crc: int, idx: int, term: int) -> bool:
    """Whether a record read back at a known offset is still the entry ``(idx, term)``."""
    return len(payload) == plen and zlib.crc32(payload) == crc and IDX_TERM.unpack_from(payload) == (idx, term)


def check_header(buf: bytes, path: str) -> None:
    """Refuse a file that is not a schedd journal of this format version."""
    if len(buf) < HEADER_SIZE:
        raise JournalCorruptError("%s: truncated header (%d bytes); refusing to start" % (path, len(buf)))
    magic, version, _flags = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        if buf.startswith(STOCK_MAGIC):
            raise JournalCorruptError(
                "%s is a stock pysyncobj FileJournal, not a schedd durable journal. There is no "
                "migration: move the data directory away and let this node resync from the "
                "cluster." % path)
        raise JournalCorruptError("%s: bad magic %r; not a schedd journal" % (path, magic))
    if version != FORMAT_VERSION:
        raise JournalCorruptError("%s: unsupported journal format version %d" % (path, version))


@dataclass(slots=True)
class Scan:
    """The valid records at the start of a journal file, and why the rest (if any) is not."""

    entries: list[Entry]
    offsets: array[int]          # where each entry's record starts
    end: int                     # where the valid records end
    last_idx: int                # the index of the last valid record (0: none)
    bad_reason: str | None       # what is wrong at ``end``, None if the file ends there


def scan_records(buf: bytes, path: str) -> Scan:
    """Read the records after the header until the file ends or a record is invalid."""
    entries: list[Entry] = []
    offsets = array("q")
    size = len(buf)
    mv = memoryview(buf)
    pos = HEADER_SIZE
    bad_reason = None
    last_idx = 0
    payload = None
    while pos < size:
        if size - pos < REC_SIZE:
            bad_reason = "truncated record header"
            break
        plen, crc = REC.unpack_from(buf, pos)
        if plen < MIN_PAYLOAD:
            bad_reason = "invalid record length %d" % plen
            break
        end = pos + REC_SIZE + plen
        if end > size:
            bad_reason = "truncated record (needs %d bytes, %d left)" % (end - pos, size - pos)
            break
        payload = mv[pos + REC_SIZE:end]
        if zlib.crc32(payload) != crc:
            bad_reason = "checksum mismatch"
            break
        idx, term = IDX_TERM.unpack_from(buf, pos + REC_SIZE)
        if entries and idx != last_idx + 1:
            logger.warning("journal %s: non-consecutive index %d after %d at offset %d", path, idx, last_idx, pos)
        entries.append((bytes(payload[MIN_PAYLOAD:]), idx, term))
        offsets.append(pos)
        last_idx = idx
        pos = end
    del payload
    mv.release()
    return Scan(entries, offsets, pos, last_idx, bad_reason)


def find_valid_record(buf: bytes, start: int, end: int, last_idx: int) -> tuple[int, int] | None:
    """Return (offset, idx) of the first CRC-valid record with idx > last_idx in buf[start:end]."""
    if start >= end or buf.count(b"\0", start, end) == end - start:
        return None
    mv = memoryview(buf)
    unpack_i = struct.Struct("<I").unpack_from
    unpack_q = struct.Struct("<Q").unpack_from
    if last_idx > 0:  # records are consecutive: the next valid one cannot be far ahead
        hi = last_idx + (end - start) // (REC_SIZE + MIN_PAYLOAD) + 1
    else:  # the very first record is bad: a compacted journal starts at any index
        hi = 1 << 64
    p = start
    limit = end - (REC_SIZE + MIN_PAYLOAD)
    try:
        while p <= limit:
            plen = unpack_i(buf, p)[0]
            if plen >= MIN_PAYLOAD and p + REC_SIZE + plen <= end:
                idx = unpack_q(buf, p + REC_SIZE)[0]
                if last_idx < idx <= hi and \
                        zlib.crc32(mv[p + REC_SIZE:p + REC_SIZE + plen]) == unpack_i(buf, p + 4)[0]:
                    return p, idx
            p += 1
    finally:
        mv.release()
    return None
