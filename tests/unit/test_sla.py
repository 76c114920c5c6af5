"""SLAs: deadline computation (both forms, DST), the `sla` entry (once, stale term refused,
deterministic), the due index and the leader's detector, and the DST policy through the state."""

from __future__ import annotations

import asyncio
import json
import pickle
import threading
from http.server import HTTPServer

import pytest

from schedd.core import commands as C
from schedd.core import sla as S
from schedd.core.model import (
    FAILED, RUNNING, SUCCEEDED, ValidationError, canonical_spec, execution_id,
    validate_spec,
)
from schedd.core.specs import JobSpec, dump
from schedd.core.schedule import format_ms, parse_time
from schedd.core.state import SchedulerState, schedule_of
from schedd.leader import sla as L
from schedd_client.net.policy import make_policy
from schedd.leader.planner import plan_fires
from schedd.replication.node import OutcomeUnknown
from schedd.ports.fakes import LoseFirstAnswer
from tests.support.env import TestEnv
from tests.support.leader import Hook
from tests.support.state import Harness as StateHarness

LOOPBACK_OK = make_policy(allow=["127.0.0.1"])   # the webhook receiver is on loopback

SHELL = {"shell": {"command": "true"}}
T0 = parse_time("2026-06-01T04:00:00Z")


def ms(text: str, tz: str = "UTC") -> int:
    return parse_time(text, tz)


def spec(name="j1", schedule="", **kw):
    return {"name": name, "schedule": schedule, "handler": SHELL, **kw}


class Harness(StateHarness):
    def __init__(self) -> None:
        super().__init__(now=T0)

    def put(self, **kw) -> dict:
        return self.apply(C.PUT, spec=validate_spec(spec(**kw)).text())

    def trigger(self, name="j1") -> int:
        return self.apply(C.TRIGGER, name=name).payload.scheduled_ms

    def start(self, name: str, t: int, attempt=1) -> int:
        return self.apply(C.START, rid=f"start-{name}@{t}#{attempt}", job=name, scheduled_ms=t,
                          attempt=attempt, worker="w1").payload.token

    def finish(self, name: str, t: int, token: int, state=SUCCEEDED) -> dict:
        return self.apply(C.FINISH, rid=f"finish-{token}", job=name, scheduled_ms=t, token=token,
                          state=state, ended_ms=self.now)

    def sla(self, miss: L.Miss, term=None) -> dict:
        return self.apply(C.SLA, rid=miss.rid, term=term, job=miss.job, scheduled_ms=miss.scheduled_ms,
                          deadline_ms=miss.deadline_ms, sla=miss.sla, **miss.entry_args())


@pytest.fixture
def h() -> Harness:
    return Harness()


# ---------------------------------------------------------------- deadlines

def of(**d) -> JobSpec:
    """A committed job spec with these fields (and a name, team, schedule and zone)."""
    return JobSpec.from_dict({"name": "j", "team": "default", "schedule": "", "timezone": "UTC", **d})


def sla(**kw) -> S.Sla:
    return S.sla_of_spec(of(timezone=kw.pop("job_tz", "UTC"), sla=kw))


