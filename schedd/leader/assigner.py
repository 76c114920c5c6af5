"""The leader's execution loop: claim due executions for workers, push committed claims, commit
results, expire attempts whose workers went silent, and push cancels.

Every decision becomes a log entry before it has an effect (DESIGN.md "Firing", point 4):
- a claim (`start`) is committed before the assignment is pushed, and its log index is the
  attempt's fencing token; the worker starts it at its due time on its own clock;
- a result is committed (`finish`); apply refuses a token that is no longer current, so a zombie
  worker cannot overwrite a retry's result;
- a lost attempt is expired (`expire`) only after a lease without news, and a new leader first
  grants running attempts one lease of grace for their workers to reconnect.
The proposals carry request ids derived from the token, so a retried proposal applies once.
"""

from __future__ import annotations

import json
import logging
from typing import Callable

from schedd.core import commands as C
from schedd.core.model import RUNNING, SCHEDULED, ValidationError, execution_id, parse_execution_id
from schedd.leader.workers import WorkerConn, WorkerHub
from schedd.replication.node import ProposalError, RaftNode
from schedd.runtime.clock import Clock
from schedd.v1 import scheduler_pb2 as pb

log = logging.getLogger("schedd.assigner")

PROPOSE_TIMEOUT_S = 5.0
WORKER_KILL_GRACE_MS = 5_000     # a worker's TERM-to-KILL grace after a timeout (executors' default)
FINISH_TRIES = 3
CANCEL_RESEND_MS = 2_000
MAX_KEY = "\U0010ffff"


