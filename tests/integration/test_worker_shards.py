"""A worker on a real sharded cluster (3 node processes, 3 shard groups, TLS and access control
on): one `schedd worker` process runs the jobs of every shard, each shard's run reported to the
leader that assigned it, and it keeps doing so after a node that leads a shard is SIGKILLed."""

from __future__ import annotations

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from tests.integration.test_shards import leaders, names_over_shards
from tests.support.cluster import finished

pytestmark = pytest.mark.integration

SHARDS = 3


def run_all(client, names: list[str]) -> list:
    ids = [client.trigger_job(n).id for n in names]
    return [wait_until(lambda eid=eid: finished(client, eid), timeout=60, what=f"{eid} to finish") for eid in ids]


def test_one_worker_serves_every_shard_and_follows_each_shards_leader(cluster_factory):
    c = cluster_factory(size=3, shards=SHARDS, scheduler={"lease_ms": 3000})
    c.start()
    c.wait_leader(timeout=60)
    c.wait_shards(timeout=60)
    c.start_worker("w1", slots=6, drain_grace_s=5)
    names = names_over_shards(2, shards=SHARDS, prefix="echo")
    with c.client(timeout=30) as client:
        client.put_jobs([job_spec(n, command="echo ran $SCHEDD_FENCING_TOKEN") for n in names])
        done = run_all(client, names)
        assert [e.state for e in done] == ["SUCCEEDED"] * len(names)
        assert {e.attempts[-1].worker for e in done} == {"w1"}
        log = c.workers["w1"].log.read_text()
        assert "the cluster has 3 shards" in log
        now = leaders(client)
        victim = now[1] if now[1] != now[0] else now[2]
        c.kill_node(victim)
        moved = [k for k, nid in now.items() if nid == victim]
        wait_until(lambda: all(leaders(client).get(k) not in ("", victim) for k in moved), timeout=60,
                   what=f"shards {moved} re-elected without {victim}")
        done = run_all(client, names)
        assert [e.state for e in done] == ["SUCCEEDED"] * len(names)
        assert {e.attempts[-1].worker for e in done} == {"w1"}
