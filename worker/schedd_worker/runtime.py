"""The worker process: one stream to the Raft leader, assignments run within a slot count.

    runtime = WorkerRuntime(["10.0.0.1:7070", "10.0.0.2:7070"], name="w1", slots=4)
    await runtime.run(stop)          # returns after a clean drain once `stop` is set

Protocol (schedd.v1.Workers/Connect; the leader side in schedd/leader/workers.py follows it):

Finding the leader
    Ask every known node at once for its own role (`Cluster.NodeInfo`, PROBE_TIMEOUT_S each; a
    node that refuses it, an older build, is asked `Cluster.Status`) and open `Workers.Connect`
    on the first that says it leads in a term not older than one already seen. Each node is asked
    again every PROBE_GAP_S until one does (every BACKOFF_MAX_S once no leader was seen for a
    lease), so a dead or frozen node costs no time and a new leader is found within a gap of its
    election (asking one node at a time took up to ~7 s, one node every 3.3 s). The known nodes are the
    configured addresses and the members the last Welcome listed. A node that is not the leader
    refuses with FAILED_PRECONDITION and "leader=<host:port>": go there directly. UNAVAILABLE,
    connection errors and a stream that ends all lead to a reconnect after an exponential backoff
    with jitter (0.1 s doubling to 2 s; reset by every Welcome).

Noticing the leader is gone
    A SIGKILLed leader's stream errors at once. A leader that stepped down ends it with a status
    that says so (and "leader=" when it knows the next one). A frozen or cut-off leader keeps the
    TCP connection open: the stream's channel pings every KEEPALIVE_MS and drops the stream
    when a ping is not answered within as long again (only to a node whose NodeInfo says it
    accepts such pings: an older build's gRPC would end the stream for "too_many_pings"). While connected, the worker also asks
    every other node at once every WATCH_S: a leader in a newer term than the one that welcomed
    us makes the stream a leftover of a deposed leader, dropped for a reconnect.

A refused credential is not retried
    UNAUTHENTICATED or PERMISSION_DENIED from every node that answered the search for the leader
    (a node that is down is not asked to agree; one that took the credential is), or from the
    leader's Connect before its Welcome (a client token or certificate where a worker token is
    needed, a revoked or expired token, a pool or slot count the token does not allow) cannot
    heal by waiting: `run` logs it at ERROR with what to do and raises CredentialRefused
    (`schedd-worker` exits 2, the SDK raises). Retrying hid it: the worker logged a retry at
    INFO and tried forever. What can heal (UNAVAILABLE, no leader yet, a node that is not the
    leader, a stream that ends) is retried with backoff as before.

On every (re)connect
    The first message is WorkerHello(name, slots, pool, labels, running_tokens, version,
    max_term_seen, incarnation). The incarnation is random per process: a claim records the
    incarnation it was made for, so a new leader can tell "this process never got it" (expired at
    once, run again) from "a previous process may have started it" (the lease rule). The leader answers Welcome(leader_id, term, lease_ms). A Welcome from a term
    older than one already seen ends the stream (a deposed leader). After the Welcome the worker
    resends every unacknowledged result (oldest first), then heartbeats every lease_ms / 3
    (10 s lease when none is given) with the tokens it holds (and those whose result it holds
    back), whether it drains, and how many leader messages it has handled on this stream
    (WorkerHello.counts_reads). The leader loses an attempt after a lease in which the stream
    was silent, or in which heartbeats left it out although the worker had handled its
    assignment; a stream that delivers other messages while its heartbeats are late (an
    overloaded worker or leader) keeps its attempts.

Assignments
    Refused with an AttemptResult(state="REJECTED") when its term is older than the newest term
    seen, when it already holds `slots + ahead` attempts, or while draining. The hello offers
    `ahead` (WorkerHello.ahead): how many assignments not yet due it holds beyond its slots, so
    a leader pushes a herd before its instant (an older leader ignores it and never sends more
    than the slots). At most `slots` run at once: what falls due while every slot is busy waits
    here, oldest due first, and starts as soon as a slot frees, without a leader round trip. A token the worker already holds is a
    duplicate and is ignored (if it has finished, its result is resent). Otherwise the attempt is
    accepted (it counts against the slots and appears in running_tokens from then on): it is
    prepared at once (a Python handler's call resolved) and held in the one timer
    (`schedd_worker.timers`) until due_ms on the local clock; everything due at one instant
    starts in one callback, the calls first, and runs through `executors.execute`. No heartbeat
    is sent per accepted assignment (the hello and the periodic heartbeats list the tokens).

Batches
    A hello says `batches`: the leader may send a LeaderBatch (assignments, cancels and acks of
    one step in one stream message); a Welcome that says `batches` lets the worker send what
    queued up meanwhile as one WorkerBatch. Without it (an older leader or worker) each message
    goes on its own, as before.

Results
    Every AttemptResult, REJECTED ones included, stays in an "unacknowledged" map until a
    ResultAck with its token arrives; ack outcomes "committed" and "stale" (refused by fencing,
    logged at WARNING) drop it, any other outcome ("unknown") keeps it for a resend on the next
    heartbeat tick. Results unacknowledged for a lease period are resent on the same stream, and
    all of them after a reconnect; the leader deduplicates by token.

Connection loss
    Never stops running attempts: they report after the reconnect (the leader grants running
    attempts one lease period of grace to come back).

Drain (`stop` set)
    Heartbeat(draining=True) at once; new assignments are REJECTED; accepted attempts still
    waiting for their due time are handed back as REJECTED "worker draining" (the leader requeues
    them without counting an attempt); running ones get `drain_grace_s` to finish, then are
    cancelled (their CANCELLED outcome is reported). Once every result is acknowledged, or after
    FINAL_ACK_TIMEOUT_S, the worker half-closes the stream and `run` returns.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_client._failover import tls_failure
from schedd_client.channels import (KEEPALIVE_MS, KEEPALIVE_OPTIONS, Security, env_token, open_aio_channel,
                                    speaks_tls, with_files)
from schedd_worker import executors
from schedd_worker.executors import (NO_ISOLATION, Assignment, Call, HttpOptions, Isolation, Outcome,
                                     PythonHandlers)
from schedd_worker.handlers.container import ContainerConfig
from schedd_worker.handlers.container_broker import ContainerBroker
from schedd_worker.timers import DEFAULT_AHEAD, QuietCollector, Timer
from schedd_worker.hooks import NO_HOOKS, WorkerHooks
from schedd_worker.ledger import Held, Ledger

log = logging.getLogger("schedd.worker")

__all__ = ["WorkerRuntime", "REJECTED", "DEFAULT_LEASE_MS", "version", "CredentialRefused"]

REJECTED = "REJECTED"
DEFAULT_LEASE_MS = 10_000
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 2.0
STATUS_TIMEOUT_S = 5.0          # one Cluster.Status call
PROBE_TIMEOUT_S = 0.5           # one node asked who leads (a frozen node must not hold the search)
PROBE_GAP_S = 0.1               # between two asks of one node while looking for the leader
FIND_PATIENCE_S = 3.0           # one search, then the connection loop's backoff
WATCH_S = 1.0                   # while connected: ask the other nodes whether a newer leader exists
WELCOME_TIMEOUT_S = 10.0        # from the hello to the Welcome
FINAL_ACK_TIMEOUT_S = 5.0       # drain: wait this long for the last results to be acknowledged
CLOSE_TIMEOUT_S = 1.0           # drain: after the half-close, wait this long for the stream to end
MIN_HEARTBEAT_S = 0.05
MAX_BATCH = 256                 # messages per WorkerBatch (results carry up to 6 KiB of text)
MAX_BATCH_BYTES = 4 << 20       # or bytes, plus one message (the leader receives 16 MiB or more)
KILL_MARGIN_S = 15.0            # after cancelling in a drain: executor's own kill waits + margin
READ_SLICE = 64                 # leader messages handled between two turns of the loop
RESULT_HOLD_S = 0.5             # results held at most this long while due attempts wait for a slot

_LEADER_RE = re.compile(r"leader=([A-Za-z0-9_.\-\[\]:]+)")

_CHANNEL_OPTIONS = [
    # our own backoff paces reconnects (schedd_client.channels keeps gRPC's short)
    ("grpc.enable_retries", 0),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]
_STREAM_OPTIONS = _CHANNEL_OPTIONS + KEEPALIVE_OPTIONS    # the stream: a frozen leader is noticed
_NOT_NODE_INFO = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED)


def version() -> str:
    try:
        from importlib.metadata import version as _v
        return _v("schedd")
    except Exception:  # noqa: BLE001 - not installed: a source checkout
        return "dev"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _limits(a: pb.Assignment) -> dict[str, float]:
    """The limits an assignment sets (fields left at 0 set none)."""
    lim = a.limits
    return {k: v for k, v in (("memory_mb", lim.memory_mb), ("cpu_seconds", lim.cpu_seconds),
                              ("open_files", lim.open_files), ("processes", lim.processes)) if v}


def _plain(m: Mapping[str, str]) -> dict[str, str]:
    """A protobuf map as a dict: dict(map) walks the Mapping ABC's key view in Python even when
    the map is empty (4% of the worker's time at sustained load), len() does not."""
    return {k: m[k] for k in m} if len(m) else {}


@functools.lru_cache(maxsize=4096)
def _handler(text: str) -> Any:
    """A job's handler object, parsed once per distinct text and shared by its attempts (read
    only: no handler kind changes its spec). Every attempt of a job carries the same text, and a
    herd's held attempts each kept their own copy (half a KiB each)."""
    return json.loads(text)


REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class CredentialRefused(RuntimeError):
    """The cluster refused this worker's credential; waiting will not change that.

    The message names who refused what, and what the operator should do about it."""

    def __init__(self, refusals: list[tuple[str, grpc.aio.AioRpcError]], *, tls: bool = False) -> None:
        self.refusals = refusals
        said = "; ".join(f"{addr}: {_describe(e)}" for addr, e in refusals)
        if tls:                          # a plaintext worker at a node that speaks only TLS
            super().__init__(f"the cluster requires TLS and this worker connects in plaintext ({said}): "
                             "give it the cluster's CA, a worker certificate and its key (--ca, --cert, "
                             "--key) or a context file (--context, SCHEDD_CONTEXT), and its worker token")
            return
        super().__init__(f"the cluster refused this worker's credential ({said}). A worker needs "
                         "a worker token (schedctl acl token create --worker --policy POLICY "
                         "--max-slots N) whose policy may serve its pool, passed in SCHEDD_TOKEN, "
                         "--token or the context file's token_file, not a client token or "
                         "certificate; check that it is not revoked or expired and that --slots "
                         "is within its max_slots")


def _refusal(err: BaseException) -> bool:
    return isinstance(err, grpc.aio.AioRpcError) and err.code() in REFUSALS


def _redirect_target(err: grpc.aio.AioRpcError) -> str | None:
    if err.code() != grpc.StatusCode.FAILED_PRECONDITION:
        return None
    m = _LEADER_RE.search(err.details() or "")
    return m.group(1) if m else None


def _describe(err: BaseException) -> str:
    if isinstance(err, grpc.aio.AioRpcError):
        return f"{err.code().name}: {err.details()}"
    if isinstance(err, _StreamEnded):
        return str(err)
    return f"{type(err).__name__}: {err}"


@dataclass(slots=True, eq=False)
class _Conn:
    address: str
    call: grpc.aio.StreamStreamCall
    leader_id: str
    term: int
    lease_ms: int
    batches: bool = False                # the leader takes WorkerMessage.batch (its Welcome says)
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    tasks: list[asyncio.Task] = field(default_factory=list)
    ending: str = ""                     # why we end it ourselves
    read: int = 0                        # leader messages handled (Heartbeat.messages_read)
    end: asyncio.Event = field(default_factory=asyncio.Event)      # set: drop the stream now
    gone: asyncio.Event = field(default_factory=asyncio.Event)     # set: the session is over


class _StreamEnded(Exception):
    pass


@dataclass(slots=True, frozen=True)
class _Answer:
    """What one node said about the leader: its address and term, or why it named none."""
    leader: str = ""
    term: int = 0
    why: str = ""
    pings: bool = False                  # the node accepts our keepalive pings (NodeStatus.accepts_pings_ms)
    refused: grpc.aio.AioRpcError | None = None   # the node refused our credential (CredentialRefused)
    took_credential: bool = False        # the node answered past authentication
    tls: bool = False                    # ... the refusal: it speaks only TLS, we plaintext


@dataclass(slots=True)
class _Seen:
    """What one search heard: the credential refusals, and whether any node took it."""
    refused: list[tuple[str, grpc.aio.AioRpcError]] = field(default_factory=list)
    answered: bool = False
    tls: bool = False                    # every refusal is a node that requires TLS of a plaintext worker


def _leader_term(st: pb.ClusterStatus) -> int:
    return next((n.term for n in st.nodes if n.id == st.leader_id), st.term)


@dataclass(slots=True, eq=False)
class _Probes:
    """Channels to the nodes asked who leads, one per address, kept for one search (or one
    session's watch) and then closed: a TLS handshake per ask would cost more than the ask, and
    a channel made afresh per search picks up rotated certificate files."""
    open: Callable[[str], grpc.aio.Channel]
    # plaintext workers only: does the node at this address answer a TLS handshake? (a
    # plaintext call to a TLS node fails like a node that went away: this tells them apart)
    speaks_tls: Callable[[str], bool] | None = None
    channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)
    old: set[str] = field(default_factory=set)       # refused NodeInfo (an older build): Status

    async def ask(self, addr: str) -> _Answer:
        ch = self.channels.get(addr)
        if ch is None:
            ch = self.channels[addr] = self.open(addr)
        stub = pb_grpc.ClusterStub(ch)
        try:
            if addr not in self.old:
                try:
                    info = await stub.NodeInfo(pb.NodeInfoRequest(), timeout=PROBE_TIMEOUT_S)
                except grpc.aio.AioRpcError as e:
                    if e.code() not in _NOT_NODE_INFO:
                        raise
                    self.old.add(addr)
                else:                             # the node we asked is the one that answers
                    pings = 0 < info.accepts_pings_ms <= KEEPALIVE_MS
                    if info.role == "leader":
                        return _Answer(addr, info.term, pings=pings, took_credential=True)
                    if info.leader_grpc_address:   # a follower names its leader (maybe one we never knew)
                        return _Answer(WorkerRuntime._dialable(info.leader_grpc_address, addr), info.term,
                                       took_credential=True)
                    return _Answer(term=info.term, why=f"{addr}: {info.role or '?'} in term {info.term}",
                                   took_credential=True)
            st = await stub.Status(pb.ClusterStatusRequest(), timeout=STATUS_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            if (self.speaks_tls is not None and e.code() == grpc.StatusCode.UNAVAILABLE
                    and tls_failure(e.details() or "") and await asyncio.to_thread(self.speaks_tls, addr)):
                return _Answer(why=f"{addr}: requires TLS", refused=e, tls=True)
            return _Answer(why=f"{addr}: {_describe(e)}", refused=e if _refusal(e) else None)
        if not st.leader_grpc_address:
            return _Answer(why=f"{addr}: knows no leader yet", took_credential=True)
        return _Answer(WorkerRuntime._dialable(st.leader_grpc_address, addr), _leader_term(st),
                       took_credential=True)

    async def close(self) -> None:
        channels, self.channels = list(self.channels.values()), {}
        await asyncio.gather(*(c.close() for c in channels), return_exceptions=True)


class WorkerRuntime:
    def __init__(self, cluster: Sequence[str], *, name: str, slots: int = 4, pool: str = "",
                 labels: Mapping[str, str] | None = None,
                 python_handlers: PythonHandlers | None = None, drain_grace_s: float = 30.0,
                 kill_grace_s: float = 5.0, now_ms: Callable[[], int] = _wall_ms,
                 http: HttpOptions = HttpOptions(), hooks: WorkerHooks = NO_HOOKS,
                 isolation: Isolation = NO_ISOLATION, security: Security | None = None,
                 token: str | None = None, ahead: int = DEFAULT_AHEAD,
                 result_hold_s: float = RESULT_HOLD_S, containers: ContainerConfig | ContainerBroker | None = None) -> None:
        if isinstance(cluster, str):
            cluster = [cluster]
        self.cluster = [a.strip() for a in cluster if a and a.strip()]
        if not self.cluster:
            raise ValueError("no cluster addresses given")
        if not name:
            raise ValueError("a worker needs a name")
        if int(slots) < 1:
            raise ValueError("a worker needs at least one slot")
        self.name = name
        self.slots = int(slots)
        self.ahead = max(0, int(ahead))            # held not yet due beyond the slots (see module doc)
        self.pool = pool or ""
        self.labels = {str(k): str(v) for k, v in (labels or {}).items()}
        self.python_handlers = python_handlers
        self.drain_grace_s = max(0.0, float(drain_grace_s))
        self.kill_grace_s = max(0.0, float(kill_grace_s))
        self.now_ms = now_ms
        self.http = http                           # outbound policy of HTTP jobs and http sensors
        self.isolation = isolation                 # team -> Unix user, attempt cgroups
        self.version = version()
        self.hooks = hooks                         # the fault suite's (schedd_worker.hooks)
        # TLS files and the worker token (`token`, else the security's, else $SCHEDD_TOKEN):
        # the channel carries the token (schedd_client.channels), never in cleartext off loopback.
        self.security = with_files(security or Security(),
                                   token=token or env_token())
        self.security.credentials_for_channel()    # a bad file fails at start, named
        self._events = hooks.events                # the fault suite's history (does nothing otherwise)

        self.max_term_seen = 0
        self.incarnation = uuid.uuid4().hex     # names this process: the leader records it in claims
        self.connected = False
        self.draining = False
        self.leader_address: str | None = None
        self.connections = 0                       # Welcomes received so far

        self._ledger = Ledger()                    # what it holds and what it owes the leader
        self._busy = 0                             # attempts running (at most `slots`)
        self._ready: deque[Held] = deque()     # due, waiting for a slot, in due order
        self._starting = False                     # _start_ready is running (not re-entered)
        self.result_hold_s = result_hold_s
        self._flush: asyncio.TimerHandle | None = None
        self._timer = Timer(now_ms, self._on_due,   # every waiting attempt, one loop timer
                            now_s=time.time if now_ms is _wall_ms else None)
        self._kinds = executors.handlers_for(python_handlers, http, isolation, containers)   # built once
        self._gc = QuietCollector()                # full collections between due instants
        self._conn: _Conn | None = None
        self._closing = asyncio.Event()
        self._hurry = asyncio.Event()
        self._members: list[str] = []              # the gRPC addresses the last Welcome listed
        self._pings: dict[str, bool] = {}          # address -> it accepts keepalive pings (its NodeInfo said)
        self._redirect: str | None = None
        self._backoff = BACKOFF_START_S
        self._lease_ms = DEFAULT_LEASE_MS
        self._lost_since: float | None = None      # loop time the last stream ended, while not connected
        self._started: float | None = None         # loop time run() began

    # ------------------------------------------------------------ public

    @property
    def running(self) -> dict[int, str]:
        """token -> execution id of every attempt accepted and not ended (introspection)."""
        return self._ledger.running()

    def hurry(self) -> None:
        """During a drain: stop waiting for running attempts, cancel them now (a second SIGTERM)."""
        self._hurry.set()

    async def run(self, stop: asyncio.Event) -> None:
        self._started = asyncio.get_running_loop().time()
        self._gc.install()
        loop_task = asyncio.create_task(self._connection_loop(), name=f"worker-{self.name}-conn")
        fence = asyncio.create_task(self._self_fence(), name=f"worker-{self.name}-fence")
        stop_wait = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({stop_wait, loop_task}, return_when=asyncio.FIRST_COMPLETED)
            if loop_task.done():                 # a refused credential; else a bug, surfaced
                loop_task.result()
                raise RuntimeError("worker connection loop ended unexpectedly")
            await self._drain()
        finally:
            self._timer.close()
            stop_wait.cancel()
            fence.cancel()
            self._closing.set()
            await self._close_stream()
            if not loop_task.done():
                loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
            for a in list(self._ledger.attempts()):
                self._escalate(a)                # a task of its own, which stops the handler
            leftovers = [a.task for a in self._ledger.held.values() if a.task and not a.task.done()]
            for t in leftovers:                  # only when run() itself is cancelled
                t.cancel()
            if leftovers:
                await asyncio.gather(*leftovers, return_exceptions=True)
            self.connected = False
            self._gc.uninstall()
            log.info("worker %s stopped", self.name)

    # ------------------------------------------------------------ drain

    async def _drain(self) -> None:
        self.draining = True
        log.info("worker %s draining: %d attempts held, grace %gs", self.name, len(self._ledger.held),
                 self.drain_grace_s)
        self._send_heartbeat()
        for att in list(self._ledger.attempts()):
            if att.phase == "waiting":        # handed back: the leader requeues it
                self._hand_back(att, "worker draining")
        self._ready.clear()
        self._send_held()
        if any(a.task is not None for a in self._ledger.held.values()):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.drain_grace_s
            hurry = asyncio.create_task(self._hurry.wait())
            try:
                while True:                       # (an attempt's task may change: _escalate)
                    pending = {a.task for a in self._ledger.held.values()
                               if a.task is not None and not a.task.done()}
                    left = deadline - loop.time()
                    if not pending or hurry.done() or left <= 0:
                        break
                    await asyncio.wait(pending | {hurry}, timeout=left,
                                       return_when=asyncio.FIRST_COMPLETED)
            finally:
                hurry.cancel()
            left_over = [a for a in self._ledger.held.values()
                         if a.task is not None and not a.task.done()]
            if left_over:
                log.warning("drain grace over: cancelling %d running attempts (%s)",
                            len(left_over), ", ".join(a.msg.execution_id for a in left_over))
                for a in left_over:
                    self._stop(a)
                await asyncio.wait({a.task for a in left_over if a.task is not None},  # set: see above
                                   timeout=self.kill_grace_s + KILL_MARGIN_S)
        if self._ledger.owed:
            try:
                await asyncio.wait_for(self._ledger.settled.wait(), FINAL_ACK_TIMEOUT_S)
            except TimeoutError:
                log.warning("drain: %d results not acknowledged by the leader (tokens %s); the "
                            "leader will expire those attempts", len(self._ledger.owed),
                            sorted(self._ledger.owed))

    # ------------------------------------------------------------ connection

    async def _connection_loop(self) -> None:
        failures = 0
        redirects = 0                             # redirects followed in a row without a Welcome
        last_warn = 0.0
        loop = asyncio.get_running_loop()
        while not self._closing.is_set():
            welcomed_before = self.connections
            err: BaseException | None = None
            addr = None
            try:
                addr = self._redirect
                self._redirect = None
                if addr is None:
                    addr = await self._find_leader()
                await self._session(addr)
            except (asyncio.CancelledError, CredentialRefused):
                raise
            except _StreamEnded as e:
                err = e
            except grpc.aio.AioRpcError as e:
                if _refusal(e) and self.connections == welcomed_before:
                    self._refused([(addr or "?", e)])
                target = _redirect_target(e)
                if target is not None and target != addr:
                    log.info("%s is not the leader; redirected to %s", addr, target)
                    self._redirect = target
                    redirects += 1
                    if redirects <= 3:            # follow it at once (bounded: no ping-pong)
                        continue
                err = e
            except Exception as e:  # keep the worker alive, retry
                log.exception("worker connection failed")
                err = e
            if self._closing.is_set():
                return
            if self.connections != welcomed_before:
                self._backoff = BACKOFF_START_S   # we had a working stream: start over
                failures = 0
                redirects = 0
                if err is not None:
                    log.info("stream to the leader ended: %s; reconnecting", _describe(err))
            else:
                failures += 1
                now = loop.time()
                msg = "?" if err is None else _describe(err)
                if failures == 1 or now - last_warn >= 30:
                    (log.warning if failures > 1 else log.info)(
                        "cannot connect to the leader: %s; retrying with backoff", msg)
                    last_warn = now
                else:
                    log.debug("cannot connect to the leader: %s", msg)
            delay = self._backoff * (0.5 + random.random() * 0.5)
            self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
            try:
                await asyncio.wait_for(self._closing.wait(), delay)
            except TimeoutError:
                pass

    def _refused(self, refusals: list[tuple[str, grpc.aio.AioRpcError]], *, tls: bool = False) -> None:
        """Stop: the credential was refused (logged here, once, for the CLI and the SDK alike)."""
        err = CredentialRefused(refusals, tls=tls)
        log.error("worker %s: %s", self.name, err)
        raise err

    def _known(self) -> list[str]:
        """Every node to ask: the configured addresses, then the members the last Welcome listed."""
        return list(dict.fromkeys([*self.cluster, *self._members]))

    def _probes(self) -> _Probes:
        tls_check = None if self.security.tls else (lambda a: speaks_tls(self.hooks.dial(a)))
        return _Probes(lambda a: open_aio_channel(self.hooks.dial(a), self.security, _CHANNEL_OPTIONS),
                       speaks_tls=tls_check)

    def _probe_gap(self) -> float:
        """PROBE_GAP_S while the leader has been gone less than a lease (an election takes about
        a second), then BACKOFF_MAX_S: a cluster without a quorum is not asked 10 times a second
        by every worker for as long as it lasts."""
        since = self._lost_since if self._lost_since is not None else self._started
        now = asyncio.get_running_loop().time()
        return PROBE_GAP_S if since is None or now - since < self._lease_ms / 1000 else BACKOFF_MAX_S

    async def _find_leader(self) -> str:
        """Ask every known node at once, each again after a gap, until one says it leads in a
        term not older than one seen: its gRPC address (raises _StreamEnded after FIND_PATIENCE_S)."""
        deadline = asyncio.get_running_loop().time() + FIND_PATIENCE_S
        probes = self._probes()
        why: dict[str, str] = {}
        seen = _Seen()
        tasks = [asyncio.create_task(self._probe_until(probes, addr, deadline, why, seen))
                 for addr in self._known()]
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
            self._refused(seen.refused, tls=seen.tls)
        raise _StreamEnded("no leader found (" + "; ".join(why.values()) + ")")

    async def _probe_until(self, probes: _Probes, addr: str, deadline: float, why: dict[str, str],
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
            if a.leader and a.term >= self.max_term_seen:
                self._pings[a.leader] = a.pings
                return a.leader
            why[addr] = a.why or f"{addr}: names a leader of term {a.term}, already saw {self.max_term_seen}"
            left = deadline - loop.time()
            if left <= 0:
                return ""
            await asyncio.sleep(min(self._probe_gap(), left))

    @staticmethod
    def _dialable(leader: str, asked: str) -> str:
        """A leader advertising a wildcard bind address is reached on the host we asked."""
        host, sep, port = leader.rpartition(":")
        if sep and host in ("0.0.0.0", "[::]", "::", ""):
            ahost = asked.rpartition(":")[0]
            if ahost:
                return f"{ahost}:{port}"
        return leader

    def _hello(self) -> pb.WorkerMessage:
        return pb.WorkerMessage(hello=pb.WorkerHello(
            name=self.name, slots=self.slots, pool=self.pool, labels=self.labels,
            running_tokens=sorted(self._ledger.held), version=self.version,
            max_term_seen=self.max_term_seen, incarnation=self.incarnation, batches=True,
            ahead=self.ahead, counts_reads=True, handlers=sorted(self._kinds)))

    async def _session(self, addr: str) -> None:
        """One stream: hello, Welcome, then serve it until it ends (raises when it fails)."""
        # pings only to a node that said it accepts them: an older build's gRPC ends a stream
        # pinged every second ("too_many_pings"); the watch still finds a newer leader
        options = _STREAM_OPTIONS if self._pings.get(addr) else _CHANNEL_OPTIONS
        channel = open_aio_channel(self.hooks.dial(addr), self.security, options)
        call = None
        conn: _Conn | None = None
        try:
            call = pb_grpc.WorkersStub(channel).Connect()
            await call.write(self._hello())
            try:
                first = await asyncio.wait_for(call.read(), WELCOME_TIMEOUT_S)
            except TimeoutError:
                raise _StreamEnded(f"no Welcome from {addr} within {WELCOME_TIMEOUT_S:g}s") from None
            if first is grpc.aio.EOF:
                raise _StreamEnded(f"{addr} ended the stream before its Welcome")
            if first.WhichOneof("kind") != "welcome":
                raise _StreamEnded(f"{addr} sent {first.WhichOneof('kind')} before its Welcome")
            w = first.welcome
            if w.term < self.max_term_seen:
                raise _StreamEnded(f"{addr} ({w.leader_id}) welcomed us in term {w.term}, "
                                   f"already saw term {self.max_term_seen}")
            self.max_term_seen = max(self.max_term_seen, w.term)
            if w.members:
                self._members = [self._dialable(m, addr) for m in w.members]
            conn = _Conn(address=addr, call=call, leader_id=w.leader_id, term=w.term,
                         lease_ms=w.lease_ms if w.lease_ms > 0 else DEFAULT_LEASE_MS,
                         batches=w.batches)
            self._conn = conn
            self.connected = True
            self._lost_since = None
            self._lease_ms = conn.lease_ms
            self.leader_address = addr
            self.connections += 1
            log.info("worker %s connected to leader %s at %s (term %d, lease %d ms; %d running, "
                     "%d results to resend)", self.name, w.leader_id or "?", addr, w.term,
                     conn.lease_ms, len(self._ledger.held), len(self._ledger.owed))
            for token in list(self._ledger.owed):
                self._send_result(token)
            if self.draining:
                self._send_heartbeat()
            reader = asyncio.create_task(self._reader(conn))
            ender = asyncio.create_task(conn.end.wait())
            conn.tasks = [asyncio.create_task(self._writer(conn)),
                          asyncio.create_task(self._heartbeats(conn)),
                          asyncio.create_task(self._watch_leader(conn)), reader, ender]
            await asyncio.wait({reader, ender}, return_when=asyncio.FIRST_COMPLETED)
            if reader.done():
                reader.result()                   # raises the stream's error
                if not conn.ending:
                    raise _StreamEnded("the leader ended the stream")
            elif conn.ending != "worker stopped":
                raise _StreamEnded(conn.ending)
        finally:
            if self._conn is conn and conn is not None:
                self._conn = None
                self.connected = False
                self._lost_since = asyncio.get_running_loop().time()
            if conn is not None:
                for t in conn.tasks:
                    t.cancel()
                await asyncio.gather(*conn.tasks, return_exceptions=True)
            if call is not None and not call.done():
                call.cancel()
            await channel.close()
            if conn is not None:
                conn.gone.set()

    async def _reader(self, conn: _Conn) -> None:
        """Handles what the leader sends, a large batch in slices of READ_SLICE with the loop's
        other work between them: accepting an assignment costs tens of µs, and a batch of
        the next instant's thousand would hold a due timer (the handlers of this instant)
        for tens of ms (the p99 at 1,000 fires/s)."""
        while True:
            msg = await conn.call.read()
            if msg is grpc.aio.EOF:
                return
            msgs = msg.batch.messages if msg.WhichOneof("kind") == "batch" else (msg,)
            for i in range(0, len(msgs), READ_SLICE):
                if i:
                    await asyncio.sleep(0)
                for m in msgs[i:i + READ_SLICE]:
                    self._on_leader_message(m)
                    conn.read += 1

    async def _writer(self, conn: _Conn) -> None:
        """Writes what is queued; what queued up meanwhile goes as one WorkerBatch when the
        leader takes batches (one gRPC message per result was 22% of the worker's time at
        1,000 fires/s)."""
        try:
            while True:
                msgs = [await conn.out.get()]
                size = msgs[0].ByteSize() if msgs[0] is not None else 0
                while (msgs[-1] is not None and len(msgs) < MAX_BATCH and size < MAX_BATCH_BYTES
                       and not conn.out.empty()):
                    msgs.append(conn.out.get_nowait())
                    size += msgs[-1].ByteSize() if msgs[-1] is not None else 0
                end = msgs[-1] is None
                if end:
                    msgs.pop()
                if len(msgs) > 1 and conn.batches:
                    await conn.call.write(pb.WorkerMessage(batch=pb.WorkerBatch(messages=msgs)))
                else:
                    for msg in msgs:
                        await conn.call.write(msg)
                if end:
                    await conn.call.done_writing()
                    return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the reader sees the stream's end too
            log.debug("write to the leader failed: %s", _describe(e))

    async def _heartbeats(self, conn: _Conn) -> None:
        interval = max(MIN_HEARTBEAT_S, conn.lease_ms / 3000)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            self._hand_back_overdue()
            self._send_heartbeat()
            self._quiet_gc()
            # results the leader has not settled within a lease ("unknown" acks, lost ones)
            old = loop.time() - conn.lease_ms / 1000
            for token, u in list(self._ledger.owed.items()):
                if u.sent_at is None or u.sent_at <= old:
                    self._send_result(token)

    async def _watch_leader(self, conn: _Conn) -> None:
        """Every WATCH_S, ask every other node at once who leads: a newer leader means our stream
        is stale. A leader cut off from its peers keeps its stream alive (its pings are answered)
        until it steps down; the new one grants running attempts one lease from its takeover, so
        the worker must find it well within that lease to report them before they are expired."""
        probes = self._probes()
        try:
            while True:
                await asyncio.sleep(WATCH_S)
                others = [a for a in self._known() if a != conn.address] or self.cluster
                answers = await asyncio.gather(*(probes.ask(a) for a in others))
                newer = [a for a in answers if a.leader and a.term > conn.term]
                if newer:
                    best = max(newer, key=lambda a: a.term)
                    log.info("%s leads in term %d (we are connected to %s, term %d): reconnecting",
                             best.leader, best.term, conn.address, conn.term)
                    self._redirect = best.leader
                    conn.ending = f"a newer leader ({best.leader}, term {best.term}) exists"
                    conn.end.set()
                    return
        finally:
            await probes.close()

    async def _close_stream(self) -> None:
        """End of the drain: half-close so the leader drops us at once, not after a lease."""
        conn = self._conn
        if conn is None:
            return
        conn.ending = "worker stopped"
        conn.out.put_nowait(None)
        try:
            await asyncio.wait_for(conn.gone.wait(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            conn.end.set()

    # ------------------------------------------------------------ messages

    def _send(self, msg: pb.WorkerMessage) -> bool:
        conn = self._conn
        if conn is None or conn.ending:
            return False
        conn.out.put_nowait(msg)
        return True

    def _send_heartbeat(self) -> None:
        """The tokens it holds, with those whose result is held back, not sent yet (a leader
        reading a heartbeat that leaves out an attempt the worker had been sent loses it after
        a lease), and how many leader messages it has handled (the assignments it knows of)."""
        conn = self._conn
        if conn is None:
            return
        self._send(pb.WorkerMessage(heartbeat=pb.Heartbeat(
            running_tokens=self._ledger.listed(), draining=self.draining,
            messages_read=conn.read)))

    def _send_result(self, token: int) -> None:
        u = self._ledger.owed.get(token)
        if u is not None and self._send(pb.WorkerMessage(result=u.result)):
            u.sent_at = asyncio.get_running_loop().time()

    def _report(self, result: pb.AttemptResult) -> None:
        """Send the result, unless due attempts wait for a slot (a herd is starting): then it
        is held until they have all started or for result_hold_s at most, so that the herd's
        starts do not share the worker's and the leader's CPU with its results (a lease is
        seconds longer than the hold: the attempt is not given up meanwhile)."""
        self._ledger.owe(result, hold_back=bool(self._ready))
        if self._ready:
            if self._flush is None:
                self._flush = asyncio.get_running_loop().call_later(self.result_hold_s, self._send_held)
            return
        self._send_result(result.fencing_token)

    def _overdue(self, att: Held, now: int) -> bool:
        """An attempt with a timeout that waited for a slot more than half a lease (since it was
        due, or arrived due): the leader expires an attempt that does not report within its
        timeout plus a lease past due, and must not while it has not even started here (it
        would run twice). Without a timeout it may wait as long as it takes (the heartbeats
        keep it alive): a herd of slow handlers on few slots legitimately waits for long."""
        return (att.msg.timeout_seconds > 0
                and now - max(att.msg.due_ms, att.queued_ms) > self._lease_ms // 2)

    def _overdue_reason(self) -> str:
        return (f"waited for a free slot for more than {self._lease_ms / 2000:g}s: "
                "handed back before it started")

    def _hand_back_overdue(self) -> None:
        """Every heartbeat: hand back what waits for a slot too long (no slot freed meanwhile)."""
        if not self._ready:
            return
        now = self.now_ms()
        for att in [a for a in self._ready if a.phase == "waiting" and self._overdue(a, now)]:
            self._hand_back(att, self._overdue_reason())
        self._ready = deque(a for a in self._ready if a.phase == "waiting")

    def _hand_back(self, att: Held, why: str) -> None:
        """An attempt that never started goes back to the leader as REJECTED: it runs again
        (elsewhere), neither a failure nor an attempt counted."""
        self._forget(att)
        self._reject(att.msg, why)

    def _send_held(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        for token in self._ledger.take_held_back():
            self._send_result(token)

    async def _self_fence(self) -> None:
        """Cut off from every leader for longer than a lease, this worker's attempts have been
        expired and are being run again elsewhere: stop them here too, so a partitioned worker
        does not keep running what another worker now runs. (A worker that is itself paused cannot
        do this; its late result is refused by the fencing token instead.)"""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(0.25)
            lost = self._lost_since
            if self.connected or lost is None or not self._ledger.held:
                continue
            if (loop.time() - lost) * 1000 > self._lease_ms:
                log.warning("worker %s: no leader for %.1fs (lease %d ms): cancelling %d attempts, "
                            "which the leader runs again elsewhere", self.name, loop.time() - lost,
                            self._lease_ms, len(self._ledger.held))
                for att in list(self._ledger.attempts()):
                    if att.phase == "waiting":        # never started: back in line, not CANCELLED
                        self._hand_back(att, "no leader for a lease: handed back before it started")
                    else:
                        self._stop(att)
                self._lost_since = loop.time()        # once per lease at most

    def _on_leader_message(self, msg: pb.LeaderMessage) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "batch":                       # one level only (_reader unpacks the batch)
            log.debug("ignoring a batch inside a batch")
        elif kind == "assignment":
            self._on_assignment(msg.assignment)
        elif kind == "cancel":
            att = self._ledger.held.get(msg.cancel.fencing_token)
            if att is None:
                log.info("cancel for %s (token %d): not running here", msg.cancel.execution_id,
                         msg.cancel.fencing_token)
                if msg.cancel.fencing_token in self._ledger.owed:
                    self._send_result(msg.cancel.fencing_token)
                return
            log.info("cancelling %s (token %d)", att.msg.execution_id, att.msg.fencing_token)
            self._stop(att)
            if att.phase == "waiting":            # reports CANCELLED "cancelled before it started"
                self._start(att)
        elif kind == "ack":
            self._on_ack(msg.ack)
        elif kind == "welcome":                   # a second Welcome: the leader's term moved on
            self.max_term_seen = max(self.max_term_seen, msg.welcome.term)
            if self._conn is not None:
                self._conn.term = max(self._conn.term, msg.welcome.term)
        else:
            log.debug("ignoring leader message %r", kind)

    def _on_ack(self, ack: pb.ResultAck) -> None:
        self._events.acked(self.name, ack.fencing_token, ack.outcome)
        u = self._ledger.owed.get(ack.fencing_token)
        if u is None:
            return
        outcome = ack.outcome or "committed"
        if outcome in ("committed", "stale", "refused"):
            self._ledger.settle(ack.fencing_token)
            if outcome == "stale":
                log.warning("result of %s (token %d, %s) refused by fencing: the attempt was "
                            "superseded", u.result.execution_id, ack.fencing_token, u.result.state)
            elif outcome == "refused":
                log.warning("result of %s (token %d, %s) refused: the leader did not assign that "
                            "attempt to this worker", u.result.execution_id, ack.fencing_token,
                            u.result.state)
        else:
            log.info("leader could not settle the result of %s (token %d): %s; will resend",
                     u.result.execution_id, ack.fencing_token, outcome)
            u.sent_at = None

    def _reject(self, a: pb.Assignment, why: str) -> None:
        log.info("rejecting %s (token %d, term %d): %s", a.execution_id, a.fencing_token, a.term, why)
        self._events.rejected(self.name, a, why)
        now = self.now_ms()
        self._report(pb.AttemptResult(execution_id=a.execution_id, fencing_token=a.fencing_token,
                                      state=REJECTED, error=why, started_ms=now, ended_ms=now))

    def _on_assignment(self, a: pb.Assignment) -> None:
        token = a.fencing_token
        self._events.received(self.name, a)
        if a.term < self.max_term_seen:
            self._reject(a, f"assignment from term {a.term}, already saw term {self.max_term_seen}")
            return
        self.max_term_seen = max(self.max_term_seen, a.term)
        if token in self._ledger.held:
            log.info("duplicate assignment of %s (token %d): already running", a.execution_id, token)
            return
        if token in self._ledger.owed:
            log.info("duplicate assignment of %s (token %d): already finished; resending its result",
                     a.execution_id, token)
            self._send_result(token)
            return
        if self.draining:
            self._reject(a, "worker draining")
            return
        if len(self._ledger.held) >= self.slots + self.ahead:
            self._reject(a, "no free slot")
            return
        att = self._prepare(a)
        self._ledger.accept(att)
        now = self.now_ms()
        log.debug("accepted %s attempt %d (token %d), due in %d ms", a.execution_id, a.attempt,
                  token, max(0, a.due_ms - now) if a.due_ms else 0)
        if a.due_ms and a.due_ms > now:
            self._timer.add(a.due_ms, token)
        else:
            self._on_due([token])

    # ------------------------------------------------------------ attempts

    def _prepare(self, a: pb.Assignment) -> Held:
        """Everything an attempt needs, built when it is accepted (about a lookahead before it
        is due), so that at its due time the worker only starts it."""
        try:
            handler = _handler(a.handler_json) if a.handler_json else {}
        except ValueError:
            return Held(msg=a, ex=None)
        ex = Assignment(execution_id=a.execution_id, job=a.job, scheduled_ms=a.scheduled_ms,
                        attempt=a.attempt, fencing_token=a.fencing_token, handler=handler,
                        timeout_s=a.timeout_seconds, labels=_plain(a.labels), team=a.team,
                        secret_env=_plain(a.secret_env), limits=_limits(a))
        return Held(msg=a, ex=ex, call=executors.prepare(ex, self.python_handlers, self.isolation))

    def _on_due(self, tokens: list[int]) -> None:
        """The timer: every attempt due by now starts in this one callback, every handler call
        first (an async one runs to its first await, a plain one's thread starts), then the
        bookkeeping that watches them, so no handler waits for the bookkeeping of the others;
        those that ended at once free their slots for the attempts waiting, still in this
        callback (one loop turn between them was a tenth of a 1,000 herd's start)."""
        due = [att for att in map(self._ledger.held.get, tokens)
               if att is not None and att.phase == "waiting"]
        room = max(0, self.slots - self._busy)
        if len(due) > room:                       # more due than free slots: the rest start
            now = self.now_ms()                   # here as slots free up (no leader round trip)
            for att in due[room:]:
                att.queued_ms = now
            self._ready.extend(due[room:])
            del due[room:]
        started = [self._call(att) for att in due]
        self._watch_all(due, started)
        self._quiet_gc()

    def _quiet_gc(self) -> None:
        """A full garbage collection if one is due and nothing is (QuietCollector)."""
        if self._ready:                           # attempts wait for a slot: not now
            return
        nxt = self._timer.queue.next_due()
        self._gc.maybe_collect(None if nxt is None else nxt / 1000 - self._timer.now_s())

    def _start_ready(self) -> None:
        """A slot freed: start the attempts due and waiting for one, oldest due first; one that
        waited too long (overdue) is handed back instead. Not re-entered: a start that ended at
        once (`_watch`) frees its slot for the next one of this same loop, not in a nested one
        (a herd of instant handlers would nest as deep as it is long)."""
        if self._starting:
            return
        self._starting = True
        try:
            now = self.now_ms()
            while self._ready and self._busy < self.slots:
                att = self._ready.popleft()
                if att.phase == "waiting" and self._ledger.held.get(att.msg.fencing_token) is att:
                    if self._overdue(att, now):
                        self._hand_back(att, self._overdue_reason())
                    else:
                        self._start(att)
        finally:
            self._starting = False
        if not self._ready and self._ledger.held_back:
            self._send_held()

    def _watch_all(self, due: list[Held],
                   started: list[tuple[Call, asyncio.Future, int] | None]) -> None:
        for att, s in zip(due, started):
            self._watch(att, s)

    def _start(self, att: Held) -> None:
        """Start the attempt now (due, or cancelled while waiting)."""
        self._watch(att, self._call(att))

    def _call(self, att: Held) -> tuple[Call, asyncio.Future, int] | None:
        """A prepared Python call is started here, synchronously; anything else in its task."""
        a = att.msg
        att.phase = "running"
        self._busy += 1
        self._events.started(self.name, a)
        if att.call is None or att.cancel.is_set():
            return None
        return att.call, att.call.start(), self.now_ms()

    def _watch(self, att: Held, started: tuple[Call, asyncio.Future, int] | None) -> None:
        """A started Python call is watched by a callback on its future, without a task: a task,
        an executor and a race per attempt were half of the worker's time per attempt in a
        herd. It gets a task of its own (`_escalate`) only when it has to be stopped
        (cancelled, past its timeout) or returned an awaitable. Anything else runs in its task."""
        if started is None:
            self._own_task(att)
            return
        fut = started[1]
        att.started, att.task = started, fut
        if fut.done():                            # ended in its first step (start_eagerly): its
            self._settled(att, fut)               # slot goes to the next waiting at once
            return
        fut.add_done_callback(lambda f: self._settled(att, f))
        if att.msg.timeout_seconds > 0:
            att.timer = asyncio.get_running_loop().call_later(att.msg.timeout_seconds,
                                                              self._escalate, att)

    def _settled(self, att: Held, fut: asyncio.Future) -> None:
        """A call watched by callback ended on its own: report it."""
        if att.task is not fut or att.phase != "running" or att.started is None:
            return                                # escalated meanwhile: its task reports
        r = executors.settled(fut)
        if r is None:                             # it returned an awaitable: awaited in a task
            self._escalate(att)
            return
        if att.timer is not None:
            att.timer.cancel()
        try:
            self._finish(att, executors.outcome(r, att.started[2], self.now_ms()))
        finally:
            self._forget(att)

    def _escalate(self, att: Held) -> None:
        """Give a call watched by callback a task of its own, which races it against its cancel
        event and its deadline (both counted as if it had had the task from its start)."""
        if att.phase != "running" or att.started is None or att.task is not att.started[1]:
            return
        if att.timer is not None:
            att.timer.cancel()
            att.timer = None
        self._own_task(att)

    def _own_task(self, att: Held) -> None:
        """Run the attempt (or wait for its started call) in a task of its own."""
        a = att.msg
        att.task = asyncio.create_task(self._run_attempt(att, att.started),
                                       name=f"attempt-{a.execution_id}-{a.fencing_token}")

    def _stop(self, att: Held) -> None:
        """Cancel the attempt (a cancel from the leader, the self-fence, the drain's end)."""
        att.cancel.set()
        self._escalate(att)

    def _forget(self, att: Held) -> None:
        self._ledger.end(att.msg.fencing_token)
        if att.phase == "running":
            self._busy -= 1
            if self._ready:
                self._start_ready()
        att.phase = "ended"

    async def _run_attempt(self, att: Held, started: tuple[Call, asyncio.Future, int] | None) -> None:
        a = att.msg
        try:
            if att.ex is None:
                now = self.now_ms()
                out = Outcome(state=executors.FAILED, started_ms=now, ended_ms=now,
                              error="invalid handler_json in the assignment")
            else:
                try:
                    out = await executors.execute(att.ex, cancel=att.cancel,
                                                  python_handlers=self.python_handlers,
                                                  kill_grace_s=self.kill_grace_s, now_ms=self.now_ms,
                                                  http=self.http, isolation=self.isolation,
                                                  started=started, kinds=self._kinds)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # execute should never raise; be safe
                    log.exception("executor raised on %s", a.execution_id)
                    now = self.now_ms()
                    out = Outcome(state=executors.FAILED, started_ms=now, ended_ms=now,
                                  error=f"internal error in the worker: {type(e).__name__}: {e}")
            self._finish(att, out)
        finally:
            self._forget(att)

    def _finish(self, att: Held, out: Outcome) -> None:
        """The attempt ended: report its outcome (the caller frees its slot: `_forget`)."""
        a = att.msg
        token = a.fencing_token
        self._events.ended(self.name, a, out.state)
        # one line per attempt at INFO only when it did not succeed: a herd of 100,000
        # would otherwise spend seconds of the worker's loop formatting log lines
        log.log(logging.DEBUG if out.state == executors.SUCCEEDED else logging.INFO,
                "%s (token %d) ended %s%s", a.execution_id, token, out.state,
                f": {out.error}" if out.error else "")
        self.hooks.after_effect(token, a.job, a.scheduled_ms)     # fault suite S03 only
        self._report(pb.AttemptResult(
            execution_id=a.execution_id, fencing_token=token, state=out.state,
            exit_code=out.exit_code or 0, http_status=out.http_status or 0, error=out.error,
            output_tail=out.output_tail, started_ms=out.started_ms, ended_ms=out.ended_ms))
