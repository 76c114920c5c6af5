"""The leader's SLA detector: find executions past their deadline without success, record each
miss through the log (entry kind ``sla``, rid ``sla-<execution id>#<log index that recorded it>``,
so it applies once, and a job created again under a deleted one's name has misses of its own), count it
and POST it to the job's webhook. (A deposed leader's proposal under that rid that commits after
the new epoch is refused as stale and not remembered under the rid, so the new leader's proposal
still applies. Apply records at most one miss per execution whatever the rid.) Rules and index:
`schedd.core.sla`.

`due_misses(state, now)` is pure: it reads the due index (O(due), not O(executions)) and says which
misses to record. `SlaDriver.step(now)` runs in the dispatcher's leader step (only while this node
leads its epoch) and proposes them; the webhook is posted off the event loop thread, after the
entry applied on this leader, at most once per miss per leader process. A proposal whose fate is
unknown is asked again with the same rid: the dedup table answers with the first result, and the
POST goes out then. Best effort: a leader that dies between the commit and the POST loses that
POST (the event on the run stays); a refused stale-term proposal is left to the next leader.

It works on any execution in the index, so DAG tasks with an SLA are covered by `sla.watch`.
DAG runs with an SLA are in the same index (``dag/<dag>`` entries): a run's miss is proposed under
rid ``sla-dag/<run id>``, counted under the DAG's name, and POSTed with ``dag`` and ``run_id``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from collections.abc import Callable

from schedd.core import commands as C
from schedd.core import schedule as sched
from schedd.core.model import execution_id
from schedd.core.naming import run_id
from schedd.core.rows import DagRun
from schedd.core.results import DagSlaMissRecorded, SlaMissRecorded
from schedd.core.view import StateView, Viewable, as_view
from schedd_client.net.outbound import checked_connection, request_path
from schedd_client.net.policy import NetPolicy
from schedd.replication.node import ProposalError

log = logging.getLogger("schedd.sla")

PROPOSE_TIMEOUT_S = 5.0
WEBHOOK_TIMEOUT_S = 5.0
MAX_PER_STEP = 200            # misses proposed per step, at most
MAX_SCAN = 2_000              # due index entries looked at per step, at most
COLLECT_PER_STEP = 1_000      # settled entries the leader drops from the index per step, at most
MAX_INFLIGHT = 400
RETRY_AFTER_MS = 2_000        # a refused or unconfirmed proposal is tried again after this
POSTED_MEMORY = 10_000


@dataclass(slots=True, frozen=True)
class Miss:
    job: str
    scheduled_ms: int
    deadline_ms: int
    state: str
    message: str                  # why, at detection time (apply writes its own verdict)
    sla: str                      # "within 2s", "by 06:00 Europe/Berlin"
    webhook: str
    dag: str = ""                 # a DAG run's miss: the DAG (then job = the DAG, scheduled_ms = logical)
    created: int = 0              # an execution's: the log index that recorded it (its incarnation)

    @property
    def execution_id(self) -> str:
        """The execution's id, or the DAG run's."""
        return run_id(self.dag, self.scheduled_ms) if self.dag else execution_id(self.job, self.scheduled_ms)

    @property
    def rid(self) -> str:
        return f"sla-dag/{self.execution_id}" if self.dag else f"sla-{self.execution_id}#{self.created}"

    def entry_args(self) -> dict:
        """What the ``sla`` entry carries beside the target and deadline."""
        return {} if self.dag else {"created": self.created}


def due_misses(state: Viewable, now: int, limit: int = MAX_PER_STEP,
               scan: int = MAX_SCAN) -> list[Miss]:
    """Misses to record at `now`: executions in the due index whose deadline passed and that
    have not SUCCEEDED by it, oldest deadline first; at most `limit`, looking at no more than
    `scan` entries. Pure (the caller holds the state lock)."""
    view = as_view(state)
    out: list[Miss] = []
    for i, (deadline, name, t) in enumerate(view.sla_due(now)):
        if i >= scan:
            break
        ex, judge = view.sla_target(name, t)
        if ex is None:
            continue
        code, why = judge(ex, deadline, now)
        if code != "missed":
            continue
        if isinstance(ex, DagRun):         # core.sla.target pairs a DAG run with run_verdict
            dag = view.dag(ex.dag)
            sla = view.dag_sla(dag) if dag is not None else None
            out.append(Miss(ex.dag, t, deadline, ex.state, why, sla.describe() if sla else "",
                            sla.webhook if sla else "", dag=ex.dag))
            if len(out) >= limit:
                break
            continue
        job = view.job(name)
        sla = view.job_sla(job) if job is not None else None
        out.append(Miss(name, t, deadline, ex.state, why, sla.describe() if sla else "",
                        sla.webhook if sla else "", created=ex.log_index))
        if len(out) >= limit:
            break
    return out


def webhook_payload(miss: Miss, recorded: SlaMissRecorded | DagSlaMissRecorded | None) -> dict:
    """The JSON POSTed for a miss, with the state and message apply recorded (`recorded`; None:
    the miss as the leader found it); a DAG run's adds ``dag`` and ``run_id`` (job = the DAG,
    execution_id = the run id, scheduled_time = its logical time)."""
    out = {"job": miss.job, "execution_id": miss.execution_id,
           "scheduled_time": sched.format_ms(miss.scheduled_ms),
           "deadline": sched.format_ms(miss.deadline_ms),
           "state": recorded.state if recorded is not None else miss.state,
           "message": recorded.message if recorded is not None else miss.message}
    if miss.dag:
        out.update(dag=miss.dag, run_id=miss.execution_id)
    return out


def post_json(url: str, payload: dict, timeout: float = WEBHOOK_TIMEOUT_S, key: str = "", *,
              policy: NetPolicy = NetPolicy()) -> int:
    """POST `payload` as JSON (blocking: run it in a thread). Returns the HTTP status. `key` is
    the Idempotency-Key (default ``sla-<execution_id>``). The target must pass `policy` (the
    node's [webhooks] config; schedd_client.net.outbound raises Refused otherwise); a redirect is not
    followed (its 3xx status is returned) and the answer's body is not read."""
    conn = checked_connection(policy, url, timeout=timeout)
    try:
        conn.request("POST", request_path(url), body=json.dumps(payload).encode(),
                     headers={"Content-Type": "application/json", "User-Agent": "schedd-sla/1",
                              "Idempotency-Key": key or f"sla-{payload['execution_id']}"})
        return conn.getresponse().status
    finally:
        conn.close()


class SlaDriver:
    """The dispatcher's collaborator for SLA misses: stepped from its leader step."""

    def __init__(self, node, clock, metrics, spawn: Callable, *,
                 webhooks: NetPolicy = NetPolicy(), view: StateView | None = None) -> None:
        self.node, self.clock, self.metrics, self.spawn = node, clock, metrics, spawn
        self.view = view if view is not None else StateView(node.state)
        self.webhooks = webhooks             # where webhooks may go (the node's [webhooks])
        self.inflight: set[str] = set()
        self.retry_at: dict[str, int] = {}
        self.posted: OrderedDict[str, None] = OrderedDict()
        self.unconfirmed: dict[str, Miss] = {}   # proposals of unknown fate: asked again (same rid)

    def step(self, now: int) -> None:
        view = self.view
        if len(self.inflight) >= MAX_INFLIGHT or not (view.sla_watched() or self.unconfirmed):
            return
        with self.node.lock:
            view.collect_sla(now, COLLECT_PER_STEP)   # settled entries out of the way
            misses = due_misses(view, now)
        for miss in misses + list(self.unconfirmed.values()):
            rid = miss.rid
            if rid in self.inflight or self.retry_at.get(rid, 0) > now:
                continue
            self.inflight.add(rid)
            # the epoch of the decision, read now (see Assigner.step), not node.term later
            self.spawn(self._record(miss, rid, view.epoch))

    async def _record(self, miss: Miss, rid: str, term: int) -> None:
        target = ({"dag": miss.dag, "logical_ms": miss.scheduled_ms} if miss.dag
                  else {"job": miss.job, "scheduled_ms": miss.scheduled_ms, **miss.entry_args()})
        entry = C.encode(C.SLA, rid=rid, now=self.clock.now_ms(), term=term,
                         by=self.node.cfg.node_id, deadline_ms=miss.deadline_ms, sla=miss.sla, **target)
        try:
            result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
        except ProposalError as e:
            log.info("sla miss of %s not confirmed: %s", miss.execution_id, e)
            self.retry_at[rid] = self.clock.now_ms() + RETRY_AFTER_MS
            if len(self.unconfirmed) < MAX_INFLIGHT:
                self.unconfirmed[rid] = miss
            return
        finally:
            self.inflight.discard(rid)
        self.unconfirmed.pop(rid, None)
        if not result.ok:
            self.retry_at[rid] = self.clock.now_ms() + RETRY_AFTER_MS
            if len(self.retry_at) > POSTED_MEMORY:
                self.retry_at.clear()
            return
        self.retry_at.pop(rid, None)
        if rid in self.posted:        # a retried proposal answered from the dedup table
            return
        self.posted[rid] = None
        while len(self.posted) > POSTED_MEMORY:
            self.posted.popitem(last=False)
        recorded = result.payload if isinstance(result.payload, (SlaMissRecorded, DagSlaMissRecorded)) else None
        log.warning("SLA missed: %s", recorded.message if recorded is not None else miss.message)
        self.metrics.sla_missed.labels(miss.job).inc()
        if miss.webhook:
            payload = webhook_payload(miss, recorded)
            try:
                status = await asyncio.to_thread(post_json, miss.webhook, payload, WEBHOOK_TIMEOUT_S,
                                                 rid, policy=self.webhooks)
                if 300 <= status < 400:
                    log.warning("sla webhook %s for %s: HTTP %s, a redirect (not followed)",
                                miss.webhook, miss.execution_id, status)
                else:
                    log.info("sla webhook %s for %s: HTTP %s", miss.webhook, miss.execution_id, status)
            except Exception as e:  # noqa: BLE001 - best effort
                log.warning("sla webhook %s for %s failed: %s", miss.webhook, miss.execution_id, e)

