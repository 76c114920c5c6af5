"""schedctl for DST policies and SLAs, against the fake cluster of tests/support/fake_api.py: `job next`, the
--dst-*/--sla-* flags, SLA events in `run get` and the SLA column of `run list`."""

from __future__ import annotations

import json

from schedd.core.schedule import parse_time
from schedd_proto import scheduler_pb2 as pb
from tests.support.fake_api import NOW_MS, FakeCluster, add_execution
from tests.support.schedctl import Run, fake, run, spec  # noqa: F401 - fixtures


def test_create_with_dst_and_sla_flags(run: Run, fake: FakeCluster) -> None:
    code, _, err = run("job", "create", "report", "--schedule", "30 2 * * *", "--tz", "Europe/Berlin",
                       "--command", "r.sh", "--dst-gap", "skip", "--dst-fold", "both", "--sla-within", "2h",
                       "--sla-by", "06:00", "--sla-webhook", "http://h/sla")
    assert (code, err) == (0, "")
    s = spec(fake, "report")
    assert (s.dst_gap, s.dst_fold) == ("skip", "both")
    assert s.sla == pb.SlaSpec(within_seconds=7200, by="06:00", webhook="http://h/sla")
    code, out, _ = run("job", "get", "report")
    assert "DST policy:" in out and "gap skip, fold both (named on the job)" in out
    assert "within 2h and by 06:00 Europe/Berlin, webhook http://h/sla" in out
    code, _, _ = run("job", "update", "report", "--dst-fold", "last", "--sla-tz", "UTC")
    s = spec(fake, "report")
    assert s.dst_fold == "last" and s.dst_gap == "skip" and s.sla.timezone == "UTC" and s.sla.by == "06:00"


def test_job_get_shows_the_policy_in_force_and_where_it_comes_from(run: Run, fake: FakeCluster) -> None:
    run("job", "create", "hourly", "--schedule", "@hourly", "--tz", "Europe/Berlin", "--command", "x")
    run("job", "create", "daily", "--schedule", "30 2 * * *", "--tz", "Europe/Berlin", "--command", "x")
    run("job", "create", "every", "--schedule", "@every 1h", "--command", "x")
    out = run("job", "get", "hourly")[1]
    assert "gap skip, fold both (default: the hour repeats, so it follows real time)" in out
    assert "gap shift, fold first (default: fixed local times)" in run("job", "get", "daily")[1]
    assert "DST policy" not in run("job", "get", "every")[1]
    doc = json.loads(run("job", "get", "hourly", "-o", "json")[1])
    assert (doc["effective_dst_gap"], doc["effective_dst_fold"]) == ("skip", "both")


def test_job_next_marks_fires_shaped_by_dst(run: Run, fake: FakeCluster) -> None:
    run("job", "create", "every-minute", "--schedule", "* * * * *", "--tz", "Europe/Berlin",
        "--command", "x", "--dst-fold", "both")
    # the fake serves fires one minute apart from next_fire_ms: aim it at Berlin's fall-back
    fake.state.jobs["every-minute"].next_fire_ms = parse_time("2026-10-25T00:59:00Z")
    code, out, err = run("job", "next", "every-minute", "--count", "3", "-o", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["timezone"], doc["dst_gap"], doc["dst_fold"]) == ("Europe/Berlin", "skip", "both")
    assert [f["local"] for f in doc["fires"]] == [
        "2026-10-25T02:59:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T02:01:00+01:00"]
    assert [f["utc"] for f in doc["fires"]] == [
        "2026-10-25T00:59:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:01:00Z"]
    assert doc["fires"][0]["dst"] == "repeated: 02:59 occurs twice, this is the 1st (CEST)"
    assert doc["fires"][1]["dst"] == "repeated: 02:00 occurs twice, this is the 2nd (CET)"
    code, out, _ = run("job", "next", "every-minute", "--count", "3")
    lines = out.splitlines()
    assert lines[0] == ("every-minute: * * * * * in Europe/Berlin "
                        "(DST: gap skip, fold both (named on the job))")
    assert lines[1].split() == ["#", "LOCAL", "(Europe/Berlin)", "UTC", "IN", "DST"]
    assert len(lines) == 5 and "1st (CEST)" in lines[2] and "2nd (CET)" in lines[3]
    assert run("job", "next", "every-minute", "--count", "0")[0] == 2
    assert run("job", "next", "missing")[0] == 1


def test_sla_events_in_run_get_and_run_list(run: Run, fake: FakeCluster) -> None:
    run("job", "create", "slow", "--command", "x", "--sla-within", "1s")
    late = add_execution(fake.state, "slow", NOW_MS - 60_000, "RUNNING")
    late.events.add(time_ms=NOW_MS - 59_000, kind="sla_missed",
                    message="missed its SLA (within 1s), deadline 2026-11-29T01:59:01Z: still RUNNING at the deadline")
    add_execution(fake.state, "slow", NOW_MS - 120_000, "SUCCEEDED")
    code, out, _ = run("run", "list")
    header, *rows = out.splitlines()
    assert header.split()[-1] == "SLA"
    assert rows[0].startswith(late.id) and rows[0].endswith("! missed") and rows[1].endswith("-")
    code, out, _ = run("run", "get", late.id)
    assert "Events:" in out and "! sla_missed" in out and "still RUNNING at the deadline" in out
    data = json.loads(run("run", "get", late.id, "-o", "json")[1])
    assert data["events"][0]["kind"] == "sla_missed" and data["events"][0]["time"].endswith("Z")
    # no SLA column when nothing missed
    fake.state.executions.pop(late.id)
    assert "SLA" not in run("run", "list")[1].splitlines()[0]


def test_job_document_keys_round_trip() -> None:
    import pytest
    import yaml

    from schedd_client import ValidationError, job_spec
    from schedd_client.specs import spec_from_dict, spec_to_dict

    doc = yaml.safe_load("""
name: report
schedule: "30 2 * * *"
timezone: Europe/Berlin
command: report.sh
dst_gap: skip
dst_fold: both
sla: {within: 2h, by: "06:00", timezone: Europe/Berlin, webhook: "http://h/sla"}
""")
    s = spec_from_dict(doc)
    assert (s.dst_gap, s.dst_fold) == ("skip", "both")
    assert s.sla == pb.SlaSpec(within_seconds=7200, by="06:00", timezone="Europe/Berlin", webhook="http://h/sla")
    assert spec_from_dict(spec_to_dict(s)) == s
    assert spec_to_dict(s)["sla"] == {"within": 7200, "by": "06:00", "timezone": "Europe/Berlin",
                                      "webhook": "http://h/sla"}
    assert job_spec("x", command="y", sla={"within": "90s"}).sla.within_seconds == 90
    with pytest.raises(ValidationError, match="unknown key 'whithin'"):
        spec_from_dict({"name": "x", "command": "y", "sla": {"whithin": "2h"}})
    with pytest.raises(ValidationError, match="must be quoted text"):
        spec_from_dict(yaml.safe_load("name: x\ncommand: y\nsla: {by: 6:00}"))
