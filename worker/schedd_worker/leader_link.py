"""The worker's link to the leader: find it, open a stream, keep it while it is the leader's.

Why separate: whether the worker is connected, to whom, in which term and with which lease is
decided here and only here, from the network's side (the search, the Welcome, a redirect, the
backoff, a newer leader seen by the watch, a stream that ended). The runtime decides what the
messages mean; it hands the link a `LinkUser` and reads the link's state (`connected`,
`max_term_seen`, `lease_ms`, `lost_since`). See the runtime's module doc for the protocol.

A sharded cluster has one link per shard (`shard`): shard k's Connect and probes carry the
metadata `x-schedd-shard: k` (shard 0's none, as before shards), its terms are that shard's
group's own, and a Welcome for another shard is refused (its tokens would be another group's).
A node routes a worker's Connect by that header and answers its NodeInfo probe about its
replica of the shard named, so every link's search and watch weigh the leaders and terms of
its own shard: the watch notices shard k's newer leader as it does shard 0's. A node that
answers only Cluster.Status (an older build) answers it about shard 0: shard k's link takes
the leader it names for a Connect (whose FAILED_PRECONDITION "leader=" redirects it) but not
its term (`Answer.term_known`).

Once the cluster is known to be sharded (`streams` gives the worker's `NodeStreams`), a link's
stream is a sub-stream of the worker's one stream to the node (`Workers.ConnectNode`,
`schedd_worker.node_streams`), read and ended as a Connect call is: nothing below changes. A
node that answers it UNIMPLEMENTED (an older build) gets this shard's own Connect, as before.

The shard count is learnt before the hello when it can be (`sharded`): the search's NodeInfo
answers say how many shard groups the cluster has (NodeStatus.shards), and the link tells the
runtime before it writes the hello, so a worker starting against a sharded cluster says its first
hello to shard 0 with shard 0's share of the slots and needs no second one. Why: a hello
that offered every slot had to be followed by another with the share, and the stream it ended
lost what shard 0's leader had pushed or was committing for it meanwhile (runs due when the
worker started): the worker never saw those assignments, its new hello could not list them, and
the leader gave them up only after a lease, so they ran a lease late as second attempts. Keeping
them across the second hello (listing tokens the worker never read) or having the leader hand
back what a new hello of the same process leaves out both still put that re-hello and its race
on every start; learning the count first removes it. The Welcome's count still rules: a node that
answers only Cluster.Status (an older build) says nothing, and a split raises the count later,
and both end in a second hello as before.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import grpc
import grpc.aio

from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_client.channels import KEEPALIVE_OPTIONS, Security, open_aio_channel, speaks_tls
from schedd_worker.hooks import WorkerHooks
from schedd_worker.leader_search import PROBE_GAP_S, LeaderSearch, Probes
from schedd_worker.node_streams import NodeStreams
from schedd_worker.session import Session
from schedd_worker.stream_errors import CredentialRefused, StreamEnded, describe, is_refusal, redirect_target, refuse

__all__ = ["LeaderLink", "LinkUser", "SHARD_HEADER", "shard_metadata", "DEFAULT_LEASE_MS", "BACKOFF_START_S", "BACKOFF_MAX_S", "WELCOME_TIMEOUT_S",
           "MIN_HEARTBEAT_S"]

log = logging.getLogger("schedd.worker")

DEFAULT_LEASE_MS = 10_000
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 2.0
WELCOME_TIMEOUT_S = 10.0        # from the hello to the Welcome
MIN_HEARTBEAT_S = 0.05
SHARD_HEADER = "x-schedd-shard"  # which shard group a call is for (none: shard 0)


def shard_metadata(shard: int) -> tuple[tuple[str, str], ...] | None:
    """The call metadata of a shard's link: none for shard 0, so that a worker of an unsharded
    cluster sends exactly what it always sent."""
    return ((SHARD_HEADER, str(shard)),) if shard > 0 else None

_CHANNEL_OPTIONS = [
    # our own backoff paces reconnects (schedd_client.channels keeps gRPC's short)
    ("grpc.enable_retries", 0),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]
_STREAM_OPTIONS = _CHANNEL_OPTIONS + KEEPALIVE_OPTIONS    # the stream: a frozen leader is noticed


class LinkUser(Protocol):
    """What the link asks of the worker: its hello, and what to do on the stream's events."""

    def hello(self) -> pb.WorkerMessage: ...

    def welcomed(self, session: Session) -> None: ...

    def handle(self, msg: pb.LeaderMessage) -> None: ...

    def tick(self, session: Session) -> None: ...


