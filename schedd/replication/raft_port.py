"""One Raft port for every group a sharded node hosts: `SharedRaftPort`.

Why: a node of a cluster with S shard groups hosts a replica of each, and each replica's
pysyncobj transport would listen on a port of its own (S ports per node to open in firewalls,
to keep free, to watch). Here the node listens once, on its Raft address, and hands each
connection to the group it is for.

How a connection says its group: the dialer writes a preamble, `MAGIC` (4 bytes) and the group
number (uint16, network order), before anything else; pysyncobj's own handshake (its key frame,
Fernet-encrypted with the cluster secret, then the dialer's address) follows on the same
stream. The preamble sits before pysyncobj's handshake, not inside it, because that handshake
is per group: each group's transport has its own keys and its own table of peers, and the
first frame it reads is already its own key exchange, so the port must know the group before
any frame is read; and the frames stay exactly pysyncobj's, read only by the group's own
guarded transport (schedd.replication.transport). The preamble carries no secret and grants
nothing: it only picks which transport a stranger then fails the handshake of.

The listener reads exactly the preamble's missing bytes (`recv(n)` with n what is still
missing), so nothing after it is consumed: the dialer's key frame stays in the socket for the
group's `GuardedTcpConnection`, which is then built on the group's poller and passed to its
transport's `_onNewIncomingConnection` as if that transport had accepted it, so the per-group
handshake, frame caps and pending limit apply unchanged. The guards before that are the
transport's, for the preamble: at most `max_pending` connections still owing their preamble
or waiting for their group (more are closed at once), each closed if it has not reached its
group within `handshake_timeout_s` (the group's handshake clock then goes on from the accept,
not from the preamble, so a stranger gets one deadline in all), and a wrong magic or a group
past the cluster's count closes the connection, with a rate-limited warning. A connection for a
group this node has not started yet (at the node's start the groups bind one after another, and
a move builds a replica while its peers already dial it) is parked: nothing more is read from
it, and it goes to its group once that group binds, or is closed at the deadline, as stock
pysyncobj's peers would find the port of a group not started yet closed and dial again.

Threads: the port is driven by the node's tick loop (schedd.replication.ticker) as one more
replica on it: its listening and half-open sockets sit in the loop's selector and its
`driven_tick` reads them, so a connection is handed to a group's transport on the thread that
ticks that transport. A group's transport leases the port when pysyncobj binds it (on a tick)
and gives the lease back when it is destroyed (`PortLease`: the `_server` pysyncobj's
transport binds and unbinds); the port listens while any group holds a lease, and leaves the
loop with the last one (so the loop's thread still ends with the node's last group).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import _getAddrType

from schedd.replication.ticker import Replica, TickLoop
from schedd.replication.transport import MAX_GROUP, PREAMBLE, PREAMBLE_BYTES, SHARED_PORT_MAGIC, WARN
from schedd.replication.transport import preamble as preamble      # the dialer's half, re-exported

log = logging.getLogger("schedd.raft.port")

MAGIC = SHARED_PORT_MAGIC               # "schedd Raft port", preamble version 1 (its format: transport.preamble)
BACKLOG = 128                           # S groups x N peers may all dial at a node's start
ACCEPTS_PER_WAKE = 64                   # then the loop's other replicas get their turn
IDLE_WAIT_S = 3600.0                    # nothing owes a preamble: tick only on a new connection
PARKED_WAIT_S = 0.05                    # how often a parked connection looks for its group


class PreambleRejected(ValueError):
    """Bytes that are not a schedd Raft port preamble."""


def parse_preamble(got: bytes) -> int | None:
    """The group a (possibly partial) preamble names: None while bytes are missing; raises
    PreambleRejected as soon as the bytes cannot begin a preamble (a stranger, or an old build
    dialing without one, is told apart at its first byte, not at its deadline)."""
    if len(got) > PREAMBLE_BYTES:
        raise PreambleRejected(f"{len(got)} bytes where a preamble has {PREAMBLE_BYTES}")
    head = got[:len(MAGIC)]
    if head != MAGIC[:len(head)]:
        raise PreambleRejected(f"bad magic {head!r}")
    if len(got) < PREAMBLE_BYTES:
        return None
    _magic, group = PREAMBLE.unpack(got)
    return int(group)


@dataclass(slots=True, frozen=True)
class PortLimits:
    """The stranger guards the transport applies to a handshake, applied to the preamble."""

    handshake_timeout_s: float = 5.0
    max_pending: int = 32


@dataclass(slots=True, eq=False)
class _Pending:
    """An accepted connection that still owes (part of) its preamble."""

    sock: socket.socket
    opened_at: float
    got: bytes = b""
    parked: int | None = None       # its whole preamble came, for this group, not started here yet


class PortLease:
    """A group's hold on the shared port, in the place of pysyncobj's TcpServer in its transport
    (pysyncobj calls `bind` on its ticks until it succeeds, and `unbind` when destroyed).
    `accept(sock, opened_at)` is the transport's: it takes a connection for the group."""

    def __init__(self, port: SharedRaftPort, group: int, accept: Callable[[socket.socket, float], None]) -> None:
        if not 0 <= group <= MAX_GROUP:
            raise ValueError(f"group {group} outside 0..{MAX_GROUP}")
        self.port, self.group, self.accept = port, group, accept

    def bind(self) -> None:
        self.port.lease(self)

    def unbind(self) -> None:
        self.port.release(self)


