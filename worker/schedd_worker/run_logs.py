"""Run logs on the worker: every attempt's full output, kept in files the worker alone writes.

Why here, and why so: only a tail of each attempt's output rides the Raft log (a few KiB, the
same on every node); the rest stays on the worker that ran it and is served through the cluster
(the leader asks over the worker's own stream: `LogRequest` / `LogPage`). The worker reads the
job's stdout and stderr pipes itself and writes the file, so a job, which runs as a uid of its
team, can neither write into its log nor read another job's: the folder is the worker's, 0700.

Layout: ``<root>/<fencing token>-<hash of the execution id>/`` per attempt (the token is unique
in a cluster; with the execution id, two clusters' workers may share a folder), created
at the attempt's first output byte (an attempt that prints nothing costs no file), holding
``meta.json`` (execution, job, attempt, team; on close its outcome) and segment files
``<start offset>.<data bytes before>.seg`` (16 hex digits each). A segment is a run of records,
each a 13-byte header (stream: 1 stdout, 2 stderr; data length; wall ms) then the bytes, in the
order the worker read them: both streams interleaved as they came, and either one alone by
skipping the other's records. Offsets are positions in the concatenation of all segments ever
written, so a reader's offset stays valid while older segments go.

Bounds (`LogLimits`, from the worker's config):
- per attempt, `attempt_bytes`: the log is cut in SEGMENTS segments of attempt_bytes/SEGMENTS;
  the first HEAD_SEGMENTS are kept (the head: how it started), and past the bound the oldest
  segment after them is removed (the tail: how it ended). What was removed is counted, and a
  reader crossing the gap is told how many bytes were dropped there;
- per worker, `total_bytes` over every attempt folder: past it the oldest finished attempts
  are removed whole (a running attempt is never touched: its own bound holds it);
- `max_age_s` after an attempt ended its log is removed, and at most `keep_per_job` logs of one
  job are kept (the newest).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from schedd_proto import logs_pb2 as lpb

__all__ = ["LogLimits", "LogStore", "AttemptLog", "LogSink", "NO_LOG", "STDOUT", "STDERR",
           "read_page", "read_tail", "Page", "SEGMENTS", "HEAD_SEGMENTS", "RECORD_MAX"]

log = logging.getLogger("schedd.worker.logs")

STDOUT, STDERR = 1, 2
STREAMS = {STDOUT: "stdout", STDERR: "stderr"}
HEADER = struct.Struct(">BIQ")          # stream, data length, wall ms
RECORD_MAX = 64 * 1024                  # data bytes per record at most (a pipe read is split)
SEGMENTS = 8                            # an attempt's bound is cut in this many segments
HEAD_SEGMENTS = 2                       # ... of which the first ones are always kept
MIN_SEGMENT = 4096
PAGE_BYTES = 256 * 1024                 # output bytes per LogPage at most
CHUNK_BYTES = 64 * 1024                 # adjacent records of one stream joined up to this
SWEEP_EVERY_S = 600.0                   # age and per-job retention, besides the size cap
META = "meta.json"

MiB = 1024 * 1024


@dataclass(slots=True, frozen=True)
class LogLimits:
    """How much output a worker keeps (docs/workers.md "Run logs")."""
    attempt_bytes: int = 16 * MiB       # per attempt: head + tail, the middle dropped past it
    total_bytes: int = 1024 * MiB       # per worker: the oldest finished attempts go first
    max_age_s: float = 7 * 86400.0      # after an attempt ended
    keep_per_job: int = 100             # the newest attempts of one job

    def __post_init__(self) -> None:
        if self.attempt_bytes < SEGMENTS * MIN_SEGMENT:
            raise ValueError(f"logs attempt_bytes must be at least {SEGMENTS * MIN_SEGMENT}")
        if self.total_bytes < self.attempt_bytes:
            raise ValueError("logs total_bytes must be at least attempt_bytes")
        if not self.max_age_s > 0:
            raise ValueError("logs max_age must be more than 0 seconds")
        if self.keep_per_job < 1:
            raise ValueError("logs keep_per_job must be at least 1")

    @property
    def segment_bytes(self) -> int:
        return self.attempt_bytes // SEGMENTS


class LogSink:
    """Where a handler's output goes besides its tail: the attempt's log (`AttemptLog`), or
    nowhere (NO_LOG: a worker without a log folder, an embedded worker in tests)."""
    __slots__ = ()

    def write(self, stream: int, data: bytes) -> None:
        """Append `data` read from `stream` (STDOUT or STDERR)."""


NO_LOG = LogSink()


def attempt_dir(token: int, execution_id: str) -> str:
    """The folder name of an attempt's log."""
    return f"{token}-{hashlib.sha256(execution_id.encode()).hexdigest()[:12]}"


