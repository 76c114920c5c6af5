"""Flexible windows (schedd.core.windows): the spec's rules, the placement of a herd, placements
the same on every replica applying the same log, DST days and windows past midnight, a calendar's
skip of a window day, a blackout at the placed second, and the SLA miss at the window's end."""

from __future__ import annotations

import math
import pickle
from collections import Counter
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from schedd.core import commands as C
from schedd.core import calendars, placing, plain
from schedd.core import windows as W
from schedd.core.model import SCHEDULED, SKIPPED, ValidationError, validate_spec
from schedd.core.results import Code
from schedd.core.snapshot import SnapshotImage
from schedd.core.state import SchedulerState
from schedd.core.view import StateView
from schedd.leader.sla import due_misses
from tests.support.state import Harness, TOP_LEVEL

BERLIN = ZoneInfo("Europe/Berlin")
H = 3_600_000


def ms(text: str, tz: ZoneInfo = BERLIN) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=tz).timestamp() * 1000)


def job(name="w", window=None, schedule="", tz="Europe/Berlin", **kw):
    return {"name": name, "schedule": schedule, "timezone": tz, "handler": {"shell": {"command": "true"}},
            "window": window if window is not None else {"start": "01:00", "end": "05:00"}, **kw}


# ------------------------------------------------------------------ the spec


@pytest.mark.parametrize("doc, schedule, window", [
    (job(), "0 1 * * *", ("01:00", "05:00")),                                   # every day
    (job(schedule="0 0 * * 1-5"), "0 1 * * 1-5", ("01:00", "05:00")),          # weekdays
    (job(schedule="0 1 * * 1-5"), "0 1 * * 1-5", ("01:00", "05:00")),          # as stored: applied again
    (job(window={"start": "23:30", "end": "2:00"}), "30 23 * * *", ("23:30", "02:00")),   # past midnight
    (job(tz="", window={"start": "01:00", "end": "05:00", "tz": "Asia/Tokyo"}), "0 1 * * *", ("01:00", "05:00")),
])
def test_window_specs_are_canonical(doc, schedule, window):
    spec = validate_spec(doc)
    assert spec.schedule == schedule and (spec.window.start, spec.window.end) == window
    assert spec.level == 9
    assert validate_spec(spec.to_dict()).text() == spec.text()           # job get -o yaml, applied again


def test_window_tz_becomes_the_jobs_zone():
    assert validate_spec(job(tz="", window={"start": "01:00", "end": "05:00", "tz": "Asia/Tokyo"})).timezone \
        == "Asia/Tokyo"


@pytest.mark.parametrize("doc, problem", [
    (job(window={"start": "01:00", "end": "01:00"}), "window.end equals window.start"),
    (job(window={"start": "25:00", "end": "05:00"}), "window.start must be a time"),
    (job(window={"start": "01:00", "end": "5"}), "window.end must be a time"),
    (job(window={"start": "01:00", "end": "05:00", "length": 3}), "unknown key"),
    (job(window="01:00-05:00"), "window: an object"),
    (job(jitter_seconds=60), "window and jitter together"),
    (job(schedule="@every 1h"), "the schedule picks the days only"),
    (job(schedule="0 2 * * *"), "the schedule picks the days only"),
    (job(schedule="@at 2027-01-01T00:00:00Z"), "the schedule picks the days only"),
    (job(window={"start": "01:00", "end": "05:00", "tz": "Asia/Tokyo"}), "differs from the job's timezone"),
])
def test_bad_windows_are_refused_saying_why(doc, problem):
    with pytest.raises(ValidationError, match=problem):
        validate_spec(doc)


# ------------------------------------------------------------------ bounds: DST, midnight


@pytest.mark.parametrize("window, day, opens, closes", [
    (("01:00", "05:00"), "2027-01-15", "2027-01-15T01:00", "2027-01-15T05:00"),
    (("01:00", "05:00"), "2027-03-28", "2027-03-28T01:00", "2027-03-28T05:00"),    # spring forward: 3 h long
    (("01:00", "05:00"), "2027-10-31", "2027-10-31T01:00", "2027-10-31T05:00"),    # fall back: 5 h long
    (("23:00", "02:00"), "2027-01-15", "2027-01-15T23:00", "2027-01-16T02:00"),    # past midnight
    (("01:30", "02:30"), "2027-03-28", "2027-03-28T01:30", "2027-03-28T03:00"),    # end in the gap: its end
])
def test_bounds(window, day, opens, closes):
    t = ms(opens)
    lo, hi = W.bounds(window, "Europe/Berlin", t)
    assert (lo, hi) == (t, ms(closes))


