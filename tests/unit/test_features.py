"""Feature levels (schedd.core.features): the table, the replicated level, apply's gate, and a
rolling upgrade simulated with two versions of the table: an old node (levels 1..1, it does not
know `audit_note`) and a new one apply the same log with the same results and digests."""

from __future__ import annotations

import json
import pickle

import pytest

from schedd.core import commands as C
from schedd.core import features as F
from schedd.core.results import Code
from schedd.core.image import FEATURE_LEVEL_KEY, READABLE_FORMATS
from schedd.core.state import SchedulerState
from tests.support.state import T0, text


def entry(kind: str, rid: str, *, now: int = T0, term: int = 1, **args) -> str:
    return C.encode(kind, rid=rid, now=now, term=term, by="test", **args)


def test_every_kind_is_registered_at_exactly_one_level() -> None:
    registered = [k for lv in C.FEATURES.levels for k in lv.kinds]
    assert sorted(registered) == sorted(C.KINDS), \
        "register every entry kind in schedd/core/features.py FEATURES, a new kind at a new level"
    assert C.FEATURES.level_of(C.PUT) == 1 and C.FEATURES.level_of(C.FEATURE_LEVEL) == 1
    assert C.FEATURES.level_of(C.AUDIT_NOTE) == 2 and C.FEATURES.level_of(C.MEMBERS) == 2
    assert C.FEATURES.level_of(C.START_MANY) == C.FEATURES.level_of(C.FINISH_MANY) == 3
    assert C.FEATURES.levels[3].kinds == ()     # level 4: snapshot format 6 only
    assert C.FEATURES.max_level == 11 and C.FEATURES.levels[4].kinds == ()     # level 5: audit errors limited
    assert C.FEATURES.levels[5].kinds == ()                                     # level 6: container specs (fl)
    assert C.FEATURES.levels[6].kinds == (C.RUN_RETRY, C.DAG_CLEAR)             # level 7: run flow, history on disk
    assert C.FEATURES.levels[7].kinds == (C.CALENDAR_PUT, C.CALENDAR_DELETE,     # level 8: calendars, blackouts
                                          C.BLACKOUT_PUT, C.BLACKOUT_DELETE)
    assert C.FEATURES.levels[8].kinds == (C.PLACE,)                              # level 9: window placements
    assert C.FEATURES.snapshot_formats()[:4] == (1, 2, 3, 4)
    assert sorted(C.FEATURES.snapshot_formats()) == sorted(f[1] for f in READABLE_FORMATS), \
        "register a new snapshot format in schedd/core/features.py at a new level"


def test_a_table_refuses_gaps_and_a_kind_at_two_levels() -> None:
    with pytest.raises(ValueError, match="1..N"):
        C.FeatureTable((C.Level(1), C.Level(3)))
    with pytest.raises(ValueError, match="two feature levels"):
        C.FeatureTable((C.Level(1, kinds=("x",)), C.Level(2, kinds=("x",))))
    old = C.table_upto(1)
    assert old.max_level == 1 and old.level_of(C.AUDIT_NOTE) is None


def test_encode_stamps_only_kinds_above_level_1() -> None:
    assert "fl" not in json.loads(entry(C.PUT, "r", spec=text()))      # old logs encode as before
    assert json.loads(entry(C.AUDIT_NOTE, "n", note="x"))["fl"] == 2
    assert C.decode(entry(C.AUDIT_NOTE, "n", note="x")).level == 2


def test_proposers_refuse_a_kind_above_the_cluster_level() -> None:
    assert F.refusal(C.FEATURES, 1, C.PUT) is None
    assert F.refusal(C.FEATURES, 2, C.AUDIT_NOTE) is None
    msg = F.refusal(C.FEATURES, 1, C.AUDIT_NOTE)
    assert msg is not None and "needs feature level 2, cluster is at 1" in msg and "rolling upgrade" in msg
    assert "unknown to this build" in (F.refusal(C.table_upto(1), 2, C.AUDIT_NOTE) or "")
    s = SchedulerState()                       # what a leader loop asks before a newer kind
    assert F.enabled(s, C.PUT) and not F.enabled(s, C.AUDIT_NOTE)
    s.feature_level = 2
    assert F.enabled(s, C.AUDIT_NOTE) and not F.enabled(SchedulerState(C.table_upto(1)), C.AUDIT_NOTE)


def _log() -> list[str]:
    """A rolling upgrade's log: work at level 1, a level-2 entry refused, the leader raising the
    level (once the old node was upgraded), the level-2 entry applied."""
    return [
        entry(C.EPOCH, "epoch-n1-1"),
        entry(C.PUT, "c/put", spec=text()),
        entry(C.AUDIT_NOTE, "c/note-early", now=T0 + 1, note="upgrading n3"),
        entry(C.PUT, "c/put2", now=T0 + 2, spec=text(name="j2")),
        # hand-made: an entry claiming a level above every table is refused the same way
        json.dumps({**json.loads(entry(C.NOOP, "x", now=T0 + 3)), "fl": 3}, sort_keys=True),
        entry(C.FEATURE_LEVEL, "feature-2", now=T0 + 4, level=2),
        entry(C.AUDIT_NOTE, "c/note", now=T0 + 5, note="n3 upgraded"),
    ]


