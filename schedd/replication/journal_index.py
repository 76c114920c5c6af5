"""The journal's entries in RAM: what pysyncobj reads, with the oldest commands left on disk.

Why a module of its own: pysyncobj reads its log as a list of ``(command, idx, term)``, as
FileJournal keeps it, but holding every command in RAM makes the log's memory unbounded between
compactions (a million jobs registered in batches is 150 MB of entries, kept until the next
snapshot). So only the newest ``resident_bytes`` of commands stay here; older ones (what a lagging
follower or a restart needs, never the steady path) are read back from the file when asked for.
Evicted entries are always a prefix of the list, and the newest entry always stays (pysyncobj
reads the last one on every tick). The index also knows where each entry's record starts in the
file, which truncation needs.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable
from typing import Any

from schedd.replication.journal_records import Entry

RESIDENT_BYTES = 8 << 20  # commands kept in RAM; older ones are read back from the file

#: ``read_command(offset, idx, term)``: an evicted entry's command, from the file.
ReadCommand = Callable[[int, int, int], bytes]


class EntryIndex:
    """The entries, their offsets in the file, and which commands are held in RAM.

    During pysyncobj's startup dump load the entries it adds are *staged*: held without offsets
    (they are not in the file yet) until the journal rewrites the file with them."""

    __slots__ = ("_entries", "_offsets", "_limit", "resident", "evicted", "_lock", "_read_command")

    def __init__(self, resident_bytes: int, lock: threading.RLock, read_command: ReadCommand) -> None:
        self._entries: list[Entry] = []
        self._offsets = array("q")
        self._limit = max(0, int(resident_bytes))
        self.resident = 0             # bytes of commands held in _entries
        self.evicted = 0              # _entries[:evicted] hold None for their command
        self._lock = lock             # the journal's: reading back must not race a rewrite
        self._read_command = read_command

    @property
    def offsets(self) -> array[int]:
        return self._offsets

    @property
    def last_index(self) -> int:
        """The Raft index of the newest entry (0 if none)."""
        return self._entries[-1][1] if self._entries else 0

    def offset(self, i: int) -> int:
        return self._offsets[i]

    def bytes_before(self, index: int, end: int) -> int:
        """Bytes of the file the entries held before Raft index ``index`` take (all of them,
        up to ``end``, the file's size, when ``index`` is past the last): what a restart would
        read back and apply again after loading the dump. 0 while entries are staged."""
        entries, offsets = self._entries, self._offsets
        if not entries or len(offsets) != len(entries):
            return 0
        i = index - entries[0][1]
        if i <= 0:
            return 0
        return (offsets[i] if i < len(offsets) else end) - offsets[0]

    # ------------------------------------------------------------------ changes

    def replace(self, entries: list[Entry], offsets: array[int]) -> None:
        """Hold ``entries`` (written at ``offsets``) instead of what was held."""
        self._entries = list(entries)
        self._offsets = offsets
        self.resident, self.evicted = sum(len(e[0]) for e in self._entries), 0
        self._keep_bounded()

    def append(self, entry: Entry, offset: int) -> None:
        self._entries.append(entry)
        self._offsets.append(offset)
        self.resident += len(entry[0])
        if self.resident > self._limit:
            self._keep_bounded()

    def stage(self, entry: Entry) -> None:
        """Hold ``entry`` without an offset (not written yet; see the class docstring)."""
        self._entries.append(entry)

    def take_all(self) -> list[Entry]:
        """Every entry with its command; the index is then empty."""
        taken: list[Entry] = self[:]
        self._entries = []
        self._offsets = array("q")
        self.resident, self.evicted = 0, 0
        return taken

    def truncate(self, i: int) -> None:
        """Drop entries ``i`` and after."""
        self.resident -= sum(len(e[0]) for e in self._entries[max(i, self.evicted):])
        self.evicted = min(self.evicted, i)
        del self._entries[i:]
        del self._offsets[i:]

    def _keep_bounded(self) -> None:
        """Drop the oldest commands from RAM until at most resident_bytes are held."""
        entries, last = self._entries, len(self._entries) - 1
        if len(self._offsets) != len(entries):
            return                     # staged entries: offsets not in line with the file
        while self.resident > self._limit and self.evicted < last:
            cmd, idx, term = entries[self.evicted]
            entries[self.evicted] = (None, idx, term)   # type: ignore[assignment]
            self.resident -= len(cmd)
            self.evicted += 1

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, item: Any) -> Any:
        got = self._entries[item]
        if isinstance(item, slice):
            if not got or (got[0][0] is not None and got[-1][0] is not None):
                return got                 # evicted ones are a prefix: both ends resident, all are
            with self._lock:
                return [self._full(i) for i in range(*item.indices(len(self._entries)))]
        if got[0] is not None:
            return got
        with self._lock:
            return self._full(item + len(self._entries) if item < 0 else item)

    def _full(self, i: int) -> Entry:
        """Entry i with its command, read back from the file if it was evicted."""
        cmd, idx, term = self._entries[i]
        if cmd is None:
            cmd = self._read_command(self._offsets[i], idx, term)
        return (cmd, idx, term)
