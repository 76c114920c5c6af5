"""One worker stream per node (Workers.ConnectNode): the node's demultiplexer in process, and a
worker against fake shard leaders that serve it (real gRPC on 127.0.0.1).

The node side: each shard's sub-stream is served by that shard's Connect handler, whose abort
ends that sub-stream only (a closed frame with its status); a frame of a sub-stream that ended
never opens another; the worker's half-close ends the whole stream once every sub-stream has;
an idle stream is ended; the handler sees the outer call's identity. The worker side: every
lane's stream to a node is a sub-stream of one ConnectNode call per node, redirects and
results work over it as over Connect, and a node answering UNIMPLEMENTED gets Connect.
"""

from __future__ import annotations

import asyncio
import contextvars

import grpc
import pytest

from schedd.leader.worker_mux import MuxLimits, SubStreamAborted, WorkerMux
from schedd_client.channels import Security
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_worker.node_streams import NodeStreams
from schedd_worker.runtime import slot_shares
from tests.unit.test_worker_runtime import shell, until, workers  # noqa: F401 - fixtures
from tests.unit.test_worker_shards import TERMS, ShardLeader

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="")


class Aborted(Exception):
    def __init__(self, code, details) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class Outer:
    """The outer call's context (what grpc hands the servicer)."""

    def __init__(self) -> None:
        self.metadata = (("authorization", "Bearer t"),)

    async def abort(self, code, details="", trailing_metadata=()):
        raise Aborted(code, details)

    def invocation_metadata(self):
        return self.metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    def time_remaining(self):
        return None


class Frames:
    """The worker's side of the outer stream, in process: frames in, frames out."""

    def __init__(self, mux: WorkerMux, context: Outer | None = None) -> None:
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.got: list[pb.NodeLeaderMessage] = []
        self.error: Exception | None = None
        self.ended = asyncio.Event()
        self.task = asyncio.create_task(self._run(mux, context or Outer()))

    async def _requests(self):
        while (frame := await self.inbox.get()) is not None:
            yield frame

    async def _run(self, mux: WorkerMux, context: Outer) -> None:
        try:
            async for frame in mux.ConnectNode(self._requests(), context):
                self.got.append(frame)
        except Exception as e:  # noqa: BLE001 - the test reads it
            self.error = e
        finally:
            self.ended.set()

    def hello(self, stream: int, shard: int, name: str = "w1") -> None:
        self.inbox.put_nowait(pb.NodeWorkerMessage(stream=stream, shard=shard, message=pb.WorkerMessage(
            hello=pb.WorkerHello(name=name, slots=1))))

    def heartbeat(self, stream: int, shard: int) -> None:
        self.inbox.put_nowait(pb.NodeWorkerMessage(stream=stream, shard=shard, message=pb.WorkerMessage(
            heartbeat=pb.Heartbeat())))

    def close(self, stream: int, shard: int, code: int = 0) -> None:
        self.inbox.put_nowait(pb.NodeWorkerMessage(stream=stream, shard=shard, closed=pb.SubStreamClosed(code=code)))

    def of(self, stream: int) -> list[pb.NodeLeaderMessage]:
        return [f for f in self.got if f.stream == stream]

    def closed(self, stream: int) -> pb.SubStreamClosed | None:
        return next((f.closed for f in self.of(stream) if f.WhichOneof("kind") == "closed"), None)


class Shards:
    """Fake Connect handlers: a Welcome per hello naming the shard and the caller's identity,
    an ack per heartbeat; `refuse` shards abort as a node that does not lead them."""

    def __init__(self, refuse: frozenset[int] = frozenset()) -> None:
        self.refuse = refuse
        self.open: dict[int, int] = {}           # shard -> sub-streams being served now
        self.metadata: list = []

    def route(self, k: int):
        if k >= 8:
            return grpc.StatusCode.UNAVAILABLE, f"this node holds no replica of shard {k}"
        return lambda requests, context: self.connect(k, requests, context)

    async def connect(self, k: int, requests, context):
        self.metadata.append(context.invocation_metadata())
        if k in self.refuse:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not the leader; leader=127.0.0.1:9")
        first = await anext(aiter(requests))
        self.open[k] = self.open.get(k, 0) + 1
        try:
            yield pb.LeaderMessage(welcome=pb.Welcome(leader_id=f"{WHO.get()}@{first.hello.name}", shard=k))
            async for msg in requests:
                if msg.WhichOneof("kind") == "heartbeat":
                    yield pb.LeaderMessage(ack=pb.ResultAck(fencing_token=k, outcome="committed"))
        finally:
            self.open[k] -= 1


