"""A worker serves every shard of a sharded cluster: one link, ledger and share of the slots
per shard, against fake shard leaders (real gRPC on 127.0.0.1).

Each fake below leads one shard and routes by the `x-schedd-shard` metadata as a sharded node
does: a Connect for another shard is refused with FAILED_PRECONDITION and "leader=<that shard's
leader>", and Cluster.Status names the leader of the shard the header asks about. Waits are
polled conditions with generous deadlines, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from schedd_proto import scheduler_pb2 as pb
from schedd_worker.runtime import slot_shares
from tests.unit.test_worker_runtime import (  # noqa: F401 - fixtures
    DEADLINE, FakeLeader, Stream, gated, leaders, shell, until, wall_ms, workers)

TERMS = {0: 3, 1: 8, 2: 5}       # each shard's own Raft term: shard 2's is older than shard 1's


class ShardLeader(FakeLeader):
    """The leader of one shard of `shards`; `peers` are every shard's leader."""

    def __init__(self, shard: int, shards: int, *, terms: dict[int, int] = TERMS, routes_probes: bool = True,
                 node_info: bool = False, **kw) -> None:
        super().__init__(term=terms.get(shard, 4), leader_id=f"leader-{shard}", **kw)
        self.shard, self.shards = shard, shards
        self.peers: dict[int, ShardLeader] = {}
        self.routes_probes = routes_probes   # False: Status answers about shard 0 whatever the header
        self.node_info = node_info           # answers NodeInfo about the shard named (False: an older build)
        self.on_welcome: Callable[[ShardLeader], None] | None = None   # once, right after a Welcome

    async def NodeInfo(self, request, context):
        if not self.node_info:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "an older build")
        p = self.peers.get(int(self._saw_shard_header("NodeInfo", context) or 0), self)
        shards = self.shards if self.shards > 1 else 0    # the cluster's count, as a node says it
        if p is self:
            return pb.NodeStatus(id=self.leader_id, role="leader", term=self.term, shards=shards)
        return pb.NodeStatus(id=self.leader_id, role="follower", term=p.term, leader_grpc_address=p.address,
                             shards=shards)

    async def Status(self, request, context):
        self.statuses += 1
        k = int(self._saw_shard_header("Status", context) or 0)
        p = self.peers.get(k if self.routes_probes else 0, self)
        return pb.ClusterStatus(leader_id=p.leader_id, leader_grpc_address=p.address, term=p.term,
                                answered_by=self.leader_id)

    async def Connect(self, request_iterator, context):
        header = dict(context.invocation_metadata() or ()).get("x-schedd-shard")
        k = int(header or 0)
        if k != self.shard:
            self.connects += 1
            self.shard_headers.append(("Connect", header))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"not shard {k}'s leader; leader={self.peers[k].address}")
        async for msg in super().Connect(request_iterator, context):
            yield msg
            if msg.WhichOneof("kind") == "welcome" and self.on_welcome is not None:
                self.on_welcome(self)            # pushed on the stream just welcomed
                self.on_welcome = None


@pytest.fixture
async def cluster():
    made: list[ShardLeader] = []

    async def make(shards: int = 3, **kw) -> list[ShardLeader]:
        group = [await ShardLeader(k, shards, **kw).start() for k in range(shards)]
        for f in group:
            f.peers = dict(enumerate(group))
        made.extend(group)
        return group

    yield make
    for f in made:
        await f.stop()


def latest(leader: FakeLeader) -> Stream:
    return leader.streams[-1]


async def serving(w, group: list[ShardLeader]) -> None:
    """Every shard's leader holds a stream whose hello says that shard's share of the slots."""
    shares = slot_shares(w.rt.slots, len(group), w.rt.name)

    def ready() -> bool:
        return all(f.streams and f.stream.hello.slots == shares[k] and not f.stream.ended
                   and w.rt.lanes[k].link.connected for k, f in enumerate(group) if k in w.rt.lanes)
    await until(lambda: len(w.rt.lanes) == len(group) and ready(), what="a stream to every shard's leader")


# ------------------------------------------------------------------------------ tests

