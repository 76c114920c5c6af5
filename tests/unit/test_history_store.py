"""The history store (schedd.history): what goes in comes out once, applied_index names exactly
what is committed (across a crash too), retention prunes in small steps and only what it should,
pages equal the in-memory listing, and digests compare replicas."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from schedd.core.model import TERMINAL_STATES, Attempt, Execution, ExecutionEvent, Job
from schedd.core.queries import list_executions
from schedd.core.tables import Tables
from schedd.history import HistoryStore, Retention
from schedd.history.codec import decode, encode
from schedd.history.retention import DAY_MS
from tests.support.properties import examples

T0 = 1_800_000_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ex(job: str = "j", t: int = T0, state: str = "SUCCEEDED", *, updated: int | None = None, tail: str = "ok\n",
       exit_code: int = 0) -> Execution:
    end = t + 1_500 if updated is None else updated
    return Execution(job=job, scheduled_ms=t, state=state, trigger="schedule", created_ms=t, term=3,
                     log_index=t // 1000 % 100_000, updated_ms=end,
                     attempts=[Attempt(number=1, worker="w-1", fencing_token=42, started_ms=t + 20, ended_ms=end,
                                       state=state, exit_code=exit_code, output_tail=tail,
                                       worker_incarnation="0f" * 16)])


@pytest.fixture
def open_store(tmp_path):
    opened: list[HistoryStore] = []

    def make(name: str = "h.db", **kw) -> HistoryStore:
        kw.setdefault("writer_thread", False)
        s = HistoryStore(tmp_path / name, **kw)
        opened.append(s)
        return s

    yield make
    for s in opened:
        try:
            s.close(flush=False)
        except sqlite3.ProgrammingError:
            pass                        # closed by the test


def fresh(tmp_path) -> str:
    """A new file for each hypothesis example (the global `random` is hypothesis's: not for names)."""
    return str(tmp_path / f"x{os.urandom(8).hex()}.db")


def all_rows(store: HistoryStore) -> list[Execution]:
    out, after = [], None
    while True:
        page, after, _ = store.list(after=after, limit=7, oldest_first=True)
        out += page
        if after is None:
            return out


# ------------------------------------------------------------------ the codec

texts = hs.text(max_size=12) | hs.sampled_from(["", "0f" * 16, "ABCD", "abc", "ok\n"])
ints = hs.integers(-(2 ** 40), 2 ** 40)
attempts = hs.builds(Attempt, number=hs.integers(0, 9), worker=texts, fencing_token=hs.integers(0, 2 ** 50),
                     started_ms=ints, ended_ms=hs.just(0) | ints, state=hs.sampled_from(["SUCCEEDED", "REJECTED", "WEIRD"]),
                     exit_code=hs.integers(-300, 300), http_status=hs.integers(0, 599), error=texts,
                     output_tail=texts | hs.just("line of output 12345\n" * 200), rejected=texts,
                     worker_incarnation=texts)
executions = hs.builds(
    Execution, job=hs.sampled_from(["a", "b", "c.d", "dag:t"]), scheduled_ms=ints,
    state=hs.sampled_from(sorted(TERMINAL_STATES) + ["NEWSTATE"]),
    trigger=hs.sampled_from(["schedule", "catchup", "manual", "forced", "backfill", "other"]),
    created_ms=ints, term=hs.integers(0, 10 ** 6), log_index=hs.integers(0, 10 ** 9), updated_ms=ints,
    reason=texts, attempts=hs.lists(attempts, max_size=3), retry_at=hs.none() | ints,
    cancel_requested=hs.booleans(), due_ms=hs.just(0) | ints, lane=hs.sampled_from(["", "backfill"]),
    holds=hs.lists(texts, max_size=2).map(tuple),
    events=hs.lists(hs.builds(ExecutionEvent, time_ms=ints, kind=texts, message=texts), max_size=2).map(tuple))


@settings(max_examples=examples(400), deadline=None)
@given(executions)
def test_codec_round_trip(e):
    row = encode(e)
    assert decode(row.cols, row.body) == e


def test_a_long_output_tail_is_compressed_and_a_short_row_is_small():
    assert len(encode(ex(tail="x" * 4096)).body) < 200
    assert len(encode(ex()).body) < 60


# ------------------------------------------------------------------ writes and applied_index


def test_every_added_execution_is_read_exactly_once(open_store):
    s = open_store()
    added = [ex(f"j{i % 7}", T0 + 1000 * (i // 7), ["SUCCEEDED", "FAILED", "LOST"][i % 3]) for i in range(200)]
    for n, i in enumerate(range(0, 200, 30), start=1):
        s.add(added[i:i + 30], applied_index=n, teams={f"j{k}": "t" for k in range(7)})
    s.flush()
    got = all_rows(s)
    assert sorted((e.scheduled_ms, e.job) for e in got) == sorted((e.scheduled_ms, e.job) for e in added)
    assert len({e.id for e in got}) == 200
    for e in added:
        assert s.get(e.job, e.scheduled_ms) == e
    assert s.count() == 200 and s.count("j3") == len([e for e in added if e.job == "j3"])
    assert s.last("j3") == max((e for e in added if e.job == "j3"), key=lambda e: e.scheduled_ms)


@pytest.mark.parametrize("second_index, same_batch, kept_exit", [
    (2, False, 1),       # a later entry changed the finished execution: replaced
    (2, True, 1),        # ... also when both hand-overs share a batch
    (1, False, 0),       # the same entry again (a replay): ignored
])
def test_a_re_add_of_a_key_keeps_one_row(open_store, second_index, same_batch, kept_exit):
    s = open_store()
    s.add([ex(exit_code=0)], applied_index=1)
    if not same_batch:
        s.flush()
    s.add([ex(exit_code=1)], applied_index=second_index)
    s.flush()
    assert s.count() == 1 and len(all_rows(s)) == 1
    assert s.get("j", T0).attempts[0].exit_code == kept_exit


def test_applied_index_advances_only_with_committed_batches(open_store):
    s = open_store(batch_rows=3, batch_delay_s=3600)
    assert s.applied_index == 0
    s.add([ex(t=T0)], 5)
    s.add([ex(t=T0 + 1)], 6)
    assert s.commit_due() == 0 and s.applied_index == 0 and s.count() == 0      # neither full nor old
    s.add([ex(t=T0 + 2), ex(t=T0 + 3)], 8)
    s.add([], 9)                                   # an entry with nothing finished
    assert s.commit_due() == 8 and s.count() == 4   # one batch: whole hand-overs up to 3+ rows
    assert s.flush() == 9 and s.applied_index == 9


def test_a_batch_is_due_by_age(open_store):
    s = open_store(batch_rows=1000, batch_delay_s=0.0)
    s.add([ex()], 4)
    assert s.commit_due() == 4


def test_close_without_flush_loses_the_queue_and_says_so(open_store, tmp_path):
    s = open_store()
    s.add([ex(t=T0)], 1)
    s.flush()
    s.add([ex(t=T0 + 1)], 2)
    s.close(flush=False)
    again = open_store()
    assert again.applied_index == 1 and [e.scheduled_ms for e in all_rows(again)] == [T0]


CRASH = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from schedd.history import HistoryStore, tallies
    from tests.unit.test_history_store import ex, T0
    s = HistoryStore({path!r}, writer_thread=False)
    for i in range(3):
        s.add([ex(f"j{{k}}", T0 + 1000 * i) for k in range(5)], 10 + i)
        s.flush()
    def die(self, conn):
        os._exit(9)                 # killed mid-batch: rows written, transaction open
    tallies.Tallies.write = die
    s.add([ex(f"j{{k}}", T0 + 5000) for k in range(5)], 20)
    s.flush()
""")


def crash_mid_batch(path) -> None:
    run = subprocess.run([sys.executable, "-c", CRASH.format(root=ROOT, path=str(path))], timeout=60)
    assert run.returncode == 9


def test_a_crash_mid_batch_leaves_the_last_committed_batch_and_replay_completes_it(open_store, tmp_path):
    crash_mid_batch(tmp_path / "h.db")
    s = open_store()
    assert s.applied_index == 12
    assert s.count() == 15 and len(all_rows(s)) == 15
    # the digest is that of exactly the committed rows
    ref = open_store("ref.db")
    for i in range(3):
        ref.add([ex(f"j{k}", T0 + 1000 * i) for k in range(5)], 10 + i)
    ref.flush()
    assert s.digest() == ref.digest()
    # the owner replays from the start of its log: what the store has is skipped, the rest added once
    for store in (s, ref):
        for i in range(3):
            store.add([ex(f"j{k}", T0 + 1000 * i) for k in range(5)], 10 + i)
        store.add([ex(f"j{k}", T0 + 5000) for k in range(5)], 20)
        store.flush()
    assert s.applied_index == ref.applied_index == 20
    assert s.count() == ref.count() == 20 and len(all_rows(s)) == 20
    assert s.digest() == ref.digest()


def test_a_batch_that_fails_to_commit_stays_queued(open_store, monkeypatch):
    from schedd.history import rows

    s = open_store()
    s.add([ex(t=T0)], 1)
    s.add([ex(t=T0 + 1)], 2)
    put = rows.put

    def full_disk(*a):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(rows, "put", full_disk)
    with pytest.raises(sqlite3.OperationalError):
        s.flush()
    assert s.applied_index == 0 and s.count() == 0 and s.pending_rows == 2
    monkeypatch.setattr(rows, "put", put)
    assert s.flush() == 2 and s.count() == 2


def test_the_writer_thread_commits_by_age_and_close_flushes(open_store):
    s = open_store(writer_thread=True, batch_delay_s=0.01)
    s.add([ex()], 3)
    assert s.wait_applied(3, timeout=10)
    assert s.get("j", T0) is not None
    s.add([ex(t=T0 + 1)], 4)
    s.close()
    assert open_store().applied_index == 4


def test_readers_on_other_threads_see_whole_batches_while_the_writer_commits(open_store):
    import threading

    s = open_store(writer_thread=True, batch_rows=50, batch_delay_s=0.001)
    seen: list[tuple[int, int]] = []
    errors: list[Exception] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                page, _, total = s.list(limit=1000)
                seen.append((len(page), total))
        except (sqlite3.Error, ValueError) as e:       # reported below, on the test's thread
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    for i in range(40):
        s.add([ex(f"j{k}", T0 + 1000 * i) for k in range(10)], i + 1)
    assert s.wait_applied(40, timeout=30)
    done.set()
    for r in readers:
        r.join()
    assert errors == []
    assert all(n == total and n % 10 == 0 for n, total in seen)     # a page and its total agree
    assert s.count() == 400


def test_a_store_of_another_format_is_refused(open_store, tmp_path):
    open_store().close()
    conn = sqlite3.connect(tmp_path / "h.db")
    conn.execute("UPDATE meta SET value = 99 WHERE key = 'format'")
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match="format 99"):
        open_store()


# ------------------------------------------------------------------ retention


def prune_all(s: HistoryStore, now: int, budget: int) -> list[int]:
    """Prune until no work is left; the rows each step deleted."""
    deleted = []
    for _ in range(1000):
        step = s.prune_step(now, budget)
        assert step.deleted <= budget and step.scanned <= budget + budget
        deleted.append(step.deleted)
        if not step.more:
            return deleted
    raise AssertionError("pruning never finished")


def test_retention_by_count_is_incremental_and_touches_only_its_job(open_store):
    s = open_store(retention=Retention(keep=100, max_age_ms=0))
    s.add([ex("a", T0 + 1000 * i) for i in range(10)] + [ex("b", T0 + 1000 * i) for i in range(10)], 1)
    s.flush()
    s.set_retention("a", Retention(keep=3, max_age_ms=0))
    assert prune_all(s, T0, budget=2) == [2, 2, 2, 1]
    assert [e.scheduled_ms for e in s.list(job="a", oldest_first=True)[0]] == [T0 + 7000, T0 + 8000, T0 + 9000]
    assert s.count("b") == 10 and s.count() == 13


def test_a_store_reopened_prunes_jobs_over_the_default(open_store):
    s = open_store(retention=Retention(keep=100, max_age_ms=0))
    s.add([ex("a", T0 + i) for i in range(10)], 1)
    s.close()
    s = open_store(retention=Retention(keep=4, max_age_ms=0))
    prune_all(s, T0, 100)
    assert s.count("a") == 4


@pytest.mark.parametrize("budget", [1, 3, 1000])
def test_retention_by_age_follows_each_jobs_age(open_store, budget):
    now = T0 + 100 * DAY_MS
    s = open_store(retention=Retention(keep=10_000, max_age_ms=30 * DAY_MS))
    s.set_retention("long", Retention(keep=10_000, max_age_ms=60 * DAY_MS))
    s.set_retention("short", Retention(keep=10_000, max_age_ms=1 * DAY_MS))
    s.set_retention("forever", Retention(keep=10_000, max_age_ms=0))
    ages = [0, 0.5, 2, 29, 31, 59, 61, 99]                # days since it finished
    rows = [ex(job, T0 + i, updated=now - int(a * DAY_MS)) for job in ("dflt", "long", "short", "forever")
            for i, a in enumerate(ages)]
    random.Random(budget).shuffle(rows)
    s.add(rows, 1)
    s.flush()
    prune_all(s, now, budget)
    left = {job: sorted(ages[e.scheduled_ms - T0] for e in s.list(job=job, limit=100)[0])
            for job in ("dflt", "long", "short", "forever")}
    assert left == {"dflt": [0, 0.5, 2, 29], "long": [0, 0.5, 2, 29, 31, 59], "short": [0, 0.5], "forever": ages}
    assert s.count() == 4 + 6 + 2 + 8


# ------------------------------------------------------------------ reads equal the in-memory ones


def tables_of(rows: list[Execution], teams: dict[str, str]) -> Tables:
    st = Tables()
    st.rebuild_indexes()
    for name, team in teams.items():
        st.jobs[name] = Job(name=name, team=team, schedule="@every 10s", tz="UTC", spec_t="{}", version=1,
                            paused=False, next_fire=None, created_ms=0, updated_ms=0, created_by="t")
    for e in rows:
        st.add_exec(replace(e))
    return st


keyed = hs.lists(hs.tuples(hs.sampled_from(["a", "b", "c", "d"]), hs.integers(0, 12),
                           hs.sampled_from(["SUCCEEDED", "FAILED", "LOST", "SKIPPED"])),
                 max_size=40, unique_by=lambda k: k[:2])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=keyed, limit=hs.sampled_from([1, 2, 5, 100]))
def test_pages_equal_the_in_memory_listing(open_store, tmp_path, keys, limit):
    teams = {"a": "t1", "b": "t2", "c": "t1", "d": "t3"}
    rows = [ex(job, T0 + 1000 * t, state) for job, t, state in keys]
    st = tables_of(rows, teams)
    path = fresh(tmp_path)
    s = HistoryStore(path, writer_thread=False)
    try:
        s.add(rows, 1, teams)
        s.flush()
        for job in ("", "a", "d", "zz"):
            for state in ("", "FAILED", "SUCCEEDED"):
                for oldest_first in (False, True):
                    for visible in (None, {"t1"}, {"t*"}, set()):
                        _pages_agree(st, s, limit, job=job, state=state, oldest_first=oldest_first,
                                     visible=visible)
    finally:
        s.close()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(f"{path}{suffix}"):
                os.remove(f"{path}{suffix}")


def _pages_agree(st: Tables, s: HistoryStore, limit: int, **kw) -> None:
    """Both listings page alike from the start, and from each cursor either gives."""
    from fnmatch import fnmatchcase

    vis = kw.pop("visible")
    mem_vis = None if vis is None else _Glob(vis, fnmatchcase)
    after, seen = None, 0
    while True:
        mine = s.list(after=after, limit=limit, visible=mem_vis, **kw)
        theirs = list_executions(st, after=after, limit=limit, visible=mem_vis, **kw)
        assert ([e.id for e in mine[0]], mine[1], mine[2]) == ([e.id for e in theirs[0]], theirs[1], theirs[2]), \
            (kw, vis, after)
        assert [e.state for e in mine[0]] == [e.state for e in theirs[0]]
        seen += 1
        after = mine[1]
        if after is None or seen > 50:
            return


class _Glob:
    """A team filter with patterns, like schedd.core.acl.TeamFilter."""

    def __init__(self, patterns, match):
        self.patterns, self.match = patterns, match

    def __contains__(self, team):
        return any(self.match(team, p) for p in self.patterns)


# ------------------------------------------------------------------ digests and copies


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=keyed.filter(bool), seed=hs.integers(0, 2 ** 32), sizes=hs.tuples(hs.integers(1, 9), hs.integers(1, 9)))
def test_digests_do_not_depend_on_order_or_batches_and_see_one_changed_row(open_store, tmp_path, keys, seed, sizes):
    rows = [ex(job, T0 + 1000 * t, state) for job, t, state in keys]
    stores = []
    for n, size in enumerate(sizes):
        order = list(rows)
        random.Random(seed + n).shuffle(order)
        s = HistoryStore(fresh(tmp_path), writer_thread=False, batch_rows=size)
        for i in range(0, len(order), size):
            s.add(order[i:i + size], i + 1)
            s.commit_due()
        s.flush()
        stores.append(s)
    a, b = stores
    assert a.digest() == b.digest() and all(a.digest(j) == b.digest(j) for j in "abcd")
    changed = rows[seed % len(rows)]
    b.add([replace(changed, attempts=[replace(changed.attempts[0], exit_code=7)])], 10 ** 6)
    b.flush()
    assert a.digest() != b.digest() and a.digest(changed.job) != b.digest(changed.job)
    assert [a.digest(j) == b.digest(j) for j in "abcd"].count(False) == 1
    for s in stores:
        s.close()


def test_a_pruned_store_has_the_digest_of_one_that_never_had_the_rows(open_store):
    s, ref = open_store(retention=Retention(keep=2, max_age_ms=0)), open_store("ref.db")
    s.add([ex("a", T0 + i) for i in range(5)], 1)
    ref.add([ex("a", T0 + i) for i in range(3, 5)], 1)
    s.flush(), ref.flush()
    prune_all(s, T0, 1)
    assert s.digest() == ref.digest() and s.digest("a") == ref.digest("a")


def test_copy_to_is_the_store_as_of_its_applied_index(open_store, tmp_path):
    s = open_store(writer_thread=True, batch_delay_s=0.001)
    for i in range(20):
        s.add([ex(f"j{i % 3}", T0 + i)], i + 1)
    s.wait_applied(20, timeout=10)
    assert s.copy_to(tmp_path / "copy.db") == 20
    copy = open_store("copy.db")
    assert copy.applied_index == 20 and copy.digest() == s.digest() and copy.count() == 20
    assert [e.id for e in all_rows(copy)] == [e.id for e in all_rows(s)]


def test_a_backup_of_a_store_idle_since_its_last_run_is_as_of_the_snapshots_entry(open_store, tmp_path):
    """The store's index moves only with entries that finish runs: a backup taken at entry 9
    of a cluster where the last run finished at entry 3 holds everything up to 9, and says so
    (restore refuses a history older than its snapshot), without waiting for an entry that
    will never hand anything over."""
    import time as clock
    from schedd.api.backup_service import _history_copy
    s = open_store()
    s.add([ex()], 3)
    s.flush()
    started = clock.monotonic()
    info = _history_copy(s, 9, str(tmp_path / "copy.db"))
    assert info.index == 9 and clock.monotonic() - started < 5
    s.add([], 12)                                   # queued, not committed: the copy waits for it
    info = _history_copy(s, 12, str(tmp_path / "copy2.db"))
    assert info.index == 12
