"""How a finished execution is laid out on disk: the one place that knows the encoding.

A row is the columns reads filter and sort on (job, scheduled_ms, state, trigger, created_ms,
updated_ms, term, log_index) plus a body holding the rest (reason, attempts, events, ...).

The body is a compact binary form, not JSON: unsigned LEB128 varints, signed numbers zigzagged,
every time stored as a small delta from the execution's own scheduled time, strings length
prefixed (a worker incarnation, lowercase hex, as its bytes), state names as
one-byte codes. A body of 256 bytes or more is zlib'd when that is smaller (output tails). The
figures that chose this over JSON and zlib'd JSON are in bench/bench_history.py's output (and
docs/architecture.md, "History store").

Codes written to disk never move: the tables below are part of the format (FORMAT), so a new
state or trigger is appended, never inserted. A name that is in no table is stored as text, so
a newer build's value survives an older reader.

The row hash (for the digests) covers the columns and the *uncompressed* body: replicas whose
zlib builds compress differently still agree.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

from schedd.core.model import Attempt, Execution, ExecutionEvent

FORMAT = 1                          # the on-disk format; a store of another format is refused

# Execution and attempt states, most frequent first: SQLite stores the integers 0 and 1 in no
# payload byte at all, so SUCCEEDED and FAILED rows are one byte shorter (in the index too).
STATES = ("SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "SKIPPED", "UPSTREAM_FAILED", "LOST",
          "SCHEDULED", "RUNNING", "RETRY_WAIT", "REJECTED")
TRIGGERS = ("schedule", "catchup", "manual", "forced", "backfill")
_STATE_CODE = {s: i for i, s in enumerate(STATES)}
_TRIGGER_CODE = {s: i for i, s in enumerate(TRIGGERS)}

RAW, ZLIB = 0, 1                    # the body's first byte: how the rest is stored
COMPRESS_FROM = 256                 # bodies shorter than this are never worth zlib's header
DIGEST_MOD = 1 << 62                # row hashes and their sums: see schedd.history.schema

Symbol = int | str                  # a state or trigger as stored: its code, or its text if unknown


@dataclass(slots=True, frozen=True)
class Row:
    """One execution as the store writes it: `cols` in the table's column order, `body` as
    stored, and `hash`, the row's share of the digests."""

    cols: tuple[str, int, Symbol, Symbol, int, int, int, int]
    body: bytes
    hash: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.cols[0], self.cols[1])


def state_code(name: str) -> Symbol:
    return _STATE_CODE.get(name, name)


def state_name(code: Symbol) -> str:
    return STATES[code] if isinstance(code, int) else code


def _trigger_name(code: Symbol) -> str:
    return TRIGGERS[code] if isinstance(code, int) else code


# ------------------------------------------------------------------ primitives


def _uint(out: bytearray, n: int) -> None:
    if n < 0x80:                    # most numbers here are deltas or codes: one byte
        out.append(n)
        return
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zig(n: int) -> int:
    return (n << 1) if n >= 0 else ((-n << 1) - 1)


def _unzig(n: int) -> int:
    return (n >> 1) if not n & 1 else -((n + 1) >> 1)


def _int(out: bytearray, n: int) -> None:
    _uint(out, (n << 1) if n >= 0 else ((-n << 1) - 1))


def _text(out: bytearray, s: str) -> None:
    """Length-prefixed UTF-8 (the prefix's low bit is clear: see _token)."""
    if not s:
        out.append(0)
        return
    data = s.encode()
    _uint(out, len(data) << 1)
    out += data


def _token(out: bytearray, s: str) -> None:
    """A string that is usually lowercase hex (a worker incarnation): its bytes, half the size,
    with the prefix's low bit set; any other string as _text."""
    if len(s) % 2 == 0 and s.isascii() and s == s.lower():
        try:
            raw = bytes.fromhex(s)
        except ValueError:
            raw = b""
        if raw and raw.hex() == s:
            _uint(out, (len(raw) << 1) | 1)
            out += raw
            return
    _text(out, s)


