"""schedctl through main([...]) against the fake cluster of test_sdk.py."""

from __future__ import annotations

import io
import json
import sys

import grpc
import pytest
import yaml

from schedd_proto import scheduler_pb2 as pb
from schedd_client.schedctl import main
from tests.support.fake_api import MINUTE_MS, NOW_MS, FakeCluster, add_execution, dead_address
from tests.support.schedctl import Run, fake, run, spec  # noqa: F401 - fixtures

NOW_S = NOW_MS / 1000


# ---------------------------------------------------------------- job create / apply / update


def test_job_create_from_flags(run: Run, fake: FakeCluster) -> None:
    code, out, err = run(
        "job", "create", "backup", "--schedule", "0 2 * * *", "--tz", "Europe/Paris",
        "--command", "backup.sh", "--team", "ops", "--description", "nightly", "--label", "tier=gold",
        "--label", "env=prod", "--paused", "--priority", "3", "--pool", "db", "--timeout", "5m",
        "--max-attempts", "4", "--history-limit", "20", "--overlap", "skip", "--env", "A=1",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert out == "created job backup (version 1)\n"
    assert spec(fake, "backup") == pb.JobSpec(
        name="backup", schedule="0 2 * * *", timezone="Europe/Paris", team="ops", description="nightly",
        labels={"tier": "gold", "env": "prod"}, paused=True, priority=3, pool="db", timeout_seconds=300,
        history_limit=20, overlap="skip", retry=pb.RetryPolicy(max_attempts=4),
        handler=pb.Handler(shell=pb.ShellHandler(command="backup.sh", env={"A": "1"})),
    )  # fmt: skip
    assert fake.state.requests_of("PutJob")[0].create_only


def test_job_create_argv_and_http_and_global_options_after_the_command(run: Run, fake: FakeCluster) -> None:
    code, out, _ = run("job", "create", "hook", "-o", "json", "--schedule", "@every 30s",
                       "--http-url", "https://ci/hook", "--http-method", "PUT")  # fmt: skip
    assert code == 0
    assert json.loads(out)["spec"]["handler"] == {
        "http": {"method": "PUT", "url": "https://ci/hook", "headers": {}, "body": "", "insecure_skip_verify": False}
    }
    assert run("job", "create", "ls", "--schedule", "", "--argv", "ls", "-l", "--team", "x")[0] == 0
    assert list(spec(fake, "ls").handler.shell.argv) == ["ls", "-l", "--team", "x"]
    assert spec(fake, "ls").schedule == ""


def test_job_create_existing_job_points_to_apply_and_update(run: Run, fake: FakeCluster) -> None:
    fake.add_job("a")
    code, out, err = run("job", "create", "a", "--schedule", "@daily", "--command", "x")
    assert code == 1 and out == ""
    assert err.startswith("schedctl: error: job 'a' already exists")
    assert "job update a" in err and "job apply -f" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["job", "create", "a"], "needs a handler"),            # no --schedule is fine: on demand
        (["job", "create", "a", "--schedule", "@daily"], "needs a handler"),
        (["job", "create", "--schedule", "@daily", "--command", "x"], "needs NAME"),
        (["job", "create", "a", "-f", "jobs.yaml"], "takes no NAME"),
        (["job", "create", "a", "--schedule", "@daily", "--command", "x", "--label", "oops"], "KEY=VALUE"),
        (["job", "create", "a", "--schedule", "@daily", "--argv"], "--argv needs at least one"),
        (["job", "create", "a", "--schedule", "@daily", "--command", "x", "--http-url", "u"], "not allowed with"),
        (["job", "create", "a", "--schedule", "@daily", "--command", "x", "--timeout", "5x"], "invalid duration"),
        (["job", "update", "a"], "needs at least one field"),
        (["job", "list", "--state", "sleeping"], "invalid choice"),
        (["job"], "required"),
        (["nonsense"], "invalid choice"),
        (["--cluster", " , ", "job", "list"], "no cluster addresses"),
        (["job", "list", "--timeout", "0"], "must be more than 0"),
        (["run", "list", "--limit", "-1"], "must be >= 0"),
        (["job", "get", "a", "--next", "101"], "must be from 1 to 100"),
        (["job", "update", "a", "--max-attempts", "many"], "not an integer"),
    ],
)
def test_usage_errors_exit_2(run: Run, fake: FakeCluster, argv, message) -> None:
    code, out, err = run(*argv)
    assert code == 2 and out == ""
    assert "error:" in err and message in err
    assert fake.state.calls == []


