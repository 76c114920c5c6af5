"""One tick thread for every Raft group a node hosts: `TickLoop`.

Why: pysyncobj's `autoTick` gives each SyncObj a thread of its own, polling its own sockets. A
node of a sharded cluster hosts one replica of each of S groups, so S such threads contend for
the GIL and the cores: bench/bench_multiraft_idle.py measured (bench/README.md "Many Raft groups
in one process") 55% of a core per process idle and hundreds of elections in 30 idle seconds at
128 groups with a thread each, against 26% and none with ONE loop waiting on ONE poller for every
replica. This is that loop, for schedd's patched SyncObj (raft_patches.RepairingSyncObj). On
real schedd nodes (bench/bench_shard_idle.py, bench/README.md "Idle sharded nodes") it took S - 1
threads and 16-31% of the Raft threads' idle CPU off a node at S = 8 to 64: schedd's ticks
already sleep until their deadline, so what goes is the threads' waking and GIL hand-overs.

How: each group's SyncObj is built with `autoTick=False` and a `GroupPoller`: pysyncobj's own
`PollPoller` (so the replica still polls only its own descriptors, the way every part of
RepairingSyncObj expects), whose every subscription is mirrored into the loop's one selector,
tagged with the replica. The loop waits on that selector until the soonest replica deadline, then
ticks each replica whose descriptors fired (its sockets, or its wake pipe: a proposal, a durable
write, a read, a tick job) or whose deadline came; the replica reads what woke it first, as its
autoTick poll would have just before that tick (`RepairingSyncObj.driven_tick`), and says when it
needs its next tick (the deadline sleep: its next heartbeat or election deadline). A replica whose
last poll handled something is ticked again at once (autoTick ticks right after every poll that
returns). So an idle replica costs a tick per deadline or message, never a fixed sweep.

Replicas come and go while the loop runs: `register` and `unregister` may be called from any
thread; `unregister` returns once the loop will never tick that replica again (its descriptors
are out of the selector), so the caller may then destroy its SyncObj. The thread starts with the
first replica, ends when the last one leaves, and, like pysyncobj's tick threads, also ends when
the thread that made the loop (the main thread) has ended.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pysyncobj.poller import POLL_EVENT_TYPE, PollPoller

log = logging.getLogger("schedd.raft")

THREAD_NAME = "raft-tick"
MAX_WAIT_S = 1.0        # the longest select wait: how soon the loop notices its owner thread ended
ERROR_WAIT_S = 0.05     # after a tick that raised, as pysyncobj's autoTick thread waits (its tick period)


class Driven(Protocol):
    """What the loop ticks: a SyncObj built with autoTick off (RepairingSyncObj.driven_tick)."""

    def driven_tick(self, mail: bool) -> float: ...


class GroupPoller(PollPoller):  # type: ignore[misc]
    """A replica's own poller (pysyncobj's PollPoller) whose subscriptions are mirrored into
    the loop's selector. `last_handled` counts the events its last poll dispatched."""

    def __init__(self, watch: Callable[[int, int], None], unwatch: Callable[[int], None]) -> None:
        super().__init__()
        self._watch = watch
        self._unwatch = unwatch
        self.attached = True            # False once the replica left the loop
        self.last_handled = 0

    def subscribe(self, descr: Any, callback: Callable[[Any, int], None], eventMask: int) -> None:
        def counted(d: Any, event: int) -> None:
            self.last_handled += 1
            callback(d, event)
        super().subscribe(descr, counted, eventMask)
        if self.attached:
            self._watch(_fileno(descr), eventMask)

    def unsubscribe(self, descr: Any) -> None:
        super().unsubscribe(descr)
        if self.attached:
            self._unwatch(_fileno(descr))

    def poll(self, timeout: float) -> None:
        self.last_handled = 0
        super().poll(timeout)


def _fileno(descr: Any) -> int:
    return descr if isinstance(descr, int) else int(descr.fileno())


@dataclass(slots=True, eq=False)
class Replica:
    """One replica the loop drives: its poller (given to the SyncObj it builds), the SyncObj
    once built, and the loop's bookkeeping (loop thread only, but `fds`, under the loop's lock)."""

    poller: GroupPoller
    sync: Driven | None = None
    due: float = 0.0            # monotonic time of its next tick
    mail: bool = True           # its descriptors fired since its last tick (a first tick reads all)
    gone: bool = False
    fds: set[int] = field(default_factory=set)


