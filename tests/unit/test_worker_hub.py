"""The leader's side of the worker stream (schedd.leader.workers.WorkerHub.Connect) driven
directly: a worker's messages in, the leader's messages out, no network. For herds:
what the assigner pushes in one step goes to a worker that takes batches as one LeaderBatch,
and one message each to an older worker (no `batches` in its hello); a WorkerBatch of results
and heartbeats is handled like the same messages sent one by one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from schedd_proto import scheduler_pb2 as pb
from tests.support.env import TestEnv
from schedd.leader.workers import WorkerHub

DEADLINE = 15.0


class Context:
    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code, details):
        raise AssertionError(f"aborted: {code} {details}")


class Inbox:
    """The worker's side of the request stream: messages the test puts, read by the hub."""

    def __init__(self, *first: pb.WorkerMessage) -> None:
        self.q: asyncio.Queue = asyncio.Queue()
        for m in first:
            self.q.put_nowait(m)

    def __aiter__(self):
        return self

    async def __anext__(self) -> pb.WorkerMessage:
        m = await self.q.get()
        if m is None:
            raise StopAsyncIteration
        return m


async def connect(hub: WorkerHub, hello: pb.WorkerHello):
    inbox = Inbox(pb.WorkerMessage(hello=hello))
    gen = hub.Connect(inbox, Context())
    welcome = await asyncio.wait_for(anext(gen), DEADLINE)
    return gen, inbox, welcome.welcome


def assignment(token: int) -> pb.LeaderMessage:
    return pb.LeaderMessage(assignment=pb.Assignment(execution_id=f"j@{token}", job="j",
                                                     fencing_token=token, term=1))


@pytest.fixture
def hub():
    return TestEnv().hub


@pytest.mark.parametrize("batches", [True, False], ids=["new-worker", "old-worker"])
async def test_pushes_of_one_step_go_as_one_batch_only_to_a_worker_that_takes_batches(hub, batches):
    gen, inbox, welcome = await connect(hub, pb.WorkerHello(name="w1", slots=8, batches=batches))
    assert welcome.batches
    conn = hub.conns["w1"]
    for token in (1, 2, 3):
        hub.send(conn, assignment(token))
    got = await asyncio.wait_for(anext(gen), DEADLINE)
    if batches:
        assert got.WhichOneof("kind") == "batch"
        assert [m.assignment.fencing_token for m in got.batch.messages] == [1, 2, 3]
    else:                                       # an older worker: one message each, in order
        rest = [await asyncio.wait_for(anext(gen), DEADLINE) for _ in range(2)]
        assert [m.WhichOneof("kind") for m in [got, *rest]] == ["assignment"] * 3
        assert [m.assignment.fencing_token for m in [got, *rest]] == [1, 2, 3]
    inbox.q.put_nowait(None)
    await gen.aclose()


async def test_a_worker_batch_is_handled_like_its_messages_one_by_one(hub):
    gen, inbox, _ = await connect(hub, pb.WorkerHello(name="w1", slots=8, batches=True))
    conn = hub.conns["w1"]
    hub.book.hold(conn, 7, "j@7", 0)
    hub.book.hold(conn, 8, "j@8", 0)
    results: list[int] = []
    hub.on_result = lambda c, r: results.append(r.fencing_token)
    inbox.q.put_nowait(pb.WorkerMessage(batch=pb.WorkerBatch(messages=[
        pb.WorkerMessage(result=pb.AttemptResult(execution_id="j@7", fencing_token=7, state="SUCCEEDED")),
        pb.WorkerMessage(heartbeat=pb.Heartbeat(running_tokens=[8], draining=True)),
        pb.WorkerMessage(result=pb.AttemptResult(execution_id="j@8", fencing_token=8, state="FAILED")),
    ])))
    for _ in range(int(DEADLINE / 0.01)):
        if len(results) == 2:
            break
        await asyncio.sleep(0.01)
    assert results == [7, 8]
    assert conn.draining and conn.reported and hub.book.vouched_ms(8) > 0
    inbox.q.put_nowait(None)
    await gen.aclose()


async def test_a_batch_stays_within_its_byte_bound(hub):
    from schedd.leader.workers import MAX_BATCH_BYTES

    gen, inbox, _ = await connect(hub, pb.WorkerHello(name="w1", slots=8, batches=True))
    conn = hub.conns["w1"]
    big = "x" * (MAX_BATCH_BYTES // 2)
    for token in (1, 2, 3):
        m = assignment(token)
        m.assignment.handler_json = big
        hub.send(conn, m)
    got = [await asyncio.wait_for(anext(gen), DEADLINE) for _ in range(2)]
    tokens = [[m.assignment.fencing_token for m in g.batch.messages] if g.WhichOneof("kind") == "batch"
              else [g.assignment.fencing_token] for g in got]
    assert tokens == [[1, 2], [3]]          # in order, and a third half-bound message waits
    inbox.q.put_nowait(None)
    await gen.aclose()


class Aborted(Exception):
    def __init__(self, code, details) -> None:
        super().__init__(f"{code} {details}")
        self.code, self.details = code, details


class AbortContext(Context):
    async def abort(self, code, details):
        raise Aborted(code, details)


async def test_a_step_down_ends_the_stream_with_a_status_naming_the_next_leader(hub):
    """A stream that ends OK looked like any other end; a worker must tell that its
    leader went, and is sent to the next one when this node knows it (else retry, UNAVAILABLE)."""
    for known, code in (("127.0.0.1:7072", "FAILED_PRECONDITION"), ("", "UNAVAILABLE")):
        hub.node.leader_grpc_address = lambda known=known: known
        gen = hub.Connect(Inbox(pb.WorkerMessage(hello=pb.WorkerHello(name="w1", slots=1))), AbortContext())
        await asyncio.wait_for(anext(gen), DEADLINE)
        hub.close_all("this node is no longer the leader")
        with pytest.raises(Aborted) as err:
            await asyncio.wait_for(anext(gen), DEADLINE)
        assert err.value.code.name == code and "no longer the leader" in err.value.details
        assert (f"leader={known}" in err.value.details) == bool(known)


async def test_the_welcome_lists_the_members_grpc_addresses(hub):
    hub.node.membership.voters = [SimpleNamespace(id=f"n{i}", raft_address=f"r{i}", grpc_address=f"g{i}:1")
                                  for i in (1, 2, 3)]
    gen, inbox, welcome = await connect(hub, pb.WorkerHello(name="w1", slots=1))
    assert list(welcome.members) == ["g1:1", "g2:1", "g3:1"]
    inbox.q.put_nowait(None)
    await gen.aclose()
