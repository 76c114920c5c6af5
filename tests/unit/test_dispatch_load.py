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
from schedd.leader.assigner import BEHIND_MS, DispatchLoad, overload_warning, unserved_warnings
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
                        "run still starts, late; `schedctl run get ID` says why one waits)"]
    leader.dispatch_lag_ms = 100
    assert summarize([leader, follower], 0)[1] == []


def test_runs_of_a_pool_no_worker_serves_wait_apart_from_the_backlog():
    h = Harness()
    _herd(h, 6, pool_every=3)                   # j0000 and j0003 in gpu, the rest in cpu
    h.now = T0 + 5_000
    view = StateView(h.state)
    pace = Pace(LOOKAHEAD, pools=frozenset({"cpu"}))
    d = decide(view, h.now, [Capacity("c", 0, pool="cpu")], InFlight(), pace)
    assert d.waiting[("j0000", T0)] == "waiting: no connected worker serves pool 'gpu'"
    assert d.waiting[("j0001", T0)] == "waiting for a free worker slot"
    assert sorted(d.unserved) == [("j0000", T0), ("j0003", T0)]
    load = DispatchLoad()
    load.measure(view, h.now, d.unserved)
    assert (load.backlog, load.lag_ms, load.unserved) == (4, 5_000, {"gpu": 2})
    # only unserved runs wait: no backlog, no lag, however long they wait
    for name in ("j0001", "j0002", "j0004", "j0005"):
        assert h.apply(C.START, job=name, scheduled_ms=T0, attempt=1, worker="c").ok
    h.now = T0 + 600_000
    load.measure(StateView(h.state), h.now, d.unserved)
    assert (load.backlog, load.lag_ms, load.unserved) == (0, 0, {"gpu": 2})
    # a gpu worker connects: they are claimed like any run
    d = decide(StateView(h.state), h.now, [Capacity("g", 2, pool="gpu")], InFlight(),
               Pace(LOOKAHEAD, pools=frozenset({"cpu", "gpu"})))
    assert len(d.claims) == 2 and not d.unserved


def test_cluster_status_names_the_unserved_pool_not_the_leaders_capacity():
    assert unserved_warnings({"gpu": 3, "none": 0}) == [
        "3 run(s) wait for pool 'gpu', which no connected worker serves (start a worker with --pool gpu, "
        "or change the jobs' pool)"]
    leader = pb.NodeStatus(id="n1", role="leader", term=2, unserved_pools=[pb.UnservedPool(pool="gpu", runs=3)])
    _, warnings = summarize([leader], 0)
    assert warnings == unserved_warnings({"gpu": 3})
    assert not any("dispatch is behind" in w for w in warnings)


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