def test_dst_days_are_as_long_as_the_wall_clock_says():
    spring = W.bounds(("01:00", "05:00"), "Europe/Berlin", ms("2027-03-28T01:00"))
    autumn = W.bounds(("01:00", "05:00"), "Europe/Berlin", ms("2027-10-31T01:00"))
    assert spring[1] - spring[0] == 3 * H and autumn[1] - autumn[0] == 5 * H


# ------------------------------------------------------------------ the choice


@pytest.mark.parametrize("jobs, seconds", [(1000, 4 * 3600), (1000, 600), (1000, 60), (7, 3)])
def test_a_herd_spreads_evenly(jobs, seconds):
    names = [f"nightly-{i:04d}" for i in range(jobs)]
    got = Counter(W.choose([0] * seconds, names))
    assert max(got.values()) <= math.ceil(jobs / seconds)
    assert sum(got.values()) == jobs


def test_busy_seconds_are_avoided_and_the_choice_is_deterministic():
    load = [0] * 100
    load[10:20] = [50] * 10                     # an exact-time herd at seconds 10..19
    names = [f"j{i}" for i in range(500)]
    first = W.choose(load, names)
    assert first == W.choose(list(load), names)
    assert not any(10 <= i < 20 for i in first)     # 90 free seconds hold 500 at 6 each, below 50
    assert max(Counter(first).values()) <= math.ceil(500 / 90)


# ------------------------------------------------------------------ placement through the log


T_DAY = ms("2027-01-16T00:00")             # a Saturday


def harness(now: int = T_DAY - 12 * H) -> Harness:
    return Harness(now=now, level=TOP_LEVEL)


def place_all(h: Harness) -> list[list]:
    """What the leader's placer does: plan from the state, then commit the `place` entry."""
    wants, after = W.unplaced(h.state, 100_000)
    assert after == ""                                           # one step looks through them all
    taken = W.taken(h.state, [(w.pool, w.lo, w.hi) for w in wants])
    items = placing.place_all(placing.exact_rows(h.state), wants, taken, calendars.book_of(h.state))
    for i in range(0, len(items), W.MAX_PLACE_ITEMS):
        r = h.apply(C.PLACE, items=items[i:i + W.MAX_PLACE_ITEMS])
        assert r.ok, r
    return items


def put_window(h: Harness, name: str, **kw) -> None:
    r = h.apply(C.PUT, spec=validate_spec(job(name, **kw)).text())
    assert r.ok, r


def test_a_herd_of_window_jobs_in_one_pool_is_spread_and_recorded_at_its_seconds():
    h = harness()
    window = {"start": "01:00", "end": "01:10"}                  # 600 seconds for 1,000 jobs
    for i in range(1000):
        put_window(h, f"n{i:04d}", window=window, pool="batch")
    for i in range(200):                                         # exact-time jobs at 01:05:00 in that pool
        assert h.put(name=f"x{i:03d}", schedule="0 5 1 * * *", timezone="Europe/Berlin", pool="batch").ok
    items = place_all(h)
    assert len(items) == 1000
    per_second = Counter(at for _, _, at in items)
    assert max(per_second.values()) <= math.ceil(1000 / 600) + 1
    assert ms("2027-01-16T01:05") not in per_second                # the exact herd's second is left alone
    assert all(ms("2027-01-16T01:00") <= at < ms("2027-01-16T01:10") for at in per_second)
    assert W.unplaced(h.state, 10) == ([], "")
    first, after = W.unplaced(h.state, 10, scan=300)               # looked through in steps: none left
    assert first == [] and after == "n0299"
    h.now = ms("2027-01-16T01:00")
    h.plan_and_fire(lookahead=1000)
    for name, t, at in items[:50]:
        ex = h.state.execs[(name, t)]
        assert (ex.state, ex.due) == (SCHEDULED, at)
        assert any(e.kind == "placed" and "least-loaded" in e.message for e in ex.events)


