"""What the leader should fire now: a pure function of the state, the time and what is in flight.

The planner walks the due index up to `now + lookahead` and expands each due job's chain of
instants (a job whose next_fire is far in the past, after downtime, yields every missed instant
in order: catch-up "all", the default until the per-job policies arrive). Apply accepts an
instant only if it equals the job's next_fire, so a stale or duplicate plan is harmless: the
planner is an optimisation of what to ask, never the judge of what happens.
"""

from __future__ import annotations

from collections.abc import Container, Sized

from schedd.core import schedule as sched
from schedd.core.tables import schedule_of
from schedd.core.view import StateView, Viewable, as_view

PER_JOB_CAP = 100   # instants of one job per plan, so a long catch-up cannot starve others


HERD_WINDOWS = 4          # a herd is recorded up to this many burst lookaheads ahead
HERD_RECORD_RATE = 2_000  # intents a second the herd rule counts on (a slow 2-core VM records ~4,000)


def herd_window_ms(burst_lookahead_ms: int) -> int:
    """How far ahead a herd's intents may be recorded, and its runs claimed into workers'
    ahead places (the assigner's window follows this one)."""
    return HERD_WINDOWS * burst_lookahead_ms


def herd_horizon(view: StateView, now_ms: int, burst_lookahead_ms: int,
                 rate: int = HERD_RECORD_RATE) -> int | None:
    """The end of the herd window when the instants not recorded yet that fall due within it
    would take longer than the burst lookahead to record at HERD_RECORD_RATE: a herd of 100,000
    at one instant on a VM recording 4,000 a second had some 60,000 recorded within a 15 s
    window and the rest started up to 21 s late. The count is of jobs (one entry per
    job in the due index): a steady load counts each job due within the window once, so it
    takes more than 30,000 jobs due within a minute to trigger it (None: no herd)."""
    end = now_ms + herd_window_ms(burst_lookahead_ms)
    if view.due_fire_count(end) * 1000 > rate * burst_lookahead_ms:
        return end
    return None


def plan_horizon(state: Viewable, now_ms: int, lookahead_ms: int, *, burst_lookahead_ms: int = 0,
                 burst_threshold: int = 0, burst_until_ms: int = 0,
                 herd_rate: int = HERD_RECORD_RATE) -> int:
    """Until when to record intents: now + lookahead, or now + burst lookahead when at least
    `burst_threshold` instants not recorded yet fall due within it (see plan_fires), and at
    least until `burst_until_ms` (the end of the burst window the caller saw last, while it is
    ahead). That floor is what records a herd's tail early: once fewer than the threshold of its
    instants are left unrecorded, the count alone fell back to the lookahead, and the last
    instants of a 10,000 herd were recorded, claimed and pushed after their due time."""
    view = as_view(state)
    until = now_ms + lookahead_ms
    if burst_threshold and burst_lookahead_ms > lookahead_ms:
        herd = herd_horizon(view, now_ms, burst_lookahead_ms, herd_rate)
        if herd is not None:
            return herd                     # too big for the burst lookahead: from further ahead
        far = now_ms + burst_lookahead_ms
        if view.due_fire_count(far) >= burst_threshold:    # a count: O(log n), not a list
            return far
        if burst_until_ms > until:
            return min(burst_until_ms, far)
    return until


def plan_fires(state: Viewable, now_ms: int, lookahead_ms: int, *, limit: int,
               inflight: Container[str] = (), burst_lookahead_ms: int = 0,
               burst_threshold: int = 0) -> list[tuple[str, int]]:
    """Up to `limit` (job, instant) pairs due by now + lookahead, oldest first. Jobs listed in
    `inflight` (a proposal for them is not settled yet) are skipped this round.

    Bursts: recording intents has a throughput (about 10,000 a second on 2 cores), so 100,000
    one-offs due at the same second cannot all be committed within a 1.5 s lookahead. When at
    least `burst_threshold` instants fall due within `burst_lookahead_ms`, the planner looks that
    far ahead instead, so the burst is committed before it is due."""
    view = as_view(state)
    until = plan_horizon(view, now_ms, lookahead_ms, burst_lookahead_ms=burst_lookahead_ms,
                         burst_threshold=burst_threshold)
    items: list[tuple[str, int]] = []
    # Not every job due (a herd of 100,000): the oldest that can fill `limit`, past those whose
    # proposal is in flight (they are the oldest); the rest come in the next rounds.
    fetch = limit + (len(inflight) if isinstance(inflight, Sized) else 0)
    for t, name in view.due_fires(until, limit=fetch):
        if len(items) >= limit:
            break
        job = view.job(name)
        if job is None or job.paused or job.next_fire != t or name in inflight:
            continue
        s = schedule_of(job)
        n = 0
        nxt: int | None = t
        while nxt is not None and nxt <= until and n < PER_JOB_CAP and len(items) < limit:
            items.append((name, nxt))
            n += 1
            nxt = sched.next_after(s, nxt)
    return items
