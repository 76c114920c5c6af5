"""The highest cluster feature level this data dir has seen, in a file of its own.

Why a file: a node restarted on an older build (a rollback) must refuse to start before it
joins in, and the level is otherwise inside the snapshot (a pickle as large as the state) and
the journal. The node writes the level here whenever its replicated level changes, a restored
snapshot included, and the level a halting entry asked for (schedd.replication.node); at start
the composition root compares it with the build's (`refusal`). A data dir without the file (one
written before it existed) starts, and a level it holds is still caught when applied: the node
halts (schedd.replication.raft_patches: halting).
"""

from __future__ import annotations

import os
from os import PathLike
from pathlib import Path

LEVEL_FILE = "feature_level"


def read(data_dir: str | PathLike[str]) -> int:
    """The level recorded in `data_dir` (0: none)."""
    try:
        text = (Path(data_dir) / LEVEL_FILE).read_text().strip()
    except FileNotFoundError:
        return 0
    return int(text) if text.isdigit() else 0


def write(data_dir: str | PathLike[str], level: int) -> None:
    """Record `level` (never lowers what is recorded), durably: a crash leaves the old file or the new."""
    if level <= read(data_dir):
        return
    path = Path(data_dir) / LEVEL_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, f"{level}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def refusal(data_dir: str | PathLike[str], build_level: int) -> int | None:
    """The recorded level when it is above `build_level` (this build must not start), else None."""
    level = read(data_dir)
    return level if level > build_level else None