def test_job_create_from_a_multi_document_yaml_file(run: Run, fake: FakeCluster, tmp_path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        """\
name: backup
schedule: "0 2 * * *"
timezone: Europe/Paris
command: backup.sh
retry: {max_attempts: 3, initial_backoff: 10s, max_backoff: 5m, multiplier: 2}
timeout: 30m
---
- name: hook
  http: {url: "https://ci/hook"}
- name: report
  python: {name: reports.weekly, args: {week: 3}}
---
{"name": "json-job", "argv": ["echo", "hi"], "labels": {"n": 1}}
---
"""
    )
    code, out, err = run("job", "create", "-f", str(path))
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"created job {n} (version 1)" for n in ("backup", "hook", "report", "json-job")]
    assert spec(fake, "backup").retry == pb.RetryPolicy(
        max_attempts=3, initial_backoff_seconds=10, max_backoff_seconds=300, multiplier=2
    )
    assert spec(fake, "backup").timeout_seconds == 1800
    assert spec(fake, "report").handler.python.args_json == '{"week": 3}'
    assert spec(fake, "json-job").labels == {"n": "1"}
    assert [r.create_only for r in fake.state.requests_of("PutJobs")] == [True]  # one batch

    code, out, err = run("job", "create", "-f", str(path), "-o", "json")
    assert code == 1 and out == ""
    assert err.count("already exists") == 1 and "backup" in err


def test_job_create_from_stdin_is_one_batch(run: Run, fake: FakeCluster, monkeypatch) -> None:
    fake.add_job("b")
    monkeypatch.setattr(sys, "stdin", io.StringIO("[{name: a, command: x}, {name: b, command: x}, {name: c, command: x}]"))
    code, out, err = run("job", "create", "-f", "-", "-o", "yaml")
    assert code == 1 and out == ""
    assert "job 'b' already exists" in err and sorted(fake.state.jobs) == ["b"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("[{name: a, command: x}, {name: c, command: x}]"))
    code, out, err = run("job", "create", "-f", "-", "-o", "yaml")
    assert (code, yaml.safe_load(out)) == (0, {"created": 2, "updated": 0})


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: a\ncommand: x\nscheduel: '@daily'\n", "jobs.yaml: job 'a': unknown key 'scheduel' (did you mean 'schedule'?)"),
        ("name: a\ncommand: x\n---\nname: b\n", "jobs.yaml: document 2: job 'b': no handler"),
        ("- {name: a, command: x}\n- {name: a, command: y}\n", "jobs.yaml, item 2: job 'a' appears more than once"),
        ("name: [unclosed\n", "jobs.yaml: not valid YAML or JSON"),
        ("---\n", "jobs.yaml: no job documents"),
        ("just text\n", "job document must be a mapping, got text"),
    ],
)
def test_job_files_are_checked_before_anything_is_sent(run: Run, fake: FakeCluster, tmp_path, text, message) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    code, out, err = run("job", "create", "-f", str(path))
    assert code == 1 and out == ""
    assert message in err.replace(str(tmp_path) + "/", "")
    assert fake.state.calls == []


def test_missing_file(run: Run) -> None:
    code, _, err = run("job", "apply", "-f", "/nonexistent/jobs.yaml")
    assert code == 1 and "cannot read /nonexistent/jobs.yaml: No such file or directory" in err


