"""One timer for every attempt waiting for its due time.

The leader pushes assignments about a lookahead (1.5 s) before they are due; the worker holds
them here, in one heap ordered by due time, and arms a single `loop.call_at` for the earliest.
When it fires, every attempt due by then starts in that one callback: a herd due at one
instant starts together, not one timer (and one task wake-up) after another.

    q = DueQueue()
    q.push(due_ms, token)
    q.next_due()            # earliest due time held, or None
    q.pop_due(now_ms)       # every token due by now_ms, earliest first (ties: pushed first)

`DueQueue` is pure (no clock, no loop): `Timer` is the shell that keeps one loop timer armed
for `next_due()` on the worker's own clock (`now_ms`, wall time, as the leader's due times).
Removal is lazy: the caller skips tokens it no longer holds when they pop.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["DueQueue", "Timer", "QuietCollector", "DEFAULT_AHEAD"]

DEFAULT_AHEAD = 100_000   # assignments not yet due a worker holds beyond its slots (WorkerHello.ahead)


@dataclass(slots=True)
class DueQueue:
    """Tokens by due time: a heap of the distinct due times, a list of tokens per due time. A
    herd shares its instant, so popping it is one heap pop and one list, not one pop per token
    (10,000 heap pops were 25 ms before the herd's first handler could start)."""
    _times: list[int] = field(default_factory=list)                  # heap of distinct due_ms
    _tokens: dict[int, list[int]] = field(default_factory=dict)      # due_ms -> tokens, in push order
    _len: int = 0

    def push(self, due_ms: int, token: int) -> None:
        same = self._tokens.get(due_ms)
        if same is None:
            self._tokens[due_ms] = [token]
            heapq.heappush(self._times, due_ms)
        else:
            same.append(token)
        self._len += 1

    def next_due(self) -> int | None:
        return self._times[0] if self._times else None

    def pop_due(self, now_ms: int) -> list[int]:
        times = self._times
        if not times or times[0] > now_ms:
            return []
        out = self._tokens.pop(heapq.heappop(times))
        while times and times[0] <= now_ms:
            out.extend(self._tokens.pop(heapq.heappop(times)))
        self._len -= len(out)
        return out

    def __len__(self) -> int:
        return self._len


EARLY_S = 0.0015       # wake this much before a due time, then sleep the rest (see Timer)


class Timer:
    """One loop timer over a DueQueue: `on_due(tokens)` runs with every token due, once per
    wake-up. The loop's clock is monotonic and the due times are wall times: the delay is
    computed from the clock when armed, and a wake-up that comes before the wall clock reached
    the due time (the wall clock stepped back) just re-arms.

    asyncio's timers fire up to a millisecond late (epoll waits whole milliseconds, rounded up),
    which alone would be the whole 1 ms budget of a start: the timer is armed EARLY_S before the
    due time and the wake-up sleeps what is left (time.sleep is precise to microseconds). That
    blocks the loop for at most EARLY_S once per distinct due time; schedules are in whole
    seconds, so about once a second at most. `now_s` is the same clock as `now_ms` in seconds
    with sub-millisecond precision (default: now_ms() / 1000)."""

    def __init__(self, now_ms: Callable[[], int], on_due: Callable[[list[int]], None],
                 now_s: Callable[[], float] | None = None) -> None:
        self.queue = DueQueue()
        self.now_ms = now_ms
        self.now_s = now_s or (lambda: now_ms() / 1000)
        self.on_due = on_due
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for: int | None = None
        self.wakeups = 0                      # introspection, tests

    def add(self, due_ms: int, token: int) -> None:
        self.queue.push(due_ms, token)
        if self._armed_for is None or due_ms < self._armed_for:
            self._arm()

    def rearm(self) -> None:
        """Arm again from the clock's present reading (it stepped: e.g. a ManualClock in tests)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._armed_for = None
        self._arm()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._armed_for = None

    def _arm(self) -> None:
        due = self.queue.next_due()
        if due == self._armed_for and self._handle is not None:
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed_for = due
        if due is None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, due / 1000 - self.now_s() - EARLY_S)
        self._handle = loop.call_at(loop.time() + delay, self._fire)

    def _fire(self) -> None:
        self._handle = self._armed_for = None
        self.wakeups += 1
        nxt = self.queue.next_due()
        if nxt is not None:
            left = nxt / 1000 - self.now_s()
            if 0 < left <= 2 * EARLY_S:
                time.sleep(left)
        due = self.queue.pop_due(self.now_ms())
        try:
            if due:
                self.on_due(due)
        finally:
            self._arm()


class QuietCollector:
    """The garbage collector's full passes between due instants, not in them.

    A worker holding a herd ahead holds about ten tracked objects per attempt: a full
    collection with 30,000 held pauses its loop for about 0.1 s, with 90,000 about 0.26 s, and
    Python starts one whenever its generations say so, often in the middle of an instant's
    starts. While installed (WorkerRuntime.run), automatic full passes are off (young ones stay
    on) and `maybe_collect` runs one when the last is `every_s` old and nothing is due for longer
    than the last pass took, with a margin; after `force_s` without such a gap it runs anyway,
    so cyclic garbage is never held for long. No pass runs while no middle-generation
    collection has run since the last one (`promoted`, gc.get_count()[2]): stock Python starts a
    full pass only after ten of those, so garbage is never held longer than without this
    class, and an idle worker no longer spends a full pass every 5 s on a heap that did not
    change. `collect`, `promoted` and the clock are injected for tests."""

    def __init__(self, *, every_s: float = 5.0, force_s: float = 60.0, margin_s: float = 0.05,
                 collect: Callable[[], object] = gc.collect,
                 promoted: Callable[[], int] = lambda: gc.get_count()[2],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.force_s, self.margin_s = every_s, force_s, margin_s
        self.collect, self.promoted, self.clock = collect, promoted, clock
        self.last = clock()
        self.took = 0.0                           # seconds the last pass took
        self.passes = 0

    _installed = 0                                # runtimes of this process that installed one
    _saved: tuple[int, int, int] | None = None    # the thresholds before the first

    def install(self) -> None:
        cls = QuietCollector
        if cls._installed == 0:
            cls._saved = gc.get_threshold()
            gc.set_threshold(cls._saved[0], cls._saved[1], 1_000_000_000)
        cls._installed += 1

    def uninstall(self) -> None:
        cls = QuietCollector
        cls._installed -= 1
        if cls._installed == 0 and cls._saved is not None:
            gc.set_threshold(*cls._saved)
            cls._saved = None

    def maybe_collect(self, until_due_s: float | None) -> bool:
        """`until_due_s`: seconds until the next due time held (None: nothing held)."""
        now = self.clock()
        age = now - self.last
        quiet = until_due_s is None or until_due_s > 2 * self.took + self.margin_s
        if age < self.every_s or not (quiet or age >= self.force_s) or not self.promoted():
            return False
        self.collect()
        end = self.clock()
        self.took, self.last = end - now, end
        self.passes += 1
        return True
