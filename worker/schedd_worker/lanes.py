"""One shard group's side of the worker: its link to that shard's leader and what it owes it.

Why separate: a sharded cluster has one Raft group, one leader and one dispatcher per shard,
and each leader assigns fencing tokens from its own log (two shards may assign the same number).
So what a leader counts on must be kept per shard: the tokens held and the results owed (the
`Ledger`), the newest term seen (the link's), the stream results go back on, the hello's slot
count (the shard's share), its heartbeats and their `messages_read`. What the process has once
(the executors, the pool of slots, the log folder, the drain flag) stays the runtime's
(`schedd_worker.runtime`), which holds one lane per shard and shares those with each.

An unsharded cluster is one lane, shard 0, whose link sends no shard metadata: the worker is
exactly what it was before shards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from schedd_client.channels import Security

from schedd_proto import logs_pb2 as lpb
from schedd_proto import scheduler_pb2 as pb
from schedd_worker.admission import Verdict, admit
from schedd_worker.attempt import RunSettings
from schedd_worker.hooks import WorkerHooks
from schedd_worker.leader_link import LeaderLink
from schedd_worker.run_logs import LogStore
from schedd_worker.ledger import Ledger
from schedd_worker.node_streams import NodeStreams
from schedd_worker.reports import Reports
from schedd_worker.session import Session
from schedd_worker.slots import SlotPool, Slots
from schedd_worker.starts import Starts
from schedd_worker.timers import QuietCollector

__all__ = ["ShardLane", "Process"]

log = logging.getLogger("schedd.worker")


class Process(Protocol):
    """What every lane shares: the process's identity, settings and drain flag (the runtime)."""

    @property
    def cluster(self) -> Sequence[str]: ...

    @property
    def name(self) -> str: ...

    @property
    def pool(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def version(self) -> str: ...

    @property
    def incarnation(self) -> str: ...

    @property
    def ahead(self) -> int: ...

    @property
    def slots(self) -> int: ...              # the process's slots, every shard's together

    @property
    def shards(self) -> int: ...             # the shard count the Welcomes said (1: unsharded)

    @property
    def draining(self) -> bool: ...

    @property
    def security(self) -> Security: ...

    @property
    def hooks(self) -> WorkerHooks: ...

    @property
    def now_ms(self) -> Callable[[], int]: ...

    @property
    def result_hold_s(self) -> float: ...

    @property
    def run_settings(self) -> RunSettings: ...

    @property
    def logs(self) -> LogStore | None: ...

    def shards_seen(self, shards: int) -> None: ...

    def node_streams(self) -> NodeStreams | None: ...

    def read_log(self, coro: Coroutine[Any, Any, None], name: str) -> None: ...


class ShardLane:
    """Shard `shard`'s link, ledger, slots (its share of the pool), reports and starts; the
    link's user (`LinkUser`): it makes the hello and routes what that shard's leader sends."""

    def __init__(self, rt: Process, shard: int, share: int, *, pool: SlotPool, run: RunSettings,
                 gc: QuietCollector, warn_at_once: bool) -> None:
        self.rt = rt
        self.shard = shard
        self.ledger = Ledger()                   # what it holds and owes this shard's leader
        self.link = LeaderLink(rt.cluster, name=rt.name, security=rt.security, hooks=rt.hooks, user=self,
                               warn_at_once=warn_at_once, shard=shard, streams=rt.node_streams,
                               sharded=rt.shards_seen)
        if shard:
            self.link.tag = f" of shard {shard}"
        self.slots = Slots(share, lambda: self.link.lease_ms, pool=pool)
        self.reports = Reports(rt.name, self.ledger, self.link, rt.hooks.events, rt.now_ms,
                               draining=lambda: rt.draining, waiting=self.slots.waiting,
                               hold_s=rt.result_hold_s)
        self.starts = Starts(run, ledger=self.ledger, slots=self.slots, reports=self.reports, gc=gc)
        self.hello_slots = 0                     # the slot count the current stream's hello said

    def reshare(self, share: int) -> None:
        """The shard's share of the slots changed (the shard count did): hello again with it."""
        self.slots.count = share
        if self.link.session is not None and self.hello_slots != share:
            self.link.rehello(f"this shard's share of the slots is now {share}")

    # ------------------------------------------------------------ the link's user (LinkUser)

    def hello(self) -> pb.WorkerMessage:
        rt = self.rt
        self.hello_slots = self.slots.count
        return pb.WorkerMessage(hello=pb.WorkerHello(
            name=rt.name, slots=self.slots.count, pool=rt.pool, labels=rt.labels,
            running_tokens=sorted(self.ledger.held), version=rt.version,
            max_term_seen=self.link.max_term_seen, incarnation=rt.incarnation, batches=True,
            ahead=rt.ahead, counts_reads=True, handlers=sorted(rt.run_settings.kinds),
            serves_logs=rt.logs is not None, total_slots=rt.slots if rt.shards > 1 else 0))

    def welcomed(self, session: Session) -> None:
        shard = f" shard {self.shard}" if session.shards > 1 or self.shard else ""
        log.info("worker %s connected to%s leader %s at %s (term %d, lease %d ms; %d running, "
                 "%d results to resend)", self.rt.name, shard, session.leader_id or "?", session.address,
                 session.term, session.lease_ms, len(self.ledger.held), len(self.ledger.owed))
        self.rt.shards_seen(session.shards)      # may start other shards' lanes, or hello again
        self._resend_if_kept()

    def _resend_if_kept(self) -> None:
        if self.link.session is None or self.link.session.ending:
            return                               # about to hello again (a new share)
        self.reports.resend_all()
        # at once, after the resends: a leader expires at once as never started what it pushed on
        # an earlier stream of this process that this one's hello and resends leave out
        # (schedd.leader.workers `_adopt`), and a heartbeat is what tells it they are all in
        self.reports.heartbeat()

    def tick(self, session: Session) -> None:
        """Every lease / 3 while connected."""
        self.starts.hand_back_overdue()
        self.reports.heartbeat()
        self.starts.quiet_gc()
        self.reports.resend_unsettled(session.lease_ms)

    def handle(self, msg: pb.LeaderMessage) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "batch":                       # one level only (Session.reader unpacks the batch)
            log.debug("ignoring a batch inside a batch")
        elif kind == "assignment":
            self._on_assignment(msg.assignment)
        elif kind == "cancel":
            self.starts.cancel(msg.cancel)
        elif kind == "ack":
            self.reports.acked(msg.ack)
        elif kind == "welcome":                   # a second Welcome: the leader's term moved on
            self.link.rewelcomed(msg.welcome.term)
        elif kind == "log_request":
            self._read_log(msg.log_request)
        else:
            log.debug("ignoring leader message %r", kind)

    # ------------------------------------------------------------ messages

    def _read_log(self, req: lpb.LogRequest) -> None:
        """Answer the leader's request for a run log, in a task (a long poll may wait)."""
        logs = self.rt.logs
        if logs is None:
            self.link.send(pb.WorkerMessage(log_page=lpb.LogPage(
                request_id=req.request_id, missing="it keeps no run logs")))
            return
        self.rt.read_log(self._answer_log(req), name=f"log-{req.fencing_token}")

    async def _answer_log(self, req: lpb.LogRequest) -> None:
        logs = self.rt.logs
        assert logs is not None
        try:
            page = await logs.answer(req)
        except OSError as e:
            page = lpb.LogPage(request_id=req.request_id, missing=f"it cannot read the log: {e}")
        self.link.send(pb.WorkerMessage(log_page=page))

    def _on_assignment(self, a: pb.Assignment) -> None:
        token = a.fencing_token
        self.rt.hooks.events.received(self.rt.name, a)
        ledger = self.ledger
        v = admit(a, max_term_seen=self.link.max_term_seen, held=ledger.held, owed=ledger.owed,
                  draining=self.rt.draining, holding=len(ledger.held), capacity=self.slots.count + self.rt.ahead)
        self.link.saw_term(a.term)
        if v.verdict is Verdict.REJECT:
            self.reports.reject(a, v.why)
        elif v.verdict is Verdict.RUNNING:
            log.info("duplicate assignment of %s (token %d): already running", a.execution_id, token)
        elif v.verdict is Verdict.FINISHED:
            log.info("duplicate assignment of %s (token %d): already finished; resending its result",
                     a.execution_id, token)
            self.reports.send_result(token)
        else:
            self.starts.accept(a)

