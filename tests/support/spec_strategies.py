"""Hypothesis strategies of job and DAG specs as users send them (the proto as a dict with its
field names), over every handler kind (shell command and argv, http, python, container, and DAG
sensors) and every optional field.

`canonical_jobs` and `canonical_dags` draw requests already in canonical form (every default the
canonical form writes out is given, every value as validation leaves it), so that what a read
answers must equal the request itself. `job_inputs` draws looser ones too (lower-case methods,
sizes to normalize, sealed secrets as validation takes them), for the properties that hold of
any valid spec. Kept free of schedd imports so the strategies can drive another checkout's code.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

words = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)
paths = words.map(lambda w: f"/srv/{w}")
env_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True).filter(lambda n: not n.startswith("SCHEDD_"))
env = st.dictionaries(env_names, words, min_size=1, max_size=3)
labels = st.dictionaries(st.sampled_from(["env", "tier", "app.kubernetes.io/name"]), words, min_size=1, max_size=2)
seconds = st.one_of(st.integers(1, 3600), st.sampled_from([0.5, 1.5, 2.25, 90.5]))
SCHEDULES = ["", "@every 30s", "0 2 * * *", "*/5 * * * *", "H H * * *", "@daily", "30 1 * * 1-5"]


def _some(draw: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """A random subset of `fields` (strategies), drawn."""
    return {k: draw(v) for k, v in fields.items() if draw(st.booleans())}


@st.composite
def shell(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = ({"command": f"echo {draw(words)}"} if draw(st.booleans())
                            else {"argv": ["echo", *draw(st.lists(words, min_size=1, max_size=3))]})
    body.update(_some(draw, {"workdir": paths, "env": env,
                             "inherit_env": st.lists(env_names, min_size=1, max_size=3, unique=True).map(sorted)}))
    return {"shell": body}


@st.composite
def http(draw: Any) -> dict[str, Any]:
    body = {"url": f"https://example.test/{draw(words)}", "method": draw(st.sampled_from(["GET", "POST", "PUT"]))}
    body.update(_some(draw, {"headers": st.dictionaries(st.sampled_from(["X-A", "X-B"]), words, min_size=1, max_size=2),
                             "body": words, "insecure_skip_verify": st.just(True)}))
    return {"http": body}


@st.composite
def python(draw: Any) -> dict[str, Any]:
    body = {"name": draw(words), **_some(draw, {"args_json": st.sampled_from(['{"k": 1}', "[1, 2]"])})}
    return {"python": body}


@st.composite
def container(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"image": f"localhost/{draw(words)}:1", "network": draw(st.sampled_from(["none", "host", "backend"])),
                            "read_only": draw(st.booleans()), "pull": draw(st.sampled_from(["never", "if-missing"]))}
    command = draw(st.sampled_from(["", "command", "args"]))
    if command == "command":
        body["command"] = f"echo {draw(words)}"
    elif command == "args":
        body["args"] = ["echo", *draw(st.lists(words, min_size=1, max_size=2))]
    body.update(_some(draw, {
        "env": env, "workdir": paths, "user": st.sampled_from(["1000", "1000:1000", "app"]),
        "cpu": st.sampled_from([0.5, 1.0, 2.0]), "memory": st.integers(6, 4096).map(lambda m: f"{m}Mi"),
        "pids": st.integers(1, 100),
        "mounts": st.lists(st.builds(lambda s, t, ro: {"source": s, "target": t, "read_only": ro}, paths, paths,
                                     st.booleans()), min_size=1, max_size=2, unique_by=lambda m: m["target"])}))
    return {"container": body}


handlers = st.one_of(shell(), http(), python(), container())


@st.composite
def sensor(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from([{"file": "/data/ready"}, {"http_url": "http://svc.test/ready"},
                                 {"command": "test -e /tmp/x"}]))
    return {**kind, "poll_interval_seconds": draw(st.sampled_from([5, 30, 1.5])),
            "timeout_seconds": draw(st.sampled_from([60, 600, 3600]))}


retry = st.builds(dict, max_attempts=st.integers(1, 100), initial_backoff_seconds=st.sampled_from([1.0, 2.5, 60.0]),
                  max_backoff_seconds=st.sampled_from([60.0, 600.5]), multiplier=st.sampled_from([1.0, 1.5, 2.0]))
sla = st.one_of(st.builds(lambda w: {"within_seconds": w}, seconds),
                st.builds(lambda b, tz: {"by": b, **({"timezone": tz} if tz else {})},
                          st.sampled_from(["06:00", "23:59"]), st.sampled_from(["", "Europe/Berlin"])))
limits = st.builds(lambda m, c, o, p: {k: v for k, v in (("memory_mb", m), ("cpu_seconds", c), ("open_files", o),
                                                        ("processes", p)) if v},
                   st.sampled_from([0, 256, 1024]), st.sampled_from([0, 10, 2.5]), st.sampled_from([0, 64]),
                   st.sampled_from([0, 8]))

# the job fields beside name, schedule and handler, each in canonical form
JOB_FIELDS: dict[str, Any] = {
    "description": words, "labels": labels, "worker_labels": labels, "retry": retry,
    "timeout_seconds": st.sampled_from([30.0, 2.5, 3600.0]), "catchup": st.sampled_from(["latest", "none", "all"]),
    "priority": st.integers(-1000, 1000).filter(bool), "pool": words, "paused": st.just(True),
    "history_limit": st.integers(1, 100_000), "delivery": st.just("at_most_once"),
    "catchup_window_seconds": seconds, "catchup_max": st.integers(1, 100), "catchup_order": st.just("oldest"),
    "starting_deadline_seconds": seconds, "jitter_seconds": seconds, "history_max_age_seconds": seconds,
    "sla": sla, "limits": limits.filter(bool)}


@st.composite
def canonical_jobs(draw: Any, name: str = "job1") -> dict[str, Any]:
    """A request in canonical form: what a read of the stored job answers is this request."""
    d: dict[str, Any] = {"name": name, "team": draw(st.sampled_from(["default", "data"])),
                         "schedule": draw(st.sampled_from(SCHEDULES[1:])), "timezone": "UTC", "handler": draw(handlers)}
    d.update(_some(draw, JOB_FIELDS))
    overlap = draw(st.sampled_from(["", "skip", "queue", "allow"]))
    if overlap:
        d["overlap"] = overlap
    if overlap == "queue" and draw(st.booleans()):
        d["queue_limit"] = draw(st.integers(1, 50))
    if overlap in ("", "allow") and draw(st.booleans()):
        d["max_active"] = draw(st.integers(1, 50))
    if draw(st.booleans()):
        d["concurrency_key"] = draw(words)
        d["concurrency_limit"] = draw(st.integers(1, 10))
    if d["schedule"] == "0 2 * * *" and draw(st.booleans()):
        d.update(timezone="Europe/Berlin", dst_gap="skip", dst_fold=draw(st.sampled_from(["last", "both"])))
    return d


@st.composite
def job_inputs(draw: Any) -> dict[str, Any]:
    """Valid requests in looser forms too: values validation normalizes, defaults left out,
    secrets as the API edge seals them."""
    d = draw(canonical_jobs(name=draw(words)))
    kind = next(iter(d["handler"]))
    body = d["handler"][kind]
    if kind == "http" and draw(st.booleans()):
        body["method"] = body["method"].lower()
    if kind == "container" and draw(st.booleans()):
        body.pop("network"), body.pop("pull"), body.pop("read_only")
        if "memory" in body:
            body["memory"] = draw(st.sampled_from([64, "64", "1Gi", "512M"]))
    if draw(st.booleans()):
        d.pop("team"), d.pop("timezone", None)
    if draw(st.booleans()):
        d["schedule"] = draw(st.sampled_from(SCHEDULES))
        d.pop("dst_gap", None), d.pop("dst_fold", None)
    if kind in ("shell", "python", "container") and draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(["DB_PASSWORD", "API_KEY", "TOKEN"]), min_size=1, max_size=2, unique=True))
        d["env_secret"] = {n: {"v": draw(st.integers(1, 9)), "ct": f"a1:{draw(words)}"} for n in names}
        if kind != "python":
            body.get("env", {}).clear()
    return d


@st.composite
def dag_tasks(draw: Any, n: int) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    for i in range(n):
        t: dict[str, Any] = {"name": f"t{i}"}
        if draw(st.booleans()):
            t["sensor"] = draw(sensor())
        else:
            t["handler"] = draw(handlers)
        if i and draw(st.booleans()):
            t["upstream"] = draw(st.lists(st.sampled_from([f"t{k}" for k in range(i)]), min_size=1, max_size=2,
                                          unique=True))
        t.update(_some(draw, {"trigger_rule": st.sampled_from(["all_done", "one_failed"]), "retry": retry,
                              "pool": words, "worker_labels": labels, "description": words,
                              "timeout_seconds": st.sampled_from([30.0, 2.5])}))
        if "sensor" in t and "timeout_seconds" not in t:
            t["timeout_seconds"] = 60.0                 # a sensor's poll timeout, written out
        tasks.append(t)
    return tasks


@st.composite
def canonical_dags(draw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "etl", "team": draw(st.sampled_from(["default", "data"])),
                         "schedule": draw(st.sampled_from(["", "@every 1m", "0 3 * * *"])), "timezone": "UTC",
                         "tasks": draw(st.integers(1, 5).flatmap(dag_tasks))}
    d.update(_some(draw, {"description": words, "sla": sla, "max_runs": st.integers(1, 1000)}))
    return d