def test_placements_are_the_same_on_every_replica_and_never_move():
    h = harness()
    for i in range(50):
        put_window(h, f"n{i:02d}")
    items = place_all(h)
    replica = SchedulerState()
    for i, entry in enumerate(h.entries, start=2):
        replica.apply(entry, i)
    assert replica.placements == h.state.placements and replica.state_digest() == h.state.state_digest()
    name, t, at = items[0]
    other = at + 1000 if at + 1000 < t + 4 * H else at - 1000
    r = h.apply(C.PLACE, items=[[name, t, other]])                 # a second placement of the same instant
    assert r.ok and r.payload.items[0][3] == "duplicate"
    assert h.state.placements[name] == (t, at)
    r = h.apply(C.PLACE, items=[[name, t + 86_400_000, t + 86_400_000]])
    assert r.payload.items[0][3] == "not_due"
    r = h.apply(C.PLACE, items=[["n01", t, t + 4 * H]])            # the window's end is outside it
    assert r.payload.items[0][3] in ("outside", "duplicate")
    copy = SchedulerState()
    copy.restore(plain.loads(plain.dumps(h.state)))
    assert copy.placements == h.state.placements and copy.state_digest() == h.state.state_digest()
    again = SchedulerState()
    again.restore(pickle.loads(pickle.dumps(SnapshotImage(h.state))))
    assert again.state_digest() == h.state.state_digest()


def test_an_instant_never_placed_gets_the_hash_second_on_every_replica():
    h = harness(now=ms("2027-01-16T00:59:59"))
    put_window(h, "late")
    t = ms("2027-01-16T01:00")
    h.now = t
    h.plan_and_fire()
    ex = h.state.execs[("late", t)]
    assert ex.due == t + W.hash_offset("late", 4 * 3600) * 1000
    assert any(e.kind == "placed" and "by the hash of its name" in e.message for e in ex.events)


def test_a_calendar_skips_a_window_day_with_its_reason():
    h = harness()
    assert h.apply(C.CALENDAR_PUT, calendar={"name": "weekend", "team": "default", "weekdays": [5, 6]}).ok
    put_window(h, "w", calendar={"skip": ["weekend"]})
    place_all(h)
    t = ms("2027-01-16T01:00")                                      # Saturday
    h.now = t
    h.plan_and_fire()
    ex = h.state.execs[("w", t)]
    assert (ex.state, ex.reason) == (SKIPPED, "calendar weekend: 2027-01-16 Saturday")


def test_a_blackout_at_the_placed_second_follows_on_blackout():
    h = harness()
    put_window(h, "w", on_blackout="defer")
    (name, t, at), = place_all(h)
    assert h.apply(C.BLACKOUT_PUT, blackout={"name": "freeze", "start_ms": at - 1000, "end_ms": at + 60_000}).ok
    h.now = t
    h.plan_and_fire()
    ex = h.state.execs[(name, t)]
    assert ex.state == SCHEDULED and ex.due == at + 60_000 and "blackout freeze" in ex.reason


def test_the_windows_end_is_the_deadline_and_a_miss_is_found_after_it():
    h = harness()
    put_window(h, "w")
    place_all(h)
    t = ms("2027-01-16T01:00")
    h.now = t
    h.plan_and_fire()
    end = ms("2027-01-16T05:00")
    assert W.deadline(h.state, h.state.jobs["w"], t) == end
    assert due_misses(StateView(h.state), end - 1) == []
    (miss,) = due_misses(StateView(h.state), end + 1)
    assert (miss.job, miss.scheduled_ms, miss.deadline_ms) == ("w", t, end)
    assert miss.sla == "by the window's end 05:00 Europe/Berlin"
    h.now = end + 1
    r = h.apply(C.SLA, rid="sla-x", job="w", scheduled_ms=t, deadline_ms=end, sla=miss.sla,
                created=h.state.execs[("w", t)].log_index)
    assert r.ok, r
    assert any(e.kind == "sla_missed" for e in h.state.execs[("w", t)].events)


def test_below_the_window_level_place_is_refused_and_nothing_is_placed():
    h = Harness(now=T_DAY - 12 * H, level=8)
    r = h.apply(C.PLACE, items=[])
    assert r.code is Code.FEATURE_LEVEL


# ------------------------------------------------------------------ preview, explain, the client's forms