@pytest.mark.parametrize("shards", [0, 1])
async def test_an_unsharded_cluster_sees_the_worker_it_always_saw(leaders, workers, shards):
    leader = await leaders()
    leader.shards = shards                      # an older server (0) or a one-group cluster (1)
    w = workers(leader.address, slots=3)
    s = await leader.connected()
    await until(lambda: len(s.heartbeats()) >= 3, what="heartbeats")
    leader.assign(5, shell("true"))
    assert (await leader.result(5)).state == "SUCCEEDED"
    assert list(w.rt.lanes) == [0] and w.rt.shards == 1
    assert len(leader.streams) == 1 and s.hello.slots == 3      # no second hello, every slot offered
    assert {value for _, value in leader.shard_headers} == {None}   # no shard metadata on any call
    assert w.rt.busy == 0 and w.rt._slots.pool is not None and w.rt._slots.pool.total == 3


async def test_a_welcome_with_three_shards_opens_a_stream_per_shard_with_its_metadata(cluster, workers):
    group = await cluster(3)
    w = workers([f.address for f in group], name="w-shards", slots=6)
    await serving(w, group)
    shares = slot_shares(6, 3, "w-shards")
    assert sum(shares) == 6
    # shard 0's first hello offered every slot (the shard count was unknown): it said hello again
    assert [s.hello.slots for s in group[0].streams] == [6, shares[0]]
    # each fake takes a Connect only with its own shard's header: a stream on every one proves
    # that shard k's link sent `x-schedd-shard: k`; shard 0's link sends none, as always
    assert {v for f in group for m, v in f.shard_headers} <= {None, "1", "2"}
    assert {v for m, v in group[0].shard_headers if m == "Connect"} >= {None}
    for k, f in enumerate(group):
        assert f.stream.hello.name == "w-shards" and f.stream.hello.incarnation == w.rt.incarnation
        assert w.rt.lanes[k].link.max_term_seen == TERMS[k]     # each shard's own term
    assert any(v == "2" for f in group for m, v in f.shard_headers if m == "Status"), \
        "shard 2's link asks the nodes about shard 2"
    # an assignment of shard 2's term (5) is taken although shard 1's leader is in term 8
    group[2].assign(21, shell("true"))
    assert (await group[2].result(21)).state == "SUCCEEDED"


async def test_a_worker_that_learns_the_shard_count_from_its_search_says_hello_once_and_keeps_what_it_was_sent(
        cluster, workers, tmp_path: Path):
    """The nodes' NodeInfo answers say the cluster has 3 shards: shard 0's first hello already
    offers shard 0's share, every shard gets one stream, and what shard 0's leader pushes as soon
    as it welcomed the worker (a run due when the worker started) runs there, on that stream: a
    second hello would have ended the stream it came on, unread, and the leader would have given
    it up only after a lease."""
    group = await cluster(3, node_info=True)
    group[0].on_welcome = lambda f: f.assign(7, shell(f"touch {tmp_path / 'ran7'}"))
    w = workers([f.address for f in group], name="w-shards", slots=6)
    await serving(w, group)
    shares = slot_shares(6, 3, "w-shards")
    assert [[s.hello.slots for s in f.streams] for f in group] == [[shares[k]] for k in range(3)]
    assert (await group[0].result(7)).state == "SUCCEEDED" and (tmp_path / "ran7").exists()
    assert len(group[0].streams) == 1 and w.rt.lanes[0].link.connections == 1


async def test_results_go_back_to_the_shard_that_assigned_them_even_with_equal_tokens(
        cluster, workers, tmp_path: Path):
    group = await cluster(3)
    w = workers([group[0].address], slots=6)
    await serving(w, group)
    gate = tmp_path / "go"
    group[1].assign(7, gated(gate, "echo from-1"), job="a")
    group[2].assign(7, gated(gate, "echo from-2"), job="b")
    await until(lambda: w.rt.running_by_shard.get(1) == {7: "a@7"} and w.rt.running_by_shard.get(2) == {7: "b@7"},
                what="token 7 held for shard 1 and for shard 2")
    await until(lambda: all(7 in hb.running_tokens for f in group[1:] for hb in f.stream.heartbeats()[-1:]),
                what="each shard's heartbeats list its token 7")
    assert not any(7 in hb.running_tokens for hb in group[0].stream.heartbeats())
    gate.touch()
    r1, r2 = await group[1].result(7), await group[2].result(7)
    assert (r1.execution_id, r1.output_tail.strip()) == ("a@7", "from-1")
    assert (r2.execution_id, r2.output_tail.strip()) == ("b@7", "from-2")
    await until(lambda: not any(lane.ledger.owed for lane in w.rt.lanes.values()), what="both acknowledged")
    assert {r.execution_id for r in group[1].results()} == {"a@7"}
    assert {r.execution_id for r in group[2].results()} == {"b@7"}
    assert group[0].results() == []


