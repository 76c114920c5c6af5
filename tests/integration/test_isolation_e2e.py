"""Isolation and job secrets end to end, on a real 3-node cluster and a worker started with a
config that maps team "payments" to a throw-away Unix user (created with useradd, deleted after,
also on failure):

- the root worker keeps only CAP_SETUID, CAP_SETGID and CAP_KILL, in all of its threads;
- the shell handler runs as the mapped user (`id -u` from inside the job), with the job's rlimits
  (`ulimit -n`), and a job of an unmapped team is refused with a clear result error;
- a secret env value reaches the handler, but never appears in `job get`, a full `job list`,
  `run get` (executions), schedctl's output, the node or worker logs, or anything under the
  data dirs (journals, snapshots): only ciphertext is stored. Reads show "***(v1)"; an update
  that sends the mask back keeps the value, a new value becomes v2.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil

import pytest

from schedd_client import job_spec
from schedd.ports.fakes import wait_until
from tests.support.users import system_user
from tests.support.cluster import finished, schedctl, workers_of

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                 reason="needs root and useradd")]


@pytest.fixture
def job_user():
    with system_user("sde") as user:
        yield user


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


HASH_IT = 'printf %s "$DB_PASSWORD" | sha256sum | cut -c1-64'


def test_mapped_user_rlimits_refusal_and_secret_env_never_read_back(cluster_factory, tmp_path,
                                                                    job_user, monkeypatch):
    c = cluster_factory(size=3, scheduler={"lease_ms": 3000})
    c.start()
    c.wait_leader(timeout=60)
    config = tmp_path / "worker.toml"
    config.write_text(f'[isolation]\n[isolation.teams.payments]\nuser = "{job_user.pw_name}"\n')
    c.start_worker("w1", slots=2, extra_args=("--config", str(config)))
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to connect")

    # the root worker kept only CAP_SETUID, CAP_SETGID and CAP_KILL, in every one of its threads
    pid = c.workers["w1"].proc.pid
    tasks = sorted(os.listdir(f"/proc/{pid}/task"))
    assert len(tasks) > 1
    for tid in tasks:
        status = open(f"/proc/{pid}/task/{tid}/status").read()
        assert "CapEff:\t00000000000000e0" in status and "CapBnd:\t00000000000000e0" in status, tid
        assert "NoNewPrivs:\t1" in status

    secret = f"pw-{secrets.token_hex(12)}"
    client.put_job(job_spec("pay", team="payments", env_secret={"DB_PASSWORD": secret},
                            limits={"open_files": 77},
                            command=f'echo "uid=$(id -u) nofile=$(ulimit -n)"; {HASH_IT}'))
    client.put_job(job_spec("ana", team="analytics", command="echo ran-unmapped"))

    eid = client.trigger_job("pay").id
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="pay to finish")
    assert ex.state == "SUCCEEDED", ex
    out = ex.attempts[-1].output_tail
    assert f"uid={job_user.pw_uid} nofile=77" in out and sha(secret) in out

    refused = client.trigger_job("ana").id
    ex = wait_until(lambda: finished(client, refused), timeout=60, what="ana to finish")
    assert ex.state == "FAILED" and "team 'analytics' has no user mapping" in ex.attempts[0].error
    assert "ran-unmapped" not in ex.attempts[0].output_tail

    # reads show the mask, never the value
    job = client.get_job("pay")
    assert dict(job.spec.env_secret) == {"DB_PASSWORD": "***(v1)"}
    assert job.spec.limits.open_files == 77
    full = [j for j in client.list_jobs(full=True) if j.spec.name == "pay"]
    assert dict(full[0].spec.env_secret) == {"DB_PASSWORD": "***(v1)"}
    shown = schedctl(c, "job", "get", "pay", "-o", "yaml").stdout
    assert "***(v1)" in shown and secret not in shown
    shown = schedctl(c, "run", "get", eid, "-o", "json").stdout
    assert secret not in shown

    # an update that does not touch the secret keeps it (the mask goes back); a new value is v2
    schedctl(c, "job", "update", "pay", "--description", "nightly payments")
    job = client.get_job("pay")
    assert job.spec.description == "nightly payments"
    assert dict(job.spec.env_secret) == {"DB_PASSWORD": "***(v1)"}
    eid2 = client.trigger_job("pay").id
    ex = wait_until(lambda: finished(client, eid2), timeout=60, what="pay to run again")
    assert ex.state == "SUCCEEDED" and sha(secret) in ex.attempts[-1].output_tail, ex
    newer = f"pw-{secrets.token_hex(12)}"
    monkeypatch.setenv("DB_PASSWORD", newer)            # a bare name: off the command line
    schedctl(c, "job", "update", "pay", "--secret-env", "DB_PASSWORD")
    assert dict(client.get_job("pay").spec.env_secret) == {"DB_PASSWORD": "***(v2)"}
    eid3 = client.trigger_job("pay").id
    ex = wait_until(lambda: finished(client, eid3), timeout=60, what="pay with the new value")
    assert ex.state == "SUCCEEDED" and sha(newer) in ex.attempts[-1].output_tail, ex

    # nothing on disk holds a value in plaintext: journals, snapshots, node and worker logs
    scanned = 0
    for path in c.root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            scanned += 1
            assert secret.encode() not in data and newer.encode() not in data, path
    journals = b"".join(p.read_bytes() for p in c.root.rglob("*") if p.is_file()
                        and "logs" not in p.parts)
    assert b"pay" in journals and b"a1:" in journals     # the job and its ciphertext are there
    assert scanned > 5