def test_preview_and_explain_show_the_window_and_the_placement():
    from schedd.core import explain as E
    from schedd.core.model import validate_spec as v

    h = harness()
    put_window(h, "w")
    job_row = h.state.jobs["w"]
    t = ms("2027-01-16T01:00")
    assert W.preview(h.state, job_row, t) == (0, "window 2027-01-16 01:00–05:00 Europe/Berlin, not placed yet")
    (_, _, at), = place_all(h)
    placed, note = W.preview(h.state, job_row, t)
    assert placed == at and note == f"window 2027-01-16 01:00–05:00 Europe/Berlin, placed {W.clock(at, 'Europe/Berlin')}"
    found = E.explain(h.state, "w", t)
    assert any(f.kind == "window" and f.at_ms == at for f in found.findings)
    h.now = t
    h.plan_and_fire()
    ran = E.explain(h.state, "w", t)
    assert any(f.kind == "placed" for f in ran.findings) and not any(f.kind == "jitter" for f in ran.findings)
    assert v(job("plain", window={})).window is None             # an empty window is none


def test_client_forms_of_a_window():
    from schedd_client import job_spec
    from schedd_client.errors import ValidationError as ClientError
    from schedd_client.job_flags import _flag_doc
    from schedd_client.schedctl import build_parser
    from schedd_client.specs import spec_from_dict, spec_to_dict

    s = job_spec("a", command="true", window={"start": "01:00", "end": "05:00", "tz": "Europe/Berlin"})
    assert (s.window.start, s.window.end, s.timezone) == ("01:00", "05:00", "Europe/Berlin")
    assert job_spec("a", command="true", window="23:00-02:00").window.end == "02:00"
    with pytest.raises(ClientError, match="differs from the job's timezone"):
        job_spec("a", command="true", tz="Asia/Tokyo", window={"start": "01:00", "end": "05:00", "tz": "Europe/Berlin"})
    with pytest.raises(ClientError, match="HH:MM-HH:MM"):
        job_spec("a", command="true", window="01:00")
    doc = spec_from_dict({"name": "a", "command": "true", "schedule": "0 0 * * 1-5",
                          "window": {"start": 60, "end": 300, "tz": "Europe/Berlin"}})   # YAML 1.1's 01:00
    assert (doc.window.start, doc.window.end) == ("01:00", "05:00")
    assert spec_to_dict(doc)["window"] == {"start": "01:00", "end": "05:00"}
    assert spec_from_dict(spec_to_dict(doc)) == doc
    args = build_parser().parse_args(["job", "create", "j", "--window", "01:00-05:00", "--tz", "Europe/Berlin",
                                      "--command", "true"])
    assert _flag_doc(args)["window"] == "01:00-05:00"