def _symbol(out: bytearray, s: str, codes: dict[str, int]) -> None:
    """A code from `codes`, or the text after the last code."""
    code = codes.get(s)
    if code is not None:
        _uint(out, code)
    else:
        data = s.encode()
        _uint(out, len(codes) + len(data))
        out += data


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def uint(self) -> int:
        buf, pos = self.buf, self.pos
        b = buf[pos]
        if b < 0x80:
            self.pos = pos + 1
            return b
        n = shift = 0
        while True:
            b = buf[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return n
            shift += 7

    def int(self) -> int:
        n = self.uint()
        return (n >> 1) if not n & 1 else -((n + 1) >> 1)

    def text(self) -> str:
        head = self.uint()
        if not head:
            return ""
        n = head >> 1
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data.hex() if head & 1 else data.decode()

    def symbol(self, names: tuple[str, ...]) -> str:
        n = self.uint()
        if n < len(names):
            return names[n]
        n -= len(names)
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data.decode()


# ------------------------------------------------------------------ the body


def _body(ex: Execution) -> bytes:
    """The uncompressed body (see the module docstring for the layout's reasons)."""
    t0 = ex.scheduled_ms
    out = bytearray()
    _text(out, ex.reason)
    _uint(out, 0 if not ex.due_ms else _zig(ex.due_ms - t0) + 1)
    _uint(out, 0 if ex.retry_at is None else _zig(ex.retry_at - t0) + 1)
    _uint(out, int(ex.cancel_requested))
    _text(out, ex.lane)
    _uint(out, len(ex.holds))
    for h in ex.holds:
        _text(out, h)
    _uint(out, len(ex.events))
    for e in ex.events:
        _int(out, e.time_ms - t0)
        _text(out, e.kind)
        _text(out, e.message)
    _uint(out, len(ex.attempts))
    for a in ex.attempts:
        _attempt(out, a, t0)
    return bytes(out)


def _attempt(out: bytearray, a: Attempt, t0: int) -> None:
    _int(out, a.number)
    _text(out, a.worker)
    _int(out, a.fencing_token)
    _int(out, a.started_ms - t0)
    _uint(out, 0 if not a.ended_ms else _zig(a.ended_ms - a.started_ms) + 1)
    _symbol(out, a.state, _STATE_CODE)
    _int(out, a.exit_code)
    _int(out, a.http_status)
    _text(out, a.error)
    _text(out, a.output_tail)
    _text(out, a.rejected)
    _token(out, getattr(a, "worker_incarnation", ""))


def _read_attempt(r: _Reader, t0: int) -> Attempt:
    number, worker, token = r.int(), r.text(), r.int()
    started = r.int() + t0
    ended = r.uint()
    return Attempt(number=number, worker=worker, fencing_token=token, started_ms=started,
                   ended_ms=0 if not ended else started + _unzig(ended - 1), state=r.symbol(STATES),
                   exit_code=r.int(), http_status=r.int(), error=r.text(), output_tail=r.text(),
                   rejected=r.text(), worker_incarnation=r.text())


def _stored(raw: bytes) -> bytes:
    if len(raw) >= COMPRESS_FROM:
        packed = zlib.compress(raw, 6)
        if len(packed) < len(raw):
            return bytes((ZLIB,)) + packed
    return bytes((RAW,)) + raw


def raw_body(stored: bytes) -> bytes:
    return zlib.decompress(stored[1:]) if stored[0] == ZLIB else stored[1:]


# ------------------------------------------------------------------ rows


def row_hash(cols: tuple[object, ...], raw: bytes) -> int:
    """The row's share of the digests, in [0, DIGEST_MOD): a hash of the columns (codes as
    stored) and the uncompressed body."""
    h = hashlib.blake2b(digest_size=8)
    h.update(repr(cols).encode())
    h.update(raw)
    return int.from_bytes(h.digest(), "big") % DIGEST_MOD


def encode(ex: Execution) -> Row:
    cols = (ex.job, ex.scheduled_ms, state_code(ex.state), _TRIGGER_CODE.get(ex.trigger, ex.trigger),
            ex.created_ms, ex.updated_ms, ex.term, ex.log_index)
    raw = _body(ex)
    return Row(cols, _stored(raw), row_hash(cols, raw))


def decode(cols: tuple[str, int, Symbol, Symbol, int, int, int, int], stored: bytes) -> Execution:
    job, t0, state, trigger, created, updated, term, log_index = cols
    r = _Reader(raw_body(stored))
    reason = r.text()
    due, retry = r.uint(), r.uint()
    cancel = bool(r.uint())
    lane = r.text()
    holds = tuple(r.text() for _ in range(r.uint()))
    events = tuple(ExecutionEvent(time_ms=r.int() + t0, kind=r.text(), message=r.text())
                   for _ in range(r.uint()))
    attempts = [_read_attempt(r, t0) for _ in range(r.uint())]
    return Execution(job=job, scheduled_ms=t0, state=state_name(state), trigger=_trigger_name(trigger),
                     created_ms=created, term=term, log_index=log_index, updated_ms=updated,
                     reason=reason, attempts=attempts, retry_at=None if not retry else t0 + _unzig(retry - 1),
                     cancel_requested=cancel, due_ms=0 if not due else t0 + _unzig(due - 1), lane=lane,
                     holds=holds, events=events)


def stored_row(cols: tuple[object, ...], body: bytes) -> Row:
    """A row as another store holds it (its columns and stored body), hash recomputed: what a
    copy between stores carries, never trusted for the digest."""
    c = tuple(cols)
    if len(c) != 8 or not isinstance(c[0], str) or not all(isinstance(v, (int, str)) for v in c[1:]):
        raise ValueError("not a history row")
    return Row(c, body, row_hash(c, raw_body(body)))  # type: ignore[arg-type]
