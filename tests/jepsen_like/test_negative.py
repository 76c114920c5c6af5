"""Negative controls: each test-only unsafe switch of the daemon, run under the fault that exposes
it, must be caught by its check. (A suite that cannot fail proves nothing.) One cheap control runs
by default; the rest are in the full profile (--jepsen-full)."""

from __future__ import annotations

import random
import shutil

import pytest

from tests.jepsen_like import scenarios as S
from tests.jepsen_like.netns import unavailable
from tests.jepsen_like.harness import WORKLOAD, Job
from tests.jepsen_like.runner import check_dir, run_scenario

pytestmark = pytest.mark.integration
NETNS_REASON = unavailable()

LONG_JOBS = [j for j in WORKLOAD if j.name != "long"] + [Job("long", 2, hold_s=6.0)]
# 10 s both-ways cuts of the leader under a write load, until one leaves a replica behind (stock
# pysyncobj: about 3 cuts in 5), at most 4
STUCK_CUTS = S.nemesis_ns_cuts([("both", 10)] * 4, load=True)


def nemesis_short_worker_pause(h, rng, seconds):
    """Pause a worker running `long` just past its lease, so it reports while the retry runs."""
    import time
    end = time.monotonic() + seconds
    while end - time.monotonic() > 8:
        w = S._busy_worker(h)
        h.pause_worker(w)
        time.sleep(h.lease_ms / 1000 + 1.5)
        h.resume_worker(w)
        time.sleep(2)

# switch -> (scenario, nemesis override, seconds, jobs, the check that must fire)
CONTROLS = {
    "push_before_commit": ("S01", None, 8, None, "C6"),
    "no_dedup": ("S01", None, 10, None, "C2"),
    "no_fencing": ("S07", nemesis_short_worker_pause, 16, LONG_JOBS, "C4"),
    "local_clock_fire": ("S09", S.nemesis_skew_leader, 10, None, "C9"),
    "no_lease_grace": ("S02", None, 18, LONG_JOBS, "C4"),
    "trust_leader": ("S05", None, 20, None, "C6"),
    "stock_raft": ("S13", STUCK_CUTS, 12, S.TICK_JOBS, "C7"),
}
# the same on 4 shard groups: grouping by shard must not blind the checks (tokens per shard)
SHARDED_CONTROLS = {
    "push_before_commit": ("S02x4", S.nemesis_none, 10, None, "C6"),
    "no_dedup": ("S05x4", S.nemesis_none, 14, None, "C2"),
}


def run_control(switch: str, controls: dict = CONTROLS) -> tuple[dict, object]:
    scen, nemesis, seconds, jobs, check = controls[switch]
    res, d = run_scenario(scen, random.randrange(1 << 30), unsafe=(switch,), nemesis=nemesis, seconds=seconds,
                          jobs=jobs, plot=False)       # timeline.png (2-6 s) only for a control that failed
    caught = res["counts"][check]
    if not (caught and not res["safety_ok"]):
        check_dir(d, plot=True)
    assert caught and not res["safety_ok"], (
        f"unsafe switch {switch} was NOT caught by {check}; see {d}\n{(d / 'summary.txt').read_text()}")
    for data in (d / "cluster").glob("n*/"):      # keep logs and history, drop the node data
        shutil.rmtree(data, ignore_errors=True)
    return res, d


@pytest.mark.timeout(240)
def test_push_before_commit_is_caught():
    run_control("push_before_commit")


@pytest.mark.jepsen_full
@pytest.mark.timeout(300)
@pytest.mark.parametrize("switch", [s for s in CONTROLS if s not in ("push_before_commit", "stock_raft")])
def test_unsafe_switch_is_caught(switch):
    run_control(switch)


@pytest.mark.jepsen_full
@pytest.mark.timeout(300)
@pytest.mark.parametrize("switch", list(SHARDED_CONTROLS))
def test_unsafe_switch_is_caught_in_a_sharded_cluster(switch):
    run_control(switch, SHARDED_CONTROLS)


@pytest.mark.jepsen_full
@pytest.mark.timeout(420)
@pytest.mark.skipif(NETNS_REASON is not None, reason=f"no network namespaces: {NETNS_REASON}")
def test_stock_raft_leaves_a_replica_stuck_and_the_checker_says_so():
    """With stock pysyncobj's append path, a leader cut off for 10 s never catches up
    after the heal; the convergence check after the heal (C7) names it. Before the fix of
    schedd/replication/raft_patches.py lands, the stock path is simply the code."""
    res, _ = run_control("stock_raft")
    stuck = [a for a in res["anomalies"] if a["check"] == "C7" and a.get("stuck")]
    assert stuck, res["anomalies"]
