"""What the durable journal does when the disk fails it: the node stops (fail-stop).

Why a module of its own: every part of the journal that touches the disk (the log file, the
meta file, pysyncobj's dump it fsyncs, the background sync thread) obeys the same rule, and the
rule must not drift between them. After a failed write or fsync the state of the page cache is
unknown (the "fsyncgate" problem): retrying could acknowledge data that is lost. So the first
``OSError`` (ENOSPC, EIO, EFBIG, ...) is recorded, logged CRITICAL, written to stderr and handed
to ``on_fatal``, whose default ends the process with exit code 74 (EX_IOERR) without cleanup;
every later call on the journal raises. Errors while *opening* are not handled here: they raise
from the constructor, so the node refuses to start.

It also holds the journal's errors and its logger: every part of the journal logs under one
name, the one operators filter on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

logger = logging.getLogger("schedd.replication.journal")

FATAL_EXIT_CODE = 74  # EX_IOERR


class JournalError(Exception):
    """Base class of journal errors."""


class JournalCorruptError(JournalError):
    """The journal or meta file is corrupted in a way that cannot be a torn tail write."""


class JournalIOError(JournalError):
    """A write or fsync failed. The node must stop; see ``on_fatal``."""


def default_on_fatal(exc: BaseException) -> None:
    """Flush logs and end the process at once with FATAL_EXIT_CODE (no cleanup, no atexit)."""
    for h in list(logging.getLogger().handlers) + list(logger.handlers):
        try:
            h.flush()
        except Exception:  # noqa: BLE001 - best effort: the process ends on the next line
            pass
    os._exit(FATAL_EXIT_CODE)


@dataclass(slots=True)
class FailStop:
    """The journal's first I/O failure, and the refusal of everything after it."""

    path: str
    on_fatal: Callable[[BaseException], None]
    failed: BaseException | None = None

    def check(self) -> None:
        """Raise if an earlier write or fsync failed (``on_fatal`` returned)."""
        if self.failed is not None:
            raise JournalIOError("journal %s failed earlier: %s" % (self.path, self.failed))

    def fatal(self, what: str, exc: BaseException) -> NoReturn:
        """Record the failure of ``what``, tell the operator, call ``on_fatal``; raise if it returns."""
        err = JournalIOError("journal %s: %s failed: %s" % (self.path, what, exc))
        self.failed = err
        msg = ("FATAL: durable journal %s: %s failed: %r. The journal may no longer hold entries "
               "this node has acknowledged; stopping the node (exit code %d)."
               % (self.path, what, exc, FATAL_EXIT_CODE))
        logger.critical(msg)
        try:
            os.write(2, (msg + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
        self.on_fatal(err)
        raise err from exc
