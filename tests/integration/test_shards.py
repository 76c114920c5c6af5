"""A sharded cluster for real: 3 node processes, each hosting a replica of each of 4 shard groups
(TLS and access control on). Every shard elects a leader; jobs spread over every shard fire
once per instant through a node that any client may call; a SIGKILLed node that leads two
shards loses neither an instant nor doubles one; lists merge the shards; the shard count of a
data dir is fixed."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from schedd.core.shards import shard_of
from schedd.ports.fakes import wait_until
from schedd_client import Client, job_spec
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

SHARDS = 4


def names_over_shards(per_shard: int, shards: int = SHARDS, prefix: str = "tick") -> list[str]:
    """Job names, `per_shard` in each shard (the routing is a wire contract: shard_of)."""
    out: list[str] = []
    have: Counter[int] = Counter()
    i = 0
    while len(out) < per_shard * shards:
        name = f"{prefix}{i}"
        k = shard_of(name, shards)
        if have[k] < per_shard:
            have[k] += 1
            out.append(name)
        i += 1
    return out


def history(client, job: str) -> list:
    return list(client.list_executions(job=job, oldest_first=True))


def assert_once_each(execs: list, period_ms: int, job: str) -> None:
    times = [e.scheduled_ms for e in execs]
    assert len(times) == len(set(times)), f"{job}: an instant was recorded twice"
    gaps = [(a, b) for a, b in zip(times, times[1:]) if b - a != period_ms]
    assert not gaps, f"{job}: instants missing between {gaps[:5]}"


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (its descriptors' sockets in state LISTEN, from
    /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def raft_ports_of(c, nid: str) -> set[int]:
    """The ports node `nid` listens on for Raft: all it listens on but its gRPC and HTTP ports."""
    node = c.nodes[nid]
    assert node.pid is not None
    others = {int(a.rpartition(":")[2]) for a in (node.grpc, node.metrics)}
    return listening_ports(node.pid) - others


def leaders(client) -> dict[int, str]:
    return {s.shard: s.leader_id for s in client.list_shards().items}


def test_shards_elect_route_fire_once_and_survive_a_node_that_leads_two(cluster_factory, tmp_path):
    c = cluster_factory(size=3, shards=SHARDS)
    c.start()
    c.wait_leader(timeout=60)
    first = c.wait_shards(timeout=60)
    assert sorted(first) == list(range(SHARDS)) and all(first.values())
    for nid, node in c.nodes.items():          # one Raft port per node for its 4 groups
        assert raft_ports_of(c, nid) == {int(node.raft.rpartition(":")[2])}

    with c.client(timeout=30) as client:                 # leaders spread: no node leads more than 2 of 4
        wait_until(lambda: max(Counter(leaders(client).values()).values()) <= 2, timeout=60,
                   what="shard leaders balanced over the nodes")
    listing = json.loads(schedctl(c, "shard", "list", "-o", "json").stdout)
    assert [row["shard"] for row in listing] == list(range(SHARDS))
    assert all(row["leader"] and sorted(row["replicas"]) == ["n1", "n2", "n3"] for row in listing)
    status = json.loads(schedctl(c, "cluster", "status", "-o", "json").stdout)
    assert [row["shard"] for row in status["shards"]] == list(range(SHARDS))
    assert "SHARD" in schedctl(c, "cluster", "status").stdout

    names = names_over_shards(2)
    with c.client(timeout=30) as client:
        created = client.put_jobs([job_spec(n, schedule="@every 1s", command="true") for n in names])
        assert created.created == len(names)
        # Through every node: a job lives in one shard, any node answers for it.
        for nid in c.nodes:
            with Client([c.nodes[nid].grpc], security=c.security(), timeout=30) as one:
                assert one.get_job(names[-1]).spec.name == names[-1]
        # A watch covers every shard: each job added once, then one "synced" (from the answering
        # node's replicas: they may lag the leaders by a moment, as for an unsharded cluster).
        def watched() -> list[str]:
            seen = []
            for event in client.watch_jobs():
                seen.append(event)
                if event.type == "synced":
                    break
            assert [e.type for e in seen].count("synced") == 1
            return sorted(e.key for e in seen if e.type == "added")
        wait_until(lambda: watched() == sorted(names), timeout=30, what="a watch listing every shard's jobs")
        # A forwarded answer names its shard's leader; the SDK then goes there first.
        for n in names:
            client.get_job(n)
        actual = {s.shard: s.leader_grpc_address for s in client.list_shards().items}
        learned = dict(client._router.shard_map.leaders)
        assert learned and all(actual[k] == address for k, address in learned.items())
        # The forecast counts every shard's jobs (group 0's leader reads every group's replica).
        wait_until(lambda: client.forecast().jobs == len(names), timeout=30, what="the forecast counting 8 jobs")
        # The fanned-out list: every job once, in name order, across pages of 3.
        assert [j.spec.name for j in client.list_jobs(page_size=3)] == sorted(names)
        per_shard = {s.shard: s.jobs for s in client.list_shards().items}
        wait_until(lambda: {s.shard: s.jobs for s in client.list_shards().items} == dict.fromkeys(range(SHARDS), 2),
                   timeout=30, what=f"2 jobs in each shard (now {per_shard})")

        wait_until(lambda: all(len(history(client, n)) >= 3 for n in names), timeout=60,
                   what="every job fired three times")
        now = leaders(client)
        counts = Counter(now.values())
        victim, led = counts.most_common(1)[0]
        assert led >= 2                                  # 4 shards on 3 nodes: one leads two
        c.kill_node(victim)
        moved = [k for k, nid in now.items() if nid == victim]
        wait_until(lambda: all(leaders(client).get(k) not in ("", victim) for k in moved), timeout=60,
                   what=f"shards {moved} re-elected without {victim}")
        before = {n: len(history(client, n)) for n in names}
        wait_until(lambda: all(len(history(client, n)) >= before[n] + 3 for n in names), timeout=60,
                   what="every job fired three more times after the kill")
        for n in names:
            assert_once_each(history(client, n), 1000, n)
    # The killed node comes back: every one of its replicas catches up with its group.
    c.start_node(victim)
    with Client([c.nodes[victim].grpc], security=c.security(), timeout=30) as back:
        def caught_up() -> bool:
            answer = back.list_shards()
            return answer.answered_by == victim and len(answer.items) == SHARDS and \
                all(s.leader_id and s.lag == 0 and s.applied_index > 0 for s in answer.items)
        wait_until(caught_up, timeout=60, what=f"{victim}'s replicas of every shard caught up after its restart")
    # The audit trail: each group records the writes it applied; an export verifies shard by shard.
    listed = json.loads(schedctl(c, "audit", "list", "-o", "json").stdout)
    assert {r.get("shard", 0) for r in listed if r["action"] == "Scheduler.PutJobs"} == set(range(SHARDS))
    export = tmp_path / "audit.jsonl"
    schedctl(c, "audit", "export", "--file", str(export))
    assert export.read_text().count('"anchor"') == SHARDS
    assert "chain intact" in schedctl(c, "audit", "verify", str(export)).stdout
    scraped = c.http_get(next(n for n in c.nodes if n != victim), "/metrics")
    for k in range(SHARDS):                               # every group's series, labelled
        assert f'shard="{k}"' in scraped
    assert scraped.count("# TYPE schedd_raft_term gauge") <= 1


def test_a_sharded_backup_restores_every_shard_into_a_new_cluster(cluster_factory, tmp_path):
    import shutil
    import subprocess
    import sys
    src = cluster_factory(size=3, shards=2)
    src.start()
    src.wait_leader(timeout=60)
    src.wait_shards(timeout=60)
    names = names_over_shards(3, shards=2, prefix="kept")
    with src.client(timeout=30) as client:
        client.put_jobs([job_spec(n, schedule="0 3 * * *", command="true") for n in names])
        client.set_quota("team:default", 4)
    out = tmp_path / "backup.snap"
    saved = json.loads(schedctl(src, "cluster", "snapshot", "save", str(out), "-o", "json").stdout)
    assert saved["shards"] == 2 and [f["shard"] for f in saved["files"]] == [0, 1]
    manifest = json.loads((tmp_path / "backup.snap.shards.json").read_text())
    assert [f["snapshot"] for f in manifest["files"]] == ["backup.snap", "backup.snap.shard-1"]
    assert (tmp_path / "backup.snap.shard-1.history").exists()
    src.stop()

    root = tmp_path / "cluster1"
    root.mkdir()
    shutil.copy(src.root / "cluster.secret", root / "cluster.secret")
    dst = cluster_factory(size=3, shards=2, admin_token=src.admin_token, harness_worker_token=src.harness_worker_token)
    for nid, node in dst.nodes.items():
        r = subprocess.run([sys.executable, "-m", "schedd", "restore", "--from", str(out), "--config",
                            str(node.config)], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        assert f"restored shard 1 of node {nid}" in r.stdout and "2 shards" in r.stdout
    one = cluster_factory(size=1, shards=4, acl=False, tls=False)
    r = subprocess.run([sys.executable, "-m", "schedd", "restore", "--from", str(out), "--config",
                        str(one.nodes["n1"].config)], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and "backup of 2 shard(s)" in r.stderr
    dst.start()
    dst.wait_leader(timeout=60)
    dst.wait_shards(timeout=60)
    with dst.client(timeout=30) as client:
        assert sorted(j.spec.name for j in client.list_jobs()) == sorted(names)
        assert {(q.key, q.limit) for q in client.list_quotas()} >= {("team:default", 4)}
        assert client.audit_verify().ok


def test_a_team_quota_holds_across_shards_under_load(cluster_factory):
    """Team q may run 2 attempts at once; its 8 jobs, 2 in each of 4 shards, each want to run a
    2 s command every second. The running attempts (the worker's start and end of each) never
    overlap more than 2 deep across all shards, and the shares move so that every shard's jobs run."""
    c = cluster_factory(size=3, shards=SHARDS)
    c.start()
    c.wait_leader(timeout=60)
    c.wait_shards(timeout=60)
    c.start_worker("w1", slots=8)
    names = names_over_shards(2, prefix="busy")
    with c.client(timeout=30) as client:
        quota = client.set_quota("team:q", 2)
        assert quota.limit == 2
        client.put_jobs([job_spec(n, schedule="@every 1s", team="q", command="sleep 2") for n in names])

        def ran() -> dict[str, int]:
            return {n: sum(1 for e in history(client, n) if e.state == "SUCCEEDED") for n in names}
        wait_until(lambda: all(v >= 1 for v in ran().values()), timeout=120,
                   what="a run of every job of team q, in every shard")
        assert [w.slots for w in client.list_workers().workers] == [8]   # its slots, not one shard's share
        listed = {q.key: q for q in client.list_quotas()}
        assert listed["team:q"].limit == 2 and listed["team:q"].running <= 2
        spans = [(a.started_ms, a.ended_ms) for n in names for e in history(client, n) for a in e.attempts
                 if a.started_ms and a.ended_ms]
    assert len(spans) >= len(names)
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    depth = deepest = 0
    for _, step in edges:
        depth += step
        deepest = max(deepest, depth)
    assert deepest <= 2, f"{deepest} attempts of team q ran at once (quota 2)"


def test_a_cluster_made_with_a_raft_port_per_group_keeps_them(cluster_factory):
    """A cluster whose data the build before the shared port made: shard k on the node's Raft
    port + k. Made here with `raft_ports = "per_group"`, then restarted as that build's data and
    config would be (shards.json without the mode, no raft_ports key) one node at a time, as a
    rolling upgrade does: every restarted node keeps the ports, and every group its leader."""
    c = cluster_factory(size=3, shards=SHARDS, raft_ports="per_group")
    c.start()
    c.wait_leader(timeout=60)
    assert all(c.wait_shards(timeout=60).values())

    def per_group(nid: str) -> None:
        base = int(c.nodes[nid].raft.rpartition(":")[2])
        wait_until(lambda: raft_ports_of(c, nid) == {base + k for k in range(SHARDS)}, timeout=30,
                   what=f"{nid} listening on a Raft port per group")
        assert json.loads((c.root / nid / "shards.json").read_text())["raft_ports"] == "per_group"
    for nid in c.nodes:
        per_group(nid)
    c.raft_ports = ""
    for nid, node in c.nodes.items():
        c.stop_node(nid)
        (c.root / nid / "shards.json").write_text(json.dumps({"shards": SHARDS}) + "\n")
        c._write_config(node)
        assert "raft_ports" not in node.config.read_text()
        c.start_node(nid)
        wait_until(lambda: c.node_info(nid) is not None, timeout=60, what=f"{nid} answers again")
        assert all(c.wait_shards(timeout=60).values())
        per_group(nid)
    with c.client(timeout=30) as client:               # every group still commits
        created = client.put_jobs([job_spec(n, command="true") for n in names_over_shards(1, prefix="up")])
        assert created.created == SHARDS
