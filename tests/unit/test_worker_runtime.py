"""schedd_worker.runtime against a fake leader (an in-process grpc.aio server on 127.0.0.1).

The fake serves Cluster.Status (it names itself, or another address, as the leader) and
Workers.Connect: it records every hello, heartbeat and result per stream, and lets the test push
Assignment / CancelAttempt / ResultAck messages and end the stream. No fixed sleeps for
synchronisation: every wait is a polled condition with a generous deadline; shell handlers that
must stay running wait for a file the test creates.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio
import pytest

from schedd.ports.fakes import wait_until_async
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_worker.runtime import WorkerRuntime

LEASE_MS = 300             # heartbeats every 100 ms, unacked results resent after 300 ms
SCHED_MS = 1_795_917_600_000
DEADLINE = 15.0


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def until(pred, *, timeout: float = DEADLINE, what: str = "condition"):
    return wait_until_async(pred, timeout=timeout, what=what)


@pytest.fixture
def dead_address():
    """An address where nothing listens and nothing can start listening while the test runs: a
    socket bound to it without listen() holds the port (a port merely found free could be
    taken by another process in between, e.g. a test cluster running beside this test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{s.getsockname()[1]}"


# ---------------------------------------------------------------------------------- the fake

@dataclass(eq=False)
class Stream:
    hello: pb.WorkerHello
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    messages: list = field(default_factory=list)     # WorkerMessages after the hello, in order
    batches: int = 0                                 # of them, how many came in a WorkerBatch
    ended: bool = False                              # the worker half-closed (or the call died)

    def results(self) -> list[pb.AttemptResult]:
        return [m.result for m in self.messages if m.WhichOneof("kind") == "result"]

    def heartbeats(self) -> list[pb.Heartbeat]:
        return [m.heartbeat for m in self.messages if m.WhichOneof("kind") == "heartbeat"]


class FakeLeader(pb_grpc.ClusterServicer, pb_grpc.WorkersServicer):
    def __init__(self, *, term: int = 3, lease_ms: int = LEASE_MS, leader_id: str = "fake",
                 batches: bool = False) -> None:
        self.term = term
        self.batches = batches             # its Welcome says it takes WorkerBatch (a new leader)
        self.lease_ms = lease_ms
        self.leader_id = leader_id
        self.streams: list[Stream] = []
        self.connects = 0                  # Connect calls, refused ones included
        self.redirect: str | None = None   # refuse Connect with FAILED_PRECONDITION leader=<this>
        self.status_leader: tuple[str, str, int] | None = None   # (id, address, term) override
        # refuse Status / Connect with (code, details), as a node's access control would
        self.refuse_status: tuple[grpc.StatusCode, str] | None = None
        self.refuse_connect: tuple[grpc.StatusCode, str] | None = None
        self.statuses = 0                  # Status calls, refused ones included
        self.ack_outcome: str | None = "committed"               # None: the test acks by hand
        self.server: grpc.aio.Server | None = None
        self.address = ""
        self.shards = 0                    # its Welcome's shard count and shard (0, 0: unsharded)
        self.shard = 0
        self.shard_headers: list[tuple[str, str | None]] = []   # (method, x-schedd-shard) per call

    async def start(self) -> FakeLeader:
        self.server = grpc.aio.server()
        pb_grpc.add_ClusterServicer_to_server(self, self.server)
        pb_grpc.add_WorkersServicer_to_server(self, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=0)

    # --- Cluster
    def _saw_shard_header(self, method: str, context) -> str | None:
        value = dict(context.invocation_metadata() or ()).get("x-schedd-shard")
        self.shard_headers.append((method, value))
        return value

    async def Status(self, request, context):
        self.statuses += 1
        self._saw_shard_header("Status", context)
        if self.refuse_status:
            await context.abort(*self.refuse_status)
        lid, addr, term = self.status_leader or (self.leader_id, self.address, self.term)
        return pb.ClusterStatus(leader_id=lid, leader_grpc_address=addr, term=term,
                                answered_by=self.leader_id)

    # --- Workers
    async def Connect(self, request_iterator, context):
        self.connects += 1
        self._saw_shard_header("Connect", context)
        if self.refuse_connect:
            await context.abort(*self.refuse_connect)
        if self.redirect:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"not the leader; leader={self.redirect}")
        first = await anext(aiter(request_iterator))
        assert first.WhichOneof("kind") == "hello"
        stream = Stream(hello=first.hello)
        self.streams.append(stream)

        async def read() -> None:
            try:
                async for one in request_iterator:
                    batch = one.WhichOneof("kind") == "batch"
                    stream.batches += len(one.batch.messages) if batch else 0
                    for msg in one.batch.messages if batch else [one]:
                        stream.messages.append(msg)
                        if msg.WhichOneof("kind") == "result" and self.ack_outcome:
                            stream.out.put_nowait(pb.LeaderMessage(ack=pb.ResultAck(
                                fencing_token=msg.result.fencing_token, outcome=self.ack_outcome)))
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass
            finally:
                stream.ended = True
                stream.out.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            yield pb.LeaderMessage(welcome=pb.Welcome(leader_id=self.leader_id, term=self.term,
                                                      lease_ms=self.lease_ms, batches=self.batches,
                                                      shards=self.shards, shard=self.shard))
            while True:
                msg = await stream.out.get()
                if msg is None:
                    break
                yield msg
        finally:
            reader.cancel()

    # --- test helpers
    @property
    def stream(self) -> Stream:
        assert self.streams, "no worker connected"
        return self.streams[-1]

    async def connected(self, n: int = 1) -> Stream:
        await until(lambda: len(self.streams) >= n, what=f"connection #{n} to {self.leader_id}")
        return self.streams[n - 1]

    def push(self, **kind) -> None:
        self.stream.out.put_nowait(pb.LeaderMessage(**kind))

    def assignment(self, token: int, handler: dict, *, term: int | None = None, due_ms: int = 0,
                   job: str = "job", timeout_s: float = 0.0) -> pb.Assignment:
        return pb.Assignment(
            execution_id=f"{job}@{token}", job=job, scheduled_ms=SCHED_MS, attempt=1,
            fencing_token=token, term=self.term if term is None else term, due_ms=due_ms,
            handler_json=json.dumps(handler), timeout_seconds=timeout_s)

    def assign(self, token: int, handler: dict, **kw) -> str:
        a = self.assignment(token, handler, **kw)
        self.push(assignment=a)
        return a.execution_id

    def ack(self, token: int, outcome: str = "committed") -> None:
        self.push(ack=pb.ResultAck(fencing_token=token, outcome=outcome))

    def end_stream(self) -> None:
        self.stream.out.put_nowait(None)

    def results(self, token: int | None = None) -> list[pb.AttemptResult]:
        out = [r for s in self.streams for r in s.results()]
        return out if token is None else [r for r in out if r.fencing_token == token]

    async def result(self, token: int, n: int = 1) -> pb.AttemptResult:
        await until(lambda: len(self.results(token)) >= n, what=f"result #{n} of token {token}")
        return self.results(token)[n - 1]

    def heartbeats(self) -> list[pb.Heartbeat]:
        return [h for s in self.streams for h in s.heartbeats()]


