"""check_specs (apply, every node) parses a batch's first text of each shape and takes the texts
that differ from it only in the top-level name without parsing them (jobs._Shape). Whatever the
entry holds (a proposer's canonical texts or hand-made ones), the result must be exactly what
parsing each text gives: the same specs, schedules and texts, or the same refusal."""

from __future__ import annotations

import pytest

from schedd.core import jobs
from schedd.core.model import ValidationError, canonical_spec

SHELL = '{"handler":{"shell":{"command":"true"}},'


def _full(texts: list) -> object:
    out = []
    for i, t in enumerate(texts, 1):
        try:
            out.append(jobs.committed_spec(t))
        except ValidationError as e:
            return ("refused", i, str(e))
    return out


def _shaped(texts: list) -> object:
    r = jobs.check_specs(texts)
    if isinstance(r, list):
        return r
    return ("refused", r.payload.position, r.msg.partition(": ")[2])


def _canon(name: str, **extra) -> str:
    return canonical_spec({"name": name, "handler": {"shell": {"command": "true"}}, **extra})[1]


BATCHES = {
    "plain": [_canon(f"j-{i}") for i in range(6)],
    "hash schedule": [_canon(f"j-{i}", schedule="H * * * *") for i in range(6)],
    "two shapes": [_canon(f"j-{i}", team="a" if i % 2 else "b") for i in range(8)],
    "a field equal to a name": [_canon("j-1", description="j-2"), _canon("j-2", description="j-2"),
                                _canon("j-3", description="j-2")],
    "a nested name key": [SHELL + '"labels":{"name":"j-1"},"name":"j-1","schedule":"none","team":"t","timezone":"UTC"}',
                          SHELL + '"labels":{"name":"j-1"},"name":"j-2","schedule":"none","team":"t","timezone":"UTC"}'],
    "an escaped name literal": [SHELL + '"labels":{"k":"j-1"},"name":"j\\u002d1","schedule":"none","team":"t","timezone":"UTC"}',
                                SHELL + '"labels":{"k":"j-2"},"name":"j\\u002d1","schedule":"none","team":"t","timezone":"UTC"}'],
    "duplicate name keys": [SHELL + '"name":"j-1","name":"j-9","schedule":"none","team":"t","timezone":"UTC"}',
                            SHELL + '"name":"j-2","name":"j-9","schedule":"none","team":"t","timezone":"UTC"}'],
    "a name in an escaped quote": [SHELL + '"description":"x\\"j-1","name":"j-0","schedule":"none","team":"t","timezone":"UTC"}',
                                   SHELL + '"description":"x\\"j-1","name":"j-1","schedule":"none","team":"t","timezone":"UTC"}'],
    "bad names in the shape": [_canon("j-1"), _canon("j-1").replace('"j-1"', '"J-2"'),
                               _canon("j-1").replace('"j-1"', '"j-2\\n"')],
    "raw newline": [_canon("j-1"), _canon("j-1").replace('"j-1"', '"j-2\n"')],
    "a quote in the middle": [_canon("j-1"), _canon("j-1").replace('"j-1"', '"a","name":"b"')],
    "not text": [_canon("j-1"), 7, _canon("j-2")],
    "bad history limit": [_canon("j-1", history_limit=5), _canon("j-2", history_limit=5).replace("5", "0")],
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_a_batch_checks_as_each_text_parsed_alone(name):
    texts = BATCHES[name]
    assert _shaped(texts) == _full(texts)


def test_texts_of_one_shape_are_not_parsed_again(monkeypatch):
    parsed: list[object] = []
    real = jobs.load_job
    monkeypatch.setattr(jobs, "load_job", lambda t: parsed.append(t) or real(t))
    texts = BATCHES["plain"] + BATCHES["two shapes"]
    assert len(jobs.check_specs(texts)) == len(texts)
    assert len(parsed) == 3                # one per shape: plain, team a, team b
