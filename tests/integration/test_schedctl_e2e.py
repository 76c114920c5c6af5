"""schedctl, as a user runs it, against a real 3-node cluster (talking to a follower only)."""

from __future__ import annotations

import json

import pytest
import yaml

from schedd.ports.fakes import wait_until
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration


def test_schedctl_tour(cluster_factory, tmp_path):
    c = cluster_factory(size=3)
    c.start()
    leader = c.wait_leader(timeout=60)
    follower = next(n.grpc for n in c.nodes.values() if n.id != leader)

    # the first example of the README and of docs/tour.md
    schedctl(c, "job", "create", "nightly", "--schedule", "0 2 * * *", "--tz", "Europe/Berlin",
             "--command", "backup.sh", at=follower)
    job = json.loads(schedctl(c, "job", "get", "nightly", "--next", "3", "-o", "json", at=follower).stdout)
    assert job["spec"]["timezone"] == "Europe/Berlin" and len(job["upcoming_ms"]) == 3
    assert all(t.endswith(("T01:00:00Z", "T00:00:00Z")) for t in job["upcoming"])  # 02:00 CET/CEST

    # from a YAML file, an every-second job
    f = tmp_path / "jobs.yaml"
    f.write_text(yaml.safe_dump_all([
        {"name": "tick", "schedule": "*/1 * * * * *", "command": "true", "team": "ops"},
        {"name": "on-demand", "command": "echo hi", "team": "ops"},
    ]))
    schedctl(c, "job", "create", "-f", str(f), at=follower)
    table = schedctl(c, "job", "list", at=follower).stdout
    for header in ("NAME", "NEXT RUN", "LAST RUN", "LAST STATE"):
        assert header in table
    assert "tick" in table and "nightly" in table

    runs = wait_until(lambda: (r := json.loads(schedctl(c, "run", "list", "tick", "-o", "json", at=follower).stdout))
                      and len(r) >= 3 and r, timeout=30, what="tick to fire")
    assert all(r["state"] == "SCHEDULED" and r["job"] == "tick" for r in runs)
    got = yaml.safe_load(schedctl(c, "run", "get", runs[0]["id"], "-o", "yaml", at=follower).stdout)
    assert got["id"] == runs[0]["id"]

    # pause / resume / trigger / delete
    assert json.loads(schedctl(c, "job", "pause", "tick", "-o", "json", at=follower).stdout)["paused"] is True
    assert json.loads(schedctl(c, "job", "resume", "tick", "-o", "json", at=follower).stdout)["paused"] is False
    ex = json.loads(schedctl(c, "job", "trigger", "on-demand", "-o", "json", at=follower).stdout)
    assert ex["trigger"] == "manual" and ex["id"].startswith("on-demand@")
    schedctl(c, "job", "delete", "on-demand", at=follower)
    gone = schedctl(c, "job", "get", "on-demand", check=False, at=follower)
    assert gone.returncode == 1 and "not found" in gone.stderr

    # bad input: a clear error, exit 1, nothing created
    bad = schedctl(c, "job", "create", "bad", "--schedule", "* * *", "--command", "x", check=False, at=follower)
    assert bad.returncode == 1 and "error" in bad.stderr
    assert schedctl(c, "job", "get", "bad", check=False, at=follower).returncode == 1

    status = json.loads(schedctl(c, "cluster", "status", "-o", "json", at=follower).stdout)
    assert status["leader_id"] == leader and len(status["nodes"]) == 3
    assert {n["role"] for n in status["nodes"]} == {"leader", "follower"}
    assert "n1" in schedctl(c, "cluster", "status", at=follower).stdout

    # --digest: each node's state digest, equal on every replica once they sit at one index
    schedctl(c, "job", "pause", "tick", at=follower)

    def same_state():
        nodes = json.loads(schedctl(c, "cluster", "status", "--digest", "-o", "json", at=follower).stdout)["nodes"]
        views = {(n["digest_index"], n["state_digest"]) for n in nodes}
        return len(views) == 1 and len(next(iter(views))[1]) == 64 and views
    wait_until(same_state, timeout=30, what="equal state digests on the three nodes")
    table = schedctl(c, "cluster", "status", "--digest", at=follower).stdout
    assert "DIGEST" in table.splitlines()[1]