def shell(command: str) -> dict:
    return {"shell": {"command": command}}


def gated(path: Path, then: str = "echo done") -> dict:
    """A shell handler that runs until `path` exists (the test decides when it ends)."""
    return shell(f"while [ ! -e '{path}' ]; do sleep 0.02; done; {then}")


@pytest.fixture
async def leaders():
    made: list[FakeLeader] = []

    async def make(**kw) -> FakeLeader:
        f = await FakeLeader(**kw).start()
        made.append(f)
        return f

    yield make
    for f in made:
        await f.stop()


@dataclass
class Handle:
    rt: WorkerRuntime
    stop: asyncio.Event
    task: asyncio.Task

    async def close(self, timeout: float = DEADLINE) -> None:
        self.stop.set()
        await asyncio.wait_for(asyncio.shield(self.task), timeout)


@pytest.fixture
async def workers():
    made: list[Handle] = []

    def start(cluster, **kw) -> Handle:
        kw.setdefault("name", "w1")
        kw.setdefault("drain_grace_s", 5.0)
        kw.setdefault("kill_grace_s", 0.5)
        kw.setdefault("final_ack_s", 0.5)     # teardown often has no leader left to acknowledge
        rt = WorkerRuntime(cluster if isinstance(cluster, list) else [cluster], **kw)
        stop = asyncio.Event()
        h = Handle(rt, stop, asyncio.create_task(rt.run(stop)))
        made.append(h)
        return h

    yield start
    for h in made:                              # teardown: cut drains short, never hang
        h.rt.hurry()
        h.stop.set()
        try:
            await asyncio.wait_for(h.task, DEADLINE)
        except Exception:  # noqa: BLE001 - the test itself reports what went wrong
            h.task.cancel()


