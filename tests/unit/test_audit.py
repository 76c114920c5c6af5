"""The audit trail (schedd/core/audit.py): the hash chain verifies, any altered field of any record
is found at its position (negative controls, in memory and in an exported file on disk),
retention keeps the chain verifiable, and the denied-rate limit is deterministic."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from schedd.core import audit
from schedd.core.audit import (
    Anchor, AuditEvent, AuditInputError, AuditRecord, AuditTrail, DeniedLimit, Outcome, Retention, event,
    verify,
)
from tests.support.audit import export_jsonl, parse_jsonl

T0 = 1_700_000_000_000


def _event(i: int, outcome: Outcome = "allowed", principal: str | None = None, t: int | None = None) -> AuditEvent:
    return event(time_ms=T0 + 1000 * i if t is None else t, principal=principal or f"token:{i % 3:016x}",
                 source=f"127.0.0.1:{5000 + i}", action=("Scheduler.PutJob", "Scheduler.DeleteJob")[i % 2],
                 target=f"job:j{i % 4}", outcome=outcome, request_id=f"req-{i}", log_index=10 + i,
                 detail="" if outcome == "allowed" else "missing capability 'write' on team:a")


def _trail(n: int = 12, **kw: object) -> AuditTrail:
    trail = AuditTrail(**kw)  # type: ignore[arg-type]
    for i in range(n):
        assert trail.append(_event(i, ("allowed", "denied", "error")[i % 3])) is not None
    return trail


def test_chain_verifies() -> None:
    trail = _trail()
    assert len(trail.records) == 12 and trail.verify() is None
    assert [r.seq for r in trail.records] == list(range(12))
    assert trail.head == trail.records[-1].hash != audit.GENESIS


def _altered(record: AuditRecord, name: str) -> AuditRecord:
    value = getattr(record, name)
    if name == "outcome":
        new: Any = "allowed" if value != "allowed" else "denied"
    elif name == "hash":
        new = ("1" if value[0] != "1" else "2") + value[1:]
    elif isinstance(value, int):
        new = value + 1
    else:
        new = value + "x"
    return replace(record, **{name: new})


@pytest.mark.parametrize("name", [*audit.HASHED_FIELDS, "hash"])
def test_any_altered_field_is_found_at_its_position(name: str) -> None:
    records = list(_trail().records)
    for i in range(len(records)):
        tampered = records[:i] + [_altered(records[i], name)] + records[i + 1:]
        assert verify(tampered) == i, (name, i)


def test_dropped_inserted_or_swapped_records_are_found() -> None:
    records = list(_trail().records)
    assert verify(records[:4] + records[5:]) == 4                       # dropped
    assert verify(records[:4] + [records[2]] + records[4:]) == 4          # duplicated
    assert verify(records[:3] + [records[4], records[3]] + records[5:]) == 3   # swapped
    assert verify(records[1:]) == 0                                       # a prefix cut without its anchor
    assert verify(records[1:], Anchor(1, records[0].hash)) is None        # ... and with it


def test_an_exported_file_altered_on_disk_fails_verify(tmp_path: Path) -> None:
    trail = _trail(20, retention=Retention(max_age_ms=0, max_records=15))
    path = tmp_path / "audit.jsonl"
    path.write_text(export_jsonl(trail.records, trail.anchor))
    anchor, records = parse_jsonl(path.read_text())
    assert anchor == trail.anchor and records == list(trail.records) and verify(records, anchor) is None
    lines = path.read_text().splitlines()
    lines[7] = lines[7].replace('"outcome":"denied"', '"outcome":"allowed"').replace(
        '"outcome":"error"', '"outcome":"allowed"').replace('"target":"job:', '"target":"job:x')
    path.write_text("\n".join(lines) + "\n")
    anchor, records = parse_jsonl(path.read_text())
    assert verify(records, anchor) == 6                  # line 0 is the anchor: line 7 is record 6
    with pytest.raises(AuditInputError):
        audit.from_json('{"seq": 1}')


def test_retention_by_count_and_age_keeps_the_chain_verifiable() -> None:
    trail = AuditTrail(retention=Retention(max_age_ms=0, max_records=5))
    for i in range(50):
        trail.append(_event(i))
        assert len(trail.records) <= 5 and trail.verify() is None
    assert trail.anchor.next_seq == 45 and trail.records[0].seq == 45
    aged = AuditTrail(retention=Retention(max_age_ms=10_000, max_records=0))
    for i in range(50):
        aged.append(_event(i))                        # one a second
    assert [r.seq for r in aged.records] == list(range(39, 50)) and aged.verify() is None   # age <= 10 s kept
    assert aged.prune(T0 + 1000 * 100) == 11 and not aged.records and aged.verify() is None
    assert aged.head == aged.anchor.hash and aged.next_seq == 50
    nxt = aged.append(_event(200))
    assert nxt is not None and nxt.seq == 50 and aged.verify() is None


def test_a_tighter_retention_prunes_at_once_and_a_bad_anchor_fails() -> None:
    trail = _trail(20)
    assert trail.configure(Retention(max_age_ms=0, max_records=4), DeniedLimit(), T0 + 20_000) == 16
    assert [r.seq for r in trail.records] == [16, 17, 18, 19] and trail.verify() is None
    assert verify(list(trail.records), Anchor(16, "not a hash")) == 0
    assert verify(list(trail.records), Anchor(16, audit.GENESIS)) == 0


def test_snapshot_round_trip_and_a_tampered_snapshot_is_refused() -> None:
    trail = _trail(30, retention=Retention(max_age_ms=0, max_records=10))
    copy = audit.trail_from_dict(audit.trail_to_dict(trail))
    assert list(copy.records) == list(trail.records) and copy.anchor == trail.anchor
    assert audit.canonical_rows(copy) == audit.canonical_rows(trail)
    raw = audit.trail_to_dict(trail)
    rows = raw["records"]
    assert isinstance(rows, list)
    rows[3][2] = "token:forged"                         # the principal of the fourth record
    with pytest.raises(AuditInputError, match="breaks at record 3"):
        audit.trail_from_dict(raw)


# ---------------------------------------------------------------- the denied-rate limit


def _flood(limit: DeniedLimit, times: list[int], principal: str = "token:00000000000000aa") -> AuditTrail:
    trail = AuditTrail(denied_limit=limit)
    for i, t in enumerate(times):
        trail.append(_event(i, "denied", principal, t))
    return trail


def test_denied_records_are_rate_limited_per_principal_and_counted() -> None:
    limit = DeniedLimit(burst=3, refill_ms=1000)
    trail = _flood(limit, [T0] * 10)                             # ten denied calls at one instant
    assert len(trail.records) == 3 and trail.buckets["token:00000000000000aa"].suppressed == 7
    kept = trail.append(_event(99, "denied", "token:00000000000000aa", T0 + 1000))   # one token back
    assert kept is not None and kept.suppressed == 7
    assert trail.append(_event(100, "denied", "token:00000000000000aa", T0 + 1500)) is None
    other = trail.append(_event(101, "denied", "token:00000000000000bb", T0 + 1500))
    assert other is not None and other.suppressed == 0          # another principal has its own bucket
    for i in range(20):                                          # allowed calls are never limited
        assert trail.append(_event(200 + i, "allowed", "token:00000000000000aa", T0 + 1500)) is not None
    assert trail.verify() is None


def test_the_denied_limit_is_deterministic() -> None:
    limit = DeniedLimit(burst=4, refill_ms=700)
    times = [T0 + (i * 137) % 5000 for i in range(200)]          # jittery, partly going back in time
    a, b = _flood(limit, times), _flood(limit, times)
    assert list(a.records) == list(b.records) and audit.canonical_rows(a) == audit.canonical_rows(b)
    assert 0 < len(a.records) < 200
    kept = len(a.records) + sum(r.suppressed for r in a.records) + sum(x.suppressed for x in a.buckets.values())
    assert kept == 200                                           # every denied call is kept or counted


def test_a_smaller_burst_applies_to_existing_buckets() -> None:
    trail = _flood(DeniedLimit(burst=10, refill_ms=1000), [T0])
    trail.configure(trail.retention, DeniedLimit(burst=2, refill_ms=1000), T0)
    kept = [trail.append(_event(i, "denied", "token:00000000000000aa", T0)) for i in range(5)]
    assert sum(r is not None for r in kept) == 2


def test_time_going_back_adds_no_tokens() -> None:
    limit = DeniedLimit(burst=1, refill_ms=1000)
    trail = _flood(limit, [T0 + 5000, T0, T0 + 1000, T0 + 5999, T0 + 6000])
    assert [r.time_ms for r in trail.records] == [T0 + 5000, T0 + 6000]


def test_idle_full_buckets_are_forgotten() -> None:
    limit = DeniedLimit(burst=2, refill_ms=1000)
    trail = AuditTrail(denied_limit=limit)
    for p in range(5):
        trail.append(_event(p, "denied", f"token:{p:016x}", T0))
    assert len(trail.buckets) == 5
    trail.prune(T0 + 1000)                                       # each spent one of two: full again
    assert trail.buckets == {}


# ---------------------------------------------------------------- reading


def test_select_filters() -> None:
    records = list(_trail(12).records)
    assert [r.seq for r in audit.select(records, since_ms=T0 + 9000)] == [9, 10, 11]
    assert {r.principal for r in audit.select(records, principal="token:0000000000000001")} == {"token:0000000000000001"}
    assert [r.seq for r in audit.select(records, target="job:j1", action="Scheduler.DeleteJob")] == [1, 5, 9]
    assert [r.seq for r in audit.select(records, outcome="denied", limit=2)] == [1, 4]
    assert audit.select(records, principal="nobody") == []


def test_events_are_validated_and_long_text_is_cut() -> None:
    long = event(time_ms=T0, principal="p", source="s", action="a", target="job:" + "x" * 5000,
                 outcome="denied", detail="d" * 5000)
    assert len(long.target) == audit.MAX_TEXT and len(long.detail) == audit.MAX_DETAIL
    with pytest.raises(AuditInputError, match="bad outcome"):
        AuditEvent(T0, "p", "s", "a", "t", "maybe")  # type: ignore[arg-type]
    with pytest.raises(AuditInputError, match="bad time_ms"):
        AuditEvent(-1, "p", "s", "a", "t", "allowed")
    with pytest.raises(AuditInputError):
        DeniedLimit(burst=0)


def test_an_appended_record_hashes_as_verification_recomputes_it():
    """AuditTrail.append hashes the field values it builds the record from; they must be the
    record's HASHED_FIELDS, in order, or every verification would fail."""
    trail = AuditTrail()
    prev = trail.head
    for i, outcome in enumerate(("allowed", "error", "denied")):
        rec = trail.append(_event(i, outcome))
        assert rec is not None and rec.hash == audit.chain_hash(prev, rec)
        assert audit.encode(rec) == audit.encode(replace(rec, hash="")) and rec.suppressed == 0
        prev = rec.hash


