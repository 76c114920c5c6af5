"""Durable Raft journal for pysyncobj 0.3.17 (replaces ``pysyncobj.journal.FileJournal``).

Why
===
The stock ``FileJournal`` writes through ``mmap`` and never calls ``msync``/``fsync``, has no
checksums, and writes term/vote with write+rename with no fsync. It also dies with SIGBUS when
the disk is full. So a power loss or kernel crash on a majority can lose acknowledged
commands, and can undo a vote. This module provides:

* :class:`DurableJournal`: checksummed append-only log file, plain ``os.write``/``fdatasync``
  with no mmap, and an fsync policy of ``always`` (default), ``batch`` or ``never``. Term and
  vote are stored durably before ``setCurrentTerm`` returns.
* :class:`DurableTCPTransport`: a ``TCPTransport`` that makes the journal durable before any
  Raft message leaves the node ("persist before send", as in etcd).
* The glue that makes pysyncobj build it: :func:`prepare_durable_journal` (the one call the node
  adapter needs), :func:`durable_journal_factory`, :func:`patch_create_journal` and :func:`attach`.
* :func:`make_snapshots_durable`: pysyncobj writes its snapshot dump with a plain rename. With
  this, it fsyncs the file before the rename and the directory after. It runs in the fork child,
  off the Raft thread, and ``prepare_durable_journal`` applies it.
* :func:`speed_up_snapshots`: gzip level 1 instead of 9 for pysyncobj's snapshot dump. That makes
  it about 9x faster, and old dumps can still be read.
* :func:`seed_data_dir`: what ``schedd restore`` writes into a new node's data dir, a dump and
  a journal as after a compaction at the image's index, so pysyncobj starts from that state.

Node-adapter API
================
::

    from schedd.replication.journal import prepare_durable_journal, speed_up_snapshots

    speed_up_snapshots(level=1)                       # optional, process-global
    hooks = prepare_durable_journal(data_dir, fsync="always")   # or "batch" / "never"
    conf = SyncObjConf(journalFile=hooks.journal_file, fullDumpFile=hooks.dump_file,
                       useFork=True, ...)             # or SyncObjConf(**hooks.conf_kwargs, ...)
    obj = SyncObj(self_addr, peers, conf=conf, consumers=[...],
                  transportClass=hooks.transport_class)
    hooks.attach(obj)                                 # verifies the wiring, returns the journal
    hooks.journal.durable_index                       # e.g. for metrics

``prepare_durable_journal`` replaces ``pysyncobj.syncobj.createJournal``, the name that
``SyncObj.__init__`` calls. That replacement is **process-global**, which fits our deployment model
of one ``SyncObj`` per process. Call it before constructing the ``SyncObj``. Restore the stock
function with ``restore_create_journal()``.

Notes for the adapter:

* Always set both ``journalFile`` and ``fullDumpFile`` (``conf_kwargs`` does). A journal without a
  dump is broken in pysyncobj.
* ``SyncObjConf.bindAddress`` is ``"host:port"``, not a bare host.
* ``SyncObj(...)`` raises :class:`JournalCorruptError` for a corrupted journal or meta file, or for a
  stock pysyncobj journal, which has no migration path (wipe the data dir and resync). Treat that
  as "refuse to start". A write/fsync error at runtime ends the process with exit code 74.
* Do not set attributes on the ``SyncObj`` after construction: pysyncobj snapshots every
  attribute added after ``__init__``. ``attach`` only registers a tick callback.
* Call ``transferLeadership()`` from the tick thread (for example from a tick callback), not from
  a gRPC thread: pysyncobj's ``TcpConnection`` buffers are not thread-safe.

fsync policies
==============
``always`` (default, safe)
    ``add``/``deleteEntriesFrom`` only write to the file and mark the journal *dirty*. One
    ``fdatasync`` then covers everything written since the last one. That happens when
    (a) :class:`DurableTCPTransport` sends any message, (b) the tick callback runs, or
    (c) ``setRaftCommitIndex`` is called while the journal is dirty.

    Why this makes every acknowledged or committed entry durable on a majority. The order of
    ``SyncObj._onTick`` in 0.3.17 is:

    0. first ready tick only: ``__loadDumpFile``, which may call ``clear()`` + ``add()`` x2;
    1. ``onOneSecondTimer``;
    2. election timeout: ``setCurrentTerm`` (durable) then send ``request_vote``;
    3. leader: commit computation, which counts the leader's own copy as one vote without asking
       anyone, then ``setRaftCommitIndex``;
    4. ``__applyLogEntries``: user methods run and client callbacks are acknowledged;
    5. leader: ``__sendAppendEntries``;
    6. ``_checkCommandsToApply``: **the leader appends** queued commands;
    7. ``__tryLogCompaction``: ``deleteEntriesTo`` once the dump child has finished;
    8. tick callbacks: **our sync** is registered first, before ``TCPTransport._onTick``;
    9. ``poll()``: message handlers. **Followers** truncate/append and then send the
       ``next_node_idx`` ack. Voters ``setCurrentTerm`` and then send ``response_vote``. A
       snapshot install does ``clear()`` + ``add()`` x2 and then acks.

    * Followers: the ack is sent through ``transport.send``, which fdatasyncs first. A follower's
      ack therefore always covers entries that are already on disk, truncations included.
    * Leader: entries appended in step 6 are fdatasynced in step 8 of the same tick, before the
      next commit computation (step 3) can count the leader's own copy. The ``NO_OP`` written by
      ``__onBecomeLeader`` is followed immediately by a send, which syncs. Every entry a follower
      acks reached it in an ``append_entries`` whose send synced the leader first.
      ``setRaftCommitIndex`` also syncs if anything is still dirty. That covers a tick aborted
      by an exception between steps 6 and 8, and single-node clusters. So the commit index only
      moves over entries durable on the leader and on every follower counted: a majority. Client
      acknowledgements (step 4) and the commit index sent to followers (step 5) come after that.
    * Parallel mode (the leader of a multi-node cluster under RepairingSyncObj, raft_patches
      the parallel disk write; Raft thesis §10.2.1): the leader's sends and ticks do not fdatasync; its tick
      asks the background thread to, and the commit computation counts the leader only up to
      ``durable_index`` (every follower's matchIndex is capped at it), so the commit index
      still moves only over entries durable on the leader and on a follower that acked them.
      Guard (c) is off then (the cap replaces it). A truncation or rewrite while a background
      fdatasync runs voids its result. The mode ends before the role does (``__setState``):
      a node that stops leading syncs before its next message again.
    * Votes: ``setCurrentTerm`` fsyncs the meta file and its directory before returning, and
      pysyncobj sends the vote only after that. The once-a-second commit-index hint is written
      by the background thread; meta writes are serialized (``_meta_lock``), so the file
      always ends with the newest term and vote.
    * Group commit: one fdatasync per tick on the leader however many entries step 6 appended,
      one per ``append_entries`` message on a follower, and none for heartbeats (the journal is
      not dirty).

``batch``
    fdatasync from the tick callback at most every ``batch_interval`` seconds (default 0.05 s),
    never on send. Acks can go out before the fdatasync. Entries acknowledged within the last
    ``batch_interval`` plus one tick can be lost if a *majority* of nodes lose power or the kernel
    crashes at the same time (correlated power loss). A single-node power loss is masked by the
    other replicas. A process crash (SIGKILL, OOM) loses nothing, because the data is in the page
    cache. Compaction, ``clear()`` and term/vote remain fully durable.

``never``
    The log is never fsynced; durability is whatever the OS page cache gives you. This is like
    stock pysyncobj: it survives process crashes, but a correlated power loss can lose any amount
    of acknowledged data. Compaction/clear do not fsync either. **The meta file (term/vote, plus the
    commit-index hint at most once a second) is still written durably**: that is rare, and losing
    it allows double votes.

Where each decision lives
=========================
:class:`DurableJournal` is the composition: pysyncobj's journal interface, its lock, and the
order of the steps. Each decision it composes has a module of its own:

* ``journal_records``: the on-disk format (header, records) and judging a file read back
  (torn tail or mid-file corruption);
* ``journal_file``: the log file's descriptor: open and recover, append, truncate, rewrite;
* ``journal_index``: the entries in RAM, with the oldest commands read back from the file;
* ``journal_policy``: when the log is fdatasynced (the policies below, parallel mode);
* ``journal_sync``: what is known to be on disk (the durable index) and the background thread;
* ``journal_meta``: term, vote and the commit-index hint;
* ``journal_compaction``: the dump fsynced before entries are dropped, pysyncobj's startup load;
* ``journal_failure``: the journal's errors and fail-stop on an I/O error;
* ``disk_sync``: the fsync/fdatasync system calls.

Safety notes
============
* File format. A 16-byte header (``SCHDJRNL``, u32 format version, u32 flags), then records
  ``[u32 payload_len][u32 crc32(payload)][payload = u64 idx, u64 term, command]``, little endian.
  Meta is JSON, not pickle, in ``<journal>.meta``. It is written as tmp + fsync + rename + fsync
  of the directory.
* Recovery on open. The first truncated or CRC-failing record is treated as a torn tail write
  from a crash: it is logged and truncated away, *unless a valid record follows it*. That is
  mid-file corruption, and the constructor raises :class:`JournalCorruptError`, so the node refuses
  to start rather than serve divergent state. Limitation: if a power loss persists unsynced pages
  out of order, a torn *unacknowledged* tail can look like mid-file corruption. The node then also
  refuses to start. The remedy is the same: move the data dir away and let the node resync from
  the leader.
* ``deleteEntriesTo`` (compaction) first fsyncs pysyncobj's dump file and its directory, because
  the fork child writes it with a plain rename. Only then does it rewrite the kept entries to a
  new file (fsync, rename, fsync dir). With :func:`make_snapshots_durable` the dump is already
  durable when it appears, so this fsync is cheap; it remains as a second line of defence, for
  example for custom serializers.
* pysyncobj startup pitfall, handled here. On the first tick, ``__loadDumpFile`` clears the journal
  whenever its first two entries differ from the dump's. That happens if the node crashed after the
  fork child renamed a new dump but before ``deleteEntriesTo`` ran, and it silently drops every
  entry after the dump point, including entries this node acked. During that startup load only
  (before the first tick callback), the journal keeps the entries that follow the dump's last
  entry, when that entry is present in the old log with the same index, term and command. This is
  what the interrupted compaction would have produced. A snapshot *install* from a leader is never
  treated this way.
* The commit-index hint read at startup is clamped to the last journal index (a lost tail must not
  leave a commit index beyond the log).
* Fatal I/O. Any ``OSError`` while writing or syncing (ENOSPC, EIO, EFBIG, ...) is fatal. After a
  failed fsync the page cache state is unknown (the "fsyncgate" problem), and retrying could
  acknowledge lost data. The journal logs CRITICAL, writes a line to stderr and calls ``on_fatal``.
  The default ends the process with ``os._exit(74)`` (EX_IOERR) without running cleanup. The
  supervisor must restart the node and alert. Errors while *opening* raise from the constructor
  instead, so the node refuses to start.
* Threading. pysyncobj uses the journal from its tick thread. Mutating methods and ``sync`` also
  hold an RLock, because ``SyncObj.transferLeadership()`` called from another thread reaches
  ``transport.send``, and so ``sync``; the background thread holds it only to read what to sync
  and to record the result, never during its fdatasync. Reads (``[]``, ``len``) are not locked.
"""

