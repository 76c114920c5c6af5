"""A corpus of job and DAG specs, and what the state machine makes of each: the evidence that a
change of how specs are represented in code leaves their committed form byte for byte as it was.

`job_inputs` and `dag_inputs` draw specs as users send them (the proto as a dict), across every
handler kind (shell command and argv, http, python, container, DAG sensors) and every optional
field, valid and not; `drawn_inputs` adds valid ones drawn by the hypothesis strategies of
tests/support/spec_strategies.py; `committed_inputs` draws committed texts apply may meet without
any proposer having checked them (hand-made entries: unknown keys, non-canonical values).
`record` runs them through the code of this checkout:

- jobs: the canonical text `canonical_spec` commits, or the refusal's message;
- DAGs: the canonical text of `canonical_dag` (or the refusal), and the text of every job row
  apply derives from it (its tasks and its schedule row);
- committed texts: what apply answers to a `put` of each, the row text stored, and the text after
  a pause and after a resume (apply rewrites the stored spec there);
- the state digest after all of it (schedd.core.digest): rows, results, dedup records.

`tests/unit/testdata/spec_corpus.json` holds the inputs and what the code before the typed
specs recorded (`python -m tests.support.spec_corpus` writes it; do that only on purpose, after
reading the difference). tests/unit/test_spec_roundtrip.py replays the inputs and asserts the
same outputs.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core.model import ValidationError, canonical_spec, spec_of_template
from schedd.core.state import SchedulerState

CORPUS = Path(__file__).resolve().parents[1] / "unit" / "testdata" / "spec_corpus.json"
SEED = 20_261_206
T0 = 1_800_000_000_000

SCHEDULES = ("", "@every 30s", "@every 1m", "0 2 * * *", "*/5 * * * *", "H H * * *", "@daily", "@hourly",
             "0 */2 * * *", "30 1 * * 1-5", "at 2031-01-01T00:00:00Z", "0 0 2 * * *", "H(0-29) 3 * * *")
BAD_SCHEDULES = ("bogus", "61 * * * *")
BAD = 0.02          # how often a value is drawn from the invalid ones


def _pick(r: random.Random, *choices: Any) -> Any:
    return choices[r.randrange(len(choices))]


def _maybe(r: random.Random, p: float = 0.3) -> bool:
    return r.random() < p


def _one(r: random.Random, good: tuple[Any, ...], bad: tuple[Any, ...] = ()) -> Any:
    """A valid value, or (rarely) an invalid one."""
    return _pick(r, *bad) if bad and r.random() < BAD else _pick(r, *good)


def _env(r: random.Random, names: tuple[str, ...] = ("A", "PATH_X", "DB_URL", "_UNDER", "lower")) -> dict[str, str]:
    return {_one(r, names, ("B=C", "")): _one(r, ("1", "v", "", "two words"), ("x\0y",))
            for _ in range(r.randrange(1, 4))}


def _shell(r: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {}
    form = _one(r, ("command", "argv"), ("both", "neither"))
    if form in ("command", "both"):
        body["command"] = _pick(r, "true", "echo hi", "exit 3", "printf '%s' \"$X\"")
    if form in ("argv", "both"):
        body["argv"] = _one(r, (["echo", "hi"], ["/bin/true"], ["a", ""]), ([], ["x", 3]))
    if _maybe(r):
        body["workdir"] = _pick(r, "/srv", "/tmp/work", "")
    if _maybe(r):
        body["env"] = _env(r)
    if _maybe(r, 0.2):
        body["inherit_env"] = _one(r, (["HOME"], ["PATH", "HOME", "PATH"], []), (["SCHEDD_TOKEN"], ["1BAD"]))
    return {"shell": body}


def _http(r: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {"url": _one(r, ("http://example.test/hook", "https://h.test:8443/x?y=1"),
                                        ("ftp://nope", ""))}
    if _maybe(r, 0.6):
        body["method"] = _one(r, ("GET", "post", "PUT", "PATCH", "DELETE", ""), ("TRACE",))
    if _maybe(r):
        body["headers"] = {_pick(r, "X-A", "Authorization", "x-b"): _pick(r, "1", "Bearer t", "")}
    if _maybe(r):
        body["body"] = _pick(r, '{"a": 1}', "plain", "")
    if _maybe(r, 0.3):
        body["insecure_skip_verify"] = _pick(r, True, False)
    return {"http": body}


def _python(r: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {"name": _one(r, ("rec", "report.build"), ("",))}
    if _maybe(r, 0.4):
        body["args_json"] = _one(r, ('{"k": 1}', "[1, 2]", ""), ("not json",))
    return {"python": body}


def _container(r: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {"image": _one(r, ("localhost/app:1", "docker.io/library/busybox@sha256:00"),
                                          ("-bad", ""))}
    form = _one(r, (0, 1, 2), (3,))
    if form == 1:
        body["command"] = _pick(r, "echo hi", "")
    elif form == 2:
        body["args"] = _pick(r, ["echo", "hi"], ["run"], [])
    elif form == 3:
        body["command"], body["args"] = "x", ["y"]
    for key, good, bad in (("env", ({"A": "1"}, {"B_2": "", "C": "3"}), ({"bad-name": "x"},)),
                           ("workdir", ("/work", "/srv/app"), ("relative", "/a/../b")),
                           ("user", ("1000", "1000:1000", "app"), ("bad user",)),
                           ("network", ("none", "host", "backend-net", ""), ("Bad Net",)),
                           ("cpu", (0.5, 1, 2.0, 0.01), (0.001, 4096)),
                           ("memory", (64, "64", "64Mi", "64M", "1Gi", "0.5Gi", "2048Ki", 0), ("1.5Mi", "2", "lots")),
                           ("pids", (10, 1, 0), (2_000_000,)),
                           ("read_only", (True, False), ()),
                           ("pull", ("never", "if-missing", ""), ("always",))):
        if _maybe(r):
            body[key] = _one(r, good, bad)
    if _maybe(r, 0.25):
        body["mounts"] = _one(r, ([{"source": "/data", "target": "/in"}],
                                  [{"source": "/data", "target": "/out", "read_only": False},
                                   {"source": "/logs", "target": "/var/log/app", "read_only": True}]),
                              ([{"source": "/a", "target": "/"}], [{"source": "/a", "target": "/b", "x": 1}]))
    return {"container": body}


HANDLERS = (_shell, _http, _python, _container)


def _handler(r: random.Random) -> Any:
    if r.random() < BAD:
        return _pick(r, {}, {**_shell(r), **_http(r)})
    return _pick(r, *HANDLERS)(r)


def _retry(r: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, good, bad in (("max_attempts", (0, 1, 3, 100), (101,)),
                           ("initial_backoff_seconds", (0, 1, 2.5, 60), (90000,)),
                           ("max_backoff_seconds", (0, 60, 600.5), (-1,)),
                           ("multiplier", (0, 1, 1.5, 2), (0.5,))):
        if _maybe(r, 0.5):
            out[key] = _one(r, good, bad)
    return out


def _sla(r: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if _maybe(r, 0.6):
        out["within_seconds"] = _one(r, (60, 90.5, 3600, 0.5), (0.0005, 40_000_000))
    if "within_seconds" not in out or _maybe(r, 0.4):
        out["by"] = _one(r, ("06:00", " 23:59 ", "00:00"), ("24:00", "6:00"))
    if "by" in out and _maybe(r, 0.3):
        out["timezone"] = _one(r, ("Europe/Berlin", "Asia/Kolkata"), ("Mars/Base",))
    if _maybe(r, 0.3):
        out["webhook"] = _one(r, ("http://hooks.test/sla", "https://h.test/x"), ("mailto:x",))
    return out


def _sealed(r: random.Random) -> dict[str, Any]:
    return {_one(r, ("DB_PASSWORD", "TOKEN", "API_KEY"), ("SCHEDD_X", "bad-name")):
            _one(r, ({"v": 1, "ct": "a1:AAAA"}, {"v": 3, "ct": "a1:BBBB"}), ({"v": 0, "ct": "x"}, "plain"))
            for _ in range(r.randrange(1, 3))}


def _limits(r: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, good, bad in (("memory_mb", ("256", 512, "1024"), ("15", "x")), ("cpu_seconds", (10, 2.5, "30"), (0.5,)),
                           ("open_files", (64, "128", 0), (1024.5,)), ("processes", (8, 0, "16"), ())):
        if _maybe(r, 0.5):
            out[key] = _one(r, good, bad)
    return out


OPTIONAL: tuple[tuple[str, Any], ...] = (
    ("team", lambda r: _one(r, ("default", "data", "ops.team", ""), ("Bad Team",))),
    ("timezone", lambda r: _one(r, ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", ""), ("Mars/Base",))),
    ("description", lambda r: _one(r, ("nightly report", "", "caf\u00e9 \u2603", 'say "hi"\\n'), ("d" * 1100,))),
    ("labels", lambda r: _one(r, ({"env": "prod"}, {"app.kubernetes.io/name": "x", "tier": ""}), ({"bad key": "x"},))),
    ("worker_labels", lambda r: _pick(r, {"gpu": "yes"}, {"zone": "a", "disk": "ssd"})),
    ("retry", _retry),
    ("timeout_seconds", lambda r: _one(r, (30, 2.5, 0, 3600.0), (700_000, "x"))),
    ("overlap", lambda r: _one(r, ("allow", "skip", "queue", ""), ("never",))),
    ("catchup", lambda r: _one(r, ("all", "latest", "none", ""), ("some",))),
    ("max_active", lambda r: _one(r, (0, 1, 5), (20_000,))),
    ("queue_limit", lambda r: _one(r, (0, 3, 10), (20_000,))),
    ("concurrency_key", lambda r: _one(r, ("db", ""), ("Bad Key",))),
    ("concurrency_limit", lambda r: _pick(r, 0, 1, 4)),
    ("catchup_window_seconds", lambda r: _one(r, (3600, 1.5, 0, 7200.0), (40_000_000,))),
    ("catchup_max", lambda r: _one(r, (0, 5), (200_000,))),
    ("catchup_order", lambda r: _one(r, ("newest", "oldest", ""), ("random",))),
    ("starting_deadline_seconds", lambda r: _pick(r, 60, 0.5, 0, 120.0)),
    ("jitter_seconds", lambda r: _one(r, (30, 1.25, 0), (90_000,))),
    ("history_max_age_seconds", lambda r: _pick(r, 86400, 0.5, 3600.0)),
    ("dst_gap", lambda r: _one(r, ("shift", "skip", ""), ("jump",))),
    ("dst_fold", lambda r: _one(r, ("first", "last", "both", ""), ("twice",))),
    ("sla", _sla),
    ("delivery", lambda r: _one(r, ("at_least_once", "at_most_once", ""), ("exactly_once",))),
    ("priority", lambda r: _one(r, (0, 5, -1000, 1000), (1001, 2.5))),
    ("pool", lambda r: _one(r, ("gpu", "", "batch.pool"), ("bad\npool",))),
    ("paused", lambda r: _pick(r, True, False)),
    ("history_limit", lambda r: _one(r, (0, 10, 100_000), (100_001,))),
    ("env_secret", _sealed),
    ("limits", _limits),
)


def _name(r: random.Random, i: int) -> str:
    return _one(r, (f"job-{i:04d}",), ("Bad", "etl:load", "a" * 129, "x\n", ""))


def job_inputs(n: int = 500, seed: int = SEED) -> list[dict[str, Any]]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        d: dict[str, Any] = {"name": _name(r, i), "schedule": _one(r, SCHEDULES, BAD_SCHEDULES), "handler": _handler(r)}
        if r.random() < BAD / 2:
            d.pop("handler")
        for key, make in OPTIONAL:
            if _maybe(r, 0.2):
                d[key] = make(r)
        if d.get("overlap") not in (None, "", "allow") and "max_active" in d and r.random() > BAD:
            d.pop("max_active")
        if d.get("overlap") != "queue" and "queue_limit" in d and r.random() > BAD:
            d.pop("queue_limit")
        if d.get("overlap") == "queue" and _maybe(r, 0.5):
            d["queue_limit"] = _pick(r, 1, 3, 10)
        if d.get("concurrency_limit") and not d.get("concurrency_key") and r.random() > BAD:
            d["concurrency_key"] = "db"
        if "env_secret" in d and "shell" not in d.get("handler", {}) and r.random() > BAD:
            d["handler"] = _shell(r)
        if "env_secret" in d and "env" in d["handler"].get("shell", {}):
            d["handler"]["shell"]["env"].pop("DB_PASSWORD", None)
        out.append(d)
    return out


def _sensor(r: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = _one(r, ({"file": "/data/ready"}, {"http_url": "http://svc.test/ready"},
                                   {"command": "test -e /tmp/x"}), ({"file": "relative"}, {}))
    if _maybe(r, 0.5):
        out["poll_interval_seconds"] = _one(r, (5, 0.5, 60.0, 30), (0.01,))
    if _maybe(r, 0.5):
        out["timeout_seconds"] = _one(r, (60, 3600, 7200.5, 600), (1_000_000,))
    return out


def _task(r: random.Random, i: int, names: list[str]) -> dict[str, Any]:
    t: dict[str, Any] = {"name": _one(r, (f"t{i}",), ("T!", f"t{max(0, i - 1)}"))}
    if _maybe(r, 0.3):
        t["sensor"] = _sensor(r)
        if r.random() < BAD:
            t["handler"] = _shell(r)
    else:
        t["handler"] = _pick(r, *HANDLERS)(r)
    if names and _maybe(r, 0.7):
        t["upstream"] = r.sample(names, r.randrange(1, min(3, len(names)) + 1))
    if r.random() < BAD:
        t["upstream"] = [f"t{i + 1}"]
    if _maybe(r, 0.3):
        t["trigger_rule"] = _one(r, ("all_success", "all_done", "one_failed", ""), ("any",))
    for key, make in (("retry", _retry), ("timeout_seconds", lambda r: _pick(r, 30, 2.5, 0)),
                      ("pool", lambda r: _pick(r, "gpu", "cpu", "")), ("worker_labels", lambda r: {"gpu": "yes"}),
                      ("description", lambda r: _pick(r, "extract", ""))):
        if _maybe(r, 0.25):
            t[key] = make(r)
    return t


def dag_inputs(n: int = 120, seed: int = SEED + 1) -> list[dict[str, Any]]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        tasks: list[dict[str, Any]] = []
        for k in range(r.randrange(1, 6)):
            tasks.append(_task(r, k, [t["name"] for t in tasks]))
        d: dict[str, Any] = {"name": _one(r, (f"dag-{i:03d}",), ("Bad Dag",)),
                             "schedule": _one(r, ("", "@every 1m", "0 3 * * *", "H * * * *"),
                                              ("at 2031-01-01T00:00:00Z",)),
                             "tasks": tasks if r.random() > BAD else []}
        for key, make in (("team", lambda r: _one(r, ("data", ""), ("Bad Team",))),
                          ("timezone", lambda r: _pick(r, "Europe/Berlin", "UTC", "")),
                          ("description", lambda r: _pick(r, "daily load", "")), ("sla", _sla),
                          ("max_runs", lambda r: _one(r, (5, 1000, 0), (1001,)))):
            if _maybe(r, 0.25):
                d[key] = make(r)
        out.append(d)
    return out


def _canonical_job(i: int) -> dict[str, Any]:
    return json.loads(canonical_spec({"name": f"raw-{i:03d}", "schedule": "@every 1m",
                                      "handler": {"shell": {"command": "true"}}})[1])


RAW_CHANGES: tuple[tuple[str, Any], ...] = (
    ("extra_key", lambda d: {**d, "newer_field": {"a": 1}}),
    ("empty_description", lambda d: {**d, "description": ""}),
    ("int_timeout", lambda d: {**d, "timeout_seconds": 30}),
    ("handler_extra_key", lambda d: {**d, "handler": {"shell": {"command": "x", "shell_opts": "-e"}}}),
    ("unknown_handler", lambda d: {**d, "handler": {"wasm": {"module": "m"}}}),
    ("two_handlers", lambda d: {**d, "handler": {"shell": {"command": "x"}, "http": {"url": "http://a.test"}}}),
    ("handler_null", lambda d: {**d, "handler": None}),
    ("no_handler", lambda d: {k: v for k, v in d.items() if k != "handler"}),
    ("container_unstamped", lambda d: {**d, "handler": {"container": {"image": "localhost/a:1"}}}),
    ("retry_extra", lambda d: {**d, "retry": {"max_attempts": 3, "jitter": 1}}),
    ("labels_empty", lambda d: {**d, "labels": {}}),
    ("sla_unknown", lambda d: {**d, "sla": {"within_seconds": 60, "escalate": "x"}}),
    ("sla_empty_by", lambda d: {**d, "sla": {"within_seconds": 60, "by": ""}}),
    ("sla_bad", lambda d: {**d, "sla": {"within_seconds": -1}}),
    ("limits_float", lambda d: {**d, "limits": {"memory_mb": 256.0}}),
    ("env_secret_odd", lambda d: {**d, "env_secret": {"A": {"v": 1, "ct": "c", "x": 2}}}),
    ("mount_extra", lambda d: {**d, "handler": {"container": {"image": "i", "network": "none", "read_only": True,
                                                              "pull": "never",
                                                              "mounts": [{"source": "/a", "target": "/b"}]}}}),
    ("bad_name", lambda d: {**d, "name": "Not Valid"}),
    ("team_number", lambda d: {**d, "team": 5}),
    ("history_bool", lambda d: {**d, "history_limit": True}),
    ("history_big", lambda d: {**d, "history_limit": 100_001}),
    ("dst_gap_empty", lambda d: {**d, "dst_gap": ""}),
    ("dst_gap_bad", lambda d: {**d, "dst_gap": "jump"}),
    ("not_an_object", lambda d: [d]),
    ("unicode", lambda d: {**d, "description": "caf\u00e9 \u2603"}),
    ("float_priority", lambda d: {**d, "priority": 2.0}),
)


def committed_inputs() -> list[dict[str, Any]]:
    """Hand-made committed texts (what no proposer writes), one per kind of oddity. Texts are
    the JSON of the changed dict, plus one not sorted and spaced as a person would type it."""
    out = []
    for i, (why, change) in enumerate(RAW_CHANGES):
        out.append({"why": why, "text": json.dumps(change(_canonical_job(i)), sort_keys=True, separators=(",", ":"))})
    spaced = _canonical_job(len(RAW_CHANGES))
    out.append({"why": "spaced", "text": json.dumps(dict(reversed(list(spaced.items()))), indent=1)})
    return out


# ------------------------------------------------------------------ recording


# The cluster level the corpus was recorded at: the state's digest names the level, and the level
# a later build adds says nothing about specs.
RECORDED_LEVEL = 6


class _Feed:
    """Entries applied as the log would: consecutive indexes, one term, times from T0."""

    def __init__(self) -> None:
        self.state, self.index, self.now = SchedulerState(), 0, T0
        self.apply(C.EPOCH)
        self.apply(C.FEATURE_LEVEL, level=RECORDED_LEVEL)

    def apply(self, kind: str, **args: Any) -> str:
        self.index += 1
        self.now += 1000
        result = self.state.apply(C.encode(kind, rid=f"c/corpus-{self.index}", now=self.now, term=1,
                                           by="corpus", **args), self.index)
        return "ok" if result.ok else f"{result.code.name}: {result.msg}"

    def row_text(self, name: str) -> str | None:
        job = self.state.jobs.get(name)
        return None if job is None else spec_of_template(job.spec_t, job.name)


def _job_case(feed: _Feed, d: dict[str, Any]) -> dict[str, Any]:
    try:
        text = canonical_spec(d)[1]
    except ValidationError as e:
        return {"input": d, "error": str(e)}
    level = 6 if '"container":' in text else 1
    return {"input": d, "text": text, "put": feed.apply(C.PUT, spec=text, fl=level)}


def _dag_case(feed: _Feed, d: dict[str, Any]) -> dict[str, Any]:
    try:
        text = D.canonical_dag(d)[1]
    except ValidationError as e:
        return {"input": d, "error": str(e)}
    level = 6 if '"container":' in text else 1
    put = feed.apply(C.DAG_PUT, spec=text, name=d["name"], fl=level)
    names = [D.task_job(d["name"], t["name"]) for t in json.loads(text)["tasks"]] + [D.schedule_row(d["name"])]
    return {"input": d, "text": text, "put": put, "rows": {n: feed.row_text(n) for n in names}}


def _committed_case(feed: _Feed, case: dict[str, Any]) -> dict[str, Any]:
    text = case["text"]
    name = json.loads(text)["name"] if text.startswith("{") else ""
    got: dict[str, Any] = {**case, "put": feed.apply(C.PUT, spec=text, fl=RECORDED_LEVEL)}
    if isinstance(name, str) and feed.row_text(name) is not None:
        got["stored"] = feed.row_text(name)
        got["pause"] = feed.apply(C.PAUSE, name=name)
        got["paused"] = feed.row_text(name)
        got["resume"] = feed.apply(C.RESUME, name=name)
        got["resumed"] = feed.row_text(name)
    return got


def record(inputs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """What this checkout makes of the corpus (the module docstring says what is recorded):
    `inputs` holds the sections jobs, dags, committed, drawn_jobs and drawn_dags."""
    feed = _Feed()
    out: dict[str, Any] = {"jobs": [_job_case(feed, d) for d in inputs["jobs"]]}
    for case in out["jobs"][::7]:                  # pausing rewrites the stored text
        if case.get("put") == "ok":
            name = case["input"]["name"]
            case["pause"], case["paused"] = feed.apply(C.PAUSE, name=name), feed.row_text(name)
    out["dags"] = [_dag_case(feed, d) for d in inputs["dags"]]
    out["committed"] = [_committed_case(feed, c) for c in inputs["committed"]]
    out["drawn_jobs"] = [_job_case(feed, d) for d in inputs["drawn_jobs"]]
    out["drawn_dags"] = [_dag_case(feed, d) for d in inputs["drawn_dags"]]
    out["digest"] = feed.state.state_digest()
    return out


def inputs_of(corpus: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The inputs a recorded corpus holds (what `record` takes)."""
    return {"committed": [{"why": c["why"], "text": c["text"]} for c in corpus["committed"]],
            **{k: [c["input"] for c in corpus[k]] for k in ("jobs", "dags", "drawn_jobs", "drawn_dags")}}


