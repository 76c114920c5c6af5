"""The assignment decision as a pure function (schedd.leader.assignment.decide), driven by plain
tables: a named state, the free slots, what is in flight and the pace, and the claims, skips and
waiting reasons expected. No worker, no event loop, no clock: the decision alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from schedd.core import commands as C
from schedd.core.view import StateView
from schedd.leader.assignment import Capacity, InFlight, Pace, candidates, decide, in_due_order
from tests.support.state import T0, Harness

LOOKAHEAD = 1_500


def _mixed(h: Harness) -> None:
    """Three jobs due at T0 (priorities 10, 0, -5) and a backfill run of `daily`."""
    h.put(name="low", schedule="@every 60s", priority=-5)
    h.put(name="high", schedule="@every 60s", priority=10)
    h.put(name="daily", schedule="@every 60s")
    h.apply(C.BACKFILL, name="daily", times=[T0 - 60_000])
    h.plan_and_fire()


def _overlap_skip(h: Harness) -> None:
    """j1 (overlap skip) runs its T0 instant; its T0+10s instant is due now."""
    h.put(schedule="@every 10s", overlap="skip")
    h.plan_and_fire()
    token = h.apply(C.START, job="j1", scheduled_ms=T0, attempt=1, worker="w1").payload.token
    assert token
    h.now = T0 + 10_000
    h.plan_and_fire()


def _deadline(h: Harness) -> None:
    """j1 (starting deadline 30 s) was due at T0 and nothing started it for 31 s."""
    h.put(schedule="@every 60s", starting_deadline_seconds=30)
    h.plan_and_fire()
    h.now = T0 + 31_000


def _catchup(h: Harness) -> None:
    """j1 missed instants while no leader ran: catch-up runs are paced."""
    h.put(schedule="@every 1s", catchup="all")
    h.now = T0 + 30_000
    h.plan_and_fire()


def _quota(h: Harness) -> None:
    """Team ops may run one job at a time; a (ops) runs, b (ops) and c (dev) are due."""
    h.apply(C.QUOTA, key="team:ops", limit=1)
    for name, team in (("a", "ops"), ("b", "ops"), ("c", "dev")):
        h.put(name=name, team=team, schedule="@every 60s")
    h.plan_and_fire()
    assert h.apply(C.START, job="a", scheduled_ms=T0, attempt=1, worker="w1").ok


STATES: dict[str, Callable[[Harness], None]] = {
    "mixed": _mixed, "overlap_skip": _overlap_skip, "deadline": _deadline, "catchup": _catchup,
    "quota": _quota,
}

SLOT = "waiting for a free worker slot"
NO_WORKER = "waiting: no worker is connected"

# state, free slots, claiming (in flight), skipping (in flight), pace options,
#   expected claims (job, scheduled_ms), skips (job, scheduled_ms), waiting {(job, t): reason prefix}
CASES = [
    ("mixed", 1, {}, (), {}, [("high", T0)], [],
     {("daily", T0): SLOT, ("low", T0): SLOT, ("daily", T0 - 60_000): SLOT}),
    ("mixed", 3, {}, (), {}, [("high", T0), ("daily", T0), ("low", T0)], [],
     {("daily", T0 - 60_000): SLOT}),
    ("mixed", 9, {}, (), {}, [("high", T0), ("daily", T0), ("low", T0), ("daily", T0 - 60_000)], [], {}),
    ("mixed", 0, {}, (), {"workers": False}, [], [],
     {("high", T0): NO_WORKER, ("daily", T0): NO_WORKER, ("low", T0): NO_WORKER,
      ("daily", T0 - 60_000): NO_WORKER}),
    ("mixed", 1, {}, (), {"full": False}, [("high", T0)], [], {}),           # only as far as slots go
    ("mixed", 1, {("high", T0): ()}, (), {}, [("daily", T0)], [],            # high is being claimed
     {("low", T0): SLOT, ("daily", T0 - 60_000): SLOT}),
    ("overlap_skip", 1, {}, (), {}, [], [("j1", T0 + 10_000)], {("j1", T0 + 10_000): "waiting: overlap skip"}),
    ("overlap_skip", 1, {}, {("j1", T0 + 10_000)}, {}, [], [],                # its skip is in flight
     {("j1", T0 + 10_000): "waiting: overlap skip"}),
    ("deadline", 1, {}, (), {}, [], [("j1", T0)], {}),
    ("deadline", 1, {}, {("j1", T0)}, {}, [], [], {}),
    ("catchup", 5, {}, (), {"catchup_next_ms": T0 + 31_000},                  # late < 10 s: not paced
     [("j1", T0 + t) for t in range(20_000, 25_000, 1_000)], [],
     {("j1", T0): "waiting: catch-up runs start at most 1/s", ("j1", T0 + 25_000): SLOT}),
    ("quota", 2, {}, (), {}, [("c", T0)], [], {("b", T0): "waiting: team quota 'ops' full"}),
    ("quota", 2, {("c", T0): ("team:dev",)}, (), {}, [], [], {("b", T0): "waiting: team quota 'ops' full"}),
]


@pytest.mark.parametrize("state, free, claiming, skipping, pace, claims, skips, waiting", CASES)
def test_decide(state, free, claiming, skipping, pace, claims, skips, waiting):
    h = Harness()
    STATES[state](h)
    d = decide(StateView(h.state), h.now, free, InFlight(claiming, frozenset(skipping)),
               Pace(LOOKAHEAD, **pace))
    assert [(c.job, c.scheduled_ms) for c in d.claims] == claims
    assert [(name, t) for name, t, _ in d.skips] == skips
    got = {key: why for key, why in d.waiting.items() if key in waiting}
    assert set(waiting) <= set(d.waiting), d.waiting
    assert all(got[key].startswith(prefix) for key, prefix in waiting.items()), got


def test_decide_is_pure_and_paces_catch_up_through_its_result():
    h = Harness()
    _catchup(h)
    before = h.state.state_digest()
    view = StateView(h.state)
    first = decide(view, h.now, 50, InFlight(), Pace(LOOKAHEAD, catchup_rate=2.0))
    assert sum(c.row.name == "j1" and h.state.execs[("j1", c.scheduled_ms)].trigger == "catchup"
               for c in first.claims) == 1
    assert first.catchup_next_ms == h.now + 500                  # 2/s: the next one in 500 ms
    again = decide(view, h.now, 50, InFlight(), Pace(LOOKAHEAD, catchup_rate=2.0,
                                                     catchup_next_ms=first.catchup_next_ms))
    assert not any(h.state.execs[("j1", c.scheduled_ms)].trigger == "catchup" for c in again.claims)
    assert h.state.state_digest() == before                       # nothing in the state changed


# ------------------------------------------------------------------ placement on workers


def _pools(h: Harness) -> None:
    """Head of line: five old runs of pool `gpu` (older due), then a run of the default pool
    and one of job `labelled` (worker_labels zone=b) and one of team `secret`."""
    for i in range(5):
        h.put(name=f"gpu{i}", schedule="@every 60s", pool="gpu")
    h.plan_and_fire()
    h.now = T0 + 1_000
    h.put(name="plain", schedule="@every 60s")
    h.put(name="labelled", schedule="@every 60s", worker_labels={"zone": "b"})
    h.put(name="secret", schedule="@every 60s", team="secret")
    h.now = T0 + 60_000
    h.plan_and_fire()


STATES["pools"] = _pools

CPU = Capacity("cpu1", 1)
CPU3 = Capacity("cpu1", 3)
ZONE_B = Capacity("b1", 1, labels={"zone": "b"})
NO_SECRET = Capacity("ns", 3, serves=lambda team: team != "secret")
GPU = Capacity("g1", 1, pool="gpu")
W = T0 + 60_000

# state, workers, expected claims (job, scheduled_ms, worker), waiting {(job, t): reason prefix}
PLACEMENT = [
    # the old gpu runs wait for a gpu worker; the later run a free worker may serve is claimed
    ("pools", [CPU], [("plain", W, "cpu1")], {("gpu0", T0): "waiting for a free worker slot in pool 'gpu'"}),
    ("pools", [CPU3], [("plain", W, "cpu1"), ("secret", W, "cpu1")],
     {("labelled", W): "waiting for a free worker slot with labels zone=b"}),
    ("pools", [NO_SECRET], [("plain", W, "ns")], {("secret", W): "waiting for a free worker slot"}),
    ("pools", [ZONE_B, CPU], [("labelled", W, "b1"), ("plain", W, "cpu1")], {}),
    ("pools", [GPU, CPU], [("gpu0", T0, "g1"), ("plain", W, "cpu1")], {("gpu1", T0): SLOT}),
    # fewest running first: two free workers share the claims
    ("mixed", [Capacity("a", 2, load=1), Capacity("b", 2)],
     [("high", T0, "b"), ("daily", T0, "a"), ("low", T0, "b"), ("daily", T0 - 60_000, "a")], {}),
]


@pytest.mark.parametrize("state, workers, claims, waiting", PLACEMENT)
@pytest.mark.parametrize("full", [True, False])
def test_decide_places_each_claim_on_an_eligible_worker(state, workers, claims, waiting, full):
    h = Harness()
    STATES[state](h)
    d = decide(StateView(h.state), h.now, workers, InFlight(), Pace(LOOKAHEAD, full=full))
    assert [(c.job, c.scheduled_ms, c.worker) for c in d.claims] == claims
    for key, prefix in waiting.items():
        assert d.waiting[key].startswith(prefix), d.waiting


def test_in_due_order_is_the_serving_order_for_one_class_and_resumes_after_a_key():
    h = Harness()
    _pools(h)
    view = StateView(h.state)
    lazy = list(in_due_order(view, h.now, LOOKAHEAD, {}))
    assert [(ex.job, ex.scheduled_ms) for _, ex, _ in lazy] == \
        [(ex.job, ex.scheduled_ms) for _, ex, _ in candidates(view, h.now, LOOKAHEAD, {})]
    d = decide(view, h.now, [CPU], InFlight(), Pace(LOOKAHEAD, full=False, scan_limit=3), iter(lazy))
    assert d.looked == 3 and not d.claims                 # three gpu runs looked at, then stop
    rest = decide(view, h.now, [CPU], InFlight(), Pace(LOOKAHEAD, full=False, scan_limit=20),
                  in_due_order(view, h.now, LOOKAHEAD, {}, after=d.last))
    assert [(c.job, c.worker) for c in rest.claims] == [("plain", "cpu1")]
    assert rest.last is not None and d.last is not None and rest.last > d.last
    assert rest.looked == 9                      # gpu3, gpu4 at T0, gpu0-4 and labelled at W, plain


# ------------------------------------------------------------------ a herd into ahead places


def _herd(h: Harness) -> None:
    """Three one-minute jobs due at T0, their intents recorded (the burst lookahead's)."""
    for i in range(3):
        h.put(name=f"h{i}", schedule="@every 60s")
    h.plan_and_fire()


STATES["herd"] = _herd
AHEAD = 15_000
H = [("h0", T0), ("h1", T0), ("h2", T0)]

# workers, decided at (ms before T0), Pace.ahead_ms, expected claims (job, worker), waiting
AHEAD_CASES = [
    # before (no ahead places): 10 s ahead nothing is claimed, a free slot holds no run that early
    ([Capacity("a", 1)], 10_000, AHEAD, [], {}),
    # ahead places take runs not yet due, up to Pace.ahead_ms; the free slot still does not
    ([Capacity("a", 1, ahead=2)], 10_000, AHEAD, [("h0", "a"), ("h1", "a")], {}),
    ([Capacity("a", 0, ahead=5), Capacity("b", 0, ahead=5)], 10_000, AHEAD,
     [("h0", "a"), ("h1", "b"), ("h2", "a")], {}),
    ([Capacity("a", 0, ahead=5)], 10_000, 0, [], {}),               # no ahead horizon: later
    ([Capacity("a", 0, ahead=5)], 20_000, AHEAD, [], {}),            # beyond the horizon: later
    # within the lookahead: a free slot first, then an ahead place
    ([Capacity("a", 1, ahead=1)], 1_000, AHEAD, [("h0", "a"), ("h1", "a")],
     {("h2", T0): "waiting for a free worker slot"}),
    # due now: a free slot first, then ahead places (the worker starts them oldest due first;
    # a run past due that only a free slot could take was starved by runs claimed ahead)
    ([Capacity("a", 0, ahead=5), Capacity("b", 1)], 0, AHEAD, [("h0", "b"), ("h1", "a"), ("h2", "a")], {}),
    ([Capacity("a", 0, ahead=1)], 0, AHEAD, [("h0", "a")], {("h1", T0): "waiting for a free worker slot"}),
]


@pytest.mark.parametrize("workers, before, ahead_ms, claims, waiting", AHEAD_CASES)
@pytest.mark.parametrize("full", [True, False])
def test_decide_claims_a_herd_into_workers_ahead_places_before_it_is_due(workers, before, ahead_ms, claims,
                                                                         waiting, full):
    h = Harness()
    _herd(h)
    view = StateView(h.state)
    now = T0 - before
    pace = Pace(LOOKAHEAD, full=full, ahead_ms=ahead_ms)
    items = None if full else in_due_order(view, now, pace.horizon_ms, {})
    d = decide(view, now, workers, InFlight(), pace, items)
    assert [(c.job, c.worker) for c in d.claims] == claims
    assert all((c.job, c.scheduled_ms) in H for c in d.claims)
    for key, prefix in waiting.items() if full else ():      # a scan stops when the room is gone
        assert d.waiting[key].startswith(prefix), d.waiting


@pytest.mark.parametrize("ahead, room, share", [
    ([100, 100], 512, [100, 100]),            # room for all
    ([5000, 5000], 512, [256, 256]),          # bounded, shared evenly
    ([5000, 0, 5000], 3, [2, 0, 1]),
    ([10, 5000], 512, [10, 502]),             # what one cannot take goes to the other
    ([5000, 5000], 0, [0, 0]),                # the claims in flight fill it
    ([5000], -4, [0]),
    ([], 512, []),
])
def test_ahead_places_are_bounded_by_the_claims_in_flight_and_shared(ahead, room, share):
    from schedd.leader.assigner import share_ahead
    assert share_ahead(ahead, room) == share


def test_a_scan_stops_once_no_slot_and_no_ahead_place_is_left():
    """A scan (not a full pass) places runs past due into ahead places once the free slots are
    gone, and stops at the first run it has no room for instead of reading the whole backlog (a
    100,000 herd after its instant: every step read a thousand runs it could not place)."""
    h = Harness()
    _herd(h)
    view = StateView(h.state)
    d = decide(view, T0, [Capacity("a", 1, ahead=1)], InFlight(), Pace(LOOKAHEAD, full=False, ahead_ms=AHEAD),
               in_due_order(view, T0, AHEAD, {}))
    assert [(c.job, c.worker) for c in d.claims] == [("h0", "a"), ("h1", "a")]
    assert d.looked == 2                     # no room left: h2 is not even looked at
