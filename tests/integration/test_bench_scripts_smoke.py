"""The single-purpose benches under bench/ cannot rot: each runs at its smallest against real
nodes and prints its table; no figure is asserted (the sizes are too small to mean anything, and
this machine is shared). A file of their own, apart from the yardstick's (test_bench_smoke.py),
so that the two run on two test workers at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_the_registration_bound_bench_runs_both_servers():
    """bench/bench_register.py (what bounds single-call registration): the gRPC floor and a real
    cluster each answer every call, and the table has a row for each; no figure is asserted."""
    out = subprocess.run([sys.executable, "bench/bench_register.py", "--jobs", "40", "--runs", "1"], cwd=REPO,
                         capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = {line.split("#")[0].strip(): line.split() for line in out.stdout.splitlines()
            if line.strip().startswith(("gRPC floor #1", "schedd #1")) and "calls/s" not in line}
    assert set(rows) == {"gRPC floor", "schedd"}, out.stdout
    assert all(r[-1] == "0" for r in rows.values()), out.stdout      # the errors column


def test_the_worker_failover_bench_runs_a_leader_change_of_each_kind():
    """bench/bench_worker_failover.py (election -> the worker's stream on the new leader): one
    SIGKILL and one SIGSTOP of the leader on this code, and its table has a row for each; no
    figure is asserted."""
    out = subprocess.run([sys.executable, "bench/bench_worker_failover.py", "--trials", "1", "--rounds", "1"],
                         cwd=REPO, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:2] in (["kill", "this"], ["stop", "this"])]
    assert sorted(r[0] for r in rows) == ["kill", "stop"], out.stdout


def test_the_container_bench_runs_and_leaves_nothing_behind():
    """bench/bench_containers.py at its smallest: a start row per kind and level, three runs back
    to back, and its check of what is left (containers, mounts, processes, cgroups) finds
    nothing (exit status 0); no figure is asserted."""
    from tests.support.containers import why_not
    why = why_not()
    if why:
        pytest.skip(why)
    out = subprocess.run([sys.executable, "bench/bench_containers.py", "--rounds", "1", "--concurrency", "1,2",
                          "--runs", "3"], cwd=REPO, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [line.split()[:2] for line in out.stdout.splitlines()
            if line.split()[:1] in (["shell"], ["container"]) and line.split()[1].isdigit()]
    assert sorted(rows) == [["container", "1"], ["container", "2"], ["shell", "1"], ["shell", "2"]], out.stdout
    assert "3 container runs back to back" in out.stdout and "nothing left behind" in out.stdout


def test_the_follower_hold_bench_reads_both_followers_tick_holds():
    """bench/bench_follower_hold.py at its smallest: one row, both followers' parts and schedstat."""
    out = subprocess.run([sys.executable, "bench/bench_follower_hold.py", "--fires", "5", "--puts", "5",
                          "--window", "2"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("tick thread CPU") == 2, out.stdout
    assert out.stdout.count("\n    held ") == 2 and "PutJob:" in out.stdout, out.stdout


def test_the_shard_scaling_bench_runs_every_phase_on_a_sharded_cluster(tmp_path):
    """bench/bench_shards.py at its smoke size with two shards: every phase runs (registration,
    snapshots, a node killed and restarted, a herd, a steady step), the table has its rows and the
    JSON line its figures; no figure is asserted."""
    out = subprocess.run([sys.executable, "bench/bench_shards.py", "--quick", "--shards", "2", "--results",
                          str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "registration, jobs/s" in out.stdout and "steady: highest fires/s" in out.stdout, out.stdout
    (line,) = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    (row,) = line["rows"]
    assert row["shards"] == 2 and len(row["snapshots"]) == 6, row          # 3 nodes x 2 shards
    assert row["herd"]["dispatched"] == line["herd"], row["herd"]
    assert set(row["restart"]["per_shard"]) == {"0", "1"} and row["restart"]["all_applied_s"] is not None, row


def test_the_memory_breakdown_bench_splits_an_applied_and_a_restored_state():
    """bench/bench_memory.py inprocess --breakdown --restored at its smallest: a breakdown of
    the applied state and of a replica restored from its snapshot, each with the job table's
    rows and a total; no figure is asserted."""
    out = subprocess.run([sys.executable, "bench/bench_memory.py", "inprocess", "--jobs", "600", "--breakdown",
                          "--restored"], cwd=REPO, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    heads = [line for line in out.stdout.splitlines() if line.startswith("breakdown, ")]
    assert [h.split()[1] for h in heads] == ["applied", "restored"], out.stdout
    assert out.stdout.count("jobs dict (its table)") == 2 and out.stdout.count("  total ") == 2, out.stdout


def test_the_idle_shard_bench_measures_every_node(tmp_path):
    """bench/bench_shard_idle.py at its smallest: one S, a short window; each node's CPU, threads
    and RSS are in the JSON line; no figure is asserted."""
    out_file = tmp_path / "idle.jsonl"
    out = subprocess.run([sys.executable, "bench/bench_shard_idle.py", "--shards", "2", "--seconds", "1",
                          "--settle", "0", "--json", str(out_file)], cwd=REPO, capture_output=True, text=True,
                         timeout=240, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (row,) = [json.loads(x) for x in out_file.read_text().splitlines()]
    assert row["shards"] == 2 and set(row["cpu_pct"]) == set(row["threads"]) == {"n1", "n2", "n3"}, row
