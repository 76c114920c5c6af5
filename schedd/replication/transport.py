"""The Raft transport: pysyncobj 0.3.17's TCP transport with the guards it lacks.

pysyncobj's peer protocol is a native int32 length, then `zlib(pickle(message))`, Fernet-encrypted
when a password (our cluster secret) is set. The receiver unpickles whatever decrypts, so the
secret is the only thing between the Raft port and code execution in the node (architecture.md "Facts" §1d).
Stock pysyncobj also buffers whatever a peer sends before looking at it (a known pysyncobj bug: a 2 GiB length
prefix made a follower buffer without bound, stall its tick thread and cause an election) and
keeps a connection that never speaks forever. Every patch of pysyncobj's connection, server and
transport classes lives here, each saying what it restores:

- A node with peers never listens, or dials, without the secret (`TransportSecurityError`); a
  node without peers (a 1-node cluster) creates no server at all: nothing to reach.
- A frame's length is checked before its bytes are read (`max_frame_bytes` once the handshake
  is done, `HANDSHAKE_FRAME_BYTES` before it), reading stops once a whole maximal frame is
  buffered, and zlib inflation is capped at `max_frame_bytes` too.
- A connection that has not completed pysyncobj's key exchange and sent its node address within
  `handshake_timeout_s` is dropped; at most `max_pending` such connections are kept at once.
- On a sharded node whose groups share one Raft port (schedd.replication.raft_port), a group's
  transport listens through that port (`with_limits(port=...)`: its `_server` is a lease on the
  port, bound and unbound where pysyncobj binds and unbinds its own) and its outgoing links
  write the port's preamble for the group (`dial_group`) before pysyncobj's handshake; what
  the port hands it is then exactly an accepted connection, under every guard above.
- The integrity checks are explicit `if`s, not `assert`s (which `python -O` removes).
- Raft messages go out only on a connection whose key exchange is done. Stock pysyncobj sends on
  any TCP-connected link, so a vote request or append_entries sent in the few milliseconds between
  connect and the peer's key went out unsigned; the peer dropped the connection, and the link
  stayed down for `connectionRetryTime` (5 s): a follower that lagged a new leader for seconds
  after every start, refusing a token the leader had just made.

Legitimate frames are far below the cap: pysyncobj batches append_entries to 64 KiB of commands
plus at most one more entry (our entries are at most `commands.MAX_ENTRY_BYTES`, 60 KiB) and
chunks snapshots into 64 KiB pieces; pickle protocol 2 inflates bytes up to 2.5x and Fernet adds
a third, so a frame stays under 0.5 MiB. The default cap (4 MiB) leaves ample room.

The subclasses override pysyncobj's name-mangled private methods (`_TcpConnection__...`),
so they are tied to 0.3.17's internals; `tests/security` exercises each guard against real nodes.
"""

from __future__ import annotations

import errno
import functools
import logging
import socket
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.tcp_server import TcpServer
from pysyncobj.transport import TCPTransport

log = logging.getLogger("schedd.raft.transport")

SHARED_PORT_MAGIC = b"SRP\x01"    # what a shared Raft port's preamble begins with (raft_port.py)
PREAMBLE = struct.Struct("!4sH")   # the magic, then the group number (network order)
PREAMBLE_BYTES = PREAMBLE.size     # 6
MAX_GROUP = 0xFFFF
HANDSHAKE_FRAME_BYTES = 4096      # a Fernet token of a 32-byte key, or of a node address
_LENGTH = struct.Struct("i")       # pysyncobj's frame prefix: native int32


class TransportSecurityError(RuntimeError):
    """The transport was asked to talk to peers without the cluster secret."""


class FrameRejected(Exception):
    """A frame that must not reach pickle: too large, undecryptable, replayed or malformed."""


@dataclass(slots=True, frozen=True)
class TransportLimits:
    max_frame_bytes: int = 4 << 20
    handshake_timeout_s: float = 5.0
    max_pending: int = 32