def test_job_apply_creates_then_updates(run: Run, fake: FakeCluster, tmp_path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([{"name": "a", "command": "x"}, {"name": "b", "command": "y"}]))
    assert run("job", "apply", "-f", str(path)) == (
        0, "job a created\njob b created\napplied 2 jobs: 2 created, 0 updated, 0 unchanged\n", "")
    path.write_text(json.dumps([{"name": "a", "command": "x"}, {"name": "b", "command": "z"}]))
    code, out, _ = run("job", "apply", "-f", str(path), "-o", "json")
    report = json.loads(out)
    assert code == 0 and (report["created"], report["updated"], report["unchanged"]) == (0, 1, 1)
    assert report["jobs"][0] == {"name": "b", "action": "update", "version": 1, "changes": [
        {"field": "command", "before": "y", "after": "z"}]}
    assert len(fake.state.requests_of("PutJobs")) == 2      # one per apply
    assert [s.name for s in fake.state.requests_of("PutJobs")[-1].jobs] == ["b"]   # a is left as it is
    assert spec(fake, "a") is not None and fake.state.jobs["a"].version == 1


def test_job_update_merges_the_given_fields(run: Run, fake: FakeCluster) -> None:
    fake.add_job("a", schedule="@daily", command="x", labels={"keep": "1"}, team="ops", workdir="/srv")
    code, out, err = run("job", "update", "a", "--schedule", "@hourly", "--label", "new=2", "--timeout", "90s")
    assert (code, out, err) == (0, "updated job a (version 2)\n", "")
    updated = spec(fake, "a")
    assert updated.schedule == "@hourly" and updated.team == "ops" and updated.timeout_seconds == 90
    assert dict(updated.labels) == {"keep": "1", "new": "2"}
    assert updated.handler.shell.command == "x" and updated.handler.shell.workdir == "/srv"
    assert fake.state.requests_of("PutJob")[-1].expected_version == 1

    assert run("job", "update", "a", "--http-url", "https://x", "--max-attempts", "2")[0] == 0
    assert spec(fake, "a").handler == pb.Handler(http=pb.HttpHandler(url="https://x"))
    assert spec(fake, "a").retry.max_attempts == 2
    assert run("job", "update", "a", "--http-method", "GET")[0] == 0
    assert spec(fake, "a").handler.http == pb.HttpHandler(url="https://x", method="GET")


def test_job_update_conflict_and_missing_job(run: Run, fake: FakeCluster) -> None:
    fake.add_job("a")
    fake.nodes[0].fail("PutJob", grpc.StatusCode.FAILED_PRECONDITION, "version conflict")
    code, _, err = run("job", "update", "a", "--team", "t")
    assert code == 1 and "changed while being updated" in err
    code, _, err = run("job", "update", "nope", "--team", "t")
    assert code == 1 and err == "schedctl: error: job 'nope' not found\n"


def test_server_validation_error_exits_1(run: Run) -> None:
    code, out, err = run("job", "create", "a", "--schedule", "bad", "--command", "x")
    assert (code, out) == (1, "")
    assert err == "schedctl: error: schedule 'bad': not a cron expression\n"


# ---------------------------------------------------------------- job get / list / pause / resume / trigger / delete


def test_job_get_table(run: Run, fake: FakeCluster) -> None:
    fake.add_job("backup", schedule="0 3 * * *", tz="Europe/Paris", labels={"tier": "gold"},
                 retry=pb.RetryPolicy(max_attempts=3, initial_backoff_seconds=10, max_backoff_seconds=300))  # fmt: skip
    add_execution(fake.state, "backup", NOW_MS - 3_000, "SUCCEEDED")
    fake.state.jobs["backup"].last_execution_id = "backup@2026-11-29T01:59:57Z"
    fake.state.jobs["backup"].last_scheduled_ms = NOW_MS - 3_000
    fake.state.jobs["backup"].last_state = "SUCCEEDED"
    code, out, _ = run("job", "get", "backup", "--next", "2")
    assert code == 0
    lines = out.splitlines()
    assert "Name:          backup" in lines
    assert "State:         active" in lines and "Version:       1" in lines
    assert "Schedule:      0 3 * * *" in lines and "Time zone:     Europe/Paris" in lines
    assert "Handler:       sh -c \"echo backup\"" in lines
    assert "Labels:        tier=gold" in lines
    assert "Retry:         3 attempts, backoff 10s to 5m" in lines
    assert "Last run:      backup@2026-11-29T01:59:57Z  SUCCEEDED  scheduled 2026-11-29T01:59:57Z (3s ago)" in lines
    assert "Next run:      2026-11-29T02:01:00Z (in 1m)" in lines
    assert "Next runs:     2026-11-29T03:01:00+01:00 CET  2026-11-29T02:01:00Z  in 1m" in lines
    assert lines[-1] == "               2026-11-29T03:02:00+01:00 CET  2026-11-29T02:02:00Z  in 2m"