def drawn_inputs(jobs: int = 200, dags: int = 40) -> dict[str, list[dict[str, Any]]]:
    """Valid specs drawn by the hypothesis strategies (derandomized), named apart."""
    from tests.support.spec_strategies import canonical_dags, job_inputs as drawn_jobs
    got = {"drawn_jobs": _drawn(drawn_jobs(), jobs), "drawn_dags": _drawn(canonical_dags(), dags)}
    for i, d in enumerate(got["drawn_jobs"]):
        d["name"] = f"drawn-{i:04d}"
    for i, d in enumerate(got["drawn_dags"]):
        d["name"] = f"drawn-dag-{i:03d}"
    return got


def _drawn(strategy: Any, n: int) -> list[dict[str, Any]]:
    from hypothesis import HealthCheck, Phase, given, settings
    out: list[dict[str, Any]] = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example: dict[str, Any]) -> None:
        if example not in out:
            out.append(example)

    collect()
    return out


def inputs() -> dict[str, list[dict[str, Any]]]:
    return {"jobs": job_inputs(), "dags": dag_inputs(), "committed": committed_inputs(), **drawn_inputs()}


def write(path: Path = CORPUS) -> None:
    path.write_text(dumps(record(inputs())))


def dumps(got: dict[str, Any]) -> str:
    """One case a line, so a difference reads case by case."""
    parts = []
    for key in sorted(got):
        value = got[key]
        if isinstance(value, list):
            lines = ",\n".join(json.dumps(case, sort_keys=True) for case in value)
            parts.append(f"{json.dumps(key)}: [\n{lines}\n]")
        else:
            parts.append(f"{json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS)
