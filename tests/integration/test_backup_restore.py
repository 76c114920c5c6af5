"""Backup and restore end to end: `schedctl cluster snapshot save` under load (jobs
firing, a worker running them), asked of a follower; `schedd restore` for each node of a fresh
3-node cluster; the restored state compared, job by job and execution by execution and by its
digest, with the source's state at the snapshot's index (replayed independently from a source
node's journal); then the restored cluster fires the next instants and catches up the ones it
missed while down, per each job's policy. And a corrupted file refused by `schedd restore`."""

from __future__ import annotations

import asyncio
import gzip
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from schedd.core.model import execution_id
from schedd.core.state import SchedulerState
from schedd.ports.fakes import wait_until
from schedd.replication.journal import DurableJournal
from schedd.security.backup_key import BackupKey
from schedd_client import AsyncClient, SchedError, job_spec, snapshot_file
from tests.support.cluster import schedctl, workers_of

pytestmark = pytest.mark.integration

# Keep the whole log (no compaction) so the source's state at any index can be replayed.
RAFT = {"compaction_entries": 1_000_000, "compaction_seconds": 86_400}
LEASE_MS = 2_000
DOWN_S = 11.0              # the restored cluster starts this long after the snapshot: > the 10 s missed grace


def replay(data_dir: Path, upto: int) -> SchedulerState:
    """The state machine after applying a node's journal up to index `upto` (entries as the
    replicated method received them: pysyncobj's REGULAR commands, (func, (entry,), ...))."""
    j = DurableJournal(str(data_dir / "raft.journal"), dump_path=None, fsync="never")
    st = SchedulerState()
    try:
        assert j[0][1] == 1, "the journal was compacted: cannot replay from the start"
        for command, idx, _term in j[:]:
            if idx > upto:
                break
            if command[0] == 0:                       # REGULAR (NO_OP and others apply nothing)
                st.apply(pickle.loads(command[1:])[1][0], idx)
    finally:
        j._destroy()
    assert st.last_index <= upto
    return st


def seeded_state(data_dir: Path) -> SchedulerState:
    with gzip.open(data_dir / "raft.dump") as g:
        data = pickle.load(g)
    st = SchedulerState()
    st.restore(data[0][1])
    return st


