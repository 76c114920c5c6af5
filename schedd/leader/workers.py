"""The leader's side of the worker streams: who is connected, what each runs, and the messages
going out. Only a node that leads in its current term (its epoch entry applied) accepts a stream;
any other node refuses with FAILED_PRECONDITION and "leader=<grpc address>" so the worker goes
there (a node elected but whose epoch entry has not applied yet holds the stream until it has:
`_leading`). The Welcome lists the members' gRPC addresses, which the worker asks all at once for
the next leader. When this node stops leading, every stream is ended with a status that says so
(FAILED_PRECONDITION with "leader=<grpc address>" when this node knows the new leader, else
UNAVAILABLE) and workers reconnect to the new leader, keeping their attempts running (the new leader grants them a lease period of grace, and
expires at once a claim its worker reconnected without: see Assigner.take_over).

Who may say what, whatever a worker sends: a worker name is held by one live stream at a time (a
second stream under a name whose stream still heartbeats is refused ALREADY_EXISTS; one silent for
two heartbeat periods is replaced, as after a network cut), a result counts only from the stream of
the worker its attempt was assigned to (the fencing token alone is readable by anyone who reads
runs), and a hello may adopt only its own worker's attempts. A node holds at most `max_streams`
streams (handshakes included; a stream without a hello is dropped after `hello_timeout_s`) and a
worker may claim at most `max_slots` slots; past either, RESOURCE_EXHAUSTED names the config key.

Per worker token (with ACL the leader sees every stream of the cluster): its
`max_slots` bounds the slots of all the streams using it together, and it holds at most
`max_streams_per_token` registered streams, so one stolen token cannot fill the node's streams
and lock every other worker out. Handshakes of a token are admitted up to one more than that
(RECONNECT_ROOM), and a hello from the same process (same name, incarnation and token) replaces
its older stream even while that one still looks live: a worker reconnecting after a network
blip is never locked out by its own stale stream. After a failover the new leader holds no
streams, so every worker starts from its own share again.

A worker of a sharded cluster holds one `Workers.ConnectNode` stream per node instead, each
shard a sub-stream served by that shard's hub's `Connect` (schedd.leader.worker_mux): every
rule above holds per sub-stream as it does per stream.

The dispatcher (dispatcher.py) decides what to claim and expire; this module only keeps the
registry and moves messages. Claims and results become log entries there, never here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from schedd.core import acl as A
from schedd.core.model import ValidationError, parse_execution_id
from schedd.core.view import StateView
from schedd.leader.attempt_book import AttemptBook
from schedd.leader.assignment import OLD_WORKER_KINDS, worker_kinds
from schedd.leader.log_requests import LogRequests
from schedd.leader.worker_mux import MuxLimits, StreamCounts, WorkerMux
from schedd.replication.node import RaftNode
from schedd.settings import Limits
from schedd.ports.clock import Clock
from schedd.ports.faults import NO_FAULTS, Faults
from schedd.ports.rpc import CallContext
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

log = logging.getLogger("schedd.workers")

DEFAULT_LEASE_MS = 10_000
HELLO_TIMEOUT_S = 10.0
MAX_BATCH = 512                   # messages per LeaderBatch
MAX_BATCH_BYTES = 4 << 20         # and bytes, plus one message (the worker receives up to 16 MiB)
_LIMITS = Limits()                # the defaults of [limits]
EPOCH_WAIT_S = 2.0                # a leader whose epoch is not applied yet holds a Connect this long
MAX_AHEAD = 100_000               # not-yet-due assignments one worker is given beyond its slots,
                                  # at most, whatever its hello offers (WorkerHello.ahead)


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
    running: dict[int, str] = field(default_factory=dict)     # token -> execution id (kept by
                                                              # the hub's AttemptBook: hold/release)
    reserved: int = 0                                         # claims proposed, not yet settled
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    closed: bool = False
    incarnation: str = ""         # the worker process (WorkerHello.incarnation)
    reported: bool = False        # a heartbeat came on this stream: every result the worker had
                                  # to resend after its hello came before it (one ordered stream)
    principal: A.Principal | None = None   # its worker token's (ACL enabled), checked per assignment
    batches: bool = False         # takes LeaderMessage.batch (WorkerHello.batches; older workers do not)
    serves: dict[str, bool] = field(default_factory=dict)     # team -> may_serve (principal fixed)
    total_slots: int = 0          # a sharded cluster: its slots across every shard (`slots`: this shard's share)
    ahead: int = 0                # assignments it holds beyond its slots until due (its hello's,
                                  # capped at MAX_AHEAD; 0 for older workers)
    sent: int = 0                 # messages queued on this stream after the Welcome
    counts_reads: bool = False    # its heartbeats say how many of those it had handled (WorkerHello.counts_reads)
    read: int = 0                 # ... as of the last heartbeat read
    listed_ms: int = 0            # when a list of the tokens it holds (hello, heartbeat) was last read
    why: str = ""                 # why this node ended the stream (stepped down, stopping): its status
    kinds: frozenset[str] = OLD_WORKER_KINDS   # handler kinds it runs (WorkerHello.handlers)
    serves_logs: bool = False     # answers log requests (WorkerHello.serves_logs): schedd.leader.run_logs

    @property
    def token(self) -> str | None:
        """The worker token this stream was opened with (None: ACL disabled)."""
        return _token_key(self.principal)

    def may_serve(self, team: str) -> bool:
        """Its token's `serve` on its pool and `team`, decided once per team: the principal of
        a stream never changes (a revoked or expired token closes the stream at its next
        heartbeat), and the check ran per candidate and worker on every step (7% of the
        leader's time in a herd of 10,000)."""
        if self.principal is None:
            return True
        ok = self.serves.get(team)
        if ok is None:
            ok = self.serves[team] = bool(A.may_serve(self.principal, self.pool, team))
        return ok

    def free_slots(self) -> int:
        return 0 if self.draining or self.closed else self.slots - len(self.running) - self.reserved

    def ahead_free(self) -> int:
        """Places left beyond the free slots, for runs held until due or a slot (Capacity.ahead)."""
        if self.draining or self.closed or self.ahead <= 0:
            return 0
        room = self.slots + self.ahead - len(self.running) - self.reserved
        return max(0, room - max(0, self.free_slots()))

    def info(self) -> pb.WorkerInfo:
        return pb.WorkerInfo(name=self.name, slots=self.total_slots or self.slots, pool=self.pool, labels=self.labels,
                             running=sorted(self.running.values()), connected_ms=self.connected_ms,
                             last_heartbeat_ms=self.last_heartbeat_ms, draining=self.draining, peer=self.peer,
                             handlers=sorted(self.kinds))


class Forwarder(Protocol):
    """What the hub asks of the daemon's router (schedd.api.service.Router, which this layer
    does not import): pass a call on to the leader."""

    async def forward(self, service: str, method: str, request: Any, context: CallContext) -> Any: ...


class WorkerHub(pb_grpc.WorkersServicer):
    """Registry of connected workers plus the Workers gRPC service."""

    def __init__(self, node: RaftNode, clock: Clock, *, lease_ms: int = DEFAULT_LEASE_MS,
                 max_streams: int = _LIMITS.max_worker_streams, max_slots: int = _LIMITS.max_worker_slots,
                 hello_timeout_s: float = HELLO_TIMEOUT_S, faults: Faults = NO_FAULTS,
                 max_streams_per_token: int = _LIMITS.max_worker_streams_per_token) -> None:
        self.node = node
        self.view = StateView(node.state)        # all it reads of the state
        self.clock = clock
        self.faults = faults
        self.lease_ms = lease_ms
        self.max_streams, self.max_slots, self.hello_timeout_s = max_streams, max_slots, hello_timeout_s
        self.max_streams_per_token = max_streams_per_token
        self.counts = StreamCounts("streams")     # open Connect calls, handshakes included, per token too
        self.conns: dict[str, WorkerConn] = {}
        self.book = AttemptBook()                 # every fencing token's life on this leader
        self.logs = LogRequests()                 # run log pages asked of workers (leader.log_requests)
        self.on_result: Callable[[WorkerConn, pb.AttemptResult], None] = lambda conn, r: None
        self.on_change: Callable[[], None] = lambda: None
        self.router: Forwarder | None = None      # set by the daemon, for ListWorkers forwarding
        # ACL (set by the daemon): the verified principal of the current call (the authenticating
        # interceptor's); with ACL enabled a worker serves only what its token's `serve` allows.
        self.acl_enabled = False
        self.identify: Callable[[], A.Principal | None] = lambda: None
        # A sharded cluster (set by the daemon): which shard group this hub's leader serves and
        # how many there are, told in the Welcome so a worker opens a stream to every shard.
        self.shard, self.shards = 0, 1
        self.acl_node: Any = node                 # whose replica holds the ACL table (group 0's)
        # Workers.ConnectNode of an unsharded node: its one group's sub-stream (a sharded node's
        # is the shard front's, over every group it hosts: schedd.api.shard_routing)
        self.mux = WorkerMux(self._own_shard, lambda: 1, self.mux_limits, self.call_token)

    # ------------------------------------------------------------ registry

    def live(self, conn: WorkerConn, now: int) -> bool:
        """Heard from within two heartbeat periods (a SIGSTOPped worker keeps its TCP stream open
        but stops heartbeating: it must not be given work)."""
        return now - conn.last_heartbeat_ms <= 2 * self.lease_ms // 3

    def eligible(self, pool: str, now: int, labels: dict[str, str] | None = None,
                 team: str | None = None) -> list[WorkerConn]:
        """Live workers that can take one more attempt of a job in `pool` ("" = any pool) whose
        labels include all of `labels`; the one running (or being given) the fewest attempts
        first, then most free slots, ties by name (deterministic). Fewest first shares work
        evenly: a worker that advertises many slots gets no more than the others until they are
        full. With ACL, a worker whose token may not serve `team` is not eligible."""
        want = (labels or {}).items()
        out = [c for c in self.conns.values()
               if c.free_slots() > 0 and (not pool or c.pool == pool) and self.live(c, now)
               and all(c.labels.get(k) == v for k, v in want)
               and (team is None or c.may_serve(team))]
        out.sort(key=lambda c: (len(c.running) + c.reserved, -c.free_slots(), c.name))
        return out

    def assigned_to(self, conn: WorkerConn, execution_id: str, token: int) -> bool:
        """Whether `conn` may report the attempt holding `token`: it is the registered stream of
        its worker, and the attempt was assigned to that worker (on this stream, or on an
        earlier one of the same worker before a reconnect or failover)."""
        if self.conns.get(conn.name) is not conn:
            return False
        if token in conn.running:
            return True
        try:
            key = parse_execution_id(execution_id)
        except ValidationError:
            return False
        with self.node.lock:
            ex = self.view.execution(*key)
            return ex is not None and any(a.fencing_token == token and a.worker == conn.name
                                          for a in ex.attempts)

    def holder(self, token: int) -> WorkerConn | None:
        """The registered stream holding `token` (a replaced or dropped stream holds nothing)."""
        held = self.book.holder(token)
        conn = self.conns.get(held.name) if held is not None else None
        return conn if conn is not None and conn is held else None

    def send(self, conn: WorkerConn, msg: pb.LeaderMessage) -> None:
        self.faults.pushed(self.node, conn.name, msg)
        if not conn.closed:
            conn.out.put_nowait(msg)
            conn.sent += 1
            if msg.HasField("assignment"):
                self.book.sent(conn, msg.assignment.fencing_token)

    def vouches(self, worker: str, token: int, seen: int, now: int) -> bool:
        """Whether `worker`'s stream still vouches for the attempt holding `token`, although no
        heartbeat listed it since `seen`: the stream holds it, is open and delivering (a message
        read within the lease), and no list of its tokens read since then left it out while the
        worker knew of it. Past capacity a worker's heartbeats queue behind its results (or this
        loop reads them late): expiring an alive worker's attempts for that ran them twice, and
        the retries added load to an overloaded cluster. A silent stream, or a
        heartbeat that omits an attempt the worker had been sent, still loses it after a lease."""
        conn = self.conns.get(worker)
        if conn is None or conn.closed or token not in conn.running:
            return False
        if now - conn.last_heartbeat_ms > self.lease_ms:
            return False                          # silent: stopped, cut off, gone
        if conn.listed_ms <= seen:
            return True                           # no list read since: its heartbeat is on the way
        # a list read since left it out: an older worker does not say whether it had the assignment
        return conn.counts_reads and conn.read < self.book.sent_at(conn, token)

    def close_all(self, reason: str) -> None:
        """Leadership lost: end every stream with `reason` as its status (workers reconnect to
        the new leader; `leader=` in it sends them straight there when this node knows it)."""
        for conn in list(self.conns.values()):
            self._close(conn, reason)
        if self.conns:
            log.info("closed %d worker streams: %s", len(self.conns), reason)
        self.conns.clear()
        self.book.streams_closed()

    def drop_silent(self, now: int) -> None:
        """End the streams of workers silent for a whole lease; they reconnect if they are alive."""
        for conn in list(self.conns.values()):
            if now - conn.last_heartbeat_ms > self.lease_ms:
                log.warning("worker %s silent for %d ms: dropping its stream", conn.name,
                            now - conn.last_heartbeat_ms)
                self._close(conn)
                del self.conns[conn.name]

    def _close(self, conn: WorkerConn, why: str = "") -> None:
        conn.closed, conn.why = True, conn.why or why
        conn.out.put_nowait(None)
        self.logs.stream_closed(conn)

    def _ending(self, why: str) -> tuple[grpc.StatusCode, str]:
        """The status a stream ended by this node gets: not OK, so the worker tells a leader that
        went from a stream that ended, and is sent to the leader this node knows of, if any."""
        leader = self.node.leader_grpc_address()
        if leader and leader != self.node.cfg.grpc_address:
            return grpc.StatusCode.FAILED_PRECONDITION, f"{why}; leader={leader}"
        return grpc.StatusCode.UNAVAILABLE, f"{why}; retry shortly"

    async def _leading(self) -> bool:
        """Whether this node leads in its term. Just elected, its epoch entry is one commit
        away: a worker that found it that early is held until it applies (EPOCH_WAIT_S), rather
        than refused and sent into a backoff."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EPOCH_WAIT_S
        while not self.node.leads_epoch():
            if not self.node.is_leader() or loop.time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def _members(self) -> list[str]:
        """The members' gRPC addresses (Welcome.members)."""
        return [m.grpc_address for m in self.node.membership.members() if m.grpc_address]

    # ------------------------------------------------------------ gRPC

    async def Connect(self, request_iterator, context):
        if not await self._leading():
            leader = self.node.leader_grpc_address()
            if leader and leader != self.node.cfg.grpc_address:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"not the leader; leader={leader}")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no leader is elected yet; retry shortly")
        token = self.call_token()
        refused = self.counts.refusal(token, self.max_streams, self.max_streams_per_token)
        if refused:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
        self.counts.take(token)
        try:
            async for msg in self._serve(request_iterator, context):
                yield msg
        finally:
            self.counts.give_back(token)

    @property
    def streams(self) -> int:
        return self.counts.active

    @property
    def token_streams(self) -> dict[str, int]:
        return self.counts.by_token

    async def ConnectNode(self, request_iterator, context):
        # an async generator itself: grpc tells a streaming handler's kind by its function
        async for frame in self.mux.ConnectNode(request_iterator, context):
            yield frame

    def _own_shard(self, k: int):
        if k != self.shard:
            return grpc.StatusCode.INVALID_ARGUMENT, f"this cluster is not sharded: there is no shard {k}"
        return self.Connect

    def mux_limits(self) -> MuxLimits:
        """What bounds the node's outer worker streams (schedd.leader.worker_mux): these limits."""
        return MuxLimits(self.max_streams, self.max_streams_per_token, self.hello_timeout_s)

    def call_token(self) -> str | None:
        """The worker token of the current call (None: ACL disabled)."""
        return _token_key(self.identify()) if self.acl_enabled else None

    async def _hello(self, request_iterator, context: CallContext) -> pb.WorkerHello:
        """The first message, checked: a hello in time, a name, 1..max_slots slots."""
        try:
            first = await asyncio.wait_for(anext(aiter(request_iterator), None), self.hello_timeout_s)
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                f"no hello within {self.hello_timeout_s:g}s of connecting")
        if first is None or first.WhichOneof("kind") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be a hello")
        hello = first.hello
        if not hello.name or hello.slots < 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a worker needs a name and at least one slot")
        if max(hello.slots, hello.total_slots) > self.max_slots:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"worker {hello.name!r} claims {max(hello.slots, hello.total_slots)} slots; "
                                f"this cluster allows at "
                                f"most {self.max_slots} per worker (limits.max_worker_slots): start it with "
                                f"--slots {self.max_slots} or fewer")
        await self._check_token(hello, context)
        return hello

    async def _check_token(self, hello: pb.WorkerHello, context: CallContext) -> None:
        """With ACL: a worker token with `serve` on the worker's pool, and no more slots than it
        allows (the interceptor already refused a call without a worker token)."""
        if not self.acl_enabled:
            return
        p = self.identify()
        if p is None or p.kind != "worker":
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                "permission denied: missing capability 'serve': Workers.Connect needs a worker token")
        decision = A.allowed(p, A.SERVE, A.pool_resource(hello.pool))
        if not decision:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, decision.message)
        if max(hello.slots, hello.total_slots) > p.max_slots:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"worker {hello.name!r} claims {max(hello.slots, hello.total_slots)} slots; "
                                f"its token allows at most "
                                f"{p.max_slots}: start it with --slots {p.max_slots} or fewer")

    async def _serve(self, request_iterator, context):
        hello = await self._hello(request_iterator, context)
        now = self.clock.now_ms()
        old = self.conns.get(hello.name)
        principal = self.identify() if self.acl_enabled else None
        if old is not None and not old.closed and self.live(old, now) and not _same_process(old, hello, principal):
            await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                f"worker name {hello.name!r} is in use by a live stream from {old.peer}; "
                                "give every worker its own --name (a reconnect is accepted once the "
                                "old stream has gone silent)")
        over = self._token_overflow(principal, hello, old)
        if over:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, over)
        if old is not None:
            self._close(old)                      # a reconnect replaces the stale stream
        conn = WorkerConn(name=hello.name, slots=hello.slots, total_slots=hello.total_slots, pool=hello.pool,
                          labels=dict(hello.labels),
                          peer=context.peer(), connected_ms=now, last_heartbeat_ms=now,
                          incarnation=hello.incarnation[:64],
                          principal=principal,
                          batches=hello.batches, ahead=max(0, min(hello.ahead, MAX_AHEAD)),
                          counts_reads=hello.counts_reads, listed_ms=now,
                          kinds=worker_kinds(hello.handlers), serves_logs=hello.serves_logs)
        self.conns[hello.name] = conn
        self._adopt(conn, hello.running_tokens, now)
        log.info("worker %s connected from %s: %d slots (+%d ahead), pool %r, running %d", conn.name,
                 conn.peer, conn.slots, conn.ahead, conn.pool, len(hello.running_tokens))
        reader = asyncio.ensure_future(self._read(conn, request_iterator))
        try:
            yield pb.LeaderMessage(welcome=pb.Welcome(leader_id=self.node.cfg.node_id, term=self.node.term,
                                                      lease_ms=self.lease_ms, batches=True,
                                                      members=self._members(), shard=self.shard,
                                                      shards=self.shards if self.shards > 1 else 0))
            self.on_change()
            while True:
                msgs = _take(conn.out, [await conn.out.get()])
                end = msgs[-1] is None
                if end:
                    msgs.pop()
                if len(msgs) > 1 and conn.batches:
                    yield pb.LeaderMessage(batch=pb.LeaderBatch(messages=msgs))
                else:
                    for msg in msgs:
                        yield msg
                if end:
                    break
            if conn.why:
                await context.abort(*self._ending(conn.why))
        finally:
            reader.cancel()
            conn.closed = True
            self.logs.stream_closed(conn)
            if self.conns.get(conn.name) is conn:
                del self.conns[conn.name]
            log.info("worker %s disconnected", conn.name)
            self.on_change()

    def _token_overflow(self, principal: A.Principal | None, hello: pb.WorkerHello,
                        replaced: WorkerConn | None) -> str:
        """Why this hello would take its token past its share ("" if it would not): the streams
        and slots of the token's other registered streams, the one it replaces left out."""
        token = _token_key(principal)
        if token is None or principal is None:
            return ""
        others = [c for c in self.conns.values() if c is not replaced and not c.closed and c.token == token]
        if len(others) >= self.max_streams_per_token:
            return (f"worker {hello.name!r}: its token {token} already holds {len(others)} worker streams, its "
                    f"limit (limits.max_worker_streams_per_token = {self.max_streams_per_token})")
        used = sum(c.slots for c in others)
        if used + hello.slots > principal.max_slots:
            return (f"worker {hello.name!r} claims {hello.slots} slots, but its token {token} allows "
                    f"{principal.max_slots} across all its workers and {used} are held by "
                    f"{', '.join(sorted(c.name for c in others))}: start it with fewer slots, or give it "
                    f"a token of its own")
        return ""

    def _adopt(self, conn: WorkerConn, tokens, now: int) -> None:
        """A (re)connecting worker still runs these attempts: keep them alive if they are current
        and were assigned to this worker (another's token in a hello is ignored).

        The claims made for this very process (its incarnation) that its hello leaves out were
        pushed on a stream of it that ended before it read them (it says hello again with a new
        share of its slots, or after a network blip), or it finished them and resends their
        results right after the Welcome: the hello lists every attempt the process holds, and
        it is written only once the earlier stream is over. So they wait for the worker's word
        as a claim inherited from an earlier leader does (`AttemptBook.await_word`): a result
        settles them; a first heartbeat on this stream without them, after those resends, means
        the process never got them, and they are expired at once as never started and run
        again, not a lease later as a second attempt. A claim of another process of the name
        keeps the lease rule (that process may have started it before it went)."""
        if not tokens and not conn.incarnation:
            return
        listed = set(tokens)
        current: dict[int, str] = {}
        unlisted: list[int] = []
        with self.node.lock:
            for ex in self.view.running():
                a = ex.attempts[-1]
                if a.worker != conn.name:
                    continue
                if a.fencing_token in listed:
                    current[a.fencing_token] = ex.id
                elif conn.incarnation and getattr(a, "worker_incarnation", "") == conn.incarnation:
                    unlisted.append(a.fencing_token)
        for token in tokens:
            if token in current:
                self.book.hold(conn, token, current[token], now)
        for token in unlisted:
            self.book.await_word(token, conn.name)

    async def _read(self, conn: WorkerConn, request_iterator) -> None:
        try:
            async for msg in request_iterator:
                now = self.clock.now_ms()
                conn.last_heartbeat_ms = now
                if msg.WhichOneof("kind") == "batch":
                    for m in msg.batch.messages:
                        self._on_message(conn, m, now)
                else:
                    self._on_message(conn, msg, now)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        finally:
            if not conn.closed:
                self._close(conn)

    def _on_message(self, conn: WorkerConn, msg: pb.WorkerMessage, now: int) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "heartbeat":
            self.on_heartbeat(conn, msg.heartbeat, now)
        elif kind == "result":
            if self.assigned_to(conn, msg.result.execution_id, msg.result.fencing_token):
                self.on_result(conn, msg.result)
            else:
                log.warning("refused a result for %s (token %d) from %s (%s): not its attempt",
                            msg.result.execution_id, msg.result.fencing_token, conn.name, conn.peer)
                self.send(conn, pb.LeaderMessage(ack=pb.ResultAck(
                    fencing_token=msg.result.fencing_token, outcome="refused")))
        elif kind == "log_page":
            self.logs.answered(conn, msg.log_page)

    def on_heartbeat(self, conn: WorkerConn, hb: pb.Heartbeat, now: int) -> None:
        if conn.principal is not None and not self._token_valid(conn.principal, now):
            log.info("worker %s: its token expired or was revoked; closing the stream", conn.name)
            self._close(conn)
            return
        conn.draining = hb.draining
        conn.listed_ms, conn.read = now, hb.messages_read
        for token in hb.running_tokens:
            if token in conn.running:
                self.book.vouch(token, now)
        conn.reported = True

    def _token_valid(self, p: A.Principal, now: int) -> bool:
        """A worker's token is re-checked at every heartbeat: expiry, and revocation."""
        if p.expired(now):
            return False
        with self.acl_node.lock:
            return p.accessor is None or p.accessor in self.acl_node.state.acl.tokens

    async def ListWorkers(self, request, context) -> pb.ListWorkersResponse:
        if not self.node.is_leader() and self.router is not None:
            return await self.router.forward("Workers", "ListWorkers", request, context)
        return pb.ListWorkersResponse(workers=[c.info() for _, c in sorted(self.conns.items())])


def _token_key(principal: A.Principal | None) -> str | None:
    """What the per-token limits count by: the token's accessor (None: ACL disabled)."""
    if principal is None:
        return None
    return principal.accessor or principal.name


def _same_process(old: WorkerConn, hello: pb.WorkerHello, principal: A.Principal | None) -> bool:
    """Whether `hello` comes from the process whose stream `old` is (its random incarnation) with
    the same token: that process has given up on the old stream, so the new one replaces it."""
    return bool(hello.incarnation) and hello.incarnation[:64] == old.incarnation \
        and _token_key(principal) == old.token


def _take(q: asyncio.Queue, msgs: list) -> list:
    """`msgs` and whatever else is queued already (up to MAX_BATCH messages, or MAX_BATCH_BYTES
    and one more message, through a None: the end), so that what the assigner pushed in one step goes
    as one stream message, not one each."""
    size = msgs[0].ByteSize() if msgs[0] is not None else 0
    while msgs[-1] is not None and len(msgs) < MAX_BATCH and size < MAX_BATCH_BYTES and not q.empty():
        msgs.append(q.get_nowait())
        size += msgs[-1].ByteSize() if msgs[-1] is not None else 0
    return msgs
