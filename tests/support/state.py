"""The state-machine harnesses the unit tests share: entries fed to a real SchedulerState as the
Raft log would (consecutive indexes, times stamped from the harness's `now`), and the spec
builders they take. Time is injected: nothing here sleeps or reads a clock."""

from __future__ import annotations

from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core.model import validate_spec
from schedd.core.commands import FEATURES
from schedd.core import results as R
from schedd.core.state import SchedulerState
from schedd.leader.planner import plan_fires

TOP_LEVEL = FEATURES.max_level  # this build's highest feature level
T0 = 1_800_000_000_000          # 2027-01-15T08:00:00Z, a round 10 s boundary
SHELL = {"shell": {"command": "true"}}


def spec(name="j1", schedule="@every 10s", **kw):
    return {"name": name, "schedule": schedule, "handler": SHELL, **kw}


def text(**kw) -> str:
    """The canonical spec text a proposer puts in the entry."""
    return validate_spec(spec(**kw)).text()


def at_top_level(state: SchedulerState, index: int = 0) -> SchedulerState:
    """`state` raised to its table's highest feature level, as a cluster of this build is a
    moment after its first leader (for tests of newer entry kinds); returns it."""
    top = state.features.max_level
    result = state.apply(C.encode(C.FEATURE_LEVEL, rid=f"feature-{top}", now=1, term=state.epoch,
                                  level=top), index)
    assert result.ok, result.msg
    return state


class Harness:
    """Feeds entries to a state like the Raft log would: consecutive indexes, stamped times."""

    def __init__(self, now: int = T0, level: int = 1) -> None:
        """`level`: the cluster's feature level after the first epoch (TOP_LEVEL: this build's
        highest, as a cluster of one build is a moment after its first leader; one more entry).
        The default, 1, is a cluster mid rolling upgrade: its leader keeps to the oldest kinds."""
        self.state = SchedulerState()
        self.index = 1
        self.now = now
        self.term = 1
        self.entries: list[str] = []
        self.apply(C.EPOCH)
        if level > 1:
            assert self.apply(C.FEATURE_LEVEL, level=level).ok

    def apply(self, kind: str, rid: str = "", term: int | None = None, **args) -> dict:
        entry = C.encode(kind, rid=rid, now=self.now, term=self.term if term is None else term,
                         by="test", **args)
        return self.raw(entry)

    def raw(self, entry: str) -> dict:
        self.index += 1
        self.entries.append(entry)
        return self.state.apply(entry, self.index)

    def put(self, **kw) -> dict:
        return self.apply(C.PUT, spec=text(**kw))

    def fire(self, *items, term=None) -> dict:
        return self.apply(C.FIRE, items=[list(i) for i in items], term=term)

    def plan_and_fire(self, lookahead=0) -> list[list]:
        items = plan_fires(self.state, self.now, lookahead, limit=500)
        return self.fire(*items).of(R.Items).items if items else []


# ------------------------------------------------------------------ DAGs

def task(name, *upstream, **kw):
    return {"name": name, "handler": kw.pop("handler", SHELL), "upstream": list(upstream), **kw}


def dag(name="etl", tasks=None, **kw):
    if tasks is None:
        tasks = [task("extract"), task("transform", "extract"), task("load", "transform")]
    return {"name": name, "tasks": tasks, **kw}


class DagHarness:
    """Feeds DAG entries to a state: consecutive indexes, the harness's own time."""

    def __init__(self) -> None:
        self.state = SchedulerState()
        self.index = 1
        self.now = T0
        self.term = 1
        self.entries: list[str] = []
        self.apply(C.EPOCH)

    def apply(self, kind: str, rid: str = "", term: int | None = None, **args) -> dict:
        entry = C.encode(kind, rid=rid, now=self.now, term=self.term if term is None else term, by="t", **args)
        self.index += 1
        self.entries.append(entry)
        return self.state.apply(entry, self.index)

    def put(self, d) -> dict:
        return self.apply(C.DAG_PUT, spec=D.canonical_dag(d)[1])

    def run(self, name="etl") -> D.DagRun:
        r = self.apply(C.DAG_RUN, name=name)
        assert r.ok, r
        return self.state.dag_runs[(name, r.payload.logical_ms)]

    def ex(self, run, t):
        return self.state.execs.get((D.task_job(run.dag, t), run.logical_ms))

    def start(self, run, t, worker="w1") -> int:
        ex = self.ex(run, t)
        r = self.apply(C.START, job=ex.job, scheduled_ms=ex.scheduled_ms, attempt=len(ex.attempts) + 1,
                       worker=worker)
        assert r.ok, r
        return r.payload.token

    def finish(self, run, t, state="SUCCEEDED", **kw) -> dict:
        token = self.start(run, t)
        ex = self.ex(run, t)
        return self.apply(C.FINISH, job=ex.job, scheduled_ms=ex.scheduled_ms, token=token, state=state, **kw)

    def states(self, run) -> dict:
        return {t: D.task_view(self.state, run, t)["state"] for t in run.order}


# ------------------------------------------------------------------ validation
