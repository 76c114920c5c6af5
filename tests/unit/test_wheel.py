"""Unit tests for schedd.core.wheel.TimingWheel (the due index).

The reference is a trivial model: a dict plus sorted(). Small wheel shapes (1 ms slots, 4 slots a
level) make cascades, level changes and the top level happen on every few operations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd.core.wheel import TimingWheel

T0 = 1_700_000_000_000  # an epoch ms "now"
SEC, MIN, HOUR, DAY, YEAR = 1000, 60_000, 3_600_000, 86_400_000, 365 * 86_400_000

SHAPES = [
    dict(),                                           # defaults: 1 s x 512, 4 levels
    dict(slot_ms=1, slots=4, levels=3),               # tiny: cascades everywhere
    dict(slot_ms=10, slots=2, levels=7),              # deepest
    dict(slot_ms=1000, slots=64, levels=1),           # flat: one unbounded level
]


class Model:
    """The trivial reference: a dict of key -> t, with sorted() on every query."""

    def __init__(self) -> None:
        self.d: dict[str, int] = {}

    def due(self, until, limit=None):
        out = sorted((t, k) for k, t in self.d.items() if t <= until)
        return out if limit is None else out[:max(0, limit)]

    def pop_due(self, until, limit=None):
        out = self.due(until, limit)
        for _, k in out:
            del self.d[k]
        return out

    def earliest(self):
        return min(((t, k) for k, t in self.d.items()), default=None)


def run(wheel, model, op):
    """Apply op to both; return (wheel answer, model answer)."""
    name, *args = op
    if name == "set":
        wheel.set(*args)
        model.d[args[0]] = args[1]
        return None, None
    if name == "discard":
        wheel.discard(args[0])
        model.d.pop(args[0], None)
        return None, None
    if name == "get":
        return wheel.get(args[0]), model.d.get(args[0])
    if name == "due":
        return wheel.due(*args), model.due(*args)
    if name == "pop_due":
        return wheel.pop_due(*args), model.pop_due(*args)
    if name == "count_due":
        return wheel.count_due(args[0]), len(model.due(args[0]))
    if name == "earliest":
        return wheel.earliest(), model.earliest()
    if name == "advance":  # moves the horizon only: no answer may change
        wheel.advance(args[0])
        return None, None
    if name == "clear":
        wheel.clear()
        model.d.clear()
        return None, None
    raise AssertionError(name)


def check_invariants(wheel, model):
    assert len(wheel) == len(model.d)
    assert list(wheel.items()) == sorted((t, k) for k, t in model.d.items())
    for k, t in model.d.items():
        assert k in wheel and wheel.get(k) == t
    # Structure: the near level holds the keys before the horizon, in order, once each. Every
    # later key is listed in a bucket t // span of some level (live entries); other entries are
    # stale (their key moved or went), skipped when the bucket is emptied, and counted. No live
    # entry is before the horizon. The heaps index every bucket, and their stale numbers stay
    # bounded.
    assert list(wheel._near) == sorted((t, k) for k, t in model.d.items() if t < wheel._end)
    live, listed = set(), 0
    for level in range(1, wheel._top + 1):
        buckets, heap, span = wheel._buckets[level], wheel._heaps[level], wheel._spans[level]
        assert set(buckets) <= set(heap) and len(heap) <= 2 * len(buckets) + 16
        for b, bucket in buckets.items():
            listed += len(bucket)
            for k in bucket:
                t = model.d.get(k)
                if t is not None and b * span <= t < (b + 1) * span:
                    assert t >= wheel._end
                    live.add(k)
    assert live == {k for k, t in model.d.items() if t >= wheel._end}
    assert listed == wheel._listed


def level_of(wheel, key):
    """0 for the near level, else the finest bucket level that lists key where its time is."""
    t = wheel.get(key)
    for level in range(1, wheel._top + 1):
        span = wheel._spans[level]
        if key in wheel._buckets[level].get(t // span, ()):
            return level
    assert (t, key) in wheel._near
    return 0


# -- table-driven ---------------------------------------------------------------------------

CASES = {
    "set_get_discard": (
        [("set", "a", T0 + 5), ("get", "a"), ("get", "zz"), ("set", "a", T0 + 7), ("get", "a"),
         ("discard", "a"), ("get", "a"), ("discard", "a"), ("discard", "never")],
        [T0 + 5, None, T0 + 7, None],
    ),
    "ties_ordered_by_key": (
        [("set", "c", T0), ("set", "a", T0), ("set", "b", T0), ("set", "0", T0 - 1),
         ("due", T0)],
        [[(T0 - 1, "0"), (T0, "a"), (T0, "b"), (T0, "c")]],
    ),
    "limit": (
        [("set", k, T0 + i) for i, k in enumerate("edcba")]
        + [("due", T0 + 10, 2), ("due", T0 + 10, 0), ("due", T0 + 3, 10), ("due", T0 + 10, -1)],
        [[(T0, "e"), (T0 + 1, "d")], [], [(T0 + i, k) for i, k in enumerate("edcb")], []],
    ),
    "pop_due_removes": (
        [("set", "a", T0), ("set", "b", T0 + SEC), ("set", "c", T0 + HOUR),
         ("pop_due", T0 + SEC, 1), ("due", T0 + SEC), ("pop_due", T0 + SEC), ("due", T0 + SEC),
         ("get", "a"), ("get", "c")],
        [[(T0, "a")], [(T0 + SEC, "b")], [(T0 + SEC, "b")], [], None, T0 + HOUR],
    ),
    "past_times": (
        [("due", T0), ("set", "old", T0 - YEAR), ("set", "older", 0), ("set", "neg", -5),
         ("due", T0 - DAY)],
        [[], [(-5, "neg"), (0, "older"), (T0 - YEAR, "old")]],
    ),
    "far_future_cascades": (
        [("due", T0), ("set", "y3", T0 + 3 * YEAR), ("set", "y10", T0 + 10 * YEAR),
         ("set", "d1", T0 + DAY), ("due", T0 + 3 * YEAR - 1), ("due", T0 + 3 * YEAR),
         ("due", T0 + 10 * YEAR - 1), ("pop_due", T0 + 10 * YEAR), ("earliest",)],
        [[], [(T0 + DAY, "d1")], [(T0 + DAY, "d1"), (T0 + 3 * YEAR, "y3")],
         [(T0 + DAY, "d1"), (T0 + 3 * YEAR, "y3")],
         [(T0 + DAY, "d1"), (T0 + 3 * YEAR, "y3"), (T0 + 10 * YEAR, "y10")], None],
    ),
    "move_backwards_and_forwards_across_levels": (
        [("due", T0), ("set", "k", T0 + 5 * YEAR), ("set", "k", T0 + 2 * DAY),
         ("set", "k", T0 + 100 * SEC), ("set", "k", T0 + 5), ("set", "k", T0 + 5 * YEAR),
         ("set", "k", T0 - 1), ("due", T0 + 10 * YEAR), ("set", "k", T0 + 20 * YEAR),
         ("set", "j", T0 + 20 * YEAR), ("due", T0 + 10 * YEAR), ("earliest",)],
        [[], [(T0 - 1, "k")], [], (T0 + 20 * YEAR, "j")],
    ),
    "decreasing_until_after_increasing": (
        [("set", "a", T0 + 1), ("set", "b", T0 + MIN), ("set", "c", T0 + DAY),
         ("due", T0 + DAY), ("due", T0 + MIN), ("due", T0), ("due", T0 + 1), ("set", "d", T0 + 2),
         ("due", T0 + 2), ("pop_due", T0 + 1), ("due", T0 + DAY)],
        [[(T0 + 1, "a"), (T0 + MIN, "b"), (T0 + DAY, "c")], [(T0 + 1, "a"), (T0 + MIN, "b")], [],
         [(T0 + 1, "a")], [(T0 + 1, "a"), (T0 + 2, "d")], [(T0 + 1, "a")],
         [(T0 + 2, "d"), (T0 + MIN, "b"), (T0 + DAY, "c")]],
    ),
    "move_same_bucket_and_back": (
        [("due", T0), ("set", "k", T0 + HOUR), ("set", "k", T0 + HOUR + 1),
         ("set", "k", T0 + 2 * DAY), ("set", "k", T0 + HOUR), ("due", T0 + DAY), ("earliest",)],
        [[], [(T0 + HOUR, "k")], (T0 + HOUR, "k")],
    ),
    "earliest_across_levels": (
        [("earliest",), ("due", T0), ("set", "far", T0 + 800 * SEC), ("due", T0 + 300 * SEC),
         ("set", "near", T0 + 805 * SEC), ("earliest",), ("discard", "far"), ("earliest",)],
        [None, [], [], (T0 + 800 * SEC, "far"), (T0 + 805 * SEC, "near")],
    ),
}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "default")
@pytest.mark.parametrize("name", list(CASES))
def test_table(name, shape):
    ops, expected = CASES[name]
    wheel, model = TimingWheel(**shape), Model()
    got = []
    for op in ops:
        w, m = run(wheel, model, op)
        assert w == m, op
        if op[0] not in ("set", "discard", "advance", "clear"):
            got.append(w)
    assert got == expected
    check_invariants(wheel, model)


def test_contains_len_clear_items():
    w = TimingWheel(start_ms=T0)
    for i, t in enumerate([T0 + YEAR, T0 - 1, T0 + SEC, T0 + DAY]):
        w.set(f"k{i}", t)
    assert len(w) == 4 and "k0" in w and "nope" not in w and 3 not in w
    assert list(w.items()) == [(T0 - 1, "k1"), (T0 + SEC, "k2"), (T0 + DAY, "k3"), (T0 + YEAR, "k0")]
    w.clear()
    assert len(w) == 0 and w.due(T0 + 2 * YEAR) == [] and w.earliest() is None
    w.set("x", T0 + 5)
    assert w.pop_due(T0 + 5) == [(T0 + 5, "x")] and len(w) == 0


def test_rejects_bad_shapes_and_non_int_times():
    for bad in (dict(slot_ms=0), dict(slots=1), dict(levels=0)):
        with pytest.raises(ValueError):
            TimingWheel(**bad)
    with pytest.raises(TypeError):
        TimingWheel().set("a", 1.5)


def test_stale_entries_and_emptied_buckets_stay_bounded():
    """A key bouncing between far buckets leaves a stale entry in each bucket it leaves: the
    buckets are listed again before stale entries outnumber live ones by more than 1,024, and
    the heaps that index bucket numbers are rebuilt before deleted numbers pile up."""
    w, model = TimingWheel(slot_ms=1, slots=4, levels=3), Model()
    w.due(0)
    for i in range(5000):
        t = 1000 + (i % 97) * 16 + (i % 3) * 100_000  # a new top-level bucket almost every time
        run(w, model, ("set", "hot", t))
        run(w, model, ("set", f"k{i % 5}", t + 1))
        assert len(w._heaps[3]) <= 2 * len(w._buckets[3]) + 16
        assert w._listed <= 2 * 6 + 1025
    check_invariants(w, model)
    for i in range(3000):                               # many keys, then all gone
        run(w, model, ("set", f"m{i}", 10**6 + i))
    for i in range(3000):
        run(w, model, ("discard", f"m{i}"))
        assert w._listed <= 2 * len(w) + 1025
    check_invariants(w, model)
    assert w.due(10**9) == model.due(10**9)


def test_heap_trimmed_when_advance_pops_live_buckets():
    w, model = TimingWheel(slot_ms=1, slots=128, levels=2), Model()
    w.due(0)
    for t in range(1, 31):  # 30 live level 1 buckets
        run(w, model, ("set", f"l{t}", t))
    for t in range(40, 86):  # 46 more, then emptied: their numbers linger in the heap
        run(w, model, ("set", f"k{t}", t))
    for t in range(40, 86):
        run(w, model, ("discard", f"k{t}"))
    check_invariants(w, model)
    assert w.due(5) == model.due(5)  # pops 5 live buckets; the heap must shrink too
    check_invariants(w, model)


def test_same_time_on_two_levels():
    """Two keys with the same time can sit on different levels. A move must find the right one."""
    w, model = TimingWheel(), Model()
    w.due(T0)
    run(w, model, ("set", "a", T0 + 600 * SEC))  # beyond level 1's window: level 2
    w.due(T0 + 200 * SEC)  # a's level 2 bucket starts at T0 + 256 s: not emptied
    run(w, model, ("set", "b", T0 + 600 * SEC))  # now within level 1's window
    assert level_of(w, "a") == 2 and level_of(w, "b") == 1
    run(w, model, ("set", "a", T0 + 5 * SEC))
    run(w, model, ("discard", "b"))
    check_invariants(w, model)
    assert w.due(T0 + HOUR) == model.due(T0 + HOUR)


def test_earliest_compares_levels():
    """A coarse bucket placed earlier can hold an earlier time than a fine bucket placed later."""
    w = TimingWheel()
    w.due(T0)
    w.set("far", T0 + 800 * SEC)
    w.due(T0 + 300 * SEC)
    w.set("near", T0 + 805 * SEC)
    assert level_of(w, "far") == 2 and level_of(w, "near") == 1 and not w._near
    assert w.earliest() == (T0 + 800 * SEC, "far")


def test_moves_across_levels_keep_one_place():
    """After any move the key is due once, at its new time; the buckets it left forget it when
    they are emptied."""
    w, model = TimingWheel(), Model()
    w.due(T0)
    seen = []
    for t in (T0 + HOUR, T0 + HOUR + 1, T0 + 2 * DAY, T0 + 3 * YEAR, T0 + 400 * YEAR,
              T0 + 10 * SEC, T0 - 1, T0 + HOUR):
        run(w, model, ("set", "k", t))
        seen.append(level_of(w, "k"))
        check_invariants(w, model)
    assert seen == [2, 2, 2, 3, 4, 1, 0, 2]
    run(w, model, ("set", "m", T0 + DAY + 100 * SEC))
    assert level_of(w, "m") == 2
    assert w.due(T0 + DAY) == model.due(T0 + DAY) == [(T0 + HOUR, "k")]
    assert level_of(w, "m") == 1  # its level 2 bucket started before T0 + DAY: emptied into level 1
    run(w, model, ("discard", "m"))
    check_invariants(w, model)
    assert w.due(T0 + 500 * YEAR) == model.due(T0 + 500 * YEAR) == [(T0 + HOUR, "k")]
    assert all(not lv for lv in w._buckets[1:])      # every bucket emptied, stale entries gone


def test_o_due_does_not_touch_far_buckets():
    """A tick looks only at the near level and at the buckets it reaches."""
    w = TimingWheel(start_ms=T0)
    for i in range(20_000):
        w.set(f"j{i:05d}", T0 + HOUR + i * 1000)
    w.set("now", T0 + 10)
    assert w.due(T0 + 500) == [(T0 + 10, "now")]
    assert len(w._near) == 1  # nothing else was cascaded
    assert sum(len(b) for b in w._buckets[2].values()) == 20_000


# -- property test against the model ---------------------------------------------------------

KEYS = st.sampled_from([f"k{i}" for i in range(12)] + ["", "a", "aa", "b", "é"])
OFFSET = st.one_of(
    st.integers(-50, 50),                    # ms
    st.integers(-2 * MIN, 10 * MIN),         # minutes
    st.integers(-DAY, 5 * DAY),              # days
    st.integers(-YEAR, 30 * YEAR),           # years
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, OFFSET),
        st.tuples(st.just("discard"), KEYS),
        st.tuples(st.just("get"), KEYS),
        st.tuples(st.just("due"), OFFSET, st.one_of(st.none(), st.integers(0, 6))),
        st.tuples(st.just("pop_due"), OFFSET, st.one_of(st.none(), st.integers(0, 6))),
        st.tuples(st.just("count_due"), OFFSET),
        st.tuples(st.just("earliest")),
        st.tuples(st.just("advance"), OFFSET),
        st.just(("clear",)),
    ),
    max_size=80,
)


def absolutize(op, base):
    if op[0] == "set":
        return ("set", op[1], base + op[2])
    if op[0] in ("due", "pop_due"):
        return (op[0], base + op[1], op[2])
    if op[0] in ("advance", "count_due"):
        return (op[0], base + op[1])
    return op


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, shape=st.sampled_from(SHAPES), start=st.sampled_from([0, T0, T0 + 123_456]),
       drift=st.integers(0, 3 * DAY))
def test_matches_model(ops, shape, start, drift):
    """Random ops spanning ms to years, with random until values, give the model's answers."""
    wheel, model = TimingWheel(**shape, start_ms=start), Model()
    base = T0
    for op in ops:
        base += drift // 16  # time moves on, so the horizon keeps advancing
        w, m = run(wheel, model, absolutize(op, base))
        assert w == m, op
    check_invariants(wheel, model)
    assert wheel.due(base + 40 * YEAR) == model.due(base + 40 * YEAR)


