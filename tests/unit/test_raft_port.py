"""The shared Raft port (schedd.replication.raft_port): the preamble that names a connection's
group, and the listener's guards, on a real socket and tick loop with stand-in groups."""

from __future__ import annotations

import socket
import time

import pytest

from schedd.replication.raft_port import (MAGIC, PREAMBLE_BYTES, PortLease, PortLimits, PreambleRejected,
                                          SharedRaftPort, parse_preamble, preamble)
from schedd.replication.ticker import TickLoop
from schedd.ports.fakes import wait_until
from schedd.runtime.cluster import restartable_ports

pytestmark = pytest.mark.timeout(60)


def test_a_preamble_names_its_group_and_nothing_else_parses():
    for group in (0, 1, 63, 0xFFFF):
        assert len(preamble(group)) == PREAMBLE_BYTES
        assert parse_preamble(preamble(group)) == group
        for cut in range(PREAMBLE_BYTES):                # a partial one: more to come
            assert parse_preamble(preamble(group)[:cut]) is None
    for bad in (b"X", b"SRPX", b"\x00\x00\x00\x80", MAGIC[:3] + b"\x02", preamble(1) + b"k"):
        with pytest.raises(PreambleRejected):
            parse_preamble(bad)
    for group in (-1, 0x10000):
        with pytest.raises(ValueError):
            preamble(group)


class Group:
    """Stands in for a group's transport: keeps what the port hands it."""

    def __init__(self, port: SharedRaftPort, group: int) -> None:
        self.taken: list[tuple[socket.socket, float]] = []
        self.lease = PortLease(port, group, lambda sock, at: self.taken.append((sock, at)))


@pytest.fixture
def port():
    loop = TickLoop(name="raft-port-test")
    p = SharedRaftPort(f"127.0.0.1:{restartable_ports(1)}", loop,
                       PortLimits(handshake_timeout_s=1.0, max_pending=4), groups=8)
    groups = [Group(p, k) for k in (0, 3)]
    for g in groups:
        g.lease.bind()
    yield p, groups
    for g in groups:
        g.lease.unbind()
        for sock, _ in g.taken:
            sock.close()
    wait_until(lambda: not loop.running, timeout=10, interval=0.02, what="the loop ended with the port's last lease", errors=False)


def dial(p: SharedRaftPort) -> socket.socket:
    host, _, port = p.address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bool:
    """The port closed the connection (EOF or reset) within `timeout`."""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_connection_goes_to_its_group_with_every_byte_after_the_preamble(port):
    p, (g0, g3) = port
    s = dial(p)
    s.sendall(preamble(3)[:2])                         # in pieces, as TCP may deliver it
    time.sleep(0.05)
    s.sendall(preamble(3)[2:] + b"the key frame")
    wait_until(lambda: g3.taken, timeout=10, interval=0.02, what="group 3 took it", errors=False)
    assert not g0.taken
    sock, opened_at = g3.taken[0]
    assert opened_at <= time.monotonic()
    sock.setblocking(True)
    sock.settimeout(5)
    got = b""
    while len(got) < len(b"the key frame"):
        got += sock.recv(64)
    assert got == b"the key frame"                    # the group's handshake reads its first frame whole
    s.close()


@pytest.mark.parametrize("first", [b"\x2c\x00\x00\x00gAAAAA", b"GET / HTTP/1.1\r\n", b"SRP\x02\x00\x00"])
def test_a_connection_without_a_preamble_is_closed(port, first):
    p, groups = port
    s = dial(p)
    s.sendall(first)                                   # pysyncobj's own first frame, HTTP, another version
    assert closed_by_peer(s)
    assert not any(g.taken for g in groups)


def test_a_connection_for_a_group_past_the_clusters_count_is_closed_at_once(port):
    p, groups = port
    for group in (8, 0xFFFF):
        s = dial(p)
        s.sendall(preamble(group))
        assert closed_by_peer(s, timeout=0.8)          # before the 1 s deadline
    assert not any(g.taken for g in groups)


