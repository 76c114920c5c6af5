"""The body of a backup (`schedctl cluster snapshot save`): the state machine image at one
applied index, taken consistently without stalling the node, and read back by `schedd restore`.

Consistency without a stall: `fork_image` forks while holding the node lock, so the child holds
a copy-on-write view of the state at exactly one applied index; the lock is released as soon as
fork returns (about the time pysyncobj's own compaction fork takes). The child pickles the image
(schedd.core.snapshot, the format pysyncobj's snapshots use), compresses it, hashes it and
computes the state digest, on another core and under another GIL, then exits; neither apply
(the Raft tick thread) nor the event loop waits for any of it. The parent waits for the child
off the event loop (`PendingImage.wait`).

Reading: a body is a pickle, and unpickling runs whatever a pickle names. `decode_body` admits
only the globals an image is made of (schedd.core and a few builtins), so a crafted file is
refused instead of run. The checksums of the file (schedd_client.snapshot_file) catch accidents;
this catches a file made to look valid.
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import pickle
import threading
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO

from schedd.core.snapshot import Image, SnapshotImage
from schedd.core.state import SchedulerState

BODY_ENCODING = "pickle5+zlib1"
ZLIB_LEVEL = 1                 # 9 costs ~9x the time for ~20% less (research §1c)
CHUNK = 1 << 20


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
    """A write-only file that compresses, hashes and counts what pickle writes into it."""

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
    sink = _Sink(out)
    pickle.dump(SnapshotImage(state), sink, protocol=pickle.HIGHEST_PROTOCOL)
    sink.finish()
    return BodyInfo(state.last_index, digest, sink.length, sink.sha.hexdigest())


# --------------------------------------------------------------------------- reading

_SAFE_BUILTINS = frozenset({"set", "frozenset", "dict", "list", "tuple", "bytes", "bytearray", "str",
                            "int", "float", "bool", "complex", "slice", "range", "getattr"})
_SAFE = frozenset({("gc", "disable"), ("collections", "OrderedDict"), ("collections", "deque"),
                   ("collections", "defaultdict"), ("copyreg", "_reconstructor"),
                   ("copyreg", "__newobj__"), ("builtins", "object")})


class _ImageUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if ((module == "builtins" and name in _SAFE_BUILTINS) or (module, name) in _SAFE
                or module.startswith("schedd.core.") and not name.startswith("_")
                or (module, name) == ("schedd.core.state", "_from_image")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not part of a state image")


def decode_body(body: bytes) -> Image:
    """The image a body holds (what `SchedulerState.restore` takes). Raises BodyError."""
    try:
        raw = zlib.decompress(body)
        image = _ImageUnpickler(io.BytesIO(raw)).load()
    except (zlib.error, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError) as e:
        raise BodyError(f"the snapshot body does not decode ({type(e).__name__}: {e})") from None
    finally:
        gc.enable()                      # the image's first item turns it off (_GcPause)
    if not isinstance(image, tuple) or len(image) != 10:
        raise BodyError("the snapshot body is not a state image")
    return image


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
