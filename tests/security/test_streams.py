"""Worker streams (who may say what, and their limits): worker streams on a real gRPC server (in process, on
127.0.0.1) in front of the leader's WorkerHub and Assigner, with a fake Raft node that applies
each entry at once and a clock the test moves.

- a result counts only from the stream of the worker its attempt was assigned to;
- a second stream under a live worker's name is refused, the live one keeps running;
- a worker may claim at most `limits.max_worker_slots` slots, and work is shared fairly;
- a node holds at most `limits.max_worker_streams` streams (a silent one included, until its
  hello times out);
- per worker token: `max_slots` holds across all its streams, it holds at most
  `limits.max_worker_streams_per_token` streams, and a worker reconnecting from the same process
  replaces its own stale stream;
- over Workers.ConnectNode (one stream per worker and node) the same: each sub-stream is counted
  and checked as a Connect stream, its refusal ends only it, and the node streams themselves are
  capped by the same limits and ended when they carry no sub-stream.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from schedd.core import acl as A
from schedd.core import commands as C
from schedd.leader.assigner import Assigner
from schedd.leader.workers import WorkerHub
from schedd.runtime import config as cfgmod
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd.ports.fakes import wait_until_async
from tests.support.leader import clock_of, kinds, node_over
from tests.support.state import T0, Harness

TIMEOUT_S = 30.0          # generous: a loaded 2-core machine


class Stream:
    """One worker's side of a Connect stream."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = pb_grpc.WorkersStub(channel).Connect()

    async def hello(self, name: str, slots: int = 1, tokens=(), incarnation: str = "") -> pb.LeaderMessage:
        await self.call.write(pb.WorkerMessage(hello=pb.WorkerHello(name=name, slots=slots, incarnation=incarnation,
                                                                    running_tokens=list(tokens))))
        return await self.read()

    async def read(self) -> pb.LeaderMessage:
        return await asyncio.wait_for(self.call.read(), TIMEOUT_S)

    async def result(self, a: pb.Assignment, state: str = "SUCCEEDED") -> None:
        await self.call.write(pb.WorkerMessage(result=pb.AttemptResult(
            execution_id=a.execution_id, fencing_token=a.fencing_token, state=state)))

    async def heartbeat(self) -> None:
        await self.call.write(pb.WorkerMessage(heartbeat=pb.Heartbeat()))


