"""The replicated state machine: `apply(entry, index) -> ApplyResult`.

Contract (docs/architecture.md "Facts": state machine contract):
- deterministic: the result and the new state depend only on the old state, the entry text and
  its log index. No clock (time comes in the entry), no I/O, no randomness, no iteration over sets
  of strings.
- total: apply never raises. A malformed or refused entry is a deterministic rejection result;
  an unexpected exception is caught and reported as `internal` (and the state is unchanged for
  commands that validate before they mutate).
- idempotent where it matters: an execution key (job, scheduled_ms) is unique, so a duplicate fire
  is a no-op; a request id seen within DEDUP_TTL_MS returns the first result again.

`SchedulerState` only dispatches: each entry kind goes to the module that decides it (jobs,
firing, attempts, dags, sla, batches), all sharing one table and index layer (schedd.core.tables).
It keeps what is about the log itself: the dedup table, the audit trail, the chained log hash and
the state digest. The result is typed (schedd.core.results), with the effects the shell performs.
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable, Container
from typing import Any, ClassVar

from schedd.core import access, attempts, batches, calendars, dags, features, firing, history, jobs, members, queries
from schedd.core import quota_shares, shards, windows
from schedd.core import acl as acl_table
from schedd.core import audit as audit_trail
from schedd.core import commands as C
from schedd.core import sla as sla_index
from schedd.core.attempts import LOST_RETRY_LIMIT
from schedd.core.digest import state_digest
from schedd.core.firing import GAPS_KEEP, MAX_BACKFILL_PER_ENTRY, MISSED_GRACE_MS, OPEN_END
from schedd.core.model import Execution, Job
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code, EpochApplied, ok, reject
from schedd.core.image import (
    AUDIT_FIELDS, EXEC_FIELDS, EXTRA_FIELDS, FEATURE_LEVEL_KEY, JOB_FIELDS, READABLE_FORMATS, SNAPSHOT_DIGEST,
    SNAPSHOT_FORMAT, Image,
)
from schedd.core.snapshot import AuditRecord, SnapshotImage, _from_image, _from_plain
from schedd.core.tables import ACTIVE_STATES, MIN_MS, READY_STATES, ExecKey, Tables, next_fire_for, schedule_of

__all__ = [      # re-exported for the modules that import them from here
    "ACTIVE_STATES", "AUDIT_FIELDS", "EXEC_FIELDS", "EXTRA_FIELDS", "GAPS_KEEP", "JOB_FIELDS",
    "LOST_RETRY_LIMIT", "MAX_BACKFILL_PER_ENTRY", "MIN_MS", "MISSED_GRACE_MS", "OPEN_END", "READABLE_FORMATS",
    "READY_STATES", "SNAPSHOT_FORMAT", "AuditRecord", "ExecKey", "SchedulerState", "_from_image", "_from_plain",
    "next_fire_for", "schedule_of",
]

DEDUP_TTL_MS = 15 * 60 * 1000
# The leader's own entries, the denied records themselves, and a batch's staged chunks (its
# commit or abort is the record of the call) leave no audit record.
UNAUDITED = frozenset({C.FIRE, C.NOOP, C.EPOCH, C.START, C.START_MANY, C.FINISH, C.FINISH_MANY, C.EXPIRE, C.SKIP,
                       C.SLA, C.AUDIT_APPEND, C.BATCH_STAGE, C.GROUP})

Handler = Callable[[Tables, C.Command, int], ApplyResult]


def _epoch(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    if cmd.term > st.epoch:
        st.epoch = cmd.term
    return ok(R.Epoch(st.epoch), effects=(EpochApplied(st.epoch),))


def _noop(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    return ok(R.Epoch(st.epoch), effects=(EpochApplied(st.epoch),))


HANDLERS: dict[str, Handler] = {
    C.EPOCH: _epoch, C.NOOP: _noop,
    C.PUT: jobs.put, C.PUT_MANY: batches.put_many, C.DELETE: jobs.delete, C.PAUSE: jobs.pause,
    C.RESUME: jobs.resume, C.QUOTA: jobs.quota,
    C.TRIGGER: firing.trigger, C.FIRE: firing.fire, C.SKIP: firing.skip, C.BACKFILL: firing.backfill,
    C.START: attempts.start, C.START_MANY: attempts.start_many, C.FINISH: attempts.finish,
    C.FINISH_MANY: attempts.finish_many, C.EXPIRE: attempts.expire, C.CANCEL: attempts.cancel,
    C.RUN_RETRY: attempts.retry,
    C.SLA: sla_index.apply, C.FEATURE_LEVEL: features.raise_level,
    **dags.HANDLERS, **batches.HANDLERS, **access.HANDLERS, **members.HANDLERS, **calendars.HANDLERS,
    **windows.HANDLERS, **quota_shares.HANDLERS, **shards.HANDLERS,
}


def _target(cmd: C.Command) -> str:
    """What an audit record names as the target of an entry."""
    if cmd.kind == C.PUT:
        return str(cmd.args.get("name", ""))
    if cmd.kind == C.PUT_MANY:
        return f"{len(cmd.args.get('specs') or [])} jobs"
    if cmd.kind in (C.BATCH_STAGE, C.BATCH_COMMIT, C.BATCH_ABORT):
        return f"batch {cmd.args.get('batch')}"
    if cmd.kind in (C.CANCEL, C.RUN_RETRY):
        return f"{cmd.args.get('job')}@{cmd.args.get('scheduled_ms')}"
    if cmd.kind in (C.CALENDAR_PUT, C.BLACKOUT_PUT):
        row = cmd.args.get("calendar") or cmd.args.get("blackout")
        return str(row.get("name", "")) if isinstance(row, dict) else ""
    if cmd.kind == C.AUDIT_NOTE:
        return str(cmd.args.get("note", ""))
    if cmd.kind == C.FEATURE_LEVEL:
        return f"feature level {cmd.args.get('level')}"
    if cmd.kind in (C.ACL_TOKEN_CREATE, C.ACL_BOOTSTRAP, C.ACL_POLICY_PUT, C.ACL_ROLE_PUT):
        row = cmd.args.get("token") or cmd.args.get("policy") or cmd.args.get("role")
        if not isinstance(row, dict):
            return ""
        return f"token:{row.get('accessor')}" if "accessor" in row else str(row.get("name", ""))
    return str(cmd.args.get("name") or cmd.args.get("key") or "")


class SchedulerState(Tables):
    """The tables (jobs, executions, epoch, DAGs, quotas, batches) plus the log's own records:
    the dedup table, the audit trail, the chained log hash and the last applied index."""

    _HANDLERS: ClassVar[dict[str, Handler]] = HANDLERS     # entry kind -> the module deciding it

    def __init__(self, table: C.FeatureTable = C.FEATURES) -> None:
        super().__init__()
        # The feature levels and entry kinds this build understands (injected: a test runs an
        # older build's table, schedd.core.commands.table_upto).
        self.features = table
        self.dedup: dict[str, tuple[int, dict[str, Any]]] = {}
        self.log_hash = b"\0" * 16    # blake2b chained over every applied entry's text
        self.last_index = 0
        self._digest: tuple[tuple[int, bytes], str] | None = None  # ((last_index, log_hash), digest)
        # (index, digest) written into the last snapshot this replica restored (None: none, or an
        # image older than the digest): what the writer's state was, to check what was loaded.
        self.snapshot_digest: tuple[int, str] | None = None
        self.reindex()

    def reindex(self) -> None:
        """Rebuild every derived index (after a restore): the tables' and the SLA due index."""
        self.rebuild_indexes()
        sla_index.rebuild(self)

    # ------------------------------------------------------------ snapshot

    def snapshot(self) -> SnapshotImage:
        """O(1): pysyncobj forks right after this returns and the child pickles the image from a
        copy-on-write view of the state, so the tick thread never waits for serialization."""
        return SnapshotImage(self)

    def restore(self, data: Image) -> None:
        """Load what unpickling a snapshot image produced, then rebuild the indexes. The restored
        objects are frozen out of the garbage collector's generations (gc.freeze): they live as
        long as the state, and full collections would otherwise rescan them all, stalling the
        Raft tick thread for a second per million jobs."""
        gc.disable()
        try:
            fmt, jobs_, execs, epoch, dedup, _old_audit, log_hash, last_index, clock_ms, extra = data
            if tuple(fmt) != SNAPSHOT_FORMAT:
                raise ValueError(f"unsupported snapshot format {fmt!r}")
            self.jobs, self.execs, self.epoch, self.dedup = jobs_, execs, epoch, dedup
            # The ACL table and the audit trail re-validate on load (a tampered chain is refused);
            # images older than format 4 have neither (the old deque of rows is not a chain).
            acl, trail = extra.get("acl"), extra.get("audit")
            self.acl = acl_table.table_from_dict(acl) if acl else acl_table.AclTable()
            self.audit = audit_trail.trail_from_dict(trail) if trail else audit_trail.AuditTrail()
            self.log_hash, self.last_index, self.clock_ms = log_hash, last_index, clock_ms
            self._digest = None
            for key in EXTRA_FIELDS:
                setattr(self, key, extra.get(key, {}))
            self.feature_level = int(extra.get(FEATURE_LEVEL_KEY, 1))   # older images: level 1
            written = extra.get(SNAPSHOT_DIGEST)
            self.snapshot_digest = (int(written[0]), str(written[1])) if written else None
            dags.upgrade(self)                # DAGs pickled before a field existed
            _named_dst_policies(self.jobs)
            self.reindex()
            gc.freeze()
        finally:
            gc.enable()

    # ------------------------------------------------------------ apply

    def apply(self, entry: str, index: int) -> ApplyResult:
        """Apply one committed entry at Raft log index `index`. Never raises.

        One result leaves everything untouched, the log hash and the index included:
        BUILD_BEHIND, when the cluster is (or this entry raises it) above this build's feature
        levels. Applying on would diverge from the replicas that understand (an older build
        refused newer kinds as INVALID and, once leader, dispatched what it believed pending),
        so the shell stops applying there and keeps the entry for an upgraded build
        (schedd.replication.raft_patches: halting)."""
        self.outbox.clear()
        self.settled.clear()
        try:
            cmd: C.Command | None = C.decode(entry, known=None)
            malformed = ""
        except (ValueError, KeyError, TypeError) as e:
            cmd, malformed = None, str(e)
        if cmd is not None and (level := features.beyond_build(self.features, self.feature_level,
                                                               self.epoch, cmd)) is not None:
            return reject(Code.BUILD_BEHIND, f"the cluster is at feature level {level}, this build "
                          f"supports up to {self.features.max_level}", cluster_level=level)
        self.log_hash = hashlib.blake2b(self.log_hash + entry.encode(), digest_size=16).digest()
        self.last_index = index
        if cmd is None:
            return reject(Code.INVALID, f"malformed entry: {malformed}")
        refused = self._feature_gate(cmd)
        if refused is not None:
            return refused
        if cmd.kind == C.GROUP:
            return self._apply_group(cmd, index)
        return self._apply_command(cmd, index)

    def _apply_group(self, cmd: C.Command, index: int) -> ApplyResult:
        """A GROUP entry: each of its entries applied as if it had an entry of its own (at this
        log index), so each caller gets its own result and a refused one changes nothing. The
        result's `parts` are theirs, in order; its effects are all of theirs."""
        texts = cmd.args.get("entries")
        if not isinstance(texts, list) or not texts:
            return reject(Code.INVALID, "a group needs a list of entries")
        parts = []
        for text in texts:
            try:
                sub = C.decode(text) if isinstance(text, str) else None
            except (ValueError, KeyError, TypeError) as e:
                parts.append(reject(Code.INVALID, f"malformed entry: {e}"))
                continue
            if sub is None or sub.kind not in C.GROUPABLE:
                parts.append(reject(Code.INVALID, f"entry kind {getattr(sub, 'kind', '?')!r} cannot be grouped"))
                continue
            # Each grouped entry is gated like an entry of its own: one may need a higher level
            # than the group's (a `put` of a container spec says fl=6; the group says 3).
            refused = self._feature_gate(sub)
            parts.append(refused if refused is not None else self._apply_command(sub, index))
        return ok(R.Parts(tuple(parts)), effects=tuple(e for part in parts for e in part.effects))

    def _apply_command(self, cmd: C.Command, index: int) -> ApplyResult:
        if cmd.now > self.clock_ms:
            self.clock_ms = cmd.now
        batches.forget_finished(self, cmd.now)
        if cmd.rid:
            self._expire_dedup(cmd.now)
            seen = self.dedup.get(cmd.rid)
            if seen is not None:
                return ApplyResult.from_dict(seen[1], cmd.kind).again()
        try:
            result = self._HANDLERS[cmd.kind](self, cmd, index)
            if self.dag_pending:
                dags.settle(self, cmd, index)     # DAG runs move on (schedd.core.dags)
            if self.settled:
                history.retire_settled(self, index)   # finished runs leave memory (schedd.core.history)
        except Exception as e:  # noqa: BLE001 - apply must be total (architecture.md "Facts" F1)
            result = reject(Code.INTERNAL, f"{type(e).__name__}: {e}")
        if cmd.rid and result.code is not Code.STALE_TERM:
            # A refusal for a stale term says who proposed, not what became of the request: a
            # deposed leader's entry committed late must not answer the new leader's proposal
            # of the same request id (an expiry, a claim, an SLA miss) for DEDUP_TTL_MS.
            self.dedup[cmd.rid] = (cmd.now, result.as_dict())
        if cmd.kind not in UNAUDITED:
            access.record(self, cmd, index, result, _target(cmd))
        return result

    def _feature_gate(self, cmd: C.Command) -> ApplyResult | None:
        """Refuse an entry above the cluster's feature level. The level the entry says it needs
        decides first, so a node that does not know the kind refuses it with the same result
        as one that does (schedd.core.features); a hand-made entry that understates its level
        is refused too, and so is one whose specs need more than it says (`features.understated`).
        Refused like a malformed entry: nothing but the log hash changes (no
        clock, no dedup record, no audit record), so the state stays equal on every replica
        whichever of these refusals each gave."""
        local = self.features.level_of(cmd.kind)
        needed = max(cmd.level, local or 1)
        if needed > self.feature_level:
            return reject(Code.FEATURE_LEVEL, features.behind_message(cmd.kind, needed, self.feature_level))
        if local is None:
            # Only a node behind the cluster's level gets here with a real kind: the leader raises
            # the level only once every voter supports it (a status warning names such a node).
            return reject(Code.INVALID, f"malformed entry: unknown entry kind {cmd.kind!r}")
        # A spec the entry carries may need more than its kind (a container: fl=6); refused the
        # same way, and why that is the same on every replica: features.understated.
        why = features.understated(cmd, self.feature_level)
        return None if why is None else reject(Code.INVALID, why)

    def _expire_dedup(self, now: int) -> None:
        horizon = now - DEDUP_TTL_MS
        while self.dedup:
            rid = next(iter(self.dedup))
            if self.dedup[rid][0] >= horizon:
                break
            del self.dedup[rid]

    # ------------------------------------------------------------ reads (caller holds the lock)

    def log_hash_hex(self) -> str:
        """The chained hash of every entry applied (equal on replicas that applied the same log;
        it says nothing about the state itself: see state_digest)."""
        return self.log_hash.hex()

    def drop_member_table(self) -> None:
        """Forget the member table: an image restored into another cluster (`schedd restore`)
        carries the old cluster's nodes, and the new cluster's membership is its own config."""
        self.members = {}
        self._digest = None

    def state_digest(self) -> str:
        """The digest of the state's content (schedd.core.digest): equal on replicas holding the
        same state, however they got it. Cached per (index, log hash): every apply changes the
        log hash, a restore clears the cache."""
        key = (self.last_index, self.log_hash)
        if self._digest is None or self._digest[0] != key:
            self._digest = (key, state_digest(self))
        return self._digest[1]

    def verify_snapshot_digest(self) -> bool | None:
        """Whether the state restored from the last snapshot is what its writer had (the digest
        recomputed here equals the one written into the image); None if there is nothing to
        compare: no snapshot restored, an image without a digest, or entries applied since."""
        if self.snapshot_digest is None or self.snapshot_digest[0] != self.last_index:
            return None
        return self.state_digest() == self.snapshot_digest[1]

    def in_state_since(self, state: str, t: int) -> list[tuple[int, str]]:
        return queries.in_state_since(self, state, t)

    def last_execution(self, name: str) -> Execution | None:
        return queries.last_execution(self, name)

    def list_jobs(self, *, team: str = "", state: str = "", after: str = "",
                  limit: int = 100, visible: Container[str] | None = None) -> tuple[list[Job], str, int]:
        return queries.list_jobs(self, team=team, state=state, after=after, limit=limit, visible=visible)

    def list_executions(self, *, job: str = "", state: str = "", after: tuple[int, str] | None = None,
                        limit: int = 100, oldest_first: bool = False, visible: Container[str] | None = None,
                        ) -> tuple[list[Execution], tuple[int, str] | None, int]:
        return queries.list_executions(self, job=job, state=state, after=after, limit=limit,
                                       oldest_first=oldest_first, visible=visible)


def _named_dst_policies(jobs_by_name: dict[str, Job]) -> None:
    """Re-derive each named DST policy from its spec after a restore. Images written before the
    default depended on the hour field hold "skip/first" where the spec named only dst_gap (the
    default's name filled the other half); replaying that spec's entry gives "skip/", so a
    replica restored from such an image would disagree with one that replayed the log."""
    for job in jobs_by_name.values():
        if job.dst:
            job.dst = job.spec.dst_policy
