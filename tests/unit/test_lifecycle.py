"""Attempts in the state machine: claim (start), result (finish), lease loss (expire), cancel;
retries with backoff, fencing of stale results, at-most-once delivery."""

from __future__ import annotations

import pickle

import pytest

from schedd.core import commands as C
from schedd.core.model import validate_spec
from schedd.core.retry import RetryPolicy
from schedd.core.state import SchedulerState
from tests.support.state import T0, Harness, spec


def fired(h: Harness, **spec) -> tuple[str, int]:
    h.put(schedule="", **spec)
    r = h.apply(C.TRIGGER, name="j1")
    return "j1", r.payload.scheduled_ms


def claim(h: Harness, key, attempt: int, worker: str = "w1") -> dict:
    return h.apply(C.START, job=key[0], scheduled_ms=key[1], attempt=attempt, worker=worker)


def finish(h: Harness, key, token: int, state: str, **kw) -> dict:
    return h.apply(C.FINISH, job=key[0], scheduled_ms=key[1], token=token, state=state, **kw)


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_claim_then_success(h):
    key = fired(h)
    r = claim(h, key, 1)
    assert r.ok and r.payload.token == h.index                 # the token is the claim's log index
    ex = h.state.execs[key]
    assert ex.state == "RUNNING" and ex.attempts[0].worker == "w1"
    h.now += 500
    assert finish(h, key, r.payload.token, "SUCCEEDED", exit_code=0, output_tail="ok\n").payload.state == "SUCCEEDED"
    a = ex.attempts[0]
    assert (a.state, a.ended_ms, a.output_tail) == ("SUCCEEDED", T0 + 500, "ok\n")
    assert list(h.state.by_state["SUCCEEDED"]) == [(key[1], "j1")] and not h.state.by_state["RUNNING"]


def test_fails_twice_then_succeeds_with_backoff_between(h):
    key = fired(h, retry={"max_attempts": 3, "initial_backoff_seconds": 10, "multiplier": 2})
    waits = []
    for attempt in (1, 2):
        tok = claim(h, key, attempt).payload.token
        h.now += 1000
        r = finish(h, key, tok, "FAILED", exit_code=1, error="exit status 1")
        assert r.payload.state == "RETRY_WAIT"
        waits.append(r.payload.retry_at - h.now)
        assert list(h.state.ready) == [(r.payload.retry_at, "j1", key[1])]
        h.now = r.payload.retry_at
    assert 8_000 <= waits[0] <= 12_000 and 16_000 <= waits[1] <= 24_000     # 10 s, 20 s, +-20 %
    tok = claim(h, key, 3).payload.token
    assert finish(h, key, tok, "SUCCEEDED").payload.state == "SUCCEEDED"
    ex = h.state.execs[key]
    assert [a.state for a in ex.attempts] == ["FAILED", "FAILED", "SUCCEEDED"] and not h.state.ready


def test_always_failing_ends_failed_after_max_attempts(h):
    key = fired(h, retry={"max_attempts": 2, "initial_backoff_seconds": 1})
    for attempt in (1, 2):
        tok = claim(h, key, attempt).payload.token
        r = finish(h, key, tok, "TIMED_OUT" if attempt == 2 else "FAILED", error="boom")
    assert r.payload.state == "TIMED_OUT"
    ex = h.state.execs[key]
    assert "gave up after 2 failed attempt(s)" in ex.reason
    assert claim(h, key, 3).code == "conflict"


def test_zombie_result_is_fenced_and_recorded(h):
    key = fired(h, retry={"max_attempts": 3, "initial_backoff_seconds": 1})
    old = claim(h, key, 1, worker="w-stopped").payload.token
    r = h.apply(C.EXPIRE, job=key[0], scheduled_ms=key[1], token=old, reason="no heartbeat for 10s")
    assert r.payload.state == "RETRY_WAIT"
    h.now = r.payload.retry_at
    new = claim(h, key, 2, worker="w2").payload.token
    assert new > old
    late = finish(h, key, old, "SUCCEEDED")
    assert late.code == "stale"
    ex = h.state.execs[key]
    assert ex.state == "RUNNING" and "refused" in ex.attempts[0].rejected
    assert ex.attempts[0].state == "LOST" and ex.attempts[0].error == "no heartbeat for 10s"
    assert finish(h, key, new, "SUCCEEDED").payload.state == "SUCCEEDED"
    assert finish(h, key, new, "FAILED").code == "stale"           # a duplicate report too


def test_at_most_once_lost_attempt_is_never_rerun(h):
    key = fired(h, delivery="at_most_once", retry={"max_attempts": 5})
    tok = claim(h, key, 1).payload.token
    r = h.apply(C.EXPIRE, job=key[0], scheduled_ms=key[1], token=tok, reason="worker lost")
    assert r.payload.state == "LOST"
    assert "at_most_once" in h.state.execs[key].reason
    assert claim(h, key, 2).code == "conflict"


