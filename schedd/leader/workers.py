"""The leader's side of the worker streams: who is connected, what each runs, and the messages
going out. Only a node that leads in its current term (its epoch entry applied) accepts a stream;
any other node refuses with FAILED_PRECONDITION and "leader=<grpc address>" so the worker goes
there. When this node stops leading, every stream is closed and workers reconnect to the new
leader, keeping their attempts running (the new leader grants them a lease period of grace, and
expires at once a claim its worker reconnected without: see Assigner.take_over).

The dispatcher (dispatcher.py) decides what to claim and expire; this module only keeps the
registry and moves messages. Claims and results become log entries there, never here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable

import grpc

from schedd.replication.node import RaftNode
from schedd.runtime.clock import Clock
from schedd.v1 import scheduler_pb2 as pb
from schedd.v1 import scheduler_pb2_grpc as pb_grpc

log = logging.getLogger("schedd.workers")

DEFAULT_LEASE_MS = 10_000


@dataclass(slots=True)
class WorkerConn:
    name: str
    slots: int
    pool: str
    labels: dict[str, str]
    peer: str
    connected_ms: int
    last_heartbeat_ms: int
    draining: bool = False
    running: dict[int, str] = field(default_factory=dict)     # token -> execution id
    reserved: int = 0                                         # claims proposed, not yet settled
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    closed: bool = False
    incarnation: str = ""         # the worker process (WorkerHello.incarnation)
    reported: bool = False        # a heartbeat came on this stream: every result the worker had
                                  # to resend after its hello came before it (one ordered stream)

    def free_slots(self) -> int:
        return 0 if self.draining or self.closed else self.slots - len(self.running) - self.reserved

    def info(self) -> pb.WorkerInfo:
        return pb.WorkerInfo(name=self.name, slots=self.slots, pool=self.pool, labels=self.labels,
                             running=sorted(self.running.values()), connected_ms=self.connected_ms,
                             last_heartbeat_ms=self.last_heartbeat_ms, draining=self.draining, peer=self.peer)


class WorkerHub(pb_grpc.WorkersServicer):
    """Registry of connected workers plus the Workers gRPC service."""

    def __init__(self, node: RaftNode, clock: Clock, *, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        self.node = node
        self.clock = clock
        self.lease_ms = lease_ms
        self.conns: dict[str, WorkerConn] = {}
        self.token_seen: dict[int, int] = {}      # fencing token -> last time a worker vouched for it
        self.on_result: Callable[[WorkerConn, pb.AttemptResult], None] = lambda conn, r: None
        self.on_change: Callable[[], None] = lambda: None
        self.router = None                        # set by the daemon, for ListWorkers forwarding

    # ------------------------------------------------------------ registry

    def live(self, conn: WorkerConn, now: int) -> bool:
        """Heard from within two heartbeat periods (a SIGSTOPped worker keeps its TCP stream open
        but stops heartbeating: it must not be given work)."""
        return now - conn.last_heartbeat_ms <= 2 * self.lease_ms // 3

    def eligible(self, pool: str, now: int, labels: dict[str, str] | None = None) -> list[WorkerConn]:
        """Live workers that can take one more attempt of a job in `pool` ("" = any pool) whose
        labels include all of `labels`; most free slots first, ties by name (deterministic)."""
        want = (labels or {}).items()
        out = [c for c in self.conns.values()
               if c.free_slots() > 0 and (not pool or c.pool == pool) and self.live(c, now)
               and all(c.labels.get(k) == v for k, v in want)]
        out.sort(key=lambda c: (-c.free_slots(), c.name))
        return out

    def holder(self, token: int) -> WorkerConn | None:
        for conn in self.conns.values():
            if token in conn.running:
                return conn
        return None

    def send(self, conn: WorkerConn, msg: pb.LeaderMessage) -> None:
        if not conn.closed:
            conn.out.put_nowait(msg)

    def close_all(self, reason: str) -> None:
        """Leadership lost: end every stream (workers reconnect to the new leader)."""
        for conn in list(self.conns.values()):
            self._close(conn)
        if self.conns:
            log.info("closed %d worker streams: %s", len(self.conns), reason)
        self.conns.clear()
        self.token_seen.clear()

    def drop_silent(self, now: int) -> None:
        """End the streams of workers silent for a whole lease; they reconnect if they are alive."""
        for conn in list(self.conns.values()):
            if now - conn.last_heartbeat_ms > self.lease_ms:
                log.warning("worker %s silent for %d ms: dropping its stream", conn.name,
                            now - conn.last_heartbeat_ms)
                self._close(conn)
                del self.conns[conn.name]

    def _close(self, conn: WorkerConn) -> None:
        conn.closed = True
        conn.out.put_nowait(None)

    # ------------------------------------------------------------ gRPC

    async def Connect(self, request_iterator, context):
        if not self.node.leads_epoch():
            leader = self.node.leader_grpc_address()
            if leader and leader != self.node.cfg.grpc_address:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"not the leader; leader={leader}")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no leader is elected yet; retry shortly")
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be a hello")
        hello = first.hello
        if not hello.name or hello.slots < 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a worker needs a name and at least one slot")
        now = self.clock.now_ms()
        old = self.conns.get(hello.name)
        if old is not None:
            self._close(old)                      # a reconnect replaces the stale stream
        conn = WorkerConn(name=hello.name, slots=hello.slots, pool=hello.pool, labels=dict(hello.labels),
                          peer=context.peer(), connected_ms=now, last_heartbeat_ms=now,
                          incarnation=hello.incarnation[:64])
        self.conns[hello.name] = conn
        self._adopt(conn, hello.running_tokens, now)
        log.info("worker %s connected from %s: %d slots, pool %r, running %s", conn.name, conn.peer,
                 conn.slots, conn.pool, list(hello.running_tokens))
        reader = asyncio.ensure_future(self._read(conn, request_iterator))
        try:
            yield pb.LeaderMessage(welcome=pb.Welcome(leader_id=self.node.cfg.node_id, term=self.node.term,
                                                      lease_ms=self.lease_ms))
            self.on_change()
            while True:
                msg = await conn.out.get()
                if msg is None:
                    break
                yield msg
        finally:
            reader.cancel()
            conn.closed = True
            if self.conns.get(conn.name) is conn:
                del self.conns[conn.name]
            log.info("worker %s disconnected", conn.name)
            self.on_change()

    def _adopt(self, conn: WorkerConn, tokens, now: int) -> None:
        """A (re)connecting worker still runs these attempts: keep them alive if they are current."""
        if not tokens:
            return
        with self.node.lock:
            st = self.node.state
            current = {}
            for t, name in st.by_state.get("RUNNING", ()):
                ex = st.execs[(name, t)]
                current[ex.attempts[-1].fencing_token] = ex.id
        for token in tokens:
            if token in current:
                conn.running[token] = current[token]
                self.token_seen[token] = now

    async def _read(self, conn: WorkerConn, request_iterator) -> None:
        try:
            async for msg in request_iterator:
                kind = msg.WhichOneof("kind")
                now = self.clock.now_ms()
                conn.last_heartbeat_ms = now
                if kind == "heartbeat":
                    self.on_heartbeat(conn, msg.heartbeat, now)
                elif kind == "result":
                    self.on_result(conn, msg.result)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        finally:
            if not conn.closed:
                self._close(conn)

    def on_heartbeat(self, conn: WorkerConn, hb: pb.Heartbeat, now: int) -> None:
        conn.draining = hb.draining
        for token in hb.running_tokens:
            if token in conn.running:
                self.token_seen[token] = now
        conn.reported = True

    async def ListWorkers(self, request, context) -> pb.ListWorkersResponse:
        if not self.node.is_leader() and self.router is not None:
            return await self.router.forward("Workers", "ListWorkers", request, context)
        return pb.ListWorkersResponse(workers=[c.info() for _, c in sorted(self.conns.items())])
