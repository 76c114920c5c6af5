"""The replicated state machine: every entry kind, dedup, determinism, snapshot/restore."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd.core import commands as C
from schedd.core.model import SCHEDULED, ValidationError, execution_id, validate_spec
from schedd.core.state import DEDUP_TTL_MS, SchedulerState
from schedd.leader.planner import plan_fires
from tests.support.state import SHELL, T0, Harness, spec, text

@pytest.fixture
def h() -> Harness:
    return Harness()


# ---------------------------------------------------------------- jobs

def test_put_creates_job_with_next_fire(h):
    r = h.put()
    assert r.as_dict() == {"ok": True, "code": "ok", "created": True, "name": "j1", "version": 1}
    job = h.state.jobs["j1"]
    assert job.next_fire == T0                        # T0 is on a 10 s boundary: it fires at once
    assert h.state.wheel.get("j1") == job.next_fire
    assert job.team == "default" and job.version == 1 and not job.paused


def test_put_update_bumps_version_and_keeps_next_fire_when_timing_unchanged(h):
    h.put()
    nf = h.state.jobs["j1"].next_fire
    h.now += 3_000
    r = h.put(description="changed")
    assert r.payload.created is False and r.payload.version == 2
    assert h.state.jobs["j1"].next_fire == nf


def test_put_update_with_new_schedule_recomputes_next_fire(h):
    h.put()
    h.now = T0 + 1
    h.put(schedule="@every 1m")
    assert h.state.jobs["j1"].next_fire == T0 + 60_000


@pytest.mark.parametrize("bad, fragment", [
    ({"name": "Bad Name", "schedule": ""}, "bad job name"),
    ({"name": "x", "schedule": "61 * * * *"}, "minute"),
    ({"name": "x", "schedule": "@daily", "timezone": "Mars/Base"}, "Mars/Base"),
    ({"name": "x", "schedule": "@daily", "handler": None}, "handler"),
    ({"name": "x", "schedule": "@daily", "handler": {"shell": {"command": "x" * 9000}}}, "too long"),
    ({"name": "x", "schedule": "@daily", "description": "d" * 2000}, "too long"),
    ({"name": "x", "schedule": "@daily", "labels": {"bad key!": "v"}}, "labels"),
    ({"name": "x", "schedule": "@daily", "overlap": "sometimes"}, "overlap"),
    ({"name": "x", "schedule": "@daily", "retry": {"max_attempts": 1000}}, "max_attempts"),
    ({"name": "x", "schedule": "@daily", "handler": {"http": {"url": "ftp://x"}}}, "http"),
])
def test_validate_spec_refuses_bad_input_with_a_clear_message(bad, fragment):
    with pytest.raises(ValidationError) as e:
        validate_spec({"handler": SHELL, **bad})
    assert fragment in str(e.value)


@pytest.mark.parametrize("committed, fragment", [
    ("not json", "JSON"),
    ('["a"]', "object"),
    ('{"name": "Bad Name", "team": "t", "schedule": "", "timezone": "UTC"}', "bad job name"),
    ('{"name": "x", "team": "t", "schedule": "61 * * * *", "timezone": "UTC"}', "minute"),
    ('{"name": "x", "team": "t", "schedule": "@daily", "timezone": "Mars/Base"}', "Mars/Base"),
    ('{"name": "x", "team": 5, "schedule": "@daily", "timezone": "UTC"}', "team"),
    (42, "JSON text"),
])
def test_apply_rejects_a_malformed_committed_spec_and_commits_nothing(h, committed, fragment):
    before = (dict(h.state.jobs), len(h.state.wheel))
    r = h.apply(C.PUT, spec=committed)
    assert r.ok is False and r.code == "invalid" and fragment in r.msg, r
    assert (dict(h.state.jobs), len(h.state.wheel)) == before


def test_create_only_and_expected_version(h):
    h.put()
    assert h.apply(C.PUT, spec=text(), create_only=True).code == "exists"
    assert h.apply(C.PUT, spec=text(), expected_version=7).code == "conflict"
    assert h.apply(C.PUT, spec=text(), expected_version=1).ok
    assert h.state.jobs["j1"].version == 2


def test_put_many_is_all_or_nothing(h):
    bad = '{"name": "Bad", "team": "t", "schedule": "", "timezone": "UTC"}'
    r = h.apply(C.PUT_MANY, specs=[text(name="a"), text(name="b"), bad])
    assert r.code == "invalid" and "job #3" in r.msg
    assert h.state.jobs == {}
    r = h.apply(C.PUT_MANY, specs=[text(name="a"), text(name="b")])
    assert r.as_dict() == {"ok": True, "code": "ok", "created": 2, "updated": 0}
    assert h.apply(C.PUT_MANY, specs=[text(name="a"), text(name="a")]).code == "invalid"


def test_team_index_follows_updates(h):
    h.put(team="red")
    assert list(h.state.by_team["red"]) == ["j1"]
    h.put(team="blue")
    assert "red" not in h.state.by_team and list(h.state.by_team["blue"]) == ["j1"]
    jobs, nxt, total = h.state.list_jobs(team="blue")
    assert [j.name for j in jobs] == ["j1"] and total == 1 and nxt == ""


def test_delete_removes_job_executions_and_due_entry(h):
    h.put()
    h.plan_and_fire()
    assert h.state.execs
    assert h.apply(C.DELETE, name="j1").ok
    assert h.state.jobs == {} and h.state.execs == {} and len(h.state.wheel) == 0
    assert h.state.by_time == [] and "j1" not in h.state.by_job
    assert h.apply(C.DELETE, name="j1").code == "not_found"


def test_pause_removes_from_wheel_and_resume_skips_missed_instants(h):
    h.put()
    assert h.apply(C.PAUSE, name="j1").ok
    assert "j1" not in h.state.wheel and h.state.jobs["j1"].paused
    assert '"paused":true' in h.state.jobs["j1"].spec_text
    h.now = T0 + 95_000
    assert plan_fires(h.state, h.now, 0, limit=100) == []
    assert h.apply(C.RESUME, name="j1").ok
    assert h.state.jobs["j1"].next_fire == T0 + 100_000
    assert h.apply(C.PAUSE, name="nope").code == "not_found"


def test_trigger_records_manual_execution_and_avoids_key_collision(h):
    h.put(schedule="")
    r1 = h.apply(C.TRIGGER, name="j1")
    r2 = h.apply(C.TRIGGER, name="j1")
    assert (r1.payload.scheduled_ms, r2.payload.scheduled_ms) == (T0, T0 + 1)
    ex = h.state.execs[("j1", T0)]
    assert ex.trigger == "manual" and ex.state == SCHEDULED and ex.log_index == h.index - 1
    assert h.apply(C.TRIGGER, name="nope").code == "not_found"


# ---------------------------------------------------------------- firing

def test_fire_creates_once_and_advances(h):
    h.put()
    r = h.fire(("j1", T0))
    assert r.payload.items == [["j1", T0, "created"]]
    assert h.state.jobs["j1"].next_fire == T0 + 10_000
    assert h.state.wheel.get("j1") == T0 + 10_000
    # the same instant again (a retry, or a second leader): a no-op
    assert h.fire(("j1", T0)).payload.items == [["j1", T0, "duplicate"]]
    assert len(h.state.execs) == 1


def test_fire_refuses_instants_out_of_schedule(h):
    h.put()
    assert h.fire(("j1", T0 + 20_000)).payload.items == [["j1", T0 + 20_000, "not_due"]]
    assert h.fire(("ghost", T0)).payload.items == [["ghost", T0, "unknown_job"]]
    h.apply(C.PAUSE, name="j1")
    assert h.fire(("j1", T0)).payload.items == [["j1", T0, "paused"]]
    assert h.state.execs == {}


def test_fire_chain_in_one_batch_and_catchup_label(h):
    h.put()
    h.now = T0 + 31_000
    items = plan_fires(h.state, h.now, 0, limit=100)
    assert items == [("j1", T0), ("j1", T0 + 10_000), ("j1", T0 + 20_000), ("j1", T0 + 30_000)]
    r = h.fire(*items)
    assert [c for _, _, c in r.payload.items] == ["created"] * 4
    triggers = [h.state.execs[("j1", t)].trigger for _, t in items]
    assert triggers == ["catchup", "catchup", "catchup", "schedule"]


def test_fire_from_stale_or_unrecorded_term_is_rejected(h):
    h.put()
    h.term = 2
    assert h.fire(("j1", T0)).code == "stale_term"       # term 2 not recorded yet
    h.apply(C.EPOCH)
    assert h.fire(("j1", T0), term=1).code == "stale_term"  # the deposed leader
    assert h.fire(("j1", T0)).payload.items[0][2] == "created"
    assert h.state.epoch == 2
    h.apply(C.EPOCH, term=1)                                   # a late epoch never lowers it
    assert h.state.epoch == 2


def test_manual_trigger_on_a_scheduled_instant_does_not_stall_the_schedule(h):
    h.put()
    h.apply(C.TRIGGER, name="j1")                     # takes the key (j1, T0)
    assert h.fire(("j1", T0)).payload.items == [["j1", T0, "duplicate"]]
    assert h.state.jobs["j1"].next_fire == T0 + 10_000


def test_history_is_pruned_to_the_limit(h):
    h.put(history_limit=3)
    for k in range(6):
        h.now = T0 + k * 10_000
        h.plan_and_fire()
    assert sorted(t for (_, t) in h.state.execs) == [T0 + 30_000, T0 + 40_000, T0 + 50_000]
    assert h.state.jobs["j1"].fired_total == 6
    assert len(h.state.by_time) == 3


def test_one_off_at_fires_once(h):
    h.put(schedule="at 2027-01-15T08:00:05Z")
    h.now = T0 + 5_000
    assert h.plan_and_fire() == [["j1", T0 + 5_000, "created"]]
    h.now = T0 + 60_000
    assert h.plan_and_fire() == []
    assert h.state.jobs["j1"].next_fire is None


def test_on_demand_job_never_fires_by_itself(h):
    h.put(schedule="")
    h.now = T0 + 10 ** 9
    assert h.plan_and_fire() == [] and h.state.jobs["j1"].next_fire is None


# ---------------------------------------------------------------- totality and dedup

def test_repeated_request_id_is_a_noop(h):
    r1 = h.apply(C.PUT, rid="req-1", spec=text())
    h.now += 1000
    r2 = h.apply(C.PUT, rid="req-1", spec=text(description="second"))
    assert r2.as_dict() == {**r1.as_dict(), "deduplicated": True}
    assert h.state.jobs["j1"].version == 1
    h.now += DEDUP_TTL_MS + 1
    h.apply(C.NOOP, rid="other")
    assert "req-1" not in h.state.dedup


@pytest.mark.parametrize("entry", ["", "not json", "[]", '{"v": 99, "k": "put"}',
                                   '{"v": 1, "k": "launch", "rid": "", "now": 1, "term": 1}',
                                   '{"v": 1, "k": "put", "rid": "", "now": "x", "term": 1}',
                                   '{"v": 1, "k": "fire", "rid": "", "now": 1, "term": 1, "items": 5}'])
def test_malformed_entries_are_rejected_never_raised(h, entry):
    r = h.raw(entry)
    assert r.ok is False and r.code in ("invalid", "internal", "stale_term")


@pytest.mark.parametrize("field, value", [("started_ms", "soon"), ("ended_ms", "later"), ("exit_code", "x"),
                                          ("http_status", [200]), ("started_ms", {"ms": 1})])
def test_malformed_finish_is_refused_before_it_changes_the_attempt(h, field, value):
    """A result whose numbers are not numbers is refused whole: apply checks the report before it
    writes the attempt (it used to set the outcome, then fail on int(started_ms) as `internal`)."""
    h.put()
    h.plan_and_fire()
    token = h.apply(C.START, job="j1", scheduled_ms=T0, attempt=1, worker="w1").payload.token
    before = h.state.state_digest()
    r = h.apply(C.FINISH, job="j1", scheduled_ms=T0, token=token, state="SUCCEEDED", **{field: value})
    assert r.ok is False and r.code == "invalid", r
    ex = h.state.execs[("j1", T0)]
    assert ex.state == "RUNNING" and ex.attempts[-1].state == "RUNNING" and ex.attempts[-1].ended_ms == 0
    assert h.state.state_digest() == before
    assert h.apply(C.FINISH, job="j1", scheduled_ms=T0, token=token, state="SUCCEEDED").ok   # still current


def test_unexpected_exception_becomes_internal_result(h, monkeypatch):
    def boom(self, cmd, index):
        raise RuntimeError("kaboom")
    monkeypatch.setitem(SchedulerState._HANDLERS, C.NOOP, boom)
    assert h.apply(C.NOOP).as_dict() == {"ok": False, "code": "internal", "msg": "RuntimeError: kaboom"}


def test_audit_records_mutations(h):
    h.apply(C.PUT, spec=text(), name="j1")
    h.apply(C.PAUSE, name="j1")
    h.apply(C.DELETE, name="zzz")
    assert [(a.action, a.target, a.result) for a in h.state.audit] == [
        ("put", "j1", "ok"), ("pause", "j1", "ok"), ("delete", "zzz", "not_found")]


# ---------------------------------------------------------------- listing

def test_list_executions_pages_both_directions(h):
    h.put()
    h.now = T0 + 95_000
    h.plan_and_fire()
    page, nxt, total = h.state.list_executions(job="j1", limit=4)
    assert total == 10 and [e.scheduled_ms for e in page] == [T0 + k * 10_000 for k in (9, 8, 7, 6)]
    page2, _, _ = h.state.list_executions(job="j1", limit=4, after=nxt)
    assert [e.scheduled_ms for e in page2] == [T0 + k * 10_000 for k in (5, 4, 3, 2)]
    up, nxt_up, _ = h.state.list_executions(limit=3, oldest_first=True)
    assert [e.scheduled_ms for e in up] == [T0, T0 + 10_000, T0 + 20_000]
    last, end, _ = h.state.list_executions(limit=100, oldest_first=True, after=nxt_up)
    assert len(last) == 7 and end is None
    assert execution_id("j1", T0) == "j1@2027-01-15T08:00:00Z"


def test_list_jobs_filters_and_pages(h):
    for i, team in enumerate(["red", "red", "blue", "blue", "blue"]):
        h.put(name=f"j{i}", team=team)
    h.apply(C.PAUSE, name="j1")
    h.apply(C.PAUSE, name="j4")
    page, nxt, total = h.state.list_jobs(limit=2)
    assert [j.name for j in page] == ["j0", "j1"] and nxt == "j1" and total == 5
    page, nxt, _ = h.state.list_jobs(limit=2, after=nxt)
    assert [j.name for j in page] == ["j2", "j3"]
    page, nxt, total = h.state.list_jobs(state="paused")
    assert [j.name for j in page] == ["j1", "j4"] and total == 2 and nxt == ""
    page, nxt, total = h.state.list_jobs(state="active", limit=2)
    assert [j.name for j in page] == ["j0", "j2"] and total == 3 and nxt == "j2"
    page, nxt, total = h.state.list_jobs(state="active", after="j2")
    assert [j.name for j in page] == ["j3"] and nxt == ""
    page, _, total = h.state.list_jobs(team="blue", state="paused")
    assert [j.name for j in page] == ["j4"] and total == 1
    h.apply(C.RESUME, name="j4")
    h.apply(C.DELETE, name="j1")
    assert list(h.state.paused_names) == []


# ---------------------------------------------------------------- determinism and snapshots

def _fingerprint(s: SchedulerState):
    return (s.log_hash, s.epoch, sorted((n, j.version, j.next_fire, j.paused, j.spec_text) for n, j in s.jobs.items()),
            sorted((k, e.state, e.trigger, e.log_index, e.retry_at, e.cancel_requested,
                    [(a.state, a.fencing_token, a.rejected) for a in e.attempts]) for k, e in s.execs.items()),
            list(s.ready), dict(s.active), dict(s.pending), dict(s.held), {k: list(v) for k, v in s.by_state.items() if v},
            list(s.wheel.items()), list(s.names), list(s.by_time), list(s.paused_names),
            {k: list(v) for k, v in s.by_team.items()}, list(s.dedup))


OPS = st.lists(st.tuples(
    st.sampled_from(["put", "put2", "pause", "resume", "delete", "trigger", "tick", "dup", "bad",
                     "claim", "succeed", "fail", "lose", "cancel"]),
    st.sampled_from(["a", "b", "c"]), st.integers(0, 40_000)), max_size=40)


def _one_in(h: Harness, name: str, state: str):
    for t in h.state.by_job.get(name, ()):
        ex = h.state.execs[(name, t)]
        if ex.state == state:
            return ex
    return None


def _run_ops(ops) -> Harness:
    h = Harness()
    for op, name, dt in ops:
        h.now += dt
        if op == "put":
            h.put(name=name)
        elif op == "put2":
            h.put(name=name, schedule="*/15 * * * * *", timezone="Europe/Berlin",
                  retry={"max_attempts": 2, "initial_backoff_seconds": 5})
        elif op == "claim":
            ex = _one_in(h, name, "SCHEDULED") or _one_in(h, name, "RETRY_WAIT")
            if ex is not None:
                h.apply(C.START, job=name, scheduled_ms=ex.scheduled_ms, attempt=len(ex.attempts) + 1, worker="w")
        elif op in ("succeed", "fail", "lose", "cancel"):
            ex = _one_in(h, name, "RUNNING")
            if ex is not None:
                key = {"job": name, "scheduled_ms": ex.scheduled_ms}
                token = ex.attempts[-1].fencing_token
                if op == "lose":
                    h.apply(C.EXPIRE, token=token, **key)
                elif op == "cancel":
                    h.apply(C.CANCEL, **key)
                else:
                    h.apply(C.FINISH, token=token, state="SUCCEEDED" if op == "succeed" else "FAILED", **key)
        elif op in ("pause", "resume", "delete", "trigger"):
            h.apply(op, name=name)
        elif op == "tick":
            h.plan_and_fire(lookahead=1500)
        elif op == "dup" and h.entries:
            h.raw(h.entries[-1])
        else:
            h.raw('{"v":1,"k":"put","rid":"","now":0,"term":1,"spec":"{\\"name\\":\\"BAD\\"}"}')
    return h


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_replicas_agree_and_snapshot_restore_is_exact(ops):
    a = _run_ops(ops)
    b = Harness()
    for e in a.entries[1:]:
        b.raw(e)
    assert _fingerprint(a.state) == _fingerprint(b.state)
    # snapshot through pickle (as pysyncobj does), restore into a fresh state
    c = SchedulerState()
    c.restore(pickle.loads(pickle.dumps(a.state.snapshot(), protocol=2)))
    assert _fingerprint(c) == _fingerprint(a.state)
    # and the restored replica keeps agreeing on what follows
    a.now += 50_000
    nxt = C.encode(C.FIRE, rid="", now=a.now, term=1, by="t",
                   items=[list(i) for i in plan_fires(a.state, a.now, 0, limit=50)])
    assert a.state.apply(nxt, 10 ** 6) == c.apply(nxt, 10 ** 6)
    assert _fingerprint(c) == _fingerprint(a.state)


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_no_execution_key_twice_and_instants_follow_the_schedule(ops):
    h = _run_ops(ops)
    # every execution key is in each index exactly once, and nothing else is (a key recorded
    # twice, or left behind by a deletion, shows up here)
    keys = sorted((t, name) for name, t in h.state.execs)
    assert list(h.state.by_time) == keys
    assert sorted((t, name) for name, times in h.state.by_job.items() for t in times) == keys
    for (name, t), ex in h.state.execs.items():
        assert ex.job == name and ex.scheduled_ms == t
        assert (t, name) in h.state.by_state[ex.state]                       # indexes agree
        assert (ex.retry_at is not None) == (ex.state == "RETRY_WAIT")
        tokens = [a.fencing_token for a in ex.attempts]
        assert tokens == sorted(set(tokens))                                 # fencing grows
        assert sum(a.state == "RUNNING" for a in ex.attempts) == (ex.state == "RUNNING")
    assert sum(len(v) for v in h.state.by_state.values()) == len(h.state.execs)
    ready = h.state.by_state.get("RETRY_WAIT", ()), h.state.by_state.get("SCHEDULED", ())
    assert len(h.state.ready) == sum(map(len, ready))
    active = {}
    for (name, _), ex in h.state.execs.items():
        if ex.state in ("RUNNING", "RETRY_WAIT"):
            active[name] = active.get(name, 0) + 1
    assert h.state.active == active


def test_planner_looks_further_ahead_when_a_burst_is_coming(h):
    for i in range(30):
        h.put(name=f"b{i:02d}", schedule="at 2027-01-15T08:00:10Z")
    h.put(name="soon", schedule="at 2027-01-15T08:00:01Z")
    normal = plan_fires(h.state, h.now, 1500, limit=100)
    assert normal == [("soon", T0 + 1000)]
    small_burst = plan_fires(h.state, h.now, 1500, limit=100, burst_lookahead_ms=15_000, burst_threshold=40)
    assert small_burst == normal                       # 31 < 40: not a burst
    burst = plan_fires(h.state, h.now, 1500, limit=100, burst_lookahead_ms=15_000, burst_threshold=20)
    assert len(burst) == 31 and burst[0] == ("soon", T0 + 1000)


def test_canonical_spec_converts_to_the_proto_and_back():
    from schedd.api.convert import job_spec_to_pb, spec_to_dict
    from schedd.core.specs import JobSpec
    d = validate_spec(spec(description="d", labels={"k": "v"}, retry={"max_attempts": 3, "multiplier": 2},
                           timeout_seconds=5, paused=True, history_limit=10, priority=-3, pool="gpu",
                           handler={"http": {"url": "https://x.example/run", "headers": {"A": "b"}}}))
    assert validate_spec(spec_to_dict(job_spec_to_pb(d))) == d
    # a key this version does not know (written by a newer one) is tolerated, and kept
    newer = JobSpec.from_dict({**d.to_dict(), "future_field": 1})
    assert job_spec_to_pb(newer).name == "j1" and newer.to_dict()["future_field"] == 1


def test_a_version_1_snapshot_image_still_restores(h):
    """Images written before DAGs, quotas and policy fields existed: shorter rows, no extras."""
    from schedd.core.state import _from_image
    h.put()
    h.plan_and_fire()
    job, ex = h.state.jobs["j1"], h.state.execs[("j1", T0)]
    v1_job = (job.name, job.team, job.schedule, job.tz, job.spec_text, job.version, job.paused, job.next_fire,
              job.created_ms, job.updated_ms, job.created_by, job.history_limit, job.last_fire, job.fired_total)
    v1_exec = (ex.job, ex.scheduled_ms, ex.state, ex.trigger, ex.created_ms, ex.term, ex.log_index,
               ex.updated_ms, ex.reason, [], None, False)
    image = _from_image(("schedd-state", 1), None, [v1_job], [v1_exec], h.state.epoch, {}, [],
                        h.state.log_hash, h.state.last_index, h.state.clock_ms)
    c = SchedulerState()
    c.restore(image)
    assert c.jobs["j1"].next_fire == job.next_fire and c.jobs["j1"].gaps == ()
    assert c.execs[("j1", T0)].state == "SCHEDULED" and c.quotas == {} and c.dags == {}
    assert list(c.ready) == [(T0, "j1", T0)]


# ---------------------------------------------------------------- the state digest

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_state_digest_is_equal_on_replicas_and_after_a_snapshot_restore(ops):
    a = _run_ops(ops)
    b = Harness()
    for e in a.entries[1:]:
        b.raw(e)
    assert a.state.state_digest() == b.state.state_digest()
    c = SchedulerState()
    c.restore(pickle.loads(pickle.dumps(a.state.snapshot(), protocol=2)))
    assert c.state_digest() == a.state.state_digest()


def test_a_snapshot_carries_the_digest_of_what_it_was_written_from(h):
    """The digest at a snapshot point is computed where the image is pickled (the forked child in
    production) and travels in the image; a restored replica checks what it loaded against it.
    A row changed between writing and loading is caught; an image without a digest (written
    before it existed) restores and has nothing to check."""
    for name in ("a", "b"):
        h.put(name=name)
    h.plan_and_fire()
    blob = pickle.dumps(h.state.snapshot(), protocol=2)
    c = SchedulerState()
    c.restore(pickle.loads(blob))
    assert c.snapshot_digest == (h.state.last_index, h.state.state_digest())
    assert c.verify_snapshot_digest() is True
    c.jobs["a"].paused = not c.jobs["a"].paused             # changed after the snapshot was written
    c._digest = None
    assert c.verify_snapshot_digest() is False
    data = list(pickle.loads(blob))
    del data[-1]["digest"]
    d = SchedulerState()
    d.restore(tuple(data))
    assert d.snapshot_digest is None and d.verify_snapshot_digest() is None
    assert d.state_digest() == h.state.state_digest()
    h.put(name="c")                          # applied since the snapshot: nothing to compare
    e = SchedulerState()
    e.restore(pickle.loads(blob))
    e.last_index += 1
    assert e.verify_snapshot_digest() is None


def test_state_digest_ignores_dict_order_and_sees_every_content_change(h):
    """Order-independent (the digest of the content, not of how it was filled), and not the
    chained hash of the log: a change of one field of one row changes it."""
    from schedd.core.digest import state_digest
    for name in ("a", "b", "c"):
        h.put(name=name)
    h.plan_and_fire()
    h.apply(C.QUOTA, key="team:x", limit=3)
    h.apply(C.QUOTA, key="team:y", limit=4)
    s = h.state
    before = state_digest(s)
    assert before == s.state_digest() and before != s.log_hash_hex()
    s.jobs = dict(reversed(list(s.jobs.items())))
    s.execs = dict(reversed(list(s.execs.items())))
    s.quotas = dict(reversed(list(s.quotas.items())))
    assert state_digest(s) == before
    ex = next(iter(s.execs.values()))
    ex.state = "FAILED"
    assert state_digest(s) != before
    ex.state = SCHEDULED
    assert state_digest(s) == before
    s.jobs["b"].version += 1
    assert state_digest(s) != before
    s.jobs["b"].version -= 1
    s.quotas["team:x"] = 5
    assert state_digest(s) != before


def test_state_digest_is_cached_per_applied_entry(h):
    h.put(name="a")
    first = h.state.state_digest()
    assert h.state.state_digest() is first              # nothing applied since: the cached value
    h.apply(C.PAUSE, name="a")
    assert h.state.state_digest() != first
