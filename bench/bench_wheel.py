"""Benchmark for the due index (schedd.core.wheel.TimingWheel).

The baseline, measured in the same run, is a plain SortedList of (t, key) plus a key -> t dict.
Run: python bench/bench_wheel.py [--keys N]. With the default of 1,000,000 keys it takes about
45 s on a small, busy VM.

It prints:
  - the insert rate for N keys, with random times spread over one day
  - the memory per key (tracemalloc), for the index itself. The keys and the callers' time ints
    are allocated before measuring, because the job table owns them. The baseline is built in
    bulk for this, to save time; its layout is the same.
  - the cost of due() when 1,000 / 10,000 / 100,000 keys are due, on top of the N keys: the
    set() calls that add them (set 30 min ahead), the first due() (which includes the cascade
    that brings them into the near level) and the same due() again. The wheel defers its
    sorting to the cascade; the baseline sorts in set(). So compare the sums.
  - the move rate (set() on existing keys, to new random times)
  - six hours drained with pop_due() in 1 s ticks: the mean and worst tick. The worst is a
    level 2 bucket (512 s of keys) cascading into level 1.
  - the first due() after a rebuild with a cold horizon (start_ms=0), on N/4 keys. This shows
    why the rebuild should pass start_ms.

The cyclic GC is off while timing. Otherwise a full collection of the big heap, which is not the
index's doing, lands in whichever call happens to trigger it.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sortedcontainers import SortedList

from schedd.core.wheel import TimingWheel

T0 = 1_700_000_000_000
HOUR, DAY = 3_600_000, 86_400_000


class Baseline:
    """The obvious index: a SortedList of (t, key) and a key -> t dict."""

    def __init__(self, start_ms: int = 0) -> None:
        self.sl, self.d = SortedList(), {}

    def __len__(self):
        return len(self.d)

    def set(self, key, t):
        old = self.d.get(key)
        if old is not None:
            if old == t:
                return
            self.sl.remove((old, key))
        self.d[key] = t
        self.sl.add((t, key))

    def due(self, until, limit=None):
        n = self.sl.bisect_left((until + 1,))
        return list(self.sl.islice(0, n if limit is None else min(n, limit)))

    def pop_due(self, until, limit=None):
        out = self.due(until, limit)
        del self.sl[:len(out)]
        for _, k in out:
            del self.d[k]
        return out


def build(cls, keys, times, start_ms=T0):
    idx = cls(start_ms=start_ms)
    s = idx.set
    t0 = time.perf_counter()
    for k, t in zip(keys, times):
        s(k, t)
    return idx, time.perf_counter() - t0


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def memory_per_key(make, n):
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    idx = make()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del idx
    return used / n


def wheel_built(keys, times):
    w = TimingWheel(start_ms=T0)
    for k, t in zip(keys, times):
        w.set(k, t)
    return w


def baseline_built(keys, times):
    b = Baseline()
    b.d = dict(zip(keys, times))
    b.sl = SortedList(zip(times, keys))
    return b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    n = ap.parse_args().keys
    rng = random.Random(42)
    wall = time.perf_counter()
    keys = [f"job-{i:07d}" for i in range(n)]
    # background load over a day starting one hour ahead, so the bursts below are all that is due
    times = [T0 + HOUR + rng.randrange(DAY) for _ in range(n)]
    moves = [(keys[rng.randrange(n)], T0 + HOUR + rng.randrange(DAY)) for _ in range(100_000)]
    gc.collect()
    gc.freeze()  # the inputs are long-lived
    gc.disable()
    print(f"TimingWheel vs baseline (SortedList of (t, key) + dict); {n:,} keys, "
          f"Python {sys.version.split()[0]}\n")
    res = {}
    for name, cls in (("wheel", TimingWheel), ("baseline", Baseline)):
        r = res[name] = {}
        idx, dt = build(cls, keys, times)
        r["insert"] = f"{n / dt / 1e3:,.0f} k/s"

        for burst in (1_000, 10_000, 100_000):
            at = T0 + 60_000 * (burst // 1000 % 60 + 1)  # distinct minutes, all before T0+HOUR
            burst_keys = [f"burst-{burst}-{i:06d}" for i in range(burst)]
            burst_times = [at - rng.randrange(1000) for _ in range(burst)]  # within 1 s
            t0 = time.perf_counter()
            for k, t in zip(burst_keys, burst_times):
                idx.set(k, t)
            sets = time.perf_counter() - t0
            out, first = timed(idx.due, at)
            _, again = timed(idx.due, at)
            assert len(out) == burst
            r[f"{burst:>7,} due: set()s / due() / again"] = \
                f"{sets * 1e3:.0f} / {first * 1e3:.1f} / {again * 1e3:.1f} ms"
            _, dt = timed(idx.pop_due, at)
            r[f"pop_due() {burst:>7,}"] = f"{dt * 1e3:.1f} ms"
        reps = 10_000
        t0 = time.perf_counter()
        for i in range(reps):
            idx.due(T0 + HOUR - 1000 + i % 1000)
        r["due(), nothing due"] = f"{(time.perf_counter() - t0) / reps * 1e6:.1f} us"

        t0 = time.perf_counter()
        for k, t in moves:
            idx.set(k, t)
        r["move (set() on existing keys)"] = f"{len(moves) / (time.perf_counter() - t0) / 1e3:,.0f} k/s"

        ticks, worst, total, drained = 0, 0.0, 0.0, 0
        for until in range(T0 + HOUR, T0 + 7 * HOUR, 1000):
            out, dt = timed(idx.pop_due, until)
            drained += len(out)
            ticks += 1
            total += dt
            worst = max(worst, dt)
        r["drain 6 h in 1 s ticks: keys"] = f"{drained:,}"
        r["  mean / worst tick"] = f"{total / ticks * 1e6:.0f} us / {worst * 1e3:.1f} ms"
        res[name]["_len"] = len(idx)
        del idx
        gc.collect()
    assert res["wheel"].pop("_len") == res["baseline"].pop("_len")

    res["wheel"]["memory per key (tracemalloc)"] = \
        f"{memory_per_key(lambda: wheel_built(keys, times), n):.1f} B"
    res["baseline"]["memory per key (tracemalloc)"] = \
        f"{memory_per_key(lambda: baseline_built(keys, times), n):.1f} B"

    m = n // 4
    cold, _ = build(TimingWheel, keys[:m], times[:m], start_ms=0)
    _, first = timed(cold.due, T0)
    res["wheel"][f"cold horizon, {m:,} keys: first due()"] = f"{first * 1e3:.0f} ms"
    res["baseline"][f"cold horizon, {m:,} keys: first due()"] = "n/a"
    del cold

    row = "{:<44}{:>22}{:>22}"
    print(row.format("", "wheel", "baseline"))
    for label in res["wheel"]:
        print(row.format(label, res["wheel"][label], res["baseline"][label]))
    print(f"\nwall time {time.perf_counter() - wall:.1f} s")

if __name__ == "__main__":
    main()
