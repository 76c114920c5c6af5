"""The worker process: one stream to the Raft leader (per shard), assignments run within a slot count.

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
    resends every unacknowledged result (oldest first), then heartbeats at once (a leader
    expires as never started what it pushed on an earlier stream of this process that the hello
    and the resends leave out) and every lease_ms / 3
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

Run logs
    With a log folder (`logs`: schedd_worker.run_logs) the hello says `serves_logs`; the leader
    then asks for an attempt's log on this stream (LeaderMessage.log_request) and each request is
    answered by one WorkerMessage.log_page, in a task of its own (a follower's long poll waits
    there for more output or the attempt's end). Nothing else depends on it: a request for an
    attempt it keeps no log of is answered with why (LogPage.missing).

Connection loss
    Never stops running attempts: they report after the reconnect (the leader grants running
    attempts one lease period of grace to come back).

Shards
    A sharded cluster has S Raft groups (schedd/core/shards.py), each with its own leader,
    dispatcher and fencing tokens (two shards may assign the same token number). A Welcome that
    says `shards` = S > 1 makes the worker serve every shard: one lane per shard
    (`schedd_worker.lanes`: its own link, leader search, ledger, newest term, results, heartbeats
    and messages_read), lanes 1..S-1 started at once and kept until the process stops (the count
    only grows). Shard k's link sends the metadata `x-schedd-shard: k` on its Connect (a node
    routes it to its replica of shard k, which redirects to shard k's leader as a follower does
    today) and on its probes; shard 0's sends none. A node answers the NodeInfo probe about
    its replica of the shard named, so each lane's search and watch follow its own shard's
    leader and terms (`leader_link`: terms of different groups never compare). Everything
    above holds per lane, towards that shard's leader. Once sharded, a lane's stream is a
    sub-stream of the worker's one `Workers.ConnectNode` stream to its leader's node
    (`schedd_worker.node_streams`: one stream per node, whatever S), read and ended as a
    Connect; a node answering UNIMPLEMENTED gets a Connect per shard. A Welcome that says 0 or 1 (an unsharded cluster, an older server) changes
    nothing: one lane, no metadata, every slot offered, as before shards.
    What is per process is shared: the executors, the log folder, the pool of slots, the drain
    (every lane drains at once, with one grace) and the name and incarnation (each shard's
    leader keeps its own registry, so one name serves them all).

Slots across shards: split, not offered to every leader
    Shard k's hello offers its share of the slots (slots // S, the remainder to `slots % S`
    shards counted from one picked by the worker's name, so a fleet does not give every
    remainder to shard 0; at least one each, since a leader refuses a hello without a slot), and
    that shard's admission takes at most share + ahead of its attempts (REJECTED "no free slot"
    beyond, as today). Why: a leader knows a worker's free capacity only from the hello's slots
    minus what it assigned itself (WorkerHello.slots is fixed for the stream, a heartbeat carries
    no capacity), so a split keeps every leader's view exact: no assignment is refused because of
    another shard's work, and no shard can fill the worker and starve the others. Offering every
    leader all the slots and refusing the excess would make each leader assign up to all of
    them, and under load every refusal would cost a claim, a REJECTED result (two log entries)
    and a round trip, while the shard that pushes first took the worker. The cost: a shard
    with no work leaves its share idle; the shards are equal hash ranges of the job names, so
    their loads are alike across a fleet. One pool (`slots.SlotPool`) still bounds what runs at
    once to `slots` whatever the shares: it binds only when the shares add up to more (fewer
    slots than shards) or for a while after a split lowered a share below what runs; what falls
    due meanwhile waits here as when every slot is busy (an attempt with a timeout at most half a
    lease, then handed back) and starts as soon as any shard frees a slot, the shard whose
    attempt waited longest first. The leader search's NodeInfo answers say S
    (NodeStatus.shards), so shard 0's first hello already offers its share and the other lanes
    start before it (`leader_link`: a second hello lost what the first stream was being given).
    When only a Welcome says S > 1 (nodes that answer only Cluster.Status, or a split), shard 0's
    stream is ended and opened again at once with the share (the hello lists what it holds).

Drain (`stop` set)
    Heartbeat(draining=True) at once; new assignments are REJECTED; accepted attempts still
    waiting for their due time are handed back as REJECTED "worker draining" (the leader requeues
    them without counting an attempt); running ones get `drain_grace_s` to finish, then are
    cancelled (their CANCELLED outcome is reported). Once every result is acknowledged, or after
    `final_ack_s` (FINAL_ACK_TIMEOUT_S), the worker half-closes the stream and `run` returns.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import zlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from schedd_client.channels import Security, env_token, with_files
from schedd_worker import executors
from schedd_worker.attempt import RunSettings
from schedd_worker.executors import NO_ISOLATION, HttpOptions, Isolation, PythonHandlers
from schedd_worker.giving_up import FINAL_ACK_TIMEOUT_S, Drain, self_fence
from schedd_worker.lanes import ShardLane
from schedd_worker.handlers.container import ContainerConfig
from schedd_worker.handlers.container_broker import ContainerBroker
from schedd_worker.hooks import NO_HOOKS, WorkerHooks
from schedd_worker.leader_link import DEFAULT_LEASE_MS, LeaderLink
from schedd_worker.ledger import Ledger
from schedd_worker.node_streams import NodeStreams
from schedd_worker.reports import REJECTED, RESULT_HOLD_S, Reports
from schedd_worker.run_logs import LogStore
from schedd_worker.slots import SlotPool, Slots
from schedd_worker.starts import Starts, wall_ms
from schedd_worker.stream_errors import CredentialRefused
from schedd_worker.timers import DEFAULT_AHEAD, QuietCollector

log = logging.getLogger("schedd.worker")

__all__ = ["WorkerRuntime", "REJECTED", "DEFAULT_LEASE_MS", "version", "CredentialRefused", "slot_shares"]


def version() -> str:
    try:
        from importlib.metadata import version as _v
        return _v("schedd")
    except Exception:  # noqa: BLE001 - not installed: a source checkout
        return "dev"


class WorkerRuntime:
    """The worker process, composed: one lane per shard (`lanes`: the link to that shard's
    leader, what it reports, when its attempts start, whether it takes an assignment, over the
    one `Ledger` of what it holds and owes that leader), the pool of slots they share, and how
    it gives attempts up (`giving_up`). This class only wires them and starts a lane per shard."""

    def __init__(self, cluster: Sequence[str], *, name: str, slots: int = 4, pool: str = "",
                 labels: Mapping[str, str] | None = None,
                 python_handlers: PythonHandlers | None = None, drain_grace_s: float = 30.0,
                 kill_grace_s: float = 5.0, now_ms: Callable[[], int] = wall_ms,
                 http: HttpOptions = HttpOptions(), hooks: WorkerHooks = NO_HOOKS,
                 isolation: Isolation = NO_ISOLATION, security: Security | None = None,
                 token: str | None = None, ahead: int = DEFAULT_AHEAD,
                 result_hold_s: float = RESULT_HOLD_S, containers: ContainerConfig | ContainerBroker | None = None,
                 final_ack_s: float = FINAL_ACK_TIMEOUT_S, logs: LogStore | None = None,
                 warn_at_once: bool = False) -> None:
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
        self.final_ack_s = max(0.0, float(final_ack_s))   # a drain's wait for its last acks
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
        self.result_hold_s = result_hold_s
        self.incarnation = uuid.uuid4().hex     # names this process: the leader records it in claims
        self.draining = False
        self._hurry = asyncio.Event()

        self.warn_at_once = warn_at_once
        kinds = executors.handlers_for(python_handlers, http, isolation, containers)   # built once
        self.logs = logs                           # run logs (None: only the tail in the result)
        self._log_reads: set[asyncio.Task[None]] = set()
        self.run_settings = RunSettings(name, python_handlers, self.kill_grace_s, now_ms, http, isolation,
                                        kinds, hooks, logs)
        self._pool = SlotPool(self.slots)          # the process's slots, shared by every shard
        self._gc = QuietCollector()                # full collections between due instants
        self.shards = 1                            # the shard count the Welcomes said (1: unsharded)
        self.streams = NodeStreams(self.security, hooks.dial)   # one per node, once sharded
        # shard -> its lane; shard 0 is the one every worker starts with (an unsharded cluster's)
        self.lanes: dict[int, ShardLane] = {0: self._lane(0, self.slots)}
        self._lane_tasks: dict[int, tuple[asyncio.Task[None], asyncio.Task[None]]] = {}
        self._failed: asyncio.Future[None] | None = None   # a lane's connection loop ended

    # ------------------------------------------------------------ public

    @property
    def _lane0(self) -> ShardLane:
        return self.lanes[0]

    @property
    def _link(self) -> LeaderLink:
        return self.lanes[0].link

    @property
    def _ledger(self) -> Ledger:
        return self.lanes[0].ledger

    @property
    def _slots(self) -> Slots:
        return self.lanes[0].slots

    @property
    def _reports(self) -> Reports:
        return self.lanes[0].reports

    @property
    def _starts(self) -> Starts:
        return self.lanes[0].starts

    @property
    def running(self) -> dict[int, str]:
        """token -> execution id of every attempt accepted and not ended (introspection; the
        tokens of shard 0, the only shard of an unsharded cluster: see `running_by_shard`)."""
        return self._ledger.running()

    @property
    def running_by_shard(self) -> dict[int, dict[int, str]]:
        """shard -> token -> execution id (two shards' tokens may be equal numbers)."""
        return {k: lane.ledger.running() for k, lane in self.lanes.items()}

    @property
    def busy(self) -> int:
        """Attempts running now, every shard's (at most `slots`)."""
        return self._pool.busy

    @property
    def connected(self) -> bool:
        return self._link.connected

    @property
    def leader_address(self) -> str | None:
        return self._link.leader_address

    @property
    def connections(self) -> int:
        """Welcomes received so far."""
        return self._link.connections

    @property
    def max_term_seen(self) -> int:
        return self._link.max_term_seen

    def hurry(self) -> None:
        """During a drain: stop waiting for running attempts, cancel them now (a second SIGTERM)."""
        self._hurry.set()

    async def run(self, stop: asyncio.Event) -> None:
        self._gc.install()
        if self.logs is not None:
            self.logs.sweep_soon()               # what aged out while the worker was down
        self._failed = asyncio.get_running_loop().create_future()
        for k in list(self.lanes):
            self._start_lane(k)
        stop_wait: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({stop_wait, self._failed}, return_when=asyncio.FIRST_COMPLETED)
            if self._failed.done():              # a refused credential; else a bug, surfaced
                self._failed.result()
                raise RuntimeError("worker connection loop ended unexpectedly")
            self.draining = True
            lanes = list(self.lanes.values())    # every shard drains at once (one grace for all)
            await asyncio.gather(*(Drain(self.name, lane.ledger, lane.starts, lane.reports, self.drain_grace_s,
                                         self.kill_grace_s, self._hurry, self.final_ack_s).run()
                                   for lane in lanes))
        finally:
            stop_wait.cancel()
            await self._stop_lanes()
            if self._failed.done() and not self._failed.cancelled():
                self._failed.exception()         # a lane failed while draining: stopping anyway
            self._gc.uninstall()
            log.info("worker %s stopped", self.name)

    async def _stop_lanes(self) -> None:
        lanes = list(self.lanes.values())
        for lane in lanes:
            lane.starts.timer.close()
        for _loop, fence in self._lane_tasks.values():
            fence.cancel()
        for reading in list(self._log_reads):
            reading.cancel()
        await asyncio.gather(*(lane.link.close() for lane in lanes))
        loops = [t for t, _ in self._lane_tasks.values()]
        for t in loops:
            if not t.done():
                t.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await self.streams.close()
        for lane in lanes:
            for a in list(lane.ledger.attempts()):
                lane.starts.runner.escalate(a)   # a task of its own, which stops the handler
        leftovers: list[asyncio.Future[Any]] = [a.task for lane in lanes for a in lane.ledger.held.values()
                                                if a.task and not a.task.done()]
        for left in leftovers:                   # only when run() itself is cancelled
            left.cancel()
        if leftovers:
            await asyncio.gather(*leftovers, return_exceptions=True)
        for lane in lanes:
            lane.link.connected = False

    # ------------------------------------------------------------ shards

    def _lane(self, shard: int, share: int) -> ShardLane:
        return ShardLane(self, shard, share, pool=self._pool, run=self.run_settings, gc=self._gc,
                         warn_at_once=self.warn_at_once)

    def _start_lane(self, shard: int) -> None:
        """Run the lane's connection loop and its self-fence until the process stops."""
        lane = self.lanes[shard]
        loop_task = asyncio.create_task(lane.link.run(), name=f"worker-{self.name}-conn"
                                        + (f"-{shard}" if shard else ""))
        fence = asyncio.create_task(self_fence(self.name, lane.link, lane.ledger, lane.starts),
                                    name=f"worker-{self.name}-fence" + (f"-{shard}" if shard else ""))
        loop_task.add_done_callback(self._loop_ended)
        self._lane_tasks[shard] = (loop_task, fence)

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        failed = self._failed
        if failed is None or failed.done() or task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            failed.set_exception(exc)
        else:
            failed.set_result(None)

    def shards_seen(self, shards: int) -> None:
        """A Welcome said the cluster has `shards` shard groups: serve each of them, with a
        share of the slots. The count only grows (a split); lanes are kept until the process
        stops. 0 or 1 (an unsharded cluster, an older server) changes nothing."""
        if shards <= self.shards or self.draining:
            return
        log.info("worker %s: the cluster has %d shards; serving each with its share of %d slots",
                 self.name, shards, self.slots)
        if self.slots < shards:
            log.warning("worker %s has %d slots for %d shards: each shard's leader is offered one "
                        "slot and at most %d attempts run at once; what falls due meanwhile waits here",
                        self.name, self.slots, shards, self.slots)
        self.shards = shards
        shares = slot_shares(self.slots, shards, self.name)
        self._lane0.link.tag = " of shard 0"      # its log lines say which shard, as the others'
        for k in range(shards):
            lane = self.lanes.get(k)
            if lane is None:
                self.lanes[k] = self._lane(k, shares[k])
                if self._failed is not None:     # running: connect it now
                    self._start_lane(k)
            else:
                lane.reshare(shares[k])

    def node_streams(self) -> NodeStreams | None:
        """The streams the lanes' sub-streams share, once a Welcome said the cluster is sharded:
        an unsharded cluster's one lane keeps its Connect stream, exactly as before shards."""
        return self.streams if self.shards > 1 else None

    def read_log(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """A lane answers a log request in a task of its own (cancelled when the process stops)."""
        task = asyncio.create_task(coro, name=name)
        self._log_reads.add(task)
        task.add_done_callback(self._log_reads.discard)


def slot_shares(slots: int, shards: int, name: str) -> list[int]:
    """Each shard's share of `slots`: equal parts, the remainder to `slots % shards` shards
    starting at one picked by the worker's name (so that a fleet of workers does not give every
    remainder to shard 0), and at least one each (the leaders refuse a hello without a slot: a
    worker with fewer slots than shards lets the pool bound what runs at once)."""
    if shards <= 1:
        return [slots]
    base, rem = divmod(slots, shards)
    first = zlib.crc32(name.encode()) % shards
    return [max(1, base + (1 if (k - first) % shards < rem else 0)) for k in range(shards)]
