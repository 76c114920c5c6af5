"""The snapshot file of ``schedctl cluster snapshot save`` (read by ``schedd restore``): pure
encode and decode, no I/O beyond the file object handed in.

Layout (little endian)::

    magic          8 bytes   b"SCHDSNAP"
    file format    u32       FILE_FORMAT (a reader refuses a version it does not know)
    header length  u32       bytes of the JSON header that follows
    header         JSON      SnapshotMeta (index, term, digest, versions, body length and sha256)
    header MAC     32 bytes  HMAC-SHA256 of everything before it, under the cluster's backup key
    body           bytes     the state machine image at `index`, as the daemon encoded it
                             (`body_encoding` says how: schedd.replication.backup)

Why a MAC: restore turns the file into a new cluster's state, so the file must be the one a
cluster holding the secret wrote, not one whose checksums a forger recomputed. The leader signs
the header (the daemon derives the key from the cluster secret: schedd.security.backup_key, and
hands this module the signing function); the header holds the body's length and sha256, so the
MAC covers the body too. A reader checks the MAC before it parses the header and the body's
sha256 before anything parses the body. This module never holds a key: it takes `sign` and
`verify` functions, so the client (which writes what the server signed) needs none.

Why a JSON header: an operator (or a script) can read what a file holds with ``head -c``. Every
refusal is a SnapshotFileError with a one-line message naming what is wrong (bad magic,
truncated at N of M bytes, not signed with this cluster's key, checksum mismatch, unknown or
old format). Format 1 (a sha256 where the MAC is, and a pickled body) is refused: it can run
code. The file holds every job, secret ciphertext, token hash and audit record of the cluster:
keep it as private as a data directory (it is written 0600).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import BinaryIO

MAGIC = b"SCHDSNAP"
FILE_FORMAT = 2
PICKLE_FORMAT = 1                          # checksummed, pickled body: refused (it can run code)
_PREFIX = struct.Struct("<8sII")          # magic, file format, header length
MAC_BYTES = 32
MAX_HEADER = 64 * 1024
CHUNK = 1 << 20

Sign = Callable[[bytes], bytes]            # the header's bytes -> their MAC
Verify = Callable[[bytes, bytes], bool]    # (the header's bytes, the MAC read) -> authentic?

OLD_FORMAT = ("this backup was written by an older build in a format that can run code (a pickled body "
              "under checksums anyone can recompute), so this build does not read it: take a new backup "
              "with this build (`schedctl cluster snapshot save`)")
NOT_SIGNED = ("the file is not signed with this cluster's backup key: it was altered or forged, or taken "
              "by a cluster with another secret (pass that cluster's secret with --secret-file)")


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


def encode_header(meta: SnapshotMeta, sign: Sign) -> bytes:
    """Everything before the body, signed with `sign` (the daemon's, keyed by the cluster secret)."""
    raw = meta.to_json()
    head = _PREFIX.pack(MAGIC, FILE_FORMAT, len(raw)) + raw
    mac = sign(head)
    if len(mac) != MAC_BYTES:
        raise ValueError(f"a header MAC is {MAC_BYTES} bytes, got {len(mac)}")
    return head + mac


def encode(meta: SnapshotMeta, body: bytes, sign: Sign) -> bytes:
    """A whole file in memory (tests, small states); `meta` must describe `body`."""
    return encode_header(meta, sign) + body


def _read_exact(f: BinaryIO, n: int, have: int, total: int) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise SnapshotFileError(f"truncated at {have + len(data)} of {total} bytes")
    return data


def read_header(f: BinaryIO, verify: Verify) -> tuple[SnapshotMeta, int]:
    """The header of the file `f` is at the start of, and the offset its body starts at; its MAC
    is checked with `verify` before the header is parsed."""
    prefix = f.read(_PREFIX.size)
    if len(prefix) >= len(MAGIC) and prefix[:len(MAGIC)] != MAGIC:
        raise SnapshotFileError(f"not a schedd snapshot file (bad magic {prefix[:len(MAGIC)]!r}, "
                                f"expected {MAGIC!r})")
    if len(prefix) < _PREFIX.size:
        raise SnapshotFileError(f"truncated at {len(prefix)} of {_PREFIX.size} bytes (the header)")
    _magic, version, length = _PREFIX.unpack(prefix)
    if version == PICKLE_FORMAT:
        raise SnapshotFileError(OLD_FORMAT)
    if version != FILE_FORMAT:
        raise SnapshotFileError(f"unknown snapshot file format {version} (this build reads {FILE_FORMAT})")
    if length > MAX_HEADER:
        raise SnapshotFileError(f"snapshot header of {length} bytes is over {MAX_HEADER}: corrupted")
    end = _PREFIX.size + length + MAC_BYTES
    rest = _read_exact(f, length + MAC_BYTES, _PREFIX.size, end)
    raw, mac = rest[:length], rest[length:]
    if not verify(prefix + raw, mac):
        raise SnapshotFileError(NOT_SIGNED)
    return SnapshotMeta.from_json(raw), end


def unverified_header(data: bytes) -> SnapshotMeta:
    """What a signed header the server sent says, MAC unchecked: the client writes the header
    as the server signed it and has no key (`schedd restore` checks the MAC)."""
    import io
    meta, end = read_header(io.BytesIO(data), lambda _head, _mac: True)
    if end != len(data):
        raise SnapshotFileError(f"a file header of {len(data)} bytes where its length says {end}")
    return meta


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


def read(f: BinaryIO, verify: Verify) -> tuple[SnapshotMeta, bytes]:
    """Header and verified body of a whole file."""
    meta, offset = read_header(f, verify)
    return meta, read_body(f, meta, offset)


def decode(data: bytes, verify: Verify) -> tuple[SnapshotMeta, bytes]:
    import io
    return read(io.BytesIO(data), verify)


def read_path(path: str, verify: Verify) -> tuple[SnapshotMeta, bytes]:
    with open(path, "rb") as f:
        return read(f, verify)
