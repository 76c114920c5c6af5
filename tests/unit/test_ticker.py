"""The node's one tick loop (schedd.replication.ticker) with stand-ins for SyncObjs: what wakes a
replica, when it is ticked, and replicas joining and leaving while the loop runs."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from schedd.replication.ticker import Replica, TickLoop
from pysyncobj.poller import POLL_EVENT_TYPE

pytestmark = pytest.mark.timeout(60)


def wait_for(what: str, ok: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(0.005)


class FakeSync:
    """A replica with one pipe: a tick reads its mail (polls its poller, as driven_tick does)
    and says it needs its next tick in `wait` seconds."""

    def __init__(self, replica: Replica, wait: float = 5.0) -> None:
        self.replica = replica
        self.wait = wait
        self.ticks = 0
        self.mail_ticks = 0
        self.read: list[bytes] = []
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        replica.poller.subscribe(self.r, self._on_pipe, POLL_EVENT_TYPE.READ)
        replica.sync = self
        self.on_tick: Callable[[], None] = lambda: None

    def _on_pipe(self, fd: int, event: int) -> None:
        self.read.append(os.read(fd, 4096))

    def driven_tick(self, mail: bool) -> float:
        self.ticks += 1
        if mail:
            self.mail_ticks += 1
            self.replica.poller.poll(0)
            self.replica.poller.last_handled = 0        # read first: nothing left to act on
        self.on_tick()
        return self.wait

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


def make(loop: TickLoop, wait: float = 5.0) -> FakeSync:
    return FakeSync(loop.replica(), wait)


def test_a_message_wakes_only_its_replica_and_is_read_first():
    loop = TickLoop()
    a, b = make(loop), make(loop)
    loop.register(a.replica)
    loop.register(b.replica)
    try:
        wait_for("the first ticks", lambda: a.ticks == 1 and b.ticks == 1)
        os.write(a.w, b"hello")
        wait_for("a read its message", lambda: a.read == [b"hello"])
        assert a.mail_ticks == 2 and b.ticks == 1           # b slept on: its deadline is 5 s away
    finally:
        loop.unregister(a.replica)
        loop.unregister(b.replica)
        a.close()
        b.close()


def test_a_replica_is_ticked_at_the_deadline_it_asked_for():
    loop = TickLoop()
    a = make(loop, wait=0.05)
    loop.register(a.replica)
    try:
        time.sleep(0.5)
        assert 4 <= a.ticks <= 12, a.ticks                  # about every 50 ms, not a busy loop
    finally:
        loop.unregister(a.replica)
        a.close()


def test_replicas_join_and_leave_while_it_runs_and_the_thread_ends_with_the_last():
    loop = TickLoop()
    a, b = make(loop, wait=0.01), make(loop, wait=0.01)
    loop.register(a.replica)
    wait_for("a ticks", lambda: a.ticks > 3)
    loop.register(b.replica)                               # joins a running loop
    wait_for("b ticks", lambda: b.ticks > 3)
    assert loop.running
    loop.unregister(a.replica)                             # leaves it: no tick of it from now on
    after = a.ticks
    os.write(a.w, b"x")                                    # its descriptors no longer wake the loop
    n = b.ticks
    wait_for("b goes on", lambda: b.ticks > n + 5)
    assert a.ticks == after
    loop.unregister(b.replica)
    wait_for("the thread ended", lambda: not loop.running)
    c = make(loop, wait=0.01)                              # a later register starts another
    loop.register(c.replica)
    wait_for("c ticks", lambda: c.ticks > 1)
    loop.unregister(c.replica)
    for s in (a, b, c):
        s.close()


def test_unregister_from_inside_a_tick_and_of_a_replica_never_registered():
    loop = TickLoop()
    a, b = make(loop, wait=0.01), make(loop, wait=0.01)
    never = loop.replica()
    loop.unregister(never)                                 # its build failed: nothing to wait for
    a.on_tick = lambda: loop.unregister(a.replica) if a.ticks == 3 else None
    loop.register(a.replica)
    loop.register(b.replica)
    n = b.ticks
    wait_for("b goes on", lambda: b.ticks > n + 10)
    assert a.ticks == 3
    loop.unregister(b.replica)
    a.close()
    b.close()


def test_a_tick_that_raises_is_logged_and_retried(caplog):
    loop = TickLoop()
    a = make(loop, wait=0.01)

    def boom() -> None:
        if a.ticks == 2:
            raise RuntimeError("boom")
    a.on_tick = boom
    loop.register(a.replica)
    try:
        wait_for("ticks after the failure", lambda: a.ticks > 5)
        assert "failed tick" in caplog.text
    finally:
        loop.unregister(a.replica)
        a.close()


def test_a_descriptor_number_reused_by_another_replica_wakes_that_one():
    loop = TickLoop()
    a, b = make(loop), make(loop)
    loop.register(a.replica)
    loop.register(b.replica)
    try:
        wait_for("first ticks", lambda: a.ticks == 1 and b.ticks == 1)
        os.close(a.w)
        os.close(a.r)                                      # closed without unsubscribing
        r, w = os.pipe()                                   # most likely a.r's number again
        os.set_blocking(r, False)
        b.replica.poller.subscribe(r, b._on_pipe, POLL_EVENT_TYPE.READ)
        os.write(w, b"to b")
        wait_for("b read it", lambda: b"to b" in b.read)
        os.close(r)
        os.close(w)
    finally:
        loop.unregister(a.replica)
        loop.unregister(b.replica)
        b.close()
