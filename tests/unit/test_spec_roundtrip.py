"""Specs survive the trip a user's spec makes: request message -> canonical spec (stored in the
log) -> the message `job get` / `dag get` answers -> a request again, for every handler kind
and every sensor kind. A field the answer cannot say would be lost for the user that edits
`dag get -o yaml` and applies it again (a sensor task's sensor was, until this test)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd.api.convert import spec_from_canonical, spec_to_dict
from schedd.api.dags_service import dag_spec_to_dict, dag_spec_to_pb
from schedd.core import dags as D
from schedd.core.model import validate_spec

words = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)
paths = words.map(lambda w: f"/srv/{w}")
env = st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True), words, max_size=3)

shell = st.one_of(
    st.builds(lambda c, w, e: {"shell": {"command": f"echo {c}", **({"workdir": w} if w else {}), **({"env": e} if e else {})}},
              words, st.none() | paths, env),
    st.builds(lambda a: {"shell": {"argv": ["echo", *a]}}, st.lists(words, min_size=1, max_size=3)))
http = st.builds(lambda w, m, h: {"http": {"url": f"http://example.test/{w}", "method": m,
                                           **({"headers": h} if h else {})}},
                 words, st.sampled_from(["GET", "POST", "PUT"]), st.dictionaries(st.sampled_from(["X-A", "X-B"]), words, max_size=2))
python = st.builds(lambda n, a: {"python": {"name": n, **({"args_json": '{"k": 1}'} if a else {})}}, words, st.booleans())
container = st.builds(
    lambda img, cmd, e, mem, cpu, pids, ro, net, mounts, user: {"container": {
        "image": f"localhost/{img}:1", **cmd, **({"env": e} if e else {}), **({"memory": f"{mem}Mi"} if mem else {}),
        **({"cpu": cpu} if cpu else {}), **({"pids": pids} if pids else {}), "read_only": ro, "network": net,
        **({"mounts": mounts} if mounts else {}), **({"user": user} if user else {})}},
    words, st.one_of(st.builds(lambda c: {"command": f"echo {c}"}, words),
                     st.builds(lambda a: {"args": ["echo", *a]}, st.lists(words, min_size=1, max_size=2))),
    env, st.none() | st.integers(6, 4096), st.none() | st.sampled_from([0.5, 1.0, 2.0]), st.none() | st.integers(1, 100),
    st.booleans(), st.sampled_from(["none", "host", "backend"]),
    st.lists(st.builds(lambda s, t, ro: {"source": s, "target": t, "read_only": ro}, paths, paths, st.booleans()),
             max_size=2, unique_by=lambda m: m["target"]),
    st.none() | st.sampled_from(["1000", "1000:1000", "app"]))
handlers = st.one_of(shell, http, python, container)
sensors = st.one_of(
    st.builds(lambda p: {"file": p}, paths), st.builds(lambda w: {"http_url": f"http://example.test/{w}"}, words),
    st.builds(lambda w: {"command": f"test -e /tmp/{w}"}, words)).map(
        lambda s: {**s, "poll_interval_seconds": 5, "timeout_seconds": 60})

SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(handler=handlers, schedule=st.sampled_from(["", "@every 30s", "0 2 * * *"]), retries=st.integers(0, 4))
def test_a_job_spec_survives_store_and_read(handler, schedule, retries) -> None:
    request = {"name": "job1", "schedule": schedule, "handler": handler, "description": "d",
               **({"retry": {"max_attempts": retries, "initial_backoff_seconds": 1.0}} if retries else {})}
    canonical = validate_spec(request)
    answered = spec_from_canonical(canonical)                   # what `job get` answers
    assert validate_spec(spec_to_dict(answered)) == canonical   # applied again: the same spec


@SLOW
@given(kinds=st.lists(st.one_of(handlers.map(lambda h: ("handler", h)), sensors.map(lambda s: ("sensor", s))),
                      min_size=1, max_size=5))
def test_a_dag_spec_survives_store_and_read_for_every_task_kind(kinds) -> None:
    tasks = [{"name": f"t{i}", kind: body, **({"upstream": [f"t{i - 1}"]} if i else {})}
             for i, (kind, body) in enumerate(kinds)]
    canonical, _ = D.canonical_dag(dag_spec_to_dict(dag_spec_to_pb({"name": "etl", "schedule": "@every 1m",
                                                                     "tasks": tasks})))
    answered = dag_spec_to_pb(canonical)                         # what `dag get` answers
    assert D.canonical_dag(dag_spec_to_dict(answered))[0] == canonical
    for task, (kind, body) in zip(answered.tasks, kinds):
        assert task.HasField("sensor") == (kind == "sensor")