# ---------------------------------------------------------------------------------- tests

async def test_hello_welcome_heartbeats_and_clean_stop(leaders, workers):
    leader = await leaders(term=7)
    w = workers(leader.address, name="w-hello", slots=3, pool="gpu", labels={"zone": "a", "x": "1"})
    s = await leader.connected()
    h = s.hello
    assert (h.name, h.slots, h.pool, dict(h.labels)) == ("w-hello", 3, "gpu", {"zone": "a", "x": "1"})
    assert list(h.running_tokens) == [] and h.max_term_seen == 0 and h.version
    await until(lambda: w.rt.connected and w.rt.max_term_seen == 7, what="welcome handled")
    await until(lambda: len(s.heartbeats()) >= 3, what="heartbeats")
    assert all(not hb.draining and list(hb.running_tokens) == [] for hb in s.heartbeats())
    await w.close()
    assert s.heartbeats()[-1].draining            # told the leader it drains
    await until(lambda: s.ended, what="the worker half-closes its stream")
    assert not w.rt.connected


async def test_shell_assignment_runs_result_resent_until_acked(leaders, workers):
    leader = await leaders()
    leader.ack_outcome = None                     # ack by hand
    w = workers(leader.address)
    await leader.connected()
    exec_id = leader.assign(11, shell('echo "hi $SCHEDD_EXECUTION_ID $SCHEDD_FENCING_TOKEN"'))
    r = await leader.result(11)
    assert (r.execution_id, r.state, r.exit_code, r.error) == (exec_id, "SUCCEEDED", 0, "")
    assert r.output_tail.strip() == f"hi {exec_id} 11"
    assert r.ended_ms >= r.started_ms > 0
    assert 11 not in w.rt.running
    await leader.result(11, n=2)                  # not acknowledged: resent after a lease
    leader.ack(11)
    await until(lambda: not w.rt._ledger.owed, what="the ack to be processed")
    sent = len(leader.results(11))
    seen = len(leader.heartbeats())
    await until(lambda: len(leader.heartbeats()) >= seen + 8, what="heartbeats over 2+ leases")
    assert len(leader.results(11)) == sent        # acked: no more resends

    # a failing command: exit code and error kept
    leader.ack_outcome = "committed"
    leader.assign(12, shell("echo oops >&2; exit 3"))
    r = await leader.result(12)
    assert (r.state, r.exit_code, r.output_tail.strip()) == ("FAILED", 3, "oops")
    assert "exit status 3" in r.error


async def test_ack_outcomes_unknown_resends_stale_drops(leaders, workers, caplog):
    leader = await leaders()
    leader.ack_outcome = None
    w = workers(leader.address)
    await leader.connected()
    leader.assign(21, shell("true"))
    await leader.result(21)
    leader.ack(21, "unknown")                     # the leader could not settle it: resend
    await leader.result(21, n=2)
    with caplog.at_level(logging.WARNING, logger="schedd.worker"):
        leader.ack(21, "stale")
        await until(lambda: not w.rt._ledger.owed, what="stale ack drops the result")
    assert any("refused by fencing" in rec.getMessage() for rec in caplog.records)


async def test_due_ms_is_honoured_on_the_worker_clock(leaders, workers):
    leader = await leaders()
    skew = -3_600_000                             # the worker's clock is an hour behind the wall
    now = lambda: wall_ms() + skew               # noqa: E731
    w = workers(leader.address, now_ms=now)
    s = await leader.connected()
    due = now() + 700
    leader.assign(31, shell("true"), due_ms=due)
    await until(lambda: any(31 in hb.running_tokens for hb in s.heartbeats()),
                what="the accepted, not yet due attempt in a heartbeat")
    assert w.rt.running == {31: "job@31"}
    r = await leader.result(31)
    assert r.state == "SUCCEEDED"
    assert r.started_ms >= due, f"started {due - r.started_ms} ms early"
    assert r.started_ms - due < 2000


