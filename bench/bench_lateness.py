#!/usr/bin/env python
"""Handler-start lateness through a worker, as issue 14 defines it: the handler's first statement
minus the scheduled time the system hands to the handler (ctx.scheduled_ms), both on this
machine's clock. 3 nodes (TLS + ACL, as in production) and worker processes with an in-process
Python handler that records time.time_ns() first thing.

    python bench/bench_lateness.py steady --rate 100 [--window 20]
    python bench/bench_lateness.py herd --size 10000 [--workers 1 --slots 20000]
    python bench/bench_lateness.py steady --rate 1000 --profile bench/profiles/steady1000

steady: rate x 10 jobs every 10 s, spread by a hashed second (``H/10 * * * * *``), measured over
a window of whole periods opening at a half second; each job must fire exactly window/10 times
in it (fewer: missed, the same instant twice: duplicated). herd: `size` one-offs ``at T``;
figures are over every instant, counted after T + settle. --profile PREFIX records py-spy flame
graphs of the first worker and the leader during the window (PREFIX-worker.svg, -leader.svg).

For a same-run baseline, run it on the base branch's code first (PYTHONPATH at an extracted
tree of it, see bench/profiles/README.md), then on this tree, back to back.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _metrics import cpu_seconds, percentile, put_jobs_in_calls  # noqa: E402

HANDLER = "mark"


# ------------------------------------------------------------------ the worker process

def worker_main(argv: list[str]) -> int:
    """One worker: runs until SIGTERM, then writes every fire as JSON lines to --out."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--slots", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--kind", choices=("sync", "async"), default="sync")
    a = ap.parse_args(argv)
    from schedd_worker import Worker
    fires: list[tuple[str, int, int]] = []
    w = Worker(a.cluster, name=a.name, slots=a.slots, drain_grace_s=2, ca=a.ca, cert=a.cert,
               key=a.key, token=os.environ.get("SCHEDD_TOKEN"))
    if a.kind == "sync":
        def mark(ctx) -> None:
            fires.append((ctx.job, ctx.scheduled_ms, time.time_ns()))
    else:
        async def mark(ctx) -> None:            # type: ignore[misc]
            fires.append((ctx.job, ctx.scheduled_ms, time.time_ns()))
    w.handler(HANDLER)(mark)
    done = threading.Event()

    def flush() -> None:            # appends new fires every 0.2 s, so the controller can poll
        n = 0
        with open(a.out, "w") as f:
            while True:
                stop = done.wait(0.2)
                m = len(fires)
                f.write("".join(f'["{j}",{s},{t}]\n' for j, s, t in fires[n:m]))
                f.flush()
                n = m
                if stop:
                    return

    th = threading.Thread(target=flush, daemon=True)
    th.start()
    try:
        w.run()
    finally:
        done.set()
        th.join()
    return 0


# ------------------------------------------------------------------ the controller

def say(text: str) -> None:
    print(text, flush=True)


