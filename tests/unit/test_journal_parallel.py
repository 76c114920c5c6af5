"""The durable journal's parallel mode (Raft thesis §10.2.1, the parallel disk write of raft_patches): the
leader's fdatasync and the once-a-second meta write run on the journal's background thread,
never on the Raft tick thread, and a background sync never vouches for a file it did not see."""

from __future__ import annotations

import json
import os
import threading

import pytest

from schedd.ports.fakes import wait_until
from schedd.replication.journal import DurableJournal


def open_j(tmp_path, **kw) -> DurableJournal:
    return DurableJournal(str(tmp_path / "raft.journal"), dump_path=str(tmp_path / "raft.dump"),
                          on_fatal=lambda exc: None, **kw)


def fill(j: DurableJournal, first: int, last: int, term: int = 1) -> None:
    for i in range(first, last + 1):
        j.add(b"cmd-%d" % i, i, term)


class Disk:
    """os.fdatasync / os.fsync as seen by the test: which thread called them, and a gate that
    holds the background thread inside its fdatasync (a slow disk) until opened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on_tick_thread: list[str] = []
        self.in_sync = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        real_fdatasync, real_fsync = os.fdatasync, os.fsync
        tick = threading.current_thread()

        def call(kind, real):
            def wrapped(fd: int) -> None:
                if threading.current_thread() is tick:
                    self.on_tick_thread.append(kind)
                else:
                    self.in_sync.set()
                    assert self.gate.wait(60), "the test never opened the gate"
                real(fd)
            return wrapped

        monkeypatch.setattr(os, "fdatasync", call("fdatasync", real_fdatasync))
        monkeypatch.setattr(os, "fsync", call("fsync", real_fsync))


def test_a_leaders_sends_and_ticks_never_wait_for_its_fdatasync(tmp_path, monkeypatch) -> None:
    j = open_j(tmp_path)
    disk = Disk(monkeypatch)
    disk.gate.clear()                              # the disk is slow
    assert j.set_parallel(True)
    fill(j, 1, 50)
    j.before_send()                                # append_entries to the followers: no wait
    j.on_tick()                                    # asks the background thread
    assert disk.in_sync.wait(30)
    assert disk.on_tick_thread == [] and j.durable_index == 0 and j.dirty
    j.setRaftCommitIndex(0)                        # the leader's cap did the gating: no sync
    assert disk.on_tick_thread == []
    disk.gate.set()
    wait_until(lambda: j.durable_index == 50, timeout=30, what="the background fdatasync")
    assert not j.dirty and j.stats["background_fdatasync"] >= 1
    j._destroy()


def test_a_follower_still_syncs_before_it_sends(tmp_path, monkeypatch) -> None:
    j = open_j(tmp_path)
    disk = Disk(monkeypatch)
    j.set_parallel(True)
    j.set_parallel(False)                          # stepped down
    fill(j, 1, 5)
    j.before_send()                                # its ack covers what it holds
    assert disk.on_tick_thread == ["fdatasync"] and j.durable_index == 5
    j._destroy()


@pytest.mark.parametrize("policy", ["batch", "never"])
def test_parallel_mode_only_under_fsync_always(tmp_path, policy) -> None:
    j = open_j(tmp_path, fsync=policy)
    assert not j.set_parallel(True)                # durable_index is no promise there
    j._destroy()


def test_a_truncation_during_a_background_sync_voids_its_result(tmp_path, monkeypatch) -> None:
    """The background thread synced a file whose entries 5-10 (term 1) the tick thread then
    replaced (term 2, as a stepped-down leader's log is repaired): its durable index must not
    vouch for the new entries 5-10."""
    j = open_j(tmp_path)
    disk = Disk(monkeypatch)
    disk.gate.clear()
    j.set_parallel(True)
    fill(j, 1, 10)
    j.on_tick()
    assert disk.in_sync.wait(30)
    j.set_parallel(False)
    j.deleteEntriesFrom(4)                         # list position 4 = index 5
    fill(j, 5, 10, term=2)
    disk.gate.set()
    assert j._syncer is not None
    j._syncer.stop()                               # returns once its step has ended
    assert j.durable_index == 0 and j.dirty and j.stats["background_fdatasync"] == 0
    j.before_send()
    assert j.durable_index == 10 and not j.dirty
    j._destroy()


def test_the_commit_index_hint_is_written_off_the_tick_thread(tmp_path, monkeypatch) -> None:
    """onOneSecondTimer used to fsync the meta file and its directory on the tick thread once a
    second (1.7-3.3% of a loaded leader's samples, tens of ms on a slow disk)."""
    j = open_j(tmp_path)
    disk = Disk(monkeypatch)
    j.setRaftCommitIndex(7)
    j.onOneSecondTimer()
    assert disk.on_tick_thread == []
    meta = tmp_path / "raft.journal.meta"
    wait_until(lambda: json.loads(meta.read_bytes())["raftCommitIndex"] == 7, timeout=30,
               what="the background meta write")
    j._destroy()


def test_a_vote_is_never_overwritten_by_an_older_background_meta_write(tmp_path, monkeypatch) -> None:
    """The background thread is inside its meta write (term 1) when the tick thread votes in
    term 5: the vote waits for it, and the file ends with the vote, never the older copy."""
    j = open_j(tmp_path)
    j.setCurrentTerm(1, None)
    disk = Disk(monkeypatch)
    disk.gate.clear()
    j.setRaftCommitIndex(3)
    j.onOneSecondTimer()
    assert disk.in_sync.wait(30)
    voter = threading.Thread(target=j.setCurrentTerm, args=(5, "a:1"))
    voter.start()
    voter.join(0.2)
    assert voter.is_alive()                        # serialized behind the write in progress
    disk.gate.set()
    voter.join(30)
    meta = json.loads((tmp_path / "raft.journal.meta").read_bytes())
    assert (meta["currentTerm"], meta["votedForNodeId"], meta["raftCommitIndex"]) == (5, "a:1", 3)
    j._destroy()


def test_a_background_sync_wakes_the_tick(tmp_path) -> None:
    """The leader's tick sleeps in poll; a commit may wait only for its own disk, so the
    background thread wakes it when durable_index moves (RepairingSyncObj wires a pipe)."""
    j = open_j(tmp_path)
    woke = threading.Event()
    j.wake = woke.set
    j.set_parallel(True)
    fill(j, 1, 3)
    j.on_tick()
    assert woke.wait(30) and j.durable_index == 3
    j._destroy()


@pytest.mark.parametrize("policy, parallel, needs", [
    ("always", False, 0.0),     # on_tick syncs what is written: the tick keeps its period
    ("batch", False, 0.0),      # synced batch_interval after the write, on a tick
    ("always", True, None),     # the background thread syncs and wakes the tick itself
    ("never", False, None),     # nothing to sync
])
def test_unsynced_writes_keep_the_tick_period(tmp_path, policy, parallel, needs) -> None:
    """The deadline sleep of raft_patches: the tick sleeps until its next deadline only when the journal
    has no write its tick callback must sync."""
    j = open_j(tmp_path, fsync=policy)
    assert j._tick_need() is None                  # nothing written yet
    assert j.set_parallel(parallel) == parallel
    fill(j, 1, 3)
    assert j._tick_need() == needs
    j.sync(force=True)
    if policy != "never" and not parallel:
        assert j._tick_need() is None
    j._destroy()
