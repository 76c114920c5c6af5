"""A short outage is not throttled as catch-up: the whole cluster is frozen for
7 s while 20 per-second jobs are due; when it resumes, every instant it delayed is a plain
`schedule` run and all of them start at once, although the catch-up rate is set to 1/s (at that
rate the ~100 late instants would take 100 s)."""

from __future__ import annotations

import signal
import time

import pytest

from schedd_client import job_spec
from schedd.ports.fakes import wait_until
from tests.support.cluster import workers_of

pytestmark = pytest.mark.integration

JOBS = 20
OUTAGE_S = 7.0


def test_instants_delayed_by_a_short_outage_all_start_at_once(cluster_factory):
    c = cluster_factory(size=3, scheduler={"catchup_per_second": 1})
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=JOBS * 10)
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to connect")
    client.put_jobs([job_spec(f"tick{i:02d}", schedule="@every 1s", command="true") for i in range(JOBS)])
    wait_until(lambda: len(list(client.list_executions(state="SUCCEEDED", limit=3 * JOBS))) >= 3 * JOBS,
               timeout=60, what="the jobs to run")

    stop_ms = int(time.time() * 1000)
    for nid in c.nodes:
        c.signal_node(nid, signal.SIGSTOP)
    try:
        time.sleep(OUTAGE_S)                     # the fault itself: no leader for 7 s
    finally:
        for nid in c.nodes:
            c.signal_node(nid, signal.SIGCONT)
    resume_ms = int(time.time() * 1000)

    # instants recorded late (after the lookahead) by 2 s or more: formerly labelled catch-up
    lo, hi = stop_ms + 2_000, resume_ms - 2_000

    def delayed():
        execs = [e for e in client.list_executions(limit=50 * JOBS) if lo <= e.scheduled_ms <= hi]
        return execs if len(execs) >= JOBS * 3 and all(e.state == "SUCCEEDED" for e in execs) else None

    execs = wait_until(delayed, timeout=90, what="the delayed instants to run")
    assert {e.trigger for e in execs} == {"schedule"}, "a delay under the missed grace was caught up"
    last_start = max(e.attempts[-1].started_ms for e in execs)
    assert last_start - resume_ms < 20_000, f"the last delayed instant started {last_start - resume_ms} ms after the resume"
