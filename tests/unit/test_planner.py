"""How far ahead the leader records intents (schedd.leader.planner.plan_horizon), as a table:
a herd is recorded a burst lookahead ahead, its tail included."""

from __future__ import annotations

import pytest

from schedd.leader.planner import herd_window_ms, plan_fires, plan_horizon
from tests.support.state import T0, Harness

LOOK, BURST = 1_500, 15_000
HERD_AT = T0 + 10_000


def _herd(n: int, recorded: int) -> Harness:
    """`n` one-offs due at T0 + 10 s, the first `recorded` of them with their intent recorded."""
    h = Harness()
    for i in range(n):
        h.put(name=f"h{i:03d}", schedule="at 2027-01-15T08:00:10Z")
    if recorded:
        h.fire(*plan_fires(h.state, h.now, BURST, limit=recorded))
    return h


# n, recorded, threshold, the window end seen before (burst_until), expected horizon
CASES = [
    (30, 0, 0, 0, T0 + LOOK),                   # no burst rule: the lookahead
    (30, 0, 40, 0, T0 + LOOK),                  # 30 < 40: not a burst
    (30, 0, 20, 0, T0 + BURST),                 # a burst: its whole window
    # the tail: 10 of the 30 left unrecorded, below the threshold; before, the lookahead
    (30, 20, 20, 0, T0 + LOOK),
    # ... with the window seen before, the tail is still recorded ahead of its due time
    (30, 20, 20, T0 + 14_000, T0 + 14_000),
    (30, 20, 20, T0 + 60_000, T0 + BURST),      # never further than the burst lookahead
    (30, 20, 20, T0 + 1_000, T0 + LOOK),        # a window already behind the lookahead: none
]


@pytest.mark.parametrize("n, recorded, threshold, burst_until, horizon", CASES)
def test_plan_horizon(n, recorded, threshold, burst_until, horizon):
    h = _herd(n, recorded)
    assert len(h.state.ready) == recorded
    got = plan_horizon(h.state, h.now, LOOK, burst_lookahead_ms=BURST, burst_threshold=threshold,
                       burst_until_ms=burst_until)
    assert got == horizon
    tail = plan_fires(h.state, h.now, got - h.now, limit=100)
    assert len(tail) == (n - recorded if got >= HERD_AT else 0)


FAR_HERD_AT = T0 + 50_000          # beyond the burst lookahead, within the herd window (60 s)


# jobs due at T0 + 50 s, the herd rate (intents/s), expected horizon
HERD_CASES = [
    (30, 1, T0 + herd_window_ms(BURST)),   # 30 would take 30 s at 1/s, more than the 15 s burst
    (30, 2, T0 + LOOK),                    # 15 s at 2/s: the burst lookahead will do, later
    (31, 2, T0 + herd_window_ms(BURST)),
]


@pytest.mark.parametrize("n, rate, horizon", HERD_CASES)
def test_a_herd_too_big_for_the_burst_lookahead_is_recorded_from_further_ahead(n, rate, horizon):
    """A herd of 100,000 at one instant on a VM recording 4,000 intents a second: some 60,000 were
    recorded within the 15 s burst lookahead, the rest started up to 21 s late. The
    herd rule counts the jobs due within four burst lookaheads (scaled down here by its rate)."""
    h = Harness()
    for i in range(n):
        h.put(name=f"h{i:03d}", schedule="at 2027-01-15T08:00:50Z")
    got = plan_horizon(h.state, h.now, LOOK, burst_lookahead_ms=BURST, burst_threshold=20, herd_rate=rate)
    assert got == horizon
    planned = plan_fires(h.state, h.now, got - h.now, limit=100)
    assert len(planned) == (n if got >= FAR_HERD_AT else 0)


def test_a_steady_load_counts_each_job_once_and_stays_in_the_burst_lookahead():
    """20 jobs every second: 1,200 instants within the herd window but 20 entries in the due
    index, one per job: at 2 intents a second that is 10 s of recording, within the burst
    lookahead (31 jobs at one instant are a herd, above)."""
    h = Harness()
    for i in range(20):
        h.put(name=f"s{i:03d}", schedule="@every 1s")
    assert plan_horizon(h.state, h.now, LOOK, burst_lookahead_ms=BURST, burst_threshold=10_000,
                        herd_rate=2) == T0 + LOOK