class TickLoop:
    """One thread ticking every registered replica over one selector (module doc)."""

    def __init__(self, name: str = THREAD_NAME) -> None:
        self._name = name
        self._owner = threading.current_thread()
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._fds: dict[int, Replica] = {}                     # watched descriptor -> its replica
        self._adds: list[Replica] = []
        self._drops: list[tuple[Replica, threading.Event]] = []
        self._replicas: list[Replica] = []                     # loop thread only
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)

    # ------------------------------------------------------------ any thread

    def replica(self) -> Replica:
        """A replica whose poller is to be given to the SyncObj about to be built (its
        descriptors are watched from then on); `register` it once the SyncObj exists."""
        box: list[Replica] = []
        r = Replica(GroupPoller(lambda fd, mask: self._watch(box[0], fd, mask),
                                lambda fd: self._unwatch(box[0], fd)))
        box.append(r)
        return r

    def register(self, replica: Replica) -> None:
        """Start ticking `replica` (its `sync` set); starts the thread if none runs."""
        if replica.sync is None:
            raise ValueError("register a replica once its SyncObj is built")
        with self._lock:
            self._adds.append(replica)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name)
                self._thread.start()
        self._poke()

    def unregister(self, replica: Replica) -> None:
        """Stop ticking `replica`; returns once no tick of it runs or will run (the caller may
        destroy its SyncObj). Also for a replica never registered (its build failed)."""
        replica.poller.attached = False
        if threading.current_thread() is self._thread:     # from inside a tick
            self._let_go(replica)
            return
        done = threading.Event()
        with self._lock:
            running = self._thread is not None
            if running:
                self._drops.append((replica, done))
        if not running:
            self._let_go(replica)
            return
        self._poke()
        done.wait()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def _watch(self, replica: Replica, fd: int, mask: int) -> None:
        events = selectors.EVENT_WRITE if mask & POLL_EVENT_TYPE.WRITE else 0
        if mask & POLL_EVENT_TYPE.READ or not events:
            events |= selectors.EVENT_READ          # errors and hang-ups come with either
        with self._lock:
            if replica.gone:
                return
            owner = self._fds.get(fd)
            if owner is not None and owner is not replica:
                owner.fds.discard(fd)                   # a descriptor closed unwatched, its number reused
            # Always anew, never modify: the number may name a new file (pysyncobj closes a
            # socket before it unsubscribes it), which epoll dropped with the old one, while
            # the selector's table still has the old entry (a modify with the same events
            # would change nothing in the kernel). Subscriptions are rare: a connection's
            # state changes and its write backlog.
            self._forget(fd)
            try:
                self._selector.register(fd, events, replica)
            except (OSError, ValueError):            # already closed: nothing to wait for
                self._fds.pop(fd, None)
                return
            self._fds[fd] = replica
            replica.fds.add(fd)
        if threading.current_thread() is not self._thread:
            self._poke()                                # a blocked select learns of it (poll/select selectors)

    def _unwatch(self, replica: Replica, fd: int) -> None:
        with self._lock:
            if self._fds.get(fd) is replica:
                del self._fds[fd]
                self._forget(fd)
            replica.fds.discard(fd)

    def _forget(self, fd: int) -> None:
        try:
            self._selector.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass

    def _let_go(self, replica: Replica) -> None:
        """Drop the replica's descriptors from the selector: nothing of it wakes the loop any more."""
        with self._lock:
            replica.gone = True
            for fd in replica.fds:
                if self._fds.get(fd) is replica:
                    del self._fds[fd]
                    self._forget(fd)
            replica.fds.clear()

    def _poke(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:                         # the pipe is full: the loop wakes anyway
            pass

    # ------------------------------------------------------------ the loop thread

    def _run(self) -> None:
        while self._owner.is_alive() and self._admit():
            for key, _ in self._select():
                if key.data is None:
                    self._drain()
                else:
                    key.data.mail = True
            self._tick_due()
        with self._lock:              # ended (no replica left, or the owner ended: replicas left as they are)
            if self._thread is threading.current_thread():
                self._thread = None
            drops, self._drops = self._drops, []
        for r, done in drops:
            self._let_go(r)
            done.set()

    def _admit(self) -> bool:
        """Take in what register and unregister asked; False when no replica is left (the
        thread ends; a later register starts another)."""
        with self._lock:
            adds, self._adds = self._adds, []
            drops, self._drops = self._drops, []
            if not adds and not drops and self._replicas:
                return True
        now = time.monotonic()
        for r in adds:
            r.due, r.mail = now, True
        self._replicas = [r for r in self._replicas + adds if not r.gone]
        for r, done in drops:
            self._let_go(r)
            done.set()
        self._replicas = [r for r in self._replicas if not r.gone]
        with self._lock:
            if self._replicas or self._adds:
                return True
            self._thread = None          # under the lock: a register from now on starts another
            return False

    def _select(self) -> list[tuple[selectors.SelectorKey, int]]:
        try:
            return self._selector.select(self._wait())
        except (OSError, ValueError):     # never end the thread every group ticks on: log, go on
            log.exception("the tick loop's select failed")
            time.sleep(ERROR_WAIT_S)
            return []

    def _wait(self) -> float:
        if not self._replicas:
            return MAX_WAIT_S
        soonest = min(r.due for r in self._replicas)
        return min(MAX_WAIT_S, max(0.0, soonest - time.monotonic()))

    def _drain(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _tick_due(self) -> None:
        now = time.monotonic()
        for r in self._replicas:
            if not r.gone and (r.mail or r.due <= now):
                self._tick(r)

    def _tick(self, r: Replica) -> None:
        mail, r.mail = r.mail, False
        r.poller.last_handled = 0
        assert r.sync is not None
        try:
            wait = r.sync.driven_tick(mail)
        except Exception:
            log.exception("failed tick of a Raft group in the node's tick loop")
            wait = ERROR_WAIT_S
        if r.poller.last_handled:        # its last poll handled messages: act on them now
            wait = 0.0
        r.due = time.monotonic() + wait
