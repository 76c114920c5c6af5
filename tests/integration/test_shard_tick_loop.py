"""A sharded node ticks all its Raft groups on one thread (schedd.replication.ticker) and listens
on one Raft port for all of them (schedd.replication.raft_port): three nodes of a 4-shard
cluster, built in this process as the daemon builds them (a RaftNode per group, each node's
groups on that node's one TickLoop and SharedRaftPort, real TCP on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable

import pytest

from schedd.core import commands as C
from schedd.core.shards import SHARED_PORT, shard_raft_address
from schedd.replication.node import RaftNode
from schedd.replication.raft_port import SharedRaftPort
from schedd.replication.ticker import THREAD_NAME, TickLoop
from schedd.runtime.cluster import restartable_ports
from schedd.runtime.config import from_dict

pytestmark = pytest.mark.timeout(180)

SHARDS = 4
NODES = ("n1", "n2", "n3")
SECRET = "tick-loop-test-secret-0123456789abcdef"


def wait_for(what: str, ok: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(0.05)


def tick_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == THREAD_NAME]


def autotick_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if "_autoTickThread" in t.name]


class Node:
    """One node: a TickLoop, a SharedRaftPort and a RaftNode per shard, configured as
    groups.group_config and groups.build_group do."""

    def __init__(self, i: int, base: int, root) -> None:
        self.i, self.base, self.root = i, base, root
        self.ticker = TickLoop()
        self.port = SharedRaftPort(raft_of(base, i), self.ticker)
        self.groups: dict[int, RaftNode] = {}
        for k in range(SHARDS):
            self.add(k)

    def add(self, k: int, data: str = "") -> None:
        """Build this node's replica of group k (in a data dir of its own, `data` apart)."""
        base, i = self.base, self.i

        def addr(j: int) -> str:              # node j's one Raft port: base + j, for every group
            return shard_raft_address(raft_of(base, j), k, SHARED_PORT)

        def grpc(j: int) -> str:
            return f"127.0.0.1:{base + len(NODES) + j}"
        data_dir = self.root / NODES[i] / f"{k}{data}"
        data_dir.mkdir(parents=True)
        cfg = from_dict({
            "node_id": NODES[i], "data_dir": str(data_dir), "secret": SECRET,
            "raft_address": addr(i), "grpc_address": grpc(i),
            "peers": [{"id": n, "raft_address": addr(j), "grpc_address": grpc(j)}
                      for j, n in enumerate(NODES) if j != i]})
        self.groups[k] = RaftNode(cfg, ticker=self.ticker, raft_port=self.port, port_group=k)

    def close(self) -> None:
        for g in self.groups.values():
            g.close()


def raft_of(base: int, j: int) -> str:
    return f"127.0.0.1:{base + j}"


def leader_of(nodes: list[Node], k: int) -> RaftNode | None:
    leading = [n.groups[k] for n in nodes if k in n.groups and n.groups[k].is_leader()]
    return leading[0] if len(leading) == 1 else None


def commit_one(nodes: list[Node], k: int, name: str) -> None:
    """Propose an entry on group k's leader; wait until every replica of k applied it."""
    wait_for(f"group {k} has one leader", lambda: leader_of(nodes, k) is not None)
    leader = leader_of(nodes, k)
    assert leader is not None

    async def propose() -> int:
        await leader.propose(C.encode(C.PAUSE, rid=f"r-{name}", now=1, term=leader.term, by="t", name=name),
                             timeout=30)
        return int(leader.state.last_index)
    index = asyncio.run(propose())
    wait_for(f"every replica of group {k} applied {index}",
             lambda: all(n.groups[k].state.last_index >= index for n in nodes if k in n.groups))


@pytest.fixture
def cluster(tmp_path):
    base = restartable_ports(2 * len(NODES))
    nodes: list[Node] = []
    try:
        nodes = [Node(i, base, tmp_path) for i in range(len(NODES))]
        yield nodes
    finally:
        for n in nodes:
            n.close()


def test_a_sharded_node_ticks_every_group_on_one_thread_and_each_elects_and_commits(cluster):
    for k in range(SHARDS):
        commit_one(cluster, k, f"job-{k}")
    wait_for("one tick thread per node, whatever S", lambda: len(tick_threads()) == len(NODES), timeout=10)
    assert autotick_threads() == []                  # and no pysyncobj tick thread per group
    for n in cluster:
        assert all(not g.sync.tick_thread_alive() for g in n.groups.values())


