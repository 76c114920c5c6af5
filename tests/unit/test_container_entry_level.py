"""A hand-made entry that carries a container spec without fl=6 (schedd.core.features.understated):
refused alike by every replica once the cluster is at level 6, stored below it as every older
build stores it, on each apply path that takes specs (put, put_many, batch stage, dag_put) and
inside a group. A refusal changes nothing but the log hash (the state digest stays)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from schedd.core import commands as C
from schedd.core import features as F
from schedd.core.dags import canonical_dag
from schedd.core.model import validate_spec
from schedd.core.results import Code
from schedd.core.state import SchedulerState
from tests.support.state import T0, text

BOX = {"image": "localhost/x:1", "command": "echo hi"}
# A build of a later level (7) than this one: the refusal must not depend on the build's table.
LATER = C.FeatureTable((*C.FEATURES.levels, C.Level(C.FEATURES.max_level + 1, note="a later build")))
# Digest after LOG_AT_5 on the last build before the container handler (3085262, feature level
# 5), obtained by applying LOG_AT_5 there (git archive 3085262 schedd): that build stores the
# unstamped container specs (its apply never validated a handler), so this build must too.
OLD_BUILD_DIGEST_AT_5 = "7dc61804e9239fbe81cc1fffb46dedffe0ff5cb887557bc4d6a14e4311e771a2"
T_OLD = 1_700_000_000_000


def box_spec(name: str) -> str:
    return validate_spec({"name": name, "schedule": "", "handler": {"container": BOX}}).text()


def dag_text() -> str:
    return canonical_dag({"name": "d1", "tasks": [{"name": "t1", "handler": {"container": BOX}}]})[1]


@dataclass(frozen=True, slots=True)
class Path:
    """One apply path that takes specs: its entry (with `fl` given, or not) and what it makes."""
    kind: str
    args: dict
    made: str                         # the job it creates when applied

    def entry(self, fl: int | None = None, now: int = T0 + 1) -> str:
        extra = {} if fl is None else {"fl": fl}
        return C.encode(self.kind, rid=f"c/{self.kind}", now=now, term=1, by="alice", **self.args, **extra)


PATHS = [
    Path(C.PUT, {"spec": box_spec("c1"), "name": "c1"}, "c1"),
    Path(C.PUT_MANY, {"specs": [text(name="s2"), box_spec("c2")]}, "c2"),
    Path(C.BATCH_STAGE, {"batch": "b1", "seq": 0, "specs": [box_spec("c3")]}, ""),
    Path(C.DAG_PUT, {"spec": dag_text(), "name": "d1"}, "d1:t1"),
]
IDS = [p.kind for p in PATHS]


def at(level: int, table: C.FeatureTable = C.FEATURES, now: int = T0) -> SchedulerState:
    s = SchedulerState(table)
    assert s.apply(C.encode(C.EPOCH, rid="", now=now, term=1), 1).ok
    assert s.apply(C.encode(C.FEATURE_LEVEL, rid="f", now=now, term=1, level=level), 2).ok
    return s


@pytest.mark.parametrize("path", PATHS, ids=IDS)
@pytest.mark.parametrize("table", [C.FEATURES, LATER], ids=["this-build", "later-build"])
def test_an_unstamped_container_entry_at_level_6_is_refused_and_changes_nothing_but_the_log_hash(
        path: Path, table: C.FeatureTable) -> None:
    for level in (6, table.max_level):
        s = at(level, table)
        digest, log_hash, clock, dedup, audit = (s.state_digest(), s.log_hash_hex(), s.clock_ms, dict(s.dedup),
                                                 len(s.audit))
        r = s.apply(path.entry(now=T0 + 5), 3)
        assert r.code is Code.INVALID, r
        assert r.msg == (f"malformed entry: a {path.kind!r} entry carrying a container spec must say fl=6 "
                         "(its proposer stamps it: schedd.core.specs.handler_level); this one says fl=1")
        assert s.state_digest() == digest and s.clock_ms == clock and s.dedup == dedup and not s.batches
        assert len(s.audit) == audit
        assert s.log_hash_hex() != log_hash and s.last_index == 3
        # the same request, stamped, applies afterwards (no dedup record stands in its way)
        assert s.apply(path.entry(fl=6), 4).ok
        if path.made:
            assert path.made in s.jobs


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_build_of_level_6_or_later_gives_the_same_result(path: Path) -> None:
    a, b = at(6), at(6, LATER)
    ra, rb = a.apply(path.entry(), 3), b.apply(path.entry(), 3)
    assert ra.as_dict() == rb.as_dict() and a.state_digest() == b.state_digest()


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_below_level_6_an_unstamped_entry_applies_as_on_older_builds(path: Path) -> None:
    """An older build stores it (module doc); refusing it here would split the replicas."""
    old, new = at(5, C.table_upto(5)), at(5)
    ro, rn = old.apply(path.entry(), 3), new.apply(path.entry(), 3)
    assert ro.ok and rn.ok and ro.as_dict() == rn.as_dict()
    assert old.state_digest() == new.state_digest()
    # stamped, it is refused by the gate on both, changing nothing
    digest = new.state_digest()
    assert new.apply(path.entry(fl=6), 4).code is Code.FEATURE_LEVEL and new.state_digest() == digest


def test_the_older_builds_digest_of_the_same_log_is_this_builds() -> None:
    """LOG_AT_5 applied here gives the digest the level-5 build 3085262 computed for it."""
    s = at(5, now=T_OLD)
    log = [
        C.encode(C.PUT, rid="c/put", now=T_OLD + 1, term=1, by="alice", spec=box_spec("c1"), name="c1"),
        C.encode(C.PUT_MANY, rid="c/pm", now=T_OLD + 2, term=1, by="alice", specs=[box_spec("c2")]),
        C.encode(C.BATCH_STAGE, rid="c/st", now=T_OLD + 3, term=1, by="alice", batch="b1", seq=0,
                 specs=[box_spec("c3")]),
        C.encode(C.BATCH_COMMIT, rid="c/cm", now=T_OLD + 4, term=1, by="alice", batch="b1", chunks=1),
        C.encode(C.DAG_PUT, rid="c/dag", now=T_OLD + 5, term=1, by="alice", spec=dag_text(), name="d1"),
    ]
    assert all(s.apply(e, i).ok for i, e in enumerate(log, 3))
    assert s.state_digest() == OLD_BUILD_DIGEST_AT_5


def test_a_grouped_unstamped_container_put_is_refused_on_its_own() -> None:
    """Only puts are grouped (C.GROUPABLE): each part is gated as an entry of its own."""
    shell = C.encode(C.PUT, rid="c/shell", now=T0, term=1, by="t", spec=text(name="s1"), name="s1")
    s = at(6)
    parts = s.apply(C.encode(C.GROUP, rid="", now=T0, term=1, entries=[shell, PATHS[0].entry()]), 3).payload.parts
    assert parts[0].ok and parts[1].code is Code.INVALID and "must say fl=6" in parts[1].msg
    assert "s1" in s.jobs and "c1" not in s.jobs


@pytest.mark.parametrize("args", [
    {"spec": text(name="s1", labels={"container": "yes"}), "name": "s1"},   # the key, not a handler
    {"spec": text(name="s1", command='echo "container": 1'), "name": "s1"},  # inside a string
    {"spec": '{"container": ', "name": "s1"},                               # not JSON: put says why
], ids=["label", "string", "not-json"])
def test_a_spec_that_only_mentions_container_is_not_refused_here(args: dict) -> None:
    s = at(6)
    r = s.apply(C.encode(C.PUT, rid="c/p", now=T0, term=1, **args), 3)
    assert r.ok or "must say fl" not in r.msg
    assert F.content_level(C.decode(C.encode(C.PUT, rid="", now=T0, term=1, **args))) == 1