def sleep_until(wall: float) -> None:
    while (left := wall - time.time()) > 0:
        time.sleep(min(left, 0.5))


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Run:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        from schedd.runtime.cluster import LocalCluster
        self.args = args
        slots = max(args.slots, 256)
        self.c = LocalCluster(root, acl_settings={"rate_per_second": 0},
                              limits={"max_worker_slots": slots})
        self.workers: list[tuple[str, subprocess.Popen, Path]] = []
        self.profilers: list[subprocess.Popen] = []

    def start(self) -> None:
        c = self.c
        c.start()
        leader = c.wait_leader(timeout=60)
        token = c.worker_token(max_slots=max(self.args.slots, 256))
        for i in range(self.args.workers):
            name = f"bw{i + 1}"
            out = c.root / f"fires-{name}.jsonl"
            sec = c.security("worker", name)
            cmd = [sys.executable, os.path.abspath(__file__), "_worker", "--cluster", c.cluster_arg,
                   "--name", name, "--slots", str(self.args.slots), "--out", str(out),
                   "--kind", self.args.kind]
            if sec.ca is not None:
                cmd += ["--ca", str(sec.ca)]
            if sec.cert is not None:
                cmd += ["--cert", str(sec.cert), "--key", str(sec.key)]
            log = (c.root / "logs" / f"bench-{name}.log").open("ab")
            env = {**os.environ, "SCHEDD_TOKEN": token, "GRPC_ENABLE_FORK_SUPPORT": "false"}
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
            self.workers.append((name, p, out))
        say(f"  cluster up (leader {leader}), {len(self.workers)} worker(s) x {self.args.slots} slots, "
            f"{self.args.kind} handler")
        deadline = time.time() + 60
        with c.client() as cl:
            while time.time() < deadline:
                if len(cl.list_workers().workers) >= len(self.workers):
                    return
                time.sleep(0.2)
        raise TimeoutError("workers did not connect")

    def pids(self) -> dict[str, int]:
        out = {n: p.pid for n, p in self.c.nodes.items() if p.alive()}
        out.update({n: p.pid for n, p, _ in self.workers})
        return out

    def profile(self, seconds: float) -> None:
        if not self.args.profile:
            return
        prefix = self.args.profile
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)
        leader = self.c.leader()
        for what, pid in (("worker", self.workers[0][1].pid), ("leader", self.c.nodes[leader].pid)):
            for fmt, ext in (("flamegraph", "svg"), ("raw", "txt")):     # raw: collapsed stacks
                self.profilers.append(subprocess.Popen(
                    ["py-spy", "record", "-o", f"{prefix}-{what}.{ext}", "--format", fmt, "--pid",
                     str(pid), "--duration", str(int(seconds)), "--rate", "50", "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def fires(self) -> list[tuple[str, int, int]]:
        """Every fire recorded so far (the workers keep running)."""
        out: list[tuple[str, int, int]] = []
        for _, _, path in self.workers:
            with open(path) as f:
                out += [tuple(json.loads(line)) for line in f if line.endswith("\n")]  # type: ignore[misc]
        return out

    def wait_fires(self, done, until: float) -> list[tuple[str, int, int]]:
        """Poll the fires until done(fires) or the wall clock passes `until`."""
        while True:
            fires = self.fires()
            if done(fires) or time.time() > until:
                return fires
            time.sleep(0.5)

    def stop(self) -> None:
        for p in self.profilers:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        for _, p, _ in self.workers:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.c.stop()


def lat_summary(lat_ms: list[float]) -> str:
    if not lat_ms:
        return "no fires"
    return (f"p50 {percentile(lat_ms, 0.50):.2f} ms, p99 {percentile(lat_ms, 0.99):.2f} ms, "
            f"max {max(lat_ms):.1f} ms")


def cpu_text(a: dict[str, float | None], b: dict[str, float | None], fires: int) -> str:
    parts, tot = [], 0.0
    for n in a:
        if a[n] is not None and b.get(n) is not None:
            d = b[n] - a[n]             # type: ignore[operator]
            tot += d
            parts.append(f"{n} {d:.2f}")
    per = f", {tot / fires * 1000:.2f} s per 1,000 fires" if fires else ""
    return f"CPU s: {', '.join(parts)} (total {tot:.2f}{per})"


def steady(run: Run) -> dict:
    a = run.args
    n_jobs = a.rate * 10
    from schedd_client import job_spec
    with run.c.client(timeout=120) as cl:
        t = time.perf_counter()
        put_jobs_in_calls(cl, [job_spec(f"s-{i:06d}", schedule="H/10 * * * * *", python=HANDLER)
                               for i in range(n_jobs)])
        say(f"  registered {n_jobs:,} jobs in {time.perf_counter() - t:.1f} s")
    window = a.window - a.window % 10 or 10
    s0 = math.floor(time.time()) + 12.5
    s1 = s0 + window
    sleep_until(s0)
    pids = run.pids()
    cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
    run.profile(window - 1)
    sleep_until(s1)
    cpu1 = {n: cpu_seconds(p) for n, p in pids.items()}
    ms0, ms1 = int(s0 * 1000), int(s1 * 1000)
    expected = n_jobs * (window // 10)
    fires = run.wait_fires(lambda fs: sum(ms0 <= s < ms1 for _, s, _ in fs) >= expected,
                           s1 + a.settle)
    inside = [(j, s, t) for j, s, t in fires if ms0 <= s < ms1]
    per_instant = Counter((j, s) for j, s, _ in inside)
    dups = sum(k - 1 for k in per_instant.values() if k > 1)
    per_job = Counter(j for j, _ in per_instant)
    want = window // 10
    missed = sum(max(0, want - per_job.get(f"s-{i:06d}", 0)) for i in range(n_jobs))
    lat = [t / 1e6 - s for _, s, t in inside]
    res = {"workload": f"steady {a.rate}/s", "fires": len(per_instant), "missed": missed,
           "duplicated": dups, "p50_ms": percentile(lat, 0.50), "p99_ms": percentile(lat, 0.99),
           "max_ms": max(lat) if lat else None}
    say(f"  steady {a.rate} fires/s, {window} s window: {len(per_instant):,} instants, missed {missed}, "
        f"duplicated {dups}; lateness {lat_summary(lat)}")
    say(f"  {cpu_text(cpu0, cpu1, len(per_instant))}")
    return res


def herd(run: Run) -> dict:
    a = run.args
    from schedd_client import job_spec
    T = math.ceil(time.time() + a.lead)
    with run.c.client(timeout=300) as cl:
        t = time.perf_counter()
        put_jobs_in_calls(cl, [job_spec(f"h-{i:06d}", schedule=f"at {rfc3339(T)}", python=HANDLER)
                               for i in range(a.size)])
        say(f"  registered {a.size:,} one-offs in {time.perf_counter() - t:.1f} s; T - now = "
            f"{T - time.time():.1f} s")
    sleep_until(T - 2.5)
    pids = run.pids()
    cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
    run.profile(a.settle)
    fires = run.wait_fires(lambda fs: len(fs) >= a.size, T + a.settle)
    cpu1 = {n: cpu_seconds(p) for n, p in pids.items()}
    per_instant = Counter(j for j, _, _ in fires)
    dups = sum(k - 1 for k in per_instant.values() if k > 1)
    missed = a.size - len(per_instant)
    lat = [t / 1e6 - s for _, s, t in fires]
    last = max(lat) / 1000 if lat else None
    res = {"workload": f"herd {a.size}", "fires": len(per_instant), "missed": missed,
           "duplicated": dups, "p50_ms": percentile(lat, 0.50), "p99_ms": percentile(lat, 0.99),
           "last_s": last}
    say(f"  herd {a.size:,}: started {len(per_instant):,} within {a.settle} s (missed {missed}, "
        f"duplicated {dups}); last start {last if last is None else f'{last:.3f}'} s after due; "
        f"lateness {lat_summary(lat)}")
    say(f"  {cpu_text(cpu0, cpu1, len(per_instant))}")
    return res


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        return worker_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=("steady", "herd"))
    ap.add_argument("--rate", type=int, default=100, help="steady: fires per second")
    ap.add_argument("--window", type=int, default=20, help="steady: seconds measured (whole periods)")
    ap.add_argument("--size", type=int, default=10_000, help="herd: one-off jobs due at once")
    ap.add_argument("--lead", type=float, default=25.0, help="herd: T = now + this, before registering")
    ap.add_argument("--settle", type=float, default=15.0,
                    help="wait at most this long after T (herd) or the window's end (steady) for the fires")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--slots", type=int, default=0, help="slots per worker (default: what the workload needs)")
    ap.add_argument("--kind", choices=("sync", "async"), default="sync", help="the Python handler")
    ap.add_argument("--profile", metavar="PREFIX", help="py-spy flame graphs: PREFIX-worker.svg, PREFIX-leader.svg")
    ap.add_argument("--json", metavar="FILE", help="append the figures as one JSON line")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if not args.slots:
        need = args.rate * 2 if args.workload == "steady" else args.size
        args.slots = max(64, -(-need // args.workers))
    root = Path(tempfile.mkdtemp(prefix="bench-lateness-"))
    run = Run(args, root)
    try:
        run.start()
        res = steady(run) if args.workload == "steady" else herd(run)
    finally:
        run.stop()
        if not args.keep:
            import shutil
            shutil.rmtree(root, ignore_errors=True)
        else:
            say(f"  kept {root}")
    res["code"] = os.environ.get("BENCH_CODE", "")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