def test_a_group_leaving_the_loop_leaves_the_others_running_and_a_new_one_joins(cluster):
    for k in range(SHARDS):
        commit_one(cluster, k, f"before-{k}")
    gone = 1
    for n in cluster:                                # the whole group torn down, on every node
        n.groups.pop(gone).close()
    assert all(n.ticker.running for n in cluster)
    wait_for("one tick thread per node", lambda: len(tick_threads()) == len(NODES), timeout=10)
    for k in range(SHARDS):
        if k != gone:
            commit_one(cluster, k, f"after-{k}")
    terms = {k: [n.groups[k].term for n in cluster] for k in range(SHARDS) if k != gone}
    for n in cluster:                                # a group made at run time joins the running loops
        n.add(gone, data="-new")
    commit_one(cluster, gone, "new-group")
    wait_for("one tick thread per node", lambda: len(tick_threads()) == len(NODES), timeout=10)
    for k in terms:                                  # the others: still one leader each, no election since
        commit_one(cluster, k, f"again-{k}")
        assert [n.groups[k].term for n in cluster] == terms[k]


def open_fds() -> dict[int, str]:
    """This process's descriptors and what each names."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass                    # closed meanwhile (the listing's own)
    return out


def held(fds: dict[int, str]) -> int:
    """Sockets, pipes and the like: what a group keeps open for as long as it runs."""
    return sum(1 for target in fds.values() if target.startswith(("socket:", "pipe:", "anon_inode:")))


def tcp_table() -> dict[str, tuple[int, int, str]]:
    """Every TCP socket of the host as its descriptor target ("socket:[inode]") -> (local port,
    remote port, state: "0A" listening), from /proc/net/tcp and tcp6."""
    out: dict[str, tuple[int, int, str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            local, remote, state, inode = cols[1], cols[2], cols[3], cols[9]
            out[f"socket:[{inode}]"] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state)
    return out


def group_sockets(g: RaftNode) -> set[str]:
    """The sockets a group's transport holds now (the links it dialled and those the port
    handed it), as descriptor targets: on a shared port, its ports say nothing about whose
    they are."""
    transport = g.sync._SyncObj__transport
    out = set()
    for conn in (*transport._connections.values(), *transport._unknownConnections):
        fd = conn.fileno()
        if fd is not None:
            try:
                out.add(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
    return out


def left_open(fds: dict[int, str], socks: set[str], made: set[str], part: str) -> list[str]:
    """What a dropped group still holds: one of its sockets (the links it accepted and the links
    it dialled), a pipe or poller made while it was built, a file in its data dirs. Counting
    every socket instead would make the test fail whenever another group's link happens to be
    reconnecting."""
    out = []
    for target in fds.values():
        if target in socks:
            out.append(target)
        elif target in made and target.startswith(("pipe:", "anon_inode:")):
            out.append(target)
        elif part in target:
            out.append(target)
    return out


def test_a_dropped_group_gives_back_every_descriptor_and_thread(cluster):
    """A shard move drops a replica at run time: its sockets, journal, wake pipe and threads
    go with it (pysyncobj never closes its wake pipe: two descriptors per drop, before)."""
    gone = 2
    commit_one(cluster, gone, "before")
    for n in cluster:
        n.groups.pop(gone).close()
    for k in range(SHARDS):                          # the others connected and settled
        if k != gone:
            commit_one(cluster, k, f"settled-{k}")
    fds = open_fds()
    for n in cluster:                                # built at run time, elects, commits, dropped
        n.add(gone, data="-again")
    commit_one(cluster, gone, "again")
    built = open_fds()
    made = set(built.values()) - set(fds.values())
    again = f"/{gone}-again"
    wait_for("its links up", lambda: all(len(group_sockets(n.groups[gone])) >= len(NODES) - 1 for n in cluster))
    socks = set().union(*(group_sockets(n.groups[gone]) for n in cluster))
    assert any(t.startswith("pipe:") for t in made) and left_open(open_fds(), socks, made, again)
    dropped = [n.groups.pop(gone) for n in cluster]
    own_threads = [t for t in (g.sync._SyncObj__raftLog._syncer for g in dropped) if t is not None]
    for g in dropped:
        g.close()
    # Its sockets, pipes and files; the other groups' (a link reconnecting, a meta or level file
    # being replaced) are theirs, whatever they do meanwhile.
    try:
        wait_for("its sockets, pipes and files closed", lambda: not left_open(open_fds(), socks, made, again),
                 timeout=20)
    except AssertionError:
        now = open_fds()
        raise AssertionError(f"still open {left_open(now, socks, made, again)}; sockets and pipes "
                             f"{held(fds)} -> {held(built)} -> {held(now)}") from None
    # its threads: its journal's background sync (its Raft ticks ran on the node's loop, which goes on)
    assert own_threads and not any(t._thread.is_alive() for t in own_threads)
    assert all(n.ticker.running for n in cluster) and len(tick_threads()) == len(NODES)


def test_every_node_listens_on_one_raft_port_for_all_its_groups(cluster):
    for k in range(SHARDS):
        commit_one(cluster, k, f"one-port-{k}")
    table = tcp_table()
    listening = sorted(table[t][0] for t in open_fds().values() if t in table and table[t][2] == "0A")
    assert listening == [cluster[0].base + j for j in range(len(NODES))]      # 3 nodes, 3 ports, S = 4
    assert all(n.port.groups() == list(range(SHARDS)) for n in cluster)


def test_the_loop_thread_ends_with_its_last_group(tmp_path):
    base = restartable_ports(2 * len(NODES))
    node = Node(0, base, tmp_path)                   # alone: its peers never answer
    try:
        wait_for("the loop runs", lambda: node.ticker.running)
    finally:
        node.close()
    wait_for("the loop thread ended", lambda: not node.ticker.running, timeout=10)


def test_a_group_whose_raft_port_is_taken_starts_and_binds_once_it_is_free(tmp_path):
    """Built with autoTick off, stock pysyncobj's constructor would spin on the bind until the
    port is free; on the loop, as on a tick thread of its own, the ticks retry it instead."""
    base = restartable_ports(2 * len(NODES))
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", base))                  # node 0's Raft port
    blocker.listen()
    started = time.monotonic()
    node = Node(0, base, tmp_path)
    try:
        assert time.monotonic() - started < 20
        transports = [node.groups[k].sync._SyncObj__transport for k in range(SHARDS)]
        time.sleep(0.5)
        assert not any(t.ready for t in transports)    # they tried, and go on trying
        assert not node.port.listening
        blocker.close()
        wait_for("every group bound the port", lambda: all(t.ready for t in transports), timeout=15)
        assert node.port.groups() == list(range(SHARDS))
    finally:
        blocker.close()
        node.close()


class LoadsSeen(TickLoop):
    """A tick loop that notes, as each replica registers (before any tick of it), whether its
    dump is still to be loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.dump_pending: list[bool] = []

    def register(self, replica) -> None:
        self.dump_pending.append(bool(getattr(replica.sync, "_SyncObj__needLoadDumpFile", False)))
        super().register(replica)


