"""A claim committed just before its leader dies runs at once on the next leader:
the leader SIGKILLs itself right after a claim commits, before pushing it (failpoint
crash_after_claim); the worker reconnects to the new leader without that attempt, which is
expired as never started and run again without waiting for the lease or a retry backoff."""

from __future__ import annotations

import pytest

from schedd_client import job_spec
from schedd.ports.fakes import wait_until
from tests.support.cluster import finished, workers_of

pytestmark = pytest.mark.integration

LEASE_MS = 30_000          # what the claim would wait for without the fix, then a backoff


def test_a_claim_whose_leader_died_before_the_push_runs_at_once(cluster_factory, tmp_path):
    fail_dir = tmp_path / "failpoints"
    c = cluster_factory(size=3, scheduler={"lease_ms": LEASE_MS}, test_mode=True,
                        env={"SCHEDD_TEST_MODE": "1", "SCHEDD_FAILPOINT_DIR": str(fail_dir)})
    c.start()
    leader = c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2)
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to connect")
    client.put_job(job_spec("once", command="echo ran"))
    fail_dir.mkdir(exist_ok=True)
    (fail_dir / f"{leader}.crash_after_claim").write_text("0")
    eid = client.trigger_job("once").id
    wait_until(lambda: not c.nodes[leader].alive(), timeout=30, what="the leader to die after the claim")
    c.wait_leader(timeout=60, exclude=leader)
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="the execution to finish")
    assert ex.state == "SUCCEEDED", ex
    first, second = ex.attempts
    assert first.state == "REJECTED" and "never started" in first.error and first.worker == "w1"
    delay = second.started_ms - first.started_ms
    assert delay < LEASE_MS / 2, f"re-run {delay} ms after the claim: waited for a lease"
