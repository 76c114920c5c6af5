"""The due index: a hierarchical timing wheel over "next fire time" per key.

Why it exists: each tick the leader asks "what is due up to T". With up to 1,000,000 keys that
must cost O(due + log n), never O(n), and the index must be small, because every node keeps
one beside the replicated state. The index is not serialized; it is rebuilt from the jobs after
a snapshot restore.

Why it must be deterministic: it is updated inside the replicated apply function. It reads no
clock and uses no randomness. It never iterates a set; dicts iterate in insertion order.
Everything it returns is ordered by (t, key), so the answers depend only on the operations
applied, not on hash seeds. The internal layout (which level holds a key) can differ between
replicas with different histories, for example one that restored a snapshot. That is harmless,
because no answer depends on it.

Layout, with the defaults slot_ms=1000, slots=512, levels=4. The horizon `end` is always a
multiple of slot_ms:

    near    t < end           exact (t, key) order in a SortedList; past times always land here
    level 1 1 s buckets       for t within the next 512 s
    level 2 512 s buckets     for t within the next ~3.0 days
    level 3 ~3.0 day buckets  for t within the next ~4.2 years
    level 4 ~4.2 year buckets everything later (the top level is unbounded)

In general, level L buckets span slot_ms * slots**(L-1) ms. A key at t >= end goes to the finest
level whose window (`slots` buckets from the horizon's bucket) reaches t. Buckets are sparse:
each level has a dict {bucket number: [key, ...]} and a min-heap of bucket numbers, and a
far-future time costs the same as a near one.

The horizon moves only when due(), pop_due() or advance() asks for an until_ms at or past it. It
then becomes the end of until_ms's slot. Every bucket that starts at or before until_ms is
emptied ("cascaded"): each of its keys moves to the near level or to a finer bucket. A key
moves down at most `levels` times, so advancing costs amortized O(levels) per key, plus one
sort per tick for the keys that enter the near level.

Where a key is follows from its time. If t < end, the key is in the near level (exactly once).
Otherwise bucket t // span(L) of some level L lists it. A bucket is a plain list of keys, and a
key that moves or goes is not taken out of the list it was in: that entry is stale, and the
cascade that empties the bucket skips it (the key -> time map says the key's time is no longer
in the bucket's span). A key may so be listed in two buckets whose spans both hold its time (it
moved away and back): every such bucket starts at or before t, so all of them are emptied by the
advance that takes t below the horizon, which puts each (t, key) into the near level once. When
stale entries outnumber live ones by more than 1,024 the buckets are listed again from the map
(amortized O(1) per move).

Memory: each key costs one entry in the key -> time map and one pointer in a bucket's list (a
dict {key: t} per bucket cost 20-40 bytes more per key: a tenth of a job row's memory). The time
int is shared with the caller's object. A (t, key) tuple is built only when the key enters the
near level, which holds a second or so of keys plus anything overdue. The price: a cascade reads
the key -> time map once per key it moves (a cache miss at a million keys), a few times in a
key's life.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from operator import index
from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

__all__ = ["TimingWheel"]


class TimingWheel:
    """Keys with a due time (epoch ms). Answers "what is due up to T" in (t, key) order."""

    __slots__ = ("_slot_ms", "_slots", "_top", "_spans", "_buckets", "_heaps",
                 "_near", "_time", "_end", "_cur", "_listed")

    def __init__(self, *, slot_ms: int = 1000, slots: int = 512, levels: int = 4,
                 start_ms: int = 0) -> None:
        """slot_ms: the width of a level 1 bucket, and the step of the horizon. slots: the number
        of buckets in each level's window. levels: the number of bucket levels; the top one is
        unbounded. start_ms: the initial horizon. Set it near the current log time so that a rebuild
        does not put every key in one coarse bucket that the first due() must cascade."""
        if slot_ms < 1 or slots < 2 or levels < 1:
            raise ValueError("need slot_ms >= 1, slots >= 2, levels >= 1")
        self._slot_ms = slot_ms
        self._slots = slots
        self._top = levels
        # index 0 of the per-level lists is unused, so that level L lives at index L
        self._spans = [0] + [slot_ms * slots ** (lv - 1) for lv in range(1, levels + 1)]
        self._buckets: list[dict[int, list[str]]] = [{} for _ in range(levels + 1)]
        self._heaps: list[list[int]] = [[] for _ in range(levels + 1)]
        self._near: SortedList[tuple[int, str]] = SortedList()
        self._time: dict[str, int] = {}
        self._listed = 0          # entries in the buckets' lists, stale ones included
        self._set_end(index(start_ms) // slot_ms * slot_ms)

    # -- queries ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._time)

    def __contains__(self, key: object) -> bool:
        return key in self._time

    def get(self, key: str) -> int | None:
        return self._time.get(key)

    def due(self, until_ms: int, limit: int | None = None) -> list[tuple[int, str]]:
        """Return the entries with t <= until_ms, ordered by (t, key), first `limit` only. Nothing is
        removed: the leader proposes a Fire entry, and applying it moves or removes the keys.
        Moves the horizon to until_ms. Call it with "now + lookahead", not with a far future."""
        until = index(until_ms)
        self.advance(until)
        near = self._near
        n = near.bisect_left((until + 1, ""))  # (u+1, "") sorts before every (u+1, key)
        if limit is not None:
            n = max(0, min(n, limit))
        return list(near.islice(0, n))

    def count_due(self, until_ms: int) -> int:
        """How many entries have t <= until_ms: O(log n) once the horizon is there. Moves the
        horizon like due(); the planner asks it a few burst lookaheads ahead, once per step, to
        see a herd coming (the near level then holds that window's keys, one tuple each)."""
        until = index(until_ms)
        self.advance(until)
        return self._near.bisect_left((until + 1, ""))

    def pop_due(self, until_ms: int, limit: int | None = None) -> list[tuple[int, str]]:
        """Like due(), but removes the entries it returns."""
        out = self.due(until_ms, limit)
        if out:
            del self._near[:len(out)]
            time = self._time
            for _, key in out:
                del time[key]
        return out

    def earliest(self) -> tuple[int, str] | None:
        """Return the smallest (t, key), or None if empty. Costs O(log n) when the near level has
        entries. Otherwise it scans the first bucket of each level that lists a key still there
        (buckets found to hold stale entries only are dropped). Does not move the horizon."""
        if self._near:
            return self._near[0]
        best = None
        for level in range(1, self._top + 1):
            heap, buckets, span = self._heaps[level], self._buckets[level], self._spans[level]
            while heap:
                bucket = buckets.get(heap[0])
                cand = None if bucket is None else min(self._live(bucket, heap[0] * span, span), default=None)
                if cand is not None:
                    if best is None or cand < best:
                        best = cand
                    break
                if bucket is not None:          # only stale entries left: drop it
                    self._listed -= len(bucket)
                    del buckets[heap[0]]
                heappop(heap)
        return best

    def _live(self, bucket: list[str], start: int, span: int) -> Iterator[tuple[int, str]]:
        """(t, key) of the keys a bucket lists whose time is still in its span."""
        time, end = self._time, start + span
        for key in bucket:
            t = time.get(key)
            if t is not None and start <= t < end:
                yield (t, key)

    def items(self) -> Iterator[tuple[int, str]]:
        """Yield all entries ordered by (t, key). O(n log n); for rebuilding and debugging."""
        return iter(sorted((t, k) for k, t in self._time.items()))

    # -- updates ----------------------------------------------------------------------------

    def set(self, key: str, t_ms: int) -> None:
        """Insert key at t_ms, or move it there. t_ms may be in the past."""
        t = index(t_ms)
        old = self._time.get(key)
        if old is not None:
            if old == t:
                return
            if old < self._end:
                self._near.remove((old, key))
            # else its bucket's entry is stale from now on (the module docstring)
        self._time[key] = t
        if t < self._end:
            self._near.add((t, key))
        else:
            self._list(key, t)

    def load(self, items: Iterable[tuple[str, int]]) -> None:
        """Insert many (key, t) pairs, for a rebuild: like set() for each, but the near level is
        sorted once. Keys must not be in the wheel yet."""
        time, end, bucket = self._time, self._end, self._bucket
        near = []
        listed = 0
        for key, t in items:
            time[key] = t
            if t < end:
                near.append((t, key))
            else:
                bucket(t).append(key)
                listed += 1
        self._listed += listed
        if near:
            self._near.update(near)

    def discard(self, key: str) -> None:
        """Remove key. Does nothing if it is absent."""
        old = self._time.pop(key, None)
        if old is not None:
            if old < self._end:
                self._near.remove((old, key))
            else:                       # its bucket's entry is stale from now on
                self._relist_if_stale()

    def clear(self) -> None:
        """Remove all keys. The horizon stays, so a rebuild right after clear() lands in fine buckets."""
        self._near.clear()
        self._time.clear()
        self._clear_buckets()

    def _clear_buckets(self) -> None:
        self._listed = 0
        for level in range(1, self._top + 1):
            self._buckets[level].clear()
            self._heaps[level].clear()

    def advance(self, until_ms: int) -> None:
        """Move the horizon past until_ms. The near level then holds every entry with
        t <= until_ms. The horizon never moves back; later calls with an earlier until_ms
        only read the near level. due() and pop_due() call this."""
        until = index(until_ms)
        if until < self._end:
            return
        end = (until // self._slot_ms + 1) * self._slot_ms
        self._set_end(end)
        time = self._time
        to_near = []
        for level in range(self._top, 0, -1):
            heap, buckets, span = self._heaps[level], self._buckets[level], self._spans[level]
            while heap and heap[0] * span <= until:
                b = heappop(heap)
                bucket = buckets.pop(b, None)  # None: dropped earlier
                if bucket is None:
                    continue
                self._listed -= len(bucket)
                # A key never lands in a bucket that starts at or before until. So this loop
                # cannot refill a bucket it has emptied.
                start = b * span
                stop = start + span
                for key in bucket:
                    t = time.get(key)
                    if t is None or not start <= t < stop:
                        continue               # stale: the key moved or went since
                    if t < end:
                        to_near.append((t, key))
                    else:
                        self._bucket(t).append(key)
                        self._listed += 1
            self._trim(level)
        if to_near:
            # A key listed twice in buckets holding its time (moved away and back) is put once
            # (dict.fromkeys keeps the order, which is mostly sorted already: the sort is cheaper).
            self._near.update(dict.fromkeys(to_near) if len(to_near) > 1 else to_near)

    # -- internals --------------------------------------------------------------------------

    def _set_end(self, end: int) -> None:
        self._end = end
        self._cur = [end // span if span else 0 for span in self._spans]

    def _list(self, key: str, t: int) -> None:
        """List key (at t >= end) in its bucket; list every key again once stale entries
        outnumber the live ones by more than 1,024."""
        self._bucket(t).append(key)
        self._listed += 1
        self._relist_if_stale()

    def _relist_if_stale(self) -> None:
        if self._listed > 2 * (len(self._time) - len(self._near)) + 1024:
            end = self._end
            self._clear_buckets()
            for k, kt in self._time.items():
                if kt >= end:
                    self._bucket(kt).append(k)
                    self._listed += 1

    def _bucket(self, t: int) -> list[str]:
        """Return the bucket for t >= end, at the finest level whose window reaches t. Creates it
        if needed."""
        spans, cur, slots, top = self._spans, self._cur, self._slots, self._top
        level = 1
        while level < top and t // spans[level] - cur[level] >= slots:
            level += 1
        b = t // spans[level]
        buckets = self._buckets[level]
        bucket = buckets.get(b)
        if bucket is None:
            bucket = buckets[b] = []
            heappush(self._heaps[level], b)
        return bucket

    def _trim(self, level: int) -> None:
        """Rebuild a level's heap once the numbers of deleted buckets outnumber the live ones.
        Amortized O(1) per deletion, and the heap stays at most 2 * buckets + 16 long."""
        heap, buckets = self._heaps[level], self._buckets[level]
        if len(heap) > 2 * len(buckets) + 16:
            heap[:] = buckets
            heapify(heap)

    def __repr__(self) -> str:
        return f"TimingWheel(len={len(self)}, near={len(self._near)}, end={self._end})"