class _RateLimitedLog:
    """One warning per kind per second, with the count of those it swallowed: a flood of bad
    connections must not become a flood of log lines."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warn(self, kind: str, msg: str, *args: object) -> None:
        now = monotonic()
        if now - self._last.get(kind, -1e9) < 1.0:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        skipped = self._suppressed.pop(kind, 0)
        log.warning(msg + (" (%d more like it in the last second)" if skipped else ""),
                    *args, *((skipped,) if skipped else ()))


WARN = _RateLimitedLog()


def inflate(data: bytes, limit: int) -> bytes:
    """zlib.decompress with a bound on the output. Restores what stock pysyncobj lacks: a small
    frame of compressed zeros must not inflate into gigabytes."""
    d = zlib.decompressobj()
    out = d.decompress(data, limit)
    if d.unconsumed_tail or not d.eof:
        raise FrameRejected(f"inflates beyond {limit} bytes or is truncated")
    return out


class GuardedTcpConnection(TcpConnection):
    """TcpConnection with a frame cap, a bounded inflate and a handshake clock.

    `authenticated` turns true once the transport has seen the handshake complete (key exchange
    and node address); until then frames are capped at HANDSHAKE_FRAME_BYTES."""

    def __init__(self, *args: Any, limits: TransportLimits, preamble: bytes = b"", **kwargs: Any) -> None:
        self.limits = limits
        self.authenticated = False
        self.opened_at = monotonic()
        self.preamble = preamble        # written first on every dial (a shared Raft port's group)
        super().__init__(*args, **kwargs)

    @property
    def frame_limit(self) -> int:
        return self.limits.max_frame_bytes if self.authenticated else HANDSHAKE_FRAME_BYTES

    def connect(self, host: str, port: int) -> bool:
        """Dial; with a `preamble`, it is the first thing in the write buffer (pysyncobj's connect
        empties the buffer, and nothing is written before the connected callback sends the
        key, which appends to it, so the preamble goes out first on the stream)."""
        self.authenticated = False
        self.opened_at = monotonic()
        ok = bool(super().connect(host, port))
        if ok and self.preamble:
            self._TcpConnection__writeBuffer = self.preamble
        return ok

    def disconnect(self) -> None:
        self.authenticated = False
        super().disconnect()

    # Restores a bound on the read buffer: stock pysyncobj reads until the socket is empty
    # (unbounded, and quadratic in `bytes +=`). Stop once a whole maximal frame is buffered so the
    # parser runs first (and drops an oversized one); the level-triggered poller calls back for
    # the rest.
    def _TcpConnection__processRead(self) -> bool:
        if len(self._TcpConnection__readBuffer) > self.frame_limit + _LENGTH.size:
            return False
        return super()._TcpConnection__processRead()

    # Restores "check a frame's size before reading it" (pysyncobj #174), bounds zlib, and makes
    # the replay/key checks real `if`s. Otherwise the same as 0.3.17's __processParseMessage.
    def _TcpConnection__processParseMessage(self) -> Any:
        buf = self._TcpConnection__readBuffer
        if len(buf) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(buf)
        if not 0 < length <= self.frame_limit:
            if buf.startswith(SHARED_PORT_MAGIC):
                WARN.warn("preamble", "Raft: dropping a connection from a peer that names a shard group "
                          "first (its groups share one Raft port, raft_ports = \"shared\"), while this "
                          "node listens on a port per group: every node of a cluster must use the "
                          "same Raft port mode")
                self.disconnect()
                return None
            WARN.warn("frame", "Raft: dropping a connection that announced a frame of %d bytes "
                      "(limit %d%s)", length, self.frame_limit,
                      "" if self.authenticated else ", before the handshake")
            self.disconnect()
            return None
        end = _LENGTH.size + length
        if len(buf) < end:
            return None
        try:
            message = self._decode(buf[_LENGTH.size:end])
        except Exception as e:  # noqa: BLE001 - whatever a peer sends, the node only disconnects
            WARN.warn("decode", "Raft: dropping a connection whose frame was refused (%s: %s); "
                      "a peer with another cluster secret, or not a peer", type(e).__name__, e)
            self.disconnect()
            return None
        self._TcpConnection__readBuffer = buf[end:]
        return message

    def _decode(self, data: bytes) -> Any:
        if self.encryptor:
            stamp = self.encryptor.extract_timestamp(data)
            if stamp < self.recvLastTimestamp:
                raise FrameRejected("replayed (older timestamp)")
            data = self.encryptor.decrypt(data)
            self.recvLastTimestamp = stamp
        message = pysyncobj_pickle.loads(inflate(data, self.limits.max_frame_bytes))
        if self.recvRandKey:
            if not (isinstance(message, tuple) and len(message) == 2 and message[0] == self.recvRandKey):
                raise FrameRejected("not signed with this connection's key")
            message = message[1]
        return message


def accepted_connection(sock: socket.socket, poller: Any, limits: TransportLimits, *, timeout: float,
                        send_buffer: int, recv_buffer: int, keepalive: Any = None) -> GuardedTcpConnection:
    """An accepted socket made a guarded connection as pysyncobj's TcpServer makes one (its
    buffer sizes, no Nagle, non-blocking): for this module's server and the shared Raft port's
    hand-over alike."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    return GuardedTcpConnection(poller=poller, socket=sock, timeout=timeout, sendBufferSize=send_buffer,
                                recvBufferSize=recv_buffer, keepalive=keepalive, limits=limits)