from __future__ import annotations

import functools
import gzip as _gzip
import os
import stat
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import pysyncobj.node
import pysyncobj.pickle
import pysyncobj.serializer
import pysyncobj.syncobj
from pysyncobj.journal import Journal

from schedd.replication.disk_sync import fdatasync, fsync_dir
from schedd.replication.journal_compaction import DumpFile, StartupDumpLoad
from schedd.replication.journal_failure import (
    FATAL_EXIT_CODE,
    FailStop,
    JournalCorruptError,
    JournalError,
    JournalIOError,
    default_on_fatal,
)
from schedd.replication.journal_failure import logger
from schedd.replication.journal_file import LogFile
from schedd.replication.journal_index import RESIDENT_BYTES, EntryIndex
from schedd.replication.journal_meta import MetaFile
from schedd.replication.journal_policy import FSYNC_POLICIES, FsyncPolicy, check_policy
from schedd.replication.journal_records import Entry
from schedd.replication.journal_sync import BackgroundSyncer, DurableMark
from schedd.replication.transport import GuardedTCPTransport

__all__ = [
    "FSYNC_POLICIES",
    "FATAL_EXIT_CODE",
    "JournalError",
    "JournalCorruptError",
    "JournalIOError",
    "DurableJournal",
    "DurableTCPTransport",
    "DurableJournalHooks",
    "prepare_durable_journal",
    "durable_journal_factory",
    "patch_create_journal",
    "restore_create_journal",
    "attach",
    "speed_up_snapshots",
    "make_snapshots_durable",
    "SeedError",
    "seed_data_dir",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    @functools.wraps(method)
    def wrapper(self: DurableJournal, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return cast(_F, wrapper)


def _to_bytes(command: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(command, bytes):
        return command
    if isinstance(command, (bytearray, memoryview)):
        return bytes(command)
    return command.encode("utf-8")  # what pysyncobj.pickle.to_bytes does


# --------------------------------------------------------------------------- journal


class DurableJournal(Journal):
    """Drop-in replacement for ``pysyncobj.journal.FileJournal``: pysyncobj's journal interface,
    composed of the parts that each make one decision.

    ``DurableJournal(path, *, dump_path, fsync="always", batch_interval=0.05, on_fatal=None)``

    * ``path``: journal file; the meta file is ``path + ".meta"``.
    * ``dump_path``: pysyncobj's ``conf.fullDumpFile``. It is fsynced before the journal drops
      entries (``deleteEntriesTo``, ``clear``). ``None`` is accepted but logged: compaction is
      then only as durable as pysyncobj's in-memory snapshot.
    * ``fsync``: ``"always" | "batch" | "never"`` (see the module docstring).
    * ``on_fatal(exc)``: called on any write/fsync error, after logging. The default ends the
      process with exit code 74. If it returns, :class:`JournalIOError` is raised and every later
      call raises too.
    * ``resident_bytes``: how much of the commands stays in RAM (journal_index.py).

    The parts: the log file (journal_file), its entries in RAM (journal_index), what of it is on
    disk and the background thread (journal_sync), when to sync (journal_policy), term/vote/commit
    hint (journal_meta), the dump and pysyncobj's startup load (journal_compaction), and what an
    I/O error does (journal_failure). This class holds the lock and the order of the steps.
    ``on_durable``, if set, is called as ``on_durable(journal)`` after every successful log sync;
    ``wake``, if set, when a background sync moved ``durable_index`` (it wakes the tick's poll).
    """

    def __init__(self, path: str, *, dump_path: str | None, fsync: str = "always",
                 batch_interval: float = 0.05,
                 on_fatal: Callable[[BaseException], None] | None = None,
                 resident_bytes: int = RESIDENT_BYTES):
        self._policy = FsyncPolicy.parse(fsync, batch_interval)
        path = os.path.abspath(path)
        self.on_durable: Callable[[DurableJournal], None] | None = None
        self.wake: Callable[[], None] | None = None
        # pysyncobj uses the journal from its tick thread, but transport.send can also be reached
        # from a caller's thread (SyncObj.transferLeadership), and that calls sync(). The lock
        # keeps "fdatasync, then mark clean" atomic with respect to add(). The meta file's own
        # lock is taken after this one when both are held.
        self._lock = threading.RLock()
        self._closed = False
        self._syncer: BackgroundSyncer | None = None
        self._tick_owners: set[int] = set()
        self.stats = {"fdatasync": 0, "fsync": 0, "appends": 0, "rewrites": 0,
                      "torn_bytes_dropped": 0, "kept_after_dump": 0, "background_fdatasync": 0}
        durable = self._policy.durable
        self._failure = FailStop(path, on_fatal or default_on_fatal)
        self._file = LogFile(path, durable=durable, failure=self._failure, stats=self.stats)
        self._dump = DumpFile(dump_path, journal_path=path, durable=durable, failure=self._failure,
                              stats=self.stats)
        self._dump_load = StartupDumpLoad(journal_path=path, stats=self.stats)
        self._meta = MetaFile(path + ".meta", failure=self._failure, stats=self.stats)
        scan = self._file.open()
        self._index = EntryIndex(resident_bytes, self._lock, self._file.read_command)
        self._index.replace(scan.entries, scan.offsets)
        self._mark = DurableMark(self._file.size if durable else 0, scan.last_idx if durable else 0)

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> str:
        return self._file.path

    @property
    def policy(self) -> str:
        return self._policy.name

    @property
    def dirty(self) -> bool:
        """True if entries or truncations were written but not yet fdatasynced."""
        return self._mark.dirty

    @property
    def durable_size(self) -> int:
        """Bytes of the current journal file covered by an fsync/fdatasync of this process."""
        return self._mark.durable_size

    @property
    def durable_index(self) -> int:
        """Highest Raft index known to be on disk (0 if none)."""
        return self._mark.durable_index

    @property
    def parallel(self) -> bool:
        """True while sends and the tick do not wait for this node's fdatasync (see below)."""
        return self._policy.parallel

    def set_parallel(self, on: bool) -> bool:
        """Leader mode (Raft thesis §10.2.1): a leader may send entries to its followers before
        they are on its own disk, provided it counts itself in a commit only for entries that
        are (its caller caps the commit at `durable_index`). Then sends do not fdatasync and the
        tick asks a background thread to; followers keep syncing before every send (their ack
        must cover what they acknowledge). Only under ``always`` (the other policies do not
        track `durable_index` as a promise). Returns whether parallel mode is on."""
        return self._policy.set_parallel(on, self._closed)

    def _check(self) -> None:
        self._failure.check()
        if self._closed:
            raise JournalError("journal %s is closed" % self.path)

    def _unsynced(self) -> bool:
        """Written or truncated and not synced yet, or a held-back clear still to write."""
        return self._mark.dirty or self._dump_load.pending

    # ------------------------------------------------------------------ durability

    @_locked
    def sync(self, force: bool = False) -> bool:
        """fdatasync the log if dirty. A no-op under ``never`` unless ``force``. Returns True if synced."""
        self._check()
        self._settle()
        if not self._mark.dirty or self._policy.skips(force):
            return False
        self._file.datasync()
        self._mark.synced(self._file.size, self._index.last_index)
        if self.on_durable is not None:
            self.on_durable(self)
        return True

    def sync_in_background(self) -> bool:
        """One fdatasync of what is written now, with the lock held only to read and to record
        (the background thread's step; the tick thread goes on appending meanwhile). The fd is
        dup'ed so a concurrent rewrite may close the original; a truncation or rewrite while it
        ran voids the result (the file it synced is not the one we have). True if it recorded."""
        with self._lock:
            if self._closed or self._failure.failed is not None or not self._mark.dirty \
                    or self._dump_load.pending:
                return False
            fd, gen, size = os.dup(self._file.fd), self._mark.gen, self._file.size
            last = self._index.last_index
        try:
            fdatasync(fd)
        except OSError as e:
            with self._lock:
                self._failure.fatal("fdatasync", e)
        finally:
            os.close(fd)
        with self._lock:
            if self._closed or not self._mark.background_synced(gen, size, last, self._file.size):
                return False
            self.stats["fdatasync"] += 1
            self.stats["background_fdatasync"] += 1
            if self.on_durable is not None:
                self.on_durable(self)
        if self.wake is not None:
            self.wake()
        return True

    def before_send(self) -> None:
        """Called by DurableTCPTransport.send before any message leaves the node (not in
        parallel mode: a leader's sends go out while its background thread syncs)."""
        if self._policy.sync_first(self._unsynced()):
            self.sync()

    @_locked
    def on_tick(self) -> None:
        """Tick callback (registered by DurableTCPTransport / attach)."""
        if self._closed:
            return
        self._check()  # a failed journal (on_fatal returned) aborts every tick: the node halts
        self._settle()
        self._dump_load.startup = False
        if not self._mark.dirty:
            return
        action = self._policy.on_tick(time.monotonic() - self._mark.last_sync)
        if action == "background":
            self._background().request_log()
        elif action == "sync":
            self.sync()

    def register_tick(self, syncobj: Any) -> None:
        """Register :meth:`on_tick` as a tick callback of ``syncobj`` (idempotent)."""
        if id(syncobj) in self._tick_owners:
            return
        syncobj.addOnTickCallback(self.on_tick)
        add_need = getattr(syncobj, "add_tick_need", None)     # raft_patches: deadline sleep
        if add_need is not None:
            add_need(self._tick_need)
        self._tick_owners.add(id(syncobj))

    def _tick_need(self) -> float | None:
        return self._policy.tick_need(self._mark.dirty, self._dump_load.pending)

    def _background(self) -> BackgroundSyncer:
        if self._syncer is None:
            self._syncer = BackgroundSyncer(self.sync_in_background, self.store_meta_if_dirty, self.path)
        return self._syncer

    def _rewrite(self, entries: list[Entry]) -> None:
        """Replace the journal file with ``entries`` (atomically) and hold them."""
        offsets = self._file.rewrite(entries)
        self._index.replace(entries, offsets)
        durable = self._policy.durable
        self._mark.rewritten(self._file.size, self._index.last_index, durable)
        if durable and self.on_durable is not None:
            self.on_durable(self)

    # ------------------------------------------------------------------ Journal API

    @_locked
    def add(self, command: bytes | str, idx: int, term: int) -> None:
        self._check()
        cmd = _to_bytes(command)
        if self._dump_load.pending:
            self._index.stage((cmd, idx, term))
            if len(self._index) == 2:
                self._finish_dump_load(keep_tail=True)
            return
        self._dump_load.startup = False
        if len(self._index) and idx != self._index.last_index + 1:
            logger.error("journal %s: non-consecutive add of index %d after %d",
                         self.path, idx, self._index.last_index)
        offset = self._file.append(cmd, idx, term)
        self._index.append((cmd, idx, term), offset)
        self._mark.wrote()

    @_locked
    def clear(self) -> None:
        self._check()
        self._settle()
        if self._dump_load.holds_back(bool(self._tick_owners), bool(len(self._index))):
            # Startup __loadDumpFile: wait for the two dump entries, maybe keep our tail.
            self._dump_load.stash = self._index.take_all()
            return
        self._dump_load.startup = False
        self._dump.make_durable()
        self._rewrite([])

    def _finish_dump_load(self, keep_tail: bool) -> None:
        keep = self._dump_load.finish(self._index[:], keep_tail)
        self._dump.make_durable()
        self._rewrite(keep)

    def _settle(self) -> None:
        if self._dump_load.pending:
            self._finish_dump_load(keep_tail=False)

    @_locked
    def deleteEntriesFrom(self, entryFrom: int) -> None:
        self._check()
        self._settle()
        self._dump_load.startup = False
        n = len(self._index)
        i = max(0, entryFrom + n if entryFrom < 0 else entryFrom)
        if i >= n:
            return
        self._file.truncate(self._index.offset(i))
        self._index.truncate(i)
        self._mark.truncated(self._file.size, self._index.last_index)

    @_locked
    def deleteEntriesTo(self, entryTo: int) -> None:
        self._check()
        self._settle()
        self._dump_load.startup = False
        n = len(self._index)
        i = min(max(0, entryTo + n if entryTo < 0 else entryTo), n)
        if i == 0:
            return
        self._dump.make_durable()
        self._rewrite(self[i:])

    def __getitem__(self, item: Any) -> Any:
        return self._index[item]

    def __len__(self) -> int:
        return len(self._index)

    @_locked
    def applied_bytes(self, last_applied: int) -> int:
        """Bytes of the log's entries up to and including ``last_applied``: how much a restart
        replays after its dump, and what a compaction would drop (raft.snapshot_turns)."""
        return self._index.bytes_before(last_applied + 1, self._file.size)

    def log_bytes(self) -> int:
        """Bytes of every entry the log holds (the journal file past its header)."""
        return self.applied_bytes(self._index.last_index)

    def _destroy(self) -> None:
        if self._syncer is not None:
            self._syncer.stop()       # outside the lock: its last step may be waiting for it
        self._destroy_locked()

    @_locked
    def _destroy_locked(self) -> None:
        if self._closed:
            return
        try:
            if self._failure.failed is None:
                self._settle()
                if self._policy.durable:
                    self.sync()
                self._meta.store_if_dirty()
        finally:
            self._closed = True
            self._file.close()

    def flush(self) -> None:
        """Force an fdatasync of unsynced entries, whatever the policy."""
        self.sync(force=True)

    @_locked
    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Guard (c): the commit index must never move over entries not on our disk (in parallel
        # mode the leader's commit is capped at durable_index by its caller instead).
        if self._policy.sync_first(self._unsynced()):
            self.sync()
        self._meta.set_commit_index(raftCommitIndex)

    def getRaftCommitIndex(self) -> int:
        ci = self._meta.commit_index
        last = self._index.last_index
        if len(self._index) and ci > last:
            logger.warning("journal %s: stored commit index %d is past the journal end %d; clamping",
                           self.path, ci, last)
            ci = last
        return ci

    @_locked
    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._check()
        if votedForNodeId is not None and not isinstance(votedForNodeId, (str, int)):
            raise TypeError("votedForNodeId must be str, int or None, got %r" % (votedForNodeId,))
        # Raft: term and vote are durable before any message reflecting them is sent.
        self._meta.set_term_and_vote(term, votedForNodeId)

    def getCurrentTerm(self) -> int:
        return self._meta.current_term

    def getVotedForNodeId(self) -> Any:
        return self._meta.voted_for

    def onOneSecondTimer(self) -> None:
        """The commit-index hint, at most once a second: two fsyncs the tick thread need not
        wait for (a hint; term and vote are stored by setCurrentTerm before they are acted
        on), so the background thread writes it."""
        if self._meta.dirty and self._failure.failed is None and not self._closed:
            self._background().request_meta()

    def store_meta_if_dirty(self) -> None:
        """The background thread's meta step (see onOneSecondTimer)."""
        with self._meta.lock:
            if self._meta.dirty and self._failure.failed is None and not self._closed:
                self._meta.store()



# --------------------------------------------------------------------------- transport


class DurableTCPTransport(GuardedTCPTransport):
    """GuardedTCPTransport (transport.py: the Raft port's guards) that makes the journal durable before any message leaves the node.

    At construction it finds the SyncObj's journal (``SyncObj.__init__`` creates the journal before
    the transport). If that journal is a :class:`DurableJournal`, the transport registers the
    journal's tick callback *before* TCPTransport's own, so no tick can run without it.

    It also keeps every peer link warm. pysyncobj drops a connection *when it next sends on it*
    if nothing was read from it for ``connectionTimeout``, and discards that message. Followers
    never talk to each other, so after a leader died the first RequestVote between the two
    survivors was always lost, and the election waited a second timeout (the term jumped by
    two; failover took ~1.8 s instead of ~0.9 s). A tiny message every KEEPALIVE_S fixes it;
    SyncObj ignores message types it does not know.
    """

    KEEPALIVE_S = 1.0
    KEEPALIVE = {"type": "schedd_keepalive"}

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        self._last_keepalive = 0.0
        journal = getattr(syncObj, "_SyncObj__raftLog", None)
        self._durable_journal = journal if isinstance(journal, DurableJournal) else None
        if self._durable_journal is not None:
            self._durable_journal.register_tick(syncObj)
        else:
            logger.warning("DurableTCPTransport: the SyncObj journal is %s, not a DurableJournal; "
                           "messages are sent without a journal sync", type(journal).__name__)
        super().__init__(syncObj, selfNode, otherNodes)

    def send(self, node: Any, message: Any) -> bool:
        j = self._durable_journal
        if j is not None:
            j.before_send()
        return super().send(node, message)

    def _tick_need(self) -> float | None:
        """The next keepalive, besides the transport's own needs (raft_patches: deadline sleep)."""
        left = max(0.0, self.KEEPALIVE_S - (time.monotonic() - self._last_keepalive))
        need = super()._tick_need()
        return left if need is None else min(need, left)

    def _onTick(self) -> None:
        super()._onTick()
        now = time.monotonic()
        if now - self._last_keepalive >= self.KEEPALIVE_S:
            self._last_keepalive = now
            for node in list(self._nodes):
                self.send(node, self.KEEPALIVE)


# --------------------------------------------------------------------------- glue

_ORIGINAL_CREATE_JOURNAL = pysyncobj.syncobj.createJournal


def durable_journal_factory(fsync: str = "always", batch_interval: float = 0.05,
                            dump_path: str | None = None,
                            on_fatal: Callable[[BaseException], None] | None = None,
                            on_created: Callable[[DurableJournal], None] | None = None,
                            resident_bytes: int = RESIDENT_BYTES) -> Callable[..., DurableJournal]:
    """Return ``createJournal(journalFile)`` building a :class:`DurableJournal`."""
    check_policy(fsync)

    def createJournal(journalFile: str | None = None) -> DurableJournal:
        if journalFile is None:
            raise ValueError("durable journal installed but conf.journalFile is None; set "
                             "conf.journalFile (and conf.fullDumpFile)")
        j = DurableJournal(journalFile, dump_path=dump_path, fsync=fsync,
                           batch_interval=batch_interval, on_fatal=on_fatal, resident_bytes=resident_bytes)
        if on_created is not None:
            on_created(j)
        return j

    return createJournal


def patch_create_journal(factory: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``pysyncobj.syncobj.createJournal`` (what SyncObj.__init__ calls) use ``factory``.

    PROCESS-GLOBAL: every SyncObj constructed afterwards in this process uses it (our deployment
    model is one SyncObj per process). Returns the previous function.
    """
    prev = pysyncobj.syncobj.createJournal
    pysyncobj.syncobj.createJournal = factory
    return prev


def restore_create_journal() -> None:
    """Undo :func:`patch_create_journal` (restore pysyncobj's own createJournal)."""
    pysyncobj.syncobj.createJournal = _ORIGINAL_CREATE_JOURNAL


def attach(syncobj: Any, journal: DurableJournal | None = None) -> DurableJournal:
    """Check that ``syncobj`` runs on a DurableJournal and register the journal's tick callback.

    Idempotent (DurableTCPTransport has usually registered the callback already). Raises
    RuntimeError if the SyncObj was built without the durable journal, or if the policy is
    ``always`` and the transport is not a DurableTCPTransport (persist-before-send would not hold).
    """
    actual: object = getattr(syncobj, "_SyncObj__raftLog", None)
    if not isinstance(actual, DurableJournal) or (journal is not None and actual is not journal):
        raise RuntimeError("SyncObj was not built with this DurableJournal (got %s): call "
                           "prepare_durable_journal() before constructing the SyncObj and set "
                           "conf.journalFile" % type(actual).__name__)
    transport = getattr(syncobj, "_SyncObj__transport", None)
    if not isinstance(transport, DurableTCPTransport):
        msg = ("SyncObj transport is %s, not DurableTCPTransport: pass transportClass="
               "hooks.transport_class" % type(transport).__name__)
        if actual.policy == "always":
            raise RuntimeError(msg)
        logger.warning(msg)
    actual.register_tick(syncobj)
    return actual


@dataclass
class DurableJournalHooks:
    """Returned by :func:`prepare_durable_journal`; see the module docstring for use."""
    data_dir: str
    journal_file: str
    dump_file: str
    fsync: str
    batch_interval: float
    transport_class: type[DurableTCPTransport] = DurableTCPTransport
    journal: DurableJournal | None = field(default=None, repr=False)

    @property
    def conf_kwargs(self) -> dict[str, str]:
        """``SyncObjConf`` keyword arguments: journalFile and fullDumpFile."""
        return {"journalFile": self.journal_file, "fullDumpFile": self.dump_file}

    def attach(self, syncobj: Any) -> DurableJournal:
        self.journal = attach(syncobj, self.journal)
        return self.journal


DIR_MODE, FILE_MODE = 0o700, 0o600


def secure_data_dir(data_dir: str) -> list[str]:
    """Create ``data_dir`` 0700, or make an existing one 0700 and every file in it 0600, logging
    each change; returns what was changed. Whoever starts the node and whatever its umask: the
    journal, meta and dump hold job env values in clear and are pickles the node loads, so
    nobody else may read or write them. Symlinks are left alone (never followed)."""
    old_umask = os.umask(0o077)
    try:
        os.makedirs(data_dir, mode=DIR_MODE, exist_ok=True)
    finally:
        os.umask(old_umask)
    changed = []
    for root, dirs, files in os.walk(data_dir):
        for name, want in [(".", DIR_MODE)] + [(d, DIR_MODE) for d in dirs] + [(f, FILE_MODE) for f in files]:
            path = os.path.normpath(os.path.join(root, name))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == want:
                continue
            os.chmod(path, want)
            changed.append(path)
            logger.warning("data dir: %s was %04o -> %04o (only this node's user may read it)",
                           path, stat.S_IMODE(st.st_mode), want)
    return changed


def prepare_durable_journal(data_dir: str, *, fsync: str = "always", batch_interval: float = 0.05,
                            journal_name: str = "raft.journal", dump_name: str = "raft.dump",
                            on_fatal: Callable[[BaseException], None] | None = None,
                            resident_bytes: int = RESIDENT_BYTES) -> DurableJournalHooks:
    """Secure ``data_dir`` (:func:`secure_data_dir`) and patch pysyncobj (process-global) to build a DurableJournal.
    ``resident_bytes``: how much of the log's newest commands it keeps in memory.

    Also calls :func:`make_snapshots_durable` (unless ``fsync="never"``).

    Returns hooks with ``journal_file``, ``dump_file``, ``conf_kwargs``, ``transport_class`` and
    ``attach(syncobj)``.
    """
    secure_data_dir(data_dir)
    data_dir = os.path.abspath(data_dir)
    hooks = DurableJournalHooks(data_dir=data_dir,
                                journal_file=os.path.join(data_dir, journal_name),
                                dump_file=os.path.join(data_dir, dump_name),
                                fsync=fsync, batch_interval=batch_interval)

    def _created(j: DurableJournal) -> None:
        hooks.journal = j

    make_snapshots_durable(fsync != "never")
    patch_create_journal(durable_journal_factory(fsync=fsync, batch_interval=batch_interval,
                                                 dump_path=hooks.dump_file, on_fatal=on_fatal,
                                                 on_created=_created, resident_bytes=resident_bytes))
    return hooks


# --------------------------------------------------------------------------- snapshots

_REAL_GZIP = _gzip
_ORIGINAL_ATOMIC_REPLACE = pysyncobj.serializer.atomicReplace


def _private_atomic_replace(src: str, dst: str) -> None:
    """pysyncobj's dump (fork child or snapshot install) is created with the process umask: make
    it FILE_MODE before it takes its final name."""
    os.chmod(src, FILE_MODE)
    _ORIGINAL_ATOMIC_REPLACE(src, dst)


def _durable_atomic_replace(src: str, dst: str) -> None:
    os.chmod(src, FILE_MODE)
    fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _ORIGINAL_ATOMIC_REPLACE(src, dst)
    fsync_dir(os.path.dirname(os.path.abspath(dst)))


def make_snapshots_durable(enable: bool = True) -> None:
    """Make pysyncobj fsync every snapshot dump before and after its rename (process-global).

    Replaces ``pysyncobj.serializer.atomicReplace`` (a plain ``os.rename``) with fsync(tmp),
    rename, fsync(dir). A dump therefore never becomes visible under its final name before its
    data is on disk. For local compaction this runs in pysyncobj's fork child, so it costs the tick
    thread nothing. For a snapshot received from the leader it runs once per install. Without it,
    a power loss right after the child's rename can leave a garbage dump, and pysyncobj then fails
    to load it and never applies the log again. ``enable=False`` restores the stock rename (still making the dump 0600).
    ``prepare_durable_journal`` calls this unless ``fsync="never"``.
    """
    pysyncobj.serializer.atomicReplace = _durable_atomic_replace if enable else _private_atomic_replace


def speed_up_snapshots(level: int = 1) -> None:
    """Make pysyncobj's snapshot dump use gzip ``compresslevel=level`` (default 1 instead of 9).

    Replaces the module attribute ``pysyncobj.serializer.gzip`` with a shim whose ``GzipFile``
    defaults ``compresslevel`` to ``level``. Everything else goes to the real gzip module.
    Reading is unaffected (gzip streams decompress whatever the level), fork mode keeps working
    (the child inherits the shim), and the call is process-global. ``level=9`` is the stock
    behaviour.
    """
    if not 0 <= int(level) <= 9:
        raise ValueError("gzip level must be 0..9")
    level = int(level)

    class GzipFile(_REAL_GZIP.GzipFile):
        def __init__(self, filename: Any = None, mode: Any = None, compresslevel: Any = None,
                     fileobj: Any = None, mtime: Any = None) -> None:
            if compresslevel is None:
                compresslevel = level
            super().__init__(filename, mode, compresslevel, fileobj, mtime)

    shim = types.ModuleType("schedd_gzip_shim")
    vars(shim).update(__getattr__=lambda name: getattr(_REAL_GZIP, name),   # PEP 562 module __getattr__
                      GzipFile=GzipFile, compresslevel=level)
    pysyncobj.serializer.gzip = shim


# --------------------------------------------------------------------------- seeding (restore)

class SeedError(Exception):
    """A data directory cannot be seeded (not empty, not writable); the message says why."""


def seed_data_dir(data_dir: str, image: Any, *, index: int, term: int, cluster: list[str],
                  journal_name: str = "raft.journal", dump_name: str = "raft.dump") -> None:
    """Make ``data_dir`` (new or empty) what a node holds after a compaction at ``index``: the
    state image as pysyncobj's dump ``([selfData, consumer image], last entry, entry before it,
    cluster nodes)``, and a journal holding just those two boundary entries (no-ops at
    ``index - 1`` and ``index``, of ``term``), with term ``term``, no vote and commit index
    ``index`` in its meta. pysyncobj then starts as from its own dump (``__loadDumpFile`` keeps a
    journal that begins with the dump's entries) and its log continues at ``index + 1``.

    Every node of a new cluster seeded from one image gets the same boundary entries, so their
    logs agree from the start; ``cluster`` (the raft addresses of the NEW cluster, this node's
    included) is the topology pysyncobj keeps in the dump. The term must be at least the term
    the image's epoch was recorded in: a new leader's epoch entry only counts when its term is
    higher (schedd.core.state `_epoch`), so restoring with the source's term keeps leadership
    working while the new cluster's log history starts fresh (nothing of the old log is kept)."""
    if index < 2:
        raise SeedError(f"an image at index {index} has nothing to restore")
    if os.path.isdir(data_dir) and os.listdir(data_dir):
        raise SeedError(f"data dir {data_dir} is not empty: restore only seeds a new node "
                        "(move it away, or pick another directory)")
    secure_data_dir(data_dir)
    journal_path, dump_path = os.path.join(data_dir, journal_name), os.path.join(data_dir, dump_name)
    noop = bytes([pysyncobj.syncobj._COMMAND_TYPE.NO_OP])
    prev, last = (noop, index - 1, term), (noop, index, term)
    nodes = {pysyncobj.node.TCPNode(addr) for addr in cluster}
    tmp = dump_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        with _REAL_GZIP.GzipFile(fileobj=f, mode="wb", compresslevel=1) as g:
            pysyncobj.pickle.dump(([{}, image], last, prev, nodes), g)
    _durable_atomic_replace(tmp, dump_path)
    journal = DurableJournal(journal_path, dump_path=dump_path, fsync="always")
    try:
        journal.add(*prev)
        journal.add(*last)
        journal.setCurrentTerm(term, None)
        journal.setRaftCommitIndex(index)
    finally:
        journal._destroy()
