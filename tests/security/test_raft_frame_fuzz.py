"""Fuzz the Raft frame reader: random bytes, random frames and frames encrypted with a
wrong key, sent by a stranger to a node's Raft port. No exception escapes the reader (the tick
raises nothing), nothing reaches Raft (no message, no utility command, no commit), a stranger's
bytes are never buffered beyond one handshake frame, and every connection is let go.

In-process (a real SyncObj with the guarded transport, ticked by the test) so hundreds of
examples cost seconds.
"""

from __future__ import annotations

import pickle
import socket
import struct
import zlib

import pytest
from cryptography.fernet import Fernet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pysyncobj import SyncObj, SyncObjConf

from schedd.replication.transport import HANDSHAKE_FRAME_BYTES, GuardedTCPTransport
from schedd.runtime.cluster import restartable_ports

RECV_CHUNK = 1 << 16
WRONG_KEY = Fernet(Fernet.generate_key())


def frame(payload: bytes, length: int | None = None) -> bytes:
    return struct.pack("i", len(payload) if length is None else length) + payload


payloads = st.binary(max_size=3000)
frames = st.one_of(
    st.binary(max_size=20_000),                                                   # noise
    st.builds(frame, payloads, st.integers(-2**31, 2**31 - 1)),                  # any length
    st.builds(frame, payloads),                                                   # honest length
    st.builds(lambda b: frame(zlib.compress(b)), payloads),                       # inflatable
    st.builds(lambda b: frame(zlib.compress(pickle.dumps(b, protocol=2))), payloads),  # a pickle
    st.builds(lambda b: frame(WRONG_KEY.encrypt(zlib.compress(pickle.dumps(b)))), payloads),
    st.just(frame(zlib.compress(b"\0" * (64 << 20)))),                            # a zlib bomb
)
streams = st.lists(frames, min_size=1, max_size=6).map(b"".join)


class Node:
    """A SyncObj with one (absent) peer, so it listens like a cluster member."""

    def __init__(self) -> None:
        base = restartable_ports(2)
        self.addr = ("127.0.0.1", base)
        conf = SyncObjConf(password=Fernet.generate_key().decode(), autoTick=False,
                           bindAddress=f"127.0.0.1:{base}", connectionRetryTime=60.0)
        self.sync = SyncObj(f"127.0.0.1:{base}", [f"127.0.0.1:{base + 1}"], conf=conf,
                            transportClass=GuardedTCPTransport)
        self.transport = self.sync._SyncObj__transport
        self.messages: list = []
        self.transport.setOnMessageReceivedCallback(lambda node, m: self.messages.append(m))
        for name in list(self.transport._onUtilityMessageCallbacks):
            self.transport.setOnUtilityMessageCallback(
                name, lambda args, cb, name=name: self.messages.append(("utility", name)))
        while not self.transport.ready:
            self.sync.doTick(0.01)
        self.commit = self.sync.raftCommitIndex

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self.sync.doTick(0.002)
            for conn in self.transport._unknownConnections:
                held = len(conn._TcpConnection__readBuffer)
                assert held <= HANDSHAKE_FRAME_BYTES + 4 + RECV_CHUNK, f"a stranger's {held} bytes buffered"


@pytest.fixture(scope="module")
def node():
    n = Node()
    yield n
    n.sync.destroy()
    n.sync.doTick(0.0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=streams)
def test_raft_frame_reader_survives_random_bytes(node, data):
    sock = socket.create_connection(node.addr, timeout=5)
    sock.setblocking(False)
    try:
        sent = 0
        for _ in range(200):
            try:
                sent += sock.send(data[sent:])
            except BlockingIOError:
                pass
            except ConnectionError:
                break
            node.tick()
            if sent >= len(data):
                break
        node.tick(5)
    finally:
        sock.close()
    for _ in range(200):
        if not node.transport._unknownConnections:
            break
        node.tick()
    assert not node.transport._unknownConnections, "a stranger's connection outlived its socket"
    assert node.messages == [], "a stranger's frame reached Raft"
    assert node.sync.raftCommitIndex == node.commit
    assert node.sync.getStatus()["partner_nodes_count"] == 1
