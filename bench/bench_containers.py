"""Container jobs: what starting one costs, and that running many leaves nothing behind.

1. Handler start of a container job (its scheduled time -> the first command running inside the
   container), p50/p99 at 1, 10 and 50 concurrent starts, beside a shell job (the same command
   as a process on the worker's host) in the same run.
2. Back to back, 500 container runs one after the other (each with a memory limit, so each
   gets its cgroup v1 parent), then what is left: containers labelled with the worker's name,
   overlay/container mounts, processes naming one of the run's containers (conmon, the
   watchdog's sh, podman), the worker's child processes, and schedd-attempt-* cgroup
   directories; and the worker's RSS before, during and after (it must not grow beyond noise).
   The exit status is 1 if anything is left.

    python bench/bench_containers.py                    # 1/10/50 concurrent x 10 rounds; 500 runs
    python bench/bench_containers.py --quick            # 1/10 x 3 rounds; 100 runs
    python bench/bench_containers.py --rounds 1 --concurrency 1,2 --runs 3   # the smoke test

Runs 3 nodes and one `schedd worker` with containers (rootful podman) on 127.0.0.1, all on this
machine's cores. The job's first command reads /proc/uptime (CLOCK_BOOTTIME: containers share the
host's kernel clock, 10 ms resolution), turned into wall time with this process's offset; the
scheduled time is the trigger's instant. A level of concurrency C runs ceil(10 x rounds / C)
rounds (at most `rounds`): about the same number of starts at each level. The image is the
tests' offline busybox image. Mounts and cgroup directories are compared with what was there
before the runs (another user of podman on the machine may hold some).
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from schedd.runtime.cluster import LocalCluster
from schedd_client import job_spec
from tests.support.containers import built_image, containers, why_not

FINAL = ("SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED")
FIRST = "cat /proc/uptime; sleep 1"
WORKER = "w1"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def wait(pred, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise TimeoutError(what)


def boot_offset() -> float:
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def starts(client, names: list[str], offset: float) -> list[float]:
    """Trigger every job at once; each run's start lateness in ms."""
    eids = [client.trigger_job(n).id for n in names]
    out = []
    for eid in eids:
        ex = wait(lambda: (e := client.get_execution(eid)).state in FINAL and e, 300, f"{eid} to finish")
        if ex.state != "SUCCEEDED":
            raise RuntimeError(f"{eid} {ex.state}: {[(a.error, a.output_tail) for a in ex.attempts]}")
        up = float(ex.attempts[0].output_tail.split()[0])
        out.append((up + offset) * 1000 - ex.scheduled_ms)
    return out


# ------------------------------------------------------------------------------ what is left

@dataclass(slots=True)
class Host:
    """What the machine holds that a container run could leave behind (a snapshot)."""
    mounts: set[str] = field(default_factory=set)
    cgroups: set[str] = field(default_factory=set)

    @classmethod
    def now(cls) -> Host:
        return cls(mounts=container_mounts(), cgroups=set(glob.glob("/sys/fs/cgroup/*/schedd-attempt-*")))


def container_mounts() -> set[str]:
    """Mount points of overlay or container-storage mounts (/proc/self/mountinfo)."""
    out = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if " - overlay " in line or "/containers/" in line:
                out.add(line.split()[4])
    return out


def processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(pid), ppid, cmd))
    return out


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def children(pid: int) -> set[int]:
    return {p for p, ppid, _ in processes() if ppid == pid}


def leftovers(tokens: list[int], worker_pid: int, before: Host, kept: set[int]) -> dict[str, list[str]]:
    """Everything the runs with these fencing tokens left (empty lists: nothing). `kept`: the
    worker's children from before the runs (its container broker, when it separates teams)."""
    names = tuple(f"schedd-{t}-" for t in tokens)
    procs = processes()
    after = Host.now()
    return {
        "containers": containers(f"label=schedd.worker={WORKER}"),
        "mounts": sorted(after.mounts - before.mounts),
        "processes": [f"{pid} {cmd[:120]}" for pid, _, cmd in procs if any(n in cmd for n in names)],
        "worker children": [f"{pid} {cmd[:120]}" for pid, ppid, cmd in procs if ppid == worker_pid and pid not in kept],
        "cgroups": sorted(after.cgroups - before.cgroups),
    }


# ------------------------------------------------------------------------------ the runs

def latency(client, conc_levels: list[int], rounds: int, offset: float) -> None:
    print(f"ms from scheduled time to the first command running ({rounds} rounds at 1, fewer above 10)")
    print(f"{'kind':10} {'concurrent':>10} {'n':>4} {'p50':>8} {'p99':>8} {'max':>8}")
    for conc in conc_levels:
        n_rounds = min(rounds, max(1, math.ceil(rounds * 10 / conc)))
        for kind in ("shell", "container"):
            names = [f"{'sh' if kind == 'shell' else 'box'}{i}" for i in range(conc)]
            got = [v for _ in range(n_rounds) for v in starts(client, names, offset)]
            print(f"{kind:10} {conc:>10} {len(got):>4} {pct(got, 50):8.0f} {pct(got, 99):8.0f} {max(got):8.0f}",
                  flush=True)


