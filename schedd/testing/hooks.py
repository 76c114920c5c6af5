"""Test-mode hooks: the history recorder, the unsafe switches, per-link raft dialing, clock admin.

Environment (read once at start; honoured only with SCHEDD_TEST_MODE=1, and by a node only when
its config says `test_mode = true`, else the node refuses to start):

    SCHEDD_HISTORY_DIR   record a JSON-lines history into DIR/<process>.jsonl (one O_APPEND write
                         per line, wall-clock `ts` in seconds)
    SCHEDD_UNSAFE        comma list of unsafe switches (negative controls of the fault suite):
                         push_before_commit, no_fencing, no_dedup, local_clock_fire, no_lease_grace,
                         trust_leader, stock_raft (stock pysyncobj log repair, truncation and
                         elections instead of schedd/replication/raft_patches.py)
    SCHEDD_RAFT_DIAL     JSON {"<peer raft address>": "<address to dial instead>"}: dial peers
                         through per-link TCP proxies (partitions, delay)
    SCHEDD_WORKER_DIAL   a worker's: see schedd_worker.hooks
    SCHEDD_TEST_FEATURE_LEVEL  N: run the feature table of an older build, that knows only feature
                         levels 1..N (schedd.core.commands.table_upto): a rolling upgrade in
                         one source tree (restart the node without it to "upgrade" it)
    SCHEDD_FAILPOINT_DIR failpoints (scenario S03): the harness arms one by creating the file
                         DIR/<process>.<failpoint> (content: a number of seconds, for a stall); the
                         process consumes it (unlink: one shot) when it reaches that point.
                         Node (<process> = node id; acts only while it leads):
                           crash_after_fire   SIGKILL itself in the tick thread right after a fire
                                              entry that created intents applied, before dispatch
                           crash_after_claim  SIGKILL itself right after a claim committed, before
                                              its assignment is pushed (the worker never gets it)
                           crash_after_push   SIGKILL itself after pushing a claimed assignment,
                                              before that attempt's result commits (0.3 s later,
                                              or at once when the worker's result arrives)
                           stall_after_fire   block its asyncio loop for N s right after a fire
                                              entry applied (Raft, in its own thread, goes on)
                         Worker (<process> = worker-<name>): crash_after_effect, see
                         schedd_worker.hooks
"""

from __future__ import annotations

import copy
import json
import os
import signal
import time
from typing import Any

from schedd.core.commands import FeatureTable, table_upto
from schedd.core.results import ApplyResult, Parts
from schedd.core.specs import JobSpec, handler_json
from schedd.ports.faults import NO_FAULTS, ClaimAnswer, Faults
# The history format (Recorder) and the test-mode rule are the worker's too: one definition, in
# the lower distribution (schedd-worker), which the daemon installs anyway.
from schedd_worker.hooks import Recorder, TestModeError
from schedd_worker.hooks import test_mode as _env_test_mode

UNSAFE_SWITCHES = frozenset({"push_before_commit", "no_fencing", "no_dedup", "local_clock_fire",
                             "no_lease_grace", "trust_leader", "stock_raft"})


def make_recorder(proc: str) -> Recorder | None:
    d = os.environ.get("SCHEDD_HISTORY_DIR")
    if not d or not _env_test_mode():
        return None
    os.makedirs(d, exist_ok=True)
    return Recorder(os.path.join(d, f"{proc}.jsonl"), proc)


def unsafe_switches() -> frozenset[str]:
    raw = os.environ.get("SCHEDD_UNSAFE", "")
    names = frozenset(s.strip() for s in raw.split(",") if s.strip())
    if not names:
        return frozenset()
    if not _env_test_mode():
        raise TestModeError("SCHEDD_UNSAFE is for the test suite only (needs SCHEDD_TEST_MODE=1)")
    bad = names - UNSAFE_SWITCHES
    if bad:
        raise TestModeError(f"unknown unsafe switch(es): {', '.join(sorted(bad))}")
    return names


FEATURE_LEVEL_ENV = "SCHEDD_TEST_FEATURE_LEVEL"


