"""Calendars and blackouts (schedd.core.calendars, schedd.api.calendar_import): the rules of a
calendar, table-driven; holidays and iCalendar imports expanded at the edge; what calendars and
blackouts make of a job's instants when they are recorded (skip, next_allowed, defer under the
overlap policy); the snapshot and digest round trip; a cluster below the calendar level.
(Calendars together with DST: tests/unit/testdata/calendar_dst.txt.)"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from schedd.api.calendar_import import expand, holidays_of, ics_entries
from schedd.core import calendars as K
from schedd.core import commands as C
from schedd.core import plain
from schedd.core.model import SCHEDULED, SKIPPED, ValidationError
from schedd.core.results import Code
from schedd.core.snapshot import SnapshotImage
from schedd.core.state import SchedulerState
from schedd.core.view import StateView
from schedd.leader.assignment import InFlight, Pace, decide
from schedd_proto import calendars_pb2 as cpb
from tests.support.state import T0, Harness, text

MIN = 60_000
DAY = 86_400_000
LEVEL = K.CALENDAR_LEVEL


def cal_doc(name="hol", **kw):
    return {"name": name, "team": kw.pop("team", "default"), **kw}


def harness(level: int = LEVEL) -> Harness:
    return Harness(level=level)


# ------------------------------------------------------------------ calendar rules


RULES = K.Calendar("c", "", "", (("2026-12-25", "Christmas Day"), ("2027-01-01", "New Year")),
                   (("2026-08-03", "2026-08-14", "Summer closure"),), (5, 6), (), 1, 0, "")


@pytest.mark.parametrize("day, expected", [
    ("2026-12-25", "Christmas Day"),          # an explicit date (a Friday)
    ("2027-01-01", "New Year"),
    ("2026-08-03", "Summer closure"),         # a range's first day
    ("2026-08-14", "Summer closure"),         # and its last (inclusive)
    ("2026-08-15", "Saturday"),               # after the range: the weekday rule
    ("2026-08-17", None),                     # a Monday after it
    ("2026-12-24", None),                     # a Thursday
    ("2026-12-27", "Sunday"),
])
def test_calendar_rules(day, expected):
    assert RULES.entry_on(day, date.fromisoformat(day).weekday()) == expected


@pytest.mark.parametrize("doc, problem", [
    ({"name": "Bad Name", "dates": [["2026-01-01", ""]]}, "bad calendar name"),
    ({"name": "c", "dates": [["2026-02-30", "x"]]}, "bad date '2026-02-30'"),
    ({"name": "c", "dates": [["26-1-1", "x"]]}, "bad date"),
    ({"name": "c", "ranges": [["2026-02-10", "2026-02-01", "x"]]}, "ends before it starts"),
    ({"name": "c", "weekdays": [7]}, "weekdays are numbers"),
    ({"name": "c"}, "no entries"),
    ({"name": "c", "team": "Bad Team", "weekdays": [1]}, "bad team"),
])
def test_bad_calendars_are_refused_saying_why(doc, problem):
    with pytest.raises(ValidationError, match=problem):
        K.check_calendar(doc)


def test_same_date_twice_is_one_entry_naming_both():
    doc = K.check_calendar({"name": "c", "dates": [["2026-05-14", "Ascension"], ["2026-05-14", "Fathers' Day"]]})
    assert doc["dates"] == [["2026-05-14", "Ascension; Fathers' Day"]]


# ------------------------------------------------------------------ the edge: holidays, iCalendar


@pytest.mark.parametrize("country, subdiv, expected", [
    ("DE", "BY", {"2026-12-25", "2026-12-26", "2027-01-01", "2027-01-06"}),    # Epiphany: Bavaria only
    ("US", "", {"2026-12-25", "2027-01-01"}),
])
def test_holidays_of_two_countries_across_a_year_boundary(country, subdiv, expected):
    got = dict((d, n) for d, n in holidays_of(country, subdiv, [2026, 2027]))
    around_new_year = {d for d in got if "2026-12-20" <= d <= "2027-01-07"}
    assert around_new_year == expected
    assert all(got[d] for d in expected)                    # every entry keeps its name
    assert "2026-12-24" not in got                          # not a public holiday in either


def test_holidays_differ_by_region_and_unknown_ones_are_refused():
    bavaria = {d for d, _ in holidays_of("DE", "BY", [2027])}
    berlin = {d for d, _ in holidays_of("DE", "BE", [2027])}
    assert "2027-01-06" in bavaria - berlin
    with pytest.raises(ValidationError, match="unknown country"):
        holidays_of("XX", "", [2027])


ICS = (Path(__file__).parent / "testdata" / "team_days.ics").read_text()   # three events, two recurring


def test_icalendar_import_expands_recurrences_within_the_years():
    dates, ranges = ics_entries(ICS, [2026, 2027])
    assert ["2026-01-06", "Team Day"] in dates and ["2027-01-06", "Team Day"] in dates
    assert not any(d.startswith("2028") for d, _ in dates)          # the yearly rule, cut at the range
    assert ranges == [["2026-08-03", "2026-08-14", "Summer closure"]]   # DTEND is exclusive
    freeze = sorted(d for d, n in dates if n == "Release freeze")
    assert freeze == ["2026-01-05", "2026-01-19", "2026-01-26"]      # COUNT=4 less the EXDATE


def test_expand_merges_explicit_entries_weekdays_holidays_and_ics():
    spec = cpb.CalendarSpec(name="ops", team="ops", weekdays=["sat", "Sunday"], country="US",
                            year_from=2026, year_to=2027, ics=ICS, ics_name="team.ics",
                            entries=[cpb.CalendarEntry(date="2026-12-24", name="Christmas Eve"),
                                     cpb.CalendarEntry(date="2026-12-28", last="2026-12-31", name="Quiet week")])
    doc = expand(spec, this_year=2026)
    assert doc["weekdays"] == [5, 6]
    assert ["2026-12-24", "Christmas Eve"] in doc["dates"] and ["2026-01-06", "Team Day"] in doc["dates"]
    assert ["2026-12-28", "2026-12-31", "Quiet week"] in doc["ranges"]
    assert [s.split(" (")[0] for s in doc["sources"]] == ["holidays US 2026..2027", "ics team.ics 2026..2027"]
    with pytest.raises(ValidationError, match="bad weekday"):
        expand(cpb.CalendarSpec(name="x", weekdays=["funday"]), 2026)
    with pytest.raises(ValidationError, match="bad year range"):
        expand(cpb.CalendarSpec(name="x", country="US", year_from=2026, year_to=2050), 2026)


# ------------------------------------------------------------------ what instants become


def _with_calendar(h: Harness, **job) -> None:
    # 2027-01-15 (T0) is a Friday: Saturday 16th and Sunday 17th are in "weekend"
    assert h.apply(C.CALENDAR_PUT, calendar=cal_doc("weekend", weekdays=[5, 6])).ok
    assert h.put(name="j1", schedule="0 9 * * *", **job).ok


def _fire_days(h: Harness, days: int) -> None:
    for d in range(days):
        h.now = T0 + 3_600_000 + d * DAY               # 09:00Z each day from Friday
        h.plan_and_fire()


@pytest.mark.parametrize("on_skip, saturday, sunday, monday_event", [
    ("skip", "calendar weekend: 2027-01-16 Saturday", "calendar weekend: 2027-01-17 Sunday", False),
    ("next_allowed",
     "calendar weekend: 2027-01-16 Saturday; moved to the next allowed instant 2027-01-18T09:00:00Z",
     "calendar weekend: 2027-01-17 Sunday; moved to the next allowed instant 2027-01-18T09:00:00Z", True),
])
def test_skip_and_next_allowed(on_skip, saturday, sunday, monday_event):
    h = harness()
    _with_calendar(h, calendar={"skip": ["weekend"], "on_skip": on_skip})
    reasons = {}
    for d in range(4):                                   # Fri, Sat, Sun, Mon
        h.now = T0 + 3_600_000 + d * DAY
        h.plan_and_fire()
        t = T0 + 3_600_000 + d * DAY
        ex = h.state.execs.get(("j1", t))
        reasons[d] = (ex.state, ex.reason) if ex is not None else None
    assert reasons[0] == (SCHEDULED, "")
    assert reasons[1] == (SKIPPED, saturday)
    assert reasons[2] == (SKIPPED, sunday)
    monday = h.state.execs[("j1", T0 + 3_600_000 + 3 * DAY)]
    assert monday.state == SCHEDULED
    assert any(e.kind == "calendar" for e in monday.events) == monday_event


def test_only_calendar_fires_on_its_dates_alone():
    h = harness()
    assert h.apply(C.CALENDAR_PUT, calendar=cal_doc("business", weekdays=[0, 1, 2, 3, 4])).ok
    assert h.put(name="j1", schedule="0 9 * * *", calendar={"only": ["business"]}).ok
    _fire_days(h, 2)
    sat = h.state.execs[("j1", T0 + 3_600_000 + DAY)]
    assert (sat.state, sat.reason) == (SKIPPED, "calendar business: 2027-01-16 (Saturday) is not in it (only)")


def test_calendar_changes_apply_to_instants_not_yet_recorded():
    h = harness()
    _with_calendar(h, calendar={"skip": ["weekend"]})
    _fire_days(h, 2)                                       # Saturday recorded SKIPPED
    assert h.apply(C.CALENDAR_PUT, calendar=cal_doc("weekend", weekdays=[6])).ok   # Sundays only now
    saturday = h.state.execs[("j1", T0 + 3_600_000 + DAY)]
    assert saturday.state == SKIPPED                       # what was recorded stays as it is
    assert h.state.calendars["weekend"].version == 2


def test_unknown_calendars_commit_nothing_and_a_used_one_cannot_be_deleted():
    h = harness()
    r = h.put(name="j1", schedule="0 9 * * *", calendar={"skip": ["nope"]})
    assert r.code is Code.INVALID and "calendar 'nope', which does not exist" in r.msg
    r = h.apply(C.PUT_MANY, specs=[text(name="j2", schedule="@every 1m"),
                                   text(name="j3", schedule="@every 1m", calendar={"only": ["nope"]})])
    assert r.code is Code.INVALID and "j3" in r.msg
    assert "j1" not in h.state.jobs and "j2" not in h.state.jobs
    _with_calendar(h, calendar={"skip": ["weekend"]})
    r = h.apply(C.CALENDAR_DELETE, name="weekend")
    assert r.code is Code.CONFLICT and "in use by 1 job(s): j1" in r.msg
    assert h.put(name="j1", schedule="0 9 * * *").ok       # no calendar any more
    assert h.apply(C.CALENDAR_DELETE, name="weekend").ok


# ------------------------------------------------------------------ blackouts


def _blackout(h: Harness, **kw) -> None:
    doc = {"name": "freeze", "start_ms": T0 - 30_000, "end_ms": T0 + 3 * MIN + 30_000, "reason": "release",
           **kw}
    assert h.apply(C.BLACKOUT_PUT, blackout=doc).ok


@pytest.mark.parametrize("on_blackout, overlap, states, claimed", [
    # skip: the four instants inside the window are SKIPPED naming it; nothing waits
    ("skip", "skip", [SKIPPED] * 4, []),
    # defer, overlap allow: all four wait until the window's end, then start together, in order
    ("defer", "allow", [SCHEDULED] * 4, [0, 1, 2, 3]),
    # defer, overlap skip: the first starts at the window's end; the others are skipped by the
    # overlap policy (decided by the leader's assignment, as for any run)
    ("defer", "skip", [SCHEDULED] * 4, [0]),
])
def test_blackout_skip_and_defer_under_the_overlap_policy(on_blackout, overlap, states, claimed):
    h = harness()
    _blackout(h)
    job = {"on_blackout": on_blackout} if on_blackout != "skip" else {}
    assert h.put(name="j1", schedule="@every 1m", overlap=overlap, **job).ok
    inside = []
    for m in range(0, 4):                                    # T0 .. T0+3m: inside the window
        h.now = T0 + m * MIN
        h.plan_and_fire()
        inside.append(h.state.execs[("j1", T0 + m * MIN)])   # (a skipped one leaves memory later)
    assert [ex.state for ex in inside] == states
    end = T0 + 3 * MIN + 30_000
    for ex in inside:
        if on_blackout == "skip":
            assert ex.reason == "blackout freeze: release"
        else:
            assert ex.due == end and ex.reason.startswith("blackout freeze: release; deferred to its end")
            assert any(e.kind == "deferred" for e in ex.events)
    if on_blackout == "skip":
        return
    view = StateView(h.state)
    early = decide(view, end - 1_000, 10, InFlight(), Pace(0))
    assert not any(c.job == "j1" for c in early.claims)     # not before the window's end
    at_end = decide(view, end, 10, InFlight(), Pace(0))
    got = [(c.scheduled_ms - T0) // MIN for c in at_end.claims if c.job == "j1"]
    assert got == claimed                                     # in order of their instants
    skipped = [(t - T0) // MIN for name, t, why in at_end.skips if name == "j1" and why.startswith("overlap")]
    assert skipped == ([] if overlap == "allow" else [1, 2, 3])


def test_blackouts_match_by_team_and_labels():
    h = harness()
    _blackout(h, team="ops", labels={"tier": "prod"})
    assert h.put(name="a", schedule="@every 1m", team="ops", labels={"tier": "prod"}).ok
    assert h.put(name="b", schedule="@every 1m", team="ops").ok                 # no label
    assert h.put(name="c", schedule="@every 1m", team="dev", labels={"tier": "prod"}).ok
    h.plan_and_fire()
    assert {n: h.state.execs[(n, T0)].state for n in "abc"} == {"a": SKIPPED, "b": SCHEDULED, "c": SCHEDULED}


# ------------------------------------------------------------------ snapshot, digest, levels


def test_snapshot_and_digest_round_trip():
    h = harness()
    _with_calendar(h, calendar={"skip": ["weekend"]})
    _blackout(h, team="default", labels={"k": "v"})
    st = h.state
    digest = st.state_digest()
    text_image = plain.dumps(st)
    copy = SchedulerState()
    copy.restore(plain.loads(text_image))
    assert copy.state_digest() == digest
    assert copy.calendars == st.calendars and copy.blackouts == st.blackouts
    import pickle
    again = SchedulerState()
    again.restore(pickle.loads(pickle.dumps(SnapshotImage(st))))
    assert again.state_digest() == digest
    h.apply(C.CALENDAR_PUT, calendar=cal_doc("weekend", weekdays=[6]))
    assert h.state.state_digest() != digest                  # a calendar's content is in the digest


def test_digest_of_a_state_without_calendars_is_what_it_was():
    h = Harness()
    h.put(name="j1", schedule="@every 1m")
    with_tables = h.state.state_digest()
    del h.state.calendars, h.state.blackouts                  # as a build without them would hash it
    h.state._digest = None
    assert h.state.state_digest() == with_tables


def test_below_the_calendar_level_the_commands_are_refused():
    h = Harness(level=LEVEL - 1)
    before = (h.state.state_digest(), dict(h.state.calendars))
    r = h.apply(C.CALENDAR_PUT, calendar=cal_doc("weekend", weekdays=[5]))
    assert r.code is Code.FEATURE_LEVEL and f"needs feature level {LEVEL}" in r.msg
    r = h.apply(C.BLACKOUT_PUT, blackout={"name": "b", "start_ms": T0, "end_ms": T0 + MIN})
    assert r.code is Code.FEATURE_LEVEL
    # a put carrying a calendar is stamped fl=8 by its proposer: refused alike
    entry = C.encode(C.PUT, rid="", now=h.now, term=h.term, spec=text(name="j1", schedule="@every 1m",
                                                                    calendar={"skip": ["weekend"]}), fl=LEVEL)
    assert h.raw(entry).code is Code.FEATURE_LEVEL
    assert (h.state.state_digest(), dict(h.state.calendars)) == before
    from schedd.core.features import refusal
    assert "needs feature level 8" in (refusal(h.state.features, h.state.feature_level, C.CALENDAR_PUT) or "")


def test_an_older_build_table_does_not_know_the_kinds():
    old = C.table_upto(LEVEL - 1)
    assert old.level_of(C.CALENDAR_PUT) is None and C.FEATURES.level_of(C.CALENDAR_PUT) == LEVEL


# ------------------------------------------------------------------ the client: documents and flags


def test_calendar_documents_and_job_documents(tmp_path):
    from schedd_client.calendars import calendar_from_dict, calendar_to_dict
    from schedd_client.errors import ValidationError as ClientError
    from schedd_client.specs import spec_from_dict, spec_to_dict

    (tmp_path / "team.ics").write_text(ICS)
    spec = calendar_from_dict({"name": "ops", "team": "ops", "weekdays": ["sat", "sun"], "years": "2026..2027",
                               "dates": ["2026-12-24", {"date": "2026-12-31", "name": "New Year's Eve"}],
                               "ranges": ["2026-08-03..2026-08-14"], "ics": "team.ics", "country": "DE"},
                              base=tmp_path)
    assert (spec.year_from, spec.year_to, spec.country, spec.ics_name) == (2026, 2027, "DE", "team.ics")
    assert [(e.date, e.last, e.name) for e in spec.entries] == [
        ("2026-12-24", "", ""), ("2026-12-31", "", "New Year's Eve"), ("2026-08-03", "2026-08-14", "")]
    assert calendar_to_dict(spec)["ranges"] == ["2026-08-03..2026-08-14"]
    with pytest.raises(ClientError, match="unknown key"):
        calendar_from_dict({"name": "x", "holidays": "DE"})
    job = spec_from_dict({"name": "j", "schedule": "0 9 * * *", "command": "true", "on_blackout": "defer",
                          "calendar": {"skip": ["ops"], "on_skip": "next_allowed"}})
    assert list(job.calendar.skip) == ["ops"] and job.on_blackout == "defer"
    assert spec_to_dict(job)["calendar"] == {"skip": ["ops"], "on_skip": "next_allowed"}
    assert spec_from_dict(spec_to_dict(job)) == job


def test_job_flags_name_calendars_and_the_blackout_policy():
    from schedd_client.job_flags import _flag_doc
    from schedd_client.schedctl import build_parser

    args = build_parser().parse_args(["job", "create", "j", "--schedule", "0 9 * * *", "--command", "true",
                                      "--calendar-skip", "a", "--calendar-skip", "b", "--calendar-only", "c",
                                      "--on-skip", "next_allowed", "--on-blackout", "defer"])
    doc = _flag_doc(args)
    assert doc["calendar"] == {"skip": ["a", "b"], "only": ["c"], "on_skip": "next_allowed"}
    assert doc["on_blackout"] == "defer"
