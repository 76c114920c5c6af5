"""An apply in a sharded cluster (schedd_client.job_sync): once the client knows the shard
count, each call holds one shard's jobs (so it goes to that shard's leader, which commits it in
one step instead of the node splitting it), and the report still lists the jobs in file order."""

from __future__ import annotations

from schedd_client import job_spec
from schedd_client._routing import routing_key, shard_of
from schedd_client.job_sync import Driver, apply_steps, batches
from schedd_proto import scheduler_pb2 as pb

S = 4


def _shard(name: str) -> int:
    return shard_of(routing_key(name), S)


def test_batches_of_a_sharded_cluster_hold_one_shard_each_in_order_within_it():
    specs = [job_spec(f"j{i:03d}", schedule="0 3 * * *", command="true") for i in range(50)]
    cut = list(batches(specs, 7, shards=S))
    assert all(len({_shard(s.name) for s in b}) == 1 and len(b) <= 7 for b in cut)
    assert sorted(s.name for b in cut for s in b) == [s.name for s in specs]
    for b in cut:
        assert [s.name for s in b] == sorted(s.name for s in b)
    assert [s.name for b in batches(specs, 7) for s in b] == [s.name for s in specs]     # unsharded: as before


def test_the_writes_go_by_shard_once_the_checks_taught_the_count_and_the_report_keeps_file_order():
    specs = [job_spec(f"j{i:03d}", schedule="0 3 * * *", command="true") for i in range(40)]
    known = {"shards": 0}
    driver = Driver(apply_steps(specs, batch_jobs=10, shards=lambda: known["shards"]))
    checks, writes = [], []
    while (plan := driver.next()) is not None:
        [call] = plan.calls
        names = [s.name for s in call.request.jobs]
        if call.method == "DiffJobs":
            checks.append(names)
            known["shards"] = S                       # a forwarded answer's trailer said K/S
            driver.answer([pb.JobChange(name=n, action="unchanged" if n.endswith("7") else "create")
                           for n in names])
        else:
            writes.append(names)
            driver.answer(pb.PutJobsResponse(created=len(names)))
    assert checks[0] == [s.name for s in specs[:10]]          # the first check: the count not known yet
    assert writes and all(len({_shard(n) for n in w}) == 1 for w in writes)
    report = driver.report
    assert report.created == [s.name for s in specs if not s.name.endswith("7")]
    assert report.unchanged == [s.name for s in specs if s.name.endswith("7")]
    assert sorted(n for w in writes for n in w) == report.created