@pytest.mark.parametrize("kw,scheduled,deadline", [
    ({"within_seconds": 7200}, "2026-06-01T04:00:00Z", "2026-06-01T06:00:00Z"),
    ({"within_seconds": 0.25}, "2026-06-01T04:00:00Z", "2026-06-01T04:00:00.250Z"),
    # by: the first such wall time at or after the scheduled instant
    ({"by": "06:00", "timezone": "Europe/Berlin"}, "2026-06-01T02:00:00Z", "2026-06-01T04:00:00Z"),
    ({"by": "06:00", "timezone": "Europe/Berlin"}, "2026-06-01T04:30:00Z", "2026-06-02T04:00:00Z"),
    ({"by": "06:00", "timezone": "Europe/Berlin"}, "2026-06-01T04:00:00Z", "2026-06-01T04:00:00Z"),
    # by defaults to the job's zone
    ({"by": "06:00", "job_tz": "America/New_York"}, "2026-06-01T04:00:00Z", "2026-06-01T10:00:00Z"),
    # both: the earlier deadline
    ({"within_seconds": 3600, "by": "06:00", "timezone": "Europe/Berlin"}, "2026-06-01T03:30:00Z",
     "2026-06-01T04:00:00Z"),
    ({"within_seconds": 600, "by": "06:00", "timezone": "Europe/Berlin"}, "2026-06-01T03:30:00Z",
     "2026-06-01T03:40:00Z"),
    # within across DST is plain elapsed time
    ({"within_seconds": 7200}, "2026-03-29T00:30:00Z", "2026-03-29T02:30:00Z"),
    # by on spring-forward day, inside the gap: the end of the gap (03:00 CEST = 01:00Z)
    ({"by": "02:30", "timezone": "Europe/Berlin"}, "2026-03-28T23:00:00Z", "2026-03-29T01:00:00Z"),
    # the night before in New York: 06:00 EDT the next morning (10:00Z, not 11:00Z)
    ({"by": "06:00", "timezone": "America/New_York"}, "2026-03-08T04:00:00Z", "2026-03-08T10:00:00Z"),
    # fall-back: 02:30 happens twice in Berlin; scheduled before both -> the first (00:30Z)
    ({"by": "02:30", "timezone": "Europe/Berlin"}, "2026-10-24T23:00:00Z", "2026-10-25T00:30:00Z"),
    # scheduled between the two passes -> the second 02:30 (CET, 01:30Z)
    ({"by": "02:30", "timezone": "Europe/Berlin"}, "2026-10-25T00:45:00Z", "2026-10-25T01:30:00Z"),
    # New York fall-back: by 01:30 from 05:45Z (01:45 EDT) -> 01:30 EST (06:30Z)
    ({"by": "01:30", "timezone": "America/New_York"}, "2026-11-01T05:45:00Z", "2026-11-01T06:30:00Z"),
])
def test_deadline(kw, scheduled, deadline):
    assert S.deadline_ms(sla(**kw), ms(scheduled)) == ms(deadline)


def test_sla_of_spec_reads_only_well_formed_values():
    assert S.sla_of_spec(of()) is None
    assert S.sla_of_spec(of(sla="x")) is None
    assert S.sla_of_spec(of(sla={"within_seconds": True})) is None
    got = S.sla_of_spec(of(timezone="Europe/Berlin", sla={"by": "06:00", "webhook": "http://h/"}))
    assert got == S.Sla(within_ms=0, by="06:00", tz="Europe/Berlin", webhook="http://h/")
    assert got.describe() == "by 06:00 Europe/Berlin"
    assert S.Sla(within_ms=7_200_000).describe() == "within 2h"


@pytest.mark.parametrize("bad,fragment", [
    ({"by": "6:00"}, "HH:MM"),
    ({"by": "24:00"}, "HH:MM"),
    ({"within_seconds": -1}, "sla.within_seconds must be between"),
    ({"webhook": "http://h/x"}, "needs within_seconds or by"),
    ({"within_seconds": 5, "webhook": "ftp://x"}, "must start with http"),
    ({"within_seconds": 5, "timezone": "Europe/Berlin"}, "applies to sla.by only"),
    ({"by": "06:00", "timezone": "Europe/Berln"}, "did you mean 'Europe/Berlin'"),
    ({"within_seconds": 5, "wihtin": 3}, "unknown sla field 'wihtin'"),
])
def test_sla_validation(bad, fragment):
    with pytest.raises(ValidationError, match=fragment):
        canonical_spec(spec(sla=bad))