async def test_assignment_from_an_older_term_is_rejected(leaders, workers):
    leader = await leaders(term=5)
    w = workers(leader.address)
    await leader.connected()
    await until(lambda: w.rt.max_term_seen == 5, what="welcome")
    leader.assign(41, shell("true"), term=4)
    r = await leader.result(41)
    assert r.state == "REJECTED"
    assert r.error == "assignment from term 4, already saw term 5"
    leader.assign(42, shell("true"), term=6)      # a newer term is taken and remembered
    assert (await leader.result(42)).state == "SUCCEEDED"
    assert w.rt.max_term_seen == 6
    leader.assign(43, shell("true"), term=5)
    r = await leader.result(43)
    assert (r.state, r.error) == ("REJECTED", "assignment from term 5, already saw term 6")


async def test_slots_are_respected(leaders, workers, tmp_path):
    leader = await leaders()
    w = workers(leader.address, slots=1, ahead=0)
    await leader.connected()
    gate = tmp_path / "go"
    leader.assign(51, gated(gate))
    await until(lambda: 51 in w.rt.running, what="first attempt accepted")
    leader.assign(52, shell("true"))
    r = await leader.result(52)
    assert (r.state, r.error) == ("REJECTED", "no free slot")
    gate.touch()
    assert (await leader.result(51)).state == "SUCCEEDED"
    leader.assign(53, shell("true"))              # the slot is free again
    assert (await leader.result(53)).state == "SUCCEEDED"


async def test_attempts_due_beyond_the_slots_wait_here_and_start_as_a_slot_frees(leaders, workers, tmp_path):
    """The ahead queue: the hello offers `ahead`; the worker holds up to slots + ahead
    attempts, runs at most `slots` at once, and starts what fell due meanwhile as soon as a slot
    frees, without asking the leader (before: a herd beyond the slots waited for a round trip
    through the leader per slot)."""
    leader = await leaders(lease_ms=60_000)       # no hand-back of the waiting (half a lease)
    w = workers(leader.address, slots=1, ahead=1)
    await leader.connected()
    assert leader.streams[-1].hello.ahead == 1
    gate = tmp_path / "go"
    leader.assign(71, gated(gate))
    await until(lambda: 71 in w.rt.running, what="first attempt accepted")
    leader.assign(72, shell("true"))              # due now, beyond the one slot: held, not run
    await until(lambda: 72 in w.rt.running, what="second attempt held")
    leader.assign(73, shell("true"))              # slots + ahead held: refused
    r = await leader.result(73)
    assert (r.state, r.error) == ("REJECTED", "no free slot")
    assert w.rt._slots.busy == 1 and w.rt._ledger.held[72].phase == "waiting"
    gate.touch()
    r71, r72 = await leader.result(71), await leader.result(72)
    assert (r71.state, r72.state) == ("SUCCEEDED", "SUCCEEDED")
    assert r72.started_ms >= r71.ended_ms
    assert w.rt._slots.busy == 0 and w.rt.running == {}


async def test_results_wait_while_due_attempts_wait_for_a_slot(leaders, workers, tmp_path):
    """While due attempts wait for a slot (a herd starting), results are held (at most
    result_hold_s) and go once the last of them started: the starts do not share the CPU with
    the results. With a hold longer than the test, the release is the queue running dry."""
    leader = await leaders(lease_ms=60_000)       # no hand-back of the waiting (half a lease)
    w = workers(leader.address, slots=1, ahead=2, result_hold_s=600)
    s = await leader.connected()
    gate, first = tmp_path / "go", tmp_path / "first"
    leader.assign(81, gated(first))                # ends once 82 and 83 wait (not before they came)
    leader.assign(82, gated(gate))
    leader.assign(83, shell("true"))
    await until(lambda: {81, 82, 83} <= set(w.rt.running), what="the three accepted")
    first.touch()
    await until(lambda: 81 in w.rt._ledger.held_back, what="the first result held while 82 and 83 wait")
    assert 81 in w.rt._ledger.owed and 83 in w.rt.running
    # a heartbeat meanwhile still vouches for 81 (its result is not on the stream yet: a leader
    # reading a heartbeat that leaves out an attempt the worker knew of loses it), and says
    # that the worker has handled the three assignments
    w.rt._reports.heartbeat()
    await until(lambda: any(list(hb.running_tokens) == [81, 82, 83] and hb.messages_read == 3
                            for hb in s.heartbeats()), what="a heartbeat listing the held result")
    gate.touch()                                   # 82 ends, 83 starts: the queue is dry
    rs = [await leader.result(t) for t in (81, 82, 83)]
    assert [r.state for r in rs] == ["SUCCEEDED"] * 3
    assert not w.rt._ledger.held_back


