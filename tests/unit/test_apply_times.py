"""ApplyTimes (schedd/replication/node.py): which entry kinds hold the Raft tick thread, and for
how long (what a per-entry apply cap is sized from)."""

from __future__ import annotations

import logging

from schedd.core import commands as C
from schedd.replication.node import ApplyTimes


def test_slow_entries_are_kept_by_kind_and_warned_about_at_most_once_a_second(caplog) -> None:
    times = ApplyTimes()
    fire = C.encode(C.NOOP, rid="r", now=0, term=1)
    times.note(7, fire, 0.0, ApplyTimes.SLOW_S / 10)          # fast: nothing
    assert times.slowest == {} and times.slow == 0
    with caplog.at_level(logging.WARNING, logger="schedd.raft"):
        times.note(8, fire, 0.02, 0.06)
        times.note(9, fire, 0.0, 0.12)
    assert times.slow == 2
    assert times.slowest == {C.NOOP: (0.12, len(fire))}
    warned = [r.getMessage() for r in caplog.records if "held the raft tick thread" in r.getMessage()]
    assert warned == [f"entry 8 (noop, {len(fire)} bytes) held the raft tick thread 80 ms: "
                      "60 ms applying, 20 ms waiting for the node lock"]


def test_an_entry_that_is_not_json_is_counted_as_unknown() -> None:
    times = ApplyTimes()
    times.note(1, "not json", 0.0, 1.0)
    assert list(times.slowest) == ["?"]


def test_the_state_is_frozen_out_of_full_collections_as_it_grows(monkeypatch) -> None:
    """A 100,000-job herd: collections over a growing heap held the tick thread up to 928 ms
    inside a fire entry's apply. Freezing on every 10% of growth keeps them small."""
    import gc

    from schedd.replication.node import GrowthFreezer

    calls: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))
    f = GrowthFreezer()
    assert not f.note(GrowthFreezer.MIN_ROWS - 1)                 # a small state: never
    assert f.note(GrowthFreezer.MIN_ROWS)
    assert not f.note(int(GrowthFreezer.MIN_ROWS * 1.05))         # not grown enough
    assert f.note(int(GrowthFreezer.MIN_ROWS * 1.1) + 1)
    rows = [GrowthFreezer.MIN_ROWS + i * 1000 for i in range(1000)]
    for n in rows:                                                # up to ~1M rows
        f.note(n)
    assert len(calls) == f.freezes < 60                           # ~log(100)/log(1.1) + 2
    assert not f.note(rows[-1] // 2)                              # shrinking: nothing
