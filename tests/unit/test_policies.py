"""Per-job scheduling policies in the pure state machine (injected time, no sleeping): overlap,
concurrency keys, quotas, catch-up, starting deadlines, pauses, backfill, jitter, and the
ledger that gives every nominal instant a disposition."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd.core import commands as C
from schedd.core import ledger
from schedd.core.model import ValidationError, validate_spec
from schedd.core.policy import DEFAULT_BACKFILL_QUOTA, jitter_offset_ms
from tests.support.state import T0, Harness, spec

MIN = 60_000


@pytest.fixture
def h() -> Harness:
    return Harness()


def trigger(h: Harness, name="j1", **kw) -> tuple[str, int]:
    h.now += 1
    r = h.apply(C.TRIGGER, name=name, **kw)
    return name, r.payload.scheduled_ms


def claim(h: Harness, key, attempt=1) -> dict:
    return h.apply(C.START, job=key[0], scheduled_ms=key[1], attempt=attempt, worker="w1")


def finish(h: Harness, key, token, state="SUCCEEDED") -> dict:
    return h.apply(C.FINISH, job=key[0], scheduled_ms=key[1], token=token, state=state)


def dispositions(h: Harness, name="j1", since=T0, until=None) -> Counter:
    job = h.state.jobs[name]
    return Counter(r.disposition for r in ledger.instants(h.state, job, since, until or h.now, 10_000))


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("extra, message", [
    ({"max_active": 2, "overlap": "skip"}, "max_active applies to overlap allow"),
    ({"queue_limit": 2}, "queue_limit applies to overlap queue"),
    ({"concurrency_limit": 2}, "concurrency_limit needs a concurrency_key"),
    ({"concurrency_key": "Bad Key"}, "bad concurrency_key"),
    ({"catchup_order": "random"}, "catchup_order must be one of newest, oldest"),
    ({"jitter_seconds": -1}, "jitter_seconds must be between"),
    ({"catchup_max": 0.5}, "catchup_max must be a whole number"),
])
def test_bad_policies_are_refused_with_a_clear_message(extra, message):
    with pytest.raises(ValidationError, match=message):
        validate_spec(spec(**extra))


def test_default_policies_keep_the_canonical_spec_unchanged():
    assert validate_spec(spec()) == validate_spec(spec(catchup_order="newest", max_active=0))


# ---------------------------------------------------------------- overlap

def test_overlap_skip_start_is_blocked_while_a_run_is_active_and_skip_records_why(h):
    h.put(schedule="", overlap="skip")
    first = trigger(h)
    claim(h, first)
    second = trigger(h)
    r = claim(h, second)
    assert r.code == "blocked" and "overlap skip" in r.msg and first[0] in r.msg
    r = h.apply(C.SKIP, items=[[*second, f"overlap skip: {r.msg}"]])
    assert r.payload.items == [[*second, "skipped"]]
    ex = h.state.execs[second]
    assert ex.state == "SKIPPED" and ex.reason.startswith("overlap")
    assert dispositions(h)["skipped-overlap"] == 1


def test_skip_entry_of_an_old_term_or_a_started_execution_is_refused(h):
    h.put(schedule="")
    key = trigger(h)
    assert h.apply(C.SKIP, items=[[*key, "x"]], term=0).code == "stale_term"
    claim(h, key)
    assert h.apply(C.SKIP, items=[[*key, "x"]]).payload.items == [[*key, "conflict"]]


def test_overlap_queue_waits_then_runs_and_is_bounded(h):
    h.put(schedule="", overlap="queue", queue_limit=2)
    first = trigger(h)
    tok = claim(h, first).payload.token
    queued = [trigger(h), trigger(h)]
    assert claim(h, queued[0]).code == "blocked"                    # waits behind the first
    over = trigger(h)
    ex = h.state.execs[over]
    assert ex.state == "SKIPPED" and "queue full" in ex.reason         # the bound
    finish(h, first, tok)
    assert claim(h, queued[0]).ok                                   # its turn now


def test_overlap_allow_with_max_active_and_force(h):
    h.put(schedule="", max_active=2)
    a, b, c = trigger(h), trigger(h), trigger(h)
    assert claim(h, a).ok and claim(h, b).ok
    assert "max_active 2" in claim(h, c).msg
    forced = trigger(h, force=True)
    assert h.state.execs[forced].trigger == "forced" and claim(h, forced).ok


def test_a_retry_waiting_counts_as_active_but_not_against_itself(h):
    h.put(schedule="", overlap="skip", retry={"max_attempts": 2, "initial_backoff_seconds": 1})
    first = trigger(h)
    finish(h, first, claim(h, first).payload.token, "FAILED")
    assert h.state.execs[first].state == "RETRY_WAIT"
    second = trigger(h)
    assert claim(h, second).code == "blocked"
    assert claim(h, first, attempt=2).ok


# ---------------------------------------------------------------- concurrency keys and quotas

def test_a_concurrency_key_makes_jobs_mutually_exclusive(h):
    h.put(name="a", schedule="", concurrency_key="warehouse")
    h.put(name="b", schedule="", concurrency_key="warehouse")
    ka, kb = trigger(h, "a"), trigger(h, "b")
    tok = claim(h, ka).payload.token
    r = claim(h, kb)
    assert r.code == "blocked" and "concurrency key 'warehouse'" in r.msg
    finish(h, ka, tok)
    assert claim(h, kb).ok
    assert h.state.held == {"team:default": 1, "key:warehouse": 1}


def test_team_quota_caps_running_attempts_and_is_released(h):
    assert h.apply(C.QUOTA, key="team:ops", limit=1).ok
    assert h.apply(C.QUOTA, key="galaxy:x", limit=1).code == "invalid"
    assert h.apply(C.QUOTA, key="team:ops", limit=-1).code == "invalid"
    h.put(name="a", schedule="", team="ops")
    h.put(name="b", schedule="", team="ops")
    h.put(name="c", schedule="", team="dev")
    ka, kb, kc = trigger(h, "a"), trigger(h, "b"), trigger(h, "c")
    tok = claim(h, ka).payload.token
    assert "team quota 'ops' full" in claim(h, kb).msg
    assert claim(h, kc).ok                                         # another team is not affected
    h.apply(C.EXPIRE, job=ka[0], scheduled_ms=ka[1], token=tok, reason="lost")
    assert claim(h, kb).ok                                         # a lost attempt frees its slot
    h.apply(C.QUOTA, key="team:ops", limit=0)
    assert "team:ops" not in h.state.quotas


# ---------------------------------------------------------------- catch-up

def down_for(h: Harness, ms: int, **kw) -> None:
    """A job firing every minute; the cluster goes down for `ms`, then a leader plans again."""
    h.put(schedule="@every 60s", **kw)
    h.plan_and_fire()
    h.now += ms
    for _ in range(200):
        if not h.plan_and_fire():
            break


def test_catchup_all_records_every_missed_instant(h):
    down_for(h, 60 * MIN)
    assert dispositions(h) == Counter({"pending": 61})
    triggers = Counter(ex.trigger for ex in h.state.execs.values())
    assert triggers == Counter({"catchup": 59, "schedule": 2})        # 2: T0 and the one due now


def test_catchup_latest_runs_the_newest_and_coalesces_the_rest(h):
    down_for(h, 60 * MIN, catchup="latest")
    d = dispositions(h)
    assert d == Counter({"coalesced": 58, "pending": 3})
    gap = h.state.jobs["j1"].gaps[-1]
    assert gap[2] == "coalesced" and "j1@2027-01-15T08:59:00Z" in gap[3]


def test_catchup_none_runs_nothing_missed_but_records_it(h):
    down_for(h, 60 * MIN, catchup="none")
    assert dispositions(h) == Counter({"skipped-catchup": 59, "pending": 2})


@pytest.mark.parametrize("order, kept", [("newest", [T0 + 57 * MIN, T0 + 58 * MIN, T0 + 59 * MIN]),
                                         ("oldest", [T0 + 1 * MIN, T0 + 2 * MIN, T0 + 3 * MIN])])
def test_catchup_cap_keeps_the_newest_or_oldest(h, order, kept):
    down_for(h, 60 * MIN, catchup_max=3, catchup_order=order)
    runs = sorted(t for (_, t), ex in h.state.execs.items() if ex.trigger == "catchup")
    assert runs == kept
    assert dispositions(h)["skipped-cap"] == 56


def test_catchup_window_and_starting_deadline_skip_older_instants(h):
    down_for(h, 60 * MIN, catchup_window_seconds=600)
    assert dispositions(h) == Counter({"skipped-window": 49, "pending": 12})   # T0, 50..60 min
    h2 = Harness()
    down_for(h2, 60 * MIN, starting_deadline_seconds=300, catchup="latest")
    d = dispositions(h2)
    assert d == Counter({"skipped-deadline": 54, "coalesced": 4, "pending": 3})   # T0, 59, 60 min


def test_a_failover_delay_is_not_a_miss(h):
    """Late by less than MISSED_GRACE_MS (an election): runs, whatever the policy."""
    h.put(schedule="@every 10s", catchup="none")
    h.plan_and_fire()
    h.now += 13_000
    h.plan_and_fire()
    assert dispositions(h) == Counter({"pending": 2})


@pytest.mark.parametrize("late_ms, expected", [(0, "schedule"), (1_999, "schedule"), (2_000, "schedule"),
                                               (7_000, "schedule"), (9_999, "schedule"),
                                               (10_001, "catchup"), (60_000, "catchup")])
def test_only_instants_older_than_the_missed_grace_are_catch_up(h, late_ms, expected):
    """Late by less than MISSED_GRACE_MS (an outage, a failover) is not a miss: the instant is
    recorded as scheduled, so the catch-up rate does not throttle it."""
    h.put(schedule="@every 1s")
    h.now = T0 + late_ms
    h.fire(("j1", T0))
    assert h.state.execs[("j1", T0)].trigger == expected


# ---------------------------------------------------------------- pause and resume

def test_pause_records_the_paused_instants_and_skips_recorded_intents(h):
    h.put(schedule="@every 60s")
    h.plan_and_fire(lookahead=1_500)
    h.now += MIN - 1_000
    h.plan_and_fire(lookahead=1_500)                                  # T0+60s recorded ahead
    h.apply(C.PAUSE, name="j1")
    assert h.state.execs[("j1", T0 + MIN)].state == "SKIPPED"
    h.now += 30 * MIN
    h.apply(C.RESUME, name="j1")
    h.plan_and_fire()
    # T0 (never started: no worker), 1 min (recorded ahead) and 2..30 min (the gap)
    assert dispositions(h) == Counter({"paused": 31})


def test_resume_with_catch_up_hands_the_paused_instants_to_the_policy(h):
    h.put(schedule="@every 60s", catchup="latest")
    h.plan_and_fire()
    h.now += 1
    h.apply(C.PAUSE, name="j1")
    h.now += 30 * MIN
    h.apply(C.RESUME, name="j1", catch_up=True)
    for _ in range(5):
        h.plan_and_fire()
    d = dispositions(h)
    # T0 was never started (no worker) and ends paused; 1..28 coalesced into 29; 29 and 30 run
    assert d == Counter({"coalesced": 28, "pending": 2, "paused": 1})


# ---------------------------------------------------------------- backfill

def test_backfill_creates_missing_instants_on_its_lane(h):
    h.put(schedule="@every 60s")
    h.plan_and_fire()                                                  # T0 ran on schedule
    times = [T0 - 2 * MIN, T0 - MIN, T0]
    r = h.apply(C.BACKFILL, name="j1", times=times)
    assert (r.payload.created, r.payload.duplicates) == (2, 1)
    ex = h.state.execs[("j1", T0 - MIN)]
    assert ex.trigger == "backfill" and ex.lane == "backfill"
    assert h.apply(C.BACKFILL, name="j1", times=[T0 + 1]).code == "invalid"
    assert h.apply(C.BACKFILL, name="j1", times="x").code == "invalid"


def test_backfill_lane_has_its_own_default_quota(h):
    h.put(schedule="@every 60s")
    times = [T0 - k * MIN for k in range(1, 5)]
    h.apply(C.BACKFILL, name="j1", times=times)
    results = [claim(h, ("j1", t)) for t in times]
    assert sum(r.ok for r in results) == DEFAULT_BACKFILL_QUOTA
    assert "lane quota 'backfill' full" in results[-1].msg
    h.apply(C.QUOTA, key="lane:backfill", limit=10)
    assert claim(h, ("j1", times[-1])).ok


# ---------------------------------------------------------------- jitter

def test_jitter_delays_due_time_deterministically_and_keeps_the_nominal_key(h):
    h.put(schedule="@every 60s", jitter_seconds=30)
    h.plan_and_fire()
    ex = h.state.execs[("j1", T0)]
    assert ex.due_ms == T0 + jitter_offset_ms("j1", 30_000) and 0 < ex.due_ms - T0 < 30_000
    assert list(h.state.ready) == [(ex.due_ms, "j1", T0)]


def test_jitter_spreads_ten_thousand_midnight_jobs_over_the_window():
    offsets = [jitter_offset_ms(f"job-{i}", 60_000) for i in range(10_000)]
    per_10s = Counter(o // 10_000 for o in offsets)
    assert sorted(per_10s) == [0, 1, 2, 3, 4, 5]
    assert all(1_500 < n < 1_850 for n in per_10s.values())           # ~1,667 each, not one burst


# ---------------------------------------------------------------- the ledger: nothing missing

OPS = st.lists(st.tuples(st.sampled_from(["tick", "down", "pause", "resume", "resume_catch_up",
                                          "trigger", "run_all"]),
                         st.integers(min_value=1, max_value=40)), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, policy=st.sampled_from([{}, {"catchup": "latest"}, {"catchup": "none"},
                                        {"catchup_max": 3}, {"catchup_window_seconds": 300},
                                        {"starting_deadline_seconds": 120}, {"overlap": "queue"}]))
def test_every_nominal_instant_has_a_disposition(ops, policy):
    h = Harness()
    h.put(schedule="@every 60s", history_limit=100_000, **policy)
    for op, n in ops:
        if op == "tick":
            for _ in range(n):
                h.now += 20_000
                h.plan_and_fire(lookahead=1_500)
        elif op == "down":
            h.now += n * MIN
        elif op == "pause":
            h.apply(C.PAUSE, name="j1")
        elif op in ("resume", "resume_catch_up"):
            h.apply(C.RESUME, name="j1", catch_up=op == "resume_catch_up")
        elif op == "trigger":
            h.apply(C.TRIGGER, name="j1")
        elif op == "run_all":
            for (name, t), ex in list(h.state.execs.items()):
                if ex.state == "SCHEDULED" and claim(h, (name, t)).ok:
                    finish(h, (name, t), h.state.execs[(name, t)].attempts[-1].fencing_token)
        for _ in range(100):
            if not h.plan_and_fire():
                break
    d = dispositions(h)
    assert "missing" not in d, d


# ------------------------------------------------------------------ the policy cache

def test_jobs_made_from_one_template_share_one_policy_and_an_update_gets_a_new_one(h):
    for name in ("a", "b", "c"):
        h.put(name=name, schedule="", overlap="skip", priority=3)
    a, b, c = (h.state.policy(h.state.jobs[n]) for n in "abc")
    assert a is b is c and a.overlap == "skip" and a.priority == 3
    h.put(name="b", schedule="", overlap="allow", priority=7)
    assert h.state.policy(h.state.jobs["b"]).priority == 7
    assert h.state.policy(h.state.jobs["a"]).priority == 3


def test_a_policy_that_holds_the_jobs_own_name_is_never_shared(h):
    # the name as the concurrency key: both specs make the same template, yet each job's key
    # is its own name, so each must block only its own runs
    for name in ("a", "b"):
        h.put(name=name, schedule="", concurrency_key=name)
    pa, pb = (h.state.policy(h.state.jobs[n]) for n in "ab")
    assert (pa.concurrency_key, pb.concurrency_key) == ("a", "b")
    first = trigger(h, "a")
    assert claim(h, first).ok
    other = trigger(h, "b")
    assert claim(h, other).ok, "b's key is 'b', not a's"
    again = trigger(h, "a")
    assert claim(h, again).code == "blocked"
