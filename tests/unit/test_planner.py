"""How far ahead the leader records intents (schedd.leader.planner.plan_horizon), as a table:
a herd is recorded a burst lookahead ahead, its tail included (issue 14)."""

from __future__ import annotations

import pytest

from schedd.leader.planner import plan_fires, plan_horizon
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
