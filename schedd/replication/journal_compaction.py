"""Where the journal meets pysyncobj's snapshot (its dump file): compaction and the startup load.

Why a module of its own: dropping log entries is safe only because the dump holds what they
built, and pysyncobj does not make that so by itself.

* :class:`DumpFile`: before the journal drops entries (``deleteEntriesTo``, ``clear``) it fsyncs
  the dump and its directory, because pysyncobj's fork child writes the dump with a plain rename.
  With ``make_snapshots_durable`` the dump is already durable when it appears, so this is cheap;
  it stays as a second line of defence (custom serializers, for example).
* :class:`StartupDumpLoad`: on the first tick, pysyncobj's ``__loadDumpFile`` clears the journal
  whenever its first two entries differ from the dump's, then adds the dump's two entries. If the
  node crashed after the fork child renamed a new dump but before ``deleteEntriesTo`` ran, that
  silently drops every entry after the dump point. A ``clear()`` before the first tick is
  therefore held back until the two entries arrive, and the journal's entries after them are kept.
"""

from __future__ import annotations

import os

from schedd.replication.disk_sync import fsync_dir
from schedd.replication.journal_failure import FailStop, logger
from schedd.replication.journal_records import Entry


class DumpFile:
    """pysyncobj's ``conf.fullDumpFile``, made durable before the journal drops entries.

    ``None`` is accepted but logged once: compaction is then only as durable as pysyncobj's
    in-memory snapshot. ``durable=False`` (policy ``never``) skips the fsyncs."""

    __slots__ = ("path", "_journal_path", "_durable", "_failure", "_stats", "_warned_no_dump")

    def __init__(self, path: str | None, *, journal_path: str, durable: bool, failure: FailStop,
                 stats: dict[str, int]) -> None:
        self.path = os.path.abspath(path) if path else None
        self._journal_path = journal_path
        self._durable = durable
        self._failure = failure
        self._stats = stats
        self._warned_no_dump = False

    def make_durable(self) -> None:
        if not self._durable:
            return
        if self.path is None:
            if not self._warned_no_dump:
                logger.warning("journal %s: dropping entries without a dump file (conf.fullDumpFile "
                            "unset): they survive only in pysyncobj's in-memory snapshot", self._journal_path)
                self._warned_no_dump = True
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            logger.warning("journal %s: dump file %s does not exist while dropping entries",
                        self._journal_path, self.path)
            return
        except OSError as e:
            self._failure.fatal("open dump %s" % self.path, e)
        try:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(os.path.dirname(self.path))
        except OSError as e:
            self._failure.fatal("fsync dump %s" % self.path, e)
        self._stats["fsync"] += 2


class StartupDumpLoad:
    """Whether a ``clear()`` is pysyncobj's startup dump load, and what to keep when it is.

    ``startup`` holds until the first tick callback or the first change that is not the load;
    ``stash`` is the journal's entries while a held-back clear waits for the dump's two."""

    __slots__ = ("startup", "stash", "_journal_path", "_stats")

    def __init__(self, *, journal_path: str, stats: dict[str, int]) -> None:
        self.startup = True
        self.stash: list[Entry] | None = None
        self._journal_path = journal_path
        self._stats = stats

    @property
    def pending(self) -> bool:
        """A clear is held back, waiting for the dump's entries."""
        return self.stash is not None

    def holds_back(self, under_syncobj: bool, has_entries: bool) -> bool:
        """Whether a ``clear()`` now is the startup load, to be held back."""
        return self.startup and under_syncobj and has_entries

    def finish(self, new: list[Entry], keep_tail: bool) -> list[Entry]:
        """End the held-back clear: the entries the journal is to hold (the dump's two, and
        the stashed entries after them if ``keep_tail`` and they continue the dump's)."""
        stash, self.stash = self.stash, None
        self.startup = False
        tail = self._tail_after(stash or [], new) if keep_tail else []
        if tail:
            logger.warning("journal %s: pysyncobj's startup dump load would have discarded %d journal "
                        "entries after the dump point (index %d); keeping them (the crash hit "
                        "between the snapshot rename and the log compaction)",
                        self._journal_path, len(tail), new[1][1])
            self._stats["kept_after_dump"] = len(tail)
        return new + tail

    @staticmethod
    def _tail_after(stash: list[Entry], new: list[Entry]) -> list[Entry]:
        """The stashed entries after the dump's last entry, if the stash holds that very entry."""
        if len(new) != 2 or not stash:
            return []
        last = new[1]
        j = last[1] - stash[0][1]
        if 0 <= j < len(stash) and stash[j] == last:
            return stash[j + 1:]
        return []
