"""History on disk, end to end: finished runs leave the replicated tables for each node's history
store, `run list` and `run get` show them as before, a node killed mid-batch catches its store up
from the log, a node that joins after the log was compacted copies the history from a peer, and
the stores' digests agree on every node."""

from __future__ import annotations


import pytest

from schedd.core.history import HISTORY_LEVEL
from schedd.core.model import TERMINAL_STATES
from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from tests.integration.test_membership import join, settled
from tests.support.cluster import schedctl, workers_of

pytestmark = pytest.mark.integration

JOBS = 6


def _histories(c, nids):
    """{node: (digest, index, rows, gap)} of each node's history store, read with the digests."""
    out = {}
    for nid in nids:
        info = c.node_info(nid, with_digest=True, timeout=10)
        if info is None or not info.history_digest:
            return None
        out[nid] = (info.history_digest, info.history_index, info.history_rows, info.history_gap)
    return out


def _agree(c, nids):
    """The stores' digests once they are equal and complete (no gap) on every node."""
    h = _histories(c, nids)
    if h is None or any(gap for _, _, _, gap in h.values()):
        return None
    return h if len({(d, rows) for d, _, rows, _ in h.values()}) == 1 else None


def _quiesce(client, names):
    for name in names:
        client.pause_job(name)

    def settled_runs():
        runs = list(client.list_executions(limit=100_000))
        return runs if all(r.state in TERMINAL_STATES for r in runs) else None
    return wait_until(settled_runs, timeout=60, what="every run to finish")


def test_history_lives_on_disk_and_replicas_agree(cluster_factory):
    c = cluster_factory(size=3, raft={"compaction_entries": 20})
    c.start()
    c.wait_leader(timeout=60)
    assert c.wait_feature_level(timeout=60) >= HISTORY_LEVEL
    c.start_worker("w1", slots=JOBS * 4)
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to connect")
    names = [f"tick{i}" for i in range(JOBS)]
    client.put_jobs([job_spec(n, schedule="@every 1s", command="echo hi") for n in names])

    def enough():
        return all(sum(1 for _ in client.list_executions(n, state="SUCCEEDED", limit=8)) >= 8 for n in names)
    wait_until(enough, timeout=90, what="eight runs of every job")

    # Mid-batch: the store commits every 100 ms, so a SIGKILL lands with hand-overs queued.
    c.kill_node("n3")
    wait_until(lambda: all(sum(1 for _ in client.list_executions(n, state="SUCCEEDED", limit=12)) >= 12
                           for n in names), timeout=90, what="runs while n3 is down")
    c.start_node("n3")
    runs = _quiesce(client, names)

    # Memory holds the newest finished run of each job; the rest is on disk, and listed.
    # (asked of the leader, which has applied every finish the listing above saw; a follower
    # may not have yet)
    leader = c.wait_leader()
    wait_until(lambda: (st := c.status(leader)) is not None and st.executions == JOBS, timeout=30,
               what="memory to hold each job's newest run only")
    per_job = {n: [r for r in runs if r.job == n] for n in names}
    for n, rs in per_job.items():
        assert len(rs) >= 12
        times = [r.scheduled_ms for r in rs]
        assert times == sorted(times, reverse=True) and len(set(times)) == len(times)
        assert all(b - a == 1000 for a, b in zip(sorted(times), sorted(times)[1:])), f"{n}: an instant is missing"
        oldest = rs[-1]
        got = client.get_execution(oldest.id)                 # a run that is only on disk
        assert got.state == "SUCCEEDED" and got.attempts and got.attempts[-1].fencing_token > 0
    page = list(client.list_executions(names[0], limit=5, page_size=2))  # paging across memory and disk
    assert [r.scheduled_ms for r in page] == [r.scheduled_ms for r in per_job[names[0]][:5]]

    h = wait_until(lambda: _agree(c, ["n1", "n2", "n3"]), timeout=90, what="the history stores to agree")
    assert next(iter(h.values()))[2] >= len(runs) - 2 * JOBS

    out = schedctl(c, "cluster", "status", "--digest").stdout
    assert "HISTORY" in out and " runs" in out, out

    # A node that joins after the log was compacted gets a snapshot without the history: it
    # copies it from a peer, then agrees.
    join(c, "n4")
    wait_until(lambda: settled(c, ["n1", "n2", "n3", "n4"]), timeout=120, what="n4 to join")
    h = wait_until(lambda: _agree(c, ["n1", "n2", "n3", "n4"]), timeout=120, what="n4's history to be copied")
    assert h["n4"][2] >= len(runs) - 2 * JOBS
    assert "copied from" in (c.root / "logs" / "n4.log").read_text()


def test_retention_by_count_prunes_the_store(cluster_factory):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    assert c.wait_feature_level(timeout=60) >= HISTORY_LEVEL
    c.start_worker("w1", slots=4)
    client = c.client(timeout=30)
    client.put_job(job_spec("short", schedule="@every 1s", command="true", history_limit=5))
    wait_until(lambda: client.get_job("short").executions_total >= 12, timeout=60, what="a dozen runs")
    client.pause_job("short")
    every = wait_until(lambda: (rs := list(client.list_executions("short"))) and all(
        r.state in TERMINAL_STATES for r in rs) and rs, timeout=60, what="the runs to finish")
    # Pruning is incremental (a step every few seconds when idle): the store comes down to the
    # newest 5, memory keeps the newest one, so the listing ends at the newest 6.
    runs = wait_until(lambda: (rs := list(client.list_executions("short"))) and len(rs) <= 6 and rs,
                      timeout=60, what="the store to keep the newest 5")
    assert [r.scheduled_ms for r in runs] == [r.scheduled_ms for r in every[:len(runs)]]