def schedd_popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "schedd", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def schedd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "schedd", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_save_under_load_restore_into_a_fresh_cluster(cluster_factory, tmp_path: Path) -> None:
    src = cluster_factory(size=3, raft=RAFT)
    src.start()
    src.wait_leader(timeout=60)
    src.start_worker("w1", slots=16)
    client = src.client(timeout=30)
    wait_until(lambda: workers_of(src) == ["w1"], timeout=30, what="the worker to connect")
    client.put_jobs([job_spec(f"tick{i}", schedule="@every 1s", command="true") for i in range(4)]
                    + [job_spec("latest", schedule="@every 1s", command="true", catchup="latest"),
                       job_spec("sec", schedule="@every 1h", command="true", env_secret={"TOKEN": "hush"})])
    client.set_quota("team:default", 5)
    client.acl_put_policy("readers", {"team:*": ["read"]}, description="kept by the backup")
    wait_until(lambda: len(list(client.list_executions(state="SUCCEEDED", limit=30))) >= 10,
               timeout=60, what="the jobs to run")

    reader = client.acl_create_token(policies=["readers"], description="no acl capability").secret
    with src.client(security=src.security("worker", "reader", token=reader)) as as_reader:
        with pytest.raises(SchedError, match="permission denied") as denied:
            as_reader.save_snapshot(tmp_path / "not-mine.snap")
        assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert not (tmp_path / "not-mine.snap").exists()

    leader = src.wait_leader()
    follower = next(n for n in src.nodes if n != leader)
    out = tmp_path / "backup.snap"
    saved = schedctl(src, "cluster", "snapshot", "save", str(out), at=src.nodes[follower].grpc)
    key = BackupKey((src.root / "cluster.secret").read_text().strip())
    meta, _ = snapshot_file.read_path(str(out), key.verify)
    assert f"index {meta.index}, term {meta.term}" in saved.stdout and meta.digest in saved.stdout
    assert out.stat().st_mode & 0o777 == 0o600

    async def save_async() -> snapshot_file.SnapshotMeta:
        async with AsyncClient(src.cluster_arg, security=src.security(), timeout=60) as ac:
            return await ac.save_snapshot(tmp_path / "async.snap")
    later = asyncio.run(save_async())
    assert snapshot_file.read_path(str(tmp_path / "async.snap"), key.verify)[0] == later and later.index > meta.index
    wait_until(lambda: len(list(client.list_executions(state="SUCCEEDED", limit=200))) >= 20,
               timeout=60, what="the load to go on after the save")
    # The finished runs that left the replicated state went to the history file beside it.
    history = Path(str(out) + ".history")
    assert history.exists() and history.stat().st_mode & 0o777 == 0o600 and "history as of index" in saved.stdout
    hmeta, _ = snapshot_file.read_path(str(history), key.verify)
    assert hmeta.index >= meta.index and hmeta.body_encoding == "schedd-history-sqlite-1"
    src_runs = {e.id: e for e in client.list_executions("tick0", limit=10_000)}
    client.close()
    src.stop()

    # The source at the snapshot's index, replayed from a node's own journal.
    source = replay(src.root / "n1", meta.index)
    assert (source.last_index, source.state_digest()) == (meta.index, meta.digest)

    # A fresh cluster: its own ports, certificates and data dirs; the same cluster secret (the
    # env_secret values are sealed under it) and the tokens come with the state.
    root = tmp_path / "cluster1"
    root.mkdir()
    shutil.copy(src.root / "cluster.secret", root / "cluster.secret")
    # A short lease: the attempts running when the snapshot was taken belong to a worker of the
    # old cluster; they expire after a lease (RETRY_WAIT), and until then overlap holds their jobs.
    dst = cluster_factory(size=3, scheduler={"lease_ms": LEASE_MS}, admin_token=src.admin_token,
                          harness_worker_token=src.harness_worker_token)
    restores = {nid: schedd_popen("restore", "--from", str(out), "--config", str(node.config))
                for nid, node in dst.nodes.items()}          # each node's own, side by side
    for nid, proc in restores.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert f"restored node {nid}" in stdout and f"index {meta.index}" in stdout and " in history" in stdout
        seeded = seeded_state(dst.root / nid)
        assert seeded.state_digest() == meta.digest
        assert seeded.jobs == source.jobs and seeded.execs == source.execs
    again = schedd("restore", "--from", str(out), "--config", str(dst.nodes["n1"].config))
    assert again.returncode == 1 and "is not empty" in again.stderr

    wait_until(lambda: time.time() * 1000 - source.clock_ms > DOWN_S * 1000, timeout=30,
               what="the downtime to pass the missed grace")
    restart_ms = int(time.time() * 1000)
    dst.start()
    dst.wait_leader(timeout=60)
    dst.start_worker("w1", slots=16)
    c2 = dst.client(timeout=30)
    jobs = {j.spec.name: j for j in c2.list_jobs()}
    assert {n: j.version for n, j in jobs.items()} == {n: j.version for n, j in source.jobs.items()}
    restored = {e.id: e for e in c2.list_executions(limit=10_000)}
    for ex in source.execs.values():                 # history survives, finished runs unchanged
        got = restored[execution_id(ex.job, ex.scheduled_ms)]
        if ex.state in ("SUCCEEDED", "FAILED"):
            assert (got.state, len(got.attempts)) == (ex.state, len(ex.attempts))
    floor = source.archived["tick0"][0]          # runs of tick0 up to here were only in the history
    on_disk = {i for i, e in src_runs.items() if e.scheduled_ms <= floor}
    assert on_disk and on_disk <= set(restored), "the history did not come back with the restore"
    assert all(restored[i].state == src_runs[i].state for i in on_disk)
    assert {(q.key, q.limit) for q in c2.list_quotas()} >= {("team:default", 5)}
    assert "readers" in {p.name for p in c2.acl_list_policies().policies}
    assert c2.audit_verify().ok

    def fired_after_restore():
        execs = list(c2.list_executions(state="SUCCEEDED", limit=500))
        new = [e for e in execs if e.job == "tick0" and e.scheduled_ms >= restart_ms and e.trigger == "schedule"]
        caught = [e for e in execs if e.job == "latest" and e.trigger == "catchup"]
        return (new, caught) if new and caught else None

    new, caught = wait_until(fired_after_restore, timeout=60, what="the restored cluster to fire and catch up")
    assert all(source.clock_ms < e.scheduled_ms < restart_ms for e in caught), "caught up outside the downtime"
    assert len(caught) == 1, "catch-up latest runs one of the missed instants"
    c2.close()


def test_restore_refuses_a_corrupted_file(tmp_path: Path) -> None:
    secret = "Zt3kq9VxPw2LmN8rYb4HcJ6sFd1GaE5uTo7iKy0QeR-"
    cfg = tmp_path / "n1.toml"
    cfg.write_text(f'node_id = "n1"\ndata_dir = "{tmp_path / "n1"}"\nraft_address = "127.0.0.1:1"\n'
                   f'grpc_address = "127.0.0.1:2"\nsecret = "{secret}"\n')
    body = b"x" * 1000
    meta = snapshot_file.SnapshotMeta(index=5, term=1, digest="0" * 64, schedd_version="t", snapshot_format=4,
                                      tzdata="t", croniter="t", created_ms=0, body_encoding="t",
                                      body_length=len(body), body_sha256=__import__("hashlib").sha256(body).hexdigest())
    data = bytearray(snapshot_file.encode(meta, body, BackupKey(secret).sign))
    data[-100] ^= 1
    bad = tmp_path / "bad.snap"
    bad.write_bytes(bytes(data))
    r = schedd("restore", "--from", str(bad), "--config", str(cfg))
    assert r.returncode == 1 and "body checksum mismatch" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    bad.write_bytes(bytes(data[:500]))
    r = schedd("restore", "--from", str(bad), "--config", str(cfg))
    assert r.returncode == 1 and f"truncated at 500 of {len(data)} bytes" in r.stderr
    assert not (tmp_path / "n1").exists()