def mux_of(shards: Shards, *, idle_s: float = 30.0, max_streams: int = 10) -> WorkerMux:
    return WorkerMux(shards.route, lambda: 8, lambda: MuxLimits(max_streams, 2, idle_s), lambda: WHO.get() or None)


async def test_each_shards_sub_stream_is_its_own_connect_and_an_abort_ends_only_it():
    shards = Shards(refuse=frozenset({2}))
    mux = mux_of(shards)
    WHO.set("token-a")                   # the interceptor's identity of the outer call
    f = Frames(mux)
    f.hello(1, 0)
    f.hello(2, 1)
    f.hello(3, 2)                        # refused by shard 2's handler: "leader="
    f.hello(4, 9)                        # no replica here
    await until(lambda: len(f.of(1)) and len(f.of(2)) and f.closed(3) and f.closed(4), what="four answers")
    assert f.of(1)[0].message.welcome.shard == 0 and f.of(2)[0].message.welcome.shard == 1
    assert f.of(1)[0].message.welcome.leader_id == "token-a@w1"     # the outer call's identity
    assert (f.closed(3).code, f.closed(3).details) == (grpc.StatusCode.FAILED_PRECONDITION.value[0],
                                                       "not the leader; leader=127.0.0.1:9")
    assert f.closed(4).code == grpc.StatusCode.UNAVAILABLE.value[0]
    # the handler sees the outer call's metadata naming its shard, as a Connect of that shard
    assert all(("x-schedd-shard", str(k)) in md for k, md in zip((0, 1, 2), shards.metadata))
    f.heartbeat(2, 1)
    await until(lambda: any(x.message.ack.fencing_token == 1 for x in f.of(2)), what="shard 1's ack on its sub-stream")
    assert shards.open == {0: 1, 1: 1} and mux.active == 1 and not f.ended.is_set()
    # a sub-stream half-closed ends its handler only; a late frame of it opens nothing
    f.close(1, 0)
    await until(lambda: f.closed(1) is not None, what="sub-stream 1 closed")
    assert f.closed(1).code == 0 and shards.open[0] == 0
    f.hello(1, 0)
    f.heartbeat(2, 1)
    await until(lambda: sum(1 for x in f.of(2) if x.WhichOneof("kind") == "message") >= 3, what="a second ack")
    assert shards.open == {0: 0, 1: 1} and len(f.of(1)) == 2
    # the worker's half-close: every sub-stream ends, then the stream
    f.inbox.put_nowait(None)
    await asyncio.wait_for(f.ended.wait(), 10)
    assert f.error is None and f.closed(2).code == 0 and shards.open[1] == 0
    assert mux.active == 0 and mux.subs_open == 0


async def test_a_sub_stream_cancelled_by_the_worker_ends_its_handler():
    shards = Shards()
    mux = mux_of(shards)
    f = Frames(mux)
    f.hello(5, 3)
    await until(lambda: shards.open.get(3) == 1, what="shard 3 served")
    f.close(5, 3, code=grpc.StatusCode.CANCELLED.value[0])
    await until(lambda: shards.open.get(3) == 0, what="shard 3's handler ended")
    f.inbox.put_nowait(None)
    await asyncio.wait_for(f.ended.wait(), 10)
    assert mux.subs_open == 0


