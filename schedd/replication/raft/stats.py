"""The counters of the repair machinery: what a scripted test asserts, what a debugger and the
metrics (schedd.runtime.metrics) read. Written by the tick thread only."""

from __future__ import annotations

import math


HOLD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, math.inf)


class TickHolds:
    """How long each tick held the tick thread (its wall time less the poll's wait), the thread's
    CPU over the tick, and each part's time in the ticks that had it: per part, counts per
    bucket of HOLD_BUCKETS (not cumulative), the sum and the largest. Written by the tick
    thread, read by the metrics."""

    bounds = HOLD_BUCKETS

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.maxes: dict[str, float] = {}
        self.last_cpu = 0.0
        self.long = 0                   # ticks held tick_timing.LONG_HOLD_S or more
        self.logged_at = -math.inf      # when the last of them was logged

    def record(self, held: float, cpu: float, waited: float, sections: dict[str, float]) -> None:
        self.last_cpu = cpu
        self._add("held", held)
        self._add("cpu", cpu)
        for part, seconds in sections.items():
            if part == "poll+messages":
                part, seconds = "messages", seconds - waited
            if part != "wait" and seconds > 0:
                self._add(part, seconds)

    def _add(self, part: str, seconds: float) -> None:
        counts = self.counts.get(part)
        if counts is None:
            counts = self.counts[part] = [0] * len(HOLD_BUCKETS)
            self.sums[part] = 0.0
            self.maxes[part] = 0.0
        for i, bound in enumerate(HOLD_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
                break
        self.sums[part] += seconds
        if seconds > self.maxes[part]:
            self.maxes[part] = seconds


class RepairStats:
    """Counters of the repair machinery (what a scripted test asserts, what a debugger reads)."""

    __slots__ = ("truncations", "truncated_entries", "rejections", "stale_rejections", "pre_votes",
                 "max_tick_gap", "long_tick_gaps", "apply_yields", "apply_lock_yields", "acked_lost",
                 "tick_holds", "newer_term_step_downs")

    def __init__(self) -> None:
        self.truncations = 0
        self.truncated_entries = 0
        self.rejections = 0
        self.stale_rejections = 0
        self.pre_votes = 0
        self.max_tick_gap = 0.0         # seconds, the longest time between two tick starts
        self.long_tick_gaps = 0         # gaps over half the minimum election timeout
        self.apply_yields = 0           # ticks that left committed entries for the next one
        self.apply_lock_yields = 0      # of which: the node lock stayed busy (the bounded lock wait)
        self.acked_lost = 0             # followers found without entries they acknowledged (log repair)
        self.tick_holds = TickHolds()   # how long each tick held the tick thread, by part
        self.newer_term_step_downs = 0  # leaderships ended by a node of a newer term (newer term heard)