def test_the_forecast_counts_a_window_job_at_its_placed_second_only():
    from schedd.core import forecast

    h = harness()
    for i in range(20):
        put_window(h, f"n{i:02d}", window={"start": "01:00", "end": "01:10"})
    t = ms("2027-01-16T01:00")
    before = forecast.compute(forecast.rows(h.state), t, t + 600_000)
    assert before.instants == 0                                  # not placed: not known where
    items = place_all(h)
    after = forecast.compute(forecast.rows(h.state), t, t + 600_000)
    assert after.instants == 20 and max(after.groups[0].series) == 1
    assert sorted(i for i, k in enumerate(after.groups[0].series) if k) == sorted((at - t) // 1000 for _, _, at in items)


def test_calendars_and_blackouts_decide_the_load_a_placement_reads_and_the_forecast_of_windows():
    """What a calendar skips is no load: a herd skipped on Saturdays leaves its second free to a
    window; a window job whose day a calendar skips, or whose placed second a blackout holds, is
    not counted by the forecast."""
    from schedd.core import forecast

    h = harness()
    assert h.apply(C.CALENDAR_PUT, calendar={"name": "weekend", "team": "default", "weekdays": [5, 6]}).ok
    for i in range(200):                                         # a herd at 01:05:00, not on weekends
        assert h.put(name=f"x{i:03d}", schedule="0 5 1 * * *", timezone="Europe/Berlin", pool="batch",
                     calendar={"skip": ["weekend"]}).ok
    for i in range(600):                                         # 600 window jobs for 600 seconds
        put_window(h, f"n{i:03d}", window={"start": "01:00", "end": "01:10"}, pool="batch")
    put_window(h, "off", window={"start": "01:00", "end": "01:10"}, calendar={"skip": ["weekend"]})
    put_window(h, "held", window={"start": "01:00", "end": "01:10"})
    items = place_all(h)
    per_second = Counter(at for name, _, at in items if name.startswith("n"))
    t = ms("2027-01-16T01:00")                                   # Saturday: the herd does not run
    assert per_second[ms("2027-01-16T01:05")] == 1 and max(per_second.values()) == 1
    at = dict((name, at) for name, _, at in items)
    assert h.apply(C.BLACKOUT_PUT, blackout={"name": "freeze", "start_ms": at["held"],
                                             "end_ms": at["held"] + 1000, "selector": {"team": "default"}}).ok
    fc = forecast.compute(forecast.rows(h.state), t, t + 600_000, book=calendars.book_of(h.state))
    held = sum(1 for a in at.values() if a == at["held"])          # "held" and whoever shares its second
    assert fc.instants == 600 + 1 - held                              # "off": its day skipped, no run
    assert fc.left["skipped"] == 200 + held                           # the herd's Saturday, the blackout


def test_the_leaders_placer_places_each_instant_once_and_then_rests():
    import asyncio

    from schedd.core.view import StateView
    from schedd.leader import placer as P
    from tests.support.env import TestEnv

    h = harness()
    for i in range(30):
        put_window(h, f"n{i:02d}", window={"start": "01:00", "end": "01:01"})
    env = TestEnv(h)
    placer = P.Placer(env.node, env.clock, env.spawn, StateView(h.state))

    async def main() -> None:
        placer.step(h.now, h.term)
        await env.settle()
        placer.step(h.now + P.PLACE_EVERY_MS, h.term)         # a pass that finds all placed: it rests
        await env.settle()
    asyncio.run(main())
    assert [C.decode(e).kind for e in env.node.proposed] == [C.PLACE]
    seconds = {at for _, at in h.state.placements.values()}
    assert len(seconds) == 30 and all(ms("2027-01-16T01:00") <= at < ms("2027-01-16T01:01") for at in seconds)
    assert placer.settled_at == h.state.window_moves
    placer.step(h.now + 2 * P.PLACE_EVERY_MS, h.term)          # nothing moved: no look at all
    assert placer.cursor == "" and len(env.node.proposed) == 1


def test_writing_a_window_herd_warns_of_no_crowding():
    from schedd.api.forecasts import _rows_of

    specs = [validate_spec(job(f"n{i}")) for i in range(3)] + [validate_spec(job("x", window={}, schedule="0 1 * * *"))]
    assert [row[0] for row in _rows_of(specs)] == ["x"]          # window jobs are placed where the load is least


@pytest.mark.parametrize("day, hours", [("2027-03-28", 3), ("2027-10-31", 5)])
def test_a_dst_nights_window_is_placed_within_its_wall_clock_hours(day, hours):
    h = harness(now=ms(f"{day}T00:00") - 12 * H)
    for i in range(2000):
        put_window(h, f"n{i:04d}")
    items = place_all(h)
    lo, hi = ms(f"{day}T01:00"), ms(f"{day}T05:00")
    assert hi - lo == hours * H
    assert all(t == lo and lo <= at < hi for _, t, at in items)
    assert max(Counter(at for _, _, at in items).values()) == 1     # 2,000 runs in 10,800+ seconds


def test_a_window_changed_after_its_placement_is_placed_again_only_if_it_no_longer_holds_it():
    name = next(f"j{i}" for i in range(1000) if 3600 <= W.hash_offset(f"j{i}", 4 * 3600) < 9000)
    h = harness()
    put_window(h, name)
    (_, t, at), = place_all(h)
    assert t + H <= at < t + 2.5 * H                                     # between 02:00 and 03:30
    put_window(h, name, window={"start": "01:00", "end": "03:30"})     # still holds it: it stays
    assert place_all(h) == [] and h.state.placements[name] == (t, at)
    put_window(h, name, window={"start": "01:00", "end": "02:00"})     # no longer holds it: placed again
    (_, t2, again), = place_all(h)
    assert t2 == t and t <= again < t + H and h.state.placements[name] == (t, again)
