"""schedd_worker.timers (one timer for every waiting attempt) and the warm handler threads
(schedd_worker.handlers.base.WarmThreads), with an injected clock where time matters: the
Timer reads a ManualClock, so "due" is whatever the test says, and no test sleeps for it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from schedd.ports.fakes import ManualClock, wait_until_async
from schedd_worker.handlers.base import WarmThreads
from schedd_worker.timers import DueQueue, Timer

DEADLINE = 15.0


def test_due_queue_pops_what_is_due_earliest_first_ties_in_push_order():
    q = DueQueue()
    for due, token in ((2000, 1), (1000, 2), (2000, 3), (1000, 4), (3000, 5)):
        q.push(due, token)
    assert q.next_due() == 1000 and len(q) == 5
    assert q.pop_due(999) == []
    assert q.pop_due(1000) == [2, 4]
    assert q.pop_due(2500) == [1, 3]
    assert q.next_due() == 3000
    assert q.pop_due(10_000) == [5]
    assert q.next_due() is None and len(q) == 0


async def _settle() -> None:
    for _ in range(5):                     # a few loop iterations: a delay-0 timer runs in one
        await asyncio.sleep(0)


async def test_timer_fires_every_due_token_in_one_callback_and_rearms_for_the_next():
    clock = ManualClock(1_000)
    fired: list[list[int]] = []
    t = Timer(clock.now_ms, fired.append)
    try:
        for token in range(1, 101):        # a herd of 100 due at one instant
            t.add(60_000, token)
        t.add(120_000, 999)
        await _settle()
        assert fired == []                 # due in a minute of the test's clock
        clock.now = 60_000                 # the instant comes
        t.rearm()
        await wait_until_async(lambda: fired, timeout=DEADLINE, what="the herd's wake-up")
        await _settle()
        assert fired == [list(range(1, 101))]      # all of them, in one callback, push order
        assert t.wakeups == 1 and t.queue.next_due() == 120_000
        clock.now = 200_000
        t.rearm()
        await wait_until_async(lambda: len(fired) == 2, timeout=DEADLINE, what="the next one")
        assert fired[1] == [999]
    finally:
        t.close()


async def test_timer_rearms_for_an_earlier_due_time_and_ignores_an_early_wakeup():
    clock = ManualClock(1_000)
    fired: list[list[int]] = []
    t = Timer(clock.now_ms, fired.append)
    try:
        t.add(3_600_000, 1)                # an hour ahead
        t.add(1_000, 2)                    # due now: re-arms at once
        await wait_until_async(lambda: fired, timeout=DEADLINE, what="the earlier one")
        assert fired == [[2]]
        clock.now = -5_000                 # the wall clock stepped back: a wake-up finds nothing due
        t._fire()
        assert fired == [[2]] and t.queue.next_due() == 3_600_000
    finally:
        t.close()


async def test_timer_due_in_the_past_starts_at_once():
    clock = ManualClock(10_000)
    fired: list[list[int]] = []
    t = Timer(clock.now_ms, fired.append)
    try:
        t.add(5_000, 7)
        await wait_until_async(lambda: fired, timeout=DEADLINE, what="a late one")
        assert fired == [[7]]
    finally:
        t.close()


def test_warm_threads_reuse_a_few_threads_for_short_calls():
    pool = WarmThreads(eager=4)
    done = threading.Semaphore(0)
    seen: set[int] = set()

    def call() -> None:
        seen.add(threading.get_ident())
        done.release()

    for _ in range(200):
        pool.submit(call)
        assert done.acquire(timeout=DEADLINE)
    assert pool.threads <= 4 and len(seen) <= 4     # not a thread per call


def test_warm_threads_a_stuck_call_does_not_hold_up_the_next():
    pool = WarmThreads(eager=1, grow_after_s=0.01)
    release, ran = threading.Event(), threading.Event()
    try:
        pool.submit(lambda: release.wait(DEADLINE))     # occupies the only eager thread
        pool.submit(ran.set)
        assert ran.wait(DEADLINE)                      # a thread was added for it
        assert pool.threads >= 2
    finally:
        release.set()


def test_warm_threads_calls_that_must_run_together_all_get_a_thread_after_a_burst():
    """A burst served by fewer threads than calls leaves more idle tokens than idle threads (each
    thread releases one per call, a queued call consumed none): later calls then counted on
    threads that were busy. Seen as a herd whose handlers wait for each other never completing
    in a worker process that had run many calls before."""
    pool = WarmThreads(eager=4, grow_after_s=0.2)      # the burst drains before threads are added
    burst = threading.Semaphore(0)
    for _ in range(300):
        pool.submit(burst.release)
    for _ in range(300):
        assert burst.acquire(timeout=DEADLINE)
    assert pool.threads == 4
    deadline = time.monotonic() + DEADLINE
    while pool._backlog.is_set() and time.monotonic() < deadline:   # the watcher has looked
        burst.acquire(timeout=0.01)
    together = threading.Barrier(12, timeout=DEADLINE / 2)
    broken: list[BaseException] = []
    done = threading.Semaphore(0)

    def wait_for_the_others() -> None:
        try:
            together.wait()
        except threading.BrokenBarrierError as e:
            broken.append(e)
        done.release()

    for _ in range(12):
        pool.submit(wait_for_the_others)
    for _ in range(12):
        assert done.acquire(timeout=DEADLINE)
    assert not broken, "a call waited for a busy thread instead of getting its own"


def test_warm_threads_idle_threads_exit():
    pool = WarmThreads(eager=2, idle_s=0.05)
    done = threading.Event()
    pool.submit(done.set)
    assert done.wait(DEADLINE)
    deadline = threading.Event()
    for _ in range(int(DEADLINE / 0.05)):
        if pool.threads == 0:
            break
        deadline.wait(0.05)
    assert pool.threads == 0


async def test_race_with_a_cancel_event_done_cancel_and_timeout_and_no_leftover_waiters():
    from schedd_worker.handlers.base import Cancel, race

    loop = asyncio.get_running_loop()
    cancel = Cancel()
    fut = loop.create_future()
    loop.call_soon(fut.set_result, 1)
    assert await race(fut, cancel, None) == "done"
    assert cancel._futs == [] or all(f.cancelled() for f in cancel._futs)
    fut = loop.create_future()
    loop.call_soon(cancel.set)
    assert await race(fut, cancel, None) == "cancel"
    assert await race(loop.create_future(), Cancel(), loop.time() + 0.01) == "timeout"
    assert await race(loop.create_future(), asyncio.Event(), loop.time() + 0.01) == "timeout"


async def test_thread_results_reach_the_loop_even_when_many_end_at_once():
    from schedd_worker.handlers.base import in_daemon_thread

    futs = [in_daemon_thread(lambda i=i: i * 2) for i in range(500)]
    assert await asyncio.wait_for(asyncio.gather(*futs), DEADLINE) == [i * 2 for i in range(500)]


async def test_a_wakeup_just_before_the_due_time_never_starts_it_early():
    """The timer wakes EARLY_S ahead and sleeps the rest: on a clock that has not reached the
    due time (a ManualClock does not move while it sleeps) nothing starts."""
    from schedd_worker.timers import EARLY_S

    clock = ManualClock(10_000)
    fired: list[list[int]] = []
    t = Timer(clock.now_ms, fired.append)
    try:
        t.add(10_001, 1)
        t.close()                           # drive the wake-ups by hand
        t._fire()                           # 1 ms before due (within 2 * EARLY_S): sleeps, then
        assert fired == [] and t.queue.next_due() == 10_001      # finds it not yet due
        assert 0.001 <= 2 * EARLY_S
        clock.now = 10_001
        t._fire()
        assert fired == [[1]]
    finally:
        t.close()


# ------------------------------------------------------------ QuietCollector

def test_quiet_collector_passes_only_in_a_gap_longer_than_the_last_pass_and_forces_one_at_last():
    import gc

    from schedd_worker.timers import QuietCollector
    now = [100.0]
    passes: list[float] = []

    def collect() -> None:
        passes.append(now[0])
        now[0] += 0.2                                # a pass takes 0.2 s

    q = QuietCollector(every_s=5, force_s=60, margin_s=0.05, collect=collect, promoted=lambda: 1,
                       clock=lambda: now[0])
    assert not q.maybe_collect(None)                 # the last pass is not old enough yet
    now[0] = 106.0
    assert q.maybe_collect(None) and q.took == pytest.approx(0.2)    # nothing held: at once
    now[0] = 112.0
    assert not q.maybe_collect(0.3)                  # due in 0.3 s: 2 x 0.2 + 0.05 does not fit
    assert q.maybe_collect(0.5)                      # due in 0.5 s: it fits
    for t in range(113, 180):                        # due times always close: no gap ...
        now[0] = float(t)
        q.maybe_collect(0.01)
    assert passes == [106.0, 112.0, 173.0]           # ... forced once force_s passed (112.2 + 60)

    # Nothing moved into the oldest generation since the last pass: a full one would find
    # nothing the young passes do not (an idle worker), however old the last pass is.
    promoted = [0]
    q = QuietCollector(every_s=5, force_s=60, collect=collect, promoted=lambda: promoted[0],
                       clock=lambda: now[0])
    passes.clear()
    now[0] += 300.0
    assert not q.maybe_collect(None) and passes == []
    promoted[0] = 1
    assert q.maybe_collect(None) and len(passes) == 1

    before = gc.get_threshold()
    a, b = QuietCollector(), QuietCollector()
    a.install()
    b.install()
    assert gc.get_threshold()[2] >= 1_000_000 and gc.get_threshold()[:2] == before[:2]
    a.uninstall()                                    # another runtime still runs: still off
    assert gc.get_threshold()[2] >= 1_000_000
    b.uninstall()
    assert gc.get_threshold() == before