def old_feature_table() -> FeatureTable | None:
    """The older build's feature table SCHEDD_TEST_FEATURE_LEVEL asks for (None: this build's)."""
    raw = os.environ.get(FEATURE_LEVEL_ENV, "")
    if not raw:
        return None
    try:
        return table_upto(int(raw))
    except ValueError as e:
        raise TestModeError(f"{FEATURE_LEVEL_ENV}: {e}") from None


def configure_node(cfg) -> Faults:
    """The node's fault hooks, read from the environment once by the daemon at start: NO_FAULTS
    unless a test asks for something. Refuses test-only settings outside test mode."""
    wants = any(os.environ.get(k) for k in ("SCHEDD_HISTORY_DIR", "SCHEDD_UNSAFE", "SCHEDD_RAFT_DIAL",
                                            "SCHEDD_FAILPOINT_DIR", FEATURE_LEVEL_ENV))
    if not wants:
        return NO_FAULTS
    if not (cfg.test_mode and _env_test_mode()):
        raise TestModeError(f"SCHEDD_HISTORY_DIR, SCHEDD_UNSAFE, SCHEDD_RAFT_DIAL, SCHEDD_FAILPOINT_DIR and "
                            f"{FEATURE_LEVEL_ENV} need test_mode = true in the config and SCHEDD_TEST_MODE=1")
    unsafe = unsafe_switches()
    rec = make_recorder(cfg.node_id)
    faults = TestFaults(unsafe=unsafe, rec=rec, failpoints=make_failpoints(cfg.node_id, rec),
                        dial=dial_overrides(), features=old_feature_table())
    if rec is not None:
        rec("node_start", node=cfg.node_id, unsafe=sorted(unsafe), pid=os.getpid())
    return faults


# ------------------------------------------------------------------ failpoints (scenario S03)

class Failpoints:
    """One-shot failpoints armed from outside: the file DIR/<proc>.<name> exists. Consuming it
    is an unlink, so a failpoint fires once however many threads reach it."""

    def __init__(self, directory: str, proc: str, rec: Recorder | None) -> None:
        self.dir, self.proc, self.rec = directory, proc, rec
        self.crash_token: int | None = None       # crash_after_push: the pushed attempt

    def take(self, name: str) -> float | None:
        path = os.path.join(self.dir, f"{self.proc}.{name}")
        try:
            with open(path) as f:
                text = f.read().strip()
            os.unlink(path)
        except (FileNotFoundError, OSError):
            return None
        try:
            return float(text or 0)
        except ValueError:
            return 0.0

    def record(self, type_: str, **fields) -> None:
        if self.rec is not None:
            self.rec(type_, proc_name=self.proc, **fields)

    def crash(self, name: str, **fields) -> None:
        """kill -9 this process (no cleanup, no flush): as a crash would."""
        self.record("failpoint", name=name, action="crash", pid=os.getpid(), **fields)
        os.kill(os.getpid(), signal.SIGKILL)


def make_failpoints(proc: str, rec: Recorder | None = None) -> Failpoints | None:
    d = os.environ.get("SCHEDD_FAILPOINT_DIR")
    if not d:
        return None
    if not _env_test_mode():
        raise TestModeError("SCHEDD_FAILPOINT_DIR is for the test suite only (needs SCHEDD_TEST_MODE=1)")
    os.makedirs(d, exist_ok=True)
    return Failpoints(d, proc, rec)


def unsafe_no_dedup(entry: str, index: int) -> str:
    """Negative control: make every request id unique (deterministically, by log index), so the
    state machine's request-id deduplication never matches."""
    try:
        body = json.loads(entry)
    except ValueError:
        return entry
    if body.get("rid"):
        body["rid"] = f"{body['rid']}#nodedup{index}"
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def applied_through(node) -> int:
    """The last log index this node's state machine has applied, read under the node lock (apply
    holds it, so the entry at that index is wholly applied).

    Not pysyncobj's `raftLastApplied`: pysyncobj hands apply's result to the proposal's callback
    (which wakes the asyncio thread) BEFORE it increments that counter, so a claim pushed right
    after it applied could read its own index - 1. On a loaded machine the tick thread was
    descheduled in that gap and the checker reported a correct push as C6 "pushed before applying
    its claim" (S02 seed 92261289: claim 180 applied, pushed 8 ms later with applied=179)."""
    with node.lock:
        return node.state.last_index