def test_a_group_on_the_loop_loads_its_dump_before_the_loop_ticks_it(tmp_path):
    """A dump load on the loop's thread would hold every other group's ticks while it runs, so
    the group loads it on the thread building it: when the loop first sees the replica, its
    state already holds what the dump held."""
    port = restartable_ports(1)
    data = tmp_path / "n1" / "0"
    data.mkdir(parents=True)
    cfg = from_dict({"node_id": "n1", "data_dir": str(data), "secret": SECRET,
                     "raft_address": f"127.0.0.1:{port}", "grpc_address": "127.0.0.1:1", "peers": []})
    node = RaftNode(cfg, ticker=TickLoop())
    try:
        wait_for("a leader", node.is_leader)

        async def propose(i: int) -> None:
            await node.propose(C.encode(C.PAUSE, rid=f"r-{i}", now=1, term=node.term, by="t", name=f"j{i}"),
                               timeout=30)
        for i in range(5):
            asyncio.run(propose(i))
        index = int(node.state.last_index)
        node.sync.forceLogCompaction()
        dump = data / "raft.dump"
        wait_for("the dump", lambda: dump.exists() and dump.stat().st_size > 0)
        wait_for("the snapshot child reaped", lambda: not node.sync._child_running())
    finally:
        node.close()
    loop = LoadsSeen()
    again = RaftNode(from_dict({"node_id": "n1", "data_dir": str(data), "secret": SECRET,
                                "raft_address": f"127.0.0.1:{port}", "grpc_address": "127.0.0.1:1",
                                "peers": []}), ticker=loop)
    try:
        assert loop.dump_pending == [False]               # loaded before the loop saw it
        assert again.state.last_index >= index - 2        # the dump's point, before any tick
    finally:
        again.close()
