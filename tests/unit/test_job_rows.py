"""Job rows keep their spec as a shared template (model.spec_template): memory per job, with the
spec read back byte for byte and the state digest what it was."""

from __future__ import annotations

import pickle
from dataclasses import fields

from hypothesis import given
from hypothesis import strategies as st

from schedd.core import commands as C
from schedd.core.model import Job, spec_of_template, spec_template
from schedd.core.image import JOB_FIELDS
from schedd.core.state import SchedulerState, _from_image
from tests.support.state import TOP_LEVEL, Harness, text


@given(st.text(), st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True))
def test_a_template_gives_back_the_exact_text(body, name):
    import json
    for t in (json.dumps({"x": body, "name": name, "labels": {"name": name, name: name}}), json.dumps(body)):
        assert spec_of_template(spec_template(t, name), name) == t


def test_jobs_made_from_one_template_share_one_string():
    h = Harness()
    specs = [text(name=f"j{i}", labels={"owner": f"j{i}"}, schedule="@every 1m") for i in range(3)]
    h.apply(C.PUT_MANY, rid="c/b", specs=specs)
    rows = [h.state.jobs[f"j{i}"] for i in range(3)]
    assert [r.spec_text for r in rows] == specs
    assert rows[0].spec_t is rows[1].spec_t is rows[2].spec_t


def test_the_digest_hashes_every_field_of_the_row_with_the_spec_in_place_of_its_template():
    assert list(Job.DIGEST_FIELDS) == [("spec_text" if n == "spec_t" else n) for n in JOB_FIELDS]
    shared = ("team", "schedule", "tz", "history_limit", "dst", "paused", "created_by", "version")
    assert {f.name for f in fields(Job)} - {"traits"} | set(shared) == set(JOB_FIELDS)


def test_a_format_4_image_with_full_spec_texts_restores_to_templates():
    h = Harness()
    h.put(name="j1", labels={"name": "j1"})
    job = h.state.jobs["j1"]
    row = tuple(job.spec_text if f == "spec_t" else getattr(job, f) for f in JOB_FIELDS)   # as format 4 wrote it
    image = _from_image(("schedd-state", 4), None, [row], [], h.state.epoch, {}, [], h.state.log_hash,
                        h.state.last_index, h.state.clock_ms)
    c = SchedulerState()
    c.restore(image)
    assert c.jobs["j1"].spec_text == job.spec_text and c.jobs["j1"].spec_t == job.spec_t
    again = SchedulerState()
    again.restore(pickle.loads(pickle.dumps(c.snapshot(), protocol=2)))
    assert again.state_digest() == c.state_digest() and again.jobs["j1"].spec_text == job.spec_text


def _restored(state: SchedulerState) -> SchedulerState:
    again = SchedulerState()
    again.restore(pickle.loads(pickle.dumps(state.snapshot(), protocol=2)))
    return again


def test_jobs_registered_alike_share_their_traits_and_instants_restored_or_not():
    h = Harness(level=TOP_LEVEL)          # snapshots in the plain format (6)
    specs = [text(name=f"j{i}", schedule="0 3 * * *", team="etl") for i in range(4)]
    h.apply(C.PUT_MANY, rid="c/b", specs=specs)
    for state in (h.state, _restored(h.state)):
        rows = [state.jobs[f"j{i}"] for i in range(4)]
        assert len({id(r.traits) for r in rows}) == 1 and rows[0].team == "etl" and rows[0].version == 1
        assert len({id(r.next_fire) for r in rows}) == 1
        assert len({id(r.created_ms) for r in rows} | {id(r.updated_ms) for r in rows}) == 1
    assert _restored(h.state).state_digest() == h.state.state_digest()


