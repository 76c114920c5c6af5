"""Raft's term, vote and commit-index hint, in ``<journal>.meta``.

Why a module of its own: these are not log entries and follow another rule. They are always
written durably, whatever the log's fsync policy: the file carries the term and vote, and Raft
needs both on disk before any message reflecting them is sent (losing them allows double votes).
Replacing the file by a rename that is not fsynced could bring back an empty or old file after a
power loss, so it is written as tmp + fsync + rename + fsync of the directory. JSON, not pickle:
stock pysyncobj's pickled meta is refused.

Writes are serialized by :attr:`MetaFile.lock` (term/vote from the tick thread, the commit-index
hint from the journal's background thread), so the file always ends with the newest term and vote.
The hint is written at most once a second, and only when it changed.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from schedd.replication.disk_sync import fsync_dir, write_all
from schedd.replication.journal_failure import FailStop, JournalCorruptError

META_FORMAT = "schedd-raft-meta"
META_VERSION = 1
_KEYS = ("currentTerm", "votedForNodeId", "raftCommitIndex")


class MetaFile:
    """The values of the meta file, loaded at construction; ``dirty`` while the hint is unsaved."""

    __slots__ = ("path", "dirty", "lock", "_values", "_failure", "_stats")

    def __init__(self, path: str, *, failure: FailStop, stats: dict[str, int]) -> None:
        self.path = path
        self._failure = failure
        self._stats = stats
        self._values = self._load()
        self.dirty = False
        self.lock = threading.Lock()

    @property
    def current_term(self) -> int:
        return int(self._values.get("currentTerm", 0))

    @property
    def voted_for(self) -> Any:
        return self._values.get("votedForNodeId", None)

    @property
    def commit_index(self) -> int:
        """The stored commit-index hint (1 if none, as pysyncobj starts)."""
        return int(self._values.get("raftCommitIndex", 1))

    def set_term_and_vote(self, term: int, voted_for: Any) -> None:
        """Store term and vote durably before returning."""
        with self.lock:
            self._values["currentTerm"] = int(term)
            self._values["votedForNodeId"] = voted_for
            self.store()

    def set_commit_index(self, commit_index: int) -> None:
        """Note a new hint (stored later by :meth:`store`); a follower sets it on every
        heartbeat, so the file is rewritten for a change only."""
        with self.lock:
            if self._values.get("raftCommitIndex") == int(commit_index):
                return
            self._values["raftCommitIndex"] = int(commit_index)
            self.dirty = True

    def store_if_dirty(self) -> None:
        with self.lock:
            if self.dirty:
                self.store()

    def store(self) -> None:
        """Write the file durably; the caller holds :attr:`lock`."""
        meta = dict(self._values)
        meta["format"] = META_FORMAT
        meta["version"] = META_VERSION
        data = json.dumps(meta, sort_keys=True).encode("utf-8")
        tmp = self.path + ".tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, self.path)
            fsync_dir(os.path.dirname(self.path))
        except OSError as e:
            self._failure.fatal("store meta", e)
        self._stats["fsync"] += 2
        self.dirty = False

    def _load(self) -> dict[str, Any]:
        try:
            os.unlink(self.path + ".tmp")
        except FileNotFoundError:
            pass
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return {}
        if raw[:1] == b"\x80":
            raise JournalCorruptError(
                "%s is a pickle (stock pysyncobj FileJournal meta); refusing to load it. Move the "
                "data directory away and let this node resync from the cluster." % self.path)
        try:
            meta = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise JournalCorruptError("%s: unreadable meta file (%s); it is written atomically, so "
                                      "this is corruption. Refusing to start." % (self.path, e)) from e
        if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
            raise JournalCorruptError("%s: not a schedd raft meta file" % self.path)
        if meta.get("version") != META_VERSION:
            raise JournalCorruptError("%s: unsupported meta version %r" % (self.path, meta.get("version")))
        return {k: meta[k] for k in _KEYS if k in meta}
