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

Run logs
    With a log folder (`logs`: schedd_worker.run_logs) the hello says `serves_logs`; the leader
    then asks for an attempt's log on this stream (LeaderMessage.log_request) and each request is
    answered by one WorkerMessage.log_page, in a task of its own (a follower's long poll waits
    there for more output or the attempt's end). Nothing else depends on it: a request for an
    attempt it keeps no log of is answered with why (LogPage.missing).

Connection loss
    Never stops running attempts: they report after the reconnect (the leader grants running
    attempts one lease period of grace to come back).

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
from collections.abc import Callable, Mapping, Sequence

from schedd_proto import logs_pb2 as lpb
from schedd_proto import scheduler_pb2 as pb
from schedd_client.channels import Security, env_token, with_files
from schedd_worker import executors
from schedd_worker.admission import Verdict, admit
from schedd_worker.attempt import RunSettings
from schedd_worker.executors import NO_ISOLATION, HttpOptions, Isolation, PythonHandlers
from schedd_worker.giving_up import FINAL_ACK_TIMEOUT_S, Drain, self_fence
from schedd_worker.handlers.container import ContainerConfig
from schedd_worker.handlers.container_broker import ContainerBroker
from schedd_worker.hooks import NO_HOOKS, WorkerHooks
from schedd_worker.leader_link import DEFAULT_LEASE_MS, LeaderLink
from schedd_worker.ledger import Ledger
from schedd_worker.reports import REJECTED, RESULT_HOLD_S, Reports
from schedd_worker.run_logs import LogStore
from schedd_worker.session import Session
from schedd_worker.slots import Slots
from schedd_worker.starts import Starts, wall_ms
from schedd_worker.stream_errors import CredentialRefused
from schedd_worker.timers import DEFAULT_AHEAD

log = logging.getLogger("schedd.worker")

__all__ = ["WorkerRuntime", "REJECTED", "DEFAULT_LEASE_MS", "version", "CredentialRefused"]


def version() -> str:
    try:
        from importlib.metadata import version as _v
        return _v("schedd")
    except Exception:  # noqa: BLE001 - not installed: a source checkout
        return "dev"


class WorkerRuntime:
    """The worker process, composed: the link to the leader (`leader_link`), what it reports
    (`reports`), when attempts start (`starts`, over `slots` and `attempt`), whether it takes
    an assignment (`admission`), and how it gives attempts up (`giving_up`). What is held and
    owed is the one `Ledger` they share. This class only wires them and routes the leader's
    messages."""

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
        self._events = hooks.events                # the fault suite's history (does nothing otherwise)
        self.result_hold_s = result_hold_s
        self.incarnation = uuid.uuid4().hex     # names this process: the leader records it in claims
        self.draining = False
        self._hurry = asyncio.Event()

        self._ledger = Ledger()                    # what it holds and what it owes the leader
        self._link = LeaderLink(self.cluster, name=name, security=self.security, hooks=hooks, user=self,
                                warn_at_once=warn_at_once)
        self._slots = Slots(self.slots, lambda: self._link.lease_ms)
        self._reports = Reports(name, self._ledger, self._link, self._events, now_ms,
                                draining=lambda: self.draining, waiting=self._slots.waiting,
                                hold_s=result_hold_s)
        kinds = executors.handlers_for(python_handlers, http, isolation, containers)   # built once
        self.logs = logs                           # run logs (None: only the tail in the result)
        self._log_reads: set[asyncio.Task[None]] = set()
        self._run = RunSettings(name, python_handlers, self.kill_grace_s, now_ms, http, isolation, kinds, hooks,
                                logs)
        self._starts = Starts(self._run, ledger=self._ledger, slots=self._slots, reports=self._reports)

    # ------------------------------------------------------------ public

    @property
    def running(self) -> dict[int, str]:
        """token -> execution id of every attempt accepted and not ended (introspection)."""
        return self._ledger.running()

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
        starts = self._starts
        starts.gc.install()
        if self.logs is not None:
            self.logs.sweep_soon()               # what aged out while the worker was down
        loop_task = asyncio.create_task(self._link.run(), name=f"worker-{self.name}-conn")
        fence = asyncio.create_task(self_fence(self.name, self._link, self._ledger, starts),
                                    name=f"worker-{self.name}-fence")
        stop_wait = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({stop_wait, loop_task}, return_when=asyncio.FIRST_COMPLETED)
            if loop_task.done():                 # a refused credential; else a bug, surfaced
                loop_task.result()
                raise RuntimeError("worker connection loop ended unexpectedly")
            self.draining = True
            await Drain(self.name, self._ledger, starts, self._reports, self.drain_grace_s,
                        self.kill_grace_s, self._hurry, self.final_ack_s).run()
        finally:
            starts.timer.close()
            stop_wait.cancel()
            fence.cancel()
            for reading in list(self._log_reads):
                reading.cancel()
            await self._link.close()
            if not loop_task.done():
                loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
            for a in list(self._ledger.attempts()):
                starts.runner.escalate(a)        # a task of its own, which stops the handler
            leftovers = [a.task for a in self._ledger.held.values() if a.task and not a.task.done()]
            for t in leftovers:                  # only when run() itself is cancelled
                t.cancel()
            if leftovers:
                await asyncio.gather(*leftovers, return_exceptions=True)
            self._link.connected = False
            starts.gc.uninstall()
            log.info("worker %s stopped", self.name)

    # ------------------------------------------------------------ the link's user (LinkUser)

    def hello(self) -> pb.WorkerMessage:
        return pb.WorkerMessage(hello=pb.WorkerHello(
            name=self.name, slots=self.slots, pool=self.pool, labels=self.labels,
            running_tokens=sorted(self._ledger.held), version=self.version,
            max_term_seen=self._link.max_term_seen, incarnation=self.incarnation, batches=True,
            ahead=self.ahead, counts_reads=True, handlers=sorted(self._run.kinds),
            serves_logs=self.logs is not None))

    def welcomed(self, session: Session) -> None:
        log.info("worker %s connected to leader %s at %s (term %d, lease %d ms; %d running, "
                 "%d results to resend)", self.name, session.leader_id or "?", session.address, session.term,
                 session.lease_ms, len(self._ledger.held), len(self._ledger.owed))
        self._reports.resend_all()
        if self.draining:
            self._reports.heartbeat()

    def tick(self, session: Session) -> None:
        """Every lease / 3 while connected."""
        self._starts.hand_back_overdue()
        self._reports.heartbeat()
        self._starts.quiet_gc()
        self._reports.resend_unsettled(session.lease_ms)

    def handle(self, msg: pb.LeaderMessage) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "batch":                       # one level only (Session.reader unpacks the batch)
            log.debug("ignoring a batch inside a batch")
        elif kind == "assignment":
            self._on_assignment(msg.assignment)
        elif kind == "cancel":
            self._starts.cancel(msg.cancel)
        elif kind == "ack":
            self._reports.acked(msg.ack)
        elif kind == "welcome":                   # a second Welcome: the leader's term moved on
            self._link.rewelcomed(msg.welcome.term)
        elif kind == "log_request":
            self._read_log(msg.log_request)
        else:
            log.debug("ignoring leader message %r", kind)

    def _read_log(self, req: lpb.LogRequest) -> None:
        """Answer the leader's request for a run log, in a task (a long poll may wait)."""
        if self.logs is None:
            self._link.send(pb.WorkerMessage(log_page=lpb.LogPage(
                request_id=req.request_id, missing="it keeps no run logs")))
            return
        task = asyncio.create_task(self._answer_log(self.logs, req), name=f"log-{req.fencing_token}")
        self._log_reads.add(task)
        task.add_done_callback(self._log_reads.discard)

    async def _answer_log(self, logs: LogStore, req: lpb.LogRequest) -> None:
        try:
            page = await logs.answer(req)
        except OSError as e:
            page = lpb.LogPage(request_id=req.request_id, missing=f"it cannot read the log: {e}")
        self._link.send(pb.WorkerMessage(log_page=page))

    def _on_assignment(self, a: pb.Assignment) -> None:
        token = a.fencing_token
        self._events.received(self.name, a)
        ledger = self._ledger
        v = admit(a, max_term_seen=self._link.max_term_seen, held=ledger.held, owed=ledger.owed,
                  draining=self.draining, holding=len(ledger.held), capacity=self.slots + self.ahead)
        self._link.saw_term(a.term)
        if v.verdict is Verdict.REJECT:
            self._reports.reject(a, v.why)
        elif v.verdict is Verdict.RUNNING:
            log.info("duplicate assignment of %s (token %d): already running", a.execution_id, token)
        elif v.verdict is Verdict.FINISHED:
            log.info("duplicate assignment of %s (token %d): already finished; resending its result",
                     a.execution_id, token)
            self._reports.send_result(token)
        else:
            self._starts.accept(a)
