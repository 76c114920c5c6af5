"""The audit trail: a replicated, hash-chained, bounded record of who did what.

Every mutating call, allowed or denied, and every login failure becomes one `AuditRecord`,
appended by apply (so every replica holds the same trail). Each record carries
`hash = sha256(previous hash || canonical encoding of its fields)`, so altering, dropping,
inserting or reordering any record breaks the chain at that position, and `verify` names it.

Retention removes a prefix (records older than `max_age_ms`, and the oldest past `max_records`);
the hash of the last removed record and the next sequence number stay behind as the `Anchor`, so
what remains still verifies from the anchor. An exported file starts with its anchor line.

Noise cannot flush the trail: DENIED records are rate-limited per principal by a token bucket
whose time is the records' own time (the leader's timestamp on the entry), so every replica
keeps and drops the same records. A dropped record is not lost without trace: the next kept
denied record of that principal says how many were suppressed before it. From feature level 5
an ERROR record (a write apply refused) is counted under the same limit: writes that pass
authorization yet fail (an object deleted meanwhile) are noise a token can send, too.

When `max_records` prunes a record younger than `max_age_ms`, the trail keeps less history
than the operator asked for: `young_pruned` counts such records and `young_pruned_ms` keeps
the time of the newest of them, so `short_history` can say, at any later time, whether the
trail still misses part of the window it should cover (a metric and a warning in `schedctl
cluster status`).

Contracts: pure and deterministic (no clock, I/O or randomness; time comes in the event); every
field is a bounded string or a non-negative int (over-long text is cut, deterministically, by
`event`); `AuditTrail.append` never raises on a valid `AuditEvent`.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Outcome = Literal["allowed", "denied", "error"]
OUTCOMES: tuple[Outcome, ...] = ("allowed", "denied", "error")
GENESIS = "0" * 64                  # the chain's first "previous hash"
FORMAT = 1                          # part of every hashed encoding: a format change is visible
MAX_TEXT = 256                      # principal, source, action, target, request id
MAX_DETAIL = 1024


class AuditInputError(ValueError):
    """An event or exported line that is not a valid audit record."""


@dataclass(slots=True, frozen=True)
class AuditEvent:
    """What happened, as the API shell (or apply, for failures it decides) reports it."""

    time_ms: int                    # the entry's time: the leader's clock, never a replica's
    principal: str                  # "token:<accessor>" | "anonymous" | "unauthenticated" | "node:<id>"
    source: str                     # the caller's address, "ip:port"
    action: str                     # the RPC, e.g. "Scheduler.PutJob"
    target: str                     # what it acts on, e.g. "job:nightly" or "team:payments"
    outcome: Outcome
    request_id: str = ""
    log_index: int = 0              # the Raft index of the entry that recorded it
    detail: str = ""                # e.g. the missing capability, an error message

    def __post_init__(self) -> None:
        for name in ("principal", "source", "action", "target", "request_id"):
            _check_text(getattr(self, name), name, MAX_TEXT)
        _check_text(self.detail, "detail", MAX_DETAIL)
        if self.outcome not in OUTCOMES:
            raise AuditInputError(f"bad outcome {self.outcome!r}: one of {', '.join(OUTCOMES)}")
        for name in ("time_ms", "log_index"):
            _check_int(getattr(self, name), name)


def event(*, time_ms: int, principal: str, source: str, action: str, target: str,
          outcome: Outcome, request_id: str = "", log_index: int = 0, detail: str = "") -> AuditEvent:
    """An `AuditEvent` with over-long text cut to its bound (a denied call with a 1 MiB job name
    must still be recorded, not refused)."""
    return AuditEvent(time_ms, principal[:MAX_TEXT], source[:MAX_TEXT], action[:MAX_TEXT],
                      target[:MAX_TEXT], outcome, request_id[:MAX_TEXT], log_index,
                      detail[:MAX_DETAIL])


@dataclass(slots=True, frozen=True)
class AuditRecord:
    """One link of the chain. `seq` counts from the trail's start and survives retention."""

    seq: int
    time_ms: int
    principal: str
    source: str
    action: str
    target: str
    outcome: Outcome
    request_id: str
    log_index: int
    detail: str
    suppressed: int                 # denied records of this principal dropped just before this one
    hash: str

    @property
    def result(self) -> str:
        """The apply result code of the entry that recorded it: `ok` when allowed, the refusal
        code when apply refused it (the detail starts with it), `denied` when never proposed."""
        if self.outcome == "error":
            return self.detail.partition(":")[0]
        return "ok" if self.outcome == "allowed" else "denied"


