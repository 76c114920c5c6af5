"""schedd as the yardstick measures it: a real 3-node LocalCluster (TLS and access control on,
as in production; no per-principal rate limit, since one admin token does all the calls) and one
worker process (bench/_recworker.py) whose in-process Python handler records each fire."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench._metrics import cpu_seconds, put_jobs_in_calls, wait_caught_up
from schedd.runtime.cluster import DIE_WITH_PARENT, LocalCluster
from schedd_client import Client, job_spec

HERE = Path(__file__).resolve().parent
WORKER_SLOTS = 256                   # [limits] max_worker_slots, the most one worker may claim
SHELL = 'printf "%s %s %s\\n" "$EPOCHREALTIME" "$SCHEDD_JOB_ID" "$SCHEDD_SCHEDULED_TIME" >> "$1"'


@dataclass
class Schedd:
    """A running cluster and its recording worker; `records` is the worker's fire log."""

    c: LocalCluster
    records: Path
    worker: subprocess.Popen | None = None
    client: Client = field(init=False)
    # A cluster shared by several workloads (the smoke run): each gets its own job-name prefix
    # and reads the fire log from where its turn began; its periodic jobs are deleted after it.
    prefix: str = ""
    offset: int = 0

    def __post_init__(self) -> None:
        self.client = self.c.client(timeout=300)

    def addrs(self) -> list[str]:
        lead = self.c.leader()
        return [self.c.nodes[lead].grpc] + [p.grpc for n, p in self.c.nodes.items() if n != lead] \
            if lead else self.c.grpc_addresses

    def pids(self, with_worker: bool = True) -> dict[str, int]:
        out = {n: p.pid for n, p in self.c.nodes.items() if p.alive() and p.pid}
        if with_worker and self.worker is not None:
            out["worker"] = self.worker.pid
        return out

    def cpu(self, children: bool = False) -> dict[str, float]:
        """CPU seconds per process (nodes and the worker; `children`: the worker's reaped children too)."""
        return {n: cpu_seconds(pid, children=children and n == "worker") or 0.0
                for n, pid in self.pids().items()}

    def start_worker(self) -> None:
        sec = self.c.security("worker", "bench")
        env = {**os.environ, "SCHEDD_TOKEN": self.c.worker_token(), DIE_WITH_PARENT: "1",
               "GRPC_ENABLE_FORK_SUPPORT": "false"}
        log = (self.c.root / "logs" / "worker-bench.log").open("ab")
        self.worker = subprocess.Popen(
            [sys.executable, str(HERE / "_recworker.py"), str(self.records), "bench", str(WORKER_SLOTS),
             self.c.cluster_arg, str(sec.ca or ""), str(sec.cert or ""), str(sec.key or "")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.worker.poll() is not None:
                raise RuntimeError(f"the bench worker exited {self.worker.returncode}: see {log.name}")
            try:
                if any(w.name == "bench" for w in self.client.list_workers().workers):
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.2)
        raise TimeoutError("the bench worker did not connect within 60 s")

    def stop(self) -> None:
        self.client.close()
        if self.worker is not None and self.worker.poll() is None:
            os.kill(self.worker.pid, signal.SIGKILL)
            self.worker.wait(timeout=30)
        self.c.stop()

    def turn(self, prefix: str) -> None:
        """Begin a workload's turn on a shared cluster."""
        self.prefix = prefix
        self.offset = self.records.stat().st_size if self.records.exists() else 0

    def name(self, i: int | str) -> str:
        return f"{self.prefix}j{i}"

    def put(self, specs: list) -> float:
        """Register `specs` batched; seconds it took, and the followers caught up."""
        t = time.perf_counter()
        put_jobs_in_calls(self.client, specs)
        took = time.perf_counter() - t
        wait_caught_up(self.c, timeout=120)
        return took


@contextmanager
def running(root: Path, *, worker: bool = True, raft: dict | None = None):
    """A fresh 3-node cluster in `root` (and the recording worker); stopped on exit. `raft`:
    [raft] settings other than the defaults (bench_idle.py compares heartbeats)."""
    c = LocalCluster(root, raft=dict(raft or {}), acl_settings={"rate_per_second": 0})
    s = None
    try:
        c.start()
        c.wait_leader(timeout=90)
        s = Schedd(c, root / "records.txt")
        if worker:
            s.start_worker()
        yield s
    finally:
        if s is not None:
            s.stop()
        else:
            c.stop()


def periodic_specs(s: Schedd, n: int, period: int, shell: bool = False) -> list:
    """Job j<i> fires at seconds ≡ i mod `period` (the same grid the peers get)."""
    out = []
    for i in range(n):
        sched = "* * * * * *" if period == 1 else f"{i % period}/{period} * * * * *"
        if shell:
            out.append(job_spec(s.name(i), schedule=sched, argv=["bash", "-c", SHELL, "rec", str(s.records)]))
        else:
            out.append(job_spec(s.name(i), schedule=sched, python="rec"))
    return out
