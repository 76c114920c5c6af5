#!/usr/bin/env python
"""What the history store (schedd.history) costs: disk bytes per execution, insert throughput,
read latencies at a million rows, prune throughput, and the RSS of the process holding it; and
the same workload on LMDB (when the `lmdb` package is installed: it is not a dependency) to
compare the two engines by figures.

    python bench/bench_history.py                      # 1M rows, 2,000 jobs (a few minutes)
    python bench/bench_history.py --rows 200000        # quicker
    python bench/bench_history.py --rows 10000000 --no-lmdb --skip-encodings

Workload: `--jobs` jobs firing every minute, rows handed over in time order in batches of
1,000 (one hand-over per minute's fires, as apply would), 95% SUCCEEDED, 4% FAILED, 1%
TIMED_OUT, one attempt each with a short output ("little output"); a second store of
`--tail-rows` rows with 4 KiB output tails of log-like text (compressible) and of random text
(not). Times are wall clock (p50/p99 over `--queries` reads of random jobs and keys, warm OS
cache); the machine is shared, so compare figures of one run.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from schedd.core.model import Attempt, Execution
from schedd.history import HistoryStore, Retention
from schedd.history.codec import decode, encode

T0 = 1_800_000_000_000
MIN = 60_000
DAY = 86_400_000
STATES = ["SUCCEEDED"] * 95 + ["FAILED"] * 4 + ["TIMED_OUT"]


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def job_name(j: int) -> str:
    return f"etl-orders-{j:05d}"


def log_tail(rng: random.Random, size: int) -> str:
    lines, n = [], 0
    while n < size:
        line = (f"2027-01-15T08:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z INFO step {rng.randrange(1000)} "
                f"processed {rng.randrange(100_000)} rows in {rng.randrange(5000)} ms\n")
        lines.append(line)
        n += len(line)
    return "".join(lines)[-size:]


def random_tail(rng: random.Random, size: int) -> str:
    return base64.b64encode(rng.randbytes(size))[:size].decode()


def execution(rng: random.Random, job: str, t: int, index: int, tail: str | None = None) -> Execution:
    state = rng.choice(STATES)
    start = t + rng.randrange(5, 400)
    end = start + rng.randrange(50, 20_000)
    out = tail if tail is not None else f"done: {rng.randrange(10_000)} rows\n"
    return Execution(job=job, scheduled_ms=t, state=state, trigger="schedule", created_ms=t - rng.randrange(0, 50),
                     term=7, log_index=index, updated_ms=end + rng.randrange(1, 30),
                     attempts=[Attempt(number=1, worker=f"worker-{rng.randrange(40):02d}",
                                       fencing_token=index, started_ms=start, ended_ms=end, state=state,
                                       exit_code=0 if state == "SUCCEEDED" else 1, output_tail=out,
                                       worker_incarnation=rng.randbytes(16).hex())])


def workload(rows: int, jobs: int, seed: int = 1) -> Iterator[tuple[int, list[Execution]]]:
    """(entry index, the executions it finished): one entry per minute's fires."""
    rng = random.Random(seed)
    index, minute, made = 1000, 0, 0
    while made < rows:
        n = min(jobs, rows - made)
        t = T0 + minute * MIN
        index += 1
        yield index, [execution(rng, job_name(j), t, index) for j in range(n)]
        made += n
        minute += 1


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def timed_us(fn: Callable[[], object], n: int) -> tuple[float, float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    return pct(out, 0.5), pct(out, 0.99)


def written() -> int:
    """Bytes this process has written (write syscalls: the WAL, then checkpoints into the file)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def disk_bytes(path: Path) -> int:
    return sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal") if os.path.exists(f"{path}{s}"))


# ------------------------------------------------------------------ encodings compared


def enc_json_dict(ex: Execution) -> bytes:
    return json.dumps(asdict(ex), separators=(",", ":")).encode()


def enc_json_list(ex: Execution) -> bytes:
    """The codec's layout (deltas, positional) as JSON text instead of binary."""
    t0 = ex.scheduled_ms
    return json.dumps([ex.reason, ex.due_ms and ex.due_ms - t0, ex.retry_at, int(ex.cancel_requested), ex.lane,
                       list(ex.holds), [[e.time_ms - t0, e.kind, e.message] for e in ex.events],
                       [[a.number, a.worker, a.fencing_token, a.started_ms - t0, a.ended_ms - a.started_ms, a.state,
                         a.exit_code, a.http_status, a.error, a.output_tail, a.rejected, a.worker_incarnation]
                        for a in ex.attempts]], separators=(",", ":")).encode()


def enc_json_zlib(ex: Execution) -> bytes:
    return zlib.compress(enc_json_list(ex), 6)


def enc_binary(ex: Execution) -> bytes:
    return encode(ex).body


ENCODINGS = {"JSON (dict of every field)": enc_json_dict, "JSON (positional, time deltas)": enc_json_list,
             "zlib(JSON positional)": enc_json_zlib, "binary (codec: varints, zlib >= 256 B)": enc_binary}


def encodings(n: int) -> None:
    rng = random.Random(5)
    print("\n== body encodings (the columns are stored apart in every case) ==")
    print(f"{'encoding':42} {'little out B':>13} {'4K log B':>9} {'4K random B':>12} {'encode us':>10}")
    little = [execution(rng, job_name(i), T0 + i, i) for i in range(n)]
    logs = [execution(rng, job_name(i), T0 + i, i, log_tail(rng, 4096)) for i in range(200)]
    rand = [execution(rng, job_name(i), T0 + i, i, random_tail(rng, 4096)) for i in range(200)]
    for name, fn in ENCODINGS.items():
        t = time.perf_counter()
        sizes = [len(fn(ex)) for ex in little]
        us = (time.perf_counter() - t) * 1e6 / n
        print(f"{name:42} {statistics.mean(sizes):13.1f} {statistics.mean(len(fn(e)) for e in logs):9.0f} "
              f"{statistics.mean(len(fn(e)) for e in rand):12.0f} {us:10.1f}")
    rows = [encode(ex) for ex in little]
    t = time.perf_counter()
    for r in rows:
        decode(r.cols, r.body)
    print(f"binary decode: {(time.perf_counter() - t) * 1e6 / n:.1f} us per row")


# ------------------------------------------------------------------ SQLite


def dbstat(path: Path) -> dict[str, int]:
    import sqlite3
    conn = sqlite3.connect(str(path))
    try:
        return dict(conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
    finally:
        conn.close()


def fill(store: HistoryStore, batches: Iterator[tuple[int, list[Execution]]], total: int,
         milestones: int = 5) -> tuple[float, float, float, float, list[tuple[int, float]]]:
    """Hand every batch over and commit it; (rows per wall second, per CPU second, share of the
    time spent encoding, bytes written per row, RSS at milestones)."""
    added, spent, cpu, encoding, rss = 0, 0.0, 0.0, 0.0, []
    wrote = written()
    step = max(1, total // milestones)
    for index, exs in batches:
        t = time.perf_counter()
        for ex in exs[:50]:                                   # the encoding's share, sampled
            encode(ex)
        encoding += (time.perf_counter() - t) * len(exs) / min(50, len(exs))
        t, c = time.perf_counter(), time.process_time()
        store.add(exs, index)
        store.flush()
        spent += time.perf_counter() - t
        cpu += time.process_time() - c
        before, added = added, added + len(exs)
        if added // step != before // step:
            rss.append((added, rss_mib()))
    return added / spent, added / cpu, encoding / spent, (written() - wrote) / added, rss


def sqlite_big(work: Path, rows: int, jobs: int, queries: int) -> None:
    path = work / "history.db"
    print(f"\n== SQLite store: {rows:,} rows, {jobs:,} jobs, batches of {jobs:,} (one entry per minute) ==")
    rss0 = rss_mib()
    store = HistoryStore(path, writer_thread=False, retention=Retention(keep=10 ** 6, max_age_ms=0))
    t = time.perf_counter()
    rate, cpu_rate, enc_share, wrote, rss = fill(store, workload(rows, jobs), rows)
    print(f"insert: {rate:,.0f} rows/s wall, {cpu_rate:,.0f} rows per CPU second (add + commit, "
          f"{time.perf_counter() - t:.0f} s wall); encoding is {enc_share:.0%} of the wall time; "
          f"{wrote:,.0f} B written per row (WAL + checkpoints)")
    print("RSS (MiB) as rows grow: " + ", ".join(f"{n:,}: {m:.0f}" for n, m in rss) + f" (before open: {rss0:.0f})")
    store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = disk_bytes(path)
    print(f"disk: {size / 2**20:.1f} MiB, {size / rows:.1f} B per execution (little output, all tables and indexes)")
    for name, b in sorted(dbstat(path).items(), key=lambda kv: -kv[1]):
        print(f"   {name:28} {b / rows:7.1f} B/row")
    reads(store, rows, jobs, queries)
    prunes(store, path, rows, jobs)
    print(f"RSS after reads and prunes: {rss_mib():.0f} MiB")
    store.close()


def reads(store: HistoryStore, rows: int, jobs: int, queries: int) -> None:
    rng = random.Random(9)
    minutes = rows // jobs
    print(f"reads at {rows:,} rows, {queries:,} each (p50 / p99 us):")
    for label, fn in [
        ("list(job, limit=50)", lambda: store.list(job=job_name(rng.randrange(jobs)), limit=50)),
        ("list(job, limit=50, after=middle)", lambda: store.list(
            job=job_name(rng.randrange(jobs)), limit=50, after=(T0 + rng.randrange(minutes) * MIN, "m"))),
        ("get(job, t)", lambda: store.get(job_name(rng.randrange(jobs)), T0 + rng.randrange(minutes) * MIN)),
        ("last(job)", lambda: store.last(job_name(rng.randrange(jobs)))),
        ("count(job)", lambda: store.count(job_name(rng.randrange(jobs)))),
        ("list(limit=50) whole store", lambda: store.list(limit=50)),
        ("list(state=FAILED, limit=50)", lambda: store.list(state="FAILED", limit=50)),
        ("list(job, state=FAILED, limit=50)", lambda: store.list(job=job_name(rng.randrange(jobs)),
                                                                 state="FAILED", limit=50)),
    ]:
        p50, p99 = timed_us(fn, queries)
        print(f"   {label:36} {p50:8.0f} / {p99:8.0f}")


def prunes(store: HistoryStore, path: Path, rows: int, jobs: int, steps: int = 40, budget: int = 1000) -> None:
    per_job = rows // jobs
    now = T0 + (per_job - 1) * MIN
    for label, retention in [("by count (keep 90% per job)", Retention(keep=per_job * 9 // 10, max_age_ms=0)),
                             ("by age (oldest 10% too old)", Retention(keep=10 ** 6, max_age_ms=per_job * 8 // 10 * MIN))]:
        for j in range(jobs):
            store.set_retention(job_name(j), retention)
        took, deleted = [], 0
        for _ in range(steps):
            t = time.perf_counter()
            step = store.prune_step(now, budget)
            took.append(time.perf_counter() - t)
            deleted += step.deleted
            if not step.more:
                break
        print(f"prune {label}: {deleted / sum(took):,.0f} rows/s, budget {budget}: step p50 "
              f"{pct(took, 0.5) * 1e3:.0f} ms, p99 {pct(took, 0.99) * 1e3:.0f} ms ({deleted:,} rows in {len(took)} steps)")


def sqlite_tails(work: Path, n: int) -> None:
    print(f"\n== disk bytes per execution with 4 KiB output tails ({n:,} rows) ==")
    for label, tail in [("log-like text", log_tail), ("random text", random_tail)]:
        path = work / f"tails-{label.split()[0]}.db"
        store = HistoryStore(path, writer_thread=False, retention=Retention(keep=10 ** 6, max_age_ms=0))
        rng = random.Random(3)
        for b in range(0, n, 1000):
            store.add([execution(rng, job_name(i % 200), T0 + (b + i) * MIN, b + i, tail(rng, 4096))
                       for i in range(min(1000, n - b))], b + 1)
            store.flush()
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        print(f"   {label:16} {disk_bytes(path) / n:8.0f} B per execution")
        store.close()


# ------------------------------------------------------------------ LMDB, the same workload


def _uint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


class LmdbHistory:
    """The store's layout on LMDB: main db (job NUL scheduled_ms) -> columns + body; two index dbs
    (state, scheduled_ms, job) and (updated_ms, job, scheduled_ms) with empty values. No
    tallies or digests: it does less than the SQLite store, so its figures flatter it."""

    def __init__(self, path: Path) -> None:
        import lmdb
        self.env = lmdb.open(str(path), map_size=64 << 30, max_dbs=3, metasync=False, readahead=False)
        self.main = self.env.open_db(b"executions")
        self.by_state = self.env.open_db(b"by_state")
        self.by_updated = self.env.open_db(b"by_updated")

    @staticmethod
    def key(job: str, t: int) -> bytes:
        return job.encode() + b"\0" + struct.pack(">Q", t + (1 << 63))

    def add(self, exs: list[Execution], index: int) -> None:
        rows = [encode(ex) for ex in exs]
        with self.env.begin(write=True) as txn:
            for r in rows:
                job, t, state, trigger, created, updated, term, log_index = r.cols
                k = self.key(job, t)
                v = bytearray((state if isinstance(state, int) else 255, trigger if isinstance(trigger, int) else 255))
                for n in (created - t + (1 << 40), updated - t + (1 << 40), term, log_index, index):
                    _uint(v, n)
                txn.put(k, bytes(v) + r.body, db=self.main)
                txn.put(bytes((v[0],)) + struct.pack(">Q", t + (1 << 63)) + job.encode(), b"", db=self.by_state)
                txn.put(struct.pack(">Q", updated + (1 << 63)) + k, b"", db=self.by_updated)

    def list_job(self, job: str, limit: int) -> list[Execution]:
        out = []
        prefix = job.encode() + b"\0"
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.main)
            if not cur.set_range(prefix + b"\xff" * 8):
                cur.last()
            elif not cur.key().startswith(prefix):
                cur.prev()
            while len(out) < limit and cur.key().startswith(prefix):
                out.append(self._decode(cur.key(), cur.value()))
                if not cur.prev():
                    break
        return out

    def get(self, job: str, t: int) -> Execution | None:
        with self.env.begin() as txn:
            v = txn.get(self.key(job, t), db=self.main)
            return None if v is None else self._decode(self.key(job, t), v)

    @staticmethod
    def _decode(k: bytes, v: bytes) -> Execution:
        job, _, tb = k.partition(b"\0")
        t = struct.unpack(">Q", tb)[0] - (1 << 63)
        nums, pos = [], 2
        for _ in range(5):
            n = shift = 0
            while True:
                b = v[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
            nums.append(n)
        cols = (job.decode(), t, v[0], v[1], nums[0] + t - (1 << 40), nums[1] + t - (1 << 40), nums[2], nums[3])
        return decode(cols, v[pos:])

    def disk(self) -> int:
        return (self.env.info()["last_pgno"] + 1) * self.env.stat()["psize"]


def lmdb_big(work: Path, rows: int, jobs: int, queries: int) -> None:
    try:
        import lmdb  # noqa: F401
    except ImportError:
        print("\n== LMDB: the lmdb package is not installed here (pip install lmdb): not compared ==")
        return
    print(f"\n== LMDB, the same workload: {rows:,} rows (metasync off: like WAL+NORMAL, may lose the last commit) ==")
    db = LmdbHistory(work / "lmdb")
    spent, cpu, added, wrote = 0.0, 0.0, 0, written()
    for index, exs in workload(rows, jobs):
        t, c = time.perf_counter(), time.process_time()
        db.add(exs, index)
        spent += time.perf_counter() - t
        cpu += time.process_time() - c
        added += len(exs)
    print(f"insert: {added / spent:,.0f} rows/s wall, {added / cpu:,.0f} per CPU second, "
          f"{(written() - wrote) / added:,.0f} B written per row; disk {db.disk() / 2**20:.1f} MiB, {db.disk() / rows:.1f} B per "
          f"execution; RSS {rss_mib():.0f} MiB (the map is the file: pages read count in the RSS)")
    rng = random.Random(9)
    minutes = rows // jobs
    for label, fn in [("list(job, limit=50)", lambda: db.list_job(job_name(rng.randrange(jobs)), 50)),
                      ("get(job, t)", lambda: db.get(job_name(rng.randrange(jobs)), T0 + rng.randrange(minutes) * MIN))]:
        p50, p99 = timed_us(fn, queries)
        print(f"   {label:36} {p50:8.0f} / {p99:8.0f} us (p50 / p99)")
    db.env.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--jobs", type=int, default=2_000)
    ap.add_argument("--tail-rows", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=2_000)
    ap.add_argument("--dir", default=None, help="where the stores go (a temporary folder, removed, by default)")
    ap.add_argument("--no-lmdb", action="store_true")
    ap.add_argument("--skip-encodings", action="store_true")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-history-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if not args.skip_encodings:
            encodings(5_000)
            sqlite_tails(work, args.tail_rows)
        sqlite_big(work, args.rows, args.jobs, args.queries)
        if not args.no_lmdb:
            lmdb_big(work, args.rows, args.jobs, args.queries)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