def _seg_name(start: int, data_before: int) -> str:
    return f"{start:016x}.{data_before:016x}.seg"


@dataclass(slots=True)
class _Segment:
    start: int                          # offset of its first byte
    data_before: int                    # output bytes written before it
    path: Path
    size: int = 0                       # bytes in the file
    data: int = 0                       # output bytes in it


class AttemptLog(LogSink):
    """The log of one running attempt. Written on the worker's loop, by the handler reading the
    job's pipes (a write goes to the page cache: microseconds), never by the job."""
    __slots__ = ("store", "key", "job", "attempt", "team", "meta", "dir", "limits", "segments", "fd", "end",
                 "data_total", "dropped", "finished", "waiters", "broken", "clock")

    def __init__(self, store: LogStore, token: int, execution_id: str, job: str, attempt: int, team: str) -> None:
        # Nothing is computed or written until the first byte: most attempts of a herd print
        # nothing, and opening one costs the worker's loop a few hundred ns.
        self.store, self.limits, self.clock = store, store.limits, store.clock
        self.key = (token, execution_id)
        self.job, self.attempt, self.team = job, attempt, team
        self.meta: dict[str, object] = {}
        self.dir: Path | None = None
        self.segments: list[_Segment] = []
        self.fd = -1
        self.end = 0                     # offset past the last byte written
        self.data_total = 0              # output bytes written (both streams)
        self.dropped = 0                 # output bytes removed by the bound
        self.finished = False
        self.waiters: list[asyncio.Future[None]] = []
        self.broken = False              # a write failed (disk full...): it stops writing, once said

    # ---------------------------------------------------------------- writing

    def write(self, stream: int, data: bytes) -> None:
        if self.finished or self.broken or not data:
            return
        try:
            view = memoryview(data)
            now = self.clock()
            while view:
                self._room()
                seg = self.segments[-1]
                n = min(len(view), RECORD_MAX, max(1, self.limits.segment_bytes - seg.size - HEADER.size))
                os.write(self.fd, HEADER.pack(stream, n, now) + view[:n])
                seg.size += HEADER.size + n
                seg.data += n
                self.end += HEADER.size + n
                self.data_total += n
                self.store.total += HEADER.size + n
                view = view[n:]
        except OSError as e:
            self.broken = True
            log.warning("log of attempt %d: %s; the rest of its output is not kept", self.key[0], e)
        self._wake()

    def _room(self) -> None:
        """A segment with room for a record's header and one byte: a new one when the current
        is full, removing the oldest after the head once the attempt is past its bound."""
        if self.segments and self.segments[-1].size + HEADER.size < self.limits.segment_bytes:
            return
        if self.dir is None:
            token, execution_id = self.key
            self.dir = self.store.root / attempt_dir(token, execution_id)
            self.meta = {"execution_id": execution_id, "job": self.job, "attempt": self.attempt,
                         "team": self.team, "token": token, "first_output_ms": self.clock()}
            self.dir.mkdir(mode=0o700, exist_ok=True)
            self._write_meta()
            self.store.total += 512          # the folder and its meta, roughly
        if self.fd >= 0:
            os.close(self.fd)
        seg = _Segment(self.end, self.data_total, self.dir / _seg_name(self.end, self.data_total))
        self.fd = os.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.segments.append(seg)
        if len(self.segments) > SEGMENTS:
            gone = self.segments.pop(HEAD_SEGMENTS)
            self.dropped += gone.data
            self.store.total -= gone.size
            gone.path.unlink(missing_ok=True)

    def close(self, state: str, exit_code: int | None) -> None:
        """The attempt ended: its outcome goes into meta.json (when it has a folder), and every
        follower waiting for more is woken to see the end."""
        if self.finished:
            return
        self.finished = True
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.dir is not None:
            self.meta.update(state=state, exit_code=exit_code if exit_code is not None else 0,
                             ended_ms=self.clock(), bytes=self.data_total, dropped=self.dropped)
            try:
                self._write_meta()
            except OSError as e:
                log.warning("log of attempt %d: cannot record its end: %s", self.key[0], e)
        self.store.closed(self)
        self._wake()

    def _write_meta(self) -> None:
        assert self.dir is not None
        tmp = self.dir / (META + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps(self.meta, sort_keys=True).encode())
        finally:
            os.close(fd)
        os.replace(tmp, self.dir / META)

    # ---------------------------------------------------------------- following

    def _wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    async def changed(self, timeout: float, since: int) -> None:
        """Return once more than `since` (an earlier `end`) is written or the attempt ends, or
        after `timeout` seconds."""
        if self.finished or self.end != since:
            return
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(f)
        try:
            await asyncio.wait_for(f, timeout)
        except TimeoutError:
            pass


