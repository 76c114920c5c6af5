"""Cluster quotas over shard groups (schedd.core.quota_shares): apply's rules, and the property
that the running attempts of all groups together never exceed the quota while the shares move."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.core import commands as C
from schedd.core import plain
from schedd.core.quota_shares import GroupUse, next_allocation, target
from schedd.core.snapshot import SnapshotImage
from schedd.core.state import SchedulerState
from tests.support.state import TOP_LEVEL, Harness


def trigger(h: Harness, name: str) -> tuple[str, int]:
    h.now += 1
    r = h.apply(C.TRIGGER, name=name)
    return name, r.payload.scheduled_ms


def claim(h: Harness, key: tuple[str, int]):
    return h.apply(C.START, job=key[0], scheduled_ms=key[1], attempt=1, worker="w1")


def test_a_share_limits_the_group_and_zero_means_nothing_starts():
    h = Harness(level=TOP_LEVEL)
    h.put(name="a", schedule="", team="ops")
    h.put(name="b", schedule="", team="ops")
    assert h.apply(C.QUOTA_SHARE, key="team:ops", share=0, version=0).ok
    ka, kb = trigger(h, "a"), trigger(h, "b")
    assert "team quota 'ops' full" in claim(h, ka).msg            # share 0: nothing starts
    assert h.apply(C.QUOTA_SHARE, key="team:ops", share=1, version=7).ok
    assert claim(h, ka).ok and "team quota 'ops' full" in claim(h, kb).msg
    assert h.apply(C.QUOTA_SHARE, key="team:ops", share=5, version=3).ok      # an older allocation
    assert h.state.shares["team:ops"] == (7, 1)
    assert h.apply(C.QUOTA_SHARE, key="team:ops", share=None, version=0).ok   # the quota was removed
    assert "team:ops" not in h.state.shares and claim(h, kb).ok


def test_a_share_overrides_the_groups_own_quota_table():
    h = Harness(level=TOP_LEVEL)
    assert h.apply(C.QUOTA, key="team:ops", limit=10).ok            # group 0 holds the cluster's 10
    assert h.apply(C.QUOTA_SHARE, key="team:ops", share=1, version=4).ok
    for n in "ab":
        h.put(name=n, schedule="", team="ops")
    assert claim(h, trigger(h, "a")).ok
    assert "team quota 'ops' full" in claim(h, trigger(h, "b")).msg


def test_an_allocation_never_adds_up_to_more_than_the_quota():
    h = Harness(level=TOP_LEVEL)
    assert h.apply(C.QUOTA_ALLOC, key="team:ops", shares=[1, 1]).code == "invalid"     # no quota yet
    assert h.apply(C.QUOTA, key="team:ops", limit=4).ok
    assert h.apply(C.QUOTA_ALLOC, key="team:ops", shares=[3, 2]).code == "invalid"
    assert h.apply(C.QUOTA_ALLOC, key="team:ops", shares=[1, -1]).code == "invalid"
    assert h.apply(C.QUOTA_ALLOC, key="bad", shares=[1]).code == "invalid"
    r = h.apply(C.QUOTA_ALLOC, key="team:ops", shares=[3, 1])
    assert r.ok
    version, shares = h.state.allocations["team:ops"]
    assert shares == (3, 1) and version > 0
    assert h.apply(C.QUOTA_ALLOC, key="team:ops", shares=None).ok and not h.state.allocations


def test_below_the_level_shares_are_refused():
    h = Harness(level=9)
    assert not h.apply(C.QUOTA_SHARE, key="team:ops", share=1, version=0).ok
    assert not h.state.shares


def test_shares_and_allocations_survive_snapshots_and_replay():
    h = Harness(level=TOP_LEVEL)
    h.apply(C.QUOTA, key="pool:gpu", limit=6)
    h.apply(C.QUOTA_ALLOC, key="pool:gpu", shares=[2, 4])
    h.apply(C.QUOTA_SHARE, key="pool:gpu", share=2, version=9)
    replica = SchedulerState()
    for i, entry in enumerate(h.entries, start=2):
        replica.apply(entry, i)
    assert replica.state_digest() == h.state.state_digest()
    copy = SchedulerState()
    copy.restore(plain.loads(plain.dumps(h.state)))
    assert (copy.shares, copy.allocations) == (h.state.shares, h.state.allocations)
    assert copy.state_digest() == h.state.state_digest()
    again = SchedulerState()
    again.restore(pickle.loads(pickle.dumps(SnapshotImage(h.state))))
    assert again.state_digest() == h.state.state_digest()
    empty = SchedulerState()
    h2 = Harness(level=TOP_LEVEL)
    assert empty.state_digest() == SchedulerState().state_digest() and not h2.state.shares


def test_target_follows_demand_and_adds_up():
    uses = [GroupUse(None, 0, 0), GroupUse(None, 3, 5), GroupUse(None, 0, 8)]
    assert target(10, uses) == (0, 5, 5)
    assert sum(target(7, uses)) == 7
    assert target(6, [GroupUse(None, 0, 0)] * 4) == (2, 2, 1, 1)          # no demand: evenly


def test_a_lower_is_at_once_and_a_raise_waits_for_the_copies_and_the_drain():
    demand = dict(waiting=0)
    # Group 1 has not copied allocation 5 yet: group 0 is lowered to its target, group 1 waits.
    uses = [GroupUse(3, 3, **demand, version=5), GroupUse(3, 0, 9, version=4)]
    assert next_allocation(6, (3, 3), uses, version=5) == (2, 3)
    # Both hold allocation 6, but group 0 still runs 3 (over its new share of 2): no room yet.
    assert next_allocation(6, (2, 3), [GroupUse(2, 3, 0, 6), GroupUse(3, 0, 9, 6)], version=6) is None
    # Group 0 drained to 2: the freed slot goes to group 1.
    assert next_allocation(6, (2, 3), [GroupUse(2, 2, 1, 6), GroupUse(3, 0, 9, 6)], version=6) == (2, 4)
    # A new quota: every group must hold its share 0 first.
    assert next_allocation(4, None, [GroupUse(None, 0, 1), GroupUse(0, 0, 1)]) == (0, 0)
    assert next_allocation(4, None, [GroupUse(0, 0, 1), GroupUse(0, 0, 1)]) == (2, 2)


@st.composite
def scenario(draw):
    groups = draw(st.integers(1, 4))
    quota = draw(st.integers(1, 8))
    steps = draw(st.lists(st.tuples(st.sampled_from(["arrive", "claim", "finish", "balance", "copy"]),
                                    st.integers(0, groups - 1), st.integers(0, 40)), max_size=150))
    return groups, quota, steps


def simulate(groups: int, quota: int, steps) -> None:
    """Groups claim up to the share their own log holds; the balancer reads replicas that may
    lag (any earlier state within `lag` steps, the most generous one chosen); a copier may copy
    an older allocation. Asserts after every step that the groups' running attempts together
    stay within the quota."""
    share: list[tuple[int, int]] = [(0, 0)] * groups       # (version, share): every group starts at 0
    running, waiting = [0] * groups, [0] * groups
    history: list[list[GroupUse]] = [[GroupUse(0, 0, 0, 0) for _ in range(groups)]]
    allocs: list[tuple[int, tuple[int, ...]]] = []           # group 0's log of allocations
    for what, g, lag, *per_group in steps:
        if what == "arrive":
            waiting[g] += 1 + lag % 4
        elif what == "claim":
            n = min(waiting[g], max(0, share[g][1] - running[g]), 1 + lag % 4)
            waiting[g] -= n
            running[g] += n
        elif what == "finish" and running[g]:
            running[g] -= 1
        elif what == "balance":
            version, current = allocs[-1] if allocs else (0, None)
            views = history[-(lag + 1):]
            if per_group:          # each group read at its own moment (its holder's replica, on another node)
                views = [[history[max(0, len(history) - 1 - per_group[0][i])][i] for i in range(groups)]]
            options = [nxt for seen in views
                       if (nxt := next_allocation(quota, current, seen, version)) is not None]
            if options:
                nxt = max(options, key=sum)
                assert sum(nxt) <= quota
                allocs.append((len(allocs) + 1, nxt))
        elif what == "copy" and allocs:
            version, shares = allocs[max(0, len(allocs) - 1 - lag)]  # from a lagging copy of group 0
            if version >= share[g][0]:
                share[g] = (version, shares[g])
        assert sum(running) <= quota, (share, running, allocs)
        history.append([GroupUse(share[i][1], running[i], waiting[i], share[i][0]) for i in range(groups)])


def test_a_stale_view_cannot_hand_out_what_a_group_still_runs():
    """Group 0 got 3 of 6 and runs 3; a replica that predates all that shows it idle. Raising
    group 1 to 6 from that view would let 9 run."""
    simulate(2, 6, [("arrive", 1, 2), ("arrive", 0, 2), ("balance", 0, 0), ("copy", 0, 0), ("copy", 1, 0),
                    ("claim", 0, 2), ("arrive", 1, 3), ("arrive", 1, 3), ("balance", 0, 9), ("copy", 1, 0),
                    ("claim", 1, 3), ("claim", 1, 3)])


@settings(max_examples=500, deadline=None)
@given(scenario())
def test_running_attempts_never_exceed_the_quota_while_shares_move(case):
    """`simulate`, over random orders of arrivals, claims, ends, balancing and copying."""
    simulate(*case)


@st.composite
def mixed_scenario(draw):
    """As `scenario`, each balancing pass reading every group from a replica of its own lag."""
    groups, quota, steps = draw(scenario())
    lags = st.lists(st.integers(0, 40), min_size=groups, max_size=groups)
    return groups, quota, [(w, g, lag, draw(lags)) if w == "balance" else (w, g, lag) for w, g, lag in steps]


@settings(max_examples=500, deadline=None)
@given(mixed_scenario())
def test_running_attempts_never_exceed_the_quota_when_each_group_is_read_at_its_own_moment(case):
    """Group 0's leader reads the groups it hosts from its replicas and the others from their
    holders (schedd.api.quota_reads): each group's figures are of a different moment, each
    possibly old. The quota still holds (the argument is per group: module doc)."""
    simulate(*case)


def test_the_backfill_lanes_default_is_a_cluster_limit_split_like_a_quota():
    from schedd.core.policy import DEFAULT_BACKFILL_QUOTA
    from schedd.core.quota_shares import cluster_quotas
    h = Harness(level=TOP_LEVEL)
    assert cluster_quotas(h.state.quotas) == {"lane:backfill": DEFAULT_BACKFILL_QUOTA}
    assert h.apply(C.QUOTA_ALLOC, key="lane:backfill", shares=[1, 1]).ok
    assert h.apply(C.QUOTA_ALLOC, key="lane:backfill", shares=[2, 1]).code == "invalid"
    assert h.apply(C.QUOTA, key="lane:backfill", limit=6).ok
    assert cluster_quotas(h.state.quotas)["lane:backfill"] == 6
    assert h.apply(C.QUOTA_ALLOC, key="lane:backfill", shares=[3, 3]).ok