async def test_a_stream_with_no_sub_stream_is_ended_and_the_node_limit_holds():
    shards = Shards()
    mux = mux_of(shards, idle_s=0.2, max_streams=1)
    idle = Frames(mux)
    await until(lambda: mux.active == 1, what="the first stream admitted")
    second = Frames(mux)
    await asyncio.wait_for(second.ended.wait(), 10)
    assert isinstance(second.error, Aborted) and second.error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    await asyncio.wait_for(idle.ended.wait(), 10)
    assert isinstance(idle.error, Aborted) and idle.error.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert mux.active == 0


async def test_the_per_token_limit_counts_node_streams():
    mux = mux_of(Shards())
    WHO.set("token-b")
    streams = [Frames(mux) for _ in range(3)]     # 2 per token, plus one to reconnect
    await until(lambda: mux.active == 3, what="three streams of one token")
    fourth = Frames(mux)
    await asyncio.wait_for(fourth.ended.wait(), 10)
    assert isinstance(fourth.error, Aborted) and "limits.max_worker_streams_per_token" in fourth.error.details
    for f in streams:
        f.inbox.put_nowait(None)
    await until(lambda: mux.active == 0, what="every stream ended")
    assert mux.token_streams == {}


def test_a_sub_context_abort_raises_its_status():
    from schedd.leader.worker_mux import SubContext
    ctx = SubContext(Outer(), 3)
    with pytest.raises(SubStreamAborted) as e:
        asyncio.run(ctx.abort(grpc.StatusCode.ALREADY_EXISTS, "in use"))
    assert (e.value.code, e.value.details, ctx.code()) == (grpc.StatusCode.ALREADY_EXISTS, "in use",
                                                           grpc.StatusCode.ALREADY_EXISTS)


# ------------------------------------------------------------------------------ the worker's side