HASHED_FIELDS = tuple(f.name for f in fields(AuditRecord) if f.name != "hash")


def encode(record: AuditRecord) -> bytes:
    """The canonical bytes hashed for a record: every field but the hash, in a fixed order."""
    return _encode_values([getattr(record, n) for n in HASHED_FIELDS])


def _encode_values(values: list[Any]) -> bytes:
    return json.dumps([FORMAT, *values], separators=(",", ":"), ensure_ascii=False).encode()


def chain_hash(prev_hash: str, record: AuditRecord) -> str:
    return _chain_hash_values(prev_hash, [getattr(record, n) for n in HASHED_FIELDS])


def _chain_hash_values(prev_hash: str, values: list[Any]) -> str:
    return hashlib.sha256(bytes.fromhex(prev_hash) + _encode_values(values)).hexdigest()


@dataclass(slots=True, frozen=True)
class Anchor:
    """Where a (possibly pruned) trail starts: the next record's seq and the hash before it."""

    next_seq: int = 0
    hash: str = GENESIS


def verify(records: Sequence[AuditRecord], anchor: Anchor = Anchor()) -> int | None:
    """The position (index into `records`) of the first record that breaks the chain, or None.

    A record breaks it when its seq is not the next one, or its hash is not sha256 over the
    previous hash and its own fields: so a change to any field of record i is reported at i.
    """
    if not _is_hash(anchor.hash):
        return 0
    prev, seq = anchor.hash, anchor.next_seq
    for i, r in enumerate(records):
        if r.seq != seq or not _is_hash(r.hash) or chain_hash(prev, r) != r.hash:
            return i
        prev, seq = r.hash, seq + 1
    return None


# ---------------------------------------------------------------- the replicated trail


@dataclass(slots=True, frozen=True)
class Retention:
    """Keep records younger than `max_age_ms` and at most `max_records` (0: no bound)."""

    max_age_ms: int = 30 * 24 * 3600 * 1000
    max_records: int = 100_000

    def __post_init__(self) -> None:
        _check_int(self.max_age_ms, "max_age_ms")
        _check_int(self.max_records, "max_records")


@dataclass(slots=True, frozen=True)
class DeniedLimit:
    """Per principal: at most `burst` denied records at once, one more every `refill_ms`."""

    burst: int = 20
    refill_ms: int = 3_000

    def __post_init__(self) -> None:
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise AuditInputError(f"bad burst {self.burst!r}: at least 1")
        if isinstance(self.refill_ms, bool) or not isinstance(self.refill_ms, int) or self.refill_ms < 1:
            raise AuditInputError(f"bad refill_ms {self.refill_ms!r}: at least 1")


@dataclass(slots=True)
class Bucket:
    """A token bucket in whole tokens; `last_ms` is when the last whole token was added."""

    tokens: int
    last_ms: int
    suppressed: int = 0

    def refill(self, now_ms: int, limit: DeniedLimit) -> None:
        """Add one token per `refill_ms` since `last_ms`, up to `burst`; a clock going back adds
        nothing (the leader's clock may be behind its predecessor's)."""
        gained = (now_ms - self.last_ms) // limit.refill_ms if now_ms > self.last_ms else 0
        if self.tokens + gained >= limit.burst:
            self.tokens, self.last_ms = limit.burst, max(self.last_ms, now_ms)
        else:
            self.tokens, self.last_ms = self.tokens + gained, self.last_ms + gained * limit.refill_ms