def test_a_connection_for_a_group_not_started_here_waits_for_it_until_the_deadline(port):
    p, groups = port
    early, never = dial(p), dial(p)
    early.sendall(preamble(5) + b"key")
    never.sendall(preamble(6) + b"key")
    time.sleep(0.3)
    late = Group(p, 5)                                 # group 5 starts (binds) now
    late.lease.bind()
    try:
        wait_until(lambda: late.taken, timeout=10, interval=0.02, what="group 5 took the connection that waited for it", errors=False)
        sock, _ = late.taken[0]
        sock.settimeout(5)
        assert sock.recv(16) == b"key"                 # nothing of it read while it waited
        started = time.monotonic()
        assert closed_by_peer(never)                   # group 6 never starts here: dropped at the deadline
        assert time.monotonic() - started < 2
        assert not any(g.taken for g in groups)
    finally:
        late.lease.unbind()
        for sock, _ in late.taken:
            sock.close()
        early.close()
        never.close()


def test_silence_after_connecting_or_after_part_of_the_preamble_is_closed_at_the_deadline(port):
    p, groups = port
    quiet, partial = dial(p), dial(p)
    partial.sendall(preamble(0)[:3])
    started = time.monotonic()
    assert closed_by_peer(quiet) and closed_by_peer(partial)
    assert 0.5 < time.monotonic() - started < 8       # the 1 s deadline, not before, not much after
    assert not any(g.taken for g in groups)


def test_past_max_pending_new_connections_are_closed_at_once(port):
    p, (g0, _) = port
    held = [dial(p) for _ in range(4)]                 # max_pending = 4, none sends its preamble
    time.sleep(0.2)
    extra = dial(p)
    assert closed_by_peer(extra, timeout=0.8)          # closed at once, before the 1 s deadline
    for s in held:
        s.close()
    wait_until(lambda: _admits(p, g0), timeout=10, interval=0.02, what="the held ones leave the pending set", errors=False)


def _admits(p: SharedRaftPort, g: Group) -> bool:
    s = dial(p)
    s.sendall(preamble(0))
    before = len(g.taken)
    try:
        wait_until(lambda: len(g.taken) > before, timeout=1.0, interval=0.02, what="taken", errors=False)
        return True
    except AssertionError:
        return False
    finally:
        s.close()


def test_the_port_closes_with_its_last_lease_and_opens_again_with_a_new_one():
    loop = TickLoop(name="raft-port-test")
    p = SharedRaftPort(f"127.0.0.1:{restartable_ports(1)}", loop)
    a, b = Group(p, 1), Group(p, 2)
    a.lease.bind()
    b.lease.bind()
    a.lease.unbind()
    assert p.listening and p.groups() == [2]
    b.lease.unbind()
    assert not p.listening
    wait_until(lambda: not loop.running, timeout=10, interval=0.02, what="the loop ended", errors=False)
    with pytest.raises(OSError):
        dial(p)
    a.lease.bind()
    try:
        s = dial(p)
        s.sendall(preamble(1))
        wait_until(lambda: a.taken, timeout=10, interval=0.02, what="group 1 took it", errors=False)
        s.close()
    finally:
        a.lease.unbind()
        for sock, _ in a.taken:
            sock.close()


def test_a_taken_port_fails_the_lease_which_succeeds_once_it_is_free():
    loop = TickLoop(name="raft-port-test")
    number = restartable_ports(1)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", number))
    blocker.listen()
    p = SharedRaftPort(f"127.0.0.1:{number}", loop)
    g = Group(p, 0)
    with pytest.raises(OSError):
        g.lease.bind()                                 # pysyncobj retries on its ticks
    assert not p.listening and not loop.running
    blocker.close()
    g.lease.bind()
    assert p.listening
    g.lease.unbind()


def test_two_leases_of_one_group_are_refused():
    p = SharedRaftPort(f"127.0.0.1:{restartable_ports(1)}", TickLoop(name="raft-port-test"))
    a, b = Group(p, 5), Group(p, 5)
    a.lease.bind()
    try:
        with pytest.raises(ValueError, match="already holds"):
            b.lease.bind()
    finally:
        a.lease.unbind()
