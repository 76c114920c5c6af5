"""SpecTemplates (schedd.api.templates) validates a batch's jobs that differ only by name once:
for every job it must give exactly what canonical_spec gives, or refuse as the full path does."""

from __future__ import annotations

import copy

import pytest
from google.protobuf.json_format import ParseDict

from schedd.api.convert import spec_to_dict
from schedd.api.service import BatchRefused, _canonical_batch
from schedd.api.templates import PLACEHOLDER, SpecTemplates
from schedd.core.model import ValidationError, canonical_spec
from schedd_proto import scheduler_pb2 as pb

from tests.unit.test_spec_to_dict import FULL

NO_SECRET = {**{k: v for k, v in FULL.items() if k not in ("env_secret", "max_active")},   # every field, valid
             "overlap": "queue", "history_max_age_seconds": 86400,
             "limits": {"memory_mb": "512", "cpu_seconds": 1.5, "open_files": 64, "processes": 2},
             "handler": {"shell": {"command": "x", "workdir": "/w", "env": {"A": "1"}, "inherit_env": ["X"]}}}


def _full_path(spec: pb.JobSpec):
    try:
        return canonical_spec(spec_to_dict(spec))
    except ValidationError as e:
        return f"refused: {e}"


def _templated(t: SpecTemplates, spec: pb.JobSpec):
    try:
        done = t.canonical(spec)
    except ValidationError as e:
        return f"refused: {e}"
    return _full_path(spec) if done is None else done


SHAPES = [
    pb.JobSpec(handler=pb.Handler(shell=pb.ShellHandler(command="true"))),
    ParseDict({**NO_SECRET, "name": ""}, pb.JobSpec()),
    pb.JobSpec(schedule="H * * * *", handler=pb.Handler(shell=pb.ShellHandler(command="x"))),   # H: per name
    pb.JobSpec(schedule="0 9 * * *", timezone="Europe/Berlin", description="a-1",            # a field = a name
               labels={"owner": "a-2"}, handler=pb.Handler(shell=pb.ShellHandler(command="a-1"))),
    pb.JobSpec(description=PLACEHOLDER, handler=pb.Handler(shell=pb.ShellHandler(command="x"))),
    pb.JobSpec(schedule="not a schedule", handler=pb.Handler(shell=pb.ShellHandler(command="x"))),
    pb.JobSpec(description="x" * 1024, labels={f"k{i}": "v" * 200 for i in range(64)},
               handler=pb.Handler(shell=pb.ShellHandler(command="x" * 1805))),                # a long name passes the size cap
]
TEMPLATED = {0, 1, 3, 6}        # the shapes the short path serves (the others take the full one)
NAMES = ["a-1", "a-2", "b." + "x" * 120, "z" * 128, "z" * 129, "Bad", "", "dag:task", PLACEHOLDER, "9", "a-1\n"]


@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_every_job_of_a_shape_gets_what_canonical_spec_gives(shape):
    t = SpecTemplates()
    for name in NAMES:
        spec = copy.deepcopy(SHAPES[shape])
        spec.name = name
        assert _templated(t, spec) == _full_path(spec), name
    spec = copy.deepcopy(SHAPES[shape])
    spec.name = "a-1"
    assert (t.canonical(spec) is not None) == (shape in TEMPLATED)


def test_secret_env_and_hash_schedules_take_the_full_path():
    t = SpecTemplates()
    secret = pb.JobSpec(name="s", env_secret={"A": "1"}, handler=pb.Handler(shell=pb.ShellHandler(command="x")))
    hashed = pb.JobSpec(name="h", schedule="H/5 * * * *", handler=pb.Handler(shell=pb.ShellHandler(command="x")))
    assert t.canonical(secret) is None and t.canonical(hashed) is None
    plain = pb.JobSpec(name="p", handler=pb.Handler(shell=pb.ShellHandler(command="x")))
    assert t.canonical(plain) is not None


def test_a_batch_refuses_a_bad_name_at_its_position():
    specs = [pb.JobSpec(name=f"j-{i}", handler=pb.Handler(shell=pb.ShellHandler(command="x"))) for i in range(5)]
    specs[3].name = "Bad Name"
    with pytest.raises(BatchRefused) as e:
        _canonical_batch(specs, lambda name: {}, None)
    assert e.value.position == 4 and "'Bad Name' (#4 of 5)" in str(e.value) and "bad job name" in str(e.value)
    specs[3].name = "j-1"
    with pytest.raises(BatchRefused, match="appears more than once") as e:
        _canonical_batch(specs, lambda name: {}, None)
    assert e.value.position == 4


@pytest.mark.parametrize("text", ["", "abc", '"\\', "\x00\x1f\u00e9\u20ac\U0001F600", '{"a":"b\\n"}'])
def test_encoded_size_is_what_the_text_takes_inside_an_entry(text):
    """C.encoded_size (per job of a batch, so it skips json.dumps' set-up) must stay exact: the
    chunking of a batch into entries relies on it."""
    import json

    from schedd.core import commands as C
    assert C.encoded_size(text) == len(json.dumps(text)) + 1
    assert len(C.encode(C.BATCH_STAGE, rid="", now=1, term=1, batch="b", seq=0, specs=[text, text])) - \
        len(C.encode(C.BATCH_STAGE, rid="", now=1, term=1, batch="b", seq=0, specs=[text])) == C.encoded_size(text)


def test_a_name_with_a_final_newline_is_refused():
    """NAME_RE ends in "$", which also matches before a final newline: main registered "a\\n"."""
    with pytest.raises(ValidationError, match="bad job name"):
        canonical_spec({"name": "a\n", "handler": {"shell": {"command": "x"}}})


def test_a_bounded_cache_starts_over_when_full():
    """PutJob's cache lives as long as the node: bounded, and still exact after it starts over."""
    t = SpecTemplates(limit=2)
    for i in range(5):
        spec = pb.JobSpec(name=f"j-{i}", description=f"shape {i}", handler=pb.Handler(shell=pb.ShellHandler(command="x")))
        assert _templated(t, spec) == _full_path(spec)
        assert len(t._seen) <= 2


def test_one_table_shared_by_threads_gives_every_job_its_own_canonical_text():
    """The node's table is shared by the event loop and the batch threads: with a limit small
    enough that it keeps starting over while eight threads race through the shapes, every
    answer is still exactly the full path's."""
    import threading
    t = SpecTemplates(limit=2)
    wrong: list[str] = []

    def work(seed: int) -> None:
        for i in range(300):
            shape = (seed + i) % len(SHAPES)
            spec = copy.deepcopy(SHAPES[shape])
            spec.name = f"j{seed}-{i}"
            if _templated(t, spec) != _full_path(spec):
                wrong.append(spec.name)
    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert wrong == []
