"""A node's record of the terms it led (NodeStatus.leader_terms): opened when it becomes the
leader, closed when it steps down, the newest KEPT only."""

from __future__ import annotations

from schedd.runtime.leader_terms import KEPT, LeaderTerms


def test_terms_open_close_and_are_bounded():
    led = LeaderTerms()
    led.stepped_down(5)                       # never led: nothing to close
    assert led.rows() == []
    led.became_leader(2, 100)
    assert led.rows() == [(2, 100, 0)]
    led.stepped_down(150)
    led.became_leader(4, 300)
    led.became_leader(5, 400)                 # a leader re-elected without a step-down seen: the last closes
    assert led.rows() == [(2, 100, 150), (4, 300, 400), (5, 400, 0)]
    for t in range(10, 10 + KEPT):
        led.became_leader(t, t * 1000)
    rows = led.rows()
    assert len(rows) == KEPT and rows[0][0] == 10 and rows[-1] == (9 + KEPT, (9 + KEPT) * 1000, 0)
