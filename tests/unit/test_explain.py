"""Explain (schedd.core.explain): one table-driven case per disposition, each built by feeding
entries to a real state as the Raft log would, then asking why an instant ran or did not."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from schedd.core import commands as C
from schedd.core import explain as E
from schedd.core.audit import event
from schedd.core.model import execution_id
from tests.support.state import T0, TOP_LEVEL, Harness

MIN = 60_000


def claim(h: Harness, key, attempt=1, worker="w1") -> int:
    r = h.apply(C.START, job=key[0], scheduled_ms=key[1], attempt=attempt, worker=worker)
    assert r.ok, r.msg
    return r.payload.token


def finish(h: Harness, key, token, state="SUCCEEDED", error=""):
    r = h.apply(C.FINISH, job=key[0], scheduled_ms=key[1], token=token, state=state, error=error)
    assert r.ok, r.msg


def minutely(h: Harness, **kw) -> None:
    h.put(schedule="@every 60s", **kw)
    h.plan_and_fire()


def down_for(h: Harness, ms: int, **kw) -> None:
    minutely(h, **kw)
    h.now += ms
    for _ in range(200):
        if not h.plan_and_fire():
            break


def kinds(x: E.Explanation) -> list[str]:
    return [f.kind for f in x.findings]


def detail(x: E.Explanation, kind: str, key: str) -> str:
    return next(dict(f.details)[key] for f in x.findings if f.kind == kind and key in dict(f.details))


# ---------------------------------------------------------------- an instant that ran


def test_a_run_says_when_it_was_recorded_who_claimed_it_each_attempt_the_retry_and_the_sla():
    h = Harness()
    h.put(schedule="@every 60s", retry={"max_attempts": 3}, sla={"within_seconds": 3600})
    h.plan_and_fire()
    key = ("j1", T0)
    ex = h.state.execs[key]
    first = claim(h, key)
    finish(h, key, first, "FAILED", error="exit 3")
    h.now = h.state.execs[key].retry_at
    second = claim(h, key, attempt=2, worker="w2")
    finish(h, key, second)
    x = E.explain(h.state, "j1", T0)
    assert x.disposition == "ran" and x.id == execution_id("j1", T0)
    assert detail(x, "recorded", "log_index") == str(ex.log_index)
    assert detail(x, "recorded", "term") == "1"
    claims = [dict(f.details) for f in x.findings if f.kind == "claimed"]
    assert [(c["worker"], c["fencing_token"]) for c in claims] == [("w1", str(first)), ("w2", str(second))]
    assert [dict(f.details)["state"] for f in x.findings if f.kind == "outcome"] == ["FAILED", "SUCCEEDED"]
    retry = next(f for f in x.findings if f.kind == "retry")
    assert "failure 1 of max_attempts 3" in retry.text
    assert detail(x, "sla", "verdict") == "met"
    assert "not-recorded" in kinds(x)            # which node led the term is not kept: said so
    assert x.index == h.index


def test_a_running_run_names_its_worker_and_token():
    h = Harness()
    minutely(h)
    token = claim(h, ("j1", T0))
    x = E.explain(h.state, "j1", T0)
    assert x.disposition == "running" and detail(x, "claimed", "fencing_token") == str(token)


# ---------------------------------------------------------------- instants that did not run


def _overlap(h: Harness) -> int:
    h.put(schedule="@every 60s", overlap="skip")
    h.plan_and_fire()
    claim(h, ("j1", T0))
    h.now += MIN
    h.plan_and_fire()
    r = h.apply(C.START, job="j1", scheduled_ms=T0 + MIN, attempt=1, worker="w1")
    h.apply(C.SKIP, items=[["j1", T0 + MIN, f"overlap skip: {r.msg}"]])
    return T0 + MIN


def _paused(h: Harness) -> int:
    minutely(h)
    h.now += 1000
    h.apply(C.PAUSE, name="j1")
    h.now += 10 * MIN
    h.apply(C.RESUME, name="j1")
    return T0 + 5 * MIN


def _paused_now(h: Harness) -> int:
    minutely(h)
    h.now += 1000
    h.apply(C.PAUSE, name="j1")
    h.now += 10 * MIN
    return T0 + 5 * MIN


def _window(h: Harness) -> int:
    down_for(h, 60 * MIN, catchup_window_seconds=600)
    return T0 + 10 * MIN


def _cap(h: Harness) -> int:
    down_for(h, 60 * MIN, catchup_max=3)
    return T0 + 10 * MIN


def _coalesced(h: Harness) -> int:
    down_for(h, 60 * MIN, catchup="latest")
    return T0 + 10 * MIN


def _catchup_none(h: Harness) -> int:
    down_for(h, 60 * MIN, catchup="none")
    return T0 + 10 * MIN


def _deadline(h: Harness) -> int:
    down_for(h, 60 * MIN, starting_deadline_seconds=300, catchup="latest")
    return T0 + 10 * MIN


def _quota(h: Harness) -> int:
    h.put(name="a", schedule="@every 60s", team="ops")
    h.put(name="j1", schedule="@every 60s", team="ops")
    h.apply(C.QUOTA, key="team:ops", limit=1)
    h.plan_and_fire()
    claim(h, ("a", T0))
    h.now += 5000
    return T0


def _slot(h: Harness) -> int:
    minutely(h, pool="gpu")
    h.now += 5000
    return T0


def _not_due(h: Harness) -> int:
    minutely(h)
    return T0 + 30 * MIN


def _before_created(h: Harness) -> int:
    h.now += 60 * MIN
    minutely(h)
    return T0 + 10 * MIN


def _not_an_instant(h: Harness) -> int:
    minutely(h)
    h.now += 5 * MIN
    return T0 + 90_500


def _calendar(h: Harness) -> int:
    # T0 is a Friday 08:00Z: the 09:00 instant of Saturday the 16th falls on the "weekend" calendar
    assert h.apply(C.CALENDAR_PUT, calendar={"name": "weekend", "team": "default", "weekdays": [5, 6]}).ok
    assert h.put(name="j1", schedule="0 9 * * *", calendar={"skip": ["weekend"]}).ok
    for d in range(2):
        h.now = T0 + 3_600_000 + d * 86_400_000
        h.plan_and_fire()
    return T0 + 3_600_000 + 86_400_000


CASES: list[tuple[str, Callable[[Harness], int], str, str]] = [
    # name, the story, the disposition, a word the findings must hold
    ("overlap", _overlap, "skipped-overlap", "j1@2027-01-15T08:00:00Z"),
    ("paused then resumed", _paused, "paused", "paused"),
    ("paused now", _paused_now, "paused", "paused"),
    ("outside the catch-up window", _window, "skipped-window", "catchup_window"),
    ("over the catch-up cap", _cap, "skipped-cap", "catchup_max 3"),
    ("coalesced", _coalesced, "coalesced", "catchup latest"),
    ("catch-up none", _catchup_none, "skipped-catchup", "catchup none"),
    ("starting deadline", _deadline, "skipped-deadline", "deadline 300s"),
    ("waiting for a quota", _quota, "waiting-quota", "team quota 'ops' full"),
    ("waiting for a slot", _slot, "waiting-slot", "pool gpu"),
    ("not yet due", _not_due, "not-yet-due", "next instant"),
    ("before the job existed", _before_created, "before-created", "created at"),
    ("not an instant", _not_an_instant, "not-an-instant", "j1@2027-01-15T08:01:00Z"),
    ("skipped by a calendar", _calendar, "skipped-calendar", "calendar weekend: 2027-01-16"),
]


@pytest.mark.parametrize("story, disposition, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_disposition_is_explained(story, disposition, word):
    h = Harness(level=TOP_LEVEL)
    t = story(h)
    x = E.explain(h.state, "j1", t)
    assert x.disposition == disposition, x
    assert x.summary.startswith(execution_id("j1", t)) and E.says(disposition).summary in x.summary
    text = " | ".join(f.text for f in x.findings)
    assert word in text, text


def test_overlap_names_the_run_that_held_it():
    h = Harness(level=TOP_LEVEL)
    t = _overlap(h)
    assert detail(E.explain(h.state, "j1", t), "reason", "held_by") == execution_id("j1", T0)


def test_not_an_instant_names_the_nearest_instants_before_and_after():
    h = Harness(level=TOP_LEVEL)
    t = _not_an_instant(h)
    x = E.explain(h.state, "j1", t)
    assert [(f.kind, f.at_ms) for f in x.findings if f.kind in ("before", "after")] == [
        ("before", T0 + MIN), ("after", T0 + 2 * MIN)]


def test_a_deleted_job_is_named_by_the_audit_trail_only_for_who_may_read_it():
    h = Harness(level=TOP_LEVEL)
    minutely(h)
    h.apply(C.DELETE, name="j1")
    record = h.state.audit.append(event(time_ms=h.now, principal="alice", source="", action=E.DELETE_ACTION,
                                        target="j1", outcome="allowed", log_index=h.index))
    assert record is not None
    x = E.explain(h.state, "j1", T0, audit=h.state.audit)
    assert x.disposition == "deleted" and detail(x, "deleted", "by") == "alice"
    hidden = E.explain(h.state, "j1", T0, audit=None)
    assert hidden.disposition == "no-such-job" and "may not read" in hidden.findings[0].text
    assert E.explain(h.state, "never", T0, audit=h.state.audit).disposition == "no-such-job"


def test_an_execution_only_in_the_history_store_is_explained_from_there():
    h = Harness(level=TOP_LEVEL)
    minutely(h)
    key = ("j1", T0)
    finish(h, key, claim(h, key))
    ex = h.state.execs[key]
    for _ in range(3):                      # newer runs push it out of memory
        h.now += MIN
        h.plan_and_fire()
        k = ("j1", h.state.jobs["j1"].last_fire)
        finish(h, k, claim(h, k))
    assert key not in h.state.execs
    x = E.explain(h.state, "j1", T0, on_disk=ex)
    assert x.disposition == "ran" and detail(x, "claimed", "worker") == "w1"


def test_a_new_disposition_is_one_row_and_an_unknown_one_still_reads():
    assert E.says("skipped-by-something-new").summary == "did not run (skipped-by-something-new)"
    E.DISPOSITIONS["skipped-test"] = E.Says("did not run: a test excluded it", ("catchup",))
    try:
        assert E.says("skipped-test").summary == "did not run: a test excluded it"
    finally:
        del E.DISPOSITIONS["skipped-test"]


def test_the_same_state_gives_the_same_answer():
    a, b = Harness(level=TOP_LEVEL), Harness(level=TOP_LEVEL)
    for h in (a, b):
        _quota(h)
    assert E.explain(a.state, "j1", T0) == E.explain(b.state, "j1", T0)


def test_schedctl_prints_an_explanation_readably():
    from schedd.api.forecasts import explanation_to_pb
    from schedd_client.forecast_commands import explanation_text
    h = Harness(level=TOP_LEVEL)
    minutely(h)
    token = claim(h, ("j1", T0))
    text = explanation_text(explanation_to_pb(E.explain(h.state, "j1", T0)))
    assert text.startswith("Instant:     j1@2027-01-15T08:00:00Z\nDisposition: running\n")
    assert f"claimed by worker w1 with fencing token {token}" in text and "WHEN" in text


def test_a_one_off_that_fired_is_explained_from_the_ledger_not_as_not_yet_due():
    h = Harness(level=TOP_LEVEL)
    at = T0 + MIN
    h.put(schedule="at 2027-01-15T08:01:00Z")
    h.now = at
    h.plan_and_fire()
    assert h.state.jobs["j1"].next_fire is None
    assert E.explain(h.state, "j1", at).disposition == "waiting-slot"
    del h.state.execs[("j1", at)]                   # as if retention had deleted its record
    assert E.explain(h.state, "j1", at).disposition in ("pruned", "missing")
