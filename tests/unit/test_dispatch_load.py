"""The leader's dispatch backlog (schedd.leader.assigner.DispatchLoad) and what `cluster status`
says of it, and the incremental scan of the Assigner's step against the full scan it replaces:
between full passes a step looks only as far as free slots go, in due order, resuming after
where the last one stopped; over enough steps it claims what one full decision claims."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.api.service import summarize
from schedd.core import commands as C
from schedd.core.view import StateView
from schedd.leader.assigner import BEHIND_MS, DispatchLoad, overload_warning
from schedd.leader.assignment import Capacity, InFlight, Pace, decide, in_due_order
from schedd_proto import scheduler_pb2 as pb
from tests.support.state import T0, Harness

LOOKAHEAD = 1_500


def _herd(h: Harness, n: int, pool_every: int = 0) -> None:
    """n runs due at T0; with pool_every, every pool_every-th in pool gpu and the rest in cpu."""
    for i in range(n):
        pool = ("gpu" if i % pool_every == 0 else "cpu") if pool_every else ""
        h.put(name=f"j{i:04d}", schedule="@every 10s", pool=pool)
    h.plan_and_fire()


def test_the_load_counts_runs_past_due_and_the_oldest_age():
    h = Harness()
    _herd(h, 5)
    load = DispatchLoad()
    load.measure(StateView(h.state), T0 - 1)
    assert (load.backlog, load.lag_ms) == (0, 0)                  # none due yet
    h.now = T0 + 3_000
    load.measure(StateView(h.state), h.now)
    assert (load.backlog, load.lag_ms) == (5, 3_000)
    assert h.apply(C.START, job="j0000", scheduled_ms=T0, attempt=1, worker="w").ok
    load.measure(StateView(h.state), h.now)
    assert load.backlog == 4                                      # a claimed run no longer waits
    load.clear()
    assert (load.backlog, load.lag_ms) == (0, 0)


def test_cluster_status_warns_when_the_leader_is_behind():
    assert overload_warning(10, BEHIND_MS - 1) == ""
    assert overload_warning(0, 60_000) == ""
    leader = pb.NodeStatus(id="n1", role="leader", term=2, dispatch_backlog=1200, dispatch_lag_ms=4500)
    follower = pb.NodeStatus(id="n2", role="follower", term=2)
    _, warnings = summarize([leader, follower], 0)
    assert warnings == ["n1: dispatch is behind: 1200 run(s) past due wait for a claim, the oldest due 4.5 s "
                        "ago (no free worker slot or quota for them, or the leader is past its capacity: every "
                        "run still starts, late; `schedctl runs get` says why one waits)"]
    leader.dispatch_lag_ms = 100
    assert summarize([leader, follower], 0)[1] == []


def _steps(h: Harness, workers: list[Capacity], scan_limit: int, rounds: int) -> list[tuple[str, int, str]]:
    """What the Assigner's incremental steps claim: each step sees the slots its earlier claims
    left, looks at most `scan_limit` runs and resumes after the last when it stopped there."""
    view = StateView(h.state)
    cursor = None
    got: list[tuple[str, int, str]] = []
    for _ in range(rounds):
        left = [Capacity(w.name, w.free - sum(1 for *_, x in got if x == w.name), w.pool) for w in workers]
        left = [w for w in left if w.free > 0]
        free = sum(w.free for w in left)
        d = decide(view, h.now, left, InFlight(), Pace(LOOKAHEAD, full=False, scan_limit=scan_limit),
                   in_due_order(view, h.now, LOOKAHEAD, {}, after=cursor))
        cursor = d.last if d.looked >= scan_limit and len(d.claims) < free else None
        for c in d.claims:
            assert h.apply(C.START, job=c.job, scheduled_ms=c.scheduled_ms, attempt=c.attempt,
                           worker=c.worker).ok
            got.append((c.job, c.scheduled_ms, c.worker))
    return got


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 60), pool_every=st.integers(1, 5), cpu=st.integers(0, 80), gpu=st.integers(0, 10),
       scan=st.integers(1, 16))
def test_incremental_steps_claim_what_one_full_decision_claims(n, pool_every, cpu, gpu, scan):
    # each run has one eligible worker (its pool's), so where a claim goes is not a choice
    workers = [w for w in (Capacity("cpu", cpu, pool="cpu"), Capacity("gpu", gpu, pool="gpu")) if w.free]
    full, inc = Harness(), Harness()
    _herd(full, n, pool_every)
    _herd(inc, n, pool_every)
    once = decide(StateView(full.state), full.now, workers, InFlight(), Pace(LOOKAHEAD))
    want = [(c.job, c.scheduled_ms, c.worker) for c in once.claims]
    got = _steps(inc, workers, scan, n // scan + 2)       # enough steps to pass over every run
    assert sorted(got) == sorted(want)
