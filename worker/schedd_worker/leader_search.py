"""Who leads the cluster: every known node asked at once, the answer a dialable address.

Why separate: finding the leader is a decision of its own with its own clock (PROBE_TIMEOUT_S
per ask, a gap between asks of one node, FIND_PATIENCE_S per search), its own memory (the nodes
the last Welcome listed, which nodes accept keepalive pings, which are an older build that
answers only `Cluster.Status`) and its own way to fail (every node that answered refused the
credential). The stream to the leader (`schedd_worker.leader_link`) only asks it where to go,
and, while connected, whether a leader in a newer term exists (`watch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
import grpc.aio

from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_client._failover import tls_failure
from schedd_client.channels import KEEPALIVE_MS
from schedd_worker.stream_errors import StreamEnded, describe, is_refusal, refuse

__all__ = ["Answer", "Probes", "LeaderSearch", "dialable", "STATUS_TIMEOUT_S", "PROBE_TIMEOUT_S", "PROBE_GAP_S",
           "FIND_PATIENCE_S", "WATCH_S"]

STATUS_TIMEOUT_S = 5.0          # one Cluster.Status call
PROBE_TIMEOUT_S = 0.5           # one node asked who leads (a frozen node must not hold the search)
PROBE_GAP_S = 0.1               # between two asks of one node while looking for the leader
FIND_PATIENCE_S = 3.0           # one search, then the connection loop's backoff
WATCH_S = 1.0                   # while connected: ask the other nodes whether a newer leader exists

_NOT_NODE_INFO = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED)


def dialable(leader: str, asked: str) -> str:
    """A leader advertising a wildcard bind address is reached on the host we asked."""
    host, sep, port = leader.rpartition(":")
    if sep and host in ("0.0.0.0", "[::]", "::", ""):
        ahost = asked.rpartition(":")[0]
        if ahost:
            return f"{ahost}:{port}"
    return leader


def _leader_term(st: pb.ClusterStatus) -> int:
    return next((n.term for n in st.nodes if n.id == st.leader_id), st.term)


@dataclass(slots=True, frozen=True)
class Answer:
    """What one node said about the leader: its address and term, or why it named none."""
    leader: str = ""
    term: int = 0
    why: str = ""
    # False: `term` is another shard group's (a shard k's probe that only Cluster.Status
    # answered: a node routes Status by the header only when a node forwarded it, so it answers
    # about shard 0). Such a leader is worth a Connect (which redirects), its term is not a
    # newer leader of this shard.
    term_known: bool = True
    pings: bool = False                  # the node accepts our keepalive pings (NodeStatus.accepts_pings_ms)
    refused: grpc.aio.AioRpcError | None = None   # the node refused our credential (CredentialRefused)
    took_credential: bool = False        # the node answered past authentication
    tls: bool = False                    # ... the refusal: it speaks only TLS, we plaintext
    shards: int = 0                      # the cluster's shard count, as the node's NodeInfo says (0: unsharded, or unknown)


@dataclass(slots=True)
class _Seen:
    """What one search heard: the credential refusals, and whether any node took it."""
    refused: list[tuple[str, grpc.aio.AioRpcError]] = field(default_factory=list)
    answered: bool = False
    tls: bool = False                    # every refusal is a node that requires TLS of a plaintext worker


@dataclass(slots=True, eq=False)
class Probes:
    """Channels to the nodes asked who leads, one per address, kept for one search (or one
    session's watch) and then closed: a TLS handshake per ask would cost more than the ask, and
    a channel made afresh per search picks up rotated certificate files."""
    open: Callable[[str], grpc.aio.Channel]
    # plaintext workers only: does the node at this address answer a TLS handshake? (a
    # plaintext call to a TLS node fails like a node that went away: this tells them apart)
    speaks_tls: Callable[[str], bool] | None = None
    channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)
    old: set[str] = field(default_factory=set)       # refused NodeInfo (an older build): Status
    # a shard's link (`x-schedd-shard: k`, k > 0): a node answers NodeInfo about its replica of
    # that shard, whose leader and term are not shard 0's (None: shard 0, sent as today)
    metadata: tuple[tuple[str, str], ...] | None = None

    async def ask(self, addr: str) -> Answer:
        ch = self.channels.get(addr)
        if ch is None:
            ch = self.channels[addr] = self.open(addr)
        stub = pb_grpc.ClusterStub(ch)
        try:
            if addr not in self.old:
                try:
                    info = await stub.NodeInfo(pb.NodeInfoRequest(), timeout=PROBE_TIMEOUT_S,
                                              metadata=self.metadata)
                except grpc.aio.AioRpcError as e:
                    if e.code() not in _NOT_NODE_INFO:
                        raise
                    self.old.add(addr)
                else:                             # the node we asked is the one that answers
                    return _node_info_answer(addr, info)
            st = await stub.Status(pb.ClusterStatusRequest(), timeout=STATUS_TIMEOUT_S,
                                   metadata=self.metadata)
        except grpc.aio.AioRpcError as e:
            if (self.speaks_tls is not None and e.code() == grpc.StatusCode.UNAVAILABLE
                    and tls_failure(e.details() or "") and await asyncio.to_thread(self.speaks_tls, addr)):
                return Answer(why=f"{addr}: requires TLS", refused=e, tls=True)
            return Answer(why=f"{addr}: {describe(e)}", refused=e if is_refusal(e) else None)
        if not st.leader_grpc_address:
            return Answer(why=f"{addr}: knows no leader yet", took_credential=True)
        return Answer(dialable(st.leader_grpc_address, addr), _leader_term(st), took_credential=True,
                      term_known=self.metadata is None)

    async def close(self) -> None:
        channels, self.channels = list(self.channels.values()), {}
        await asyncio.gather(*(c.close() for c in channels), return_exceptions=True)


def _node_info_answer(addr: str, info: pb.NodeStatus) -> Answer:
    pings = 0 < info.accepts_pings_ms <= KEEPALIVE_MS
    shards = max(0, info.shards)
    if info.role == "leader":
        return Answer(addr, info.term, pings=pings, took_credential=True, shards=shards)
    if info.leader_grpc_address:   # a follower names its leader (maybe one we never knew)
        return Answer(dialable(info.leader_grpc_address, addr), info.term, took_credential=True, shards=shards)
    return Answer(term=info.term, why=f"{addr}: {info.role or '?'} in term {info.term}", took_credential=True,
                  shards=shards)


@dataclass(slots=True, eq=False)
class LeaderSearch:
    """The nodes this worker knows and what they said about themselves."""
    name: str                                    # the worker's, for the refusal's log line
    cluster: Sequence[str]                       # the configured addresses
    probes: Callable[[], Probes]                 # a fresh set of channels, per search or watch
    max_term_seen: Callable[[], int]
    gap: Callable[[], float]                     # between two asks of one node (the link decides)
    members: list[str] = field(default_factory=list)       # the gRPC addresses the last Welcome listed
    pings: dict[str, bool] = field(default_factory=dict)   # address -> it accepts keepalive pings
    # The most shard groups a node's NodeInfo named (0: none did: unsharded, or older nodes
    # that answer only Cluster.Status). Known before the first hello, it lets that hello offer
    # this shard's share of the slots at once (`LeaderLink.run`).
    shards: int = 0

    def known(self) -> list[str]:
        """Every node to ask: the configured addresses, then the members the last Welcome listed."""
        return list(dict.fromkeys([*self.cluster, *self.members]))

    def welcomed_by(self, addr: str, members: Sequence[str]) -> None:
        """A Welcome from `addr` listed the cluster's members: ask those from now on too."""
        if members:
            self.members = [dialable(m, addr) for m in members]

    async def find(self) -> str:
        """Ask every known node at once, each again after a gap, until one says it leads in a
        term not older than one seen: its gRPC address (raises StreamEnded after FIND_PATIENCE_S)."""
        deadline = asyncio.get_running_loop().time() + FIND_PATIENCE_S
        probes = self.probes()
        why: dict[str, str] = {}
        seen = _Seen()
        tasks = [asyncio.create_task(self._probe_until(probes, addr, deadline, why, seen))
                 for addr in self.known()]
        try:
            for first in asyncio.as_completed(tasks):
                leader = await first
                if leader:
                    return leader
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await probes.close()
        if seen.refused and not seen.answered:   # every node that answered said no (others are down)
            refuse(self.name, seen.refused, tls=seen.tls)
        raise StreamEnded("no leader found (" + "; ".join(why.values()) + ")")

    async def _probe_until(self, probes: Probes, addr: str, deadline: float, why: dict[str, str],
                           seen: _Seen) -> str:
        """Ask `addr` until it names a leader or `deadline` passes ("": none). A node that
        refuses the credential is not asked again in this search (`seen` keeps the refusal)."""
        loop = asyncio.get_running_loop()
        while True:
            a = await probes.ask(addr)
            if a.refused is not None:
                why[addr] = a.why
                seen.tls = a.tls and (seen.tls or not seen.refused)
                seen.refused.append((addr, a.refused))
                return ""
            seen.answered = seen.answered or a.took_credential
            self.shards = max(self.shards, a.shards)
            term = self.max_term_seen()
            if a.leader and (a.term >= term or not a.term_known):
                self.pings[a.leader] = a.pings
                return a.leader
            why[addr] = a.why or f"{addr}: names a leader of term {a.term}, already saw {term}"
            left = deadline - loop.time()
            if left <= 0:
                return ""
            await asyncio.sleep(min(self.gap(), left))

    async def watch(self, address: str, term: Callable[[], int]) -> Answer:
        """Every WATCH_S, ask every node but `address` at once who leads, until one names a
        leader in a term newer than `term()`: the newest such answer."""
        probes = self.probes()
        try:
            while True:
                await asyncio.sleep(WATCH_S)
                others = [a for a in self.known() if a != address] or list(self.cluster)
                answers = await asyncio.gather(*(probes.ask(a) for a in others))
                newer = [a for a in answers if a.leader and a.term_known and a.term > term()]
                if newer:
                    return max(newer, key=lambda a: a.term)
        finally:
            await probes.close()