async def test_a_held_result_goes_after_the_hold_at_the_latest(leaders, workers, tmp_path):
    leader = await leaders(lease_ms=60_000)       # no hand-back of the waiting (half a lease)
    w = workers(leader.address, slots=1, ahead=2, result_hold_s=0.2)
    await leader.connected()
    gate = tmp_path / "go"
    leader.assign(91, shell("true"))
    leader.assign(92, gated(gate))
    leader.assign(93, shell("true"))
    assert (await leader.result(91)).state == "SUCCEEDED"    # while 92 runs and 93 waits
    assert 93 in w.rt.running and 92 in w.rt.running
    gate.touch()
    assert (await leader.result(93)).state == "SUCCEEDED"


async def test_cancel_running_and_waiting_attempts(leaders, workers):
    leader = await leaders()
    w = workers(leader.address)
    await leader.connected()
    leader.assign(61, shell("sleep 60"))
    leader.assign(62, shell("true"), due_ms=wall_ms() + 60_000)
    await until(lambda: {61, 62} <= set(w.rt.running), what="both accepted")
    t0 = time.monotonic()
    leader.push(cancel=pb.CancelAttempt(execution_id="job@61", fencing_token=61))
    leader.push(cancel=pb.CancelAttempt(execution_id="job@62", fencing_token=62))
    r61, r62 = await leader.result(61), await leader.result(62)
    assert time.monotonic() - t0 < 10
    assert r61.state == "CANCELLED" and r62.state == "CANCELLED"
    assert w.rt.running == {}


async def test_stream_drop_mid_run_reconnects_and_resends(leaders, workers, tmp_path):
    leader = await leaders()
    leader.ack_outcome = None
    w = workers(leader.address)
    s1 = await leader.connected(1)
    gate = tmp_path / "go"
    leader.assign(71, gated(gate, "echo finished"))
    await until(lambda: 71 in w.rt.running, what="accepted")
    leader.end_stream()                           # the leader steps down mid-run
    s2 = await leader.connected(2)
    assert list(s2.hello.running_tokens) == [71]  # still running, said in the new hello
    assert s2.hello.max_term_seen == leader.term
    assert 71 in w.rt.running and not s1.results()
    gate.touch()
    r = await leader.result(71)                   # reported on the new stream
    assert r.state == "SUCCEEDED" and r.output_tail.strip() == "finished"
    assert s2.results()
    leader.end_stream()                           # dropped again before acking it
    s3 = await leader.connected(3)
    assert list(s3.hello.running_tokens) == []
    await until(lambda: s3.messages, what="first message on the third stream")
    first = s3.messages[0]
    assert first.WhichOneof("kind") == "result" and first.result.fencing_token == 71
    leader.ack(71)
    await until(lambda: not w.rt._ledger.owed, what="ack")


async def test_redirect_to_the_leader_named_by_failed_precondition(leaders, workers, dead_address):
    real = await leaders(leader_id="real")
    follower = await leaders(leader_id="follower")
    follower.redirect = real.address              # its Status says itself, its Connect refuses
    dead = dead_address                           # nothing listens: cycled past
    w = workers([dead, follower.address])
    s = await real.connected()
    assert s.hello.name == "w1"
    assert follower.connects >= 1 and not follower.streams
    # the worker notes its leader when the welcome arrives, just after the leader saw its hello
    await until(lambda: w.rt.leader_address == real.address, what="the worker to settle on the leader")
    real.assign(81, shell("true"))
    assert (await real.result(81)).state == "SUCCEEDED"


