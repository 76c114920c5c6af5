"""Specs survive every trip they make, and their committed form is what it was.

The trip a user's spec makes: request message -> the API's conversion (`convert.job_spec_from_pb`,
`dag_convert.dag_spec_from_pb`) -> typed spec -> committed text (the Raft entry) -> apply's read
(`specs.load_job`, `specs.load_dag`) -> typed spec -> the message `job get` / `dag get` answers.
For a request in canonical form the answer is the request itself, for every handler kind and
every sensor kind: a field the answer cannot say would be lost for the user who edits
`dag get -o yaml` and applies it again (a sensor task's sensor was, once). For any valid request
a second trip changes nothing.

The committed form: tests/unit/testdata/spec_corpus.json holds specs (drawn by
tests/support/spec_corpus.py and by the hypothesis strategies of tests/support/spec_strategies.py,
every handler kind, valid and not, and hand-made committed texts) with what the code before
typed specs committed for each: texts, refusals, DAG rows, pause rewrites, and the state digest.
This code must give the same bytes. And the typed records are lossless for any JSON object, so a
text apply rewrites keeps what it does not understand.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.json_format import ParseDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd.api.convert import job_spec_from_pb, job_spec_to_pb, spec_to_dict
from schedd.api.dag_convert import dag_spec_from_pb, dag_spec_to_pb
from schedd.core.specs import DagSpec, JobSpec, RawHandler, SensorHandler, dump, load_dag, load_job
from schedd_proto import dags_pb2 as dpb
from schedd_proto import scheduler_pb2 as pb
from tests.support import spec_corpus
from tests.support.spec_strategies import canonical_dags, canonical_jobs, job_inputs

SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ the trip through the API


@SLOW
@given(request=canonical_jobs())
def test_a_job_spec_survives_store_and_read(request: dict[str, Any]) -> None:
    msg = ParseDict(request, pb.JobSpec())
    spec, text = job_spec_from_pb(msg)                          # the API's conversion
    loaded = load_job(text).spec()                              # what apply reads from the entry
    assert loaded == spec and loaded.text() == text
    assert job_spec_to_pb(loaded) == msg                        # what `job get` answers


@SLOW
@given(request=job_inputs())
def test_any_valid_job_spec_is_a_fixpoint_of_store_and_read(request: dict[str, Any]) -> None:
    request.pop("env_secret", None)                             # sealed values: no proto form
    body = request["handler"].get("container", {})
    if "memory" in body:
        body["memory"] = str(body["memory"])                    # the message's field is text
    spec, text = job_spec_from_pb(ParseDict(request, pb.JobSpec()))
    answered = job_spec_to_pb(load_job(text).spec())
    assert job_spec_from_pb(answered) == (spec, text)           # applied again: the same spec
    assert spec_to_dict(job_spec_to_pb(spec)) == spec_to_dict(answered)


@SLOW
@given(request=canonical_dags())
def test_a_dag_spec_survives_store_and_read_for_every_task_kind(request: dict[str, Any]) -> None:
    msg = ParseDict(request, dpb.DagSpec())
    spec, text = dag_spec_from_pb(msg)
    loaded = load_dag(text)
    assert loaded == spec and loaded.text() == text
    answered = dag_spec_to_pb(loaded)                           # what `dag get` answers
    assert answered == msg
    assert dag_spec_from_pb(answered) == (spec, text)
    for task, given_task in zip(loaded.tasks, request["tasks"]):
        assert isinstance(task.handler, SensorHandler) == ("sensor" in given_task)


def test_secret_env_is_sealed_in_the_spec_and_masked_in_the_answer() -> None:
    from schedd.security.secrets import EnvSealer, open_secrets
    sealer = EnvSealer("s" * 40)
    msg = pb.JobSpec(name="pay", handler=pb.Handler(shell=pb.ShellHandler(command="env")),
                     env_secret={"DB_PASSWORD": "hunter2"})
    spec, text = job_spec_from_pb(msg, lambda name: {}, sealer)
    assert "hunter2" not in text and spec.env_secret["DB_PASSWORD"].version == 1
    assert open_secrets(load_job(text).spec().env_secret, sealer, "pay") == {"DB_PASSWORD": "hunter2"}
    answered = job_spec_to_pb(spec)
    assert dict(answered.env_secret) == {"DB_PASSWORD": "***(v1)"}
    assert job_spec_from_pb(answered, lambda name: spec.env_secret, sealer) == (spec, text)   # the mask keeps it


# ------------------------------------------------------------------ the committed form


def _differences(want: list[dict[str, Any]], got: list[dict[str, Any]]) -> list[str]:
    out = []
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        for key in sorted(set(w) | set(g)):
            if w.get(key) != g.get(key):
                out.append(f"#{i} {key}:\n  recorded {w.get(key)!r}\n  now      {g.get(key)!r}")
    return out


def test_the_committed_form_is_byte_for_byte_what_it_was() -> None:
    """Every spec of the corpus commits the text it did (or is refused with the same words), a
    DAG makes the same job rows, hand-made texts are stored and rewritten (pause, resume) as
    they were, and the state all of it makes has the digest it had."""
    recorded = json.loads(spec_corpus.CORPUS.read_text())
    now = spec_corpus.record(spec_corpus.inputs_of(recorded))
    for section in ("jobs", "dags", "committed", "drawn_jobs", "drawn_dags"):
        problems = _differences(recorded[section], now[section])
        assert not problems, f"{section}: {len(problems)} differences\n" + "\n".join(problems[:5])
    assert now["digest"] == recorded["digest"]


def test_the_corpus_covers_every_handler_kind_and_every_field() -> None:
    """The proof above is only as good as what the corpus holds."""
    recorded = json.loads(spec_corpus.CORPUS.read_text())
    jobs = [json.loads(c["text"]) for c in recorded["jobs"] + recorded["drawn_jobs"] if "text" in c]
    tasks = [t for c in recorded["dags"] + recorded["drawn_dags"] if "text" in c for t in json.loads(c["text"])["tasks"]]
    assert {next(iter(j["handler"])) for j in jobs} == {"shell", "http", "python", "container"}
    assert {next(iter(t["handler"])) for t in tasks} == {"shell", "http", "python", "container", "sensor"}
    assert {k for j in jobs for k in j} == set(JOB_KEYS) - {"dag", "task"}
    assert {k for j in jobs for k in j["handler"].get("shell", {})} == {"command", "argv", "workdir", "env", "inherit_env"}
    assert {k for j in jobs for k in j["handler"].get("container", {})} == {
        "image", "command", "args", "env", "workdir", "user", "network", "cpu", "memory", "pids", "read_only",
        "mounts", "pull"}


# ------------------------------------------------------------------ lossless records

JOB_KEYS = ("name", "team", "schedule", "timezone", "handler", "description", "labels", "worker_labels", "retry",
            "timeout_seconds", "overlap", "catchup", "max_active", "queue_limit", "concurrency_key",
            "concurrency_limit", "catchup_window_seconds", "catchup_max", "catchup_order", "starting_deadline_seconds",
            "jitter_seconds", "history_max_age_seconds", "dst_gap", "dst_fold", "sla", "delivery", "priority", "pool",
            "paused", "history_limit", "env_secret", "limits", "dag", "task")
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                           max_leaves=8)
REQUIRED = {"name": "a", "team": "t", "schedule": "", "timezone": "UTC"}


def _odd_values(draw: Any, keys: list[str]) -> dict[str, Any]:
    """Some of `keys` (or other keys) set to any JSON value, or to a canonical value of a record."""
    odd = st.one_of(json_values, st.just({}), st.just({"shell": {"command": "x"}}), st.just({"v": 1, "ct": "c"}),
                    st.just({"within_seconds": 5, "by": ""}), st.just({"sensor": {"file": "/x", "poll_interval_seconds": 1,
                                                                               "timeout_seconds": 2}}))
    return draw(st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), odd, max_size=4))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_job_spec_reads_and_writes_any_json_object_losslessly(data: st.DataObject) -> None:
    """Whatever a committed spec holds (an entry made by hand: apply stores it unchecked), the
    typed spec writes it back byte for byte: apply's rewrites keep what they do not know."""
    d = _odd_values(data.draw, list(JOB_KEYS)) | REQUIRED
    spec = JobSpec.from_dict(d)
    assert dump(spec.to_dict()) == dump(d)
    assert dump(spec.with_paused(True).to_dict()) == dump({**d, "paused": True})
    assert dump(spec.with_paused(False).to_dict()) == dump({k: v for k, v in d.items() if k != "paused"})


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_dag_spec_reads_and_writes_any_json_object_losslessly(data: st.DataObject) -> None:
    task_keys = ["name", "handler", "upstream", "trigger_rule", "retry", "timeout_seconds", "pool", "worker_labels",
                 "description"]
    tasks = [_odd_values(data.draw, task_keys) | {"name": f"t{i}"} for i in range(data.draw(st.integers(0, 3)))]
    d = _odd_values(data.draw, ["description", "sla", "max_runs"]) | REQUIRED | {"tasks": tasks}
    assert dump(DagSpec.from_dict(d).to_dict()) == dump(d)