def test_error_records_count_under_the_denied_limit_when_asked() -> None:
    """Writes apply refuses are noise a token can send; from feature level 5
    they share the principal's denied-record bucket (`limit_errors`), below it all are kept."""
    limit = DeniedLimit(burst=3, refill_ms=1000)
    old, new = AuditTrail(denied_limit=limit), AuditTrail(denied_limit=limit)
    for i in range(10):
        ev = _event(i, "error", "token:00000000000000aa", T0)
        assert old.append(ev) is not None
        new.append(ev, limit_errors=True)
    assert len(old.records) == 10 and len(new.records) == 3
    kept = new.append(_event(20, "error", "token:00000000000000aa", T0 + 1000), limit_errors=True)
    assert kept is not None and kept.suppressed == 7 and new.verify() is None


def test_records_pruned_younger_than_the_age_bound_are_counted_and_kept_in_snapshots() -> None:
    """Count pruning that drops records younger than `max_age_ms` means the
    trail holds less history than configured: counted (with when), for the metric and warning."""
    trail = AuditTrail(retention=Retention(max_age_ms=60_000, max_records=5))
    for i in range(5):
        trail.append(_event(i, t=T0 - 120_000 + i))       # old enough to go by age anyway
    trail.append(_event(5, t=T0))                          # prunes the expired ones: not counted
    assert trail.young_pruned == 0
    for i in range(6, 10):
        trail.append(_event(i, t=T0 + i))
    assert trail.young_pruned == 0 and len(trail.records) == 5
    trail.append(_event(10, t=T0 + 10))                    # drops a 10 ms old record by count
    assert (trail.young_pruned, trail.young_pruned_ms) == (1, T0)   # the time of the newest record gone
    back = audit.trail_from_dict(audit.trail_to_dict(trail))
    assert (back.young_pruned, back.young_pruned_ms) == (1, T0)
    legacy = audit.trail_to_dict(trail)
    del legacy["young_pruned"]                             # an image from before the counter
    assert audit.trail_from_dict(legacy).young_pruned == 0
    no_age = AuditTrail(retention=Retention(max_age_ms=0, max_records=1))
    for i in range(3):
        no_age.append(_event(i))
    assert no_age.young_pruned == 0                        # no age bound: nothing is "too young"
    warning = audit.short_history(trail, T0 + 1000)
    assert warning is not None and "1 records were pruned by count (max_records 5)" in warning
    assert audit.short_history(trail, T0 + 60_000) is None     # the window has moved past it
    assert audit.short_history(AuditTrail(), T0) is None
