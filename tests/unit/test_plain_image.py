"""The plain-value image (schedd.core.plain): every table round-trips exactly (rows equal
as dataclasses, so a tuple read back as a list is caught, and the digest equal), property-based
over random histories; a text that is not an image is refused in one line; and snapshot format
6, what pysyncobj pickles at feature level 4, names one loader and one string and nothing else."""

from __future__ import annotations

import json
import pickle
import pickletools

import pytest
from hypothesis import HealthCheck, given, settings

from schedd.core import commands as C
from schedd.core import plain
from schedd.core.image import PLAIN_FORMAT
from schedd.core.state import SchedulerState
from tests.support.state import TOP_LEVEL, Harness, at_top_level, text
from tests.unit.test_backup import rich_state
from tests.unit.test_state import OPS, _fingerprint, _run_ops

TABLES = ("jobs", "execs", "dedup", "dags", "dag_runs", "quotas", "batches", "members", "epoch", "log_hash",
          "last_index", "clock_ms", "feature_level", "acl")


def round_trip(state: SchedulerState) -> SchedulerState:
    again = SchedulerState()
    again.restore(plain.loads(plain.dumps(state)))
    return again


def assert_same(a: SchedulerState, b: SchedulerState) -> None:
    for table in TABLES:
        assert getattr(a, table) == getattr(b, table), table
    assert list(a.audit) == list(b.audit)
    assert a.state_digest() == b.state_digest()
    assert _fingerprint(a) == _fingerprint(b)          # the rebuilt indexes too


def with_everything(h: Harness) -> Harness:
    """`h`'s state plus a request id remembered, a quota, a staged batch and a member row."""
    h.apply(C.QUOTA, rid="c/q1", key="team:ops", limit=3)
    assert h.apply(C.BATCH_STAGE, rid="", batch="b1", seq=0, specs=[text(name="staged")]).ok
    assert h.apply(C.MEMBERS, rid="", members=[["n1", "127.0.0.1:7001", "127.0.0.1:8001"]]).ok
    return h


def test_a_rich_state_round_trips_exactly() -> None:
    state = rich_state()
    assert state.dags and state.dag_runs and state.execs and len(state.audit)
    assert_same(round_trip(state), state)


def test_every_table_round_trips_at_the_top_level() -> None:
    h = with_everything(Harness(level=TOP_LEVEL))
    h.put(name="a", retry={"max_attempts": 2, "initial_backoff_seconds": 5})
    h.plan_and_fire(lookahead=20_000)
    assert h.state.dedup and h.state.quotas and h.state.batches and h.state.members and h.state.execs
    assert_same(round_trip(h.state), h.state)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_random_histories_round_trip_and_keep_agreeing(ops) -> None:
    h = _run_ops(ops)
    h.apply(C.QUOTA, rid="c/q", key="team:default", limit=2)
    restored = round_trip(h.state)
    assert_same(restored, h.state)
    assert restored.verify_snapshot_digest()
    h.now += 50_000
    nxt = C.encode(C.TRIGGER, rid="c/t", now=h.now, term=1, by="t", name="a")
    assert h.state.apply(nxt, 10 ** 6) == restored.apply(nxt, 10 ** 6)
    assert restored.state_digest() == h.state.state_digest()


@pytest.mark.parametrize("text, expect", [
    ("", "not a plain state image"), ("[]", "unknown plain image schema"),
    ('{"schema": ["schedd-plain-state", 99]}', "unknown plain image schema"),
    ('{"schema": ["schedd-plain-state", 1], "fields": {}}', "row fields are not this build's"),
])
def test_what_is_not_an_image_is_refused_in_one_line(text: str, expect: str) -> None:
    with pytest.raises(plain.PlainError, match=expect) as e:
        plain.loads(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("mangle", [
    lambda d: d["jobs"][0].pop(),                          # a row one field short
    lambda d: d.__setitem__("epoch", "1"),                 # a string where a number goes
    lambda d: d.__setitem__("execs", {}),                  # an object where an array goes
    lambda d: d.__setitem__("log_hash", "zz"),
    lambda d: d.pop("audit"),
])
def test_a_mangled_image_is_refused(mangle) -> None:
    doc = plain.to_plain(rich_state())
    doc = json.loads(json.dumps(doc))
    mangle(doc)
    with pytest.raises(plain.PlainError):
        plain.loads(json.dumps(doc))


def test_format_6_pickles_as_one_loader_and_one_string() -> None:
    """What a follower unpickles at level 4: a global naming the loader, a string, a call. No
    schedd class, no other global: the rows come from the JSON text, not from pickle opcodes."""
    state = with_everything(Harness(level=TOP_LEVEL)).state
    assert state.feature_level >= 4
    data = pickle.dumps(state.snapshot(), protocol=2)          # pysyncobj's protocol
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(data)]
    globals_ = [arg for name, arg in ops if name in ("GLOBAL", "STACK_GLOBAL")]
    assert globals_ == ["schedd.core.state _from_plain"]
    assert [name for name, _ in ops] == ["PROTO", "GLOBAL", "BINPUT", "BINUNICODE", "BINPUT", "TUPLE1",
                                         "BINPUT", "REDUCE", "BINPUT", "STOP"]
    again = SchedulerState()
    again.restore(pickle.loads(data))
    assert_same(again, state)


def test_clusters_below_level_4_still_write_format_5() -> None:
    """A voter of the previous build cannot read format 6 (rolling upgrade)."""
    h = Harness(level=3)
    data = pickle.dumps(h.state.snapshot(), protocol=2)
    assert b"_from_plain" not in data and b"_from_image" in data
    assert PLAIN_FORMAT == ("schedd-state", 6)
    assert at_top_level(SchedulerState()).feature_level == TOP_LEVEL