async def test_reconnects_when_the_cluster_has_a_newer_leader(leaders, workers):
    old = await leaders(leader_id="old", term=3, lease_ms=300)
    new = await leaders(leader_id="new", term=4)
    new.status_leader = ("old", old.address, 3)   # a follower of old, until it is elected
    old.status_leader = ("old", old.address, 3)   # a deposed leader that still thinks it leads
    w = workers([old.address, new.address])       # (asked at once: first old is the only leader)
    s_old = await old.connected()
    new.status_leader = ("new", new.address, 4)
    s_new = await new.connected()                 # the periodic watch found term 4
    assert s_new.hello.max_term_seen == 3
    await until(lambda: s_old.ended, what="the stale stream to be dropped")
    await until(lambda: w.rt.max_term_seen == 4 and w.rt.leader_address == new.address,
                what="settled on the new leader")


async def test_drain_hands_back_not_yet_due_lets_running_finish(leaders, workers, tmp_path):
    leader = await leaders()
    w = workers(leader.address, drain_grace_s=20.0)
    s = await leader.connected()
    gate = tmp_path / "go"
    leader.assign(91, gated(gate, "echo drained-ok"))
    leader.assign(92, shell("true"), due_ms=wall_ms() + 60_000)
    await until(lambda: {91, 92} <= set(w.rt.running), what="both accepted")
    w.stop.set()
    await until(lambda: any(hb.draining for hb in s.heartbeats()), what="draining heartbeat")
    r92 = await leader.result(92)
    assert (r92.state, r92.error) == ("REJECTED", "worker draining")
    leader.assign(93, shell("true"))              # no new work while draining
    r93 = await leader.result(93)
    assert r93.state == "REJECTED" and "draining" in r93.error
    assert not w.task.done() and 91 in w.rt.running
    gate.touch()
    r91 = await leader.result(91)
    assert (r91.state, r91.output_tail.strip()) == ("SUCCEEDED", "drained-ok")
    await asyncio.wait_for(w.task, DEADLINE)      # returns once everything is acknowledged
    assert not w.rt._ledger.owed
    await until(lambda: s.ended, what="half-close")


async def test_drain_grace_over_cancels_running(leaders, workers):
    leader = await leaders()
    w = workers(leader.address, drain_grace_s=0.3, kill_grace_s=0.2)
    await leader.connected()
    leader.assign(95, shell("sleep 60"))
    await until(lambda: 95 in w.rt.running, what="accepted")
    t0 = time.monotonic()
    await w.close()
    assert time.monotonic() - t0 < 10
    r = await leader.result(95)
    assert r.state == "CANCELLED"


async def test_python_handler_registered_through_the_sdk_worker(leaders, monkeypatch):
    from schedd_worker import Worker

    leader = await leaders()
    monkeypatch.setenv("SCHEDD_CLUSTER", leader.address)
    worker = Worker(slots=2, pool="py", labels={"lang": "python"}, drain_grace_s=5,
                    allow_root=True)     # Python handlers only; the suite may run as root
    assert worker.cluster == [leader.address]
    assert worker.name.endswith(f"-{__import__('os').getpid()}")

    @worker.handler("add")
    def add(ctx):
        return f"{ctx.args['a'] + ctx.args['b']} for {ctx.execution_id} attempt {ctx.attempt}"

    @worker.handler("boom")
    async def boom(ctx):
        raise RuntimeError("handler failed")

    stop = asyncio.Event()
    task = asyncio.create_task(worker.run_async(stop))
    try:
        s = await leader.connected()
        assert (s.hello.name, s.hello.slots, s.hello.pool) == (worker.name, 2, "py")
        leader.assign(101, {"python": {"name": "add", "args_json": json.dumps({"a": 2, "b": 3})}})
        r = await leader.result(101)
        assert (r.state, r.output_tail) == ("SUCCEEDED", "5 for job@101 attempt 1")
        leader.assign(102, {"python": {"name": "boom"}})
        r = await leader.result(102)
        assert r.state == "FAILED" and "handler failed" in r.error
        leader.assign(103, {"python": {"name": "missing"}})
        assert (await leader.result(103)).state == "FAILED"
    finally:
        stop.set()
        await asyncio.wait_for(task, DEADLINE)


@pytest.mark.parametrize("argv, needle", [
    (["worker", "--slots", "0"], "--slots"),
    (["worker", "--slots", "many"], "--slots"),
    (["worker", "--labels", "zone=a,oops"], "--labels"),
    (["worker", "--labels", "=x"], "--labels"),
    (["worker", "--drain-grace", "-1"], "--drain-grace"),
    (["worker", "--cluster", " , "], "--cluster"),
])
def test_cli_worker_bad_flags_exit_2(argv, needle, capsys):
    from schedd.runtime.cli import main
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and "error" in err


