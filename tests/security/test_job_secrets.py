"""Job secrets (`env_secret`) at the API edge: sealed before anything is proposed, so no entry
holds a value in plaintext; every read shows "***(vN)"; a write that sends the mask back keeps
the value, an unchanged value keeps its version, a new one takes the next; and the ciphertext
opens only under this cluster's key, for this job and this variable. The real SchedulerService
over the in-memory node (tests/security/_api_harness.py), through the SDK."""

from __future__ import annotations


import asyncio

import pytest

from schedd.core.model import ValidationError, validate_spec
from schedd.core.specs import JobSpec
from schedd.security.secrets import EnvSealer, SecretError, open_secrets
from schedd_client import Client, job_spec
from schedd.leader.assigner import Assigner
from schedd.leader.workers import WorkerHub
from schedd_client.errors import ValidationError as InvalidArgument
from tests.security._cli import run_in_process
from tests.support.leader import add_worker, clock_of, node_over, step
from tests.support.state import T0, Harness

SECRET = "kq2LlX0n9yC7vB3mT5wZpR8sD1fH4jG6aE0uI2oY7tQ"
VALUE = "hunter2-but-longer-and-unique-7f3a"


def spec_of(server, name: str) -> JobSpec:
    return server.node.state.jobs[name].spec


def opened(server, name: str) -> dict[str, str]:
    """The job's secret env as the leader opens it for an assignment."""
    return open_secrets(spec_of(server, name).env_secret, EnvSealer(SECRET), name)


def test_sealed_before_proposing_and_masked_on_every_read(api):
    server = api(secret=SECRET)
    client = Client(server.address, timeout=10)
    client.put_job(job_spec("pay", command="env", env_secret={"DB_PASSWORD": VALUE}))
    assert all(VALUE not in e for e in server.node.entries)       # the log never sees it
    stored = spec_of(server, "pay").env_secret["DB_PASSWORD"]
    assert stored.version == 1 and stored.ciphertext.startswith("a1:")
    assert opened(server, "pay") == {"DB_PASSWORD": VALUE}
    job = client.get_job("pay")
    assert dict(job.spec.env_secret) == {"DB_PASSWORD": "***(v1)"}
    assert VALUE not in str(job) and VALUE not in str(list(client.list_jobs(full=True)))
    client.put_jobs([job_spec("batch", command="env", env_secret={"TOKEN": VALUE})])
    assert all(VALUE not in e for e in server.node.entries)        # the batch path too
    assert dict(client.get_job("batch").spec.env_secret) == {"TOKEN": "***(v1)"}


def test_versions_mask_round_trip_and_refusals(api):
    server = api(secret=SECRET)
    client = Client(server.address, timeout=10)
    client.put_job(job_spec("pay", command="env", env_secret={"A": VALUE, "B": "b1"}))
    text = server.node.state.jobs["pay"].spec_text
    client.put_job(job_spec("pay", command="env", env_secret={"A": VALUE, "B": "b1"}))
    assert server.node.state.jobs["pay"].spec_text == text             # the same values: the same spec
    assert dict(client.get_job("pay").spec.env_secret) == {"A": "***(v1)", "B": "***(v1)"}
    read = client.get_job("pay").spec
    read.description = "changed"
    client.put_job(read)                                          # the masks go back: kept
    job = client.get_job("pay")
    assert job.spec.description == "changed" and dict(job.spec.env_secret) == {
        "A": "***(v1)", "B": "***(v1)"}
    assert opened(server, "pay") == {"A": VALUE, "B": "b1"}
    client.put_job(job_spec("pay", command="env", env_secret={"A": "***(v1)", "B": "b2"}))
    assert dict(client.get_job("pay").spec.env_secret) == {"A": "***(v1)", "B": "***(v2)"}
    assert opened(server, "pay")["B"] == "b2"
    n = len(server.node.entries)
    for spec, why in (
            (job_spec("pay", command="env", env_secret={"C": "***(v1)"}), "has none under that name"),
            (job_spec("web", http_url="https://example.com/", env_secret={"A": "x"}), "shell"),
            (job_spec("pay", command="env", env={"A": "x"}, env_secret={"A": "y"}), "both env and"),
            (job_spec("pay", command="env", env_secret={"SCHEDD_X": "y"}), "SCHEDD_"),
            (job_spec("pay", command="env", env_secret={"1A": "y"}), "bad env_secret name")):
        with pytest.raises(InvalidArgument, match=why):
            client.put_job(spec)
    assert len(server.node.entries) == n                          # nothing was committed


def test_a_node_without_a_cluster_secret_refuses_env_secret(api):
    client = Client(api().address, timeout=10)
    with pytest.raises(InvalidArgument, match="needs a cluster secret"):
        client.put_job(job_spec("pay", command="env", env_secret={"A": "x"}))
    client.put_job(job_spec("pay", command="env"))                # the rest works as before


def test_ciphertext_opens_only_for_its_job_variable_and_key():
    s = EnvSealer(SECRET)
    ct = s.seal("pay", "A", VALUE)
    assert s.open("pay", "A", ct) == VALUE
    for job, name, sealer in (("other", "A", s), ("pay", "B", s), ("pay", "A", EnvSealer(SECRET[::-1]))):
        with pytest.raises(SecretError):
            sealer.open(job, name, ct)
    with pytest.raises(SecretError):
        s.open("pay", "A", ct[:-4] + "AAAA")
    with pytest.raises(SecretError, match="cluster secret"):
        EnvSealer("")