class LeaderLink:
    def __init__(self, cluster: Sequence[str], *, name: str, security: Security, hooks: WorkerHooks,
                 user: LinkUser, warn_at_once: bool = False, shard: int = 0,
                 streams: Callable[[], NodeStreams | None] = lambda: None,
                 sharded: Callable[[int], None] = lambda shards: None) -> None:
        self.name = name
        self.streams = streams                     # the worker's streams per node (None: a Connect each)
        self.sharded = sharded                     # the search found this many shards (module doc)
        self.shard = shard                         # the shard group this link follows the leader of
        self.metadata = shard_metadata(shard)
        self.tag = ""                              # " of shard k" in its log lines, once sharded
        # The first failed connection at WARNING (the SDK's Worker: nobody may be reading its
        # INFO lines), or at INFO (schedd-worker: a cluster still electing is no news).
        self.warn_at_once = warn_at_once
        self.security = security
        self.hooks = hooks
        self.user = user
        self.search = LeaderSearch(name, cluster, self._probes, lambda: self.max_term_seen, self._probe_gap)
        self.max_term_seen = 0
        self.connected = False
        self.leader_address: str | None = None
        self.connections = 0                       # Welcomes received so far
        self.lease_ms = DEFAULT_LEASE_MS
        self.lost_since: float | None = None       # loop time the last stream ended, while not connected
        self.started: float | None = None          # loop time the connection loop began
        self.backoff = BACKOFF_START_S
        self.session: Session | None = None
        self.closing = asyncio.Event()
        self._redirect: str | None = None

    # ------------------------------------------------------------ what the runtime uses

    def send(self, msg: pb.WorkerMessage) -> bool:
        """Queue `msg` on the current stream; False when there is none (or it is ending)."""
        s = self.session
        return s is not None and s.send(msg)

    def saw_term(self, term: int) -> None:
        self.max_term_seen = max(self.max_term_seen, term)

    def rewelcomed(self, term: int) -> None:
        """A second Welcome on the stream: the leader's term moved on."""
        self.saw_term(term)
        if self.session is not None:
            self.session.term = max(self.session.term, term)

    def rehello(self, why: str) -> None:
        """End the stream and open a new one to the same leader at once: what the hello says
        changed (a shard's share of the slots)."""
        s = self.session
        if s is not None and not s.ending:
            self._redirect = s.address
            s.drop(why)

    async def close(self) -> None:
        """Stop reconnecting, half-close the stream (see `Session.close`)."""
        self.closing.set()
        if self.session is not None:
            await self.session.close()

    # ------------------------------------------------------------ the connection loop

    async def run(self) -> None:
        """Connect, serve the stream, reconnect after a backoff, until `closing` (raises
        CredentialRefused)."""
        self.started = asyncio.get_running_loop().time()
        failures = 0
        redirects = 0                             # redirects followed in a row without a Welcome
        last_warn = 0.0
        loop = asyncio.get_running_loop()
        while not self.closing.is_set():
            welcomed_before = self.connections
            err: BaseException | None = None
            addr = None
            try:
                addr = self._redirect
                self._redirect = None
                if addr is None:
                    addr = await self.search.find()
                    if self.search.shards > 1:
                        self.sharded(self.search.shards)   # before the hello (module doc)
                await self._session(addr)
            except (asyncio.CancelledError, CredentialRefused):
                raise
            except StreamEnded as e:
                err = e
            except grpc.aio.AioRpcError as e:
                if is_refusal(e) and self.connections == welcomed_before:
                    refuse(self.name, [(addr or "?", e)])
                target = redirect_target(e)
                if target is not None and target != addr:
                    log.info("%s is not the leader%s; redirected to %s", addr, self.tag, target)
                    self._redirect = target
                    redirects += 1
                    if redirects <= 3:            # follow it at once (bounded: no ping-pong)
                        continue
                err = e
            except Exception as e:  # keep the worker alive, retry
                log.exception("worker connection failed")
                err = e
            if self.closing.is_set():
                return
            if self.connections != welcomed_before:
                self.backoff = BACKOFF_START_S    # we had a working stream: start over
                failures = 0
                redirects = 0
                if err is not None:
                    log.info("stream to the leader%s ended: %s; reconnecting", self.tag, describe(err))
            else:
                failures += 1
                now = loop.time()
                msg = "?" if err is None else describe(err)
                if failures == 1 or now - last_warn >= 30:
                    (log.warning if failures > 1 or self.warn_at_once else log.info)(
                        "cannot connect to the leader%s: %s; retrying with backoff", self.tag, msg)
                    last_warn = now
                else:
                    log.debug("cannot connect to the leader%s: %s", self.tag, msg)
            await self._back_off()

    async def _back_off(self) -> None:
        delay = self.backoff * (0.5 + random.random() * 0.5)
        self.backoff = min(self.backoff * 2, BACKOFF_MAX_S)
        try:
            await asyncio.wait_for(self.closing.wait(), delay)
        except TimeoutError:
            pass

    def _probes(self) -> Probes:
        tls_check = None if self.security.tls else (lambda a: speaks_tls(self.hooks.dial(a)))
        return Probes(lambda a: open_aio_channel(self.hooks.dial(a), self.security, _CHANNEL_OPTIONS),
                      speaks_tls=tls_check, metadata=self.metadata)

    def _probe_gap(self) -> float:
        """PROBE_GAP_S while the leader has been gone less than a lease (an election takes about
        a second), then BACKOFF_MAX_S: a cluster without a quorum is not asked 10 times a second
        by every worker for as long as it lasts."""
        since = self.lost_since if self.lost_since is not None else self.started
        now = asyncio.get_running_loop().time()
        return PROBE_GAP_S if since is None or now - since < self.lease_ms / 1000 else BACKOFF_MAX_S

    # ------------------------------------------------------------ one stream

    async def _welcome(self, call: Any, addr: str) -> Session:
        """Hello, then the Welcome: the session it opens (raises StreamEnded if none comes)."""
        await call.write(self.user.hello())
        try:
            first = await asyncio.wait_for(call.read(), WELCOME_TIMEOUT_S)
        except TimeoutError:
            raise StreamEnded(f"no Welcome from {addr} within {WELCOME_TIMEOUT_S:g}s") from None
        if first is grpc.aio.EOF:
            raise StreamEnded(f"{addr} ended the stream before its Welcome")
        if first.WhichOneof("kind") != "welcome":
            raise StreamEnded(f"{addr} sent {first.WhichOneof('kind')} before its Welcome")
        w = first.welcome
        if w.shards > 1 and w.shard != self.shard:    # tokens of another group: never mix them
            raise StreamEnded(f"{addr} welcomed us for shard {w.shard}, this stream is shard {self.shard}'s")
        if w.term < self.max_term_seen:
            raise StreamEnded(f"{addr} ({w.leader_id}) welcomed us in term {w.term}, "
                              f"already saw term {self.max_term_seen}")
        self.saw_term(w.term)
        self.search.welcomed_by(addr, w.members)
        return Session(address=addr, call=call, leader_id=w.leader_id, term=w.term,
                       lease_ms=w.lease_ms if w.lease_ms > 0 else DEFAULT_LEASE_MS, batches=w.batches,
                       shards=max(1, w.shards))

    async def _session(self, addr: str) -> None:
        """One stream: hello, Welcome, then serve it until it ends (raises when it fails)."""
        # pings only to a node that said it accepts them: an older build's gRPC ends a stream
        # pinged every second ("too_many_pings"); the watch still finds a newer leader
        options = _STREAM_OPTIONS if self.search.pings.get(addr) else _CHANNEL_OPTIONS
        channel: grpc.aio.Channel | None = None
        call: Any = None
        conn: Session | None = None
        try:
            streams = self.streams()
            if streams is not None and streams.speaks(addr):
                call = streams.open(addr, self.shard, options)
                try:
                    conn = await self._welcome(call, addr)
                except grpc.aio.AioRpcError as e:
                    if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                        raise
                    streams.old_node(addr)
                    call.cancel()
            if conn is None:
                channel = open_aio_channel(self.hooks.dial(addr), self.security, options)
                call = pb_grpc.WorkersStub(channel).Connect(metadata=self.metadata)
                conn = await self._welcome(call, addr)
            self.session = conn
            self.connected = True
            self.lost_since = None
            self.lease_ms = conn.lease_ms
            self.leader_address = addr
            self.connections += 1
            self.user.welcomed(conn)
            reader = asyncio.create_task(conn.reader(self.user.handle))
            ender = asyncio.create_task(conn.end.wait())
            conn.tasks = [asyncio.create_task(conn.writer()), asyncio.create_task(self._heartbeats(conn)),
                          asyncio.create_task(self._watch(conn)), reader, ender]
            await asyncio.wait({reader, ender}, return_when=asyncio.FIRST_COMPLETED)
            if reader.done():
                reader.result()                   # raises the stream's error
                if not conn.ending:
                    raise StreamEnded("the leader ended the stream")
            elif conn.ending != "worker stopped":
                raise StreamEnded(conn.ending)
        finally:
            if self.session is conn and conn is not None:
                self.session = None
                self.connected = False
                self.lost_since = asyncio.get_running_loop().time()
            if conn is not None:
                for t in conn.tasks:
                    t.cancel()
                await asyncio.gather(*conn.tasks, return_exceptions=True)
            if call is not None and not call.done():
                call.cancel()
            if channel is not None:
                await channel.close()
            if conn is not None:
                conn.gone.set()

    async def _heartbeats(self, conn: Session) -> None:
        interval = max(MIN_HEARTBEAT_S, conn.lease_ms / 3000)
        while True:
            await asyncio.sleep(interval)
            self.user.tick(conn)

    async def _watch(self, conn: Session) -> None:
        """A newer leader makes this stream stale. A leader cut off from its peers keeps its
        stream alive (its pings are answered) until it steps down; the new one grants running
        attempts one lease from its takeover, so the worker must find it well within that lease
        to report them before they are expired."""
        best = await self.search.watch(conn.address, lambda: conn.term)
        log.info("%s leads%s in term %d (we are connected to %s, term %d): reconnecting",
                 best.leader, self.tag, best.term, conn.address, conn.term)
        self._redirect = best.leader
        conn.drop(f"a newer leader ({best.leader}, term {best.term}) exists")