def test_a_run_whose_pool_no_worker_serves_says_so(cluster_factory):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w-cpu", slots=2, pool="cpu")
    schedctl(c, "job", "create", "trains", "--schedule", "@every 1s", "--pool", "gpu", "--command", "true")

    def waiting():
        runs = json.loads(schedctl(c, "run", "list", "trains", "-o", "json").stdout)
        got = [yaml.safe_load(schedctl(c, "run", "get", r["id"], "-o", "yaml").stdout) for r in runs[:1]]
        return got and "no connected worker serves pool 'gpu'" in (got[0].get("reason") or "") and got
    wait_until(waiting, timeout=30, what="the run's reason to name the unserved pool")

    def warned():
        status = json.loads(schedctl(c, "cluster", "status", "-o", "json").stdout)
        warnings = status.get("warnings", [])
        lines = [w for w in warnings if "wait for pool 'gpu', which no connected worker serves" in w]
        return lines and status["nodes"][0].get("dispatch_lag_ms", "0") in (0, "0") and warnings
    warnings = wait_until(warned, timeout=30, what="the unserved pool warning")
    assert not any("dispatch is behind" in w for w in warnings)
    assert "no connected worker serves" in schedctl(c, "cluster", "status").stdout


def test_all_instants_names_the_window_it_used(cluster_factory):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    schedctl(c, "job", "create", "ticks", "--schedule", "@every 1s", "--command", "true")
    out = schedctl(c, "run", "list", "ticks", "--all-instants")
    notes = [line for line in out.stderr.splitlines() if "instants from" in line]
    assert len(notes) == 1 and "default --since: 24h before the end, --until: now" in notes[0]
    given = schedctl(c, "run", "list", "ticks", "--all-instants", "--since", "1h", "--until", "now")
    assert "instants from" not in given.stderr


def test_job_list_shows_manual_runs_and_hides_dag_rows(cluster_factory, tmp_path):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    schedctl(c, "job", "create", "daily", "--schedule", "0 3 * * *", "--command", "true")
    f = tmp_path / "etl.yaml"
    f.write_text(yaml.safe_dump({"name": "etl", "tasks": [{"name": "load", "command": "true"}]}))
    schedctl(c, "dag", "apply", "-f", str(f))
    ran = json.loads(schedctl(c, "job", "trigger", "daily", "-o", "json").stdout)
    rows = json.loads(schedctl(c, "job", "list", "-o", "json").stdout)
    assert [r["spec"]["name"] for r in rows] == ["daily"]
    assert rows[0]["last_execution_id"] == ran["id"] and rows[0]["last_run_ms"] == ran["scheduled_ms"]
    table = schedctl(c, "job", "list").stdout                   # a manual run is the LAST RUN
    assert "etl:" not in table and ran["scheduled"] in table.splitlines()[1]
    assert "etl:load" in schedctl(c, "job", "list", "--all").stdout


def test_run_get_shows_the_fencing_token_as_the_readme_says(cluster_factory):
    """README: the TOKEN column of `run get` is the token the handler sees, a retry gets a new,
    larger one, and the `log index` of the Recorded line is the run's own, not a token."""
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=1)
    schedctl(c, "job", "create", "tok", "--command", 'echo "token=$SCHEDD_FENCING_TOKEN"')
    ran = json.loads(schedctl(c, "job", "trigger", "tok", "--wait", "-o", "json", check=False).stdout)
    first = json.loads(schedctl(c, "run", "get", ran["id"], "-o", "json").stdout)
    token = int(first["attempts"][0]["fencing_token"])
    assert f"token={token}" in first["attempts"][0]["output_tail"]
    table = schedctl(c, "run", "get", ran["id"]).stdout
    header = next(line for line in table.splitlines() if line.split()[:2] == ["#", "STATE"])
    row = table.splitlines()[table.splitlines().index(header) + 1].split()
    assert row[header.split().index("TOKEN")] == str(token)
    assert int(first["log_index"]) < token                  # Recorded's log index: the run's, before its claim
    schedctl(c, "run", "retry", ran["id"], "--wait", check=False)
    again = json.loads(schedctl(c, "run", "get", ran["id"], "-o", "json").stdout)
    assert int(again["attempts"][-1]["fencing_token"]) > token and again["id"] == ran["id"]


def test_a_cancelled_run_says_killed_by_sigterm(cluster_factory):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=1)
    schedctl(c, "job", "create", "nap", "--command", "sleep 60")
    ran = json.loads(schedctl(c, "job", "trigger", "nap", "-o", "json").stdout)
    wait_until(lambda: json.loads(schedctl(c, "run", "get", ran["id"], "-o", "json").stdout)["state"] == "RUNNING",
               timeout=30, what="the run to start")
    schedctl(c, "run", "cancel", ran["id"])
    wait_until(lambda: json.loads(schedctl(c, "run", "get", ran["id"], "-o", "json").stdout)["state"] == "CANCELLED",
               timeout=30, what="the run to be cancelled")
    row = schedctl(c, "run", "list", "nap").stdout.splitlines()[1]
    assert "CANCELLED" in row and " w1 " in row and row.rstrip().endswith("killed by SIGTERM"), row
    assert "killed by SIGTERM" in schedctl(c, "run", "get", ran["id"]).stdout