def test_job_get_json_and_yaml(run: Run, fake: FakeCluster) -> None:
    fake.add_job("a")
    code, out, _ = run("-o", "json", "job", "get", "a", "--next", "3")
    data = json.loads(out)
    assert code == 0 and data["spec"]["name"] == "a" and data["version"] == 1
    assert data["next_fire"] == "2026-11-29T02:01:00Z" and len(data["upcoming"]) == 3
    code, out, _ = run("job", "get", "a", "-o", "yaml", "--next", "3")
    assert code == 0 and yaml.safe_load(out) == data
    assert run("job", "get", "nope") == (1, "", "schedctl: error: job 'nope' not found\n")


def test_job_list(run: Run, fake: FakeCluster) -> None:
    assert run("job", "list") == (0, "No jobs found.\n", "")
    fake.add_job("a", schedule="@hourly", team="ops")
    fake.add_job("b", paused=True)
    fake.state.jobs["a"].last_scheduled_ms = NOW_MS - 5 * MINUTE_MS
    fake.state.jobs["a"].last_state = "FAILED"
    code, out, _ = run("job", "list")
    header, first, second = out.splitlines()
    assert header.split() == ["NAME", "TEAM", "SCHEDULE", "TZ", "STATE", "NEXT", "RUN", "LAST", "RUN", "LAST", "STATE"]
    assert first.split() == ["a", "ops", "@hourly", "UTC", "active", "2026-11-29T02:01:00Z", "(in", "1m)",
                             "2026-11-29T01:55:00Z", "(5m", "ago)", "FAILED"]  # fmt: skip
    assert second.split()[:5] == ["b", "(on", "demand)", "UTC", "paused"]

    code, out, _ = run("job", "list", "--state", "paused", "-o", "json")
    assert [job["spec"]["name"] for job in json.loads(out)] == ["b"]
    fake.state.jobs["a"].last_run_ms = NOW_MS - 1 * MINUTE_MS     # a manual run after the last firing
    assert "2026-11-29T01:59:00Z (1m ago)" in run("job", "list")[1]
    code, out, _ = run("job", "list", "--team", "ops", "-o", "yaml")
    assert [job["spec"]["name"] for job in yaml.safe_load(out)] == ["a"]


def test_job_list_hides_the_rows_dags_own_unless_all(run: Run, fake: FakeCluster) -> None:
    for name in ("a", "etl:", "etl:load"):
        fake.add_job(name)
    code, out, _ = run("job", "list")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["a"]
    assert [j["spec"]["name"] for j in json.loads(run("job", "list", "-o", "json")[1])] == ["a"]
    code, out, _ = run("job", "list", "--all")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["a", "etl:", "etl:load"]


def test_job_pause_resume_trigger_delete(run: Run, fake: FakeCluster) -> None:
    fake.add_job("a")
    assert run("job", "pause", "a") == (0, "paused job a (version 2)\n", "")
    assert fake.state.jobs["a"].paused
    assert run("job", "resume", "a") == (0, "resumed job a (version 3, next run 2026-11-29T02:01:00Z (in 1m))\n", "")
    code, out, _ = run("job", "trigger", "a")
    assert (code, out) == (0, "triggered job a: execution a@2026-11-29T02:00:00Z (SCHEDULED)\n")
    code, out, _ = run("job", "trigger", "a", "-o", "json")
    assert json.loads(out)["trigger"] == "manual"
    assert run("job", "delete", "a") == (0, "deleted job a\n", "")
    assert "a" not in fake.state.jobs
    assert run("job", "delete", "a") == (1, "", "schedctl: error: job 'a' not found\n")
    fake.add_job("b")
    assert json.loads(run("job", "delete", "b", "-o", "json")[1]) == {"name": "b", "deleted": True}


# ---------------------------------------------------------------- runs


def _seed_runs(fake: FakeCluster) -> None:
    for i in range(4):
        add_execution(fake.state, "etl", NOW_MS - i * MINUTE_MS, "SUCCEEDED" if i else "RUNNING")
    add_execution(fake.state, "other", NOW_MS - 10 * MINUTE_MS, "FAILED")


