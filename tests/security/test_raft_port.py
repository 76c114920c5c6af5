"""The Raft port under a hostile peer (issue 10, items 6 and 7), against real `schedd serve`
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
