"""An in-memory network of pysyncobj nodes, driven step by step (hashicorp/raft's InmemTransport).

Tests script what pysyncobj's sockets would do: every `send` lands in a queue; the test decides
which messages arrive, in which order, how often, or never (drop, duplicate, reorder, partition).
Nothing ticks on its own (`autoTick=False`, no threads, no sockets), so a scenario replays exactly.
Messages cross as pickles, as on the wire, so a receiver never shares objects with the sender.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterable

from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.transport import Transport

NO_OP = struct.pack("B", 1)     # pysyncobj's NO_OP command byte: applied as nothing


@dataclass(slots=True)
class Message:
    src: str
    dst: str
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("type"))


@dataclass
class MemoryNetwork:
    """Queues of messages between nodes named by address."""

    queue: list[Message] = field(default_factory=list)
    nodes: dict[str, SyncObj] = field(default_factory=dict)
    transports: dict[str, MemoryTransport] = field(default_factory=dict)
    delivered: int = 0

    def transport_class(self) -> type:
        network = self

        class _Bound(MemoryTransport):
            def __init__(self, syncObj: SyncObj, selfNode: Any, otherNodes: Any) -> None:
                super().__init__(network, syncObj, selfNode, otherNodes)

        return _Bound

    def add(self, address: str, peers: Iterable[str], *, cls: type = SyncObj,
            conf: SyncObjConf | None = None) -> SyncObj:
        conf = conf or driven_conf()
        node: SyncObj = cls(address, [p for p in peers if p != address], conf=conf,
                            transportClass=self.transport_class())
        self.nodes[address] = node
        return node

    def connect_all(self) -> None:
        for t in self.transports.values():
            t.connect_all()

    def take(self, predicate: Callable[[Message], bool] = lambda m: True) -> list[Message]:
        """Remove and return the queued messages matching `predicate`, oldest first."""
        taken = [m for m in self.queue if predicate(m)]
        self.queue = [m for m in self.queue if not predicate(m)]
        return taken

    def deliver(self, messages: Iterable[Message]) -> None:
        for m in messages:
            self.transports[m.dst].receive(m)
            self.delivered += 1

    def deliver_all(self, max_rounds: int = 1000) -> None:
        """Deliver until no message is left (replies included)."""
        for _ in range(max_rounds):
            if not self.queue:
                return
            self.deliver(self.take())
        raise AssertionError("messages kept flowing for %d rounds" % max_rounds)


class MemoryTransport(Transport):
    def __init__(self, network: MemoryNetwork, syncObj: SyncObj, selfNode: Any,
                 otherNodes: Any) -> None:
        super().__init__(syncObj, selfNode, otherNodes)
        self._network = network
        self._self = selfNode.id
        self._peers = {n.id: n for n in otherNodes}
        self.connected: set[str] = set()
        network.transports[self._self] = self

    def connect_all(self) -> None:
        for addr, node in self._peers.items():
            self.connected.add(addr)
            self._onNodeConnected(node)

    def disconnect(self, addr: str) -> None:
        self.connected.discard(addr)
        self._onNodeDisconnected(self._peers[addr])

    def send(self, node: Any, message: dict[str, Any]) -> bool:
        if node.id not in self.connected:
            return False
        body = pickle.loads(pickle.dumps(message))
        self._network.queue.append(Message(self._self, node.id, body))
        return True

    def receive(self, message: Message) -> None:
        if message.src in self.connected:
            self._onMessageReceived(self._peers[message.src], message.body)

    def addNode(self, node: Any) -> None:
        self._peers[node.id] = node

    def dropNode(self, node: Any) -> None:
        self._peers.pop(node.id, None)

    def destroy(self) -> None:
        pass


def driven_conf(**overrides: Any) -> SyncObjConf:
    """A SyncObjConf for driven nodes: no tick thread, memory journal, small batches."""
    kwargs: dict[str, Any] = dict(autoTick=False, appendEntriesBatchSizeBytes=64,
                                  raftMinTimeout=0.4, raftMaxTimeout=0.8, appendEntriesPeriod=0.05,
                                  logCompactionMinEntries=10**9, logCompactionMinTime=10**9)
    kwargs.update(overrides)
    return SyncObjConf(**kwargs)


# --------------------------------------------------------------------------- log helpers

def raft_log(node: SyncObj) -> list[tuple[int, int]]:
    """(index, term) of every entry in the node's log."""
    journal = node._SyncObj__raftLog        # the adapter's own test support
    return [(int(e[1]), int(e[2])) for e in journal[:]]


def append_raw(node: SyncObj, terms: Iterable[int], size: int = 8) -> None:
    """Append NO_OP entries of the given terms (as a leader of that term would have)."""
    journal = node._SyncObj__raftLog
    for term in terms:
        idx = int(journal[-1][1]) + 1
        journal.add(NO_OP + b"x" * (size - 1), idx, term)


def set_term(node: SyncObj, term: int) -> None:
    node._SyncObj__raftCurrentTerm = term
    node._SyncObj__votedForNodeId = None


def make_leader(node: SyncObj, term: int) -> None:
    """Make `node` leader of `term` as a won election would (it appends its no-op)."""
    set_term(node, term)
    node._SyncObj__onBecomeLeader()


def send_heartbeats(node: SyncObj) -> None:
    node._SyncObj__sendAppendEntries()


def match_index(leader: SyncObj, peer: str) -> int:
    for n, m in leader._SyncObj__raftMatchIndex.items():
        if n.id == peer:
            return int(m)
    raise KeyError(peer)


def commit_index(node: SyncObj) -> int:
    return int(node._SyncObj__raftCommitIndex)
