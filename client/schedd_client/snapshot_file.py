"""The snapshot file of ``schedctl cluster snapshot save`` (read by ``schedd restore``): pure
encode and decode, no I/O beyond the file object handed in.

Layout (little endian)::

    magic          8 bytes   b"SCHDSNAP"
    file format    u32       FILE_FORMAT (a reader refuses a version it does not know)
    header length  u32       bytes of the JSON header that follows
    header         JSON      SnapshotMeta (index, term, digest, versions, body length and sha256)
    header sha256  32 bytes  of everything before it: a flipped byte in the header is caught
    body           bytes     the state machine image at `index`, as the daemon encoded it
                             (`body_encoding` says how: schedd.replication.backup)

Why a JSON header: an operator (or a script) can read what a file holds with ``head -c``; the
checksums, not the format, make it trustworthy. Every refusal is a SnapshotFileError with a
one-line message naming what is wrong (bad magic, truncated at N of M bytes, checksum mismatch,
unknown format). The file holds every job, secret ciphertext, token hash and audit record of
the cluster: keep it as private as a data directory (it is written 0600).
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass, fields
from typing import BinaryIO

MAGIC = b"SCHDSNAP"
FILE_FORMAT = 1
_PREFIX = struct.Struct("<8sII")          # magic, file format, header length
_SHA = 32
MAX_HEADER = 64 * 1024
CHUNK = 1 << 20


class SnapshotFileError(ValueError):
    """The file is not a usable snapshot; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """What a snapshot file says about its body (all of it covered by the header checksum)."""
    index: int                 # the Raft log index the image was taken at (its last applied entry)
    term: int                  # the leader's term when it was taken
    digest: str                # SchedulerState.state_digest() at `index`
    schedd_version: str
    snapshot_format: int       # schedd.core.snapshot SNAPSHOT_FORMAT's version of the image
    tzdata: str                # the zone data and croniter of the node that took it: instants
    croniter: str              # computed elsewhere must come out the same
    created_ms: int            # the leader's wall clock when it was taken
    body_encoding: str         # how the body is encoded (schedd.replication.backup.BODY_ENCODING)
    body_length: int
    body_sha256: str           # hex

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> SnapshotMeta:
        try:
            doc = json.loads(raw.decode())
            return cls(**{f.name: type(getattr(_TEMPLATE, f.name))(doc[f.name]) for f in fields(cls)})
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
            raise SnapshotFileError(f"unreadable snapshot header ({type(e).__name__}: {e})") from None


_TEMPLATE = SnapshotMeta(0, 0, "", "", 0, "", "", 0, "", 0, "")


def encode_header(meta: SnapshotMeta) -> bytes:
    """Everything before the body."""
    raw = meta.to_json()
    head = _PREFIX.pack(MAGIC, FILE_FORMAT, len(raw)) + raw
    return head + hashlib.sha256(head).digest()


def encode(meta: SnapshotMeta, body: bytes) -> bytes:
    """A whole file in memory (tests, small states); `meta` must describe `body`."""
    return encode_header(meta) + body


def _read_exact(f: BinaryIO, n: int, have: int, total: int) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise SnapshotFileError(f"truncated at {have + len(data)} of {total} bytes")
    return data


def read_header(f: BinaryIO) -> tuple[SnapshotMeta, int]:
    """The header of the file `f` is at the start of, and the offset its body starts at."""
    prefix = f.read(_PREFIX.size)
    if len(prefix) >= len(MAGIC) and prefix[:len(MAGIC)] != MAGIC:
        raise SnapshotFileError(f"not a schedd snapshot file (bad magic {prefix[:len(MAGIC)]!r}, "
                                f"expected {MAGIC!r})")
    if len(prefix) < _PREFIX.size:
        raise SnapshotFileError(f"truncated at {len(prefix)} of {_PREFIX.size} bytes (the header)")
    _magic, version, length = _PREFIX.unpack(prefix)
    if version != FILE_FORMAT:
        raise SnapshotFileError(f"unknown snapshot file format {version} (this build reads {FILE_FORMAT})")
    if length > MAX_HEADER:
        raise SnapshotFileError(f"snapshot header of {length} bytes is over {MAX_HEADER}: corrupted")
    end = _PREFIX.size + length + _SHA
    rest = _read_exact(f, length + _SHA, _PREFIX.size, end)
    raw, sha = rest[:length], rest[length:]
    if hashlib.sha256(prefix + raw).digest() != sha:
        raise SnapshotFileError("header checksum mismatch: the file is corrupted")
    return SnapshotMeta.from_json(raw), end


def read_body(f: BinaryIO, meta: SnapshotMeta, offset: int) -> bytes:
    """The body that follows the header, checked against the header's length and sha256."""
    total = offset + meta.body_length
    parts, h, have = [], hashlib.sha256(), 0
    while have < meta.body_length:
        chunk = f.read(min(CHUNK, meta.body_length - have))
        if not chunk:
            raise SnapshotFileError(f"truncated at {offset + have} of {total} bytes")
        h.update(chunk)
        parts.append(chunk)
        have += len(chunk)
    if f.read(1):
        raise SnapshotFileError(f"trailing bytes after the {total} bytes the header describes")
    if h.hexdigest() != meta.body_sha256:
        raise SnapshotFileError(f"body checksum mismatch (sha256 {h.hexdigest()[:16]}..., the header "
                                f"says {meta.body_sha256[:16]}...): the file is corrupted")
    return b"".join(parts)


def read(f: BinaryIO) -> tuple[SnapshotMeta, bytes]:
    """Header and verified body of a whole file."""
    meta, offset = read_header(f)
    return meta, read_body(f, meta, offset)


def decode(data: bytes) -> tuple[SnapshotMeta, bytes]:
    import io
    return read(io.BytesIO(data))


def read_path(path: str) -> tuple[SnapshotMeta, bytes]:
    with open(path, "rb") as f:
        return read(f)
