"""Upgrades and a status an operator can trust, end to end.

A rolling upgrade in one source tree: n3 runs an older build's feature table (levels 1..1, it
does not know `audit_note`: SCHEDD_TEST_FEATURE_LEVEL=1). While it does, the cluster stays at
feature level 1, `cluster status` shows it, and a level-2 operation (`schedctl audit note`) is
refused with the rolling-upgrade message. Restarted with this build's table ("upgraded"), the
leader raises the level, the operation works, and every replica holds the same state.

The cluster at this build's top level (4: snapshot format 6) refuses a node of the build before
(levels 1..3) at join and at restart, and one that starts anyway (no recorded level) halts.

A node down shows as unreachable with the error, never zeros; with no leader the status says so.
"""

from __future__ import annotations

import json

import pytest

from schedd.core.commands import FEATURES
from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from schedd_proto import scheduler_pb2 as pb
from schedd.testing.hooks import FEATURE_LEVEL_ENV
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration


TOP = FEATURES.max_level


def ran_twice(c, name: str) -> bool:
    """Job `name`, triggered twice, runs twice on the cluster's worker (claims and results commit)."""
    if "w1" not in c.workers:
        c.start_worker("w1", slots=2)
    client = c.client(timeout=30)
    client.put_job(job_spec(name, schedule="", command="true"))
    for n in (1, 2):
        client.trigger_job(name)
        wait_until(lambda: len(list(client.list_executions(name, state="SUCCEEDED"))) == n,
                   timeout=60, what=f"run {n} of {name} to succeed")
    return True


def status(c, at: str) -> dict:
    return json.loads(schedctl(c, "cluster", "status", "-o", "json", at=at).stdout)


def test_a_rolling_upgrade_raises_the_feature_level_once_every_node_supports_it(cluster_factory):
    c = cluster_factory(size=3, test_mode=True, env={"SCHEDD_TEST_MODE": "1"})
    c.start_node("n1")
    c.start_node("n2")
    c.env[FEATURE_LEVEL_ENV] = "1"              # n3: the build before level 2
    c.start_node("n3")
    del c.env[FEATURE_LEVEL_ENV]
    c.wait_leader(timeout=60)
    at = c.nodes["n1"].grpc

    def every_node_reports(level3: int):
        s = status(c, at)
        levels = {n["id"]: int(n.get("max_feature_level", 0)) for n in s["nodes"]}
        return s if s.get("feature_level") and levels == {"n1": TOP, "n2": TOP, "n3": level3} else None

    s = wait_until(lambda: every_node_reports(1), timeout=60, what="every node to report its feature level")
    assert int(s["feature_level"]) == 1 and int(s["supported_feature_level"]) == 1
    assert all(n["version"] for n in s["nodes"])
    table = schedctl(c, "cluster", "status", at=at).stdout
    assert "feature level 1" in table.splitlines()[0] and "VERSION" in table and "LEVEL" in table

    refused = schedctl(c, "audit", "note", "upgrading n3", at=at, check=False)
    err = refused.stderr
    assert refused.returncode == 1, refused
    # The leader refuses it before proposing: "needs feature level 2, cluster is at 1" (or, if n3
    # leads, "unknown to this build (feature levels 1..1)").
    assert "feature level" in err and ("cluster is at 1" in err or "unknown to this build" in err), err

    # Claims and results still commit: below level 3 the leader proposes one start and one
    # finish per execution instead of the batched kinds n3 would refuse.
    assert ran_twice(c, "below-3")

    c.stop_node("n3")                           # upgrade n3: the same node, this build's table
    c.start_node("n3")
    def raised():            # every replica applies the raise: one a few ms behind the node
        s = status(c, at)    # asked reports the old level until it has (a flake when asserted at once)
        return s if (int(s.get("feature_level", 0)) == TOP
                     and all(int(n["feature_level"]) == TOP for n in s["nodes"]
                             if n["role"] != "unreachable")) else None
    wait_until(raised, timeout=90, what=f"the leader to raise the feature level to {TOP} on every node")
    assert ran_twice(c, "at-top")                   # the batched kinds now
    noted = schedctl(c, "audit", "note", "n3 upgraded", "-o", "json", at=at)
    assert json.loads(noted.stdout)["record"]["target"] == "n3 upgraded"
    # `audit list` is answered by the node asked (n1, maybe a follower a few ms behind the leader
    # that committed the note): wait for its replica to apply it
    listed = wait_until(lambda: (rows := json.loads(schedctl(c, "audit", "list", "--target", "n3 upgraded",
                                                             "-o", "json", at=at).stdout)) and rows,
                        timeout=30, what="the note in n1's audit trail")
    assert [r["target"] for r in listed] == ["n3 upgraded"]

    def same_state():        # nothing was applied differently on the old and the new nodes
        infos = [c.node_info(nid, with_digest=True, timeout=10) for nid in c.nodes]
        if any(i is None for i in infos):
            return None
        return infos if len({(i.digest_index, i.state_digest) for i in infos}) == 1 else None
    wait_until(same_state, timeout=60, what="every replica at the same index with the same digest")


