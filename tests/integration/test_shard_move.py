"""A shard's replica moves to a fourth node under load (3 nodes x 4 shards, TLS and access control
on): the new node joins the cluster (`schedd serve --join`), `schedctl shard move` adds it to the
shard's group, waits until it caught up and removes the old replica, which its node drops from
disk. Meanwhile jobs in every shard fire every second and a writer keeps changing jobs of the
moved shard: no instant is missed or fired twice, no acknowledged write is lost, and every
node (the one that gave its replica up included) still answers for the moved shard's jobs."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import grpc
import pytest

from schedd.core.commands import FEATURES
from schedd.core.shards import shard_of
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd.ports.fakes import wait_until
from schedd_client import Client, job_spec
from tests.integration.test_shards import SHARDS, assert_once_each, history, names_over_shards
from tests.integration.test_worker_shards import run_all
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

MOVED = 2


def shard_level(c, nid: str, shard: int) -> int:
    """The feature level of `nid`'s replica of `shard` (NodeInfo names the shard in its header)."""
    with c.channel(nid) as ch:
        try:
            return pb_grpc.ClusterStub(ch).NodeInfo(pb.NodeInfoRequest(), timeout=2,
                                                    metadata=(("x-schedd-shard", str(shard)),)).feature_level
        except grpc.RpcError:
            return 0


def replicas(client, shard: int) -> list[str]:
    return sorted(next(s for s in client.list_shards().items if s.shard == shard).replicas)


def test_a_shard_replica_moves_to_a_fourth_node_under_load(cluster_factory):
    c = cluster_factory(size=3, shards=SHARDS, scheduler={"lease_ms": 3000})
    c.start()
    c.wait_leader(timeout=60)
    c.wait_shards(timeout=60)
    c.start_worker("w1", slots=6, drain_grace_s=5)
    names = names_over_shards(2)
    mine = [n for n in names if shard_of(n, SHARDS) == MOVED]
    with c.client(timeout=30) as client:
        client.put_jobs([job_spec(n, schedule="@every 1s", command="true") for n in names])
        wait_until(lambda: all(len(history(client, n)) >= 2 for n in names), timeout=60,
                   what="every job fired twice")

        c.new_node("n4")
        c.start_node("n4")
        wait_until(lambda: "n4" in {m.id for m in client.cluster_status().members}, timeout=90,
                   what="n4 joined the cluster")
        wait_until(lambda: c.node_info("n4") is not None, timeout=60, what="n4 serving")
        src = next(s.leader_id for s in client.list_shards().items if s.shard == MOVED)   # its leader moves

        # Load on the moved shard while it moves: a writer changes its jobs' commands.
        acked: dict[str, str] = {}
        stop = threading.Event()

        def writer() -> None:
            i = 0
            with c.client(timeout=30) as w:
                while not stop.is_set():
                    name, cmd = mine[i % len(mine)], f"echo {i}"
                    try:
                        w.put_job(job_spec(name, schedule="@every 1s", command=cmd))
                        acked[name] = cmd
                    except Exception:  # noqa: BLE001 - an unacknowledged write may be lost; retried next
                        pass
                    i += 1
                    stop.wait(0.05)
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        try:
            out = json.loads(schedctl(c, "shard", "move", str(MOVED), "--from", src, "--to", "n4",
                                      "-o", "json").stdout)
        finally:
            stop.set()
            t.join(timeout=60)
        assert sorted(out["replicas"]) == sorted({"n1", "n2", "n3", "n4"} - {src})
        assert any("caught up" in step for step in out["steps"])
        placed = {k: ["n1", "n2", "n3"] for k in range(SHARDS)} | {MOVED: sorted({"n1", "n2", "n3", "n4"} - {src}),
                                                                   0: ["n1", "n2", "n3", "n4"]}   # every node's
        for nid in ("n1", "n2", "n3", "n4"):            # every node reads the map (its replica of group 0's)
            with Client([c.nodes[nid].grpc], security=c.security(), timeout=30) as one:
                wait_until(lambda: {k: replicas(one, k) for k in range(SHARDS)} == placed, timeout=30,
                           what=f"{nid} listing shard {MOVED}'s new replicas")

        # The old replica is gone from its node's disk; n4 answers for the shard from its own.
        gone = Path(c.root) / src / "shards" / str(MOVED)
        wait_until(lambda: not gone.exists(), timeout=60, what=f"{src} dropped its replica of shard {MOVED}")
        with Client([c.nodes["n4"].grpc], security=c.security(), timeout=30) as n4:
            row = next(s for s in n4.list_shards().items if s.shard == MOVED)
            assert row.answered_by == "n4" and row.leader_id
        # Every node answers for the moved shard's jobs, the one that gave its replica up too,
        # and every acknowledged write is there.
        for nid in ("n1", "n2", "n3", "n4"):
            with Client([c.nodes[nid].grpc], security=c.security(), timeout=30) as one:
                for name, cmd in acked.items():
                    assert one.get_job(name).spec.handler.shell.command == cmd, (nid, name)
        # The worker runs the moved shard's jobs wherever its leader is now (n4 included).
        runs = [n for n in names_over_shards(2, prefix="moved") if shard_of(n, SHARDS) == MOVED]
        client.put_jobs([job_spec(n, command="echo moved") for n in runs])
        done = run_all(client, runs)
        assert [e.state for e in done] == ["SUCCEEDED"] * len(runs)
        before = {n: len(history(client, n)) for n in names}
        wait_until(lambda: all(len(history(client, n)) >= before[n] + 3 for n in names), timeout=60,
                   what="every job fired three more times after the move")
        for n in names:
            assert_once_each(history(client, n), 1000, n)

        # Asking again is answered as done; a move of shard 0 or to an unknown node is refused.
        again = json.loads(schedctl(c, "shard", "move", str(MOVED), "--from", src, "--to", "n4", "-o", "json").stdout)
        assert sorted(again["replicas"]) == sorted(out["replicas"])
        refused = schedctl(c, "shard", "move", "0", "--from", "n1", "--to", "n4", check=False)
        assert refused.returncode != 0 and "shard 0" in refused.stderr
        refused = schedctl(c, "shard", "move", "1", "--from", "n1", "--to", "n9", check=False)
        assert refused.returncode != 0 and "n9" in refused.stderr

        # Restarted, n4 hosts its replica again from its directory, and the old holder does not.
        for nid in ("n4", src):
            c.stop_node(nid)
            c.start_node(nid)
        with Client([c.nodes["n4"].grpc], security=c.security(), timeout=30) as n4:
            wait_until(lambda: any(s.shard == MOVED and s.answered_by == "n4" and s.leader_id and s.lag == 0
                                   and s.applied_index > 0 for s in n4.list_shards().items),
                       timeout=60, what="n4's replica of the moved shard back after its restart")
        with Client([c.nodes[src].grpc], security=c.security(), timeout=30) as old:
            wait_until(lambda: {s.shard: s.answered_by for s in old.list_shards().items}.get(MOVED) not in
                       (None, "", src), timeout=60, what=f"{src} answering for shard {MOVED} from a holder")
            assert old.get_job(mine[0]).spec.name == mine[0]
        assert not gone.exists()

        # A move to a node that is down is refused before anything changes (a group of R + 1
        # voters with one down would stop at the next failure).
        c.stop_node("n4")
        other = next(k for k in range(1, SHARDS) if k != MOVED)
        refused = schedctl(c, "shard", "move", str(other), "--from", "n1", "--to", "n4", check=False)
        assert refused.returncode != 0 and "does not answer" in refused.stderr, refused.stderr
        with c.client(timeout=30) as client:
            assert replicas(client, other) == ["n1", "n2", "n3"]


