"""The Raft port under a hostile peer, against real `schedd serve`
processes on 127.0.0.1.

pysyncobj's peer protocol is `int32 length + zlib(pickle)`, optionally Fernet-encrypted with the
cluster secret: whoever gets a pickle unpickled runs code in the node. So a node never listens
without the secret (a single node does not listen at all), a frame's size is checked before it is
read, and a connection that has not completed the handshake is dropped after a few seconds.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import time
import zlib
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from schedd.runtime.cluster import LocalCluster
from schedd_client import job_spec

pytestmark = pytest.mark.integration


class MakeDir:
    """Unpickling this creates a directory: proof that a pickle ran in the node."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def frame(payload: bytes) -> bytes:
    """One pysyncobj frame: native int32 length, then the payload."""
    return struct.pack("i", len(payload)) + payload


def evil_frames(marker: Path) -> list[bytes]:
    """The pickle as an unauthenticated peer would send it: in clear, and encrypted with a key
    that is not the cluster's."""
    body = zlib.compress(pickle.dumps(MakeDir(str(marker)), protocol=2), 3)
    wrong = Fernet(Fernet.generate_key()).encrypt(body)
    return [frame(body), frame(wrong)]


def host_port(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def closed_by_peer(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the node closed the connection (EOF or reset), None if it stayed open."""
    started = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return time.monotonic() - started


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> LocalCluster:
    """One 3-node cluster (with its generated secret) shared by the tests of this module."""
    yield from _running(LocalCluster(tmp_path_factory.mktemp("raftport") / "c3", size=3))


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> LocalCluster:
    """A single node started without any secret, as `schedd serve` allows."""
    c = LocalCluster(tmp_path_factory.mktemp("raftport") / "c1", size=1)
    cfg = c.nodes["n1"].config
    cfg.write_text("\n".join(l for l in cfg.read_text().splitlines() if not l.startswith("secret_file")))
    yield from _running(c)


def _running(c: LocalCluster):
    """Start `c`, wait for its leader, hand it to the module, stop it whatever happened."""
    try:
        c.start()
        c.wait_leader(timeout=90)
        yield c
    finally:
        c.stop(timeout=10)


def follower(c: LocalCluster) -> str:
    leader = c.wait_leader(timeout=60)
    return next(n for n in c.nodes if n != leader)


def try_pickle(addr: str, marker: Path) -> None:
    """Send each evil frame on its own connection; return once the node has dealt with it."""
    for data in evil_frames(marker):
        try:
            sock = socket.create_connection(host_port(addr), timeout=5)
        except ConnectionRefusedError:
            continue                                   # nothing listens: nothing can run
        with sock:
            try:
                sock.sendall(data)
            except ConnectionError:
                continue
            closed_by_peer(sock, 10)                   # the node has read it (or ignores us)


def test_raft_port_refuses_a_pickle_without_the_secret(three, single, tmp_path):
    targets = [n.raft for n in three.nodes.values()] + [single.nodes["n1"].raft]
    for i, addr in enumerate(targets):
        marker = tmp_path / f"pwned-{i}"
        try_pickle(addr, marker)
        assert not marker.exists(), f"a pickle sent to the Raft port {addr} ran in the node"
    assert three.wait_leader(timeout=60) and single.wait_leader(timeout=60)


def test_single_node_has_no_raft_listener_or_needs_the_secret(single):
    from pysyncobj import SyncObj, SyncObjConf

    from schedd.replication.transport import GuardedTCPTransport, TransportSecurityError

    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(host_port(single.nodes["n1"].raft), timeout=5).close()
    # With peers, the transport refuses to exist without the secret, whatever the config said.
    with pytest.raises(TransportSecurityError):
        SyncObj("127.0.0.1:1", ["127.0.0.1:2"], conf=SyncObjConf(autoTick=False),
                transportClass=GuardedTCPTransport)


def test_oversized_raft_frame_is_dropped(three, tmp_path):
    nid = follower(three)
    leader = three.wait_leader(timeout=60)
    term = three.node_info(leader).term
    sock = socket.create_connection(host_port(three.nodes[nid].raft), timeout=30)
    chunk = b"\0" * (1 << 20)
    sent = 0
    with sock:
        try:
            sock.sendall(struct.pack("i", 2**31 - 1))
            for _ in range(16):                        # 16 MiB behind a 2 GiB length prefix
                sock.sendall(chunk)
                sent += len(chunk)
        except ConnectionError:
            pass
        else:
            pytest.fail("the node read 16 MiB of a frame announced as 2 GiB")
    assert sent < 16 << 20
    assert three.nodes[nid].alive()
    with three.client(timeout=30) as client:     # the cluster still commits
        client.put_job(job_spec("after-oversized", command="true"))
    info = three.node_info(nid)
    assert info is not None and info.term == term, "the oversized frame caused an election"


def test_unauthenticated_connection_is_dropped_after_timeout(three):
    nid = follower(three)
    sock = socket.create_connection(host_port(three.nodes[nid].raft), timeout=30)
    with sock:
        sock.sendall(b"\x10\0")                        # half a length prefix, then silence
        elapsed = closed_by_peer(sock, 30)
    assert elapsed is not None, "a silent, unauthenticated connection was kept for 30 s"
    assert elapsed < 20


class FakePeer:
    """The dialed side of a pysyncobj link, played by hand: reads a node's frames, answers its key
    exchange when told to. Frames are this cluster's own (the test holds the secret)."""

    def __init__(self, listener: socket.socket, secret: str) -> None:
        from pysyncobj.encryptor import getEncryptor

        self.fernet = getEncryptor(secret)
        listener.settimeout(60)
        self.sock, _ = listener.accept()
        self.buf = b""

    def frames(self, within: float, enough: int = 1 << 30) -> list[object]:
        """The whole frames the node sends within `within` seconds (or until `enough` came),
        decrypted and unpickled."""
        out: list[object] = []
        deadline = time.monotonic() + within
        while len(out) < enough and (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                raise AssertionError("the node closed the link")
            self.buf += data
            while len(self.buf) >= 4 and len(self.buf) >= 4 + (n := struct.unpack("i", self.buf[:4])[0]):
                body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                out.append(pickle.loads(zlib.decompress(self.fernet.decrypt(body))))
        return out

    def send(self, message: object) -> None:
        self.sock.sendall(frame(self.fernet.encrypt(zlib.compress(pickle.dumps(message, protocol=2)))))


def test_no_raft_message_goes_out_before_the_key_exchange(tmp_path):
    """Stock pysyncobj sends on a TCP-connected link before the peer's key has arrived: the
    candidate's vote request went out unsigned, the peer dropped the link, and the follower lagged
    a new leader by pysyncobj's 5 s reconnect delay (seen in CI: a fresh token refused there)."""
    c = LocalCluster(tmp_path / "c3", size=3)
    by_address = sorted(c.nodes, key=lambda nid: c.nodes[nid].raft)
    dialer, dialed = by_address[-1], by_address[0]      # pysyncobj: the greater address dials
    listener = socket.create_server(host_port(c.nodes[dialed].raft))
    try:
        c.start_node(dialer)
        peer = FakePeer(listener, (c.root / "cluster.secret").read_text().strip())
        with peer.sock:
            hello = peer.frames(within=20.0, enough=1)
            assert len(hello) == 1 and isinstance(hello[0], bytes) and len(hello[0]) == 32, hello
            # Twice the longest election timeout (the node would ask for pre-votes), and less than
            # the idle timeout (3.5 s) after which pysyncobj drops a silent link.
            early = peer.frames(within=2.5)
            assert early == [], f"sent before the key exchange (unsigned): {early!r}"
            ours = os.urandom(32)
            peer.send((hello[0], ours))            # our key, signed with the node's
            later = peer.frames(within=20.0, enough=2)
            assert later, "the node went silent after the key exchange"
            assert all(isinstance(m, tuple) and len(m) == 2 and m[0] == ours for m in later), later
            assert later[0][1] == c.nodes[dialer].raft      # its address first, then Raft messages
            assert len(later) > 1, "no Raft message after the handshake"
    finally:
        listener.close()
        c.stop(timeout=10)


# ---------------------------------------------------------------- a sharded node's one Raft port

SHARDS = 4


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> LocalCluster:
    """A 3-node cluster of 4 shard groups: each node listens on one Raft port for all 4."""
    c = LocalCluster(tmp_path_factory.mktemp("raftport") / "s3", size=3, shards=SHARDS)
    try:
        c.start()
        c.wait_leader(timeout=90)
        c.wait_shards(timeout=90)
        yield c
    finally:
        c.stop(timeout=10)


def test_shared_port_refuses_a_pickle_with_or_without_a_preamble(sharded, tmp_path):
    from schedd.replication.raft_port import preamble

    addr = sharded.nodes["n1"].raft
    for i, data in enumerate(evil_frames(tmp_path / "pwned-bare")):
        with socket.create_connection(host_port(addr), timeout=5) as sock:
            sock.sendall(data)                           # pysyncobj's frame where the preamble goes
            assert closed_by_peer(sock, 10) is not None, f"frame {i} without a preamble was kept"
    for group in (0, 2, 9):                              # hosted groups (their handshake refuses), and not
        marker = tmp_path / f"pwned-{group}"
        for data in evil_frames(marker):
            with socket.create_connection(host_port(addr), timeout=5) as sock:
                try:
                    sock.sendall(preamble(group) + data)
                except ConnectionError:
                    continue
                assert closed_by_peer(sock, 10) is not None
        assert not marker.exists(), f"a pickle for group {group} ran in the node"
    assert not (tmp_path / "pwned-bare").exists()


def test_shared_port_closes_garbage_and_groups_past_the_count_at_once(sharded):
    from schedd.replication.raft_port import preamble

    addr = sharded.nodes["n2"].raft
    for first in (b"GET / HTTP/1.1\r\n\r\n", b"SRP\x02\x00\x01", preamble(SHARDS), preamble(0xFFFF)):
        with socket.create_connection(host_port(addr), timeout=5) as sock:
            sock.sendall(first)
            elapsed = closed_by_peer(sock, 10)
        assert elapsed is not None and elapsed < 3, f"{first!r} was kept {elapsed}"


def test_shared_port_drops_silence_before_and_after_the_preamble(sharded):
    from schedd.replication.raft_port import preamble

    addr = sharded.nodes["n3"].raft
    socks = [socket.create_connection(host_port(addr), timeout=30) for _ in range(3)]
    socks[1].sendall(preamble(1)[:3])                    # part of a preamble
    socks[2].sendall(preamble(1))                        # a whole one, then no handshake
    try:
        elapsed = [closed_by_peer(s, 30) for s in socks]
    finally:
        for s in socks:
            s.close()
    assert all(e is not None and e < 20 for e in elapsed), elapsed


def test_shared_port_refuses_connections_past_max_pending_and_the_groups_go_on(sharded):
    from schedd.runtime.groups import port_pending_cap

    nid = "n1"
    addr = sharded.nodes[nid].raft
    terms = {row.shard: row.term for row in _shards(sharded)}
    held = [socket.create_connection(host_port(addr), timeout=30) for _ in range(port_pending_cap(SHARDS))]
    try:
        time.sleep(0.5)                                  # accepted and counted by the node
        extra = socket.create_connection(host_port(addr), timeout=30)
        with extra:
            elapsed = closed_by_peer(extra, 10)
        assert elapsed is not None and elapsed < 3, "a connection past max_pending was kept"
    finally:
        for s in held:
            s.close()
    with sharded.client(timeout=30) as client:           # every group still commits, no election
        client.put_jobs([job_spec(f"after-flood-{i}", command="true") for i in range(16)])
    assert {row.shard: row.term for row in _shards(sharded)} == terms


def _shards(c: LocalCluster):
    with c.client(timeout=30) as client:
        return list(client.list_shards().items)
