"""Calendars and blackouts against a real cluster, as a user reaches them: `schedctl` in a
subprocess (calendar create/apply/get/list/delete, job create --calendar-skip, job get --next,
run list --all-instants, blackout create/list/delete) and the SDK (Client and AsyncClient).

The node's clock is moved with the test-mode clock offset (schedd.testing.hooks, as the fault
suite does), so "tomorrow's 09:00" comes due within seconds: it is recorded SKIPPED in the
ledger with the calendar's entry as its reason."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta, UTC
from pathlib import Path

from schedd.ports.fakes import wait_until
from tests.support.cluster import schedctl, schedctl_process as run_cli
import grpc
import pytest

from schedd_client import AsyncClient
from schedd_client.calendars import calendar_spec
from schedd_client.errors import SchedError
from schedd_proto import testing_pb2 as tpb
from schedd_proto import testing_pb2_grpc as tpb_grpc

ICS = (Path(__file__).parents[1] / "unit" / "testdata" / "team_days.ics").read_text()


def test_calendars_and_blackouts_end_to_end(cluster_factory, tmp_path):
    c = cluster_factory(size=1, test_mode=True, env={"SCHEDD_TEST_MODE": "1"})
    c.start()
    c.wait_leader(timeout=60)
    client = c.client()
    wait_until(lambda: client.list_calendars() == [], timeout=60, what="the cluster to reach feature level 8")
    context = c.write_context()
    now = datetime.now(UTC)
    tomorrow = (now + timedelta(days=1)).date()
    target = datetime(tomorrow.year, tomorrow.month, tomorrow.day, 9, tzinfo=UTC)

    # calendar create: explicit dates and weekdays (a team's), holidays (cluster-wide), an iCalendar file
    out = run_cli(context, "calendar", "create", "hol", "--date", f"{tomorrow}=Test Holiday", "--team", "default")
    assert "calendar hol created (version 1, 1 dates)" in out.stdout
    out = run_cli(context, "calendar", "create", "bank-holidays-de", "--country", "DE", "--subdiv", "BY",
                  "--years", "2026..2027", "-o", "json")
    names = {e["date"]: e["name"] for e in json.loads(out.stdout)[0]["calendar"]["spec"]["entries"]}
    assert names["2026-12-25"] and names["2027-01-06"]                # Christmas, Epiphany (Bavaria)
    (tmp_path / "team.ics").write_text(ICS)
    schedctl(context, "calendar", "create", "team-days", "--ics", str(tmp_path / "team.ics"), "--years",
             "2027..2028", "--team", "default")
    (tmp_path / "cals.yaml").write_text("name: weekend\nteam: default\nweekdays: [sat, sun]\n"
                                        "---\nname: closure\nteam: default\nranges: ['2027-08-02..2027-08-13']\n")
    out = run_cli(context, "calendar", "apply", "-f", str(tmp_path / "cals.yaml"))
    assert "calendar weekend created" in out.stdout and "calendar closure created" in out.stdout
    got = schedctl(context, "calendar", "get", "team-days").stdout
    assert "2027-01-06" in got and "2028-01-06" in got and "Team Day" in got and "ics team.ics" in got
    listed = schedctl(context, "calendar", "list").stdout
    assert all(n in listed for n in ("hol", "bank-holidays-de", "team-days", "weekend", "closure"))

    # a job naming an unknown calendar is refused, and nothing is committed
    bad = run_cli(context, "job", "create", "bad", "--schedule", "0 9 * * *", "--command", "true",
                  "--calendar-skip", "nope", check=False)
    assert bad.returncode == 1 and "calendar 'nope', which does not exist" in bad.stderr, bad.stderr
    assert schedctl(context, "job", "get", "bad", check=False).returncode == 1

    run_cli(context, "job", "create", "daily", "--schedule", "0 9 * * *", "--command", "true",
            "--calendar-skip", "hol", "--catchup", "none")
    preview = run_cli(context, "job", "get", "daily", "--next", "3").stdout
    assert f"skipped: calendar hol: {tomorrow} Test Holiday" in preview, preview
    shown = json.loads(schedctl(context, "job", "next", "daily", "--count", "3", "-o", "json").stdout)
    marked = [f for f in shown["fires"] if f["calendar"]]
    assert [f["time_ms"] for f in marked] == [int(target.timestamp() * 1000)], shown

    refused = schedctl(context, "calendar", "delete", "hol", check=False)
    assert refused.returncode == 1 and "in use by 1 job(s): daily" in refused.stderr, refused.stderr
    replaced = schedctl(context, "calendar", "create", "hol", "--date", f"{tomorrow}=Test Holiday",
                       "--weekdays", "sat", "--team", "default").stdout
    assert "used by daily" in replaced and "instants not yet recorded" in replaced

    # blackouts: the CLI and both SDK clients
    out = run_cli(context, "blackout", "create", "freeze", "--start", "+1h", "--end", "+2h", "--team", "default",
                  "--label", "tier=prod", "--reason", "release")
    assert "blackout freeze:" in out.stdout and "team default with tier=prod" in out.stdout
    assert "freeze" in schedctl(context, "blackout", "list").stdout
    client.put_blackout("sdk-window", start_ms=int(time.time() * 1000) + 3_600_000,
                        end_ms=int(time.time() * 1000) + 7_200_000, team="default", reason="sdk")

    async def async_names() -> list[str]:
        async with AsyncClient(c.cluster_arg, security=c.security()) as ac:
            return [b.name for b in await ac.list_blackouts()]

    assert asyncio.run(async_names()) == ["freeze", "sdk-window"]
    schedctl(context, "blackout", "delete", "freeze")
    client.delete_blackout("sdk-window")
    assert client.list_blackouts() == []

    # authorization, as for jobs: write on the calendar's team; a cluster-wide one needs operator
    client.acl_put_policy("team-finance", {"team:finance": ["read", "write"]})
    secret = client.acl_create_token(policies=["team-finance"]).secret
    with c.client(security=c.security("user", "finance", token=secret), timeout=30) as fin:
        wait_until(lambda: fin.put_calendar(calendar_spec("fin-days", team="finance", weekdays=["sun"])),
                   timeout=30, what="the finance token to be known")
        for denied in (lambda: fin.put_calendar(calendar_spec("everyone", weekdays=["sun"])),
                       lambda: fin.put_calendar(calendar_spec("ops-days", team="ops", weekdays=["sun"])),
                       lambda: fin.put_blackout("all", start_ms=1, end_ms=2),
                       lambda: fin.delete_calendar("bank-holidays-de")):
            with pytest.raises(SchedError) as err:
                denied()
            assert err.value.code == grpc.StatusCode.PERMISSION_DENIED, err.value
        with pytest.raises(SchedError) as err:
            fin.delete_calendar("hol")                       # team default's: as if it did not exist
        assert err.value.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED)
        visible = {cal.spec.name for cal in fin.list_calendars()}
        assert "fin-days" in visible and "bank-holidays-de" in visible and "hol" not in visible

    # tomorrow's 09:00 comes due (the node's clock two seconds before it) and is recorded SKIPPED
    offset = int((target - datetime.now(UTC)).total_seconds() * 1000) - 2_000
    with c.channel("n1") as ch:
        tpb_grpc.TestingStub(ch).SetClockOffset(tpb.SetClockOffsetRequest(offset_ms=offset), timeout=5)
    since, until = (target - timedelta(minutes=1)).isoformat(), (target + timedelta(minutes=1)).isoformat()

    def ledger_row():
        out = schedctl(context, "run", "list", "daily", "--all-instants", "--since", since, "--until", until,
                       "-o", "json")
        rows = [r for r in json.loads(out.stdout) if int(r["instant_ms"]) == int(target.timestamp() * 1000)]
        return rows[0] if rows and rows[0]["disposition"] != "missing" else None

    row = wait_until(ledger_row, timeout=60, interval=1.0, what="tomorrow's 09:00 in the ledger")
    assert row["disposition"] == "skipped-calendar", row
    assert row["detail"] == f"calendar hol: {tomorrow} Test Holiday", row
    table = run_cli(context, "run", "list", "daily", "--all-instants", "--since", since, "--until", until).stdout
    assert "skipped-calendar" in table and "Test Holiday" in table
