"""Container jobs: handler start of a container job (its scheduled time -> the first command
running inside the container), at 1 and at 10 concurrent starts, beside a shell job (the same
command as a process on the worker's host) in the same run.

    python bench/bench_containers.py [--rounds 10]

Runs 3 nodes and one `schedd worker` with containers (rootful podman) on 127.0.0.1, all on this
machine's cores. The job's first command reads /proc/uptime (CLOCK_BOOTTIME: containers share the
host's kernel clock, 10 ms resolution), turned into wall time with this process's offset; the
scheduled time is the trigger's instant. The image is the tests' offline busybox image.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from schedd.runtime.cluster import LocalCluster
from schedd_client import job_spec
from tests.support.containers import built_image, why_not

FIRST = "cat /proc/uptime; sleep 1"


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


def boot_offset() -> float:
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def starts(client, names: list[str], offset: float) -> list[float]:
    """Trigger every job at once; each run's start lateness in ms."""
    eids = [client.trigger_job(n).id for n in names]
    out = []
    for eid in eids:
        ex = wait(lambda: (e := client.get_execution(eid)).state == "SUCCEEDED" and e, 120, f"{eid} to succeed")
        up = float(ex.attempts[0].output_tail.split()[0])
        out.append((up + offset) * 1000 - ex.scheduled_ms)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    why = why_not()
    if why:
        sys.exit(f"bench_containers: {why}")
    offset = boot_offset()
    with tempfile.TemporaryDirectory() as tmp, built_image() as image:
        c = LocalCluster(os.path.join(tmp, "c"), size=3)
        try:
            c.start()
            c.wait_leader(timeout=60)
            c.start_worker("w1", slots=12)
            client = c.client(timeout=30)
            for i in range(10):
                wait(lambda: _put(client, f"box{i}", job_spec(f"box{i}", container={"image": image, "command": FIRST})),
                     60, "the cluster at feature level 5")
                client.put_job(job_spec(f"sh{i}", command=FIRST))
            wait(lambda: _ran(client, "box0", offset), 90, "a first container run")
            print(f"container image {image}; {args.rounds} rounds; ms from scheduled time to the first "
                  "command running")
            print(f"{'kind':10} {'concurrent':>10} {'n':>4} {'p50':>8} {'p99':>8} {'max':>8}")
            for conc in (1, 10):
                for kind in ("shell", "container"):
                    names = [f"{'sh' if kind == 'shell' else 'box'}{i}" for i in range(conc)]
                    got = [v for _ in range(args.rounds) for v in starts(client, names, offset)]
                    print(f"{kind:10} {conc:>10} {len(got):>4} {pct(got, 50):8.0f} {pct(got, 99):8.0f} {max(got):8.0f}")
        finally:
            c.stop()


def _put(client, name: str, spec) -> bool:
    try:
        client.put_job(spec)
        return True
    except Exception as e:                   # FAILED_PRECONDITION until the level is raised
        if "feature level" not in str(e):
            raise
        return False


def _ran(client, name: str, offset: float) -> bool:
    starts(client, [name], offset)
    return True


if __name__ == "__main__":
    main()
