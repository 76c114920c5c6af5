"""Unit tests for schedd.replication.journal.DurableJournal (no network except one 1-node SyncObj)."""

import errno
import json
import logging
import os
import pickle
import socket
import struct
import subprocess
import sys
import textwrap
import time
import zlib

import pytest

import pysyncobj.serializer
import pysyncobj.syncobj
from schedd.ports.fakes import wait_until
from schedd.replication import journal as jmod
from schedd.replication.journal import (
    DurableJournal,
    JournalCorruptError,
    JournalIOError,
)
from schedd.replication.journal_index import RESIDENT_BYTES
from schedd.replication.journal_records import HEADER_SIZE, encode_record

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def entry(i, term=1, size=None):
    cmd = (b"cmd-%d-" % i) * (1 if size is None else max(1, size // 8))
    return (cmd, i, term)


def open_j(tmp_path, **kw):
    kw.setdefault("dump_path", str(tmp_path / "raft.dump"))
    kw.setdefault("on_fatal", lambda exc: None)
    return DurableJournal(str(tmp_path / "raft.journal"), **kw)


def fill(j, n, start=1, term=1):
    out = []
    for i in range(start, start + n):
        e = entry(i, term)
        j.add(*e)
        out.append(e)
    return out


class FakeSyncObj:
    def __init__(self):
        self.callbacks = []

    def addOnTickCallback(self, cb):
        self.callbacks.append(cb)


@pytest.fixture
def events(monkeypatch):
    """Record fsync/fdatasync/rename calls as (op, path) in order."""
    log = []
    real_fsync, real_fdatasync, real_rename = os.fsync, os.fdatasync, os.rename

    def path_of(fd):
        try:
            return os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            return "?"

    def fsync(fd):
        log.append(("fsync", path_of(fd)))
        return real_fsync(fd)

    def fdatasync(fd):
        log.append(("fdatasync", path_of(fd)))
        return real_fdatasync(fd)

    def rename(a, b):
        log.append(("rename", os.path.abspath(a), os.path.abspath(b)))
        return real_rename(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "rename", rename)
    return log


# ----------------------------------------------------------------------------- format / round trip


def test_round_trip_and_format(tmp_path):
    j = open_j(tmp_path)
    assert len(j) == 0
    expected = fill(j, 20)
    j.add(b"", 21, 2)  # empty command
    j.add(b"\x00" * 100000, 22, 2)  # big command
    expected += [(b"", 21, 2), (b"\x00" * 100000, 22, 2)]
    j.add("text-command", 23, 2)  # str is stored as utf-8 bytes, like pysyncobj.pickle.to_bytes
    expected.append((b"text-command", 23, 2))
    assert list(j) == expected
    j.sync()
    j._destroy()

    raw = (tmp_path / "raft.journal").read_bytes()
    assert raw[:8] == b"SCHDJRNL" and struct.unpack_from("<I", raw, 8)[0] == 1
    # first record: [u32 len][u32 crc][u64 idx][u64 term][cmd]
    plen, crc = struct.unpack_from("<II", raw, HEADER_SIZE)
    payload = raw[HEADER_SIZE + 8:HEADER_SIZE + 8 + plen]
    assert zlib.crc32(payload) == crc
    assert struct.unpack_from("<QQ", payload) == (1, 1) and payload[16:] == expected[0][0]

    j2 = open_j(tmp_path)
    assert list(j2) == expected
    assert all(isinstance(e, tuple) for e in j2)
    assert j2.durable_index == 23 and not j2.dirty
    j2._destroy()


@pytest.mark.parametrize("resident", [RESIDENT_BYTES, 0], ids=["in_ram", "read_back"])
def test_getitem_slices_and_negative_indexes_like_a_list(resident, tmp_path):
    j = open_j(tmp_path, resident_bytes=resident)
    model = fill(j, 12)
    for k in list(range(-12, 12)):
        assert j[k] == model[k]
    for s in [slice(None), slice(3), slice(3, 7), slice(-3, None), slice(-5, -1), slice(5, 100),
              slice(100, None), slice(0, 10, 3), slice(None, None, -1)]:
        assert j[s] == model[s], s
    with pytest.raises(IndexError):
        j[12]
    with pytest.raises(IndexError):
        j[-13]
    assert len(j) == len(model)
    # deleteEntriesFrom / To with negative indexes follow del l[i:] / l[i:] semantics
    j.deleteEntriesFrom(-2)
    del model[-2:]
    assert list(j) == model
    j.deleteEntriesTo(-3)
    model = model[-3:]
    assert list(j) == model
    j._destroy()
    assert list(open_j(tmp_path, resident_bytes=resident)) == model


def test_only_the_newest_commands_stay_in_ram_and_older_ones_read_back_equal(tmp_path):
    """A big log between compactions (a million jobs registered) costs bounded RAM: commands
    past resident_bytes are read back from the file, byte for byte, by index and by slice."""
    j = open_j(tmp_path, resident_bytes=10_000)
    model = [entry(i, size=1000) for i in range(1, 101)]
    for e in model:
        j.add(*e)
    assert j._index.resident <= 10_000 and 80 < j._index.evicted < len(model)
    assert [j[k] for k in range(-100, 100)] == model + model
    assert j[5:50] == model[5:50] and j[:] == model and j[95:] == model[95:]
    j.deleteEntriesFrom(60)            # truncating into the resident tail
    assert j[:] == model[:60] and j._index.resident <= 10_000
    j.deleteEntriesTo(20)              # compaction: the kept tail is read back and rewritten
    assert j[:] == model[20:60] and j._index.resident <= 10_000
    j._destroy()
    j2 = open_j(tmp_path, resident_bytes=10_000)   # a restart stays bounded too
    assert j2._index.resident <= 10_000 and j2[:] == model[20:60]
    j2._destroy()


# ----------------------------------------------------------------------------- torn tail / corruption


def _journal_bytes(tmp_path):
    return (tmp_path / "raft.journal").read_bytes()


def _write_journal(tmp_path, data):
    (tmp_path / "raft.journal").write_bytes(data)


def _make(tmp_path, n=5):
    j = open_j(tmp_path)
    model = fill(j, n)
    offsets = list(j._index.offsets)
    j._destroy()
    return model, offsets


@pytest.mark.parametrize("cut", ["mid_payload", "mid_header", "one_byte_short"])
def test_torn_tail_truncated_last_record_is_dropped(tmp_path, caplog, cut):
    model, offsets = _make(tmp_path)
    raw = _journal_bytes(tmp_path)
    last = offsets[-1]
    cut_at = {"mid_payload": last + 8 + 5, "mid_header": last + 3, "one_byte_short": len(raw) - 1}[cut]
    _write_journal(tmp_path, raw[:cut_at])
    with caplog.at_level(logging.WARNING, logger=jmod.__name__):
        j = open_j(tmp_path)
    assert list(j) == model[:-1]
    assert "torn tail" in caplog.text
    assert os.path.getsize(tmp_path / "raft.journal") == last  # truncated on disk
    assert j.stats["torn_bytes_dropped"] == cut_at - last
    # the journal keeps working after recovery and the new record is not mixed with the torn bytes
    j.add(*entry(5, 2))
    j.sync()
    j._destroy()
    assert list(open_j(tmp_path)) == model[:-1] + [entry(5, 2)]


@pytest.mark.parametrize("where", ["payload", "crc", "length_too_big", "term"])
def test_torn_tail_flipped_bytes_in_last_record_is_dropped(tmp_path, where):
    model, offsets = _make(tmp_path)
    raw = bytearray(_journal_bytes(tmp_path))
    last = offsets[-1]
    pos = {"payload": len(raw) - 2, "crc": last + 5, "length_too_big": last + 2, "term": last + 8 + 9}[where]
    raw[pos] ^= 0x5A
    _write_journal(tmp_path, bytes(raw))
    j = open_j(tmp_path)
    assert list(j) == model[:-1]
    assert os.path.getsize(tmp_path / "raft.journal") == last
    j._destroy()


def test_torn_tail_zero_filled_extension_is_dropped(tmp_path):
    # after a power loss a file can come back longer than its data, padded with zeros
    model, offsets = _make(tmp_path)
    raw = _journal_bytes(tmp_path)
    _write_journal(tmp_path, raw + b"\0" * 8192)
    j = open_j(tmp_path)
    assert list(j) == model
    assert os.path.getsize(tmp_path / "raft.journal") == len(raw)
    j._destroy()


@pytest.mark.parametrize("where", ["payload", "length"])
def test_corruption_in_the_middle_is_refused(tmp_path, where):
    model, offsets = _make(tmp_path, n=8)
    raw = bytearray(_journal_bytes(tmp_path))
    rec = offsets[3]
    if where == "payload":
        raw[rec + 8 + 17] ^= 0xFF  # inside the command of record idx 4
    else:
        raw[rec + 1] ^= 0x7F  # the length field: cannot skip to the next record by length
    _write_journal(tmp_path, bytes(raw))
    with pytest.raises(JournalCorruptError) as ei:
        open_j(tmp_path)
    msg = str(ei.value)
    assert "corrupted in the middle" in msg and "offset %d" % rec in msg and "Refusing to start" in msg
    assert "after index 3" in msg
    # nothing was truncated: the evidence stays on disk
    assert _journal_bytes(tmp_path) == bytes(raw)


def test_corrupt_first_record_of_a_compacted_journal_is_refused(tmp_path):
    (tmp_path / "raft.dump").write_bytes(b"d")
    j = open_j(tmp_path)
    fill(j, 1000)
    j.deleteEntriesTo(990)  # journal now starts at index 991
    offsets = list(j._index.offsets)
    j._destroy()
    raw = bytearray(_journal_bytes(tmp_path))
    raw[offsets[0] + 8 + 20] ^= 0x01
    _write_journal(tmp_path, bytes(raw))
    with pytest.raises(JournalCorruptError, match="valid record \\(index 992\\)"):
        open_j(tmp_path)


def test_bad_header_and_stock_journal_are_refused(tmp_path):
    _write_journal(tmp_path, b"PYSYNCOBJ" + b"\0" * 60)
    with pytest.raises(JournalCorruptError, match="stock pysyncobj FileJournal"):
        open_j(tmp_path)
    _write_journal(tmp_path, b"SCHDJ")
    with pytest.raises(JournalCorruptError, match="truncated header"):
        open_j(tmp_path)
    _write_journal(tmp_path, struct.pack("<8sII", b"SCHDJRNL", 99, 0))
    with pytest.raises(JournalCorruptError, match="format version 99"):
        open_j(tmp_path)
    _write_journal(tmp_path, b"")  # zero-length (e.g. never-mode power loss): new journal
    j = open_j(tmp_path)
    assert len(j) == 0
    j._destroy()


# ----------------------------------------------------------------------------- truncation / compaction / clear


@pytest.mark.parametrize("resident", [RESIDENT_BYTES, 0], ids=["in_ram", "read_back"])
def test_delete_entries_from_survives_reload(resident, tmp_path):
    j = open_j(tmp_path, resident_bytes=resident)
    model = fill(j, 10)
    j.sync()
    j.deleteEntriesFrom(6)
    assert j.dirty  # truncation is synced with the next batch, not on its own
    assert os.path.getsize(tmp_path / "raft.journal") == j._index.offsets[-1] + len(encode_record(*model[5]))
    model = model[:6]
    # conflicting entries replace the truncated ones
    new = [entry(7, 3), entry(8, 3)]
    for e in new:
        j.add(*e)
    j.sync()
    j.deleteEntriesFrom(100)  # beyond the end: no-op
    j._destroy()
    assert list(open_j(tmp_path, resident_bytes=resident)) == model + new


@pytest.mark.parametrize("resident", [RESIDENT_BYTES, 0], ids=["in_ram", "read_back"])
def test_delete_entries_to_fsyncs_dump_then_rewrites_durably(resident, tmp_path, events):
    dump = tmp_path / "raft.dump"
    dump.write_bytes(b"snapshot")
    j = open_j(tmp_path, resident_bytes=resident)
    model = fill(j, 10)
    j.sync()
    events.clear()
    j.deleteEntriesTo(4)
    model = model[4:]
    assert list(j) == model
    jpath = str(tmp_path / "raft.journal")
    tmp = jpath + ".rewrite.tmp"
    assert events == [
        ("fsync", str(dump)),            # 1. the dump pysyncobj's fork child renamed without fsync
        ("fsync", str(tmp_path)),        # 2. ...and its directory entry
        ("fsync", tmp),                  # 3. the kept entries in a new file
        ("rename", tmp, jpath),          # 4. atomically replace the journal
        ("fsync", str(tmp_path)),        # 5. make the rename durable
    ]
    assert not j.dirty and j.durable_index == 10
    j.add(*entry(11))
    j.sync()
    model.append(entry(11))
    j._destroy()
    j2 = open_j(tmp_path, resident_bytes=resident)
    assert list(j2) == model
    assert [o for o in j2._index.offsets][0] == HEADER_SIZE
    j2._destroy()


def test_clear_survives_reload_and_fsyncs_dump_first(tmp_path, events):
    (tmp_path / "raft.dump").write_bytes(b"snapshot")
    j = open_j(tmp_path)
    fill(j, 5)
    j.on_tick()  # past startup: a clear() now is a snapshot install, no tail kept
    events.clear()
    j.clear()
    assert len(j) == 0
    assert events[0] == ("fsync", str(tmp_path / "raft.dump"))
    assert events[-1] == ("fsync", str(tmp_path))
    j.add(*entry(40, 4))
    j.add(*entry(41, 4))
    j.sync()
    j._destroy()
    assert list(open_j(tmp_path)) == [entry(40, 4), entry(41, 4)]


@pytest.mark.parametrize("resident", [RESIDENT_BYTES, 0], ids=["in_ram", "read_back"])
def test_startup_dump_load_keeps_entries_after_the_dump_point(resident, tmp_path, caplog):
    """pysyncobj's startup __loadDumpFile clears the journal when its first two entries differ from
    the dump's (crash between the dump rename and deleteEntriesTo). The entries after the dump
    point must survive."""
    j = open_j(tmp_path, resident_bytes=resident)
    model = fill(j, 10)
    j.sync()
    j._destroy()
    j = open_j(tmp_path, resident_bytes=resident)
    j.register_tick(FakeSyncObj())  # DurableTCPTransport does this during SyncObj.__init__
    with caplog.at_level(logging.WARNING, logger=jmod.__name__):
        j.clear()
        j.add(*model[3])  # dump prevEntry (idx 4)
        j.add(*model[4])  # dump lastAppliedEntry (idx 5)
    assert list(j) == model[3:]
    assert "would have discarded 5" in caplog.text
    j.on_tick()
    j._destroy()
    assert list(open_j(tmp_path, resident_bytes=resident)) == model[3:]


def test_startup_dump_load_does_not_keep_a_divergent_tail(tmp_path):
    j = open_j(tmp_path)
    fill(j, 10)
    j._destroy()
    j = open_j(tmp_path)
    j.register_tick(FakeSyncObj())
    j.clear()
    j.add(*entry(4, 1))
    j.add(*entry(5, 9))  # same index, different term: not our entry
    assert list(j) == [entry(4, 1), entry(5, 9)]
    j._destroy()
    assert list(open_j(tmp_path)) == [entry(4, 1), entry(5, 9)]


def test_snapshot_install_after_startup_drops_everything(tmp_path):
    j = open_j(tmp_path)
    model = fill(j, 10)
    j.register_tick(FakeSyncObj())
    j.on_tick()  # the first tick callback ends the startup phase
    j.clear()
    j.add(*model[3])
    j.add(*model[4])
    assert list(j) == model[3:5]
    j._destroy()
    assert list(open_j(tmp_path)) == model[3:5]


# ----------------------------------------------------------------------------- meta


def test_term_and_vote_are_durable_before_set_current_term_returns(tmp_path, events):
    j = open_j(tmp_path)
    events.clear()
    j.setCurrentTerm(7, "127.0.0.1:4001")
    meta = str(tmp_path / "raft.journal.meta")
    assert events == [("fsync", meta + ".tmp"), ("rename", meta + ".tmp", meta), ("fsync", str(tmp_path))]
    # a second, independent open sees it right away (as after a crash right after the vote)
    j2 = open_j(tmp_path)
    assert (j2.getCurrentTerm(), j2.getVotedForNodeId()) == (7, "127.0.0.1:4001")
    j.setCurrentTerm(8, None)
    j3 = open_j(tmp_path)
    assert (j3.getCurrentTerm(), j3.getVotedForNodeId()) == (8, None)
    for x in (j, j2, j3):
        x._destroy()


def test_term_and_vote_are_durable_even_with_fsync_never(tmp_path, events):
    j = open_j(tmp_path, fsync="never")
    events.clear()
    j.setCurrentTerm(3, "a:1")
    assert [e[0] for e in events] == ["fsync", "rename", "fsync"]
    j._destroy()


def test_meta_is_json_not_pickle(tmp_path):
    j = open_j(tmp_path)
    j.setCurrentTerm(5, "10.0.0.1:7000")
    j.setRaftCommitIndex(1)
    j.onOneSecondTimer()
    wait_until(lambda: not j._meta.dirty, timeout=30, what="the background meta write")
    raw = (tmp_path / "raft.journal.meta").read_bytes()
    assert not raw.startswith(b"\x80")
    meta = json.loads(raw)
    assert meta == {"format": "schedd-raft-meta", "version": 1, "currentTerm": 5,
                    "votedForNodeId": "10.0.0.1:7000", "raftCommitIndex": 1}
    with pytest.raises(TypeError):
        j.setCurrentTerm(6, object())
    j._destroy()
    # a pickled meta (stock pysyncobj) is refused, never unpickled
    (tmp_path / "raft.journal.meta").write_bytes(pickle.dumps({"currentTerm": 1}, protocol=2))
    with pytest.raises(JournalCorruptError, match="pickle"):
        open_j(tmp_path)
    (tmp_path / "raft.journal.meta").write_bytes(b'{"currentTerm": 1')
    with pytest.raises(JournalCorruptError, match="unreadable meta"):
        open_j(tmp_path)


def test_commit_index_is_a_lazy_hint_and_is_clamped(tmp_path):
    j = open_j(tmp_path)
    fill(j, 10)
    j.sync()
    j.setRaftCommitIndex(9)
    assert not (tmp_path / "raft.journal.meta").exists()  # lazy: stored by onOneSecondTimer
    j.onOneSecondTimer()
    wait_until(lambda: json.loads((tmp_path / "raft.journal.meta").read_bytes())["raftCommitIndex"] == 9,
               timeout=30, what="the background meta write")
    # A follower sets the commit index on every heartbeat; the same value again is no change
    # to store (an idle cluster rewrote and fsynced every node's meta file once a second).
    j.setRaftCommitIndex(9)
    assert not j._meta.dirty
    j.setRaftCommitIndex(10)
    assert j._meta.dirty
    j._destroy()
    assert open_j(tmp_path).getRaftCommitIndex() == 10
    # lose the tail (e.g. unsynced data after a power loss): the hint must not point past the log
    j = open_j(tmp_path)
    j.deleteEntriesFrom(5)
    j.sync()
    j._destroy()
    assert open_j(tmp_path).getRaftCommitIndex() == 5


# ----------------------------------------------------------------------------- fsync policy


@pytest.fixture
def counts(monkeypatch):
    c = {"fdatasync": 0, "fsync": 0}
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fdatasync(fd):
        c["fdatasync"] += 1
        real_fdatasync(fd)

    def fsync(fd):
        c["fsync"] += 1
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    return c


def test_fsync_always_group_commits_once_per_batch(tmp_path, counts):
    j = open_j(tmp_path, fsync="always")
    counts.update(fdatasync=0, fsync=0)
    fill(j, 50)
    assert counts["fdatasync"] == 0 and j.dirty  # adds never sync by themselves
    assert j.sync() is True
    assert counts["fdatasync"] == 1 and not j.dirty and j.durable_index == 50
    assert j.sync() is False  # nothing new: no syscall
    j.before_send()  # heartbeat with nothing new: free
    j.on_tick()
    assert counts["fdatasync"] == 1
    fill(j, 20, start=51)
    j.before_send()  # persist before send
    j.before_send()
    assert counts["fdatasync"] == 2
    fill(j, 5, start=71)
    j.on_tick()  # tick callback
    assert counts["fdatasync"] == 3
    j.add(*entry(76))
    j.setRaftCommitIndex(76)  # guard: commit index never moves over an unsynced entry
    assert counts["fdatasync"] == 4
    assert counts["fsync"] == 0  # the log uses fdatasync only; fsync is for meta/dirs/rewrites
    j._destroy()


def test_fsync_never_never_syncs_the_log(tmp_path, counts):
    counts.update(fdatasync=0, fsync=0)
    j = open_j(tmp_path, fsync="never")
    fill(j, 30)
    j.sync()
    j.before_send()
    j.on_tick()
    j.setRaftCommitIndex(30)
    j.onOneSecondTimer()
    (tmp_path / "raft.dump").write_bytes(b"x")
    j.deleteEntriesTo(10)
    j.deleteEntriesFrom(5)
    j._destroy()
    # the log, compaction and truncation never sync; only the one meta store (file + directory),
    # which is always durable because it carries term/vote
    assert counts == {"fdatasync": 0, "fsync": 2}
    assert j.durable_index == 0 and j.durable_size == 0


def test_fsync_batch_syncs_on_tick_at_most_every_interval(tmp_path, counts, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(jmod.time, "monotonic", lambda: now[0])
    j = open_j(tmp_path, fsync="batch", batch_interval=0.05)
    counts.update(fdatasync=0, fsync=0)
    fill(j, 10)
    j.before_send()  # batch mode does not sync on send
    j.setRaftCommitIndex(5)
    assert counts["fdatasync"] == 0
    now[0] += 0.01
    j.on_tick()
    assert counts["fdatasync"] == 0  # interval not elapsed
    now[0] += 0.05
    j.on_tick()
    assert counts["fdatasync"] == 1
    j.add(*entry(11))
    now[0] += 0.01
    j.on_tick()
    assert counts["fdatasync"] == 1
    now[0] += 0.05
    j.on_tick()
    j.on_tick()
    assert counts["fdatasync"] == 2
    j._destroy()


def test_sync_makes_data_visible_through_another_fd_and_on_durable_fires(tmp_path, monkeypatch):
    seen = []
    real = os.fdatasync

    def fdatasync(fd):
        # at the moment of the fdatasync the file already holds every record (ordering proof)
        seen.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    j = open_j(tmp_path)
    durable = []
    j.on_durable = lambda jj: durable.append((jj.durable_size, jj.durable_index))
    seen.clear()
    model = fill(j, 7)
    j.sync()
    size = os.path.getsize(tmp_path / "raft.journal")
    assert seen == [size] and durable == [(size, 7)]
    with open(tmp_path / "raft.journal", "rb") as f:  # a separate fd
        data = f.read()
    assert data.endswith(encode_record(*model[-1]))
    j._destroy()


# ----------------------------------------------------------------------------- fatal I/O errors


def test_enospc_on_append_is_fatal(tmp_path, monkeypatch):
    fatal = []
    j = open_j(tmp_path, on_fatal=fatal.append)
    fill(j, 3)
    real_write = os.write

    def write(fd, data):
        if fd == j._file.fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(JournalIOError, match="append failed"):
        j.add(*entry(4))
    assert len(fatal) == 1 and isinstance(fatal[0], JournalIOError)
    assert len(j) == 3  # the in-RAM log does not claim the failed entry
    monkeypatch.setattr(os, "write", real_write)
    with pytest.raises(JournalIOError):  # the journal stays failed: no half-working node
        j.add(*entry(4))
    with pytest.raises(JournalIOError):
        j.sync()


def test_eio_on_fdatasync_is_fatal(tmp_path, monkeypatch):
    fatal = []
    j = open_j(tmp_path, on_fatal=fatal.append)
    fill(j, 3)

    def fdatasync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    with pytest.raises(JournalIOError, match="fdatasync failed"):
        j.before_send()
    assert fatal and j.dirty
    with pytest.raises(JournalIOError):  # every later tick aborts too: the node halts
        j.on_tick()


def test_real_write_error_exits_the_process(tmp_path):
    """A real kernel write error (EFBIG from RLIMIT_FSIZE, same path as ENOSPC) with the default
    on_fatal: CRITICAL log, a stderr line and exit code 74, without a traceback or a SIGBUS."""
    script = textwrap.dedent("""
        import logging, resource, signal, sys
        sys.path.insert(0, %r)
        logging.basicConfig(level=logging.INFO)
        from schedd.replication.journal import DurableJournal
        j = DurableJournal(%r, dump_path=None)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        for i in range(1, 100000):
            j.add(b"x" * 1000, i, 1)
            j.before_send()
        print("NOT REACHED")
    """) % (REPO, str(tmp_path / "raft.journal"))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == jmod.FATAL_EXIT_CODE == 74, p.stderr
    assert "NOT REACHED" not in p.stdout
    assert "FATAL: durable journal" in p.stderr and "append failed" in p.stderr
    assert "File too large" in p.stderr or "EFBIG" in p.stderr or "27" in p.stderr
    # and the node can restart from what is on disk (a torn tail at most)
    j = open_j(tmp_path)
    assert len(j) > 0 and [e[1] for e in j] == list(range(1, len(j) + 1))
    j._destroy()


# ----------------------------------------------------------------------------- snapshots


def test_speed_up_snapshots_uses_level_1_and_stays_readable(tmp_path, monkeypatch):
    monkeypatch.setattr(pysyncobj.serializer, "gzip", pysyncobj.serializer.gzip)  # restore after
    data = ({"k%d" % i: (float(i), i, "job-%d" % (i % 97), "x" * (i % 13)) for i in range(20000)},
            (b"a", 5, 1), (b"b", 4, 1), set())

    def dump(path):
        s = pysyncobj.serializer.Serializer(str(path), 65536, False, None, None, None)
        s.serialize(data, 4)
        assert s.checkSerializing()[0] == pysyncobj.serializer.SERIALIZER_STATE.SUCCESS
        return s

    s9 = dump(tmp_path / "d9")
    jmod.speed_up_snapshots(level=1)
    assert pysyncobj.serializer.gzip.GzipFile is not jmod._REAL_GZIP.GzipFile
    s1 = dump(tmp_path / "d1")
    size9, size1 = os.path.getsize(tmp_path / "d9"), os.path.getsize(tmp_path / "d1")
    assert size1 > size9  # level 1 compresses less: the shim is in effect
    assert s1.deserialize() == data and s9.deserialize() == data  # both readable with the shim
    with pytest.raises(ValueError):
        jmod.speed_up_snapshots(level=10)


def test_make_snapshots_durable_fsyncs_the_dump_before_and_after_rename(tmp_path, monkeypatch,
                                                                       restore_pysyncobj):
    jmod.make_snapshots_durable()
    dump = tmp_path / "raft.dump"
    tmp = str(dump) + ".tmp"
    seen = []
    real_fsync = os.fsync

    def fsync(fd):  # (path fsynced, does the final dump name exist yet?)
        seen.append((os.readlink("/proc/self/fd/%d" % fd), dump.exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    s = pysyncobj.serializer.Serializer(str(dump), 65536, False, None, None, None)
    s.serialize(({"a": 1}, (b"x", 2, 1), (b"y", 1, 1), set()), 1)
    assert s.checkSerializing()[0] == pysyncobj.serializer.SERIALIZER_STATE.SUCCESS
    # data fsynced while only the tmp name exists, then renamed, then the directory fsynced
    assert seen == [(tmp, False), (str(tmp_path), True)]
    assert not os.path.exists(tmp)
    assert s.deserialize()[0] == {"a": 1}
    jmod.make_snapshots_durable(False)
    assert pysyncobj.serializer.atomicReplace is jmod._private_atomic_replace   # no fsync, still 0600


# ----------------------------------------------------------------------------- glue with a real SyncObj


@pytest.fixture
def restore_pysyncobj():
    """prepare_durable_journal patches process-global pysyncobj names: put them back."""
    prev = (pysyncobj.syncobj.createJournal, pysyncobj.serializer.atomicReplace,
            pysyncobj.serializer.gzip)
    yield
    (pysyncobj.syncobj.createJournal, pysyncobj.serializer.atomicReplace,
     pysyncobj.serializer.gzip) = prev


def _free_addr():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "127.0.0.1:%d" % port


def test_single_node_syncobj_round_trip(tmp_path, restore_pysyncobj):
    from pysyncobj import SyncObj, SyncObjConf
    from pysyncobj.batteries import ReplDict

    addr = _free_addr()
    for rnd in range(2):
        hooks = jmod.prepare_durable_journal(str(tmp_path / "node"), fsync="always")
        d = ReplDict()
        conf = SyncObjConf(bindAddress=addr, appendEntriesPeriod=0.02, autoTickPeriod=0.01,
                           raftMinTimeout=0.1, raftMaxTimeout=0.2, logCompactionMinEntries=20,
                           **hooks.conf_kwargs)
        o = SyncObj(addr, [], conf=conf, consumers=[d], transportClass=hooks.transport_class)
        try:
            j = hooks.attach(o)
            assert isinstance(j, DurableJournal) and j is hooks.journal
            assert hooks.attach(o) is j  # idempotent
            wait_until(o.isReady, timeout=10, interval=0.01, what="the node to be ready")
            if rnd == 0:
                for i in range(40):  # > logCompactionMinEntries: compaction + dump happen
                    d.set("k%d" % i, i, sync=True, timeout=5)
                deadline = time.monotonic() + 10
                while j.stats["rewrites"] < 2 and time.monotonic() < deadline:
                    d.set("extra", 0, sync=True, timeout=5)
                assert j.stats["rewrites"] >= 2  # creation + at least one compaction
                assert j.durable_index == o.raftCommitIndex
            else:
                wait_until(lambda: d.get("k39") == 39, timeout=10, interval=0.01, what="the restored log")
                assert [d.get("k%d" % i) for i in range(40)] == list(range(40))
        finally:
            o.destroy_synchronous()
    assert os.path.exists(hooks.dump_file)


def test_attach_rejects_a_syncobj_without_the_durable_journal(tmp_path, restore_pysyncobj):
    from pysyncobj import SyncObj, SyncObjConf

    jmod.restore_create_journal()
    addr = _free_addr()
    conf = SyncObjConf(bindAddress=addr, journalFile=str(tmp_path / "stock.journal"),
                       fullDumpFile=str(tmp_path / "stock.dump"), autoTick=False)
    o = SyncObj(addr, [], conf=conf)
    try:
        with pytest.raises(RuntimeError, match="not built with this DurableJournal"):
            jmod.attach(o)
    finally:
        o.destroy()  # autoTick=False: destroys synchronously
    with pytest.raises(ValueError):
        jmod.durable_journal_factory(fsync="sometimes")
    with pytest.raises(ValueError, match="conf.journalFile"):
        jmod.durable_journal_factory(dump_path=None)(None)


def test_applied_bytes_counts_the_records_a_restart_would_replay(tmp_path):
    """applied_bytes(i): the file bytes of the entries through index i (what compaction_bytes
    compares); log_bytes: all of them. Both follow truncation and compaction, and stay exact
    when older commands live only in the file."""
    j = open_j(tmp_path, resident_bytes=3_000)
    sizes = {}
    for i in range(1, 21):
        e = entry(i, size=1000)
        before = j._file.size
        j.add(*e)
        sizes[i] = j._file.size - before
    assert j._index.evicted > 0                     # the oldest commands are in the file only
    assert j.applied_bytes(0) == 0
    assert j.applied_bytes(5) == sum(sizes[i] for i in range(1, 6))
    assert j.applied_bytes(20) == j.applied_bytes(99) == j.log_bytes() == sum(sizes.values())
    j.deleteEntriesTo(10)                           # compaction: entries 11-20 remain
    assert j.log_bytes() == sum(sizes[i] for i in range(11, 21))
    assert j.applied_bytes(10) == 0 and j.applied_bytes(12) == sizes[11] + sizes[12]
    j.deleteEntriesFrom(5)                          # truncation: entries 11-15 remain
    assert j.log_bytes() == sum(sizes[i] for i in range(11, 16))
    j._destroy()
    j2 = open_j(tmp_path, resident_bytes=3_000)     # as a restart reads it
    assert j2.log_bytes() == sum(sizes[i] for i in range(11, 16))
    j2._destroy()


@pytest.mark.parametrize("compaction_bytes", [0, 20_000])
def test_a_log_past_compaction_bytes_is_compacted_whatever_its_entries(tmp_path, restore_pysyncobj,
                                                                        compaction_bytes):
    """A 1-node RepairingSyncObj whose entry and time thresholds are never reached: 40 entries of
    about 1 KB compact once compaction_bytes is 20 KB (the log is cut back below it and a dump is
    written), and never with 0 (pysyncobj's thresholds alone)."""
    from pysyncobj import SyncObjConf
    from pysyncobj.batteries import ReplDict

    from schedd.replication.raft.snapshot_turns import SnapshotTurn
    from schedd.replication.raft_patches import RepairingSyncObj

    addr = _free_addr()
    hooks = jmod.prepare_durable_journal(str(tmp_path / "node"), fsync="always")
    d = ReplDict()
    conf = SyncObjConf(bindAddress=addr, appendEntriesPeriod=0.02, autoTickPeriod=0.01, raftMinTimeout=0.1,
                       raftMaxTimeout=0.2, logCompactionMinEntries=10**6, logCompactionMinTime=10**6,
                       useFork=True, **hooks.conf_kwargs)
    o = RepairingSyncObj(addr, [], conf=conf, consumers=[d], transportClass=hooks.transport_class,
                         snapshot_turn=SnapshotTurn(), compaction_bytes=compaction_bytes)
    try:
        j = hooks.attach(o)
        wait_until(o.isReady, timeout=10, interval=0.01, what="the node to be ready")
        for i in range(40):
            d.set(f"k{i}", "v" * 1000, sync=True, timeout=5)
        if compaction_bytes:
            wait_until(lambda: os.path.exists(hooks.dump_file) and j.log_bytes() < compaction_bytes,
                       timeout=10, interval=0.02, what="a dump, and the log cut below compaction_bytes")
            assert j.stats["rewrites"] >= 2 and len(j) < 40
        else:
            ticks: list[int] = []
            o.addOnTickCallback(lambda: ticks.append(1))     # each tick takes a compaction step
            wait_until(lambda: len(ticks) >= 20, timeout=10, interval=0.01, what="20 ticks")
            assert not os.path.exists(hooks.dump_file) and len(j) > 40 and j.log_bytes() > 40_000
    finally:
        o.destroy_synchronous()