def test_core_accepts_only_sealed_values():
    """Apply's validation never accepts a plaintext value (a proposer that skipped the edge)."""
    base = {"name": "j", "handler": {"shell": {"command": "env"}}}
    with pytest.raises(ValidationError, match="not sealed"):
        validate_spec({**base, "env_secret": {"A": "plain"}})
    ok = validate_spec({**base, "env_secret": {"A": {"v": 1, "ct": "a1:xx"}},
                        "limits": {"memory_mb": "512", "open_files": 64}})
    assert ok.to_dict()["env_secret"] == {"A": {"v": 1, "ct": "a1:xx"}}
    assert ok.to_dict()["limits"] == {"memory_mb": 512, "open_files": 64}
    for limits, why in (({"open_files": 3}, "between"), ({"nice": 1}, "unknown limits"),
                        ({"memory_mb": "lots"}, "number"), ({"processes": 1.5}, "whole")):
        with pytest.raises(ValidationError, match=why):
            validate_spec({**base, "limits": limits})


def test_schedctl_secret_env_limits_and_job_files(api, capsys, monkeypatch, tmp_path):
    server = api(secret=SECRET)
    monkeypatch.setenv("FROM_ENV", VALUE + "-env")
    code, out, err = run_in_process(capsys, server.address, "job", "create", "pay", "--schedule", "", "--command", "env",
                                    "--secret-env", f"A={VALUE}", "--secret-env", "FROM_ENV",
                                    "--limit", "open_files=64", "--limit", "cpu_seconds=1.5")
    assert code == 0, err
    assert VALUE not in out + err
    code, out, err = run_in_process(capsys, server.address, "job", "get", "pay", "-o", "yaml")
    assert code == 0 and VALUE not in out
    assert "A: '***(v1)'" in out and "FROM_ENV: '***(v1)'" in out, out
    assert "open_files: 64" in out and "cpu_seconds: 1.5" in out
    assert opened(server, "pay") == {
        "A": VALUE, "FROM_ENV": VALUE + "-env"}
    code, out, err = run_in_process(capsys, server.address, "job", "get", "pay")
    assert code == 0 and "***(v1)" in out and VALUE not in out
    code, _, err = run_in_process(capsys, server.address, "job", "update", "pay", "--secret-env", "NOPE_X")
    assert code != 0 and "no variable NOPE_X" in err
    code, _, err = run_in_process(capsys, server.address, "job", "update", "pay", "--limit", "open_files=x")
    assert code != 0 and "not a number" in err
    f = tmp_path / "jobs.yaml"
    f.write_text(f"name: filed\ncommand: env\nenv_secret: {{TOKEN: {VALUE}}}\n"
                 "limits: {memory_mb: 256, processes: 8}\n")
    code, _, err = run_in_process(capsys, server.address, "job", "apply", "-f", str(f))
    assert code == 0, err
    job = Client(server.address, timeout=10).get_job("filed")
    assert dict(job.spec.env_secret) == {"TOKEN": "***(v1)"}
    assert (job.spec.limits.memory_mb, job.spec.limits.processes) == (256, 8)
    assert all(VALUE not in e for e in server.node.entries)


async def test_the_assignment_carries_the_opened_secrets_team_and_limits_only_to_its_worker():
    """The leader opens env_secret into the Assignment of the worker the claim names; a secret
    that does not open (another cluster's key) fails the attempt instead of running it without."""
    h = Harness()
    node = node_over(h, secret=SECRET)
    hub = WorkerHub(node, clock_of(h), lease_ms=10_000)
    tasks: list = []
    assigner = Assigner(node, clock_of(h), hub, 1_500, lambda c: tasks.append(asyncio.ensure_future(c)))
    mine = {"v": 1, "ct": EnvSealer(SECRET).seal("pay", "TOKEN", VALUE)}
    theirs = {"v": 1, "ct": EnvSealer(SECRET[::-1]).seal("other", "TOKEN", VALUE)}
    h.put(name="pay", team="payments", schedule="@every 60s", env_secret={"TOKEN": mine},
          limits={"open_files": 64})
    h.put(name="other", schedule="@every 60s", env_secret={"TOKEN": theirs})
    h.plan_and_fire()
    w1, w2 = add_worker(hub, h, "w1", slots=1), add_worker(hub, h, "w2", slots=1)
    await step(assigner, tasks, T0)
    await step(assigner, tasks, T0)
    sent = {w.name: [m.assignment for m in list(w.out._queue) if m.WhichOneof("kind") == "assignment"]
            for w in (w1, w2)}
    pay = [a for msgs in sent.values() for a in msgs if a.job == "pay"]
    assert len(pay) == 1 and dict(pay[0].secret_env) == {"TOKEN": VALUE}
    assert pay[0].team == "payments" and pay[0].limits.open_files == 64
    assert not [a for msgs in sent.values() for a in msgs if a.job == "other"]     # never sent
    ex = h.state.execs[("other", T0)]
    assert ex.attempts[0].state == "FAILED" and "does not open" in ex.attempts[0].error