def _recorded(result: ApplyResult) -> dict[str, Any]:
    """What the history keeps of an apply result (its stored form's keys the checker reads); a
    group's (group commit) keeps its parts'."""
    plain = result.as_dict()
    res: dict[str, Any] = {k: plain[k] for k in ("ok", "code", "token", "state", "items", "scheduled_ms", "name", "logical_ms",
                                  "deduplicated", "epoch", "retry_at", "claims", "results") if k in plain}
    if isinstance(result.payload, Parts):
        res["parts"] = [_recorded(p) for p in result.payload.parts]
    return res


class TestFaults(Faults):
    """The node's test-mode hooks (schedd.ports.faults.Faults): the history recorder, the unsafe
    switches of the negative controls, failpoints and per-link Raft dialing, as the environment
    asked for them at start (configure_node)."""

    __test__ = False                     # not a pytest test class

    def __init__(self, *, unsafe: frozenset[str] = frozenset(), rec: Recorder | None = None,
                 failpoints: Failpoints | None = None, dial: dict[str, tuple[str, int]] | None = None,
                 features: FeatureTable | None = None) -> None:
        self.unsafe = unsafe
        self.features = features
        self.rec = rec
        self.failpoints = failpoints
        self.dial = dial or {}
        self.stock_raft = "stock_raft" in unsafe
        self.shard: int | None = None       # set on a sharded node's per-group copies

    def for_shard(self, shard: int) -> TestFaults:
        """A copy for shard group `shard` (same recorder, failpoints, switches and dialing) whose
        records carry `"shard": shard`: the checker compares indexes, terms and hashes per group.
        An unsharded node never calls this, so its records stay as they were."""
        mine = copy.copy(self)
        mine.shard = shard
        return mine

    def record(self, type_: str, **fields) -> None:
        if self.rec is not None:
            if self.shard is not None:
                fields["shard"] = self.shard
            self.rec(type_, **fields)

    # ---------------------------------------------------------------- the Raft node

    def transport(self, base: type) -> type:
        return transport_with_dial(base, self.dial)

    def feature_table(self, table: Any) -> Any:
        return self.features if self.features is not None else table

    def entry_to_apply(self, entry: str, index: int) -> str:
        return unsafe_no_dedup(entry, index) if "no_dedup" in self.unsafe else entry

    def applied(self, node_id: str, entry: str, result: ApplyResult, index: int, log_hash: bytes) -> None:
        if self.rec is None:
            return
        try:
            body = json.loads(entry)
        except ValueError:
            body = {"raw": entry[:200]}
        self.record("apply", node=node_id, index=index, hash=log_hash.hex(), entry=body, res=_recorded(result))


    def role_changed(self, node_id: str, old: int, new: int, term: int) -> None:
        self.record("role", node=node_id, old=old, new=new, term=term)

    # ---------------------------------------------------------------- failpoints (scenario S03)

    def fire_applied(self, node, created, index: int, loop) -> None:
        """Tick thread, right after a fire entry that created intents applied on this node."""
        fp = self.failpoints
        if fp is None or not created or not node.is_leader():
            return
        if fp.take("crash_after_fire") is not None:
            fp.crash("crash_after_fire", index=index, created=[list(c) for c in created[:20]], term=node.term)
        secs = fp.take("stall_after_fire")
        if secs is not None:
            fp.record("failpoint", name="stall_after_fire", action="armed", index=index, seconds=secs,
                      created=[list(c) for c in created[:20]], term=node.term)

            def stall():
                fp.record("failpoint", name="stall_after_fire", action="stall_start", seconds=secs)
                time.sleep(secs)            # blocks the asyncio loop: no dispatch, no worker streams
                fp.record("failpoint", name="stall_after_fire", action="stall_end", seconds=secs)
            loop.call_soon_threadsafe(stall)

    def claimed(self, token: int, name: str, t: int, worker: str) -> None:
        """The leader's loop, right after a claim committed and before its assignment is pushed."""
        fp = self.failpoints
        if fp is not None and fp.take("crash_after_claim") is not None:
            fp.crash("crash_after_claim", token=token, job=name, scheduled_ms=t, worker=worker)

    def assignment_pushed(self, node, token: int, name: str, t: int, worker: str) -> None:
        """The leader's loop, right after it pushed the assignment of a committed claim."""
        fp = self.failpoints
        if fp is None or fp.crash_token is not None or fp.take("crash_after_push") is None:
            return
        import asyncio
        fp.crash_token = token
        fp.record("failpoint", name="crash_after_push", action="armed", token=token, job=name, scheduled_ms=t,
                  worker=worker, term=node.term)
        asyncio.get_running_loop().call_later(
            0.3, lambda: fp.crash("crash_after_push", token=token, job=name, scheduled_ms=t,
                                  why="0.3 s after the push"))

    def result_arrived(self, token: int) -> None:
        """The leader's loop, when a worker's result arrives (before it is proposed)."""
        fp = self.failpoints
        if fp is not None and fp.crash_token == token:
            fp.crash("crash_after_push", token=token, why="the worker's result arrived")

    # ---------------------------------------------------------------- the push record (C6)

    def pushed(self, node, worker: str, msg) -> None:
        """Record every message the leader pushes to a worker (assignments and cancels), with the
        index the node had applied when it pushed (C6: never before the claim's)."""
        if self.rec is None:
            return
        kind = msg.WhichOneof("kind")
        if kind == "assignment":
            a = msg.assignment
            self.record("push", node=node.cfg.node_id, worker=worker, job=a.job, scheduled_ms=a.scheduled_ms,
                     token=a.fencing_token, attempt=a.attempt, term=a.term, due_ms=a.due_ms,
                     applied=applied_through(node))
        elif kind == "cancel":
            self.record("push_cancel", node=node.cfg.node_id, worker=worker, token=msg.cancel.fencing_token)

    # ---------------------------------------------------------------- unsafe switches (negative controls)

    def lease_grace_from(self, now: int) -> int:
        """no_lease_grace: a new leader gives running attempts no grace at all."""
        return 0 if "no_lease_grace" in self.unsafe else now

    async def claim(self, proposal, assigner, conn, name: str, t: int, attempt: int, due: int,
                    spec: JobSpec) -> ClaimAnswer:
        """The claim with the unsafe switches applied:
        push_before_commit: push the assignment (with the token the claim is expected to get)
        before proposing it; trust_leader: if the claim has not committed within 0.3 s but this
        node believes it leads, push anyway. The answer says `pushed` when the normal push must
        be skipped."""
        if not self.unsafe & {"push_before_commit", "trust_leader"}:
            return ClaimAnswer(await proposal)
        import asyncio
        predicted = applied_through(assigner.node) + 1
        pushed = False
        if "push_before_commit" in self.unsafe:
            assigner.hub.send(conn, self._assignment(assigner, name, t, attempt, predicted, due, spec))
            pushed = True
        fut = asyncio.ensure_future(proposal)
        if "trust_leader" in self.unsafe and not pushed:
            done, _ = await asyncio.wait({fut}, timeout=0.3)
            if not done and assigner.node.is_leader():
                assigner.hub.send(conn, self._assignment(assigner, name, t, attempt, predicted, due, spec))
                pushed = True
        return ClaimAnswer(await fut, pushed)

    def due(self, clock, due: int) -> int:
        """local_clock_fire: start at `due` as read on this node's (possibly skewed) clock."""
        if "local_clock_fire" in self.unsafe and due:
            return due - (clock.now_ms() - time.time_ns() // 1_000_000)
        return due

    def finish_token(self, node, name: str, t: int, token: int) -> int:
        """no_fencing: attribute a result to whatever attempt is current, not to the reporter's."""
        if "no_fencing" not in self.unsafe:
            return token
        with node.lock:
            ex = node.state.execs.get((name, t))
            if ex is not None and ex.attempts:
                return ex.attempts[-1].fencing_token
        return token

    def fire_proposed(self, leader, items, spawn) -> None:
        """trust_leader: when a fire proposal has not committed within 0.3 s but this node still
        believes it leads ("it will commit, I am the leader"), push those instants to a worker
        anyway, with the token their claim would probably get. An isolated leader does exactly
        this wrong."""
        if "trust_leader" not in self.unsafe or leader.hub is None or leader.assigner is None:
            return
        import asyncio

        async def later():
            await asyncio.sleep(0.3)
            node, hub, assigner = leader.node, leader.hub, leader.assigner
            if not node.is_leader():
                return
            with node.lock:
                todo = [(n, t, node.state.jobs.get(n)) for n, t in items if (n, t) not in node.state.execs]
            now = leader.clock.now_ms()
            for n, t, job in todo:
                conns = hub.eligible("", now)
                if not conns or job is None:
                    return
                hub.send(conns[0], self._assignment(assigner, n, t, 1, applied_through(node) + 1, t, job.spec))

        spawn(later())

    def _assignment(self, assigner, name: str, t: int, attempt: int, token: int, due: int, spec: JobSpec):
        from schedd.core.model import execution_id
        from schedd_proto import scheduler_pb2 as pb
        return pb.LeaderMessage(assignment=pb.Assignment(
            execution_id=execution_id(name, t), job=name, scheduled_ms=t, attempt=attempt, fencing_token=token,
            term=assigner.node.term, due_ms=self.due(assigner.clock, due), handler_json=handler_json(spec.handler),
            timeout_seconds=float(spec.timeout_seconds), labels=dict(spec.labels)))


# ------------------------------------------------------------------ dialing peers through proxies

def dial_overrides() -> dict[str, tuple[str, int]]:
    raw = os.environ.get("SCHEDD_RAFT_DIAL", "")
    if not raw:
        return {}
    out = {}
    for peer, via in json.loads(raw).items():
        host, port = via.rsplit(":", 1)
        out[peer] = (host, int(port))
    return out


def transport_with_dial(base_cls, overrides: dict[str, tuple[str, int]] | None = None):
    """A subclass of the node's transport that dials some peers at another address (a proxy).
    Only the dialing side changes: pysyncobj keeps one connection per pair, opened by the node
    with the larger address, so one proxy per link sees both directions. `overrides` defaults to
    SCHEDD_RAFT_DIAL's."""
    if overrides is None:
        overrides = dial_overrides()
    if not overrides:
        return base_cls
    from pysyncobj.monotonic import monotonic as monotonicTime
    from pysyncobj.tcp_connection import CONNECTION_STATE

    class DialViaProxy(base_cls):
        def _connectIfNecessarySingle(self, node):
            via = overrides.get(getattr(node, "address", None))
            if via is None:
                return super()._connectIfNecessarySingle(node)
            if node in self._connections and self._connections[node].state != CONNECTION_STATE.DISCONNECTED:
                return True
            if not self._shouldConnect(node):
                return False
            last = self._lastConnectAttempt.get(node)
            if last is not None and monotonicTime() - last < self._syncObj.conf.connectionRetryTime:
                return False
            self._lastConnectAttempt[node] = monotonicTime()
            return self._connections[node].connect(via[0], via[1])

    return DialViaProxy


# ------------------------------------------------------------------ admin service (clock offset)

def add_admin_service(server, clock, node, faults: Faults) -> None:
    from schedd_proto import testing_pb2 as tpb
    from schedd_proto import testing_pb2_grpc as tpb_grpc
    rec = faults.rec if isinstance(faults, TestFaults) else None

    class Testing(tpb_grpc.TestingServicer):
        async def SetClockOffset(self, request, context):
            old = clock.offset_ms
            clock.offset_ms = int(request.offset_ms)
            if rec is not None:
                rec("clock_offset", node=node.cfg.node_id, old_ms=old, offset_ms=clock.offset_ms)
            return tpb.ClockOffset(offset_ms=clock.offset_ms, previous_ms=old)

        async def GetClockOffset(self, request, context):
            return tpb.ClockOffset(offset_ms=clock.offset_ms, previous_ms=clock.offset_ms)

    tpb_grpc.add_TestingServicer_to_server(Testing(), server)
