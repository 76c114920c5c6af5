"""What `SchedulerState.apply` returns: a typed result (a code, a message, a payload) and the
effects the shell performs because of it (schedd.leader, schedd.api).

Contract:
- `ApplyResult` is immutable and reads like the dict results older code and the tests match
  (`r["ok"]`, `r["code"]`, `r.get("token")`): `Mapping` over {"ok", "code", "msg" (refusals
  only), **payload}. New code reads `r.code` (a `Code`), `r.ok`, `r.payload`, `r.effects`.
- What is stored in replicated state (the dedup table, a batch's outcome) is `as_dict()`: plain
  values, so the snapshot format and the state digest are what they were. A result answered
  again from the dedup table is rebuilt with `from_dict` and carries no effects: effects are
  reported once, by the apply that made them.
- Effects describe what to do, never do it: apply stays pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


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

_RESERVED = ("ok", "code", "msg")


@dataclass(slots=True, frozen=True, eq=False)
class ApplyResult(Mapping[str, Any]):
    """One entry's outcome. Equal to a mapping with the same items (Mapping's __eq__)."""

    code: Code
    msg: str = ""
    payload: Mapping[str, Any] = field(default_factory=dict)
    effects: tuple[Effect, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is Code.OK

    def __getitem__(self, key: str) -> Any:
        if key == "ok":
            return self.code is Code.OK
        if key == "code":
            return self.code.value
        if key == "msg" and self.code is not Code.OK:
            return self.msg
        return self.payload[key]

    def __iter__(self) -> Iterator[str]:
        yield "ok"
        yield "code"
        if self.code is not Code.OK:
            yield "msg"
        yield from (k for k in self.payload if k not in _RESERVED)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        if key in ("ok", "code"):
            return True
        if key == "msg":
            return self.code is not Code.OK
        return key in self.payload

    def as_dict(self) -> dict[str, Any]:
        """The plain form kept in replicated state (dedup table, batch outcomes): the items in
        iteration order, built directly (Mapping's items() cost ~9 µs per applied entry)."""
        ok_ = self.code is Code.OK
        out: dict[str, Any] = {"ok": ok_, "code": self.code.value}
        if not ok_:
            out["msg"] = self.msg
        for k, v in self.payload.items():
            if k not in _RESERVED:
                out[k] = v
        return out

    def with_payload(self, **extra: Any) -> ApplyResult:
        return ApplyResult(self.code, self.msg, {**self.payload, **extra}, self.effects)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ApplyResult:
        """The inverse of `as_dict` (effects are not kept: see the module contract). Total, as
        apply must be: a code this version does not know (a newer node's) reads as INTERNAL."""
        payload = {k: v for k, v in d.items() if k not in _RESERVED}
        try:
            code = Code(d.get("code", "ok"))
        except ValueError:
            code = Code.INTERNAL
        return ApplyResult(code, str(d.get("msg", "")), payload)

    def __repr__(self) -> str:
        return f"ApplyResult({self.as_dict()!r}, effects={list(self.effects)!r})"


def ok(*, effects: tuple[Effect, ...] = (), **payload: Any) -> ApplyResult:
    return ApplyResult(Code.OK, "", payload, effects)


def reject(code: Code | str, msg: str, **payload: Any) -> ApplyResult:
    """A refusal: nothing was changed (apply validates before it mutates)."""
    return ApplyResult(Code(code), msg, payload)
