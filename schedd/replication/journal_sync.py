"""What of the log is known to be on disk, and the thread that syncs it off the tick thread.

Why a module of its own: the durable index is a promise other code builds on (the leader caps
its commit at it in parallel mode, metrics report it), and it is moved from two threads: by the
tick thread's inline syncs and by the background thread's. :class:`DurableMark` keeps the rules
of that promise in one place; in particular a truncation or rewrite bumps its generation, which
voids an fdatasync that began before it (the file it synced is not the one we have).
:class:`BackgroundSyncer` is the thread: the leader's fdatasync in parallel mode and the
once-a-second meta write, so heartbeats never wait for the disk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from schedd.replication.journal_failure import JournalError, logger


def _now() -> float:
    return time.monotonic()   # looked up at call time: tests replace time.monotonic


@dataclass(slots=True)
class DurableMark:
    """How much of the current log file an fdatasync of this process covers."""

    durable_size: int = 0          # bytes of the file
    durable_index: int = 0         # the highest Raft index (0 if none)
    dirty: bool = False            # written or truncated since the last sync
    gen: int = 0                   # bumped by every truncation or rewrite
    last_sync: float = field(default_factory=_now)

    def wrote(self) -> None:
        self.dirty = True

    def synced(self, size: int, last_index: int) -> None:
        """An inline fdatasync covered the file up to ``size`` (entry ``last_index``)."""
        self.dirty = False
        self.last_sync = _now()
        self.durable_size = size
        self.durable_index = last_index

    def truncated(self, size: int, last_index: int) -> None:
        """The file was cut back to ``size``: nothing past it is durable any more."""
        self.dirty = True
        self.gen += 1
        self.durable_size = min(self.durable_size, size)
        self.durable_index = min(self.durable_index, last_index)

    def rewritten(self, size: int, last_index: int, durable: bool) -> None:
        """The file was replaced (fsynced before the rename if ``durable``)."""
        self.gen += 1
        self.dirty = False
        self.last_sync = _now()
        self.durable_size = size if durable else 0
        self.durable_index = last_index if durable else 0

    def background_synced(self, gen: int, size: int, last_index: int, size_now: int) -> bool:
        """A background fdatasync begun at generation ``gen`` covered ``size``; False (void) if
        the file was truncated or rewritten meanwhile. Clean only if nothing was added since."""
        if gen != self.gen:
            return False
        self.last_sync = _now()
        if size > self.durable_size:
            self.durable_size, self.durable_index = size, last_index
        if size_now == size:
            self.dirty = False
        return True


class BackgroundSyncer:
    """The journal's background thread. Requests coalesce: one fdatasync covers every append
    made before it starts. A daemon thread, started at construction (on the journal's first
    request) and stopped by the journal's ``_destroy``; an I/O error in it is fatal as anywhere
    else (the step raises JournalError after FailStop has acted)."""

    def __init__(self, sync_log: Callable[[], object], store_meta: Callable[[], None], name: str) -> None:
        self._sync_log = sync_log
        self._store_meta = store_meta
        self._name = name
        self._wake = threading.Condition(threading.Lock())
        self._log = self._meta = self._stopping = False
        self._thread = threading.Thread(target=self._run, name="journal-sync", daemon=True)
        self._thread.start()

    def request_log(self) -> None:
        with self._wake:
            self._log = True
            self._wake.notify()

    def request_meta(self) -> None:
        with self._wake:
            self._meta = True
            self._wake.notify()

    def stop(self, timeout: float = 10.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not (self._log or self._meta or self._stopping):
                    self._wake.wait()
                if self._stopping:
                    return
                log_wanted, meta_wanted = self._log, self._meta
                self._log = self._meta = False
            try:
                if log_wanted:
                    self._sync_log()
                if meta_wanted:
                    self._store_meta()
            except JournalError:
                return                 # FailStop has logged it and called on_fatal
            except Exception:  # noqa: BLE001 - logged: never die silently, the commit would stall
                logger.exception("journal %s: background sync failed", self._name)