async def test_the_slot_limit_holds_across_shards(cluster, workers, tmp_path: Path):
    """Fewer slots than shards: each leader is offered one, at most two run at once, and a freed
    slot goes to the attempt that waited longest, whichever shard it is of."""
    group = await cluster(3)
    w = workers([group[0].address], slots=2, ahead=1, name="w-pool")
    await serving(w, group)
    assert [f.stream.hello.slots for f in group] == [1, 1, 1]
    gates = {t: tmp_path / f"go-{t}" for t in (30, 31, 32, 33)}

    def job(t: int) -> dict:
        return shell(f"touch '{tmp_path}/started-{t}'; while [ ! -e '{gates[t]}' ]; do sleep 0.02; done")

    def started() -> set[int]:
        return {t for t in gates if (tmp_path / f"started-{t}").exists()}

    group[0].assign(30, job(30))
    group[1].assign(31, job(31))
    await until(lambda: started() == {30, 31}, what="shard 0's and shard 1's attempts started")
    group[2].assign(32, job(32))                 # its own share is free, the process's slots are not
    await until(lambda: 32 in w.rt.running_by_shard[2], what="shard 2's attempt held")
    await until(lambda: w.rt.lanes[2].slots.ready, what="shard 2's attempt waits for a slot")
    group[0].assign(33, job(33))                 # held beyond shard 0's share (ahead), due later
    await until(lambda: w.rt.lanes[0].slots.ready, what="shard 0's second attempt waits for a slot")
    group[0].assign(34, shell("true"))           # beyond shard 0's share + ahead: refused, as today
    r = await group[0].result(34)
    assert (r.state, r.error) == ("REJECTED", "no free slot")
    assert w.rt.busy == 2 and started() == {30, 31}
    assert w.rt.lanes[2].ledger.held[32].phase == w.rt.lanes[0].ledger.held[33].phase == "waiting"
    gates[30].touch()                            # shard 0 frees a slot: shard 2 waited longer
    await until(lambda: 32 in started(), what="shard 2's attempt started on the slot shard 0 freed")
    assert (await group[0].result(30)).state == "SUCCEEDED"
    assert w.rt.busy == 2 and w.rt.lanes[0].ledger.held[33].phase == "waiting" and 33 not in started()
    gates[31].touch()                            # shard 1 frees one: shard 0's waiting attempt
    await until(lambda: 33 in started(), what="shard 0's second attempt started")
    assert w.rt.busy == 2
    gates[32].touch()
    gates[33].touch()
    assert (await group[2].result(32)).state == "SUCCEEDED"
    assert (await group[0].result(33)).state == "SUCCEEDED"
    await until(lambda: w.rt.busy == 0, what="every slot free")


async def test_draining_covers_every_shard(cluster, workers, tmp_path: Path):
    group = await cluster(3)
    w = workers([group[0].address], slots=6, drain_grace_s=20.0)
    await serving(w, group)
    gate = tmp_path / "go"
    group[1].assign(91, gated(gate, "echo drained-ok"))
    group[2].assign(92, shell("true"), due_ms=wall_ms() + 60_000)
    await until(lambda: 91 in w.rt.running_by_shard[1] and 92 in w.rt.running_by_shard[2], what="both accepted")
    streams = [latest(f) for f in group]
    w.stop.set()
    await until(lambda: all(any(hb.draining for hb in s.heartbeats()) for s in streams),
                what="a draining heartbeat to every shard's leader")
    r92 = await group[2].result(92)
    assert (r92.state, r92.error) == ("REJECTED", "worker draining")
    group[0].assign(93, shell("true"))           # no new work on any shard while draining
    assert (await group[0].result(93)).state == "REJECTED"
    assert not w.task.done() and 91 in w.rt.running_by_shard[1]
    gate.touch()
    r91 = await group[1].result(91)
    assert (r91.state, r91.output_tail.strip()) == ("SUCCEEDED", "drained-ok")
    await asyncio.wait_for(w.task, DEADLINE)
    assert not any(lane.ledger.owed or lane.ledger.held for lane in w.rt.lanes.values())
    await until(lambda: all(s.ended for s in streams), what="every shard's stream half-closed")