class GuardedTcpServer(TcpServer):
    """TcpServer whose accepted connections are GuardedTcpConnections (the rest as 0.3.17)."""

    def __init__(self, *args: Any, limits: TransportLimits, **kwargs: Any) -> None:
        self._limits = limits
        super().__init__(*args, **kwargs)

    def _TcpServer__onNewConnection(self, descr: Any, event: int) -> None:
        if event & POLL_EVENT_TYPE.READ:
            try:
                sock, _addr = self._TcpServer__socket.accept()
                conn = accepted_connection(sock, self._TcpServer__poller, self._limits,
                                           timeout=self._TcpServer__connectionTimeout,
                                           send_buffer=self._TcpServer__sendBufferSize,
                                           recv_buffer=self._TcpServer__recvBufferSize,
                                           keepalive=self._TcpServer__keepalive)
                self._TcpServer__onNewConnectionCallback(conn)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    self.unbind()
                    return
        if event & POLL_EVENT_TYPE.ERROR:
            self.unbind()


class GuardedTCPTransport(TCPTransport):
    """TCPTransport that never listens without the secret, and needs no listener alone."""

    limits = TransportLimits()
    shared_port: SharedPort | None = None    # the node's one Raft port, when its groups share it
    dial_group: int | None = None                # the group whose preamble outgoing links write first

    @classmethod
    def with_limits(cls, limits: TransportLimits, *, port: SharedPort | None = None,
                    group: int | None = None) -> type[GuardedTCPTransport]:
        """A subclass bound to `limits` (pysyncobj builds the transport from a class); with
        `group`, the transport of that group on a cluster whose nodes share one Raft port
        (its links dial with the group's preamble), listening through `port` (None: a
        read-only learner, which listens nowhere)."""
        return type(cls.__name__, (cls,), {"limits": limits, "shared_port": port, "dial_group": group})

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        if otherNodes and not syncObj.encryptor:
            raise TransportSecurityError(
                "refusing a Raft transport with peers but no cluster secret: the peer protocol "
                "unpickles what it receives (set secret_file; `schedd gen-secret` makes one)")
        super().__init__(syncObj, selfNode, otherNodes)
        add_need = getattr(syncObj, "add_tick_need", None)     # raft_patches: deadline sleep
        if add_need is not None:
            add_need(self._tick_need)

    @property
    def ready(self) -> bool:
        """Bound (or needing no listener); also while a driven SyncObj is being built
        (raft/driven_tick.py "bind in the tick": its ticks bind, as a tick thread's would)."""
        return bool(self._ready or getattr(self._syncObj, "bind_in_tick", False))

    def _tick_need(self) -> float | None:
        """0 (tick at the tick period) while this transport polls for progress: binding, a
        link it must open (stock retries on ticks), a handshake whose deadline _onTick checks.
        A link the peer opens, or one up and keyed, waits for its socket's events."""
        if not self.ready:
            return 0.0
        for node in self._nodes:
            conn = self._connections.get(node)
            if (conn is not None and conn.state != CONNECTION_STATE.CONNECTED
                    and self._shouldConnect(node)):
                return 0.0
        return 0.0 if next(self._handshaking(), None) is not None else None

    def _handshaking(self) -> Iterator[GuardedTcpConnection]:
        """The open connections whose key exchange is not done (their deadline is _onTick's)."""
        for conn in (*self._unknownConnections, *self._connections.values()):
            if (isinstance(conn, GuardedTcpConnection) and not conn.authenticated
                    and conn.state != CONNECTION_STATE.DISCONNECTED):
                yield conn

    # Restores "no listener without a reason": stock pysyncobj binds the Raft port even with no
    # peers, where it can only serve strangers (and, without a password, runs their pickles).
    def _createServer(self) -> None:
        self._server: GuardedTcpServer | PortServer | None
        if not self._nodes:
            self._server = None
            self._ready = True
            self._bindOverEvent.set()
            return
        if self.shared_port is not None:
            if self.dial_group is None:
                raise ValueError("a transport on a shared Raft port needs its group number")
            self._server = self.shared_port.lease_for(self.dial_group, self._accept_shared)
            return
        conf = self._syncObj.conf
        host, port = (conf.bindAddress or self._selfNode.address).rsplit(":", 1)
        self._server = GuardedTcpServer(
            self._syncObj._poller, globalDnsResolver().resolve(host), port,
            onNewConnection=self._onNewIncomingConnection, sendBufferSize=conf.sendBufferSize,
            recvBufferSize=conf.recvBufferSize, connectionTimeout=conf.connectionTimeout,
            limits=self.limits)

    def leave_port(self) -> None:
        """Take no more connections from the shared port (idempotent; pysyncobj's destroy
        unbinds again). The group's owner calls it before the group leaves the tick loop, so no
        connection is handed to a transport its loop no longer ticks."""
        if self.shared_port is not None and self._server is not None:
            self._server.unbind()

    def _accept_shared(self, sock: socket.socket, opened_at: float) -> None:
        """A connection the shared port read this group's preamble on (the port's loop thread,
        which ticks this transport): taken as GuardedTcpServer takes an accepted one. Its
        handshake clock started at the accept: the preamble's time counts against it."""
        conf = self._syncObj.conf
        conn = accepted_connection(sock, self._syncObj._poller, self.limits, timeout=conf.connectionTimeout,
                                   send_buffer=conf.sendBufferSize, recv_buffer=conf.recvBufferSize)
        conn.opened_at = opened_at
        self._onNewIncomingConnection(conn)

    # Same as 0.3.17's addNode, with a GuardedTcpConnection for the outgoing link.
    def addNode(self, node: Any) -> None:
        self._nodes.add(node)
        self._nodeAddrToNode[node.address] = node
        if self._shouldConnect(node):
            conf = self._syncObj.conf
            conn = GuardedTcpConnection(
                poller=self._syncObj._poller, timeout=conf.connectionTimeout,
                sendBufferSize=conf.sendBufferSize, recvBufferSize=conf.recvBufferSize,
                keepalive=conf.tcp_keepalive, limits=self.limits,
                preamble=b"" if self.dial_group is None else preamble(self.dial_group))
            conn.encryptor = self._syncObj.encryptor
            conn.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, conn))
            conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
            conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
            self._connections[node] = conn

    # Restores "speak once the link is keyed": Raft tolerates a lost message, the peer does not
    # tolerate an unsigned one (it drops the link). The handshake itself uses conn.send directly.
    def send(self, node: Any, message: Any) -> bool:
        conn = self._connections.get(node)
        if conn is None or (self._syncObj.encryptor and not conn.sendRandKey):
            return False                # pysyncobj signs a frame only once it has the peer's key
        return bool(super().send(node, message))

    # Restores a bound on strangers: stock pysyncobj keeps any number of unidentified connections.
    def _onNewIncomingConnection(self, conn: Any) -> None:
        if len(self._unknownConnections) >= self.limits.max_pending:
            WARN.warn("pending", "Raft: refusing a connection: %d are still in the handshake",
                      len(self._unknownConnections))
            conn.disconnect()
            return
        super()._onNewIncomingConnection(conn)

    def _onIncomingMessageReceived(self, conn: Any, message: Any) -> None:
        super()._onIncomingMessageReceived(conn, message)
        if conn not in self._unknownConnections and conn.state == CONNECTION_STATE.CONNECTED:
            conn.authenticated = True       # key exchanged and a known node address (or readonly)

    def _onOutgoingMessageReceived(self, conn: Any, message: Any) -> None:
        super()._onOutgoingMessageReceived(conn, message)
        if conn.state == CONNECTION_STATE.CONNECTED:
            conn.authenticated = True       # the peer answered our key with its own, encrypted

    # Restores a handshake deadline: stock pysyncobj checks its idle timeout only when a socket
    # has an event, so a connection that sends a byte and then nothing is kept forever.
    def _onTick(self) -> None:
        super()._onTick()
        deadline = monotonic() - self.limits.handshake_timeout_s
        for conn in list(self._handshaking()):      # (disconnect changes the sets)
            if conn.opened_at < deadline:
                WARN.warn("handshake", "Raft: dropping a connection that did not complete the "
                          "handshake within %gs", self.limits.handshake_timeout_s)
                conn.disconnect()


def preamble(group: int) -> bytes:
    """What a dialer sends first on a connection to a shared Raft port for `group`
    (schedd.replication.raft_port reads it; the format lives here, with the dialer, so the
    transport needs nothing of the port)."""
    if not 0 <= group <= MAX_GROUP:
        raise ValueError(f"group {group} outside 0..{MAX_GROUP}")
    return PREAMBLE.pack(SHARED_PORT_MAGIC, group)


class PortServer(Protocol):
    """A group's lease on the shared port, where pysyncobj keeps its TcpServer (it calls `bind`
    on its ticks until it succeeds, and `unbind` when destroyed)."""

    def bind(self) -> None: ...

    def unbind(self) -> None: ...


class SharedPort(Protocol):
    """What a group's transport needs of its node's shared Raft port (raft_port.SharedRaftPort)."""

    def lease_for(self, group: int, accept: Callable[[socket.socket, float], None]) -> PortServer: ...
