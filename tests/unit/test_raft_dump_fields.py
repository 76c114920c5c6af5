"""What a SyncObj's dump carries of the object itself. pysyncobj pickles into every snapshot (its
dump file, and the snapshot a leader sends a lagging follower) each attribute of the SyncObj
that did not exist when `SyncObj.__init__` finished, and sets them back on the object that
loads it. A wake pipe set after `__init__` therefore travelled in snapshots: a restarted node,
or a follower installing the leader's snapshot, took another process's descriptor numbers as its
own wake pipe and wrote its wake-ups into whatever those numbers named there (BrokenPipeError
and EBADF on the restarted node of a sharded cluster, or bytes into a live socket or file)."""

from __future__ import annotations

import gzip
import os
import pickle
import socket
import time
from pathlib import Path

import pytest
from pysyncobj import SyncObjConf

from schedd.replication.raft_patches import RepairingSyncObj
from schedd.replication.ticker import TickLoop

pytestmark = pytest.mark.timeout(60)

# pysyncobj's own replicated field (the code version every node has switched to)
STOCK_DUMPED = {"_SyncObj__enabledCodeVersion"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build(dump: Path, port: int, loop: TickLoop) -> RepairingSyncObj:
    """A one-node group ticked by hand (driven: the loop's poller, never registered)."""
    conf = SyncObjConf(autoTick=False, fullDumpFile=str(dump), useFork=False,
                       logCompactionMinEntries=10 ** 9, logCompactionMinTime=10 ** 9)
    return RepairingSyncObj(f"127.0.0.1:{port}", [], conf=conf, poller=loop.replica().poller)


def tick_until(sync: RepairingSyncObj, ok, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        sync.driven_tick(True)


def dumped_fields(sync: RepairingSyncObj) -> set[str]:
    return set(sync.__dict__) - sync._SyncObj__properies


def test_nothing_schedd_sets_on_a_sync_obj_goes_into_its_snapshots(tmp_path: Path) -> None:
    sync = build(tmp_path / "raft.dump", free_port(), TickLoop())
    try:
        assert dumped_fields(sync) <= STOCK_DUMPED
    finally:
        sync.destroy()
        sync.close_wake()


def stale_wake() -> None:
    raise AssertionError("a wake-up went to the wake of the process that wrote the dump")


def add_stale_wake(dump: Path) -> None:
    """The dump as an earlier build wrote it: with its writer's `_wake` among its fields."""
    with gzip.open(dump, "rb") as f:
        data = pickle.load(f)
    data[0]["_wake"] = stale_wake
    with gzip.open(dump, "wb") as f:
        pickle.dump(data, f)


@pytest.mark.parametrize("written_by", ["this build", "an earlier build"])
def test_a_node_restarted_from_its_dump_keeps_its_own_wake_pipe(tmp_path: Path, written_by: str) -> None:
    dump, port, loop = tmp_path / "raft.dump", free_port(), TickLoop()
    first = build(dump, port, loop)
    tick_until(first, lambda: first._isLeader(), "a one-node group elects itself")
    first.forceLogCompaction()
    tick_until(first, dump.exists, "the dump is written")
    first.destroy()
    first.close_wake()
    if written_by == "an earlier build":
        add_stale_wake(dump)

    second = build(dump, port, loop)
    try:
        own = second._wake
        tick_until(second, lambda: second._SyncObj__needLoadDumpFile is False, "the dump is loaded")
        assert second._wake == own          # the loaded dump did not replace it
        second.wake()                       # the previous process's numbers would fail (closed here)
    finally:
        second.destroy()
        second.close_wake()


def test_a_wake_after_the_close_reaches_no_descriptor_that_took_its_number() -> None:
    from pysyncobj.poller import PollPoller

    from schedd.replication.raft.deadline_sleep import WakePipe

    pipe = WakePipe(PollPoller())
    pipe.notify()
    pipe.close()
    pipe.close()                                   # twice: nothing more
    r, w = os.pipe()                               # likely the numbers it gave back
    try:
        os.set_blocking(r, False)
        pipe.notify()
        with pytest.raises(BlockingIOError):
            os.read(r, 1)                          # nothing was written into it
    finally:
        os.close(r)
        os.close(w)
