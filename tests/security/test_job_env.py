"""A job does not see the worker's environment (a worker's secrets stayed
readable by every job), only PATH, HOME, LANG, the SCHEDD_* contract and its own env, plus the
worker variables it names in ``inherit_env``. One real node and one real `schedd worker`
started with secrets in its environment; the jobs print their environment with /usr/bin/env."""

from __future__ import annotations

import pytest

from schedd.core.model import ValidationError, validate_spec
from schedd.runtime.cluster import LocalCluster
from schedd_client import Client, job_spec
from schedd_client.schedctl import main as schedctl
from schedd.ports.fakes import wait_until

pytestmark = pytest.mark.integration

WORKER_ENV = {"WORKER_DB_PASSWORD": "s3cret-of-the-worker", "SHARED_REGION": "eu-west-1",
              "LANG": "C.UTF-8", "HOME": "/var/lib/schedd-worker-test"}
ALLOWED = {"PATH", "HOME", "LANG"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("jobenv"), size=1)
    try:
        c.start()
        c.wait_leader(timeout=60)
        c.start_worker("w1", slots=2, drain_grace_s=2, extra_env=WORKER_ENV)
        client = c.client(timeout=30)
        wait_until(lambda: client.list_workers().workers, timeout=60, what="the worker to connect")
        yield c, client
    finally:
        c.stop(timeout=10)


def env_of_run(client: Client, name: str) -> dict[str, str]:
    eid = client.trigger_job(name).id
    ex = wait_until(lambda: (e := client.get_execution(eid)).state in ("SUCCEEDED", "FAILED") and e,
                    timeout=60, what=f"{name} to finish")
    assert ex.state == "SUCCEEDED", ex
    return dict(line.split("=", 1) for line in ex.attempts[-1].output_tail.splitlines() if "=" in line)


def test_job_does_not_inherit_worker_environment(cluster):
    c, client = cluster
    client.put_job(job_spec("plain", argv=["/usr/bin/env"], env={"MINE": "1"}))
    env = env_of_run(client, "plain")
    assert "WORKER_DB_PASSWORD" not in env and "SHARED_REGION" not in env, env
    extra = set(env) - ALLOWED - {"MINE"} - {k for k in env if k.startswith("SCHEDD_")}
    assert not extra, f"inherited from the worker: {sorted(extra)}"
    assert env["MINE"] == "1" and env["SCHEDD_JOB_NAME"] == "plain" and env["PATH"]
    assert env["HOME"] == WORKER_ENV["HOME"] and env["LANG"] == "C.UTF-8"


def test_job_opts_in_to_named_worker_variables(cluster, tmp_path, capsys):
    c, client = cluster
    f = tmp_path / "job.yaml"
    f.write_text("name: opted\nargv: [/usr/bin/env]\ninherit_env: [SHARED_REGION, NOT_SET_ON_WORKER]\n")
    assert schedctl(["--context", str(c.write_context()), "job", "create", "-f", str(f)]) == 0
    env = env_of_run(client, "opted")
    assert env["SHARED_REGION"] == "eu-west-1" and "WORKER_DB_PASSWORD" not in env
    assert "NOT_SET_ON_WORKER" not in env                    # named but absent: simply not set
    # from flags and the SDK too; shown by job get
    assert schedctl(["--context", str(c.write_context()), "job", "create", "flagged", "--schedule", "", "--inherit-env", "SHARED_REGION",
                     "--inherit-env", "LC_ALL", "--argv", "/usr/bin/env"]) == 0
    assert list(client.get_job("flagged").spec.handler.shell.inherit_env) == ["LC_ALL", "SHARED_REGION"]
    client.put_job(job_spec("sdk", command="env", inherit_env=["SHARED_REGION"]))
    assert list(client.get_job("sdk").spec.handler.shell.inherit_env) == ["SHARED_REGION"]
    capsys.readouterr()
    assert schedctl(["--context", str(c.write_context()), "job", "get", "flagged"]) == 0
    assert "inherits LC_ALL, SHARED_REGION" in capsys.readouterr().out
    # validated: names only, no duplicates of the contract, a bounded list
    for bad, why in ((["A=B"], "bad inherit_env name"), (["SCHEDD_JOB_ID"], "SCHEDD_"),
                     ([f"V{i}" for i in range(65)], "at most 64")):
        with pytest.raises(ValidationError, match=why):
            validate_spec({"name": "x", "schedule": "", "handler": {"shell": {"command": "env",
                                                                               "inherit_env": bad}}})
    assert schedctl(["--context", str(c.write_context()), "job", "create", "bad", "--schedule", "", "--inherit-env", "A=B",
                     "--argv", "/usr/bin/env"]) == 1
