"""Jobs kept in files, as a user does it against a real cluster: `job get -o yaml` applies back
as is and changes nothing, `job apply -f` leaves unchanged jobs at their version and says so,
`job diff -f` / `job apply --dry-run` show each field that would change (secrets as their masks,
never their values), a file larger than one call goes in batches with progress on stderr, and
`job delete -f FILE` / `-l team=x` ask first. A DAG with a sensor round-trips through `dag get`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-value-never-shown"


def versions(c) -> dict[str, int]:
    return {j["spec"]["name"]: j["version"] for j in json.loads(schedctl(c, "job", "list", "-o", "json").stdout)}


def schedctl_process(c, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """schedctl as its own process, for what reads the terminal (the confirmation)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    env["SCHEDD_CONTEXT"] = str(c.write_context())
    return subprocess.run([sys.executable, "-m", "schedd_client.schedctl", *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=120)


def test_job_files_round_trip_diff_and_batches(cluster_factory, tmp_path):
    c = cluster_factory(size=3, limits={"max_jobs_per_call": 400})
    c.start()
    c.wait_leader(timeout=60)
    docs = [
        {"name": "nightly", "team": "data", "schedule": "0 2 * * *", "timezone": "Europe/Berlin",
         "command": "backup.sh", "labels": {"tier": "gold"}, "retry": {"max_attempts": 3, "initial_backoff": "10s"},
         "env_secret": {"DB_PASSWORD": SECRET}, "limits": {"open_files": 64}, "worker_labels": {"zone": "eu"},
         "sla": {"within": "2h"}},
        {"name": "hourly", "team": "data", "schedule": "@hourly", "http": {"url": "https://example.com/hook"}},
        {"name": "adhoc", "team": "ops", "argv": ["echo", "hi"]},
    ]
    f = tmp_path / "jobs.yaml"
    f.write_text(yaml.safe_dump_all(docs))

    out = schedctl(c, "job", "apply", "-f", str(f)).stdout
    assert out.splitlines()[-1] == "applied 3 jobs: 3 created, 0 updated, 0 unchanged"
    before = versions(c)

    # the same file again: nothing written, each job says unchanged (its secret sent again as plaintext too)
    out = schedctl(c, "job", "apply", "-f", str(f)).stdout
    assert "job nightly unchanged" in out and out.splitlines()[-1].endswith("0 created, 0 updated, 3 unchanged")
    assert versions(c) == before

    # what a read prints applies back as is, YAML and JSON, and changes nothing
    for fmt in ("yaml", "json"):
        shown = schedctl(c, "job", "get", "nightly", "-o", fmt).stdout
        assert SECRET not in shown and "***(v1)" in shown
        back = tmp_path / f"nightly.{fmt}"
        back.write_text(shown)
        out = schedctl(c, "job", "apply", "-f", str(back)).stdout
        assert out == "job nightly unchanged\napplied 1 job: 0 created, 0 updated, 1 unchanged\n"
    assert versions(c) == before
    summary = tmp_path / "list.yaml"
    summary.write_text(schedctl(c, "job", "list", "-o", "yaml").stdout)
    refused = schedctl(c, "job", "apply", "-f", str(summary), check=False)
    assert refused.returncode == 1 and "summary" in refused.stderr

    # a change: diff and dry run show it field by field, commit nothing; apply writes only that job
    docs[0]["schedule"] = "0 3 * * *"
    docs[0]["env_secret"] = {"DB_PASSWORD": SECRET + "-rotated"}
    docs[1]["retry"] = {"max_attempts": 2}
    f.write_text(yaml.safe_dump_all(docs))
    diff = schedctl(c, "job", "diff", "-f", str(f)).stdout
    assert f'~ job nightly (version {before["nightly"]})' in diff
    assert '    schedule: "0 2 * * *" -> "0 3 * * *"' in diff
    assert '    env_secret.DB_PASSWORD: "***(v1)" -> "***(v2)"' in diff
    assert "    retry.max_attempts: 2" in diff and "= job adhoc" in diff
    assert SECRET not in diff
    assert schedctl(c, "job", "diff", "-f", str(f), "--exit-code", check=False).returncode == 3
    dry = schedctl(c, "job", "apply", "-f", str(f), "--dry-run", "-o", "json").stdout
    assert json.loads(dry)["updated"] == 2 and SECRET not in dry
    assert versions(c) == before
    out = schedctl(c, "job", "apply", "-f", str(f)).stdout
    assert out.splitlines()[-1] == "applied 3 jobs: 0 created, 2 updated, 1 unchanged"
    after = versions(c)
    assert after["adhoc"] == before["adhoc"] and after["nightly"] == before["nightly"] + 1
    assert schedctl(c, "job", "diff", "-f", str(f), "--exit-code").returncode == 0

    # a file larger than one call: batches (halved to the node's max_jobs_per_call of 400), progress
    many = tmp_path / "many.yaml"
    many.write_text(yaml.safe_dump([{"name": f"bulk-{i:04d}", "team": "bulk", "command": "true",
                                     "labels": {"wave": str(i % 2)}} for i in range(1200)]))
    p = schedctl(c, "job", "apply", "-f", str(many), "--batch-size", "500")
    assert p.stdout == "applied 1200 jobs: 1200 created, 0 updated, 0 unchanged\n"
    assert "checked 1200/1200 jobs" in p.stderr and "wrote 1200/1200 jobs" in p.stderr
    p = schedctl(c, "job", "apply", "-f", str(many), "--batch-size", "500")
    assert p.stdout == "applied 1200 jobs: 0 created, 0 updated, 1200 unchanged\n" and "wrote" not in p.stderr

    # deletes of many ask first; "n" (or no answer) deletes nothing, --yes does not ask
    p = schedctl_process(c, "job", "delete", "-l", "team=bulk,wave=1", stdin="n\n")
    assert p.returncode == 1 and "delete 600 jobs" in p.stderr and "nothing was deleted" in p.stderr
    p = schedctl_process(c, "job", "delete", "-l", "team=bulk,wave=1", stdin="y\n")
    assert p.returncode == 0 and p.stdout.strip() == "deleted 600 jobs", p.stderr
    p = schedctl(c, "job", "delete", "-f", str(many), "--yes")
    assert p.stdout.strip().startswith("deleted 600 jobs, 600 not found")
    p = schedctl(c, "job", "delete", "-f", str(f), "--yes", "-o", "json")
    assert sorted(json.loads(p.stdout)["deleted"]) == ["adhoc", "hourly", "nightly"]
    assert versions(c) == {}
    usage = schedctl(c, "job", "delete", "-l", "nonsense", check=False)
    assert usage.returncode == 2 and "key=value" in usage.stderr


def test_dag_with_a_sensor_applies_back_from_dag_get(cluster_factory, tmp_path):
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    doc = {"name": "etl", "schedule": "0 2 * * *", "tasks": [
        {"name": "wait", "sensor": {"file": "/data/ready", "poll_interval": "30s", "timeout": "2h"}},
        {"name": "load", "upstream": ["wait"], "command": "load.sh", "retry": {"max_attempts": 2}},
    ]}
    f = tmp_path / "etl.yaml"
    f.write_text(yaml.safe_dump(doc))
    schedctl(c, "dag", "apply", "-f", str(f))
    shown = schedctl(c, "dag", "get", "etl", "-o", "yaml").stdout
    assert yaml.safe_load(shown)["tasks"][0]["sensor"] == {"file": "/data/ready", "poll_interval": "30s",
                                                            "timeout": "2h"}
    back = tmp_path / "back.yaml"
    back.write_text(shown)
    schedctl(c, "dag", "apply", "-f", str(back))
    assert schedctl(c, "dag", "get", "etl", "-o", "yaml").stdout == shown