def test_canonical_spec_keeps_defaults_out():
    plain = canonical_spec(spec(schedule="0 2 * * *", timezone="Europe/Berlin"))[1]
    same = canonical_spec(spec(schedule="0 2 * * *", timezone="Europe/Berlin", dst_gap="shift",
                               dst_fold="first", sla={}))[1]
    assert plain == same and "dst" not in plain and "sla" not in plain
    full = json.loads(canonical_spec(spec(schedule="0 2 * * *", dst_gap="skip", dst_fold="both",
                                          sla={"within_seconds": 7200.0, "by": "06:00"}))[1])
    assert full["dst_gap"] == "skip" and full["dst_fold"] == "both"
    assert full["sla"] == {"within_seconds": 7200, "by": "06:00"}
    with pytest.raises(ValidationError, match="dst_fold must be one of first, last, both"):
        canonical_spec(spec(schedule="0 2 * * *", dst_fold="twice"))


# ---------------------------------------------------------------- DST policy through the state

def test_dst_policy_reaches_the_job_schedule_and_the_fire_path(h):
    h.now = ms("2026-10-24T12:00:00Z")
    h.put(name="fold", schedule="30 2 * * *", timezone="Europe/Berlin", dst_fold="both")
    h.put(name="plain", schedule="30 2 * * *", timezone="Europe/Berlin")
    job = h.state.jobs["fold"]
    assert job.dst == "/both" and h.state.jobs["plain"].dst == ""   # the gap: the default
    assert schedule_of(job).fold == "both"
    assert job.next_fire == ms("2026-10-25T00:30:00Z")
    fired = []
    for _ in range(3):
        h.now = h.state.jobs["fold"].next_fire
        items = plan_fires(h.state, h.now, 0, limit=50)
        h.apply(C.FIRE, items=[list(i) for i in items])
        fired += [t for n, t in items if n == "fold"]
    assert fired == [ms("2026-10-25T00:30:00Z"), ms("2026-10-25T01:30:00Z"), ms("2026-10-26T01:30:00Z")]
    # changing only the policy re-plans the next fire
    h.now = ms("2027-03-27T12:00:00Z")              # 2027-03-28: Berlin springs forward
    h.put(name="plain", schedule="30 2 * * *", timezone="Europe/Berlin", dst_gap="skip")
    assert h.state.jobs["plain"].next_fire == ms("2027-03-29T00:30:00Z")
    h.put(name="plain", schedule="30 2 * * *", timezone="Europe/Berlin")
    assert h.state.jobs["plain"].next_fire == ms("2027-03-28T01:00:00Z")


def test_a_named_policy_is_kept_only_where_it_differs_from_the_schedules_default():
    hourly = json.loads(canonical_spec(spec(schedule="@hourly", dst_gap="shift", dst_fold="first"))[1])
    assert (hourly["dst_gap"], hourly["dst_fold"]) == ("shift", "first")   # hourly: skip, both
    daily = json.loads(canonical_spec(spec(schedule="@daily", dst_gap="skip", dst_fold="first"))[1])
    assert daily["dst_gap"] == "skip" and "dst_fold" not in daily          # daily: shift, first
    assert "dst_gap" not in canonical_spec(spec(schedule="0 */2 * * *", dst_gap="skip"))[1]


def test_hourly_jobs_follow_real_time_through_the_state_unless_they_name_a_policy(h):
    # Pacific/Chatham 2026-09-27: 02:45 -> 03:45 (+12:45 -> +13:45), 13:45Z the day before
    h.now = ms("2026-09-26T12:00:00Z")
    h.put(name="real", schedule="@hourly", timezone="Pacific/Chatham")
    h.put(name="old", schedule="@hourly", timezone="Pacific/Chatham", dst_gap="shift", dst_fold="first")
    assert h.state.jobs["real"].dst == "" and h.state.jobs["old"].dst == "shift/first"
    fired: dict[str, list[str]] = {"real": [], "old": []}
    while h.now < ms("2026-09-26T15:30:00Z"):
        h.now = min(j.next_fire for j in h.state.jobs.values())
        items = plan_fires(h.state, h.now, 0, limit=50)
        h.apply(C.FIRE, items=[list(i) for i in items])
        for n, t in items:
            fired[n].append(format_ms(t, "Pacific/Chatham")[11:22])
    # from 00:45 local: 03:00 does not exist, so nothing between 02:00 and 04:00 (one real hour)
    assert fired["real"][:3] == ["01:00:00+12", "02:00:00+12", "04:00:00+13"]
    assert fired["old"][:4] == ["01:00:00+12", "02:00:00+12", "03:45:00+13", "04:00:00+13"]