# ------------------------------------------------------------------------------ reading

@dataclass(slots=True)
class Page:
    """Chunks read from a log. Adjacent records of one stream are joined into one chunk (up to
    CHUNK_BYTES): a log of short lines is otherwise one message per line on its way to the
    reader, and the order of the two streams is kept all the same."""
    chunks: list[lpb.RunLogChunk] = field(default_factory=list)
    next_offset: int = 0
    at_end: bool = False
    _parts: list[bytes] = field(default_factory=list)
    _stream: int = 0
    _ms: int = 0
    _size: int = 0

    def output(self, stream: int, ms: int, data: bytes) -> None:
        if self._parts and (stream != self._stream or self._size + len(data) > CHUNK_BYTES):
            self.flush()
        if not self._parts:
            self._stream, self._ms = stream, ms
        self._parts.append(data)
        self._size += len(data)

    def dropped(self, n: int) -> None:
        self.flush()
        self.chunks.append(lpb.RunLogChunk(kind="dropped", dropped_bytes=n))

    def flush(self) -> Page:
        if self._parts:
            self.chunks.append(lpb.RunLogChunk(kind="output", stream=STREAMS.get(self._stream, "stdout"),
                                               data=b"".join(self._parts), time_ms=self._ms))
            self._parts, self._size = [], 0
        return self


def _segments(d: Path) -> list[tuple[int, int, Path]]:
    """(start, data bytes before, path) of every segment in `d`, oldest first."""
    out = []
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    for name in names:
        parts = name.split(".")
        if len(parts) == 3 and parts[2] == "seg":
            try:
                out.append((int(parts[0], 16), int(parts[1], 16), d / name))
            except ValueError:
                continue
    out.sort()
    return out


def _records(path: Path, skip: int = 0) -> Iterator[tuple[int, int, int, bytes]]:
    """(offset in the file, stream, wall ms, data) of each whole record from `skip` on; a record
    still being written (a short header or data) ends it."""
    try:
        with open(path, "rb") as f:
            f.seek(skip)
            pos = skip
            while True:
                head = f.read(HEADER.size)
                if len(head) < HEADER.size:
                    return
                stream, n, ms = HEADER.unpack(head)
                data = f.read(n)
                if len(data) < n:
                    return
                yield pos, stream, ms, data
                pos += HEADER.size + n
    except FileNotFoundError:
        return


def _wanted(stream: int, which: str) -> bool:
    return not which or STREAMS.get(stream) == which


def read_page(d: Path, offset: int, max_bytes: int = PAGE_BYTES, which: str = "") -> Page:
    """The records of the attempt log in `d` from `offset` on (a previous page's next_offset, 0
    for the start), up to about `max_bytes` of output of the stream `which` ("" both). A gap
    where the bound removed segments becomes one `dropped` chunk with the bytes it held."""
    return _read(Page(next_offset=offset), d, max_bytes, which).flush()


def _read(page: Page, d: Path, max_bytes: int, which: str) -> Page:
    segs = _segments(d)
    if not segs:
        page.at_end = True
        return page
    taken = 0
    prev: tuple[int, Path] | None = None    # the previous segment: (data bytes before, path)
    for start, data_before, path in segs:
        size = _file_size(path)
        if start + size <= page.next_offset:
            prev = (data_before, path)
            continue
        if page.next_offset < start:        # the reader's place was removed: say how much went
            held = prev[0] + _data_in(prev[1]) if prev is not None else 0
            if data_before > held:
                page.dropped(data_before - held)
            page.next_offset = start
        skip = page.next_offset - start
        for pos, stream, ms, data in _records(path, skip):
            if taken >= max_bytes:
                return page
            if _wanted(stream, which):
                page.output(stream, ms, data)
                taken += len(data)
            page.next_offset = start + pos + HEADER.size + len(data)
        if page.next_offset < start + size:     # a record still being written: stop before it
            return page
        prev = (data_before, path)
    page.at_end = True
    return page


