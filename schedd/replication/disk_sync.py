"""The system calls durability rests on: write everything, fdatasync a file, fsync a directory.

Why a module of its own: the log file, the meta file, pysyncobj's dump and the snapshot rename
all need exactly these, and a test counts them by patching ``os`` (so they look the functions up
at call time).
"""

from __future__ import annotations

import errno
import os


def fdatasync(fd: int) -> None:
    """fdatasync where the platform has it, fsync elsewhere."""
    # Looked up at call time so tests can count calls by monkeypatching os.fdatasync.
    f = getattr(os, "fdatasync", None) or os.fsync
    f(fd)


def fsync_dir(path: str) -> None:
    """fsync the directory ``path``: a rename or a new file in it survives a power loss."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until all of ``data`` is written."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:  # pragma: no cover - os.write raises instead
            raise OSError(errno.EIO, "short write")
        view = view[n:]
