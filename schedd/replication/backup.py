"""The body of a backup (`schedctl cluster snapshot save`): the state machine image at one
applied index, taken consistently without stalling the node, and read back by `schedd restore`.

Consistency without a stall: `fork_image` forks while holding the node lock, so the child holds
a copy-on-write view of the state at exactly one applied index; the lock is released as soon as
fork returns (about the time pysyncobj's own compaction fork takes). The child encodes the image,
compresses it, hashes it and computes the state digest, on another core and under another GIL,
then exits; neither apply (the Raft tick thread) nor the event loop waits for any of it. The
parent waits for the child off the event loop (`PendingImage.wait`).

The encoding (`BODY_ENCODING`): the plain-value JSON text of schedd.core.plain, zlib level 1.
Reading it parses JSON and builds rows by position: nothing in a file can name code to run (the
bodies of builds before this one were pickles: refused by the file format, never unpickled).
The file's MAC (schedd_client.snapshot_file, keyed from the cluster secret) is checked before
this module sees a byte; decoding still refuses, in one line, whatever is not an image.
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import threading
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO

from schedd.core import plain
from schedd.core.image import Image
from schedd.core.state import SchedulerState

BODY_ENCODING = "plain1-json+zlib1"
ZLIB_LEVEL = 1                 # 9 costs ~9x the time for ~20% less (architecture.md "Facts" §1c)
CHUNK = 1 << 20
MAX_BODY_TEXT = 1 << 34        # 16 GiB of JSON: far beyond any state that fits a node's memory


class BodyError(ValueError):
    """A body that does not decode into an image; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class BodyInfo:
    """What the child wrote: the image's index and digest, and the body's length and sha256."""
    index: int
    digest: str
    length: int
    sha256: str


class _Sink(io.RawIOBase):
    """A write-only file that compresses, hashes and counts what is written into it."""

    def __init__(self, out: BinaryIO) -> None:
        self._out, self._z, self.sha, self.length = out, zlib.compressobj(ZLIB_LEVEL), hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def _emit(self, data: bytes) -> None:
        if data:
            self._out.write(data)
            self.sha.update(data)
            self.length += len(data)

    def write(self, b: Any) -> int:
        self._emit(self._z.compress(b))
        return len(b)

    def finish(self) -> None:
        self._emit(self._z.flush())


def encode_body(state: SchedulerState, out: BinaryIO) -> BodyInfo:
    """Write the image of `state` to `out` (the caller makes sure nothing applies meanwhile)."""
    digest = state.state_digest()
    text = plain.dumps(state).encode()       # ASCII JSON
    sink = _Sink(out)
    view = memoryview(text)
    for at in range(0, len(view), CHUNK):
        sink.write(view[at:at + CHUNK])
    sink.finish()
    return BodyInfo(state.last_index, digest, sink.length, sink.sha.hexdigest())


# --------------------------------------------------------------------------- reading

def decode_body(body: bytes) -> Image:
    """The image a body holds (what `SchedulerState.restore` takes). Raises BodyError."""
    try:
        text = zlib.decompressobj().decompress(body, MAX_BODY_TEXT)
    except zlib.error as e:
        raise BodyError(f"the snapshot body does not decompress (zlib: {e})") from None
    try:
        return plain.loads(text)
    except plain.PlainError as e:
        raise BodyError(f"the snapshot body is not a state image: {e}") from None


def state_from_body(body: bytes) -> SchedulerState:
    """A SchedulerState restored from a body (raises BodyError, or ValueError from restore)."""
    state = SchedulerState()
    state.restore(decode_body(body))
    return state


# --------------------------------------------------------------------------- taking one

class PendingImage:
    """A forked child writing a body to `path`; `wait()` (blocking: call it off the event loop)
    returns what it wrote, or raises OSError/RuntimeError when it failed."""

    def __init__(self, pid: int, info_fd: int, path: str) -> None:
        self.pid, self._fd, self.path = pid, info_fd, path

    def wait(self) -> BodyInfo:
        try:
            with os.fdopen(self._fd, "rb") as f:
                raw = f.read()
        finally:
            _, status = os.waitpid(self.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 or not raw:
            raise RuntimeError(f"the snapshot writer (pid {self.pid}) failed (exit {code}): "
                               f"{raw.decode(errors='replace')[:300] or 'no output'}")
        doc = json.loads(raw)
        if "error" in doc:
            raise RuntimeError(f"the snapshot writer failed: {doc['error']}")
        return BodyInfo(**doc)

    def discard(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def fork_image(state: SchedulerState, lock: threading.RLock, path: str) -> PendingImage:
    """Fork under `lock` a child that writes the body of `state` to `path` (created 0600).
    Returns at once; the lock is held only for the fork."""
    r, w = os.pipe()
    with lock:
        pid = os.fork()
        if pid == 0:                                       # the child: no locks, no threads
            _child(state, path, w)
    os.close(w)
    return PendingImage(pid, r, path)


def _child(state: SchedulerState, path: str, info_fd: int) -> None:
    code = 0
    try:
        gc.disable()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb", buffering=CHUNK) as out:
            info = encode_body(state, out)
            out.flush()
            os.fsync(out.fileno())
        report: dict[str, Any] = {"index": info.index, "digest": info.digest, "length": info.length,
                                  "sha256": info.sha256}
    except BaseException as e:  # noqa: BLE001 - the child must always exit, never return
        report, code = {"error": f"{type(e).__name__}: {e}"}, 1
    try:
        os.write(info_fd, json.dumps(report).encode())
    finally:
        os._exit(code)