class Rig:
    def __init__(self, **hub_kw) -> None:
        self.h = Harness()
        self.node = node_over(self.h)
        self.hub = WorkerHub(self.node, clock_of(self.h), lease_ms=10_000, **hub_kw)
        self.tasks: list[asyncio.Future] = []
        self.assigner = Assigner(self.node, clock_of(self.h), self.hub, 1_500, self._spawn)
        self.server = grpc.aio.server()
        pb_grpc.add_WorkersServicer_to_server(self.hub, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.channels: list[grpc.aio.Channel] = []

    def _spawn(self, coro) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    async def settle(self) -> None:
        while self.tasks:
            await self.tasks.pop()

    async def step(self) -> None:
        self.assigner.step(self.h.now)
        await self.settle()

    def stream(self) -> Stream:
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.channels.append(ch)
        return Stream(ch)

    async def until(self, predicate, what: str) -> None:
        """Wait for a condition the server reaches asynchronously (never a fixed sleep), settling
        the leader's tasks between looks."""
        async def settled():
            await self.settle()
            return predicate()
        if not predicate():
            await wait_until_async(settled, timeout=TIMEOUT_S, what=what)


@pytest.fixture
async def rig():
    made: list[Rig] = []

    async def make(**kw) -> Rig:
        r = Rig(**kw)
        await r.server.start()
        made.append(r)
        return r

    yield make
    for r in made:
        for ch in r.channels:
            await ch.close()
        await r.server.stop(0)


def welcome(msg: pb.LeaderMessage) -> bool:
    return msg.WhichOneof("kind") == "welcome"


async def refused(stream: Stream, name: str, slots: int = 1) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stream.hello(name, slots)
    return e.value


async def test_result_only_from_the_assigned_stream(rig):
    r = await rig()
    w1, w2, w3 = r.stream(), r.stream(), r.stream()
    assert welcome(await w1.hello("w1")) and welcome(await w2.hello("w2"))
    r.h.put(name="j1", schedule="@every 60s")
    r.h.plan_and_fire()
    r.hub.conns["w2"].draining = True          # so that w1 gets it
    await r.step()
    a = (await w1.read()).assignment
    assert a.job == "j1"
    # another worker's stream reports the attempt with its (readable) token: refused
    await w2.result(a, "FAILED")
    ack = (await w2.read()).ack
    assert (ack.fencing_token, ack.outcome) == (a.fencing_token, "refused")
    assert C.FINISH not in kinds(r.node) and r.h.state.execs[("j1", T0)].state == "RUNNING"
    # a newcomer cannot adopt it by naming the token in its hello either
    assert welcome(await w3.hello("w3", tokens=[a.fencing_token]))
    assert a.fencing_token not in r.hub.conns["w3"].running
    # the assigned worker's own result commits
    await w1.result(a)
    ack = (await w1.read()).ack
    assert ack.outcome == "committed" and r.h.state.execs[("j1", T0)].state == "SUCCEEDED"


async def test_same_worker_name_does_not_close_the_live_stream(rig):
    r = await rig()
    live, impostor = r.stream(), r.stream()
    assert welcome(await live.hello("w1"))
    conn = r.hub.conns["w1"]
    err = await refused(impostor, "w1")
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS and "w1" in err.details()
    assert r.hub.conns["w1"] is conn and not conn.closed
    r.h.put(name="j1", schedule="@every 60s")   # the live stream still gets work
    r.h.plan_and_fire()
    await r.step()
    assert (await live.read()).assignment.job == "j1"
    # once the live stream has gone silent (no heartbeat for 2/3 of a lease), a reconnect under
    # the name is a replacement, as after a network cut the leader has not noticed yet
    r.h.now += 7_000
    again = r.stream()
    assert welcome(await again.hello("w1"))
    assert r.hub.conns["w1"] is not conn and conn.closed


async def test_worker_slot_claim_is_capped(rig):
    r = await rig(max_slots=8)
    err = await refused(r.stream(), "greedy", slots=100_000)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "100000 slots" in err.details() and "limits.max_worker_slots" in err.details()
    assert "greedy" not in r.hub.conns
    big, small = r.stream(), r.stream()
    assert welcome(await big.hello("big", slots=8)) and welcome(await small.hello("small", slots=2))
    for i in range(4):
        r.h.put(name=f"j{i}", schedule="@every 60s")
    r.h.plan_and_fire()
    await r.step()
    share = {name: len(c.running) for name, c in r.hub.conns.items()}
    assert share == {"big": 2, "small": 2}, "the worker with the most slots took more than its share"


async def test_worker_streams_per_node_are_capped(rig):
    r = await rig(max_streams=2, hello_timeout_s=1.0)
    silent = r.stream()
    await silent.call.wait_for_connection()
    await r.until(lambda: r.hub.streams == 1, "the silent stream to count")
    assert welcome(await r.stream().hello("w1"))
    err = await refused(r.stream(), "w2")
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limits.max_worker_streams" in err.details() and "2" in err.details()
    with pytest.raises(grpc.aio.AioRpcError) as e:   # no hello in time: dropped, the slot is free
        await silent.read()
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await r.until(lambda: r.hub.streams == 1, "the silent stream to be dropped")
    assert welcome(await r.stream().hello("w2"))


def test_worker_caps_come_from_the_node_config():
    base = {"node_id": "n1", "data_dir": "/tmp/x", "raft_address": "127.0.0.1:1",
            "grpc_address": "127.0.0.1:2"}
    d = cfgmod.from_dict(base).limits
    assert (d.max_worker_streams, d.max_worker_slots) == (512, 256)
    got = cfgmod.from_dict({**base, "limits": {"max_worker_streams": 10, "max_worker_slots": 3}}).limits
    assert (got.max_worker_streams, got.max_worker_slots) == (10, 3)
    with pytest.raises(cfgmod.ConfigError, match=r"\[limits\]\.max_worker_slots"):
        cfgmod.from_dict({**base, "limits": {"max_worker_slots": 0}})


def _worker_token(hub: WorkerHub, accessor: str, max_slots: int) -> None:
    """Calls on `hub` come with this worker token's principal (as the interceptor hands it)."""
    p = A.Principal(f"token:{accessor}", "worker", tuple(A._grants(A.MANAGEMENT)), accessor=accessor,
                    max_slots=max_slots)
    hub.acl_enabled, hub.identify = True, lambda: p


async def test_a_worker_tokens_max_slots_holds_across_its_streams(rig):
    r = await rig()
    _worker_token(r.hub, "tok1", max_slots=4)
    a, b = r.stream(), r.stream()
    assert welcome(await a.hello("a", slots=2)) and welcome(await b.hello("b", slots=2))
    err = await refused(r.stream(), "c", slots=1)               # a fifth slot on the same token
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "allows 4 across all its workers" in err.details() and "a, b" in err.details()
    assert sorted(r.hub.conns) == ["a", "b"]
    _worker_token(r.hub, "tok2", max_slots=4)                    # another token has its own share
    assert welcome(await r.stream().hello("c", slots=4))


async def test_streams_per_worker_token_are_capped_and_others_still_connect(rig):
    r = await rig(max_streams_per_token=2, hello_timeout_s=5.0)
    _worker_token(r.hub, "stolen", max_slots=100)
    assert welcome(await r.stream().hello("s1")) and welcome(await r.stream().hello("s2"))
    err = await refused(r.stream(), "s3")                        # registered streams at the cap
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limits.max_worker_streams_per_token = 2" in err.details()
    silent = r.stream()                                          # a handshake: the reconnect room
    await silent.call.wait_for_connection()
    await r.until(lambda: r.hub.token_streams.get("stolen") == 3, "the handshake to count")
    err = await refused(r.stream(), "s4")                        # refused before its hello
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "plus 1 to reconnect" in err.details()
    _worker_token(r.hub, "honest", max_slots=4)
    assert welcome(await r.stream().hello("h1"))                 # not locked out
    assert r.hub.streams == 4 and r.hub.token_streams["honest"] == 1


async def test_a_reconnect_of_the_same_process_replaces_its_own_live_stream(rig):
    r = await rig(max_streams_per_token=1)
    _worker_token(r.hub, "tok1", max_slots=2)
    first = r.stream()
    assert welcome(await first.hello("w1", slots=2, incarnation="inc-1"))
    conn = r.hub.conns["w1"]
    # a network blip: the worker gave up on its stream, the leader has not noticed (still live)
    err = await refused(r.stream(), "w1")                        # another process: still refused
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    again = r.stream()
    assert welcome(await again.hello("w1", slots=2, incarnation="inc-1"))
    assert r.hub.conns["w1"] is not conn and conn.closed
    await r.until(lambda: r.hub.token_streams.get("tok1") == 1, "the replaced stream to end")


class NodeStream:
    """One worker's side of a ConnectNode stream, frame by frame."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = pb_grpc.WorkersStub(channel).ConnectNode()

    async def hello(self, sub: int, name: str, slots: int = 1) -> pb.NodeLeaderMessage:
        await self.call.write(pb.NodeWorkerMessage(stream=sub, shard=0, message=pb.WorkerMessage(
            hello=pb.WorkerHello(name=name, slots=slots))))
        return await asyncio.wait_for(self.call.read(), TIMEOUT_S)


def node_stream(r: Rig) -> NodeStream:
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{r.port}")
    r.channels.append(ch)
    return NodeStream(ch)


async def test_node_streams_and_their_sub_streams_are_held_to_the_stream_limits(rig):
    r = await rig(max_streams=2, hello_timeout_s=1.0)
    a = node_stream(r)
    assert (await a.hello(1, "w1")).message.HasField("welcome")
    assert (await a.hello(2, "w2")).message.HasField("welcome")        # counted by the hub: 2 of 2
    assert r.hub.streams == 2 and r.hub.mux.active == 1
    b = node_stream(r)
    got = await b.hello(1, "w3")                                        # refused: that sub-stream only
    assert got.closed.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "limits.max_worker_streams" in got.closed.details
    c = node_stream(r)                                                  # a third node stream: the cap
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await c.hello(1, "w4")
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(grpc.aio.AioRpcError) as e:                      # b carries nothing: ended
        await asyncio.wait_for(b.call.read(), TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await r.until(lambda: r.hub.mux.active == 1 and r.hub.streams == 2, "b to be dropped, a to carry on")


async def test_node_streams_per_worker_token_are_capped(rig):
    r = await rig(max_streams_per_token=1, hello_timeout_s=5.0)
    _worker_token(r.hub, "stolen", max_slots=100)
    a, b = node_stream(r), node_stream(r)                               # one, plus one to reconnect
    assert (await a.hello(1, "s1")).message.HasField("welcome")
    got = await b.hello(1, "s2")                                        # its hub refuses the sub-stream
    assert got.closed.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await node_stream(r).hello(1, "s3")
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "node streams" in e.value.details()
