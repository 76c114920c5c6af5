"""The fault-injection scenarios as tests. Smoke (S01 S02 S05 S07 S13, and the sharded S02x4 S05x4)
runs by default; the full
profile needs --jepsen-full. Safety failures never retry; a liveness-only failure (or a nemesis
that left no evidence) retries once with a new seed. Runs are kept in tests/jepsen_like/store/.
Set JEPSEN_SEED to replay a seed."""

from __future__ import annotations

import importlib.util
import os
import random
import shutil

import pytest

from tests.jepsen_like.netns import unavailable
from tests.jepsen_like.runner import check_dir, run_scenario
from tests.jepsen_like.scenarios import FULL, SCENARIOS, SMOKE

pytestmark = pytest.mark.integration
NETNS_REASON = unavailable()
# Stock pysyncobj leaves a leader cut off for 10 s stuck after the heal (the namespace
# scenarios catch it: C7). Expected to fail until the lead's fix (raft_patches) is in the tree.
RAFT_FIX = importlib.util.find_spec("schedd.replication.raft_patches") is not None


def _params(names: list[str]) -> list:
    out = []
    for name in names:
        marks = []
        if SCENARIOS[name].netns:
            marks.append(pytest.mark.skipif(NETNS_REASON is not None, reason=f"no network namespaces: {NETNS_REASON}"))
            if not RAFT_FIX:
                marks.append(pytest.mark.xfail(reason="stock pysyncobj's log repair (raft_patches not built)",
                                               strict=False))
        out.append(pytest.param(name, marks=marks))
    return out


def _seed() -> int:
    return int(os.environ["JEPSEN_SEED"]) if os.environ.get("JEPSEN_SEED") else random.randrange(1 << 30)


def _summary(d) -> str:
    return (d / "summary.txt").read_text()


# Drawing timeline.png costs 2-6 s a run. The suite draws it for S01 (so plot.py stays exercised)
# and for every run that did not pass (where someone reads it); other passing runs skip it.
ALWAYS_PLOTTED = ("S01",)


def run_plotted(name: str, seed: int, **kw):
    """run_scenario, with timeline.png drawn only where it is needed (ALWAYS_PLOTTED, failures)."""
    plot = name in ALWAYS_PLOTTED
    res, d = run_scenario(name, seed, plot=plot, **kw)
    if not plot and not (res["ok"] and not res["fault_evidence_missing"]):
        check_dir(d, plot=True)          # the same results, now with the picture
    return res, d


def run_checked(name: str, **kw):
    """Run, and retry once with a new seed when only liveness failed. Returns (results, dir)."""
    res, d = run_plotted(name, _seed(), **kw)
    assert res["safety_ok"], f"SAFETY violation in {name} (never retried); see {d}\n{_summary(d)}"
    if not res["ok"] or res["fault_evidence_missing"]:
        first = d
        res, d = run_plotted(name, random.randrange(1 << 30), **kw)
        assert res["safety_ok"], f"SAFETY violation in {name} on retry; see {d}\n{_summary(d)}"
        assert res["ok"] and not res["fault_evidence_missing"], (
            f"{name} failed twice (liveness): {first} and {d}\n{_summary(d)}")
    for data in (d / "cluster").glob("n*/"):      # keep logs and history, drop the node data
        shutil.rmtree(data, ignore_errors=True)
    return res, d


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", _params(SMOKE))
def test_smoke_scenario(name):
    run_checked(name)


@pytest.mark.jepsen_full
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", _params(FULL))
def test_full_scenario(name):
    run_checked(name)


@pytest.mark.soak
@pytest.mark.timeout(0)
def test_soak():
    """Only with --soak; JEPSEN_SOAK sets the length (default 10m, e.g. 2h)."""
    from tests.jepsen_like.__main__ import _duration
    from tests.jepsen_like.harness import STORE
    from tests.jepsen_like.soak import soak
    assert soak(_duration(os.environ.get("JEPSEN_SOAK", "10m")), None, STORE) == 0
