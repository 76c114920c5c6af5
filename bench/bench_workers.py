"""Workers: how late handlers start against their scheduled time, and how long a worker crash
takes to be detected and retried.

    python bench/bench_workers.py [--jobs 100] [--seconds 30] [--rounds 3]

Runs 3 nodes and 2 `schedd worker` processes on 127.0.0.1 (all on this machine's cores).
Start lateness = the worker's own start of the handler (attempt.started_ms) minus the
scheduled time, both on this machine's clock. Baseline in the same run: the leader's dispatch
lateness of the same instants (schedd_fire_lateness_seconds), i.e. without the worker hop.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from prometheus_client.parser import text_string_to_metric_families

from schedd.runtime.cluster import LocalCluster
from schedd_client import Client, job_spec


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise TimeoutError(what)


def fire_lateness_mean(c: LocalCluster) -> tuple[float, float]:
    lead = c.leader()
    text = c.http_get(lead, "/metrics")
    total = count = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name == "schedd_fire_lateness_seconds":
            for s in fam.samples:
                if s.name.endswith("_sum"):
                    total = s.value
                elif s.name.endswith("_count"):
                    count = s.value
    return total, count


def lateness(c: LocalCluster, client: Client, jobs: int, seconds: int, schedule: str, label: str) -> None:
    names = [f"{label}-{i:03d}" for i in range(jobs)]
    client.put_jobs([job_spec(n, schedule=schedule, command="true") for n in names])
    time.sleep(2)                                       # let the first instants settle
    s0, n0 = fire_lateness_mean(c)
    start_ms = int(time.time() * 1000) + 1000
    time.sleep(seconds)
    end_ms = int(time.time() * 1000)
    s1, n1 = fire_lateness_mean(c)
    time.sleep(3)                                       # let the last attempts report
    late, missing = [], 0
    for n in names:
        for ex in client.list_executions(n, oldest_first=True, limit=1000):
            if not start_ms <= ex.scheduled_ms <= end_ms - 1000:
                continue
            if ex.state != "SUCCEEDED" or not ex.attempts:
                missing += 1
                continue
            late.append(ex.attempts[-1].started_ms - ex.scheduled_ms)
        client.delete_job(n)
    print(f"  {label}: {jobs} jobs '{schedule}', {seconds} s: {len(late)} handler starts, {missing} not SUCCEEDED")
    if late:
        print(f"    start lateness (worker start - scheduled): p50 {pct(late, 50):.1f} ms, p99 {pct(late, 99):.1f} ms, "
              f"max {max(late):.1f} ms, mean {statistics.mean(late):.1f} ms, early (<0) {sum(v < 0 for v in late)}")
    if n1 > n0:
        print(f"    baseline, leader dispatch lateness of the same window: mean {(s1 - s0) / (n1 - n0) * 1000:.1f} ms "
              f"over {int(n1 - n0)} instants")


def crash(c: LocalCluster, client: Client, rounds: int, lease_ms: int) -> None:
    client.put_job(job_spec("long", command="sleep 30", retry={"max_attempts": 5, "initial_backoff_seconds": 1}))
    detect = []
    for r in range(rounds):
        eid = client.trigger_job("long").id
        ex = wait(lambda: (e := client.get_execution(eid)).state == "RUNNING" and e.attempts
                  and e.attempts[-1].started_ms and e, 30, "long to run")
        time.sleep(1)
        victim = client.get_execution(eid).attempts[-1].worker
        killed_ms = int(time.time() * 1000)
        c.workers[victim].proc.send_signal(signal.SIGKILL)
        c.workers[victim].proc.wait()
        ex = wait(lambda: (e := client.get_execution(eid)).state == "RUNNING" and len(e.attempts) >= 2 and e,
                  lease_ms / 1000 + 30, "the retry")
        retried = ex.attempts[-1]
        detect.append((ex.attempts[0].ended_ms - killed_ms, retried.started_ms - killed_ms))
        client.cancel_execution(eid)
        c.start_worker(victim, slots=64)
        wait(lambda: len(client.list_workers().workers) == 2, 30, "the worker to come back")
    for i, (lost, retry) in enumerate(detect, 1):
        print(f"    round {i}: kill -> attempt expired (LOST) {lost / 1000:.2f} s, kill -> retry claimed "
              f"elsewhere {retry / 1000:.2f} s")
    print(f"  worker SIGKILL with lease {lease_ms} ms: detection median "
          f"{statistics.median(d[0] for d in detect) / 1000:.2f} s, retry median {statistics.median(d[1] for d in detect) / 1000:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"# {' '.join(sys.argv)}  ({os.cpu_count()} cpus)")
    for lease_ms in (10_000, 3_000):
        with tempfile.TemporaryDirectory(prefix="schedd-bench-workers-") as tmp:
            c = LocalCluster(tmp, size=3, scheduler={"lease_ms": lease_ms})
            try:
                c.start()
                c.wait_leader(timeout=60)
                for w in ("wa", "wb"):
                    c.start_worker(w, slots=64)
                client = c.client(timeout=30)
                wait(lambda: len(client.list_workers().workers) == 2, 30, "workers")
                print(f"== lease {lease_ms} ms ==")
                if lease_ms == 10_000:
                    lateness(c, client, a.jobs, a.seconds, "H/5 * * * * *", "spread")
                    lateness(c, client, a.jobs, a.seconds, "@every 5s", "burst")
                crash(c, client, a.rounds, lease_ms)
            finally:
                c.stop()


if __name__ == "__main__":
    main()
