"""Scheduling policies on a real 3-node cluster with a worker: every overlap policy, catch-up
after the whole cluster was stopped, and a backfill beside a running schedule under a quota.
Driven through schedctl (as a user would) and the SDK."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from schedd.core.schedule import format_ms
from schedd_client import job_spec
from schedd.ports.fakes import wait_until
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration


def start(cluster_factory, *, slots=8, worker=True):
    c = cluster_factory(size=3, scheduler={"lease_ms": 3000})
    c.start()
    c.wait_leader(timeout=60)
    if worker:
        c.start_worker("w1", slots=slots, drain_grace_s=5)
    client = c.client(timeout=30)
    if worker:
        wait_until(lambda: len(client.list_workers().workers) == 1, timeout=30, what="the worker")
    return c, client


def runs(client, job):
    return list(client.list_executions(job, oldest_first=True))


def max_concurrent(executions) -> int:
    """The most attempts of these executions running at the same moment (worker clock)."""
    edges = []
    for ex in executions:
        for a in ex.attempts:
            if a.ended_ms:
                edges += [(a.started_ms, 1), (a.ended_ms, -1)]
    level = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        level += step
        peak = max(peak, level)
    return peak


def test_overlap_skip_queue_and_allow_with_max_active(cluster_factory):
    c, client = start(cluster_factory)
    # every second, each run takes longer than the period
    schedctl(c, "job", "create", "skipper", "--schedule", "@every 1s", "--command", "sleep 2.5",
             "--overlap", "skip")
    schedctl(c, "job", "create", "queuer", "--schedule", "@every 1s", "--command", "sleep 1.5",
             "--overlap", "queue", "--queue-limit", "2")
    schedctl(c, "job", "create", "allower", "--schedule", "@every 1s", "--command", "sleep 2.5",
             "--max-active", "2")
    wait_until(lambda: sum(e.state == "SUCCEEDED" for e in runs(client, "queuer")) >= 4, timeout=60,
               what="queued runs to finish")
    forced = json.loads(schedctl(c, "job", "trigger", "skipper", "--force", "-o", "json").stdout)
    for name in ("skipper", "queuer", "allower"):
        client.pause_job(name)
    wait_until(lambda: not any(e.state in ("RUNNING", "SCHEDULED", "RETRY_WAIT")
                               for n in ("skipper", "queuer", "allower") for e in runs(client, n)),
               timeout=60, what="the runs to settle")

    skipper = runs(client, "skipper")
    skipped = [e for e in skipper if e.state == "SKIPPED" and e.reason.startswith("overlap skip")]
    assert skipped and "still active" in skipped[0].reason
    scheduled = [e for e in skipper if e.trigger != "forced"]
    assert max_concurrent(scheduled) == 1
    assert client.get_execution(forced["id"]).state == "SUCCEEDED"         # --force ran beside one

    queuer = runs(client, "queuer")
    assert max_concurrent(queuer) == 1
    assert any(e.state == "SKIPPED" and "queue full" in e.reason for e in queuer)
    done = [e for e in queuer if e.state == "SUCCEEDED"]
    late = [e.attempts[-1].started_ms - e.scheduled_ms for e in done]
    assert max(late) > 1000, "queued runs start after the previous one ends, later than their instant"

    allower = runs(client, "allower")
    assert max_concurrent(allower) == 2
    assert not any(e.state == "SKIPPED" and not e.reason.startswith("paused") for e in allower)

    table = schedctl(c, "run", "list", "skipper", "--all-instants").stdout
    assert "skipped-overlap" in table and "missing" not in table


def test_catch_up_after_the_whole_cluster_was_stopped(cluster_factory):
    c, client = start(cluster_factory, worker=False)
    client.put_job(job_spec("latest", schedule="@every 1s", command="true", catchup="latest"))
    client.put_job(job_spec("none", schedule="@every 1s", command="true", catchup="none"))
    client.put_job(job_spec("capped", schedule="@every 1s", command="true", catchup_max=3))
    client.put_job(job_spec("deadline", schedule="@every 1s", command="true", starting_deadline=12,
                            catchup="all"))
    wait_until(lambda: all(client.get_job(n).executions_total >= 2 for n in ("latest", "none")), timeout=30,
               what="the jobs to fire")
    for nid in list(c.nodes):
        c.stop_node(nid)
    stopped = time.time()
    wait_until(lambda: time.time() - stopped > 20, timeout=30, interval=0.5, what="20 s of downtime")
    for nid in list(c.nodes):
        c.start_node(nid)
    c.wait_leader(timeout=60)
    up = time.time()
    wait_until(lambda: client.get_job("none").last_scheduled_ms / 1000 > up, timeout=60, what="firing again")

    def ledger(name):
        out = json.loads(schedctl(c, "run", "list", name, "--all-instants", "--since", "2m",
                                  "-o", "json").stdout)
        return Counter(r["disposition"] for r in out)

    latest, none, capped, deadline = (ledger(n) for n in ("latest", "none", "capped", "deadline"))
    for d in (latest, none, capped, deadline):
        assert "missing" not in d, d
    assert latest["coalesced"] >= 5, latest              # the ~10 s of downtime older than the grace
    assert none["skipped-catchup"] >= 5, none
    assert capped["skipped-cap"] >= 3, capped
    assert deadline["skipped-deadline"] >= 3, deadline
    runs_latest = [e for e in runs(client, "latest") if e.trigger == "catchup"]
    assert len([e for e in runs_latest if e.scheduled_ms / 1000 < stopped + 8]) <= 1   # one coalesced run


def test_backfill_beside_a_running_schedule_under_its_lane_quota(cluster_factory):
    """A backfill of a window that starts 30 s before the job existed: every instant of the
    window ends up with exactly one execution (the schedule's or the backfill's), the backfill
    runs under its lane quota, and today's runs keep their timing.

    The window is given in absolute times from the job's creation, not "60s ago": on a loaded
    machine the setup can take longer than the window, and then how many instants the schedule
    had already fired (and how many were left to backfill) depended on timing."""
    period_ms = 2000
    c, client = start(cluster_factory, slots=6)
    created_ms = int(time.time() * 1000)      # before the put: no schedule instant is earlier
    client.put_job(job_spec("hourly-report", schedule="@every 2s", command="sleep 0.3"))
    # three runs that ended: their instants are past (a fire can precede its instant by the lookahead)
    wait_until(lambda: sum(e.state == "SUCCEEDED" for e in runs(client, "hourly-report")) >= 3, timeout=60,
               what="the schedule")
    schedctl(c, "quota", "set", "lane:backfill", "1")
    assert "lane:backfill" in schedctl(c, "quota", "list").stdout
    # 30 s before the job existed: 15 backfilled instants, run one at a time under the lane quota
    # (the property is the same for any count; 30 instants took ~8 s more)
    window = ("--from", format_ms(created_ms - 30_000), "--to", "now")
    r = json.loads(schedctl(c, "job", "backfill", "hourly-report", *window, "-o", "json").stdout)
    instants = list(range(r["first_ms"], r["last_ms"] + 1, period_ms))
    before = [t for t in instants if t < created_ms]         # the 30 s before the job existed
    assert r["instants"] == len(instants) and len(before) == 15, r
    assert r["created"] + r["duplicates"] == r["instants"], r
    assert r["created"] >= len(before) and r["duplicates"] >= 3, r    # the 3 that ran are in it
    backfill_ids = {e.id for e in runs(client, "hourly-report") if e.trigger == "backfill"}
    assert len(backfill_ids) == r["created"]

    def settled():
        ex = [e for e in runs(client, "hourly-report") if e.id in backfill_ids]
        return len(ex) == len(backfill_ids) and all(e.state == "SUCCEEDED" for e in ex) and ex
    done = wait_until(settled, timeout=180, what="the backfill to finish")
    assert max_concurrent(done) == 1                      # the lane quota
    assert all(e.lane == "backfill" for e in done)
    assert {e.scheduled_ms for e in done} >= set(before)  # every instant before the job: backfilled
    in_window = Counter(e.scheduled_ms for e in runs(client, "hourly-report")
                        if e.trigger in ("schedule", "catchup", "backfill") and e.scheduled_ms <= r["last_ms"])
    assert set(in_window) == set(instants) and set(in_window.values()) == {1}, in_window  # each once
    # today's runs kept their timing while the backfill ran
    during = [e for e in runs(client, "hourly-report")
              if e.trigger == "schedule" and e.state == "SUCCEEDED" and e.scheduled_ms > created_ms + 6000]
    assert during
    lateness = sorted(e.attempts[-1].started_ms - e.scheduled_ms for e in during)
    assert lateness[len(lateness) // 2] < 1000, lateness
    again = json.loads(schedctl(c, "job", "backfill", "hourly-report", "--from", window[1], "--to",
                                format_ms(r["last_ms"]), "-o", "json").stdout)
    assert again["instants"] == again["duplicates"] == r["instants"] and again["created"] == 0, again  # dedup