def back_to_back(client, runs: int, worker_pid: int) -> bool:
    """`runs` container runs one after the other; True when nothing is left afterwards."""
    before, kept = Host.now(), children(worker_pid)
    rss = [rss_kib(worker_pid)]
    kept_rss = {pid: rss_kib(pid) for pid in kept}
    tokens, walls, failed = [], [], 0
    every = max(1, runs // 5)
    t0 = time.monotonic()
    for i in range(1, runs + 1):
        t = time.monotonic()
        eid = client.trigger_job("seq").id
        ex = wait(lambda: (e := client.get_execution(eid)).state in FINAL and e,
                  120, f"{eid} to finish", interval=0.02)
        walls.append((time.monotonic() - t) * 1000)
        tokens += [a.fencing_token for a in ex.attempts]
        failed += ex.state != "SUCCEEDED"
        if i % every == 0:
            rss.append(rss_kib(worker_pid))
    elapsed = time.monotonic() - t0
    print(f"\n{runs} container runs back to back (memory 64Mi each) in {elapsed:.0f} s, {failed} failed; "
          f"trigger -> finished p50 {pct(walls, 50):.0f} ms, p99 {pct(walls, 99):.0f} ms")
    print("worker RSS (MiB) before, then every", every, "runs:", " ".join(f"{r / 1024:.1f}" for r in rss))
    for pid in sorted(kept & children(worker_pid)):
        print(f"its child {pid} (the container broker) RSS (MiB) before {kept_rss[pid] / 1024:.1f}, "
              f"after {rss_kib(pid) / 1024:.1f}")
    try:                                      # a removal under way: give it a moment
        wait(lambda: not any(leftovers(tokens, worker_pid, before, kept).values()), 30, "a clean host", 0.5)
    except TimeoutError:
        pass
    left = leftovers(tokens, worker_pid, before, kept)
    for what, items in left.items():
        print(f"left: {what}: {len(items)}" + "".join(f"\n    {x}" for x in items[:10]))
    clean = not any(left.values()) and failed == 0
    print("nothing left behind" if clean else "SOMETHING WAS LEFT BEHIND (or a run failed)")
    return clean


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--concurrency", default="1,10,50", help="comma-separated levels of concurrent starts")
    ap.add_argument("--runs", type=int, default=500, help="container runs back to back")
    ap.add_argument("--quick", action="store_true", help="1 and 10 concurrent, 3 rounds, 100 runs")
    ap.add_argument("--separated", action="store_true",
                    help="a root worker with a uid per team (as schedd local runs it): its containers go "
                         "through the container broker, each as its team's uid")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.concurrency, args.runs = 3, "1,10", 100
    levels = [int(x) for x in args.concurrency.split(",") if x]
    why = why_not()
    if why:
        sys.exit(f"bench_containers: {why}")
    offset = boot_offset()
    with tempfile.TemporaryDirectory() as tmp, built_image() as image:
        c = LocalCluster(os.path.join(tmp, "c"), size=3)
        try:
            c.start()
            c.wait_leader(timeout=60)
            if args.separated:
                os.chmod(tmp, 0o711)          # the teams' uids traverse it to their folders
                jobs = os.path.join(tmp, "jobs")
                c.start_worker(WORKER, slots=max(levels) + 4, uid_range=(63000, 63099), state_dir=Path(jobs))
            else:
                c.start_worker(WORKER, slots=max(levels) + 4)
            client = c.client(timeout=30)
            # a worker that separates teams refuses a job without one (it would have no uid to run as)
            team = "bench" if args.separated else ""
            seq = job_spec("seq", team=team,
                           container={"image": image, "command": "cat /proc/uptime", "memory": "64Mi"})
            wait(lambda: _put(client, seq), 60, "the cluster at feature level 6")
            for i in range(max(levels)):
                client.put_job(job_spec(f"box{i}", team=team, container={"image": image, "command": FIRST}))
                client.put_job(job_spec(f"sh{i}", team=team, command=FIRST))
            starts(client, ["box0", "sh0"], offset)                    # warm up: the image, the paths
            print(f"container image {image}; worker slots {max(levels) + 4}; "
                  f"{'separated teams: through the container broker' if args.separated else 'containers run by the worker'}")
            latency(client, levels, args.rounds, offset)
            clean = back_to_back(client, args.runs, c.workers[WORKER].proc.pid) if args.runs else True
        finally:
            c.stop()
    sys.exit(0 if clean else 1)


def _put(client, spec) -> bool:
    try:
        client.put_job(spec)
        return True
    except Exception as e:                   # FAILED_PRECONDITION until the level is raised
        if "feature level" not in str(e):
            raise
        return False


if __name__ == "__main__":
    main()