def test_status_shows_a_down_node_as_unreachable_and_no_leader_as_none(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    leader = c.wait_leader(timeout=60)
    survivor, *others = [n for n in c.nodes if n != leader] + [leader]
    at = c.nodes[survivor].grpc
    down = others[0]
    c.kill_node(down)

    def down_shown():
        s = status(c, at)
        rows = {n["id"]: n for n in s["nodes"]}
        return s if rows[down]["role"] == "unreachable" and s.get("leader_id") else None
    s = wait_until(down_shown, timeout=60, what=f"{down} to show as unreachable")
    row = next(n for n in s["nodes"] if n["id"] == down)
    assert row["error"] and not row.get("version") and not row.get("commit_index")
    table = schedctl(c, "cluster", "status", at=at).stdout
    line = next(ln for ln in table.splitlines() if ln.startswith(down + " "))
    assert line.split()[1:8] == ["unreachable", "-", "-", "-", "-", "-", "-"], table
    assert "ERROR" in table.splitlines()[1]

    for nid in others[1:]:
        c.kill_node(nid)                        # the survivor alone: no quorum, no leader

    def leaderless():
        out = schedctl(c, "cluster", "status", at=at).stdout
        return out if out.startswith("Leader: none") else None
    out = wait_until(leaderless, timeout=90, what="the status to say there is no leader")
    assert "commit" not in out.splitlines()[0] and "no leader" in out.splitlines()[0]
    assert json.loads(schedctl(c, "cluster", "status", "-o", "json", at=at).stdout).get("leader_id") is None


def exited(node) -> int | None:
    """The node's exit code once its process has ended (None while it runs)."""
    return node.proc.poll() if node.proc is not None else None


def test_a_build_below_the_clusters_level_is_refused_at_join_and_at_restart(cluster_factory):
    """The cluster is at this build's top level. A node of the build before (levels
    1..TOP-1) asking to join is refused by the leader, and one of the cluster's own nodes
    restarted on that build (a rollback) refuses to start: neither applies anything, and the
    cluster runs every instant of its jobs exactly once meanwhile."""
    c = cluster_factory(size=3, test_mode=True, env={"SCHEDD_TEST_MODE": "1"})
    c.start()
    c.wait_leader(timeout=60)
    assert c.wait_feature_level(TOP, timeout=60) == TOP
    c.start_worker("w1", slots=4)
    client = c.client(timeout=30)
    client.put_job(job_spec("tick", schedule="@every 1s", command="true"))
    wait_until(lambda: len(list(client.list_executions("tick", state="SUCCEEDED"))) >= 2,
               timeout=60, what="the job to run")
    older = f"feature level {TOP - 1}; the cluster is at {TOP}"

    c.env[FEATURE_LEVEL_ENV] = str(TOP - 1)                 # the build before this one
    try:
        joiner = c.new_node("n4")
        c.start_node("n4")
        code = wait_until(lambda: exited(joiner), timeout=120, what="the older joiner to be refused")
        log = joiner.log.read_text()
        assert code != 0 and older in log and "refusing n4" in log, log[-2000:]
        assert "as a non-voter" not in log              # refused before it learned anything

        c.stop_node("n3")                                # a rollback of n3
        c.start_node("n3")
        code = wait_until(lambda: exited(c.nodes["n3"]), timeout=60, what="the rolled-back n3 to refuse")
        tail = c.nodes["n3"].log.read_text().splitlines()[-3:]
        assert code != 0 and any("this node runs schedd" in ln and older in ln and "upgrade this node" in ln
                                 for ln in tail), tail

        # Without the recorded level (a data dir from before it existed) the rollback starts,
        # and halts at the raise in its own log: it serves only its status, and says why.
        (c.root / "n3" / "feature_level").unlink()
        c.start_node("n3")
        # Seen through the cluster's status (the leader asks n3 with a node-signed call): the
        # halted n3 may have stopped applying before the token this test holds was made.
        info = wait_until(lambda: next((n for n in (c.status() or pb.ClusterStatus()).nodes
                                        if n.id == "n3" and n.halted), None),
                          timeout=60, what="the rolled-back n3 to halt")
        assert older in info.halted and "upgrade this node" in info.halted and info.role != "leader"
        refused = schedctl(c, "job", "list", at=c.nodes["n3"].grpc, check=False)
        assert refused.returncode != 0 and older in refused.stderr, refused
        assert "halted:" in c.nodes["n3"].log.read_text()
        c.stop_node("n3")
    finally:
        del c.env[FEATURE_LEVEL_ENV]
    c.start_node("n3")                                   # upgraded again: it rejoins
    wait_until(lambda: (s := c.status()) is not None and all(
        n.role != "unreachable" and not n.halted for n in s.nodes if n.id in ("n1", "n2", "n3")),
        timeout=90, what="n3 back on this build")
    assert "n4" not in voters_of(client)
    before = len(list(client.list_executions("tick", state="SUCCEEDED")))
    wait_until(lambda: len(list(client.list_executions("tick", state="SUCCEEDED"))) >= before + 2,
               timeout=60, what="the job to keep running")
    times = [e.scheduled_ms for e in client.list_executions("tick", limit=1000)]
    assert len(times) == len(set(times)), "an instant ran twice"


def voters_of(client) -> list[str]:
    return sorted(m.id for m in client.cluster_status().members if m.voter)
