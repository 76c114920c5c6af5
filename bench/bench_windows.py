"""Benchmark window placement (schedd.core.windows, schedd.leader.placer): what the leader and
apply spend per window instant, on a table of `--jobs` jobs of which `--windows` have a
four-hour window (01:00-05:00 Europe/Berlin), over 10 pools; the rest are nightly crons at
every minute of the day.

It does what the leader's placer does, step by step, without a cluster: the pass through the
window jobs in steps (`windows.unplaced`, under the node lock), the window runs already placed
(`windows.taken`, under the lock) and the forecast rows of exact-time jobs (read under the lock in
parts), the forecast and the choice (`placing.place_all`, off the event loop), and apply of the
`place` entries; then one more step with everything placed (what an idle leader never runs: it
rests until a window job moves, view.window_moves).

Run: python bench/bench_windows.py [--jobs N] [--windows N]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedd.core import commands as C
from schedd.core import placing
from schedd.core import windows as W
from schedd.core.commands import FEATURES
from schedd.core.model import validate_spec
from schedd.core.state import SchedulerState

DAY = datetime(2027, 1, 16, tzinfo=ZoneInfo("Europe/Berlin"))
SHELL = {"shell": {"command": "true"}}


class Log:
    """Entries applied as the Raft log would: consecutive indexes, the leader's time."""

    def __init__(self, now: int) -> None:
        self.state, self.index, self.now = SchedulerState(), 0, now
        self.apply(C.EPOCH)
        self.apply(C.FEATURE_LEVEL, level=FEATURES.max_level)

    def apply(self, kind: str, **args: object) -> None:
        self.index += 1
        result = self.state.apply(C.encode(kind, rid="", now=self.now, term=1, by="bench", **args), self.index)
        assert result.ok, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--windows", type=int, default=50_000)
    args = ap.parse_args()
    log = Log(int(DAY.timestamp() * 1000) - 12 * 3_600_000)
    specs = []
    for i in range(args.jobs):
        common = {"timezone": "Europe/Berlin", "handler": SHELL, "pool": f"p{i % 10}"}
        if i < args.windows:
            specs.append(validate_spec({"name": f"w{i:07d}", "window": {"start": "01:00", "end": "05:00"},
                                        **common}).text())
        else:
            specs.append(validate_spec({"name": f"x{i:07d}", "schedule": f"{i % 60} {i // 60 % 24} * * *",
                                        **common}).text())
    for k in range(0, len(specs), 200):
        log.apply(C.PUT_MANY, specs=specs[k:k + 200])
    st = log.state
    scan = locked = off_loop = applying = 0.0
    steps = 0
    after = ""
    gathered: list[W.Want] = []
    while True:                                   # one pass, in steps, gathering (the placer's step)
        t = time.perf_counter()
        wants, after = W.unplaced(st, 50_000, after)
        scan += time.perf_counter() - t
        steps += 1
        gathered += wants
        if after == "":
            break
    t = time.perf_counter()                       # placing them together (the placer's _place)
    taken = W.taken(st, [(w.pool, w.lo, w.hi) for w in gathered])
    names = list(st.jobs)
    rows = [row for i in range(0, len(names), 10_000) for row in placing.exact_rows(st, names[i:i + 10_000])]
    locked += time.perf_counter() - t
    t = time.perf_counter()
    items = placing.place_all(rows, gathered, taken)
    off_loop += time.perf_counter() - t
    t = time.perf_counter()
    for k in range(0, len(items), W.MAX_PLACE_ITEMS):
        log.apply(C.PLACE, items=items[k:k + W.MAX_PLACE_ITEMS])
    applying += time.perf_counter() - t
    placed = len(items)
    t = time.perf_counter()
    W.unplaced(st, 20_000)
    idle = time.perf_counter() - t
    n = max(placed, 1)
    print(f"{args.jobs:,} jobs, {placed:,} window instants placed in {steps} steps")
    print(f"  scan (under the lock, per step)          {scan / steps * 1e3:8.0f} ms")
    print(f"  taken + forecast rows (under the lock)  {locked * 1e3:8.0f} ms in all, in {len(names) // 10_000 + 1} parts")
    print(f"  forecast + choice (off the loop)         {off_loop * 1e3:8.0f} ms  {off_loop / n * 1e6:5.0f} us an instant")
    print(f"  apply of the place entries               {applying * 1e3:8.0f} ms  {applying / n * 1e6:5.0f} us an instant")
    print(f"  a step with everything placed            {idle * 1e3:8.0f} ms")


if __name__ == "__main__":
    main()