@dataclass(slots=True)
class AuditTrail:
    """The replicated trail: records after `anchor`, and the denied-rate buckets."""

    retention: Retention = field(default_factory=Retention)
    denied_limit: DeniedLimit = field(default_factory=DeniedLimit)
    anchor: Anchor = field(default_factory=Anchor)
    records: deque[AuditRecord] = field(default_factory=deque)
    buckets: dict[str, Bucket] = field(default_factory=dict)
    young_pruned: int = 0           # records pruned by count while younger than max_age_ms
    young_pruned_ms: int = 0        # the time of the newest of them

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[AuditRecord]:
        return iter(self.records)

    def __getitem__(self, i: int) -> AuditRecord:
        return self.records[i]

    @property
    def head(self) -> str:
        """The newest hash: it covers the whole trail (shown by `schedctl audit verify`)."""
        return self.records[-1].hash if self.records else self.anchor.hash

    @property
    def next_seq(self) -> int:
        return self.records[-1].seq + 1 if self.records else self.anchor.next_seq

    def append(self, ev: AuditEvent, *, limit_errors: bool = False) -> AuditRecord | None:
        """Record `ev` and apply retention at its time; None when a DENIED event (an ERROR one
        too, with `limit_errors`: feature level 5) is rate-limited (it is counted, and the
        principal's next kept limited record carries the count)."""
        suppressed = 0
        if ev.outcome == "denied" or (limit_errors and ev.outcome == "error"):
            bucket = self._bucket(ev.principal, ev.time_ms)
            if bucket.tokens == 0:
                bucket.suppressed += 1
                return None
            bucket.tokens -= 1
            suppressed, bucket.suppressed = bucket.suppressed, 0
        # The hashed fields in HASHED_FIELDS' order (one record built, not built and replaced:
        # this runs for every audited entry).
        seq = self.next_seq
        values: list[Any] = [seq, ev.time_ms, ev.principal, ev.source, ev.action, ev.target,
                             ev.outcome, ev.request_id, ev.log_index, ev.detail, suppressed]
        record = AuditRecord(seq, ev.time_ms, ev.principal, ev.source, ev.action, ev.target, ev.outcome,
                             ev.request_id, ev.log_index, ev.detail, suppressed,
                             _chain_hash_values(self.head, values))
        self.records.append(record)
        self.prune(ev.time_ms)
        return record

    def _bucket(self, principal: str, now_ms: int) -> Bucket:
        bucket = self.buckets.get(principal)
        if bucket is None:
            bucket = self.buckets[principal] = Bucket(self.denied_limit.burst, now_ms)
        bucket.refill(now_ms, self.denied_limit)
        return bucket

    def prune(self, now_ms: int) -> int:
        """Drop the prefix past retention at `now_ms` (the entry's time); the anchor moves to it.

        Also forgets buckets that are full again and owe no suppressed count, so the table of
        buckets stays as small as the set of recently noisy principals. Returns records dropped.
        """
        dropped = 0
        too_old = now_ms - self.retention.max_age_ms if self.retention.max_age_ms else None
        cap = self.retention.max_records
        while self.records and ((cap and len(self.records) > cap)
                                or (too_old is not None and self.records[0].time_ms < too_old)):
            gone = self.records.popleft()
            self.anchor = Anchor(gone.seq + 1, gone.hash)
            dropped += 1
            if too_old is not None and gone.time_ms >= too_old:
                self.young_pruned, self.young_pruned_ms = self.young_pruned + 1, gone.time_ms
        for key in sorted(self.buckets):
            b = self.buckets[key]
            if b.suppressed == 0 and b.tokens + max(0, now_ms - b.last_ms) // self.denied_limit.refill_ms \
                    >= self.denied_limit.burst:
                del self.buckets[key]
        return dropped

    def configure(self, retention: Retention, denied_limit: DeniedLimit, now_ms: int) -> int:
        """New bounds (an `audit_config` entry at `now_ms`); a tighter retention prunes at once."""
        self.retention, self.denied_limit = retention, denied_limit
        return self.prune(now_ms)

    def verify(self) -> int | None:
        return verify(self.records, self.anchor)


def short_history(trail: AuditTrail, now_ms: int) -> str | None:
    """Why the trail covers less than its `max_age_ms` at `now_ms` (None: it does not): a
    record that count pruning dropped would still be within the age window."""
    age = trail.retention.max_age_ms
    if not age or not trail.young_pruned or now_ms - trail.young_pruned_ms >= age:
        return None
    since = trail.records[0].time_ms if trail.records else now_ms
    return (f"audit trail: {trail.young_pruned} records were pruned by count (max_records "
            f"{trail.retention.max_records}) while younger than max_age ({age // 1000} s); it holds "
            f"only the last {max(0, now_ms - since) // 1000} s: raise max_records (schedctl audit "
            f"config --max-records), or find who writes so much (schedctl audit list)")


def canonical_rows(trail: AuditTrail) -> list[list[object]]:
    """What the state digest hashes for the trail: the head hash covers every kept record."""
    return [["anchor", trail.anchor.next_seq, trail.anchor.hash],
            ["head", trail.next_seq, trail.head],
            ["retention", trail.retention.max_age_ms, trail.retention.max_records],
            ["denied_limit", trail.denied_limit.burst, trail.denied_limit.refill_ms],
            *(["bucket", k, b.tokens, b.last_ms, b.suppressed]
              for k, b in sorted(trail.buckets.items()))]