def test_a_dead_nodes_replicas_move_to_a_new_node_and_then_it_is_removed(cluster_factory):
    """A machine is lost: it leaves group 0 first (as replace-node removes before it adds: a dead
    voter leaves no room in group 0's quorum for a node joining), a new node joins and takes the
    dead node's replica of every shard it held (shard 0 aside: every node holds it); a live node
    holding replicas cannot leave before they move."""
    shards = 2
    c = cluster_factory(size=3, shards=shards)
    c.start()
    c.wait_leader(timeout=60)
    c.wait_shards(timeout=60)
    names = names_over_shards(2, shards=shards)
    with c.client(timeout=30) as client:
        # the map is recorded once every node runs a build that knows it (the feature level)
        wait_until(lambda: client.list_shards().map_version >= 1, timeout=60, what="the shard map recorded")
        # ...and shard 1's group at the top level too (raised while every voter answers: n3 dies next)
        wait_until(lambda: shard_level(c, "n1", 1) == FEATURES.max_level, timeout=60, what="shard 1's feature level")
        client.put_jobs([job_spec(n, schedule="@every 1s", command="true") for n in names])
        refused = schedctl(c, "cluster", "remove-node", "n3", check=False)
        assert refused.returncode != 0 and "still holds replicas of shards 1" in refused.stderr, refused.stderr
        c.kill_node("n3")
        schedctl(c, "cluster", "remove-node", "n3")
        c.new_node("n4")
        c.start_node("n4")
        wait_until(lambda: sorted(m.id for m in client.cluster_status().members) == ["n1", "n2", "n4"],
                   timeout=90, what="n4 joined the cluster in n3's place")
        wait_until(lambda: c.node_info("n4") is not None, timeout=60, what="n4 serving")
        schedctl(c, "shard", "move", "1", "--from", "n3", "--to", "n4")
        wait_until(lambda: replicas(client, 1) == ["n1", "n2", "n4"], timeout=30, what="shard 1 on n1, n2, n4")
        before = {n: len(history(client, n)) for n in names}
        wait_until(lambda: all(len(history(client, n)) >= before[n] + 3 for n in names), timeout=60,
                   what="every job fired three more times")
        for n in names:
            assert_once_each(history(client, n), 1000, n)