def read_tail(d: Path, lines: int, max_bytes: int = PAGE_BYTES, which: str = "") -> Page:
    """The last `lines` lines of the log in `d` (of stream `which`), at most `max_bytes` of them
    (the oldest cut off), and the offset to follow on from. Only the last `max_bytes` of output
    are held while reading: no more can be answered."""
    keep: deque[lpb.RunLogChunk] = deque()
    offset, size = 0, 0
    while True:
        page = read_page(d, offset, PAGE_BYTES, which)
        for c in page.chunks:
            keep.append(c)
            size += len(c.data)
            while len(keep) > 1 and size - len(keep[0].data) >= max_bytes:
                size -= len(keep.popleft().data)
        offset = page.next_offset
        if page.at_end or not page.chunks:
            break
    out = list(keep)
    if lines > 0:
        _trim_front(out, lines, max_bytes)
    return Page(chunks=out, next_offset=offset, at_end=True)


def _trim_front(chunks: list[lpb.RunLogChunk], lines: int, max_bytes: int) -> None:
    """Cut the first output chunks down to the start of the `lines`-th line from the end (a final
    line without a newline counts), and to `max_bytes` in all."""
    while chunks and chunks[0].kind != "output":
        chunks.pop(0)
    total = sum(len(c.data) for c in chunks if c.kind == "output")
    need = lines
    seen = 0
    for i in range(len(chunks) - 1, -1, -1):
        c = chunks[i]
        if c.kind != "output":
            continue
        data = c.data
        end = len(data)
        if i == len(chunks) - 1 and data.endswith(b"\n"):
            end -= 1                         # the last newline ends the last line
        cut = -1
        for _ in range(need - seen):
            cut = data.rfind(b"\n", 0, end)
            if cut < 0:
                break
            seen += 1
            end = cut
        if seen >= need and cut >= 0:
            c.data = data[cut + 1:]
            del chunks[:i if c.data else i + 1]
            break
    total = sum(len(c.data) for c in chunks if c.kind == "output")
    while chunks and total > max_bytes:
        c = chunks[0]
        over = total - max_bytes
        if c.kind != "output" or len(c.data) <= over:
            total -= len(c.data) if c.kind == "output" else 0
            chunks.pop(0)
        else:
            c.data = c.data[over:]
            total -= over


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _data_in(path: Path) -> int:
    """Output bytes in a segment file (its headers walked, the data skipped)."""
    total = 0
    try:
        with open(path, "rb") as f:
            while True:
                head = f.read(HEADER.size)
                if len(head) < HEADER.size:
                    return total
                n = HEADER.unpack(head)[1]
                total += n
                f.seek(n, os.SEEK_CUR)
    except FileNotFoundError:
        return total


def read_meta(d: Path) -> dict[str, object]:
    try:
        with open(d / META, encoding="utf-8") as f:
            out = json.load(f)
        return out if isinstance(out, dict) else {}
    except (OSError, ValueError):
        return {}


# ------------------------------------------------------------------------------ the store