RAISE = 5          # position of the feature_level entry in _log()


def test_old_and_new_nodes_apply_the_same_log_identically_until_the_upgrade() -> None:
    old, new = SchedulerState(C.table_upto(1)), SchedulerState()
    log = _log()
    for index, e in enumerate(log[:RAISE], start=1):
        a, b = old.apply(e, index), new.apply(e, index)
        assert a.as_dict() == b.as_dict(), index
        assert old.state_digest() == new.state_digest() and old.log_hash == new.log_hash, index
    assert old.feature_level == new.feature_level == 1
    assert not any(r.action == C.AUDIT_NOTE for r in new.audit.records)    # refused: no record
    # Same refusal on both, with the level the entry needs and the cluster's.
    probe_old, probe_new = SchedulerState(C.table_upto(1)), SchedulerState()
    for s in (probe_old, probe_new):
        s.apply(log[0], 1)
    r_old, r_new = probe_old.apply(log[2], 2), probe_new.apply(log[2], 2)
    assert r_old.as_dict() == r_new.as_dict()
    assert r_new.code is Code.FEATURE_LEVEL and "needs feature level 2, cluster is at 1" in r_new.msg
    assert "needs feature level 3" in probe_new.apply(log[4], 3).msg

    # The old node is upgraded: restarted with the new table from its own snapshot. Then the
    # leader raises the level and the level-2 entry applies on both.
    upgraded = SchedulerState()
    upgraded.restore(pickle.loads(pickle.dumps(old.snapshot())))
    assert upgraded.state_digest() == new.state_digest()
    for index, e in enumerate(log[RAISE:], start=RAISE + 1):
        a, b = upgraded.apply(e, index), new.apply(e, index)
        assert a.as_dict() == b.as_dict() and a.ok, (index, a)
        assert upgraded.state_digest() == new.state_digest(), index
    assert new.feature_level == 2
    assert [r.target for r in new.audit.records if r.action == C.AUDIT_NOTE] == ["n3 upgraded"]


def test_an_old_node_never_applies_a_raise_above_its_build() -> None:
    """A node whose build is below the level the leader raises to (a rollback, or a
    joiner let in before the join check) must not apply the raise nor anything after it (it
    applied newer entries as INVALID, diverged, and once elected re-dispatched what it believed
    pending). apply answers BUILD_BEHIND and changes nothing, the log hash and index included,
    so the shell halts there with a state equal to the others' at the index before."""
    old, new = SchedulerState(C.table_upto(1)), SchedulerState()
    log = _log()
    for index, e in enumerate(log[:RAISE], start=1):
        assert old.apply(e, index).as_dict() == new.apply(e, index).as_dict()
    before = (old.state_digest(), old.log_hash, old.last_index)
    assert new.apply(log[RAISE], RAISE + 1).ok and new.feature_level == 2
    r = old.apply(log[RAISE], RAISE + 1)
    assert r.code is Code.BUILD_BEHIND and r.payload.cluster_level == 2 and "supports up to 1" in r.msg
    assert (old.state_digest(), old.log_hash, old.last_index) == before and old.feature_level == 1
    # a stale leader's raise is refused alike by every build: no reason to halt
    assert old.apply(entry(C.FEATURE_LEVEL, "stale", term=0, level=2), RAISE + 1).code is Code.STALE_TERM


def test_a_build_below_a_restored_snapshots_level_applies_nothing() -> None:
    """A snapshot of a cluster above this build (installed by the leader, or a rollback's own
    dump): every entry after it is refused as BUILD_BEHIND, unchanged, a level-1 kind too."""
    new = SchedulerState()
    for index, e in enumerate(_log()[:RAISE + 1], start=1):
        new.apply(e, index)
    old = SchedulerState(C.table_upto(1))
    old.restore(pickle.loads(pickle.dumps(new.snapshot())))
    digest = old.state_digest()
    r = old.apply(entry(C.PUT, "c/put3", now=T0 + 9, spec=text(name="j3")), RAISE + 2)
    assert r.code is Code.BUILD_BEHIND and r.payload.cluster_level == 2
    assert old.state_digest() == digest and old.last_index == RAISE + 1


