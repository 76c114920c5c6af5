"""Which executions leave memory for the history stores, and "one record per (job, scheduled
time)" once they have (schedd.core.history): every finished execution leaves exactly once, memory
stays bounded, and no path records an instant twice when the first record is only on disk."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd.core import commands as C
from schedd.core import plain
from schedd.core import results as R
from schedd.core.history import HISTORY_LEVEL, KEEP_FINISHED
from schedd.core.model import TERMINAL_STATES
from schedd.core.state import SchedulerState
from tests.support.state import TOP_LEVEL, Harness

assert TOP_LEVEL >= HISTORY_LEVEL


class Archive(Harness):
    """A harness that collects what every apply handed to the history store, as the shell does."""

    def __init__(self, level: int = TOP_LEVEL) -> None:
        self.stored: dict[tuple[str, int], int] = {}     # key -> times handed over
        self.forgotten: list[str] = []
        super().__init__(level=level)

    def raw(self, entry: str) -> dict:
        result = super().raw(entry)
        for ex in self.state.outbox.executions:
            key = (ex.job, ex.scheduled_ms)
            assert ex.state in TERMINAL_STATES, ex
            self.stored[key] = self.stored.get(key, 0) + 1
        self.forgotten += self.state.outbox.forgotten
        return result

    def run(self, name: str, t: int, state: str = "SUCCEEDED") -> None:
        token = self.apply(C.START, job=name, scheduled_ms=t, attempt=1, worker="w1").payload.token
        assert self.apply(C.FINISH, job=name, scheduled_ms=t, token=token, state=state).ok

    def tick(self, name: str = "j1") -> int:
        """Fire the job's next instant (10 s on) and run it to success; returns the instant."""
        t = self.state.jobs[name].next_fire
        self.now = t
        assert self.fire([name, t]).of(R.Items).items == [[name, t, "created"]]
        self.run(name, t)
        return t

    def in_memory(self, name: str = "j1") -> list[int]:
        return list(self.state.by_job.get(name, ()))


def test_finished_runs_leave_memory_once_each_and_memory_stays_bounded():
    h = Archive()
    h.put()
    fired = [h.tick() for _ in range(50)]
    # The newest finished run stays (job get's last run); the others leave as soon as a newer
    # one finishes.
    assert h.in_memory() == [fired[-1]] and KEEP_FINISHED == 1
    assert set(h.stored) | set(("j1", t) for t in h.in_memory()) == {("j1", t) for t in fired}
    assert set(h.stored).isdisjoint(("j1", t) for t in h.in_memory())
    assert all(n == 1 for n in h.stored.values())
    floor, index = h.state.archived["j1"]
    assert floor == max(t for _, t in h.stored) and index <= h.index


def test_live_runs_never_leave_memory():
    h = Archive()
    h.put()
    times = []
    for _ in range(5):                        # fired, never started: SCHEDULED
        t = h.state.jobs["j1"].next_fire
        h.now = t
        h.fire(["j1", t])
        times.append(t)
    assert h.in_memory() == times and not h.stored


def test_below_the_history_level_memory_keeps_history_limit():
    h = Archive(level=HISTORY_LEVEL - 1)
    h.put(history_limit=5)
    for _ in range(12):
        h.tick()
    assert len(h.in_memory()) == 5 and not h.stored and not h.state.archived


def test_a_duplicate_fire_of_an_instant_only_on_disk_is_refused():
    h = Archive()
    h.put()
    first = h.tick()
    for _ in range(5):
        h.tick()
    assert ("j1", first) in h.stored and ("j1", first) not in h.state.execs
    # A deposed leader's (same term) late fire of the first instant: not due, and never recorded.
    items = h.fire(["j1", first]).of(R.Items).items
    assert items == [["j1", first, "duplicate"]]
    assert ("j1", first) not in h.state.execs