def test_changing_one_jobs_traits_leaves_the_others_alone():
    h = Harness()
    h.apply(C.PUT_MANY, rid="c/b", specs=[text(name=n, schedule="0 3 * * *") for n in ("a", "b")])
    assert h.apply(C.PAUSE, rid="c/p", name="a").ok
    a, b = h.state.jobs["a"], h.state.jobs["b"]
    assert (a.paused, a.version, b.paused, b.version) == (True, 2, False, 1)
    h.put(name="b", schedule="0 4 * * *", team="ops", history_limit=7)
    assert (b.schedule, b.team, b.history_limit, b.version, b.created_by) == ("0 4 * * *", "ops", 7, 2, "test")
    assert list(h.state.by_team["ops"]) == ["b"] and a.schedule == "0 3 * * *"


def test_what_a_row_answers_does_not_depend_on_the_memo_of_shared_traits(monkeypatch):
    from schedd.core import model
    monkeypatch.setattr(model, "TRAITS", model.TraitsMemo(limit=2))
    h = Harness()
    h.apply(C.PUT_MANY, rid="c/b", specs=[text(name=f"j{i}", schedule=f"{i} 3 * * *") for i in range(5)])
    rows = [h.state.jobs[f"j{i}"] for i in range(5)]
    assert [r.schedule for r in rows] == [f"{i} 3 * * *" for i in range(5)]
    assert _restored(h.state).state_digest() == h.state.state_digest()
    assert model.TraitsMemo(limit=8).get("t", "s", "UTC", 5, "", 0, "by", 1)[5] is False   # never 0


def test_the_table_of_instants_forgets_the_past_and_keeps_every_next_fire():
    h = Harness()
    h.state.instants = {t: t for t in range(2000)}       # instants long past
    h.state._instants_kept = 0
    h.put(name="j1", schedule="@every 10s")
    job = h.state.jobs["j1"]
    assert h.state.instants == {job.next_fire: job.next_fire}


# What the build before the shared traits (9e34c32) gave for `_one_log()`: the digest and the
# plain image's text are what a replica of either build compares and restores.
DIGEST_BEFORE_TRAITS = "bc8eedbc43f3f63cea955aab0ddc4e7c39dab0588f0a68a4416c8e43dd065a62"
PLAIN_SHA256_BEFORE_TRAITS = "634bb3e77521d55aad32f489eb5f7e38e128444ee9512cf7adf7a07dccd98cd5"


def _one_log() -> SchedulerState:
    """Puts in a batch and alone, fires, pauses, resumes (one catching up), updates of schedule,
    team and history limit, and a delete, at feature level 4 (snapshots in the plain format)."""
    h = Harness(level=4)
    h.apply(C.PUT_MANY, rid="c/1", specs=[text(name=f"j{i}", schedule=f"{i % 7} * * * *", team=("a", "b")[i % 2])
                                         for i in range(40)])
    for i in range(5):
        h.put(name=f"s{i}", schedule="@every 10s", history_limit=3, dst_gap="skip" if i % 2 else "")
    for step in range(30):
        h.now += 10_000
        h.plan_and_fire(lookahead=0)
        if step == 3:
            h.apply(C.PAUSE, rid="c/p", name="j3")
            h.apply(C.PAUSE, rid="c/p2", name="s1")
        if step == 9:
            h.apply(C.RESUME, rid="c/r", name="j3", catch_up=True)
            h.apply(C.RESUME, rid="c/r2", name="s1")
        if step == 12:
            h.put(name="j4", schedule="5 * * * *", team="c")
            h.apply(C.DELETE, rid="c/d", name="j5")
        if step == 20:
            h.put(name="s2", schedule="@every 20s", history_limit=2, team="z")
    return h.state


def test_the_digest_and_the_snapshot_text_are_what_the_build_before_the_shared_traits_wrote():
    import hashlib

    from schedd.core import plain
    state = _one_log()
    assert state.execs and any(j.gaps for j in state.jobs.values())
    assert state.state_digest() == DIGEST_BEFORE_TRAITS
    assert hashlib.sha256(plain.dumps(state).encode()).hexdigest() == PLAIN_SHA256_BEFORE_TRAITS
    again = _restored(state)
    assert again.state_digest() == DIGEST_BEFORE_TRAITS
    assert hashlib.sha256(plain.dumps(again).encode()).hexdigest() == PLAIN_SHA256_BEFORE_TRAITS