def test_run_list(run: Run, fake: FakeCluster) -> None:
    assert run("run", "list") == (0, "No executions found.\n", "")
    _seed_runs(fake)
    code, out, _ = run("run", "list", "etl", "--limit", "2")
    header, *rows = out.splitlines()
    assert header.split() == ["ID", "JOB", "SCHEDULED", "STATE", "TRIGGER", "DURATION", "WORKER", "EXIT"]
    assert [row.split()[0] for row in rows] == ["etl@2026-11-29T02:00:00Z", "etl@2026-11-29T01:59:00Z"]
    assert rows[0].split()[1:] == ["etl", "2026-11-29T02:00:00Z", "(now)", "RUNNING", "schedule",
                                   "-", "-", "-"]  # fmt: skip
    assert fake.state.requests_of("ListExecutions")[-1].page_size == 2
    code, out, _ = run("run", "list", "etl", "--limit", "1", "-o", "wide")
    header, row = out.splitlines()
    assert header.split() == ["ID", "JOB", "SCHEDULED", "STATE", "TRIGGER", "DURATION", "WORKER", "EXIT",
                              "RECORDED", "TERM"]
    assert row.split()[-4:] == ["2026-11-29T01:59:58.500Z", "(1s", "ago)", "3"]

    code, out, _ = run("run", "list", "--oldest-first", "-o", "json")
    assert [r["job"] for r in json.loads(out)] == ["other", "etl", "etl", "etl", "etl"]
    code, out, _ = run("run", "list", "--state", "FAILED", "-o", "yaml")
    assert [r["id"] for r in yaml.safe_load(out)] == ["other@2026-11-29T01:50:00Z"]
    assert len(json.loads(run("run", "list", "--limit", "0", "-o", "json")[1])) == 5


def test_run_get(run: Run, fake: FakeCluster) -> None:
    attempts = [
        pb.Attempt(number=1, worker="w1", fencing_token=41, started_ms=NOW_MS, ended_ms=NOW_MS + 2000,
                   exit_code=3, error="exit status 3", output_tail="line 1\nline 2\n", state="FAILED"),
        pb.Attempt(number=2, worker="w2", fencing_token=57, started_ms=NOW_MS + 60_000, state="RUNNING"),
    ]  # fmt: skip
    add_execution(fake.state, "etl", NOW_MS, "RUNNING", attempts=attempts)
    code, out, _ = run("run", "get", "etl@2026-11-29T02:00:00Z")
    assert code == 0
    lines = out.splitlines()
    assert "ID:        etl@2026-11-29T02:00:00Z" in lines and "State:     RUNNING" in lines
    assert "Recorded:  2026-11-29T01:59:58.500Z (1s ago), term 3, log index 101" in lines
    table = lines[lines.index("Attempts:") + 1 :]
    assert table[0].split() == ["#", "STATE", "WORKER", "TOKEN", "STARTED", "ENDED", "EXIT/HTTP", "ERROR"]
    assert table[1].split() == ["1", "FAILED", "w1", "41", "2026-11-29T02:00:00Z", "2026-11-29T02:00:02Z",
                                "3", "exit", "status", "3"]  # fmt: skip
    assert table[2].split() == ["2", "RUNNING", "w2", "57", "2026-11-29T02:01:00Z", "-", "-", "-"]
    assert out.endswith("Output of attempt 1 (tail):\n  line 1\n  line 2\n")

    data = json.loads(run("run", "get", "etl@2026-11-29T02:00:00Z", "-o", "json")[1])
    assert data["attempts"][0]["fencing_token"] == 41 and data["attempts"][1]["ended"] is None
    assert run("run", "get", "nope")[0] == 1


def test_run_get_http_attempt(run: Run, fake: FakeCluster) -> None:
    add_execution(fake.state, "hook", NOW_MS, "SUCCEEDED",
                  attempts=[pb.Attempt(number=1, http_status=204, ended_ms=NOW_MS, state="SUCCEEDED")])  # fmt: skip
    code, out, _ = run("run", "get", "hook@2026-11-29T02:00:00Z")
    assert code == 0 and "HTTP 204" in out


