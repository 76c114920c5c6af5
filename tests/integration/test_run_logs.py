"""Run logs through a real 3-node cluster and a worker, as a user reads them: `schedctl run logs`
(asking a follower, which relays the leader's stream) shows a job's whole output, more than the
tail in the Raft log, split by stream and in order; `--tail`; `-f` follows a running attempt
live in a schedctl process of its own and ends with the outcome; the SDK, sync and async; a
token that may not read the run is refused; and once the worker is gone the Raft tail is shown
with the reason."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import AsyncClient, job_spec
from tests.support.cluster import finished, schedctl, workers_of

pytestmark = pytest.mark.integration

N = 2000           # lines per stream: about 36 KiB, far past the 4 KiB tail in the Raft log
CHATTY = f'i=0; while [ $i -lt {N} ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done'
TICKS = r"for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done; printf 'bye\033[2J\n' >&2; exit 3"


def test_run_logs_end_to_end(cluster_factory):
    c = cluster_factory(size=3, scheduler={"lease_ms": 3000})
    c.start()
    leader = c.wait_leader(timeout=60)
    follower = next(n.grpc for n in c.nodes.values() if n.id != leader)
    c.start_worker("w1", slots=2, drain_grace_s=5)
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to connect")

    client.put_job(job_spec("chatty", command=CHATTY))
    eid = client.trigger_job("chatty").id
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="chatty to finish")
    assert ex.state == "SUCCEEDED", ex
    tail = ex.attempts[0].output_tail
    assert tail.startswith("… ") and " bytes before this\n" in tail and len(tail.encode()) <= 4096
    shown = schedctl(c, "run", "get", eid, at=follower).stdout
    assert "bytes before this" in shown

    # everything, both streams, each in its order, from a follower
    both = schedctl(c, "run", "logs", eid, at=follower)
    lines = both.stdout.splitlines()
    assert len(lines) == 2 * N and len(both.stdout) > 8 * len(tail)
    assert [x for x in lines if x.startswith("out ")] == [f"out {i}" for i in range(N)]
    assert [x for x in lines if x.startswith("err ")] == [f"err {i}" for i in range(N)]
    assert "SUCCEEDED" in both.stderr
    err = schedctl(c, "run", "logs", eid, "--stderr", at=follower).stdout
    assert err.splitlines() == [f"err {i}" for i in range(N)]
    last = schedctl(c, "run", "logs", eid, "--stdout", "--tail", "3").stdout
    assert last.splitlines() == [f"out {i}" for i in range(N - 3, N)]

    # the SDK, sync: the same bytes as chunks
    chunks = list(client.logs(eid, stream="stdout"))
    assert chunks[-1].kind == "end" and chunks[-1].state == "SUCCEEDED" and chunks[-1].worker == "w1"
    assert b"".join(ch.data for ch in chunks if ch.kind == "output").decode().splitlines() == \
        [f"out {i}" for i in range(N)]

    # the SDK, async: follow on an ended attempt ends at once, with the outcome
    async def read_async() -> list:
        async with AsyncClient(c.cluster_arg, security=c.security(), timeout=30) as ac:
            return [ch async for ch in ac.logs(eid, follow=True, tail=2, stream="stderr")]
    got = asyncio.run(read_async())
    assert b"".join(ch.data for ch in got if ch.kind == "output") == f"err {N - 2}\nerr {N - 1}\n".encode()
    assert got[-1].kind == "end" and got[-1].state == "SUCCEEDED"

    # -f, in a schedctl process of its own, started right after the trigger: lines arrive while
    # the attempt runs, and the command ends when it ends, with its outcome
    client.put_job(job_spec("ticks", command=TICKS))
    tid = client.trigger_job("ticks").id
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    env["SCHEDD_CONTEXT"] = str(c.write_context())
    proc = subprocess.Popen([sys.executable, "-m", "schedd_client.schedctl", "run", "logs", tid, "-f",
                             "--cluster", follower], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)
    try:
        first = proc.stdout.readline()
        assert first == "tick 1\n", (first, proc.stderr.read() if proc.poll() is not None else "")
        assert client.get_execution(tid).state == "RUNNING"      # live, not after the fact
        out = proc.stdout.read()            # to its end: the command ends when the attempt does
        errtext = proc.stderr.read()        # (communicate() would skip what readline() buffered)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, errtext
    assert (first + out).splitlines() == [f"tick {i}" for i in range(1, 7)] + ["bye\x1b[2J"]   # piped: exact
    assert "FAILED (exit code 3)" in errtext and "attempt 1 on w1" in errtext
    assert finished(client, tid) is not None
    shown = schedctl(c, "run", "logs", tid, "--stderr").stdout      # not piped: escaped, as tables are
    assert shown == "bye\\x1b[2J\n"

    # a token that may not read the run's team is refused; nothing is read for it
    client.acl_put_policy("other-team", {"team:other": ["read"]})
    secret = client.acl_create_token(policies=["other-team"]).secret
    other = c.write_context(kind="user", name="other", token=secret)
    refused = schedctl(other, "run", "logs", eid, check=False)
    assert refused.returncode == 1 and not refused.stdout
    # refused as reading the run is: a team it cannot read is not even said to hold the run
    assert refused.stderr == schedctl(other, "run", "get", eid, check=False).stderr
    assert "not found" in refused.stderr
    bad = schedctl(c, "run", "logs", eid, "--tail", "-1", check=False)
    assert bad.returncode != 0 and not bad.stdout

    # the worker gone: the tail kept in the Raft log, and why
    c.signal_worker("w1", signal.SIGTERM)
    c.workers["w1"].proc.wait(timeout=30)
    wait_until(lambda: workers_of(c) == [], timeout=30, what="the worker to be gone")
    gone = schedctl(c, "run", "logs", eid, at=follower)
    assert "worker w1 is not connected; showing the last 4 KiB kept in the Raft log" in gone.stderr
    assert gone.stdout == tail


def test_run_logs_of_a_run_not_started_or_unknown(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    client = c.client(timeout=30)
    client.put_job(job_spec("idle", command="true"))
    eid = client.trigger_job("idle").id              # no worker: it never starts
    started = time.monotonic()
    p = schedctl(c, "run", "logs", eid, check=False)
    assert p.returncode == 1 and "no attempt" in p.stderr and time.monotonic() - started < 30
    p = schedctl(c, "run", "logs", "nope@2026-01-01T00:00:00Z", check=False)
    assert p.returncode == 1 and "not found" in p.stderr