def test_committed_spec_with_a_bad_policy_is_refused_by_apply(h):
    bad = dump({**validate_spec(spec(schedule="0 2 * * *")).to_dict(), "dst_fold": "twice"})
    r = h.apply(C.PUT, spec=bad)
    assert not r.ok and r.code == "invalid" and "j1" not in h.state.jobs


# ---------------------------------------------------------------- the sla entry and the detector

def late_run(h: Harness, within=2, **sla_kw):
    h.put(sla={"within_seconds": within, **sla_kw})
    t = h.trigger()
    token = h.start("j1", t)
    return t, token


def test_running_past_within_is_one_miss_recorded_once(h):
    t, token = late_run(h, webhook="http://127.0.0.1:1/hook")
    assert list(S.due(h.state, h.now)) == []
    assert L.due_misses(h.state, t + 1999) == []
    h.now = t + 2000
    [miss] = L.due_misses(h.state, h.now)
    assert (miss.job, miss.scheduled_ms, miss.deadline_ms, miss.state) == ("j1", t, t + 2000, RUNNING)
    assert miss.webhook == "http://127.0.0.1:1/hook" and miss.sla == "within 2s"
    r = h.sla(miss)
    assert r.ok and r.payload.state == RUNNING and r.payload.execution == execution_id("j1", t)
    ex = h.state.execs[("j1", t)]
    [ev] = ex.events
    assert ev.kind == "sla_missed" and ev.time_ms == h.now
    assert "within 2s" in ev.message and "still RUNNING at the deadline" in ev.message
    assert L.due_misses(h.state, h.now + 10_000) == []          # out of the index
    again = h.sla(miss)                                          # same rid: deduplicated
    assert again.deduplicated and len(ex.events) == 1
    h.now += 1
    other = h.apply(C.SLA, rid="sla-other", job="j1", scheduled_ms=t, deadline_ms=t + 2000)
    assert other.code == "recorded" and len(ex.events) == 1  # another rid: still once
    h.finish("j1", t, token)                                     # the late success changes nothing
    assert ex.state == SUCCEEDED and len(ex.events) == 1


def test_stale_term_is_refused(h):
    t, _ = late_run(h)
    h.now = t + 5000
    [miss] = L.due_misses(h.state, h.now)
    r = h.sla(miss, term=0)
    assert r.code == "stale_term" and not h.state.execs[("j1", t)].events
    assert L.due_misses(h.state, h.now)                          # still due for the real leader
    # the refusal is not remembered under that rid: the leader of the epoch records the miss
    r = h.sla(miss)
    assert r.ok and not r.deduplicated and len(h.state.execs[("j1", t)].events) == 1
    assert h.sla(miss).deduplicated and len(h.state.execs[("j1", t)].events) == 1


def test_success_in_time_is_no_miss_and_leaves_the_index(h):
    t, token = late_run(h, within=10)
    h.now = t + 3000
    h.finish("j1", t, token)
    h.now = t + 60_000
    assert L.due_misses(h.state, h.now) == []
    h.trigger()                                                  # recording collects settled entries
    assert all(name != "j1" or k != t for _, name, k in h.state.sla_watch)
    # a verdict proposed before the success committed is refused by apply
    r = h.apply(C.SLA, rid="sla-x", job="j1", scheduled_ms=t, deadline_ms=t + 10_000)
    assert r.code == "met" and not h.state.execs[("j1", t)].events


