"""`[raft] compaction_bytes`: a log of few, large entries (jobs registered in batches) is
compacted by its size, which pysyncobj's entry count alone never reaches, and a node restarted
afterwards loads its snapshot instead of replaying every batch. The operator sees the log's size
in /metrics (`schedd_raft_log_entries`, `schedd_raft_log_bytes`)."""

from __future__ import annotations

import re

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from tests.integration.test_metrics import samples, scrape

pytestmark = pytest.mark.integration

LIMIT = 256 << 10
BATCHES, PER_BATCH = 8, 500


def gauge(c, nid: str, name: str) -> float:
    return samples(scrape(c, nid), name)[""]          # a 1-group node: no shard label


def test_a_log_of_big_batches_is_compacted_by_its_bytes_and_a_restart_loads_the_snapshot(cluster_factory):
    c = cluster_factory(size=3, raft={"compaction_entries": 1_000_000, "compaction_seconds": 86_400,
                                      "compaction_bytes": LIMIT})
    c.start()
    c.wait_leader(timeout=60)
    c.wait_feature_level(timeout=60)
    with c.client(timeout=60) as client:
        for b in range(BATCHES):                    # 8 entries of 500 jobs: over 1 MiB of log
            client.put_jobs([job_spec(f"bulk-{b}-{i:04d}", schedule="0 3 * * *", command=f"true {b} {i}")
                             for i in range(PER_BATCH)])
    total = BATCHES * PER_BATCH
    nodes = list(c.nodes)
    wait_until(lambda: all(gauge(c, n, "schedd_jobs") == total for n in nodes), timeout=60,
               what="every node applied every job")
    # On every node: the log was cut back below the limit (it held over 1 MiB in a few entries).
    wait_until(lambda: all(gauge(c, n, "schedd_raft_log_bytes") < LIMIT for n in nodes), timeout=60,
               what="every node's log compacted below compaction_bytes")
    logs = {n: (c.root / "logs" / f"{n}.log") for n in nodes}
    assert all(gauge(c, n, "schedd_raft_log_entries") < BATCHES for n in nodes)

    victim = next(n for n in nodes if n != c.leader())
    c.kill_node(victim)
    c.start_node(victim)
    wait_until(lambda: re.search(r"restored snapshot: (\d+) jobs", logs[victim].read_text(errors="replace")),
               timeout=60, what=f"{victim} restored from its snapshot")
    restored = max(int(x) for x in re.findall(r"restored snapshot: (\d+) jobs", logs[victim].read_text()))
    assert restored >= total - 2 * PER_BATCH, restored      # at most the last batches replayed from the log
    wait_until(lambda: gauge(c, victim, "schedd_jobs") == total, timeout=60, what=f"{victim} holds every job again")
