"""What `SchedulerState.apply` returns: a typed result (a code, a message, a payload) and the
effects the shell performs because of it (schedd.leader, schedd.api).

Contract:
- `ApplyResult` is immutable: `r.ok`, `r.code` (a `Code`), `r.msg`, `r.payload` (each entry
  kind's own frozen dataclass: `Claimed(token, attempt)`, `Finished(state, retry_at)`...; the
  proposer, which knows what it proposed, reads it with `r.of(Claimed)`), `r.effects`. Nothing
  outside this package reads a result by string key.
- What is stored in replicated state (the dedup table, a batch's outcome) is `as_dict()`: plain
  values in the keys and order they always had, so the snapshot format and the state digest are
  what they were. A result answered again from the dedup table is rebuilt with `from_dict` (the
  entry kind says which payload) and carries no effects: effects are reported once, by the
  apply that made them.
- Effects describe what to do, never do it: apply stays pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, TypeVar

from schedd.core import commands as C


class Code(StrEnum):
    """Every code an apply result carries. The api maps refusals to gRPC statuses
    (schedd.api.service.RESULT_STATUS); the leader matches codes, never strings."""

    OK = "ok"
    INVALID = "invalid"
    NOT_FOUND = "not_found"
    EXISTS = "exists"
    CONFLICT = "conflict"
    EXHAUSTED = "exhausted"
    BLOCKED = "blocked"
    ABORTED = "aborted"
    STALE = "stale"                  # a fencing token that is not the current attempt's
    STALE_TERM = "stale_term"        # an entry from a leader epoch that is not the current one
    INTERNAL = "internal"            # an unexpected exception inside apply (a bug)
    FEATURE_LEVEL = "feature_level"  # a kind above the cluster's feature level (schedd.core.features)
    BUILD_BEHIND = "build_behind"    # the cluster's level is above this build's: NOT applied (see state.apply)
    # SLA verdicts that refuse a miss (schedd.core.sla)
    RECORDED = "recorded"
    EXEMPT = "exempt"
    MET = "met"
    PENDING = "pending"


# ------------------------------------------------------------------ effects


@dataclass(slots=True, frozen=True)
class Launch:
    """An execution recorded by a fire or a trigger: the leader launches it at its due time."""

    job: str
    scheduled_ms: int


@dataclass(slots=True, frozen=True)
class CancelAttempt:
    """A running attempt was asked to stop: the leader pushes the cancel to its worker."""

    token: int
    execution_id: str


@dataclass(slots=True, frozen=True)
class EpochApplied:
    """An epoch (or noop) entry applied: the leader may start (or go on) leading this epoch."""

    epoch: int


@dataclass(slots=True, frozen=True)
class SlaMissed:
    """An SLA miss was recorded. The leader's SLA driver, the only proposer of `sla` entries,
    counts it and POSTs the webhook from its proposal's answer (the payload, which a retried
    proposal answered from the dedup table carries too); observers read this effect."""

    target: str                      # the execution id or the DAG run id
    message: str


Effect = Launch | CancelAttempt | EpochApplied | SlaMissed

_RESERVED = ("ok", "code", "msg", "deduplicated")


# ------------------------------------------------------------------ payloads

def _omit(default: Any = None) -> Any:
    """A field left out of the plain form while it holds its default (a key older results did
    not carry: the stored form, and so the state digest, stays what it was)."""
    return field(default=default, metadata={"omit": True})


@dataclass(slots=True, frozen=True)
class Payload:
    """What an entry of one kind answers besides its code. Each kind's answer is a frozen,
    slotted dataclass of its own; `plain()` is its part of the stored form (its fields, in
    order, as plain values), `from_plain` reads it back."""

    def plain(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.metadata.get("omit") and v == f.default:
                continue
            out[f.name] = [r.as_dict() for r in v] if f.metadata.get("results") else v
        return out

    @classmethod
    def from_plain(cls, d: Mapping[str, Any], kind: str = "") -> Payload:
        """`kind`: the entry kind of nested results (`START` for a claim batch's shares...)."""
        kw = {}
        for f in fields(cls):
            if f.name in d:
                v = d[f.name]
                kw[f.name] = (tuple(ApplyResult.from_dict(r, f.metadata["results"]) for r in v)
                              if f.metadata.get("results") else v)
        return cls(**kw)

    @classmethod
    def fits(cls, d: Mapping[str, Any]) -> bool:
        """Whether a stored form holds every field this payload requires."""
        return all(f.name in d for f in fields(cls) if f.default is MISSING)


def _results(kind: str) -> Any:
    """A field holding the results of the parts of a batch entry (each of entry kind `kind`)."""
    return field(default=(), metadata={"results": kind})


@dataclass(slots=True, frozen=True)
class Empty(Payload):
    """Nothing more than the code."""


@dataclass(slots=True, frozen=True)
class Refused(Payload):
    """What a refusal may say besides its message."""

    position: int | None = _omit()             # the job of a batch that was refused (1-based)
    problem: str = _omit("")                   # the ACL table's own code for it
    cluster_level: int | None = _omit()        # BUILD_BEHIND: the cluster's feature level


@dataclass(slots=True, frozen=True)
class Epoch(Payload):
    epoch: int


@dataclass(slots=True, frozen=True)
class Stored(Payload):
    """A job or a DAG written (put)."""

    created: bool
    name: str
    version: int


@dataclass(slots=True, frozen=True)
class Revised(Payload):
    """A job paused or resumed: its new version."""

    name: str
    version: int


@dataclass(slots=True, frozen=True)
class Named(Payload):
    """A job, DAG, policy or role deleted."""

    name: str


@dataclass(slots=True, frozen=True)
class PutMany(Payload):
    created: int
    updated: int


@dataclass(slots=True, frozen=True)
class Quota(Payload):
    key: str
    limit: int


@dataclass(slots=True, frozen=True)
class Members(Payload):
    members: int


@dataclass(slots=True, frozen=True)
class FeatureLevel(Payload):
    feature_level: int
    raised: bool


@dataclass(slots=True, frozen=True)
class Triggered(Payload):
    """An on-demand run recorded: its instant and state, and the items of the fire."""

    name: str
    scheduled_ms: int
    state: str
    items: list[Any]


@dataclass(slots=True, frozen=True)
class Items(Payload):
    """A fire (instants recorded) or a skip: [job, scheduled_ms, outcome] per item; a place:
    [job, scheduled_ms, placed_ms, outcome] (schedd.core.windows)."""

    items: list[Any]


@dataclass(slots=True, frozen=True)
class Backfilled(Payload):
    name: str
    created: int
    duplicates: int


@dataclass(slots=True, frozen=True)
class Claimed(Payload):
    """A claim committed: the attempt's fencing token and number."""

    token: int
    attempt: int


@dataclass(slots=True, frozen=True)
class Finished(Payload):
    """A result (or an expiry) recorded: the execution's state, and when it retries."""

    state: str
    retry_at: int | None = None
    never_started: bool = _omit(False)         # an expiry of a claim its worker never started


@dataclass(slots=True, frozen=True)
class Cancelled(Payload):
    """A cancel: CANCELLED at once, or RUNNING with the cancel pushed to the attempt's worker."""

    state: str
    token: int | None = _omit()
    cancel_requested: bool = _omit(False)


@dataclass(slots=True, frozen=True)
class BatchStaged(Payload):
    batch: str
    seq: int


@dataclass(slots=True, frozen=True)
class BatchAborted(Payload):
    """An abort: done, or answered with the counts of the commit that came first."""

    aborted: bool
    committed: bool = _omit(False)
    created: int | None = _omit()
    updated: int | None = _omit()


@dataclass(slots=True, frozen=True)
class DagRunStarted(Payload):
    name: str
    logical_ms: int
    run_id: str


@dataclass(slots=True, frozen=True)
class SlaMissRecorded(Payload):
    """An execution's SLA miss recorded (no name/scheduled_ms: it creates no execution)."""

    execution: str
    deadline_ms: int
    state: str
    message: str
    event_time_ms: int


@dataclass(slots=True, frozen=True)
class DagSlaMissRecorded(Payload):
    run_id: str
    deadline_ms: int
    state: str
    message: str
    event_time_ms: int


@dataclass(slots=True, frozen=True)
class AclStored(Payload):
    """A policy or a role written."""

    name: str
    created: bool


@dataclass(slots=True, frozen=True)
class Accessor(Payload):
    """A token created, deleted or bootstrapped."""

    accessor: str


@dataclass(slots=True, frozen=True)
class Anonymous(Payload):
    policy: str


@dataclass(slots=True, frozen=True)
class AuditAppended(Payload):
    kept: int
    dropped: int


@dataclass(slots=True, frozen=True)
class AuditNote(Payload):
    note: str


@dataclass(slots=True, frozen=True)
class AuditPruned(Payload):
    pruned: int


P = TypeVar("P", bound=Payload)


@dataclass(slots=True, frozen=True)
class ApplyResult:
    """One entry's outcome: its code, the refusal's message, the kind's typed payload, the
    effects the shell performs, and whether it is an answer given again (`deduplicated`)."""

    code: Code
    msg: str = ""
    payload: Payload = Empty()
    effects: tuple[Effect, ...] = ()
    deduplicated: bool = False

    @property
    def ok(self) -> bool:
        return self.code is Code.OK

    def of(self, kind: type[P]) -> P:
        """The payload as the kind the caller expects (it proposed the entry): a result of
        another kind is a bug, said at once (TypeError), never read as missing fields."""
        if not isinstance(self.payload, kind):
            raise TypeError(f"expected a {kind.__name__} result, got {self!r}")
        return self.payload

    def as_dict(self) -> dict[str, Any]:
        """The plain form kept in replicated state (the dedup table, a batch's outcomes):
        {"ok", "code", "msg" (refusals only), the payload's fields, "deduplicated" (answers
        given again)}, built directly."""
        ok_ = self.code is Code.OK
        out: dict[str, Any] = {"ok": ok_, "code": self.code.value}
        if not ok_:
            out["msg"] = self.msg
        out.update(self.payload.plain())
        if self.deduplicated:
            out["deduplicated"] = True
        return out

    def again(self) -> ApplyResult:
        """The same answer given again (a retried request, or a result already recorded)."""
        return replace(self, deduplicated=True)

    @staticmethod
    def from_dict(d: Mapping[str, Any], kind: str | tuple[type[Payload], ...] = ()) -> ApplyResult:
        """The inverse of `as_dict` (effects are not kept: see the module contract), for an
        entry of `kind` (its payload classes: `PAYLOADS`). Total, as apply must be: a code this
        version does not know (a newer node's) reads as INTERNAL, a payload it cannot place as
        Empty."""
        try:
            code = Code(d.get("code", "ok"))
        except ValueError:
            code = Code.INTERNAL
        if code is not Code.OK:
            payload: Payload = Refused.from_plain(d)
        else:
            kinds = PAYLOADS.get(kind, ()) if isinstance(kind, str) else kind
            cls = next((c for c in kinds if c.fits(d)), Empty)
            payload = cls.from_plain(d)
        return ApplyResult(code, str(d.get("msg", "")), payload, deduplicated=bool(d.get("deduplicated")))

    def __repr__(self) -> str:
        return f"ApplyResult({self.as_dict()!r}, effects={list(self.effects)!r})"


@dataclass(slots=True, frozen=True)
class Parts(Payload):
    """A group entry: each grouped entry's own result, in order."""

    parts: tuple[ApplyResult, ...] = ()


@dataclass(slots=True, frozen=True)
class ClaimedMany(Payload):
    """A `start_many`: each claim's own result, in order."""

    claims: tuple[ApplyResult, ...] = _results(C.START)


@dataclass(slots=True, frozen=True)
class FinishedMany(Payload):
    """A `finish_many`: each result's own outcome, in order."""

    results: tuple[ApplyResult, ...] = _results(C.FINISH)


@dataclass(slots=True, frozen=True)
class Retried(Payload):
    """A `run_retry`: the run waits for its next attempt (`attempt`, the number it will get)."""

    name: str
    scheduled_ms: int
    attempt: int


@dataclass(slots=True, frozen=True)
class Cleared(Payload):
    """A `dag_clear`: the run's tasks set to run again, in the DAG's order."""

    run_id: str
    tasks: tuple[str, ...]


# The payload classes an entry kind may answer with (the dedup table keeps the plain form:
# `ApplyResult.from_dict` reads it back as the first that fits).
PAYLOADS: dict[str, tuple[type[Payload], ...]] = {
    C.EPOCH: (Epoch,), C.NOOP: (Epoch,),
    C.PUT: (Stored,), C.PUT_MANY: (PutMany,), C.DELETE: (Named,), C.PAUSE: (Revised,), C.RESUME: (Revised,),
    C.QUOTA: (Quota,), C.TRIGGER: (Triggered,), C.FIRE: (Items,), C.SKIP: (Items,), C.BACKFILL: (Backfilled,),
    C.START: (Claimed,), C.START_MANY: (ClaimedMany,), C.FINISH: (Finished,), C.FINISH_MANY: (FinishedMany,),
    C.EXPIRE: (Finished,), C.CANCEL: (Cancelled,), C.SLA: (SlaMissRecorded, DagSlaMissRecorded),
    C.FEATURE_LEVEL: (FeatureLevel,), C.MEMBERS: (Members,), C.GROUP: (Parts,),
    C.DAG_PUT: (Stored,), C.DAG_DELETE: (Named,), C.DAG_RUN: (DagRunStarted,),
    C.BATCH_STAGE: (BatchStaged,), C.BATCH_COMMIT: (PutMany,), C.BATCH_ABORT: (BatchAborted,),
    C.ACL_POLICY_PUT: (AclStored,), C.ACL_POLICY_DELETE: (Named,), C.ACL_ROLE_PUT: (AclStored,),
    C.ACL_ROLE_DELETE: (Named,), C.ACL_TOKEN_CREATE: (Accessor,), C.ACL_TOKEN_DELETE: (Accessor,),
    C.ACL_ANONYMOUS_SET: (Anonymous,), C.ACL_BOOTSTRAP: (Accessor,), C.AUDIT_APPEND: (AuditAppended,),
    C.AUDIT_NOTE: (AuditNote,), C.AUDIT_CONFIG: (AuditPruned,),
    C.RUN_RETRY: (Retried,), C.DAG_CLEAR: (Cleared,),
    C.CALENDAR_PUT: (Stored,), C.CALENDAR_DELETE: (Named,), C.BLACKOUT_PUT: (Stored,), C.BLACKOUT_DELETE: (Named,),
    C.PLACE: (Items,), C.QUOTA_SHARE: (Quota,), C.QUOTA_ALLOC: (Quota,), C.SHARD_MAP: (Members,),
}


# A claim or result whose proposal's fate is unknown (no result to read): its error says why.
UNKNOWN = ApplyResult(Code.INTERNAL, "not confirmed")


def ok(payload: Payload = Empty(), *, effects: tuple[Effect, ...] = ()) -> ApplyResult:
    return ApplyResult(Code.OK, "", payload, effects)


def reject(code: Code | str, msg: str, **refused: Any) -> ApplyResult:
    """A refusal: nothing was changed (apply validates before it mutates). `refused`: the
    fields of `Refused` it carries (position, problem, cluster_level)."""
    return ApplyResult(Code(code), msg, Refused(**refused) if refused else Empty())