def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LogStore:
    """Every attempt log of this worker under `root` (mode 0700, the worker's own), and the
    bounds that keep the folder's size and age in check."""

    def __init__(self, root: Path, limits: LogLimits = LogLimits(),
                 clock: Callable[[], int] = _wall_ms, *, auto_sweep: bool = True) -> None:
        """`auto_sweep`: sweep in the background as attempts end (past the cap, or every
        SWEEP_EVERY_S); off, only `sweep()` removes anything (tests)."""
        self.root, self.limits, self.clock = Path(root), limits, clock
        self.auto_sweep = auto_sweep
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)               # a folder made earlier with a looser mode
        self.live: dict[tuple[int, str], AttemptLog] = {}    # (token, execution id): the attempts running
        self.total = _du(self.root)
        self._last_sweep = 0.0
        self._sweeping = False
        self._again = False
        self._lock = threading.Lock()

    def open(self, token: int, execution_id: str, job: str, attempt: int, team: str) -> AttemptLog:
        """The log of an attempt about to start (its folder appears with its first byte)."""
        a = AttemptLog(self, token, execution_id, job, attempt, team)
        self.live[a.key] = a
        return a

    def closed(self, a: AttemptLog) -> None:
        if self.live.get(a.key) is a:
            del self.live[a.key]
        if not self.auto_sweep:
            return
        now = time.monotonic()
        if self.total > self.limits.total_bytes or now - self._last_sweep >= SWEEP_EVERY_S:
            self._last_sweep = now
            self.sweep_soon()

    def sweep_soon(self) -> None:
        """Sweep in a thread of its own (it lists and removes folders), one at a time; asked again
        while one runs, another follows it (what ended meanwhile may be past the cap)."""
        if self._sweeping:
            self._again = True
            return
        self._sweeping, self._again = True, False
        live = frozenset(attempt_dir(*key) for key in tuple(self.live))   # tuple(): one C call

        def run() -> None:
            try:
                self.sweep(live)
            except OSError as e:
                log.warning("run log sweep of %s failed: %s", self.root, e)
            finally:
                self._sweeping = False
            if self._again:
                self.sweep_soon()
        threading.Thread(target=run, name="schedd-log-sweep", daemon=True).start()

    def sweep(self, live: frozenset[str] = frozenset()) -> list[str]:
        """Remove what the bounds no longer allow: logs older than max_age, beyond keep_per_job
        for their job, then the oldest until the folder is under total_bytes. Returns the tokens
        removed."""
        now = self.clock()
        entries = []                              # (ended_ms, token, job, size)
        for name in os.listdir(self.root):
            d = self.root / name
            if name in live or not d.is_dir():
                continue
            meta = read_meta(d)
            ended = meta.get("ended_ms")
            when = int(ended) if isinstance(ended, int) else int(_mtime(d) * 1000)
            if not isinstance(ended, int) and now - when <= self.limits.max_age_s * 1000:
                continue                          # not ended: running (or left by a crash, until it ages)
            entries.append((when, name, str(meta.get("job", "")), _du(d)))
        entries.sort(reverse=True)                # newest first
        gone: list[str] = []
        per_job: dict[str, int] = {}
        total = _du(self.root)
        kept = []
        for when, token, job, size in entries:
            per_job[job] = per_job.get(job, 0) + 1
            if now - when > self.limits.max_age_s * 1000 or per_job[job] > self.limits.keep_per_job:
                gone.append(token)
                total -= size
            else:
                kept.append((when, token, size))
        for _when, token, size in reversed(kept):  # oldest first
            if total <= self.limits.total_bytes:
                break
            gone.append(token)
            total -= size
        for name in gone:
            shutil.rmtree(self.root / name, ignore_errors=True)
        with self._lock:
            self.total = max(0, _du(self.root))
        if gone:
            log.info("run logs: removed %d attempt logs (age, per-job count or the %d-byte cap)",
                     len(gone), self.limits.total_bytes)
        return gone

    # ---------------------------------------------------------------- answering the leader

    async def answer(self, req: lpb.LogRequest) -> lpb.LogPage:
        """The page a LogRequest asks for (a long poll when it says wait_ms)."""
        key = (req.fencing_token, req.execution_id)
        d = self.root / attempt_dir(*key)
        live = self.live.get(key)
        limit = max(1, min(req.max_bytes or PAGE_BYTES, PAGE_BYTES))
        if live is None and not d.is_dir():
            return lpb.LogPage(request_id=req.request_id, missing="it keeps no log of this attempt "
                               "(it printed nothing, the log was removed by its retention, or it ran "
                               "on another state folder)")
        if req.offset < 0:
            page = await asyncio.to_thread(read_tail, d, max(0, req.tail_lines), limit, req.stream)
        else:
            mark = live.end if live is not None else 0     # taken before the read: nothing is missed
            page = await asyncio.to_thread(read_page, d, req.offset, limit, req.stream)
            if live is not None and page.at_end and not page.chunks and req.wait_ms > 0:
                await live.changed(req.wait_ms / 1000, mark)
                page = await asyncio.to_thread(read_page, d, req.offset, limit, req.stream)
        live = self.live.get(key)
        out = lpb.LogPage(request_id=req.request_id, chunks=page.chunks, next_offset=page.next_offset,
                          at_end=page.at_end, finished=live is None)
        if live is not None:
            out.total_bytes = live.data_total
        else:
            meta = read_meta(d)
            out.state = str(meta.get("state", ""))
            code = meta.get("exit_code")
            out.exit_code = code if isinstance(code, int) else 0
            size = meta.get("bytes")
            out.total_bytes = size if isinstance(size, int) else 0
        return out


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _du(d: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(d):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except FileNotFoundError:
                continue
    return total
