"""The dashboard's Calendars and Forecast pages and the job page's calendars and explain panel:
what they make of the API's answers (pure shaping), and their routes' rules (a session, the
form's choices) against an in-process server with a fake API. The browser test against a real
cluster: tests/integration/test_dashboard_calendars.py."""

from __future__ import annotations

from datetime import date

import pytest

from schedd.dashboard import calendars as cpage
from schedd.dashboard import forecast as fpage
from schedd.dashboard import job as jpage
from schedd_proto import calendars_pb2 as cpb
from schedd_proto import scheduler_pb2 as pb
from tests.unit.test_dashboard_app import client, login  # noqa: F401  (the fixture)


def test_a_calendars_next_dates_are_the_cores_rule_of_dates_ranges_and_weekdays():
    c = cpb.Calendar(spec=cpb.CalendarSpec(name="h", team="a", weekdays=["sun"], entries=[
        cpb.CalendarEntry(date="2026-12-25", name="Christmas Day"),
        cpb.CalendarEntry(date="2026-12-09", last="2026-12-10", name="Closure")]), sources=["holidays DE"],
        used_by=["j"])
    row = cpage.calendar_row(c, date(2026, 12, 7))
    assert row["next"] == [{"date": "2026-12-09", "name": "Closure"}, {"date": "2026-12-10", "name": "Closure"},
                           {"date": "2026-12-13", "name": "Sunday"}, {"date": "2026-12-20", "name": "Sunday"},
                           {"date": "2026-12-25", "name": "Christmas Day"}]
    assert row["kinds"] == "1 dates, 1 ranges, weekdays sun" and row["used_by"] == ["j"]
    assert cpage.calendar_row(cpb.Calendar(spec=cpb.CalendarSpec(name="x")), date(2026, 12, 7))["team"] == \
        "(cluster-wide)"


def test_a_blackout_says_when_it_holds_and_whom():
    b = cpb.Blackout(name="f", start_ms=1000, end_ms=2000, team="a", labels={"tier": "prod"}, reason="release")
    assert [cpage.blackout_row(b, t)["when"] for t in (0, 1000, 2000)] == ["coming", "now", "ended"]
    assert cpage.blackout_row(b, 0)["selector"] == "team a, tier=prod"
    assert cpage.blackout_row(cpb.Blackout(name="g", end_ms=1), 0)["selector"] == "every team"


def test_the_forecast_form_is_checked_and_its_peaks_compared_with_the_slots():
    req = fpage.request_of({"by": "pool", "hours": "6", "top": "3"}, 1000)
    assert (req.from_ms, req.to_ms, req.by, req.top) == (1000, 1000 + 6 * 3_600_000, "pool", 3)
    for bad in ({"by": "host"}, {"hours": "8760"}, {"top": "1000"}):
        with pytest.raises(ValueError):
            fpage.request_of(bad, 0)
    r = pb.ForecastResponse(by="pool", skipped=7, deferred=2, groups=[pb.ForecastGroup(
        key="p", slots=2, skipped=7, peak_seconds=[pb.ForecastPeak(at_ms=0, width_ms=1000, due=5, over=True)],
        peak_minutes=[pb.ForecastPeak(at_ms=0, width_ms=60000, due=9)])])
    row = fpage.forecast_row(r)
    assert row["left"] == {"skipped": 7, "moved": 0, "deferred": 2}
    (g,) = row["groups"]
    assert g["seconds"][0]["ratio"] == 2.5 and g["minutes"][0]["ratio"] is None and g["left"]["skipped"] == 7


def test_the_job_page_words_its_calendars_and_an_explanation():
    spec = pb.JobSpec(name="j", calendar=pb.JobCalendar(skip=["hol"], only=["biz"], on_skip="next_allowed"))
    assert jpage.calendar_text(spec) == "skip hol; only biz; a date they exclude: run at the next allowed instant"
    assert jpage.calendar_text(pb.JobSpec(name="j")) == ""
    x = pb.Explanation(id="j@2026-12-07T00:00:00Z", job="j", instant_ms=1_796_601_600_000, disposition="ran",
                       summary="ran", index=9, findings=[pb.ExplainFinding(
                           kind="claimed", text="claimed", at_ms=1_796_601_600_000, details={"fencing_token": "42"})])
    out = jpage.explanation(x)
    assert out["run_url"] == "/runs/j%402026-12-07T00%3A00%3A00Z" and out["index"] == 9
    assert out["findings"][0]["details"] == {"fencing_token": "42"} and out["instant"] == "2026-12-07 00:00:00Z"
    assert jpage.explanation(pb.Explanation(id="j@x", disposition="skipped-calendar"))["run_url"] == ""


async def test_the_pages_need_a_session_and_the_forecast_only_the_offered_choices(client):
    for path in ("/api/calendars", "/api/forecast", "/api/jobs/j/explain?at=1"):
        assert (await client.get(path)).status == 401
    for path in ("/calendars", "/forecast"):
        r = await client.get(path, allow_redirects=False)
        assert r.status == 303 and r.headers["Location"].startswith("/login?next=")
    await login(client)
    page = await (await client.get("/jobs")).text()
    assert 'id="nav-calendars"' in page and 'id="nav-forecast"' in page
    r = await client.get("/api/forecast?hours=9999")
    assert r.status == 400 and "hours" in (await r.json())["error"]
    assert (await client.get("/api/jobs/j/explain?at=soon")).status == 400