def test_a_handler_not_in_canonical_form_is_kept_as_committed() -> None:
    """No object, none of one known kind, two kinds, or a key the canonical form always writes
    missing: kept whole, and a worker gets it as the entry had it."""
    for raw in ({}, None, "shell", {"wasm": {}}, {"shell": {}, "http": {}}, {"shell": "x"},
                {"container": {"image": "localhost/a:1"}}):
        spec = JobSpec.from_dict({**REQUIRED, "handler": raw})
        assert spec.handler == RawHandler(raw) and spec.to_dict()["handler"] == raw


def test_values_equal_in_python_but_not_in_json_text_stay_apart() -> None:
    """True == 1 == 1.0 for Python, not for the committed text: whatever a spec reads it writes
    back with the same JSON type, however often an equal value was read before."""
    bodies = [{"http": {"url": "http://a.test", "method": "GET", "insecure_skip_verify": flag}} for flag in (True, 1, 1.0)]
    bodies += [{"container": {"image": "i", "network": "none", "read_only": True, "pull": "never", "cpu": cpu}}
               for cpu in (1, 1.0, True)]
    for _ in range(2):                                          # the second time, anything memoized is used
        for handler in bodies:
            d = {**REQUIRED, "handler": handler, "timeout_seconds": 30, "priority": 2}
            assert dump(JobSpec.from_dict(d).to_dict()) == dump(d)
            assert dump(JobSpec.from_dict({**d, "timeout_seconds": 30.0}).to_dict()) == dump({**d, "timeout_seconds": 30.0})


def test_a_key_a_later_version_may_add_inside_an_object_is_passed_over() -> None:
    """Readers always passed over a key they did not know inside a spec's objects (retry, sla,
    limits, a handler, a sensor): a later version may add one without a new feature level. The
    typed spec reads the values it knows, and writes the unknown key back as it came."""
    d = {**REQUIRED, "handler": {"sensor": {"file": "/x", "poll_interval_seconds": 5, "timeout_seconds": 60, "jitter": 1}},
         "retry": {"max_attempts": 3, "jitter": 0.1}, "sla": {"within_seconds": 60, "escalate": "ops"},
         "limits": {"memory_mb": 256, "swap_mb": 0}}
    spec = JobSpec.from_dict(d)
    assert isinstance(spec.handler, SensorHandler) and spec.handler.poll_interval_seconds == 5
    assert spec.retry is not None and spec.retry.max_attempts == 3
    assert spec.sla is not None and spec.sla.within_seconds == 60
    assert spec.limits is not None and spec.limits.memory_mb == 256
    assert dump(spec.to_dict()) == dump(d)