# -- determinism across processes with different hash seeds ----------------------------------

_SCRIPT = r"""
import json, random, sys
from schedd.core.wheel import TimingWheel
rng = random.Random(7)  # the ops are fixed; only the hash seed of the process differs
w, out = TimingWheel(slot_ms=1, slots=4, levels=3), []
for i in range(4000):
    k = "job-%d" % rng.randrange(300)
    r = rng.random()
    if r < 0.6:
        w.set(k, rng.randrange(-100, 200_000))
    elif r < 0.7:
        w.discard(k)
    elif r < 0.85:
        out.append(w.due(i * 40 + rng.randrange(-2000, 2000), rng.choice([None, 5])))
    else:
        out.append(w.pop_due(i * 40, rng.choice([None, 3])))
out.append(list(w.items()))
json.dump(out, sys.stdout)
"""


def test_same_answers_under_different_hash_seeds():
    root = Path(__file__).resolve().parents[2]
    runs = []
    for seed in ("1", "2", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(root))
        res = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                             text=True, check=True, timeout=60)
        runs.append(json.loads(res.stdout))
    assert runs[0] == runs[1] == runs[2]
    for ans in runs[0]:
        assert [tuple(x) for x in ans] == sorted(tuple(x) for x in ans)


def test_load_equals_one_set_per_key():
    pairs = [(f"k{i}", (i * 7919) % 100_000 - 5_000) for i in range(2_000)]
    a, b = TimingWheel(start_ms=10_000), TimingWheel(start_ms=10_000)
    a.load(pairs)
    for key, t in pairs:
        b.set(key, t)
    assert list(a.items()) == list(b.items())
    assert a.due(60_000) == b.due(60_000) and len(a) == len(b) == 2_000