class NodeLeader(ShardLeader):
    """A shard's fake leader that also serves ConnectNode (each sub-stream: its own Connect)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.mux = WorkerMux(lambda k: self.Connect, lambda: self.shards,
                             lambda: MuxLimits(10, 10, 10.0), lambda: None)

    async def ConnectNode(self, request_iterator, context):
        async for frame in self.mux.ConnectNode(request_iterator, context):
            yield frame


@pytest.fixture
async def node_cluster():
    made: list[ShardLeader] = []

    async def make(shards: int = 3, old: frozenset[int] = frozenset()) -> list[ShardLeader]:
        group = [await (ShardLeader if k in old else NodeLeader)(k, shards, node_info=True).start()
                 for k in range(shards)]
        for f in group:
            f.peers = dict(enumerate(group))
        made.extend(group)
        return group

    yield make
    for f in made:
        await f.stop()


async def test_a_worker_serves_every_shard_over_one_stream_per_node(node_cluster, workers):
    group = await node_cluster(3)
    w = workers([group[0].address], name="w-mux", slots=6)
    shares = slot_shares(6, 3, "w-mux")
    await until(lambda: len(w.rt.lanes) == 3 and all(
        f.streams and f.stream.hello.slots == shares[k] and not f.stream.ended and w.rt.lanes[k].link.connected
        for k, f in enumerate(group)), what="every shard's lane on its leader")
    # one ConnectNode call per node, each carrying its shard's sub-stream (the redirects of the
    # other shards' sub-streams ended theirs without ending the node's stream for good)
    await until(lambda: all(f.mux.active == 1 and f.mux.subs_open == 1 for f in group),
                what="one node stream with one sub-stream on each node")
    assert w.rt.streams.open_calls == 3
    for k, f in enumerate(group):
        assert w.rt.lanes[k].link.max_term_seen == TERMS[k]
        f.assign(40 + k, shell("true"))
    for k, f in enumerate(group):
        assert (await f.result(40 + k)).state == "SUCCEEDED"


async def test_a_node_that_answers_unimplemented_gets_a_connect_per_shard(node_cluster, workers):
    group = await node_cluster(3, old=frozenset({1}))
    w = workers([group[0].address], name="w-old", slots=6)
    await until(lambda: len(w.rt.lanes) == 3 and all(w.rt.lanes[k].link.connected for k in range(3)),
                what="every shard's lane connected")
    assert w.rt.streams.open_calls == 2 and set(w.rt.streams.nodes) == {group[0].address, group[2].address}
    assert not w.rt.streams.speaks(group[1].address)
    group[1].assign(9, shell("true"))
    assert (await group[1].result(9)).state == "SUCCEEDED"


# ------------------------------------------------------------------------------ a real hub

async def test_an_unsharded_nodes_hub_serves_its_shard_as_a_sub_stream_counted_as_a_stream():
    from tests.support.env import TestEnv
    from tests.unit.test_worker_hub import assignment
    hub = TestEnv().hub
    f = Frames(hub.mux)
    f.hello(1, 0, name="w-hub")
    f.hello(2, 1, name="w-hub")               # no shard 1 on an unsharded node
    await until(lambda: f.of(1) and f.closed(2), what="a Welcome and a refusal")
    assert f.of(1)[0].message.welcome.leader_id and f.of(1)[0].message.welcome.shards == 0
    assert f.closed(2).code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert hub.streams == 1 and "w-hub" in hub.conns and hub.mux.active == 1   # counted as a Connect
    hub.send(hub.conns["w-hub"], assignment(7))
    await until(lambda: any(x.message.assignment.fencing_token == 7 for x in f.of(1)), what="the assignment")
    hub.close_all("this node is no longer the leader")     # a step-down ends it with its status
    await until(lambda: f.closed(1) is not None, what="sub-stream 1 ended by the hub")
    assert f.closed(1).code in (grpc.StatusCode.UNAVAILABLE.value[0], grpc.StatusCode.FAILED_PRECONDITION.value[0])
    assert "no longer the leader" in f.closed(1).details
    assert hub.streams == 0 and not f.ended.is_set()     # the node stream outlives its sub-stream
    f.inbox.put_nowait(None)
    await asyncio.wait_for(f.ended.wait(), 10)
    assert hub.mux.active == 0


# ------------------------------------------------------------------------------ NodeStreams on its own

class MuxNode:
    """A real gRPC server whose ConnectNode is a WorkerMux over the `Shards` fakes."""

    def __init__(self) -> None:
        self.shards = Shards()
        self.mux = mux_of(self.shards)
        self.server = grpc.aio.server()
        node = self

        class Servicer(pb_grpc.WorkersServicer):
            async def ConnectNode(self, request_iterator, context):
                async for frame in node.mux.ConnectNode(request_iterator, context):
                    yield frame
        pb_grpc.add_WorkersServicer_to_server(Servicer(), self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"


async def welcomed(call) -> pb.Welcome:
    await call.write(pb.WorkerMessage(hello=pb.WorkerHello(name="w1", slots=1)))
    return (await asyncio.wait_for(call.read(), 10)).welcome


async def test_sub_streams_share_one_call_which_ends_with_its_last_one_or_fails_them_all():
    node = MuxNode()
    await node.server.start()
    streams = NodeStreams(Security(), lambda a: a)
    try:
        a, b = streams.open(node.address, 0, []), streams.open(node.address, 1, [])
        assert [(await welcomed(a)).shard, (await welcomed(b)).shard] == [0, 1]
        assert streams.open_calls == 1 and node.mux.active == 1 and node.shards.open == {0: 1, 1: 1}
        await a.done_writing()                         # half-closed: the node ends it, OK
        assert await asyncio.wait_for(a.read(), 10) is grpc.aio.EOF
        assert streams.open_calls == 1 and node.shards.open[0] == 0
        b.cancel()                                     # the last one: the call ends
        assert streams.open_calls == 0
        await until(lambda: node.mux.active == 0 and node.shards.open[1] == 0, what="the node's stream to end")
        c, d = streams.open(node.address, 2, []), streams.open(node.address, 3, [])
        await welcomed(c)
        await welcomed(d)
        await node.server.stop(0)                      # the node dies: every sub-stream fails at once
        for sub in (c, d):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                while True:
                    await asyncio.wait_for(sub.read(), 10)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
        assert streams.open_calls == 0
    finally:
        await streams.close()
        await node.server.stop(0)