def test_at_most_once_still_retries_a_failure_the_handler_reported(h):
    key = fired(h, delivery="at_most_once", retry={"max_attempts": 2, "initial_backoff_seconds": 1})
    tok = claim(h, key, 1).payload.token
    assert finish(h, key, tok, "FAILED", error="exit status 3").payload.state == "RETRY_WAIT"


def test_cancel_before_and_while_running(h):
    key = fired(h)
    assert h.apply(C.CANCEL, job=key[0], scheduled_ms=key[1]).payload.state == "CANCELLED"
    assert h.apply(C.CANCEL, job=key[0], scheduled_ms=key[1]).code == "conflict"
    h.now += 1
    key2 = ("j1", h.apply(C.TRIGGER, name="j1").payload.scheduled_ms)
    tok = claim(h, key2, 1).payload.token
    r = h.apply(C.CANCEL, job=key2[0], scheduled_ms=key2[1])
    assert r.as_dict() == {"ok": True, "code": "ok", "state": "RUNNING", "token": tok, "cancel_requested": True}
    assert finish(h, key2, tok, "CANCELLED").payload.state == "CANCELLED"
    # a cancelled execution whose worker vanished ends CANCELLED, not retried
    h.now += 1
    key3 = ("j1", h.apply(C.TRIGGER, name="j1").payload.scheduled_ms)
    tok = claim(h, key3, 1).payload.token
    h.apply(C.CANCEL, job=key3[0], scheduled_ms=key3[1])
    assert h.apply(C.EXPIRE, job=key3[0], scheduled_ms=key3[1], token=tok).payload.state == "CANCELLED"
    assert h.apply(C.CANCEL, job="j1", scheduled_ms=1).code == "not_found"


def test_claims_are_checked(h):
    key = fired(h)
    assert claim(h, key, 2).code == "conflict"              # attempts are numbered 1, 2, ...
    h.term = 7
    assert claim(h, key, 1).code == "stale_term"            # not this leader's epoch
    h.term = 1
    tok = claim(h, key, 1).payload.token
    assert claim(h, key, 2).code == "conflict"              # already running
    assert finish(h, key, tok, "EXPLODED").code == "invalid"


def test_a_declined_assignment_goes_back_in_line_without_counting(h):
    key = fired(h, retry={"max_attempts": 1})
    tok = claim(h, key, 1).payload.token
    assert finish(h, key, tok, "REJECTED", error="no free slot").payload.state == "SCHEDULED"
    tok2 = claim(h, key, 2).payload.token
    assert finish(h, key, tok2, "FAILED").payload.state == "FAILED"     # max 1 failure, REJECTED not counted


def test_pruning_drops_only_finished_executions(h):
    h.put(schedule="", history_limit=3)
    keys = []
    for _ in range(4):
        h.now += 1
        keys.append(("j1", h.apply(C.TRIGGER, name="j1").payload.scheduled_ms))
        if len(keys) == 1:
            claim(h, keys[0], 1)
    assert set(h.state.execs) == set(keys)                   # nothing finished: nothing dropped
    for i, key in enumerate(keys[1:3], start=2):
        tok = claim(h, key, 1).payload.token
        finish(h, key, tok, "SUCCEEDED")
    h.now += 1
    keys.append(("j1", h.apply(C.TRIGGER, name="j1").payload.scheduled_ms))
    # the limit is 3: both finished ones go, the RUNNING oldest and the pending ones stay
    assert set(h.state.execs) == {keys[0], keys[3], keys[4]}


def test_a_backlog_nobody_starts_is_skipped_with_a_reason_not_grown_forever(h):
    h.put(schedule="", history_limit=3)
    keys = []
    for _ in range(5):
        h.now += 1
        keys.append(("j1", h.apply(C.TRIGGER, name="j1").payload.scheduled_ms))
    assert set(h.state.execs) == set(keys[2:])                # bounded by the limit
    assert h.state.pending["j1"] == 3


def test_history_max_age_prunes_old_finished_executions(h):
    first = fired(h, history_max_age_seconds=60)
    finish(h, first, claim(h, first, 1).payload.token, "SUCCEEDED")
    h.now += 30_000
    second = ("j1", h.apply(C.TRIGGER, name="j1").payload.scheduled_ms)
    assert first in h.state.execs                             # 30 s old: kept
    h.now += 31_000
    h.apply(C.TRIGGER, name="j1")
    assert first not in h.state.execs and second in h.state.execs   # 61 s old: pruned; pending kept


def test_lifecycle_survives_snapshot_restore(h):
    key = fired(h, retry={"max_attempts": 3, "initial_backoff_seconds": 1})
    tok = claim(h, key, 1).payload.token
    finish(h, key, tok, "FAILED")
    c = SchedulerState()
    c.restore(pickle.loads(pickle.dumps(h.state.snapshot(), protocol=2)))
    assert list(c.ready) == list(h.state.ready) and len(c.ready) == 1
    assert c.execs[key].attempts[0].state == "FAILED" and c.execs[key].retry_at == h.state.execs[key].retry_at