def trail_to_dict(trail: AuditTrail) -> dict[str, object]:
    """A JSON-able form for snapshots; `trail_from_dict` reads it back (and verifies it)."""
    return {"retention": [trail.retention.max_age_ms, trail.retention.max_records],
            "denied_limit": [trail.denied_limit.burst, trail.denied_limit.refill_ms],
            "anchor": [trail.anchor.next_seq, trail.anchor.hash],
            "records": [[getattr(r, n) for n in (*HASHED_FIELDS, "hash")] for r in trail.records],
            "buckets": [[k, b.tokens, b.last_ms, b.suppressed] for k, b in sorted(trail.buckets.items())],
            "young_pruned": [trail.young_pruned, trail.young_pruned_ms]}


def trail_from_dict(d: Mapping[str, Any]) -> AuditTrail:
    """Inverse of `trail_to_dict`; a snapshot whose chain does not verify is refused."""
    names = (*HASHED_FIELDS, "hash")
    try:
        age, cap = d["retention"]
        burst, refill = d["denied_limit"]
        seq, anchor_hash = d["anchor"]
        records = deque(from_json(json.dumps(dict(zip(names, row, strict=True)))) for row in d["records"])
        buckets = {str(k): Bucket(int(t), int(last), int(sup)) for k, t, last, sup in d["buckets"]}
        young, young_ms = d.get("young_pruned", (0, 0))       # absent in older images
    except (KeyError, TypeError, ValueError) as e:
        raise AuditInputError(f"bad audit snapshot: {e}") from None
    if not _is_hash(anchor_hash):
        raise AuditInputError("bad audit snapshot: anchor hash")
    trail = AuditTrail(Retention(age, cap), DeniedLimit(burst, refill),
                       Anchor(_check_int(seq, "next_seq"), anchor_hash), records, buckets,
                       _check_int(young, "young_pruned"), _check_int(young_ms, "young_pruned_ms"))
    bad = trail.verify()
    if bad is not None:
        raise AuditInputError(f"bad audit snapshot: the chain breaks at record {bad}")
    return trail


# ---------------------------------------------------------------- reading: filter, and records from their JSON


def select(records: Sequence[AuditRecord] | deque[AuditRecord], *, since_ms: int | None = None, principal: str | None = None,
           target: str | None = None, action: str | None = None, outcome: Outcome | None = None,
           limit: int | None = None, until_ms: int | None = None, before_seq: int | None = None,
           newest_first: bool = False) -> list[AuditRecord]:
    """Records matching every given filter (exact matches; `until_ms` and `before_seq`
    exclusive), oldest first (or newest first), at most `limit`: a page of a long trail is
    `newest_first` with `before_seq` the last page's lowest seq."""
    out: list[AuditRecord] = []
    for r in (reversed(records) if newest_first else records):
        if (since_ms is not None and r.time_ms < since_ms) or (principal is not None and r.principal != principal) \
                or (target is not None and r.target != target) or (action is not None and r.action != action) \
                or (outcome is not None and r.outcome != outcome) \
                or (until_ms is not None and r.time_ms >= until_ms) or (before_seq is not None and r.seq >= before_seq):
            continue
        out.append(r)
        if limit is not None and len(out) >= limit:
            break
    return out


def from_json(line: str) -> AuditRecord:
    """A record from one exported line; types are checked, the hash is left for `verify`."""
    try:
        d = json.loads(line)
    except ValueError as e:
        raise AuditInputError(f"not JSON: {e}") from None
    if not isinstance(d, dict) or set(d) != {*HASHED_FIELDS, "hash"}:
        raise AuditInputError(f"an audit record has exactly the fields {', '.join((*HASHED_FIELDS, 'hash'))}")
    for n in ("seq", "time_ms", "log_index", "suppressed"):
        _check_int(d[n], n)
    for n in ("principal", "source", "action", "target", "request_id", "detail", "hash"):
        _check_text(d[n], n, MAX_DETAIL)
    if d["outcome"] not in OUTCOMES:
        raise AuditInputError(f"bad outcome {d['outcome']!r}")
    return AuditRecord(**d)


# ---------------------------------------------------------------- field checks


def _check_text(value: object, name: str, bound: int) -> str:
    if not isinstance(value, str) or len(value) > bound:
        raise AuditInputError(f"bad {name}: a string of at most {bound} characters")
    return value


def _check_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AuditInputError(f"bad {name} {value!r}: a non-negative integer")
    return value


def _is_hash(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