def test_backfill_of_an_instant_on_disk_needs_the_proposers_check():
    h = Archive()
    h.put()
    first = h.tick()
    for _ in range(5):
        h.tick()
    floor, left_at = h.state.archived["j1"]
    # No check: never twice, counted as a duplicate.
    r = h.apply(C.BACKFILL, name="j1", times=[first])
    assert r.ok and r.payload.created == 0 and r.payload.duplicates == 1
    # A check older than the last departure: refused whole, nothing recorded.
    before = h.state.state_digest()
    r = h.apply(C.BACKFILL, name="j1", times=[first], checked=left_at - 1)
    assert r.code is R.Code.CONFLICT and "check again" in r.msg
    assert h.state.execs.keys() == {("j1", t) for t in h.in_memory()}
    # The proposer found it in its store: a duplicate, said.
    r = h.apply(C.BACKFILL, name="j1", times=[], checked=left_at, stored=1)
    assert r.ok and r.payload.duplicates == 1 and r.payload.created == 0
    # The proposer checked at or after the last departure and found it absent (retention deleted
    # it): recorded again, as the module says.
    r = h.apply(C.BACKFILL, name="j1", times=[first], checked=left_at)
    assert r.ok and r.payload.created == 1 and ("j1", first) in h.state.execs
    assert before != h.state.state_digest()


@pytest.mark.parametrize("args", [{"checked": -1}, {"checked": "3"}, {"stored": -2}, {"checked": True}])
def test_backfill_refuses_a_malformed_check(args):
    h = Archive()
    h.put()
    t = h.tick()
    r = h.apply(C.BACKFILL, name="j1", times=[t - 10_000], **args)
    assert r.code is R.Code.INVALID
    assert ("j1", t - 10_000) not in h.state.execs


def test_a_manual_trigger_is_recorded_after_the_floor():
    h = Archive()
    h.put()
    for _ in range(4):
        h.tick()
    floor = h.state.archived["j1"][0]
    h.now = floor - 5_000                      # a new leader whose clock is behind the old one's
    r = h.apply(C.TRIGGER, name="j1")
    assert r.payload.scheduled_ms == floor + 1 and ("j1", floor + 1) in h.state.execs


def test_a_new_schedule_or_a_resume_starts_after_the_floor():
    h = Archive()
    h.put(schedule="@every 10s")
    for _ in range(4):
        h.tick()
    floor = h.state.archived["j1"][0]
    h.now = floor - 60_000                     # clocks behind the history
    h.put(schedule="@every 5s")
    assert h.state.jobs["j1"].next_fire > floor
    assert h.apply(C.PAUSE, name="j1").ok
    assert h.apply(C.RESUME, name="j1", catch_up=True).ok
    assert h.state.jobs["j1"].next_fire > floor


def test_deleting_a_job_forgets_its_history_and_a_new_one_starts_clean():
    h = Archive()
    h.put()
    for _ in range(4):
        h.tick()
    assert h.apply(C.DELETE, name="j1").ok
    assert h.forgotten == ["j1"] and "j1" not in h.state.archived
    h.put()
    assert h.state.jobs["j1"].next_fire is not None


def test_the_floors_survive_a_snapshot_and_the_digest_covers_them():
    h = Archive()
    h.put()
    for _ in range(6):
        h.tick()
    image = plain.loads(plain.dumps(h.state))
    other = SchedulerState()
    other.restore(image)
    assert other.archived == h.state.archived
    assert other.state_digest() == h.state.state_digest()
    other.archived["j1"] = (other.archived["j1"][0] + 1, other.archived["j1"][1])
    other._digest = None
    assert other.state_digest() != h.state.state_digest()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["tick", "fail", "trigger", "backfill", "refire", "skip"]), min_size=5, max_size=40))
def test_property_one_record_per_instant_across_memory_and_disk(ops):
    """Whatever the mix of fires, manual runs, backfills and late duplicate fires, no (job, time)
    is ever recorded twice counting memory and the store, and every finished one reaches the store
    at most once."""
    h = Archive()
    h.put()
    recorded: set[tuple[str, int]] = set()

    def note_new() -> None:
        for key in list(h.state.execs):
            if key not in recorded:
                assert key not in h.stored, f"{key} recorded again after it left memory"
                recorded.add(key)

    past = []
    for op in ops:
        if op in ("tick", "fail"):
            t = h.state.jobs["j1"].next_fire
            h.now = t
            codes = [code for _, _, code in h.fire(["j1", t]).of(R.Items).items]
            note_new()
            if codes == ["created"]:
                h.run("j1", t, "SUCCEEDED" if op == "tick" else "FAILED")
            past.append(t)
        elif op == "trigger":
            h.now += 1_000
            r = h.apply(C.TRIGGER, name="j1")
            note_new()
            h.run("j1", r.payload.scheduled_ms)
        elif op == "backfill" and past:
            h.apply(C.BACKFILL, name="j1", times=past[:3])
            note_new()
        elif op == "refire" and past:
            h.fire(["j1", past[0]])
            note_new()
        note_new()
    assert all(n == 1 for n in h.stored.values())
