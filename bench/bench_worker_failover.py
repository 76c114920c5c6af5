#!/usr/bin/env python
"""How long a worker takes to reach a new leader: from the new leader's
election to the worker's stream registered on it, per leader change, for this code and for a
baseline checkout in the same run.

A 3-node cluster (TLS, mTLS and access control on, as in production) and one `schedd worker`
on 127.0.0.1. Each trial takes the leader away, then brings it back:

- `kill`: SIGKILL of the leader, then restart it;
- `stop`: SIGSTOP of the leader (its TCP connections stay open, it answers nothing), then SIGCONT.

Both times are read from the new leader's own log (one clock, one process): the line of its
role change ("raft role ... -> leader (term N)") and the line of the worker's stream registered
on it ("worker w1 connected from"). The trial also waits, through ListWorkers on the new leader,
for the worker to be listed there, and before the next trial for the old leader to be back as
a follower of the new term (the worker stays on the new leader).

    python bench/bench_worker_failover.py [--trials 20] [--modes kill,stop] [--rounds 2]
                                          [--base DIR]   # a checkout of the baseline code

`--base DIR` runs the same trials with DIR's code (its nodes and its worker: PYTHONPATH
DIR:DIR/client:DIR/worker) in the same run, interleaved: each round runs a fresh cluster of the
baseline, then one of this code, `trials / rounds` trials each, per mode. Figures (p50 / p95 /
p99 / max, nearest rank) are per code and mode; the machine is shared, so only figures of one
run compare.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere

from bench._metrics import code_version, percentile, table
from schedd.ports.fakes import wait_until
from schedd.runtime.cluster import LocalCluster
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[1]
WORKER = "w1"
_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
_ELECTED = re.compile(_STAMP + r".*raft role \S+ -> leader \(term (\d+)\)")
_JOINED = re.compile(_STAMP + r".*worker (\S+) connected from")


def _wall(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@dataclass(slots=True)
class Trial:
    mode: str
    elected_to_stream_s: float
    off_to_stream_s: float                 # from the signal (this process's clock) to the stream


@dataclass(slots=True)
class Run:
    label: str
    root: Path
    pythonpath: str
    trials: list[Trial] = field(default_factory=list)


def code_path(repo: Path) -> str:
    return os.pathsep.join(str(p) for p in (repo, repo / "client", repo / "worker"))


def listed(c: LocalCluster, nid: str) -> bool:
    """The worker's stream is registered on node `nid` (ListWorkers answered by `nid` itself)."""
    try:
        with c.channel(nid) as ch:
            out = pb_grpc.WorkersStub(ch).ListWorkers(pb.ListWorkersRequest(), timeout=2.0)
    except Exception:  # noqa: BLE001 - a node in an election: not yet
        return False
    return any(w.name == WORKER for w in out.workers)


