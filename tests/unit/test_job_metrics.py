"""The per-job series (schedd.runtime.job_metrics) from the entries a replica applies: only the
results that end attempts are kept by the apply hook, a result applied again is not counted
twice, the job label is bounded (past the limit only opted-in teams, the rest `_other`), and a
deleted job's series go and free its place."""

from __future__ import annotations

import threading

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.commands import FEATURES
from schedd.core.model import validate_spec
from schedd.core.state import SchedulerState
from schedd.leader.planner import plan_fires
from schedd.runtime.job_metrics import OTHER, JobLabels, RunSeries
from schedd.settings import MetricsSettings

T0 = 1_800_000_000_000
DUE = T0 + 60_000


class Replica:
    def __init__(self) -> None:
        self.state, self.index, self.lock = SchedulerState(), 0, threading.RLock()
        self.applied: list[tuple[str, R.ApplyResult]] = []
        self.apply(C.EPOCH, now=1)
        self.apply(C.FEATURE_LEVEL, now=1, level=FEATURES.max_level)

    def apply(self, kind: str, *, now: int, rid: str = "", **args) -> R.ApplyResult:
        self.index += 1
        entry = C.encode(kind, rid=rid, now=now, term=1, by="t", **args)
        result = self.state.apply(entry, self.index)
        self.applied.append((entry, result))
        return result


def run_jobs(replica: Replica, jobs: dict[str, tuple[str, str]]) -> None:
    """Each job (name -> (team, outcome)) fired once, claimed, and ended with its outcome."""
    specs = [validate_spec({"name": n, "team": team, "schedule": "at 2027-01-15T08:01:00Z",
                            "handler": {"shell": {"command": "x"}}}).text() for n, (team, _) in jobs.items()]
    assert replica.apply(C.PUT_MANY, now=T0, specs=specs).ok
    keys = plan_fires(replica.state, DUE - 1000, 2000, limit=len(jobs))
    assert replica.apply(C.FIRE, now=DUE - 1000, items=[list(k) for k in keys]).ok
    created = {k: replica.state.execs[k].log_index for k in keys}
    claims = replica.apply(C.START_MANY, now=DUE + 100, claims=[
        {"job": j, "scheduled_ms": t, "attempt": 1, "worker": "w", "worker_incarnation": "i", "created": created[(j, t)]}
        for j, t in keys])
    tokens = [c.of(R.Claimed).token for c in claims.of(R.ClaimedMany).claims]
    results = [{"job": j, "scheduled_ms": t, "token": tok, "state": jobs[j][1], "worker": "w",
                "started_ms": DUE + 100, "ended_ms": DUE + 2100} for (j, t), tok in zip(keys, tokens)]
    assert replica.apply(C.FINISH_MANY, now=DUE + 2200, results=results).ok
    assert replica.apply(C.FINISH_MANY, now=DUE + 2300, results=results[:1]).ok    # a retried entry


def test_series_are_bounded_counted_once_and_forgotten_with_their_job():
    replica = Replica()
    series = RunSeries(replica, JobLabels(MetricsSettings(job_series_limit=2, job_series_teams=("vip",))))
    for entry, result in replica.applied:
        series.on_applied(entry, result)
    run_jobs(replica, {"a": ("t", "SUCCEEDED"), "b": ("t", "FAILED"), "c": ("t", "SUCCEEDED"),
                       "v": ("vip", "SUCCEEDED")})
    kept_before = len(series._pending)
    for entry, result in replica.applied[-5:]:       # fire, claims, results, the retried result
        series.on_applied(entry, result)
    assert len(series._pending) == kept_before + 2    # the fire and the claim entries are not kept
    families = {f.name: f for f in series.families()}
    runs = {(s.labels["job_name"], s.labels["outcome"]): s.value for s in families["schedd_job_runs"].samples
            if s.name == "schedd_job_runs_total"}
    labelled = {name for name, _ in runs} - {OTHER}
    assert len(labelled - {"v"}) == 2 and "v" in labelled          # two by the limit, vip past it
    assert sum(runs.values()) == 4                                 # the retried result is not counted again
    assert runs[(OTHER, "SUCCEEDED")] + sum(v for (n, o), v in runs.items() if n != OTHER and o == "SUCCEEDED") == 3
    durations = {s.labels["job_name"]: s.value for s in families["schedd_job_run_duration_seconds"].samples
                 if s.name.endswith("_sum")}
    assert set(durations.values()) == {2.0}
    waits = {s.value for s in families["schedd_job_queue_wait_seconds"].samples if s.name.endswith("_sum")}
    assert waits == {0.1}

    gone = sorted(labelled - {"v"})[0]
    assert replica.apply(C.DELETE, now=DUE + 5000, name=gone).ok
    families = {f.name: f for f in series.families()}
    assert all(s.labels.get("job_name") != gone for f in families.values() for s in f.samples)
    assert series.labels.labelled == labelled - {gone}


def test_labels_cap_and_opt_in():
    labels = JobLabels(MetricsSettings(job_series_limit=1, job_series_teams=("payments",)))
    assert labels.of("a", "t") == "a" and labels.of("b", "t") == OTHER and labels.of("p", "payments") == "p"
    labels.forget(["a"])
    assert labels.of("b", "t") == OTHER               # p holds the one place now: past the limit still
    labels.forget(["p"])
    assert labels.of("b", "t") == "b"                 # a place is free again