class Assigner:
    def __init__(self, node: RaftNode, clock: Clock, hub: WorkerHub, lookahead_ms: int,
                 spawn: Callable, metrics=None) -> None:
        self.node, self.clock, self.hub = node, clock, hub
        self.metrics = metrics
        self.lookahead_ms = lookahead_ms
        self.spawn = spawn
        self.claiming: set[tuple[str, int]] = set()
        self.expiring: set[int] = set()
        self.cancel_sent: dict[int, int] = {}
        self.waiting: dict[tuple[str, int], str] = {}
        self.took_over_ms = 0
        self._specs: dict[str, tuple[int, dict]] = {}     # job -> (version, parsed spec)
        hub.on_result = self.on_result

    def take_over(self, now: int) -> None:
        """Running attempts get one lease of grace from now for their workers to reconnect."""
        self.took_over_ms = now
        self.claiming.clear()
        self.expiring.clear()
        self.cancel_sent.clear()
        self.waiting.clear()

    def _spec(self, job) -> dict:
        """The job's parsed spec, parsed once per version: claims and the lease reaper read it
        for every candidate and running attempt, every step."""
        hit = self._specs.get(job.name)
        if hit is None or hit[0] != job.version:
            if len(self._specs) > 2 * len(self.node.state.jobs) + 1000:
                self._specs.clear()                  # forget deleted jobs
            hit = self._specs[job.name] = (job.version, job.spec_dict())
        return hit[1]

    def step(self, now: int) -> None:
        self.hub.drop_silent(now)
        self._assign(now)
        self._reap(now)

    # ------------------------------------------------------------ claims

    def _candidates(self, now: int) -> list[tuple[int, str, int, dict]]:
        """(due, job, scheduled_ms, spec) of executions that may be claimed now, oldest due first."""
        until = now + self.lookahead_ms
        st = self.node.state
        out = []
        scheduled = st.by_state.get(SCHEDULED)
        if scheduled:
            for t, name in scheduled.irange(None, (until, MAX_KEY)):
                out.append((t, name, t))
        for retry_at, name, t in st.retry_due.irange(None, (until, MAX_KEY, 2 ** 63)):
            out.append((max(retry_at, t), name, t))
        out.sort()
        result = []
        for due, name, t in out:
            job = st.jobs.get(name)
            if job is None or job.paused or (name, t) in self.claiming:
                continue
            result.append((due, name, t, self._spec(job)))
        return result

    def _assign(self, now: int) -> None:
        if not self.hub.conns:
            return
        with self.node.lock:
            candidates = self._candidates(now)
            attempts = {(name, t): len(self.node.state.execs[(name, t)].attempts) + 1
                        for _, name, t, _ in candidates}
        waiting: dict[tuple[str, int], str] = {}     # rebuilt each step: nothing stale lingers
        self.waiting = waiting
        for due, name, t, spec in candidates:
            pool, labels = spec.get("pool", ""), spec.get("worker_labels") or {}
            workers = self.hub.eligible(pool, now, labels)
            if not workers:
                where = [f"in pool {pool!r}"] if pool else []
                where += [f"with labels {','.join(f'{k}={v}' for k, v in sorted(labels.items()))}"] if labels else []
                waiting[(name, t)] = " ".join(["waiting for a free worker slot", *where])
                continue
            conn = workers[0]
            conn.reserved += 1
            self.claiming.add((name, t))
            self.spawn(self._claim(conn, name, t, attempts[(name, t)], due, spec))

    async def _claim(self, conn: WorkerConn, name: str, t: int, attempt: int, due: int, spec: dict) -> None:
        entry = C.encode(C.START, rid=f"start-{name}@{t}#{attempt}", now=self.clock.now_ms(),
                         term=self.node.term, by=self.node.cfg.node_id, job=name, scheduled_ms=t,
                         attempt=attempt, worker=conn.name)
        try:
            result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
        except ProposalError as e:
            log.info("claim of %s attempt %d not confirmed: %s", execution_id(name, t), attempt, e)
            return
        finally:
            conn.reserved -= 1
            self.claiming.discard((name, t))
        if not result.get("ok"):
            return
        token = result["token"]
        eid = execution_id(name, t)
        self.hub.token_seen[token] = self.clock.now_ms()
        if conn.closed:
            return                      # the lease expires it and it is retried
        conn.running[token] = eid
        self.hub.send(conn, pb.LeaderMessage(assignment=pb.Assignment(
            execution_id=eid, job=name, scheduled_ms=t, attempt=attempt, fencing_token=token,
            term=self.node.term, due_ms=due, handler_json=json.dumps(spec.get("handler") or {}),
            timeout_seconds=float(spec.get("timeout_seconds") or 0), labels=spec.get("labels") or {})))

    # ------------------------------------------------------------ results

    def on_result(self, conn: WorkerConn, r: pb.AttemptResult) -> None:
        conn.running.pop(r.fencing_token, None)
        self.hub.token_seen.pop(r.fencing_token, None)
        self.cancel_sent.pop(r.fencing_token, None)
        self.spawn(self._finish(conn, r))

    async def _finish(self, conn: WorkerConn, r: pb.AttemptResult) -> None:
        try:
            name, t = parse_execution_id(r.execution_id)
        except ValidationError:
            self.hub.send(conn, pb.LeaderMessage(ack=pb.ResultAck(fencing_token=r.fencing_token, outcome="stale")))
            return
        outcome = "unknown"
        for _ in range(FINISH_TRIES):
            entry = C.encode(C.FINISH, rid=f"finish-{r.fencing_token}", now=self.clock.now_ms(),
                             term=self.node.term, by=conn.name, job=name, scheduled_ms=t,
                             token=r.fencing_token, state=r.state, exit_code=r.exit_code,
                             http_status=r.http_status, error=r.error[:2048],
                             output_tail=r.output_tail[-4096:], started_ms=r.started_ms,
                             ended_ms=r.ended_ms)
            try:
                result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
            except ProposalError as e:
                log.info("result of %s not confirmed (%s); retrying", r.execution_id, e)
                continue
            if result.get("ok"):
                outcome = "committed"
            elif result.get("code") == "stale":
                outcome = "stale"
                log.warning("refused a stale result for %s from %s: %s", r.execution_id, conn.name,
                            result.get("msg"))
            else:
                outcome = result.get("code", "rejected")
            break
        if outcome != "unknown":        # unknown: the worker resends after its next reconnect
            self.hub.send(conn, pb.LeaderMessage(ack=pb.ResultAck(fencing_token=r.fencing_token, outcome=outcome)))

    # ------------------------------------------------------------ leases, timeouts, cancels

    def _reap(self, now: int) -> None:
        lease = self.hub.lease_ms
        expire: list[tuple[str, int, int, str, str]] = []
        cancels: list[tuple[int, str]] = []
        with self.node.lock:
            st = self.node.state
            for t, name in st.by_state.get(RUNNING, ()):
                ex = st.execs[(name, t)]
                a = ex.attempts[-1]
                token = a.fencing_token
                if token in self.expiring:
                    continue
                seen = max(self.hub.token_seen.get(token, 0), a.started_ms, self.took_over_ms)
                job = st.jobs.get(name)
                timeout_ms = int((self._spec(job).get("timeout_seconds") or 0) * 1000) if job else 0
                if now - seen > lease:
                    expire.append((name, t, token, "LOST",
                                   f"worker {a.worker} lost: no news for {lease / 1000:g}s"))
                elif timeout_ms and now > max(a.started_ms, t) + timeout_ms + WORKER_KILL_GRACE_MS + lease:
                    expire.append((name, t, token, "TIMED_OUT",
                                   f"exceeded its timeout of {timeout_ms / 1000:g}s and the worker did not report"))
                elif ex.cancel_requested and now - self.cancel_sent.get(token, 0) > CANCEL_RESEND_MS:
                    cancels.append((token, ex.id))
        for name, t, token, outcome, reason in expire:
            self.expiring.add(token)
            self.spawn(self._expire(name, t, token, outcome, reason))
        for token, eid in cancels:
            self.push_cancel(token, eid)

    async def _expire(self, name: str, t: int, token: int, outcome: str, reason: str) -> None:
        entry = C.encode(C.EXPIRE, rid=f"expire-{token}", now=self.clock.now_ms(), term=self.node.term,
                         by=self.node.cfg.node_id, job=name, scheduled_ms=t, token=token,
                         outcome=outcome, reason=reason)
        try:
            result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
            if result.get("ok"):
                log.warning("expired %s attempt token %d: %s -> %s", execution_id(name, t), token, reason,
                            result.get("state"))
                if self.metrics is not None:        # LOST: an at_most_once attempt never re-run
                    self.metrics.attempts_expired.labels(result.get("state", outcome)).inc()
                conn = self.hub.holder(token)
                if conn is not None:
                    conn.running.pop(token, None)
                self.hub.token_seen.pop(token, None)
                self.cancel_sent.pop(token, None)
        except ProposalError as e:
            log.info("expiry of token %d not confirmed: %s", token, e)
        finally:
            self.expiring.discard(token)

    def push_cancel(self, token: int, eid: str) -> None:
        conn = self.hub.holder(token)
        if conn is not None:
            self.cancel_sent[token] = self.clock.now_ms()
            self.hub.send(conn, pb.LeaderMessage(cancel=pb.CancelAttempt(execution_id=eid, fencing_token=token)))

    def waiting_reason(self, name: str, t: int) -> str:
        if not self.hub.conns:
            return "waiting: no worker is connected"
        return self.waiting.get((name, t), "")
