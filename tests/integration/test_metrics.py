"""The per-job and per-worker series, as Prometheus scrapes them from a real cluster with a
worker: runs by outcome, last success, durations and queue wait per job, bounded by
[metrics] job_series_limit (past it only the opted-in team's jobs are labelled, the others count
as job_name="_other"), a deleted job's series gone; workers, slots, handler kinds, pools without
workers; leader changes, apply lag, audit records pruned; no `_created` series; and every metric
the alert rules and the dashboard in deploy/ name is one a node exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import RunState, job_spec

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def scrape(c, node: str) -> str:
    return c.http_get(node, "/metrics")


def samples(text: str, name: str) -> dict[str, float]:
    """labels text -> value of every sample of `name`."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"{name}(\{{[^}}]*\}})? (\S+)$", line)
        if m:
            out[m[1] or ""] = float(m[2])
    return out


def finished(client, name):
    runs = list(client.list_executions(name, limit=5))
    return [r for r in runs if RunState(r.state).finished]


def test_job_and_worker_series(cluster_factory):
    c = cluster_factory(size=3, metrics={"job_series_limit": 3, "job_series_teams": ["vip"]})
    c.start()
    leader = c.wait_leader(timeout=60)
    c.start_worker("w1", slots=3)
    client = c.client(timeout=30)
    wait_until(lambda: client.list_workers().workers, timeout=30, what="the worker to connect")

    jobs = [job_spec("ok", command="sleep 0.2", team="data", schedule="@every 1h"),
            job_spec("bad", command="exit 3", team="data"),
            job_spec("third", command="true", team="data"),
            job_spec("fourth", command="true", team="data"),          # past the limit: _other
            job_spec("vip-job", command="true", team="vip"),           # past it, but its team opted in
            job_spec("stranded", command="true", team="data", pool="nowhere", schedule="@every 1h")]
    client.put_jobs(jobs)
    for wave in (jobs[:3], jobs[3:5]):           # jobs get their labels in the order a scrape sees them
        for spec in wave:
            client.trigger_job(spec.name)
        for spec in wave:
            wait_until(lambda: finished(client, spec.name), timeout=60, what=f"{spec.name} to finish")
        text = scrape(c, leader)
    runs = samples(text, "schedd_job_runs_total")
    assert runs['{job_name="ok",outcome="SUCCEEDED",team="data"}'] == 1
    assert runs['{job_name="bad",outcome="FAILED",team="data"}'] == 1
    assert runs['{job_name="_other",outcome="SUCCEEDED",team="data"}'] == 1      # "fourth"
    assert runs['{job_name="vip-job",outcome="SUCCEEDED",team="vip"}'] == 1
    assert not any("fourth" in k for k in runs)
    assert samples(text, "schedd_job_series_labelled")[""] == 4
    success = samples(text, "schedd_job_last_success_timestamp_seconds")['{job_name="ok",team="data"}']
    assert success > 1.7e9
    durations = samples(text, "schedd_job_run_duration_seconds_count")
    assert durations['{job_name="ok",team="data"}'] == 1
    ok_sum = samples(text, "schedd_job_run_duration_seconds_sum")['{job_name="ok",team="data"}']
    assert 0.15 < ok_sum < 30
    assert samples(text, "schedd_job_queue_wait_seconds_count")['{job_name="ok",team="data"}'] == 1
    assert samples(text, "schedd_job_period_seconds")['{job_name="ok",team="data"}'] == 3600
    # every node applies the same results: a follower has the same counts
    follower = next(n for n in c.nodes if n != leader)
    wait_until(lambda: samples(scrape(c, follower), "schedd_job_runs_total") == runs, timeout=30,
               what="a follower's per-job counts to equal the leader's")

    # workers and pools (the leader's)
    assert samples(text, "schedd_workers_connected")[""] == 1
    slots = samples(text, "schedd_worker_slots")
    assert slots['{pool="",state="busy",worker="w1"}'] + slots['{pool="",state="free",worker="w1"}'] == 3
    assert samples(text, "schedd_worker_handler_kind")['{kind="shell",worker="w1"}'] == 1
    assert samples(text, "schedd_pool_jobs")['{pool="nowhere"}'] == 1
    assert samples(text, "schedd_pool_workers")['{pool="nowhere"}'] == 0
    assert samples(text, "schedd_pool_workers")['{pool="(any)"}'] == 1

    # cluster-wide series
    assert samples(text, "schedd_leader_changes_total")[""] == 1                 # this node became leader once
    assert "schedd_raft_apply_lag_entries " in text and "schedd_audit_records_pruned_total " in text
    assert "_created" not in text

    # a deleted job's series go, and its place under the limit is free again
    client.delete_job("bad")
    text = scrape(c, leader)
    assert not any("bad" in k for k in samples(text, "schedd_job_runs_total"))
    assert samples(text, "schedd_job_series_labelled")[""] == 3

    # what the alert rules and the dashboard name, a node exports
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("schedd_")}
    exported |= {re.sub(r"_(bucket|sum|count)$", "", n) for n in exported}
    named = set(re.findall(r"\bschedd_[a-z_]+\b", (DEPLOY / "prometheus" / "schedd-alerts.yml").read_text()))
    dash = json.loads((DEPLOY / "grafana" / "schedd-dashboard.json").read_text())
    named |= {n for p in dash["panels"] for t in p["targets"] for n in re.findall(r"\bschedd_[a-z_]+\b", t["expr"])}
    missing = {n for n in named if n not in exported and n not in ("schedd_sla_missed_total",)}
    assert not missing, missing
    client.close()