async def test_a_split_adds_the_new_shards_and_every_stream_says_hello_with_its_new_share(cluster, workers):
    group = await cluster(3)
    for f in group:
        f.shards = 2                             # the cluster has two shards (the third fake idles)
    w = workers([group[0].address], slots=6)
    await serving(w, group[:2])
    assert [f.stream.hello.slots for f in group[:2]] == [3, 3] and not group[2].streams
    for f in group:
        f.shards = 3                             # a split: the next Welcome says three
    group[1].end_stream()                        # shard 1 reconnects and hears of it
    await serving(w, group)
    assert [f.stream.hello.slots for f in group] == [2, 2, 2]
    assert w.rt.shards == 3 and sum(lane.slots.count for lane in w.rt.lanes.values()) == 6


async def test_a_welcome_for_another_shard_is_not_taken(leaders, workers):
    """A node that ignored the shard header would welcome shard 1's stream as shard 0's: its
    tokens are another group's, so the link refuses that stream and keeps looking."""
    leader = await leaders()
    leader.shards = 3                            # says three shards, but serves shard 0 to everyone
    w = workers(leader.address, slots=3)
    await until(lambda: sum(1 for m, v in leader.shard_headers if m == "Connect" and v == "1") >= 2,
                what="shard 1's link tried twice")
    assert w.rt.lanes[1].link.connections == 0 and not w.rt.lanes[1].link.connected
    await until(lambda: w.rt.lanes[0].link.connected, what="shard 0's stream (its hello again with its share)")


async def test_probes_answered_about_shard_0_still_find_every_shards_leader_and_keep_it(cluster, workers):
    """A node may answer a worker's Status about shard 0 whatever its header: shard 0's leader
    and term (here newer than the others') must neither hide shard k's leader nor bounce the
    stream to it (its Connect is redirected to shard k's leader)."""
    group = await cluster(3, terms={0: 9, 1: 8, 2: 5}, routes_probes=False)
    w = workers([f.address for f in group], slots=3)
    await serving(w, group)
    await until(lambda: all(len(f.stream.heartbeats()) >= 30 for f in group), what="3 s of heartbeats")
    assert [w.rt.lanes[k].link.connections for k in (1, 2)] == [1, 1]   # never dropped for shard 0's term
    assert [w.rt.lanes[k].link.max_term_seen for k in range(3)] == [9, 8, 5]
    group[2].end_stream()                        # shard 2's leader goes: found again past a redirect
    await until(lambda: w.rt.lanes[2].link.connections == 2 and w.rt.lanes[2].link.connected,
                what="shard 2 reconnected")
    group[2].assign(41, shell("true"))
    assert (await group[2].result(41)).state == "SUCCEEDED"


async def test_each_shards_watch_follows_its_own_shards_newer_leader(cluster, workers):
    """A node answers NodeInfo about the shard its header names: shard 1's stream to a leader
    that keeps it open after a newer leader of shard 1 was elected (cut off from its peers, not
    stepped down yet) moves to the new one, and the other shards' streams stay where they are."""
    group = await cluster(3, node_info=True)
    new = await ShardLeader(1, 3, terms={1: TERMS[1] + 1}, node_info=True).start()
    try:
        new.peers = group[0].peers              # a follower of shard 1's old leader, until elected
        w = workers([f.address for f in group] + [new.address], slots=3)
        await serving(w, group)
        old = group[1].stream
        before = [w.rt.lanes[k].link.connections for k in (0, 2)]
        new.peers = {**group[0].peers, 1: new}  # shard 1 elected `new`; the old leader still leads
        for f in group:
            f.peers[1] = new
        s_new = await new.connected()           # the watch of shard 1's link found it
        assert s_new.hello.max_term_seen == TERMS[1]
        await until(lambda: old.ended, what="the stale stream of shard 1 to be dropped")
        link = w.rt.lanes[1].link
        await until(lambda: link.connected and link.leader_address == new.address, what="shard 1 on its new leader")
        assert link.max_term_seen == TERMS[1] + 1
        assert [w.rt.lanes[k].link.connections for k in (0, 2)] == before   # shard 1's term moved them not
        new.assign(51, shell("true"))
        assert (await new.result(51)).state == "SUCCEEDED"
    finally:
        await new.stop()