def log_times(path: Path, offset: int, term: int) -> tuple[float | None, float | None]:
    """The wall times, in `path` from `offset` on, of this node becoming leader of `term` and of
    the worker's first stream registered on it after that."""
    elected = joined = None
    with path.open("rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode(errors="replace")
            m = _ELECTED.match(line)
            if m and int(m.group(2)) == term:
                elected, joined = _wall(m.group(1)), None
                continue
            m = _JOINED.match(line)
            if m and m.group(2) == WORKER and elected is not None and joined is None:
                joined = _wall(m.group(1))
    return elected, joined


def one_trial(c: LocalCluster, mode: str) -> Trial:
    old = c.wait_leader(timeout=60)
    wait_until(lambda: listed(c, old), timeout=60, interval=0.05, what=f"{WORKER} on {old}")
    offsets = {n: p.log.stat().st_size for n, p in c.nodes.items()}
    t_off = time.time()
    if mode == "kill":
        c.kill_node(old)
    else:
        c.signal_node(old, signal.SIGSTOP)
    try:
        new = c.wait_leader(timeout=60, exclude=old)
        wait_until(lambda: listed(c, new), timeout=60, interval=0.05, what=f"{WORKER} on {new}")
        info = c.node_info(new)
        assert info is not None, f"{new} stopped answering"
    finally:
        if mode == "kill":
            c.start_node(old)
        else:
            c.signal_node(old, signal.SIGCONT)
    elected, joined = wait_until(lambda: _both(c, new, offsets[new], info.term), timeout=30, interval=0.1,
                                 what=f"{new}'s log lines of term {info.term}")
    wait_until(lambda: _follows(c, old, info.term), timeout=90, interval=0.1, what=f"{old} back as a follower")
    return Trial(mode, joined - elected, joined - t_off)


def _both(c: LocalCluster, nid: str, offset: int, term: int):
    elected, joined = log_times(c.nodes[nid].log, offset, term)
    return (elected, joined) if elected is not None and joined is not None else None


def _follows(c: LocalCluster, nid: str, term: int) -> bool:
    info = c.node_info(nid, timeout=1.0)
    return info is not None and info.role == "follower" and info.term >= term


def run_trials(run: Run, mode: str, n: int, i: int) -> None:
    c = LocalCluster(run.root / f"{mode}-{i}", env={"PYTHONPATH": run.pythonpath},
                     acl_settings={"rate_per_second": 0})
    try:
        c.start()
        c.wait_leader(timeout=90)
        c.start_worker(WORKER, slots=4)
        for _ in range(n):
            t = one_trial(c, mode)
            run.trials.append(t)
            print(f"  {run.label:<8} {mode:<4} election -> stream {t.elected_to_stream_s * 1000:7.0f} ms   "
                  f"signal -> stream {t.off_to_stream_s * 1000:7.0f} ms", flush=True)
    finally:
        c.stop()


def summary(runs: list[Run], modes: list[str]) -> str:
    rows = []
    for mode in modes:
        for run in runs:
            xs = [t.elected_to_stream_s for t in run.trials if t.mode == mode]
            ys = [t.off_to_stream_s for t in run.trials if t.mode == mode]
            if not xs:
                continue
            q = [percentile(xs, p) for p in (0.5, 0.95, 0.99)] + [max(xs)]
            rows.append([mode, run.label, len(xs), *(f"{v * 1000:.0f}" for v in q),
                         f"{(percentile(ys, 0.5) or 0) * 1000:.0f}", f"{max(ys) * 1000:.0f}"])
    return table(["leader", "code", "trials", "p50 ms", "p95 ms", "p99 ms", "max ms",
                  "signal->stream p50", "max"], rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="leader changes per code and mode")
    ap.add_argument("--modes", default="kill,stop", help="kill (SIGKILL, restart) and/or stop (SIGSTOP, SIGCONT)")
    ap.add_argument("--rounds", type=int, default=2, help="fresh clusters per code and mode, interleaved")
    ap.add_argument("--base", help="a checkout of the baseline code (git worktree add DIR REV)")
    ap.add_argument("--json", help="append the figures as one JSON line here")
    ap.add_argument("--keep", action="store_true", help="keep the clusters' folders (node and worker logs)")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    if not modes or set(modes) - {"kill", "stop"}:
        ap.error("--modes takes kill and/or stop")
    tmp = Path(tempfile.mkdtemp(prefix="bench-worker-failover-"))
    os.chdir(tmp)          # `python -m schedd` puts its working directory first on the path
    runs = [Run("base", tmp / "base", code_path(Path(a.base).resolve()))] if a.base else []
    runs.append(Run("this", tmp / "this", code_path(REPO)))
    rounds = max(1, min(a.rounds, a.trials))
    codes = f"this: {code_version()}" + (f"; base: {code_version_of(Path(a.base))}" if a.base else "")
    print(f"worker failover ({codes}): {a.trials} leader changes per code and mode, {rounds} round(s)"
          f"{'; logs in ' + str(tmp) if a.keep else ''}",
          flush=True)
    try:
        for mode in modes:
            for i in range(rounds):
                n = a.trials // rounds + (1 if i < a.trials % rounds else 0)
                for run in runs:
                    run_trials(run, mode, n, i)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("new leader's election -> the worker's stream registered on it (the new leader's log):")
    print(summary(runs, modes))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps({run.label: [[t.mode, round(t.elected_to_stream_s, 4), round(t.off_to_stream_s, 4)]
                                            for t in run.trials] for run in runs}) + "\n")
    return 0


def code_version_of(repo: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return repo.name


if __name__ == "__main__":
    sys.exit(main())