@dataclass(slots=True, eq=False)
class _Listening:
    """The port while some group holds a lease: its socket and its replica on the loop."""

    sock: socket.socket
    replica: Replica
    pending: dict[int, _Pending] = field(default_factory=dict)


class SharedRaftPort:
    """The node's one Raft listener for all its groups (module doc)."""

    def __init__(self, bind_address: str, loop: TickLoop, limits: PortLimits = PortLimits(),
                 groups: int = MAX_GROUP + 1) -> None:
        """`groups`: the cluster's group count (S): a preamble naming a group past it is
        refused at once, one below it waits (parked) for its group to start here."""
        host, sep, port = bind_address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"not host:port: {bind_address!r}")
        self.address = bind_address
        self._host, self._port = host, int(port)
        self._loop = loop
        self.limits = limits
        self.group_count = groups
        self._lock = threading.Lock()
        self._leases: dict[int, PortLease] = {}
        self._on: _Listening | None = None

    # ------------------------------------------------------------ any thread

    def lease_for(self, group: int, accept: Callable[[socket.socket, float], None]) -> PortLease:
        """A group transport's hold on this port (transport.SharedPort): bound on its ticks."""
        return PortLease(self, group, accept)

    @property
    def listening(self) -> bool:
        return self._on is not None

    def groups(self) -> list[int]:
        with self._lock:
            return sorted(self._leases)

    def lease(self, lease: PortLease) -> None:
        """Route `lease.group`'s connections to `lease.accept`, listening first if nobody held
        the port. Raises OSError when the port cannot be bound (pysyncobj retries on its ticks)."""
        with self._lock:
            held = self._leases.get(lease.group)
            if held is not None and held is not lease:
                raise ValueError(f"group {lease.group} already holds the Raft port {self.address}")
            start = self._on is None
            if start:
                self._on = self._listen()
            self._leases[lease.group] = lease
            on = self._on
        if start and on is not None:
            self._loop.register(on.replica)

    def release(self, lease: PortLease) -> None:
        """Stop routing to `lease`; the last lease closes the port. Once this returns no
        connection is handed to it any more (a hand-over runs under the lock)."""
        with self._lock:
            if self._leases.get(lease.group) is lease:
                del self._leases[lease.group]
            if self._leases or self._on is None:
                return
            on, self._on = self._on, None
        self._loop.unregister(on.replica)          # no tick of the port runs from here on
        for fd, p in list(on.pending.items()):
            on.replica.poller.unsubscribe(fd)
            p.sock.close()
        on.replica.poller.unsubscribe(on.sock.fileno())
        on.sock.close()

    # ------------------------------------------------------------ the loop thread

    def driven_tick(self, mail: bool) -> float:
        """The loop's tick: accept and read preambles when the loop saw the descriptors fire,
        drop those past their deadline; returns how long until the next deadline."""
        with self._lock:
            on = self._on
            if on is None:
                return IDLE_WAIT_S
            if mail:
                on.replica.poller.poll(0)
            self._unpark(on)
            return self._expire(on)

    def _listen(self) -> _Listening:
        host = globalDnsResolver().resolve(self._host)
        sock = socket.socket(_getAddrType(host), socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setblocking(False)
            sock.bind((host, self._port))
            sock.listen(BACKLOG)
        except OSError:
            sock.close()
            raise
        replica = self._loop.replica()
        replica.sync = self
        on = _Listening(sock, replica)
        replica.poller.subscribe(sock.fileno(), lambda _fd, ev: self._on_listen(on, ev),
                                 POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR)
        log.info("Raft: listening on %s for every shard group of this node", self.address)
        return on

    def _on_listen(self, on: _Listening, event: int) -> None:
        if not event & POLL_EVENT_TYPE.READ:
            return                  # an error on a listening socket: accept reports it, if any
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, _addr = on.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno not in (errno.ECONNABORTED, errno.EPROTO):
                    WARN.warn("accept", "Raft: accept on %s failed: %s", self.address, e)
                    return
                continue
            self._admit(on, sock)

    def _admit(self, on: _Listening, sock: socket.socket) -> None:
        if len(on.pending) >= self.limits.max_pending:
            WARN.warn("pending", "Raft: refusing a connection: %d are still in the handshake",
                      len(on.pending))
            sock.close()
            return
        sock.setblocking(False)
        fd = sock.fileno()
        on.pending[fd] = _Pending(sock, monotonic())
        on.replica.poller.subscribe(fd, lambda d, ev: self._on_pending(on, d, ev),
                                    POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR)
        # A peer writes its preamble with its key frame as soon as it is connected, so it has
        # mostly arrived by now: read it at once, and a burst of peers (S groups dialing at a
        # node's start) leaves the pending set as fast as it enters it.
        self._on_pending(on, fd, POLL_EVENT_TYPE.READ)

    def _on_pending(self, on: _Listening, fd: int, _event: int) -> None:
        p = on.pending.get(fd)
        if p is None:
            on.replica.poller.unsubscribe(fd)
            return
        try:
            data = p.sock.recv(PREAMBLE_BYTES - len(p.got))      # never past the preamble
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(on, fd)                      # closed or reset before its preamble
            return
        p.got += data
        try:
            group = parse_preamble(p.got)
        except PreambleRejected as e:
            WARN.warn("preamble", "Raft: dropping a connection to %s without a shard group preamble "
                      "(%s): not a peer, or a peer whose groups listen on a port each (raft_ports = "
                      "\"per_group\", or a build before the shared port): every node of a cluster "
                      "must use the same Raft port mode", self.address, e)
            self._drop(on, fd)
            return
        if group is None:
            return
        if group >= self.group_count:
            WARN.warn("group", "Raft: dropping a connection for shard group %d: the cluster has %d",
                      group, self.group_count)
            self._drop(on, fd)
            return
        on.replica.poller.unsubscribe(fd)          # nothing more is read here: the rest is the group's
        if group in self._leases:
            self._hand_over(on, fd, group)
        else:                                       # its group is starting here (a node's start, a
            p.parked = group                        # replica a move places here): wait for it, within
                                                    # the deadline and the pending cap

    def _unpark(self, on: _Listening) -> None:
        for fd, p in list(on.pending.items()):
            if p.parked is not None and p.parked in self._leases:
                self._hand_over(on, fd, p.parked)

    def _hand_over(self, on: _Listening, fd: int, group: int) -> None:
        p = on.pending.pop(fd)
        lease = self._leases[group]
        on.replica.poller.unsubscribe(fd)          # out of the port's poller before the group's takes it
        try:
            lease.accept(p.sock, p.opened_at)
        except Exception:                           # a group's failure must not end the port
            log.exception("Raft: shard group %d could not take a connection", group)
            p.sock.close()

    def _drop(self, on: _Listening, fd: int) -> None:
        p = on.pending.pop(fd, None)
        on.replica.poller.unsubscribe(fd)
        if p is not None:
            p.sock.close()

    def _expire(self, on: _Listening) -> float:
        now = monotonic()
        limit = self.limits.handshake_timeout_s
        soonest = IDLE_WAIT_S
        for fd, p in list(on.pending.items()):
            left = p.opened_at + limit - now
            if left <= 0:
                if p.parked is None:
                    WARN.warn("handshake", "Raft: dropping a connection that did not complete the "
                              "handshake within %gs", limit)
                else:
                    WARN.warn("group", "Raft: dropping a connection for shard group %d, which this node "
                              "did not start within %gs (hosted: %s)", p.parked, limit, sorted(self._leases))
                self._drop(on, fd)
            else:
                soonest = min(soonest, left, PARKED_WAIT_S if p.parked is not None else left)
        return soonest
