"""A cluster quota and the forecast when group 0's leader does not host every shard (3 nodes x 4
shards, TLS and access control on; a fourth node joins and a shard's replica is moved off group
0's leader). Team q may run 4 attempts at once: its jobs first run in every shard, then the
demand moves into the moved shard, whose share the balancer raises to the whole quota by reading
that shard's use from a node holding it, and the attempts never overlap more than 4 deep. The
forecast counts the moved shard's jobs too, asked of group 0's leader and of another node. Should group 0's leader change meanwhile (an
election on a busy machine), the raise might have been read locally: the step runs again with a
new team."""

from __future__ import annotations

import grpc
import pytest

from schedd.core.shards import shard_of
from schedd.ports.fakes import wait_until
from schedd_client import Client, job_spec
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from tests.integration.test_shard_move import replicas
from tests.integration.test_shards import SHARDS, history, leaders, names_over_shards
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

MOVED = 2
QUOTA = 4
NODES = ("n1", "n2", "n3", "n4")


def zero_leader(client) -> str:
    out: list[str] = []
    wait_until(lambda: out.append(leaders(client).get(0, "")) or out[-1], timeout=60, what="group 0's leader")
    return out[-1]


def off_group_0s_leader(c, client, shard: int) -> str:
    """Move `shard`'s replica off group 0's leader (to the node holding none), so that the
    leader reads that shard from another node; group 0's leader then."""
    for _ in range(4):
        zero = zero_leader(client)
        held = replicas(client, shard)
        if zero not in held:
            return zero
        to = next(n for n in NODES if n not in held)
        schedctl(c, "shard", "move", str(shard), "--from", zero, "--to", to)
        wait_until(lambda: zero not in replicas(client, shard), timeout=60, what=f"shard {shard} off {zero}")
    raise AssertionError(f"group 0's leader kept a replica of shard {shard}")


def zero_term(client) -> int:
    return next(i.term for i in client.list_shards().items if i.shard == 0)


def use_in(c, nid: str, shard: int, key: str) -> pb.QuotaUse | None:
    """A team's use in `shard` as node `nid`'s replica has it (ListShards with quota_keys)."""
    with c.channel(nid) as ch:
        try:
            answer = pb_grpc.ClusterStub(ch).ListShards(pb.ListShardsRequest(shard=shard, quota_keys=[key]), timeout=5)
        except grpc.RpcError:
            return None
    return answer.items[0].quota_uses[0]


def shift_demand(c, client, team: str, attempt: int) -> tuple[str | None, list[str], list[str]]:
    """Team `team` runs a job in every shard, then its demand moves into shard MOVED, whose share
    the balancer must raise to the whole quota. Group 0's leader then (None if group 0's leader
    changed meanwhile, a busy machine's election: the raise proves nothing then), and the team's
    jobs: one in each shard, and those in MOVED."""
    key = f"team:{team}"
    spread = names_over_shards(1, prefix=f"spread{attempt}")        # one job of the team in each shard
    hot = [n for n in names_over_shards(4, prefix=f"hot{attempt}") if shard_of(n, SHARDS) == MOVED]
    zero = off_group_0s_leader(c, client, MOVED)
    term = zero_term(client)
    holder = next(n for n in replicas(client, MOVED))
    assert client.set_quota(key, QUOTA).limit == QUOTA
    client.put_jobs([job_spec(n, schedule="@every 1s", team=team, command="sleep 2") for n in spread])
    wait_until(lambda: all(v >= 1 for v in ran(client, spread).values()), timeout=120,
               what=f"a run of team {team}'s job in every shard")
    # The demand moves into the moved shard: the other shards' jobs pause, four more arrive there.
    for n in spread:
        client.pause_job(n)
    client.put_jobs([job_spec(n, schedule="@every 1s", team=team, command="sleep 2") for n in hot])
    wait_until(lambda: (u := use_in(c, holder, MOVED, key)) is not None and u.has_share and u.share == QUOTA,
               timeout=120, what=f"shard {MOVED}'s share of {key} raised to the whole quota")
    wait_until(lambda: (u := use_in(c, holder, MOVED, key)) is not None and u.running >= 3, timeout=60,
               what=f"3 or more attempts of team {team} running at once in shard {MOVED}")
    if zero_leader(client) != zero or zero_term(client) != term:
        for n in hot:
            client.pause_job(n)
        return None, spread, hot
    assert zero not in replicas(client, MOVED)
    return zero, spread, hot


def ran(client, names) -> dict[str, int]:
    return {n: sum(1 for e in history(client, n) if e.state == "SUCCEEDED") for n in names}


def deepest(client, names) -> int:
    """The most attempts of these jobs that ever ran at once."""
    spans = [(a.started_ms, a.ended_ms) for n in names for e in history(client, n) for a in e.attempts
             if a.started_ms and a.ended_ms]
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    depth = most = 0
    for _, step in edges:
        depth += step
        most = max(most, depth)
    return most


def test_a_quota_follows_demand_into_a_shard_group_0s_leader_does_not_host(cluster_factory):
    c = cluster_factory(size=3, shards=SHARDS, scheduler={"lease_ms": 3000})
    c.start()
    c.wait_leader(timeout=60)
    c.wait_shards(timeout=60)
    c.start_worker("w1", slots=8)
    with c.client(timeout=30) as client:
        wait_until(lambda: client.list_shards().map_version >= 1, timeout=60, what="the shard map recorded")
        c.new_node("n4")
        c.start_node("n4")
        wait_until(lambda: "n4" in {m.id for m in client.cluster_status().members}, timeout=90, what="n4 joined")
        wait_until(lambda: c.node_info("n4") is not None, timeout=60, what="n4 serving")
        teams: list[tuple[str, list[str]]] = []
        zero: str | None = None
        for attempt in range(3):                                   # again with a new team if group 0's leader moved
            team = "q" if attempt == 0 else f"q{attempt}"
            zero, spread, hot = shift_demand(c, client, team, attempt)
            teams.append((team, spread + hot))
            if zero is not None:
                break
        assert zero is not None, "group 0's leader changed in each of 3 tries: the balancing was never done " \
                                 "from another node's read alone"

        # The forecast counts every shard's jobs: the moved shard's come from its leader.
        counted = len(hot)                                         # every other job is paused
        for nid in (zero, next(n for n in NODES if n != zero)):
            with Client([c.nodes[nid].grpc], security=c.security(), timeout=30) as one:
                fc = one.forecast(by="team", stale_ok=nid != zero)
                assert fc.jobs == counted, (nid, fc.jobs, fc.note)
                assert {g.key: g.jobs for g in fc.groups} == {teams[-1][0]: counted}
                assert "could not be counted" not in fc.note, fc.note
                assert fc.groups[0].peak_seconds[0].due >= 1
        client.pause_job(hot[0])
        assert client.forecast().jobs == counted - 1
        for team, names in teams:
            assert deepest(client, names) <= QUOTA, f"more than {QUOTA} attempts of team {team} ran at once"