def test_late_success_and_failure_are_misses(h):
    h.put(sla={"within_seconds": 2})
    t1 = h.trigger()
    tok1 = h.start("j1", t1)
    h.now += 1
    t2 = h.trigger()
    tok2 = h.start("j1", t2)
    h.now = t1 + 5000                              # the detector did not run in time (failover)
    h.finish("j1", t1, tok1)                       # succeeded late
    h.finish("j1", t2, tok2, state=FAILED)         # failed
    misses = {m.scheduled_ms: m for m in L.due_misses(h.state, h.now)}
    assert set(misses) == {t1, t2}
    assert misses[t1].state == SUCCEEDED and "after the deadline" in misses[t1].message
    assert misses[t2].state == FAILED and "ended FAILED" in misses[t2].message
    for m in misses.values():
        assert h.sla(m).ok
    assert L.due_misses(h.state, h.now) == []


def test_failure_before_the_deadline_is_a_miss_once_it_passes(h):
    t, token = late_run(h, within=60)
    h.finish("j1", t, token, state=FAILED)
    assert L.due_misses(h.state, t + 59_999) == []
    h.now = t + 60_000
    [miss] = L.due_misses(h.state, h.now)
    assert h.sla(miss).ok
    r = h.apply(C.SLA, rid="sla-early", job="j1", scheduled_ms=t + 1, deadline_ms=0)
    assert r.code == "not_found"


def test_not_yet_due_and_cancelled(h):
    t, token = late_run(h, within=60)
    r = h.apply(C.SLA, rid="sla-early", job="j1", scheduled_ms=t, deadline_ms=t + 60_000)
    assert r.code == "pending" and L.due_misses(h.state, t + 60_000)   # kept in the index
    h.apply(C.CANCEL, name="j1", job="j1", scheduled_ms=t)
    h.apply(C.FINISH, rid="fin", job="j1", scheduled_ms=t, token=token, state="CANCELLED")
    assert h.state.execs[("j1", t)].state == "CANCELLED"
    assert L.due_misses(h.state, t + 120_000) == []               # cancelled: exempt


def test_jobs_without_sla_are_not_indexed(h):
    h.put(name="plain")
    h.trigger("plain")
    assert not h.state.sla_watch


def test_apply_is_deterministic_and_the_index_is_rebuilt_on_restore(h):
    t, _ = late_run(h, within=2)
    h.put(name="j2", sla={"by": "06:00", "timezone": "Europe/Berlin"})
    h.now += 1                                      # just after 06:00 Berlin: tomorrow's 06:00
    t2 = h.trigger("j2")
    h.now = t + 2000
    [miss] = L.due_misses(h.state, h.now)
    h.sla(miss)
    replica = SchedulerState()
    for i, entry in enumerate(h.entries, start=2):
        replica.apply(entry, i)
    assert replica.log_hash_hex() == h.state.log_hash_hex()
    assert [e.message for e in replica.execs[("j1", t)].events] == [e.message for e in h.state.execs[("j1", t)].events]
    restored = SchedulerState()
    restored.restore(pickle.loads(pickle.dumps(h.state.snapshot())))
    assert list(restored.sla_watch) == list(h.state.sla_watch) == [(ms("2026-06-02T04:00:00Z"), "j2", t2)]
    assert restored.execs[("j1", t)].events == h.state.execs[("j1", t)].events


# ---------------------------------------------------------------- the driver

