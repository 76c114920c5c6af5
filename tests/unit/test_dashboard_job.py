"""The Job page's shaping (schedd.dashboard.job, timeline): what the JSON endpoints make of the
API's answers, and the timeline of instants, which must stay fast for a long history."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

from schedd.dashboard import job as page
from schedd.dashboard import timeline
from schedd_proto import scheduler_pb2 as pb

T0 = 1_796_000_000_000          # 2026-11-30T...Z


def record(t: int, disposition: str, state: str = "", trigger: str = "schedule", detail: str = "") -> pb.InstantRecord:
    r = pb.InstantRecord(instant_ms=t, disposition=disposition, detail=detail)
    if state:
        r.execution.CopyFrom(pb.Execution(id=f"j@{t}", job="j", scheduled_ms=t, state=state, trigger=trigger))
    return r


@pytest.mark.parametrize(("disposition", "state", "trigger", "lane"), [
    ("ran", "SUCCEEDED", "schedule", "succeeded"),
    ("ran", "FAILED", "schedule", "failed"),
    ("ran", "TIMED_OUT", "schedule", "failed"),
    ("ran", "LOST", "catchup", "failed"),
    ("ran", "SUCCEEDED", "catchup", "caught-up"),
    ("ran", "SUCCEEDED", "manual", "manual"),
    ("ran", "FAILED", "backfill", "manual"),
    ("running", "RUNNING", "schedule", "running"),
    ("pending", "SCHEDULED", "manual", "manual"),
    ("skipped-overlap", "SKIPPED", "schedule", "skipped"),
    ("skipped-deadline", "SKIPPED", "schedule", "skipped"),
    ("coalesced", "", "", "missed"),
    ("skipped-window", "", "", "missed"),
    ("skipped-cap", "", "", "missed"),
    ("missing", "", "", "missed"),
    ("paused", "", "", "paused"),
    ("upstream-failed", "UPSTREAM_FAILED", "schedule", "failed"),
    ("pruned", "", "", "other"),
])
def test_each_instant_lands_in_the_lane_of_its_outcome(disposition, state, trigger, lane):
    assert timeline.category(disposition, state, trigger) == lane


def test_instant_rows_carry_local_and_utc_time_the_reason_and_the_run_link():
    rows = page.instant_rows([record(T0, "ran", "SUCCEEDED"),
                              record(T0 + 60_000, "skipped-overlap", "SKIPPED", detail="overlap: j@... still running"),
                              record(T0 + 120_000, "coalesced", detail="coalesced into a later run")],
                             "Europe/Berlin")
    assert [r["category"] for r in rows] == ["succeeded", "skipped", "missed"]
    assert [r["letter"] for r in rows] == ["S", "K", "M"]
    assert rows[0]["id"] == f"j@{T0}" and rows[2]["id"] == ""
    assert rows[0]["local"] == page.local_text(T0, page._zone("Europe/Berlin")) and rows[0]["local"].endswith("CET")
    assert page.local_text(T0, None).endswith(" UTC")
    assert rows[1]["detail"] == "overlap: j@... still running"


def test_the_timeline_labels_each_lane_and_titles_each_mark():
    rows = page.instant_rows([record(T0, "ran", "SUCCEEDED"), record(T0 + 60_000, "skipped-overlap", "SKIPPED",
                                                                     detail="overlap")], "UTC")
    svg = timeline.svg(rows, T0 - 60_000, T0 + 120_000)
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    labels = [t.text for t in root.findall(".//s:text[@class='lane-label']", ns)]
    assert labels == ["S Succeeded", "K Skipped"]
    titles = [t.text for t in root.findall(".//s:rect/s:title", ns)]
    assert any(t.startswith("Skipped: ") and "skipped-overlap: overlap" in t for t in titles)
    assert "style=" not in svg                       # the CSP allows no inline style
    assert timeline.legend(rows) == [{"key": "succeeded", "label": "Succeeded", "letter": "S", "count": 1},
                                     {"key": "skipped", "label": "Skipped", "letter": "K", "count": 1}]


def test_an_empty_window_says_so():
    assert "no instants in this window" in timeline.svg([], T0, T0 + 1000)


def test_ten_thousand_instants_draw_in_well_under_a_second():
    records = [record(T0 + i * 60_000, "ran" if i % 7 else "skipped-overlap", "SUCCEEDED" if i % 7 else "SKIPPED",
                      detail="" if i % 7 else "overlap") for i in range(10_000)]
    start = time.process_time()             # CPU time: the suite's machine is shared
    rows = page.instant_rows(records, "Europe/Berlin")
    svg = timeline.svg(rows, T0, T0 + 10_000 * 60_000)
    took = time.process_time() - start
    marks = svg.count('class="mark ')
    assert marks <= 2 * timeline.WIDTH              # binned per pixel column and lane
    assert sum(int(b["count"]) for b in timeline.legend(rows)) == 10_000
    assert took < 1.0, f"{took:.3f} s for 10,000 instants"


def test_job_detail_reads_the_spec_and_the_fires_with_their_dst_notes():
    job = pb.Job(spec=pb.JobSpec(name="nightly", team="a", schedule="30 2 * * *", timezone="Europe/Berlin",
                                 params={"region": "eu"}, overlap="skip"),
                 schedule_words="at 02:30 every day, Europe/Berlin", effective_dst_gap="shift",
                 effective_dst_fold="first", upcoming_ms=[1_774_746_000_000],
                 upcoming_fires=[pb.UpcomingFire(local="2026-03-29T03:00:00+02:00", zone_abbreviation="CEST",
                                                 dst_note="shifted: 02:30 does not exist (clocks jump 02:00 -> 03:00)")])
    d = page.job_detail(job)
    assert d["words"] == "at 02:30 every day, Europe/Berlin" and d["params"] == {"region": "eu"}
    assert {"label": "Overlap", "value": "skip"} in d["readable"]
    assert d["fires"] == [{"ms": 1_774_746_000_000, "utc": "2026-03-29 01:00:00Z", "local": "2026-03-29 03:00:00 CEST",
                           "zone": "CEST", "dst": "shifted: 02:30 does not exist (clocks jump 02:00 -> 03:00)",
                           "calendar": "", "window": ""}]
    assert not any(f["label"] == "Window" for f in d["readable"])          # no window: no such line
    assert '"schedule": "30 2 * * *"' in d["spec_json"] and "schedule: 30 2 * * *" in d["spec_yaml"]


def test_a_run_row_has_its_duration_worker_attempts_and_params():
    ex = pb.Execution(id="j@2026-12-01T00:00:00Z", state="SUCCEEDED", scheduled_ms=T0, trigger="manual",
                      params={"region": "us"},
                      attempts=[pb.Attempt(number=1, worker="w1", started_ms=T0 + 1000, ended_ms=T0 + 3500)])
    row = page.run_row(ex, now_ms=T0 + 10_000)
    assert row["url"] == "/runs/j%402026-12-01T00%3A00%3A00Z"
    assert (row["duration_ms"], row["worker"], row["attempts"], row["params"]) == (2500, "w1", 1, {"region": "us"})
    running = pb.Execution(id="x", state="RUNNING", attempts=[pb.Attempt(started_ms=T0)])
    assert page.run_row(running, now_ms=T0 + 4000)["duration_ms"] == 4000


def test_backfill_bounds_read_in_the_jobs_zone_unless_they_name_an_offset():
    assert page.parse_when("2026-12-01 10:00", "Europe/Berlin") == page.parse_when("2026-12-01T09:00:00Z", "UTC")
    assert page.parse_when("2026-12-01T10:00:00+01:00", "Asia/Tokyo") == page.parse_when("2026-12-01T09:00Z", "UTC")
    with pytest.raises(ValueError, match="not a time"):
        page.parse_when("yesterday", "UTC")
    with pytest.raises(ValueError, match="both"):
        page.parse_when(" ", "UTC")


def test_trigger_params_are_text_by_name():
    assert page.trigger_params({"params": {"region": "us", " ": "x"}}) == {"region": "us"}
    assert page.trigger_params({}) == {}
    with pytest.raises(ValueError):
        page.trigger_params({"params": {"n": 3}})


def test_the_page_offers_only_the_actions_the_grants_allow():
    job = pb.Job(spec=pb.JobSpec(name="nightly", team="a", params={"region": "eu", "mode": "<fast>"}))
    everything = page._main("nightly", job, {"trigger": True, "write": True, "backfill": True})
    assert 'id="trigger"' in everything and 'id="pause"' in everything and 'id="bf-count"' in everything
    assert 'data-param="region" value="eu"' in everything and 'value="&lt;fast&gt;"' in everything   # escaped
    assert 'id="no-actions"' not in everything
    trigger_only = page._main("nightly", job, {"trigger": True, "write": False, "backfill": False})
    assert 'id="trigger"' in trigger_only and 'id="pause"' not in trigger_only and 'id="bf-count"' not in trigger_only
    read_only = page._main("nightly", job, {"trigger": False, "write": False, "backfill": False})
    assert 'id="no-actions"' in read_only and "<button type=\"submit\" id=\"trigger\"" not in read_only