def test_the_level_is_raised_by_the_current_leader_and_never_lowered() -> None:
    s = SchedulerState()
    s.apply(entry(C.EPOCH, "e", term=2), 1)
    assert s.apply(entry(C.FEATURE_LEVEL, "f1", term=1, level=2), 2).code is Code.STALE_TERM
    assert s.apply(entry(C.FEATURE_LEVEL, "f2", term=2, level=2), 3).ok and s.feature_level == 2
    again = s.apply(entry(C.FEATURE_LEVEL, "f3", term=2, level=2), 4)
    assert again.ok and again.payload.raised is False
    lower = s.apply(entry(C.FEATURE_LEVEL, "f4", term=2, level=1), 5)
    assert lower.code is Code.CONFLICT and s.feature_level == 2
    assert s.apply(entry(C.FEATURE_LEVEL, "f5", term=2, level="2"), 6).code is Code.INVALID


def test_the_level_survives_a_snapshot_and_older_images_load_at_level_1() -> None:
    s = SchedulerState()
    s.apply(entry(C.EPOCH, "e"), 1)
    s.apply(entry(C.FEATURE_LEVEL, "f", level=2), 2)
    restored = SchedulerState()
    restored.restore(pickle.loads(pickle.dumps(s.snapshot())))
    assert restored.feature_level == 2 and restored.state_digest() == s.state_digest()
    image = list(pickle.loads(pickle.dumps(s.snapshot())))
    del image[-1][FEATURE_LEVEL_KEY]            # an image written before feature levels
    older = SchedulerState()
    older.restore(tuple(image))
    assert older.feature_level == 1


def test_a_bad_level_field_is_a_malformed_entry() -> None:
    s = SchedulerState()
    bad = json.dumps({**json.loads(entry(C.NOOP, "x")), "fl": "2"}, sort_keys=True)
    r = s.apply(bad, 1)
    assert r.code is Code.INVALID and "fl" in r.msg


def test_an_entry_that_understates_its_level_is_refused_and_changes_nothing() -> None:
    old, new = SchedulerState(C.table_upto(1)), SchedulerState()
    crafted = json.loads(entry(C.AUDIT_NOTE, "c/n", note="x"))
    del crafted["fl"]
    for s in (old, new):
        s.apply(entry(C.EPOCH, "e"), 1)
        before = s.state_digest()
        assert not s.apply(json.dumps(crafted, sort_keys=True), 2).ok
        assert s.state_digest() == before and not s.dedup.get("c/n")
    assert new.apply(json.dumps(crafted, sort_keys=True), 3).code is Code.FEATURE_LEVEL
    assert old.state_digest() == new.state_digest()


def test_an_older_builds_table_is_for_test_mode_only(monkeypatch) -> None:
    from types import SimpleNamespace

    from schedd.testing.hooks import FEATURE_LEVEL_ENV, TestModeError, configure_node
    for var in ("SCHEDD_HISTORY_DIR", "SCHEDD_UNSAFE", "SCHEDD_RAFT_DIAL", "SCHEDD_FAILPOINT_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(FEATURE_LEVEL_ENV, "1")
    monkeypatch.delenv("SCHEDD_TEST_MODE", raising=False)
    with pytest.raises(TestModeError, match=FEATURE_LEVEL_ENV):
        configure_node(SimpleNamespace(test_mode=False, node_id="n1"))
    monkeypatch.setenv("SCHEDD_TEST_MODE", "1")
    faults = configure_node(SimpleNamespace(test_mode=True, node_id="n1"))
    assert faults.feature_table(C.FEATURES).max_level == 1
    monkeypatch.setenv(FEATURE_LEVEL_ENV, str(C.FEATURES.max_level + 1))
    with pytest.raises(TestModeError, match="feature level must be"):
        configure_node(SimpleNamespace(test_mode=True, node_id="n1"))


def test_the_snapshot_format_written_is_one_every_voter_reads():
    """Below level 3 a leader's image is format 4 (full spec texts), which a build before format 5
    reads; at level 3 it is format 5 (spec templates); at level 4 format 6 (plain values, one
    loader and one string: tests/unit/test_plain_image.py). All restore to the same state."""
    import pickle

    from schedd.core.snapshot import SnapshotImage
    from schedd.core.state import SchedulerState
    from tests.support.state import TOP_LEVEL, Harness
    assert C.FEATURES.format_for(1) == C.FEATURES.format_for(2) == 4 and C.FEATURES.format_for(3) == 5
    assert C.FEATURES.format_for(TOP_LEVEL) == 6
    for level, fmt in ((1, 4), (3, 5), (TOP_LEVEL, 6)):
        h = Harness(level=level)
        h.put(name="a")
        h.put(name="b")
        image = SnapshotImage(h.state)
        loader, args = image.__reduce__()
        tag = json.loads(args[0])["schema"] if fmt == 6 else args[0]
        assert (loader.__name__, tag) == (("_from_plain", ["schedd-plain-state", 1]) if fmt == 6
                                          else ("_from_image", ("schedd-state", fmt)))
        copy = SchedulerState()
        copy.restore(pickle.loads(pickle.dumps(image)))
        assert copy.state_digest() == h.state.state_digest()
        assert copy.jobs["a"].spec_text == h.state.jobs["a"].spec_text
