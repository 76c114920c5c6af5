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
from tests.support.state import Harness, text


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


def test_the_digest_hashes_every_field_with_the_spec_in_place_of_its_template():
    names = [f.name for f in fields(Job)]
    assert list(Job.DIGEST_FIELDS) == [("spec_text" if n == "spec_t" else n) for n in names]


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