def test_retry_policy_is_deterministic_capped_and_jittered():
    p = RetryPolicy.from_spec(validate_spec(spec(retry={"max_attempts": 9, "initial_backoff_seconds": 1,
                                                        "max_backoff_seconds": 30, "multiplier": 3})))
    delays = [p.delay_ms("job@x", n) for n in range(1, 8)]
    assert delays == [p.delay_ms("job@x", n) for n in range(1, 8)]
    for n, d in enumerate(delays, start=1):
        base = min(30, 3 ** (n - 1)) * 1000
        assert 0.8 * base <= d <= 1.2 * base
    assert len({p.delay_ms(f"job@{i}", 1) for i in range(50)}) > 40     # spread across executions
    assert RetryPolicy.from_spec(validate_spec(spec())).max_attempts == 1


def test_audit_names_the_cancelled_execution(h):
    key = fired(h)
    h.apply(C.CANCEL, job=key[0], scheduled_ms=key[1])
    assert h.state.audit[-1].target == f"j1@{key[1]}" and h.state.audit[-1].action == "cancel"


def test_a_lost_attempt_is_rerun_even_without_a_retry_policy_but_not_forever(h):
    from schedd.core.state import LOST_RETRY_LIMIT
    key = fired(h)                                            # default policy: 1 attempt, no retry
    for attempt in range(1, LOST_RETRY_LIMIT + 2):
        tok = claim(h, key, attempt).payload.token
        r = h.apply(C.EXPIRE, job=key[0], scheduled_ms=key[1], token=tok, reason="worker lost")
        h.now = r.payload.retry_at or h.now
    assert r.payload.state == "FAILED" and "lost attempts" in h.state.execs[key].reason
    assert len(h.state.execs[key].attempts) == LOST_RETRY_LIMIT + 1


def test_a_lost_attempt_does_not_use_up_the_failure_budget(h):
    key = fired(h, retry={"max_attempts": 1})
    tok = claim(h, key, 1).payload.token
    r = h.apply(C.EXPIRE, job=key[0], scheduled_ms=key[1], token=tok, reason="worker lost")
    assert r.payload.state == "RETRY_WAIT"
    h.now = r.payload.retry_at
    tok = claim(h, key, 2).payload.token
    assert finish(h, key, tok, "FAILED").payload.state == "FAILED"  # the one real failure ends it


def test_a_stale_term_refusal_is_not_remembered_under_its_request_id(h):
    """A deposed leader's expiry committed after the new epoch is refused; the new leader's own
    expiry of the same attempt (same request id) must still apply, not get that refusal back."""
    key = fired(h, retry={"max_attempts": 1})
    tok = claim(h, key, 1).payload.token
    old = h.apply(C.EXPIRE, rid=f"expire-{tok}", term=0, job=key[0], scheduled_ms=key[1], token=tok)
    assert old.code == "stale_term"
    new = h.apply(C.EXPIRE, rid=f"expire-{tok}", job=key[0], scheduled_ms=key[1], token=tok)
    assert new.ok and not new.deduplicated


@pytest.mark.parametrize("spec, cancel, state, attempt_state", [
    ({}, False, "SCHEDULED", "REJECTED"),                                  # back in line at once
    ({"retry": {"max_attempts": 3, "initial_backoff_seconds": 10}}, False, "SCHEDULED", "REJECTED"),
    ({"delivery": "at_most_once"}, False, "LOST", "LOST"),                  # keeps its rule
    ({}, True, "CANCELLED", "LOST"),
])
def test_a_claim_that_never_started_is_requeued_without_backoff(h, spec, cancel, state, attempt_state):
    """An inherited claim whose worker reconnected without it is expired with
    never_started; it runs again at once and counts neither as a failure nor as a lost attempt."""
    from schedd.core.state import LOST_RETRY_LIMIT
    key = fired(h, **spec)
    for attempt in range(1, LOST_RETRY_LIMIT + 3):          # more than the lost-attempt budget
        tok = claim(h, key, attempt).payload.token
        if cancel:
            h.apply(C.CANCEL, job=key[0], scheduled_ms=key[1])
        r = h.apply(C.EXPIRE, job=key[0], scheduled_ms=key[1], token=tok, never_started=True,
                    reason="worker w1 reconnected to the new leader without it: never started")
        if r.payload.state != "SCHEDULED":
            break
    ex = h.state.execs[key]
    assert (r.payload.state, ex.attempts[-1].state, r.payload.retry_at) == (state, attempt_state, None)
    if state == "SCHEDULED":
        assert ex.reason.startswith(f"attempt {LOST_RETRY_LIMIT + 2} never started: worker w1")
        assert claim(h, key, LOST_RETRY_LIMIT + 3).ok     # claimable now: no retry wait