@pytest.mark.parametrize("fail_first", [False, True])
def test_driver_records_counts_and_posts_once(h, fail_first):
    server = HTTPServer(("127.0.0.1", 0), Hook)
    Hook.posts = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hook"
        t, _ = late_run(h, within=2, webhook=url)
        h.now = t + 2500
        lost = LoseFirstAnswer(lambda: OutcomeUnknown("lost the answer")) if fail_first else None
        env = TestEnv(h, proposals=lost)
        metrics = env.metrics

        async def main():
            driver = L.SlaDriver(env.node, env.clock, metrics, env.spawn, webhooks=LOOPBACK_OK)
            for step in range(4):
                h.now += L.RETRY_AFTER_MS if step else 0
                driver.step(h.now)
                await env.settle()
        asyncio.run(main())
        ex = h.state.execs[("j1", t)]
        assert [e.kind for e in ex.events] == ["sla_missed"]
        # fail_first: the answer was lost; asked again with the same rid, dedup answers: one POST
        assert metrics.sla_missed.counts == {("j1",): 1}
        [(path, body, key)] = Hook.posts
        assert path == "/hook" and key == f"sla-{execution_id('j1', t)}#{ex.log_index}"
        assert body == {"job": "j1", "execution_id": execution_id("j1", t),
                        "scheduled_time": "2026-06-01T04:00:00Z",
                        "deadline": "2026-06-01T04:00:02Z", "state": RUNNING,
                        "message": ex.events[0].message}
    finally:
        server.shutdown()
        server.server_close()


def test_the_leader_drops_settled_entries_and_scans_a_bounded_number(h):
    h.put(sla={"within_seconds": 1})
    times = []
    for _ in range(30):
        t = h.trigger()
        token = h.start("j1", t)
        h.finish("j1", t, token)                    # all in time
        times.append(t)
        h.now += 1
    h.now += 5000
    assert L.due_misses(h.state, h.now) == []
    S.collect(h.state, h.now, 1000)
    assert not h.state.sla_watch
    late = [late_t for late_t in [h.trigger()] if h.start("j1", late_t)]
    h.now += 5000
    assert L.due_misses(h.state, h.now, scan=0) == []
    assert [m.scheduled_ms for m in L.due_misses(h.state, h.now)] == late


def test_a_deposed_leaders_late_refusal_does_not_answer_the_new_leaders_proposal(h):
    t, _ = late_run(h, within=1)
    h.now = t + 2000
    [miss] = L.due_misses(h.state, h.now)
    assert h.sla(miss, term=0).code == "stale_term"           # the deposed leader's, committed late
    env = TestEnv(h)
    metrics = env.metrics

    async def main():
        driver = L.SlaDriver(env.node, env.clock, metrics, env.spawn, webhooks=LOOPBACK_OK)
        for _ in range(2):
            driver.step(h.now)
            await env.settle()
    asyncio.run(main())
    assert len(h.state.execs[("j1", t)].events) == 1 and metrics.sla_missed.counts == {("j1",): 1}
    assert json.loads(h.entries[-1])["rid"] == miss.rid     # same rid, not deduplicated


def test_backfilled_executions_have_no_sla():
    from schedd.core.model import Execution
    ex = Execution(job="j1", scheduled_ms=0, state=RUNNING, trigger="backfill", created_ms=0, term=1,
                   log_index=1, updated_ms=0, lane="backfill")
    assert S.verdict(ex, 1000, 10 ** 12)[0] == "exempt"
    ex.lane = ""
    assert S.verdict(ex, 1000, 10 ** 12)[0] == "missed"


def test_a_restore_rederives_named_policies_written_in_the_older_form(h):
    """Older builds wrote the default's name into the half a spec did not name ("skip/first");
    a restore must read the spec again, as replaying its entry would ("skip/")."""
    h.put(name="hourly", schedule="@hourly", timezone="Europe/Berlin", dst_gap="skip",
          dst_fold="first")
    h.put(name="gap-only", schedule="@hourly", timezone="Europe/Berlin", dst_gap="shift")
    assert h.state.jobs["gap-only"].dst == "shift/"
    h.state.jobs["gap-only"].dst = "shift/first"              # as an older image holds it
    c = SchedulerState()
    c.restore(pickle.loads(pickle.dumps(h.state.snapshot(), protocol=2)))
    assert c.jobs["gap-only"].dst == "shift/" and schedule_of(c.jobs["gap-only"]).fold == "both"
    assert c.jobs["hourly"].dst == "/first"