async def test_cut_off_from_every_leader_for_a_lease_the_worker_stops_its_attempts(leaders, workers):
    """Self-fencing: the leader has expired these attempts and runs them again elsewhere."""
    leader = await leaders()
    w = workers(leader.address)
    await leader.connected()
    leader.assign(81, shell("sleep 60"))
    await until(lambda: 81 in w.rt.running, what="accepted")
    await leader.stop()                           # no leader anywhere now
    await until(lambda: not w.rt.running, timeout=DEADLINE, what="the attempt to be stopped")
    assert w.rt._ledger.owed and next(iter(w.rt._ledger.owed.values())) is not None


async def test_cut_off_for_a_lease_an_attempt_not_started_yet_is_handed_back_not_cancelled(leaders, workers):
    """A held assignment not due yet (a herd pushed ahead) never started: it goes back REJECTED,
    so the run goes back in line; CANCELLED would end the run if the result committed first."""
    leader = await leaders()
    w = workers(leader.address)
    await leader.connected()
    leader.assign(85, shell("true"), due_ms=wall_ms() + 600_000)
    await until(lambda: 85 in w.rt.running, what="accepted")
    await leader.stop()
    await until(lambda: not w.rt.running, timeout=DEADLINE, what="the attempt to be handed back")
    r = w.rt._ledger.owed[85].result
    assert (r.state, r.error) == ("REJECTED", "no leader for a lease: handed back before it started")


async def test_an_attempt_waiting_for_a_slot_past_half_a_lease_is_handed_back(leaders, workers, tmp_path):
    """Due, with a timeout, and no slot free for half a lease: handed back REJECTED, never
    started (the leader would expire it TIMED_OUT past its timeout plus a lease while it has not
    even started); one without a timeout waits for its slot."""
    leader = await leaders()
    w = workers(leader.address, slots=1, ahead=2)
    await leader.connected()
    gate = tmp_path / "go"
    leader.assign(86, gated(gate))
    await until(lambda: 86 in w.rt.running, what="first attempt accepted")
    leader.assign(88, shell("true"))              # no timeout: it may wait (heartbeats keep it)
    leader.assign(87, shell("true"), timeout_s=30)
    r = await leader.result(87)
    assert r.state == "REJECTED" and "handed back before it started" in r.error, r.error
    assert w.rt._slots.busy == 1 and 88 in w.rt.running
    gate.touch()
    assert (await leader.result(86)).state == "SUCCEEDED"
    assert (await leader.result(88)).state == "SUCCEEDED"


# ---------------------------------------------------------------------------------- herds

HERD = 40


@pytest.mark.parametrize("batched", [True, False], ids=["leader-batch", "one-message-each"])
async def test_a_herd_due_at_one_instant_starts_together_at_that_instant(leaders, workers, batched):
    """HERD Python assignments due at one instant, pushed ahead as one LeaderBatch (a leader
    that batches) or as one message each (an older leader): every handler starts at or after
    the due time on the worker's clock, and all of them run at once (a barrier of HERD parties:
    handlers started one after another would never pass it). Accepting them sends no heartbeat
    each (that work grew with the number held), and an older leader (no `batches` in its
    Welcome) never gets a WorkerBatch."""
    from schedd_worker.executors import PythonHandlers

    leader = await leaders(batches=batched)
    handlers = PythonHandlers()
    barrier = __import__("threading").Barrier(HERD, timeout=DEADLINE)
    starts: dict[int, int] = {}

    @handlers.register("herd")
    def herd(ctx):
        starts[ctx.fencing_token] = wall_ms()
        barrier.wait()                      # BrokenBarrierError (a FAILED result) unless concurrent
        return "ok"

    w = workers(leader.address, slots=HERD, python_handlers=handlers)
    s = await leader.connected()
    assert s.hello.batches                  # this worker takes LeaderBatch
    due = wall_ms() + 1500
    msgs = [leader.assignment(t, {"python": {"name": "herd"}}, due_ms=due) for t in range(1, HERD + 1)]
    if batched:
        leader.push(batch=pb.LeaderBatch(messages=[pb.LeaderMessage(assignment=a) for a in msgs]))
    else:
        for a in msgs:
            leader.push(assignment=a)
    await until(lambda: len(w.rt.running) == HERD or starts, what="the herd accepted")
    assert not starts and len(w.rt.running) == HERD         # held, none started before due
    rs = [await leader.result(t) for t in range(1, HERD + 1)]
    assert [r.state for r in rs] == ["SUCCEEDED"] * HERD, [r.error for r in rs if r.error][:3]
    assert min(starts.values()) >= due and all(r.started_ms >= due for r in rs)
    growing = [hb for hb in s.heartbeats() if 0 < len(hb.running_tokens) < HERD]
    assert len(growing) <= 2, f"{len(growing)} heartbeats while the herd was being accepted"
    if not batched:
        assert s.batches == 0


