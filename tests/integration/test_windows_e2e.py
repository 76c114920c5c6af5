"""Flexible windows against a real cluster, as a user reaches them: `schedctl job create --window`
in a subprocess, the placement in `job get --next` and `job next -o json`, the same through the
SDK (Client and AsyncClient), bad input refused with nothing committed, and the runs: each starts
at its placed second on the worker (its output is the worker's clock when it ran), is in the
ledger (`run list --all-instants`) with the placement event, and a run still going at the
window's end has its SLA miss shown by `run list`.

The window is the first whole minute of real time that opens at least LEAD_S from when the
jobs are created (so 20-80 s away): the worker runs a handler at its due time on its own clock,
so the nodes' clock is not moved. The refusals of bad input run while the window is awaited."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, UTC
from zoneinfo import ZoneInfo

from schedd.core.model import execution_id
from schedd.ports.fakes import wait_until
from tests.support.cluster import schedctl, schedctl_process as run_cli

from schedd_client import AsyncClient, job_spec

ZONE = "Europe/Berlin"
HERD = 6
# Creating the jobs, their placement and the previews below must end before the window opens
# (a fired instant is no longer the next one): 3-5 s here with the load average at 7, so a
# machine several times slower still fits.
LEAD_S = 20


def refuses_bad_input(context) -> None:
    """Bad window flags are refused saying why, and nothing is committed."""
    for flags, problem in ((["--window", "01:00-01:00"], "window.end equals window.start"),
                           (["--window", "25:00-05:00"], "window.start must be a time"),
                           (["--window", "01:00-05:00", "--jitter", "30s"], "window and jitter together"),
                           (["--window", "01:00-05:00", "--schedule", "@every 1h"], "the schedule picks the days only")):
        bad = run_cli(context, "job", "create", "bad", "--tz", ZONE, "--command", "true", *flags, check=False)
        assert bad.returncode != 0 and problem in bad.stderr, (flags, bad.stderr)
    assert schedctl(context, "job", "get", "bad", check=False).returncode == 1


def test_window_jobs_are_placed_previewed_and_run_at_their_second(cluster_factory):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    c.wait_feature_level(timeout=60)
    c.start_worker("w1", slots=HERD + 2)
    client = c.client()
    context = c.write_context()

    # the window: the first whole minute that starts at least LEAD_S from now
    zone = ZoneInfo(ZONE)
    opens = (datetime.now(UTC) + timedelta(seconds=LEAD_S + 59)).replace(second=0, microsecond=0)
    closes = opens + timedelta(minutes=1)
    window = f"{opens.astimezone(zone):%H:%M}-{closes.astimezone(zone):%H:%M}"
    t_ms = int(opens.timestamp() * 1000)
    end_ms = int(closes.timestamp() * 1000)

    # a herd in one window: the CLI (a subprocess for the first), the SDK for one
    stamp = "date +%s%3N"                                   # the worker's clock when the handler ran
    out = run_cli(context, "job", "create", "win-0", "--window", window, "--tz", ZONE, "--command", stamp)
    assert "win-0" in out.stdout
    for i in range(1, HERD - 1):
        schedctl(context, "job", "create", f"win-{i}", "--window", window, "--tz", ZONE, "--command", stamp)
    client.put_job(job_spec(f"win-{HERD - 1}", window={"start": window[:5], "end": window[6:], "tz": ZONE},
                            command=stamp))
    client.put_job(job_spec("win-late", window=window, tz=ZONE, command="sleep 75"))
    names = [f"win-{i}" for i in range(HERD)]

    def placed(name: str) -> int:
        fires = json.loads(schedctl(context, "job", "next", name, "--count", "2", "-o", "json").stdout)["fires"]
        return int(fires[0]["placed_ms"]) if int(fires[0]["time_ms"]) == t_ms else 0

    wait_until(lambda: all(placed(n) for n in names + ["win-late"]), timeout=60, interval=0.5,
               what="every window instant placed")
    at = {n: placed(n) for n in names}
    assert all(t_ms <= ms < end_ms and ms % 1000 == 0 for ms in at.values()), at
    assert len(set(at.values())) == HERD, at                     # a herd of 6 in 60 free seconds: 6 seconds
    shown = run_cli(context, "job", "get", "win-0", "--next", "2").stdout
    clock = datetime.fromtimestamp(at["win-0"] / 1000, zone).strftime("%H:%M:%S")
    day = opens.astimezone(zone).strftime("%Y-%m-%d")
    assert f"window {day} {window.replace('-', '–')} {ZONE}, placed {clock}" in shown, shown
    assert "Window" in shown and "least-loaded second" in shown
    job = client.get_job("win-1", upcoming=2)
    assert job.upcoming_fires[0].placed_ms == at["win-1"] and "placed" in job.upcoming_fires[0].window_note
    assert job.spec.window.start == window[:5]

    async def async_placed() -> int:
        async with AsyncClient(c.cluster_arg, security=c.security()) as ac:
            got = await ac.get_job("win-2", upcoming=1)
            return int(got.upcoming_fires[0].placed_ms)

    assert asyncio.run(async_placed()) == at["win-2"]
    assert placed("win-0") == at["win-0"]                       # a placement never moves
    assert datetime.now(UTC) < opens, f"the previews outlasted the lead of {LEAD_S} s: raise LEAD_S"

    refuses_bad_input(context)                                  # meanwhile, as the window is awaited

    # each run starts at its placed second, and is in the ledger with its placement
    def ran(name: str):
        ex = client.get_execution(execution_id(name, t_ms))
        return ex if ex.state == "SUCCEEDED" else None

    for name in names:
        ex = wait_until(lambda: ran(name), timeout=240, interval=1.0, what=f"{name} to run")
        started = int(ex.attempts[-1].output_tail.strip())
        assert at[name] - 500 <= started < at[name] + 5_000, (name, started, at[name])
        assert any(e.kind == "placed" and "least-loaded" in e.message for e in ex.events), ex.events
    since = (opens - timedelta(minutes=1)).isoformat()
    until = (closes + timedelta(minutes=1)).isoformat()
    rows = json.loads(schedctl(context, "run", "list", "win-0", "--all-instants", "--since", since,
                               "--until", until, "-o", "json").stdout)
    assert [r["disposition"] for r in rows if int(r["instant_ms"]) == t_ms] == ["ran"], rows
    explained = run_cli(context, "run", "explain", execution_id("win-0", t_ms)).stdout
    assert "placed" in explained and "window" in explained, explained

    # the window's end is the deadline: a run still going then misses its SLA
    def missed():
        out = schedctl(context, "run", "list", "win-late").stdout
        return out if "! missed" in out else None

    wait_until(missed, timeout=180, interval=1.0, what="win-late's SLA miss at the window's end")
    late = client.get_execution(execution_id("win-late", t_ms))
    assert any(e.kind == "sla_missed" and "window's end" in e.message for e in late.events), late.events
