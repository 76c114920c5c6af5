"""The herd forecast and explain on a real 3-node cluster with a worker, driven as a user would:
schedctl in a subprocess (explain of an instant that ran and of one that did not, the forecast
with -o json, the crowding warning of `job create`) and the SDK."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from schedd.core.schedule import format_ms
from schedd.ports.fakes import wait_until
from schedd_client import Client, job_spec
from schedd_client.errors import ValidationError
from tests.support.cluster import schedctl as in_process

pytestmark = pytest.mark.integration

MIN = 60_000


def schedctl(context: str, *args: str) -> subprocess.CompletedProcess:
    """`schedctl` as a separate process, with only SCHEDD_CONTEXT set, as in a user's terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_") or k == "SCHEDD_TEST_MODE"}
    env["SCHEDD_CONTEXT"] = context
    return subprocess.run([sys.executable, "-m", "schedd_client.schedctl", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"{p.args} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p


def test_explain_and_forecast_through_schedctl_and_the_sdk(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2, pool="p")
    client = c.client(timeout=30)
    wait_until(lambda: len(client.list_workers().workers) == 1, timeout=30, what="the worker")
    context = str(c.write_context())

    # an instant that ran
    client.put_job(job_spec("tick", schedule="@every 2s", command="true", pool="p"))
    ran = wait_until(lambda: next((e for e in client.list_executions("tick") if e.state == "SUCCEEDED"), None),
                     timeout=30, what="a run of tick")
    out = json.loads(ok(schedctl(context, "run", "explain", ran.id, "-o", "json")).stdout)
    assert out["disposition"] == "ran" and out["id"] == ran.id
    kinds = [f["kind"] for f in out["findings"]]
    assert kinds[0] == "recorded" and "claimed" in kinds and "outcome" in kinds and "sla" in kinds
    claim = next(f for f in out["findings"] if f["kind"] == "claimed")
    assert claim["details"]["worker"] == "w1"
    assert claim["details"]["fencing_token"] == str(ran.attempts[0].fencing_token)

    # an instant that did not run: the job is paused before it
    paused = client.pause_job("tick")
    t = paused.next_fire_ms + 10_000
    out = json.loads(ok(schedctl(context, "job", "explain", "tick", "--at", format_ms(t), "-o", "json")).stdout)
    assert out["disposition"] == "paused" and "paused" in out["findings"][0]["text"]
    odd = client.explain_instant("tick", t + 500)             # the SDK: not an instant of @every 2s
    assert odd.disposition == "not-an-instant"
    assert [f.at_ms for f in odd.findings if f.kind in ("before", "after")] == [t, t + 2000]
    with pytest.raises(ValidationError, match="bad execution id"):
        client.explain_run("tick@yesterday")

    # the same answer on every node, each from its own replicated state (and history store)
    def alike() -> bool:
        answers = []
        for node in c.nodes.values():
            with Client(node.grpc, security=c.security(), timeout=30) as one:
                x = one.explain_run(ran.id, stale_ok=True)
            x.index = 0                              # how far each node had applied differs
            answers.append(x.SerializeToString(deterministic=True))
        return len(set(answers)) == 1
    wait_until(alike, timeout=30, what="the same explanation from every node")
    latest = json.loads(in_process(c, "run", "explain", "tick@latest", "-o", "json").stdout)
    assert latest["id"] == client.get_execution("tick@latest").id

    # the forecast, and the warning of a job landing on a crowded second
    for i in range(2):
        quiet = client.put_job_result(job_spec(f"nightly-{i}", schedule="0 0 * * *", command="true", pool="p"))
        assert not [w for w in quiet.warnings if "T00:00:00Z" in w]          # 1 and 2 due, 2 slots
    third = ok(schedctl(context, "job", "create", "nightly-2", "--schedule", "0 0 * * *", "--command", "true",
                        "--pool", "p"))
    assert re.search(r"warning: 3 jobs due at \S+T00:00:00Z in pool p, 2 slots: add `jitter`", third.stderr), \
        third.stderr                                     # tick is paused: it does not count
    fc = json.loads(ok(schedctl(context, "forecast", "--by", "pool", "--top", "3", "-o", "json")).stdout)
    (group,) = [g for g in fc["groups"] if g["key"] == "p"]
    assert int(group["slots"]) == 2
    midnight = next(p for p in group["peak_seconds"] if format_ms(int(p["at_ms"])).endswith("T00:00:00Z"))
    assert int(midnight["due"]) == 3 and midnight["over"]
    assert {x["schedule"] for x in midnight["contributors"]} == {"0 0 * * *"}
    sdk = client.forecast(by="pool")
    assert [g.key for g in sdk.groups] == ["p"] and sdk.jobs == 3        # tick is paused: not counted