# -------------------------------------------- prepared Python calls, watched without a task of their own

def _python_worker(workers, leader, **kw):
    from schedd_worker.executors import PythonHandlers
    handlers = PythonHandlers()
    seen: dict[str, object] = {}

    @handlers.register("quick")
    async def quick(ctx):
        return f"quick {ctx.attempt}"

    @handlers.register("later")
    async def later(ctx):
        await asyncio.sleep(0.05)
        return "later"

    @handlers.register("fails")
    async def fails(ctx):
        await asyncio.sleep(0)
        raise RuntimeError("handler failed")

    @handlers.register("forever")
    async def forever(ctx):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen[ctx.execution_id] = "cancelled"
            raise

    @handlers.register("thread")
    def thread(ctx):
        ctx.cancel.wait(30)                          # a cooperative plain function
        seen[ctx.execution_id] = "stopped"

    @handlers.register("returns_coroutine")
    def returns_coroutine(ctx):
        return later(ctx)

    return workers(leader.address, python_handlers=handlers, **kw), seen


@pytest.mark.parametrize("name, timeout_s, state, text", [
    ("quick", 0, "SUCCEEDED", "quick 1"),
    ("later", 0, "SUCCEEDED", "later"),
    ("fails", 0, "FAILED", "handler failed"),
    ("returns_coroutine", 0, "SUCCEEDED", "later"),
    ("forever", 0.2, "TIMED_OUT", "timed out after 0.2s"),
    ("thread", 0.2, "TIMED_OUT", "timed out after 0.2s"),
    ("later", 5, "SUCCEEDED", "later"),                # ends well within its timeout
])
async def test_a_prepared_python_call_reports_how_it_ended(leaders, workers, name, timeout_s,
                                                           state, text):
    leader = await leaders()
    w, seen = _python_worker(workers, leader)
    await leader.connected()
    t0 = time.monotonic()
    leader.assign(301, {"python": {"name": name}}, timeout_s=timeout_s)
    r = await leader.result(301)
    assert r.state == state and text in (r.output_tail + r.error), r
    assert r.started_ms <= r.ended_ms
    if state == "TIMED_OUT":
        assert time.monotonic() - t0 < 10
        assert seen.get("job@301") in ("cancelled", "stopped")    # the handler was told to stop
    await until(lambda: not w.rt.running, what="the slot freed")
    assert w.rt._slots.busy == 0


async def test_a_running_prepared_python_call_is_cancelled_by_the_leader_and_by_the_drain(leaders, workers):
    leader = await leaders()
    w, seen = _python_worker(workers, leader, drain_grace_s=0.3)
    await leader.connected()
    leader.assign(311, {"python": {"name": "forever"}})
    leader.assign(312, {"python": {"name": "thread"}})
    leader.assign(313, {"python": {"name": "forever"}})
    await until(lambda: {311, 312, 313} <= set(w.rt.running), what="all three running")
    leader.push(cancel=pb.CancelAttempt(execution_id="job@311", fencing_token=311))
    leader.push(cancel=pb.CancelAttempt(execution_id="job@312", fencing_token=312))
    r311, r312 = await leader.result(311), await leader.result(312)
    assert (r311.state, r312.state) == ("CANCELLED", "CANCELLED")
    assert seen == {"job@311": "cancelled", "job@312": "stopped"}
    leader.ack(311)
    leader.ack(312)
    t0 = time.monotonic()
    await w.close()                                  # drain grace over: 313 is cancelled
    assert time.monotonic() - t0 < 10
    assert (await leader.result(313)).state == "CANCELLED"
    assert seen["job@313"] == "cancelled"
