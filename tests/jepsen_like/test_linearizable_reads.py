"""Plain reads are linearizable under peers-only cuts and pauses of the leader, and the
same check with `stale_ok` finds stale reads (the negative control: the checker can fail).

Needs network namespaces (root, iproute2, iptables): skipped with the reason otherwise. The
default run is short enough for CI (two runs of about half a minute each); `--jepsen-full` adds a
longer one (`JEPSEN_LIN_S`, default 180 s)."""

from __future__ import annotations

import os
import random

import pytest

from tests.jepsen_like import netns
from tests.jepsen_like.linearizable import Read, Run, Write, check

REASON = netns.unavailable()
needs_netns = pytest.mark.skipif(REASON is not None, reason=f"no network namespaces: {REASON}")


# ---------------------------------------------------------------- the checker alone

def test_checker_finds_a_read_older_than_an_acknowledged_write() -> None:
    writes = [Write(0.0, 1.0, 2, "a"), Write(1.5, 2.0, 3, "b")]
    ok = [Read(2.1, 2.2, 3, "b", "n1"), Read(1.9, 2.5, 2, "a", "n2")]   # the second overlaps
    assert check(writes, ok, (1, "init")) == []
    stale = Read(2.1, 2.2, 2, "a", "n3")
    (problem,) = check(writes, [stale], (1, "init"))
    assert problem.startswith("stale read on n3: version 2")


def test_checker_finds_a_value_no_write_made_and_allows_an_unknown_outcome() -> None:
    writes = [Write(0.0, 1.0, 2, "a"), Write(1.0, None, 0, "maybe")]
    assert check(writes, [Read(2.0, 2.1, 3, "maybe", "n1")], (1, "init")) == []
    (problem,) = check(writes, [Read(2.0, 2.1, 3, "forged", "n1")], (1, "init"))
    assert "which no write made" in problem


# ---------------------------------------------------------------- on a real cluster

def _run(tmp_path, *, seconds: float, stale_ok: bool) -> Run:
    seed = int(os.environ.get("JEPSEN_SEED", random.randrange(1 << 30)))
    run = Run(tmp_path, duration_s=seconds, stale_ok=stale_ok, seed=seed)
    run.execute()
    print(f"seed {seed}: {len(run.writes)} writes ({sum(w.end is None for w in run.writes)} unknown), "
          f"{len(run.reads)} reads checked, {run.refused} refused; faults: {'; '.join(run.faults)}")
    return run


@needs_netns
def test_plain_reads_are_linearizable_under_leader_cuts_and_pauses(tmp_path) -> None:
    run = _run(tmp_path, seconds=30, stale_ok=False)
    assert len(run.faults) >= 4 and len(run.reads) > 100 and sum(w.end is not None for w in run.writes) > 20
    problems = run.anomalies()
    assert problems == [], f"{len(problems)} anomalies, first: {problems[:5]}"


@needs_netns
def test_negative_control_stale_ok_reads_are_caught(tmp_path) -> None:
    """The same check on `stale_ok` reads: a reader pinned to the cut leader reads its old state
    while the new leader acknowledges writes, so the checker must report stale reads."""
    run = _run(tmp_path, seconds=22, stale_ok=True)
    problems = run.anomalies()
    assert any(p.startswith("stale read") for p in problems), \
        f"the checker found no stale read among {len(run.reads)} stale_ok reads (faults: {run.faults})"


@needs_netns
@pytest.mark.jepsen_full
def test_plain_reads_are_linearizable_long(tmp_path) -> None:
    run = _run(tmp_path, seconds=float(os.environ.get("JEPSEN_LIN_S", "180")), stale_ok=False)
    problems = run.anomalies()
    assert problems == [], f"{len(problems)} anomalies, first: {problems[:5]}"
