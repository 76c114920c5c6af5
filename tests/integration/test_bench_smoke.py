"""The yardstick (`python -m bench`, bench/README.md) cannot rot: every workload runs end to end at
its tiny size against a real 3-node cluster and its recording worker (and against the APScheduler
peers when their venv, bench/.peers-venv, is installed already; the test never installs it), and
each run appends its JSON line with the keys the table reads. No figure is asserted: the sizes are
too small to mean anything, and this machine is shared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import _peers
from bench.workloads import SIZES, peer_limit

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCORED = {"expected", "started", "missed", "duplicated", "p50_s", "p99_s", "max_s", "last_start"}
KEYS = {
    "steady": SCORED | {"cpu_s", "window_s"},
    "sustained": SCORED | {"cpu_s", "window_s"},
    "herd": SCORED | {"due"},
    "register": {"single_per_s", "batched_per_s"},
    "memory": {"rss_per_job_max"},
    "failover": SCORED | {"kill_to_start_p50_s", "kill_to_start_p99_s", "trials"},
}
COMMON = {"ts", "mode", "machine", "code", "peers", "workload", "system", "run", "params", "elapsed_s"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One `python -m bench all --tiny` (with the peers when their venv is installed already)."""
    folder = tmp_path_factory.mktemp("bench-results")
    peers = _peers._works()
    args = [sys.executable, "-m", "bench", "all", "--tiny", "--results", str(folder)]
    out = subprocess.run(args + ([] if peers else ["--no-peers"]), cwd=REPO, capture_output=True, text=True,
                         timeout=280, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = [json.loads(x) for f in folder.glob("*.jsonl") for x in f.read_text().splitlines()]
    return peers, lines, out.stdout


def check(lines: list[dict], system: str) -> None:
    tiny = [w for w in SIZES if "tiny" in SIZES[w]]
    assert set(KEYS) == {w.split("-")[0] for w in tiny}          # every kind is checked here
    for w in tiny:
        if peer_limit(w, system, "tiny"):
            continue
        recs = [r for r in lines if r["workload"] == w and r["system"] == system]
        assert len(recs) == 1, (w, system, len(recs))
        rec = recs[0]
        assert "error" not in rec, (w, system, rec["error"])
        want = COMMON | KEYS[w.split("-")[0]]
        assert want <= rec.keys(), (w, system, sorted(want - rec.keys()))


def test_every_workload_runs_on_schedd_and_writes_its_json_line(tiny_run):
    _, lines, stdout = tiny_run
    check(lines, "schedd")
    assert "schedd yardstick, tiny" in stdout                     # the one table was printed
    sustained = next(r for r in lines if r["workload"] == "sustained" and r["system"] == "schedd")
    assert isinstance(sustained["overload_shown"], str)           # what cluster status said


def test_every_workload_runs_on_the_peers(tiny_run):
    peers, lines, _ = tiny_run
    if not peers:
        pytest.skip("the peers' venv (bench/.peers-venv) is not installed: `python -m bench all --quick` installs it")
    for system in _peers.PEERS:
        check(lines, system)