# ---------------------------------------------------------------- cluster, connection, globals


def test_cluster_status(monkeypatch, capsys) -> None:
    monkeypatch.delenv("SCHEDD_CLUSTER", raising=False)
    fake = FakeCluster(3)
    try:
        assert main(["--cluster", fake.cluster, "cluster", "status"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == (
            f"Leader: n1 ({fake.addresses[0]})   term 3   commit 100   jobs 0   executions 0   (answered by n1)"
        )
        assert lines[1].split() == ["ID", "ROLE", "VERSION", "LEVEL", "TERM", "COMMIT", "APPLIED", "LAG", "GRPC",
                                    "RAFT"]
        assert lines[3].split()[:2] + lines[3].split()[4:8] == ["n2", "follower", "3", "100", "98", "2"]
        assert main(["cluster", "status", "-o", "yaml", "--cluster", fake.cluster]) == 0
        data = yaml.safe_load(capsys.readouterr().out)
        assert [node["id"] for node in data["nodes"]] == ["n1", "n2", "n3"] and data["term"] == 3
        assert data["nodes"][0]["state_digest"] == ""          # only when asked: it costs O(state)
    finally:
        fake.stop()


def test_cluster_status_digest(monkeypatch, capsys) -> None:
    """--digest: each node's state digest at the index it was taken, short in the table, whole in
    JSON (the fake's digest is its log index in hex)."""
    monkeypatch.delenv("SCHEDD_CLUSTER", raising=False)
    fake = FakeCluster(2)
    try:
        assert main(["--cluster", fake.cluster, "cluster", "status", "--digest"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[1].split()[-2:] == ["DIGEST", "HISTORY"]
        index = fake.state.log_index
        assert lines[2].split()[-2:] == [f"{index:064x}"[:12] + f"@{index}", "-"]    # the fake keeps no history
        assert main(["--cluster", fake.cluster, "-o", "json", "cluster", "status", "--digest"]) == 0
        nodes = json.loads(capsys.readouterr().out)["nodes"]
        assert [(n["state_digest"], n["digest_index"]) for n in nodes] == [(f"{index:064x}", index)] * 2
    finally:
        fake.stop()


def test_cluster_leaders(monkeypatch, capsys) -> None:
    """Every node's record of the terms it led, newest first: the cluster's leader changes."""
    monkeypatch.delenv("SCHEDD_CLUSTER", raising=False)
    fake = FakeCluster(3)
    try:
        assert main(["--cluster", fake.cluster, "cluster", "leaders"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == ["TERM", "LEADER", "SINCE", "UNTIL"]
        assert lines[1].split()[:2] == ["3", "n1"] and lines[1].endswith("(leads)")
        assert lines[2].split()[:2] == ["2", "n2"] and len(lines) == 3
        assert main(["--cluster", fake.cluster, "-o", "json", "cluster", "leaders"]) == 0
        assert json.loads(capsys.readouterr().out) == [
            {"node": "n1", "term": 3, "since_ms": 1_000_000, "until_ms": 0},
            {"node": "n2", "term": 2, "since_ms": 500_000, "until_ms": 999_000}]
    finally:
        fake.stop()


def test_connection_failure_names_the_addresses(capsys, monkeypatch) -> None:
    monkeypatch.delenv("SCHEDD_CLUSTER", raising=False)
    address = dead_address()
    assert main(["--cluster", address, "--timeout", "0.3", "job", "list"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"schedctl: error: no schedd node answered within 0.3s (tried node {address} "
                          "is unreachable (UNAVAILABLE")
    assert "SCHEDD_CLUSTER" in err and "TLS" not in err


def test_cluster_from_environment_and_stale_reads(fake: FakeCluster, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SCHEDD_CLUSTER", fake.cluster)
    fake.add_job("a")
    assert main(["job", "get", "a", "--stale", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["spec"]["name"] == "a"
    assert fake.nodes[0].metadata["GetJob"]["x-schedd-stale-ok"] == "1"
    assert main(["--stale", "job", "list"]) == 0
    assert fake.nodes[0].metadata["ListJobs"]["x-schedd-stale-ok"] == "1"
    assert main(["job", "get", "a"]) == 0
    assert "x-schedd-stale-ok" not in fake.nodes[0].metadata["GetJob"]


def test_help_exits_0(capsys) -> None:
    assert main(["--help"]) == 0
    assert "usage: schedctl" in capsys.readouterr().out
    assert main(["job", "create", "--help"]) == 0
    assert "--schedule S" in capsys.readouterr().out


# ---------------------------------------------------------------- what a newcomer tripped on


def test_job_create_without_a_schedule_is_on_demand(run: Run, fake: FakeCluster) -> None:
    code, out, err = run("job", "create", "adhoc", "--command", "make report")
    assert (code, err) == (0, "")
    assert out == "created job adhoc (version 1, on demand: run it with `schedctl job trigger adhoc`)\n"
    assert spec(fake, "adhoc").schedule == ""


def test_job_get_shows_worker_labels_delivery_and_limits(run: Run, fake: FakeCluster) -> None:
    fake.add_job("a", worker_labels={"zone": "eu-1", "gpu": "yes"},
                 limits={"memory_mb": 512, "cpu_seconds": 90, "open_files": 256})
    code, out, _ = run("job", "get", "a")
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line and not line.startswith(" "))
    assert code == 0
    assert fields["Worker labels"].strip() == "gpu=yes, zone=eu-1"
    assert fields["Delivery"].strip() == "at_least_once"
    assert fields["Limits"].strip() == "memory 512 MiB, cpu 1m30s, open files 256"
    code, out, _ = run("job", "get", "a", "-o", "yaml")
    assert yaml.safe_load(out)["spec"]["delivery"] == "at_least_once"       # never empty


def test_state_filters_take_any_case_and_bad_ones_are_usage_errors(run: Run, fake: FakeCluster) -> None:
    fake.add_job("a")
    add_execution(fake.state, "a", NOW_MS - MINUTE_MS, "FAILED")
    add_execution(fake.state, "a", NOW_MS - 2 * MINUTE_MS, "SUCCEEDED")
    code, out, _ = run("run", "list", "a", "--state", "failed", "-o", "json")
    assert code == 0 and [r["state"] for r in json.loads(out)] == ["FAILED"]
    assert fake.state.requests_of("ListExecutions")[-1].state == "FAILED"
    code, _, err = run("run", "list", "--state", "broken")
    assert code == 2 and "unknown run state 'broken'" in err and "failed" in err
    assert run("job", "list", "--state", "Paused")[0] == 0
    assert fake.state.requests_of("ListJobs")[-1].state == "paused"
    assert run("job", "list", "--state", "sleeping")[0] == 2


def test_job_apply_against_a_cluster_without_diffs_writes_everything(run: Run, fake: FakeCluster, tmp_path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all([{"name": "a", "command": "x"}, {"name": "b", "command": "y"}]))
    fake.add_job("a", command="x")
    fake.nodes[0].fail("DiffJobs", grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    code, out, err = run("job", "apply", "-f", str(path))
    assert (code, err) == (0, "")
    assert out == "applied 2 jobs: 1 created, 1 updated (this cluster cannot tell unchanged jobs apart: upgrade it)\n"
    fake.nodes[0].fail("DiffJobs", grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    code, _, err = run("job", "diff", "-f", str(path))                  # a diff it cannot make: said so
    assert code == 1 and "cannot show what would change" in err and "upgrade" in err


def test_a_killed_attempt_says_its_signal_in_run_get_and_run_list(run: Run, fake: FakeCluster) -> None:
    killed = pb.Attempt(number=1, worker="w1", fencing_token=7, started_ms=NOW_MS - 4000, ended_ms=NOW_MS,
                        exit_code=-15, state="CANCELLED", error="cancelled")
    add_execution(fake.state, "etl", NOW_MS - 5000, "CANCELLED", attempts=[killed])
    code, out, _ = run("run", "get", "etl@2026-11-29T01:59:55Z")
    assert code == 0 and "killed by SIGTERM" in out and "-15" not in out
    code, out, _ = run("run", "list", "etl")
    assert out.splitlines()[1].split()[-6:] == ["CANCELLED", "schedule", "4s", "w1", "killed", "by", "SIGTERM"][-6:]
