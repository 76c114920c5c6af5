#!/usr/bin/env python
"""Handler-start lateness through a worker, as the yardstick defines it: the handler's first statement
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
import asyncio
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

from _metrics import cpu_seconds, percentile, put_jobs_in_calls

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
               key=a.key, token=os.environ.get("SCHEDD_TOKEN"),
               allow_root=os.geteuid() == 0)     # a loopback benchmark, as whoever runs it
    if a.kind == "sync":
        def mark(ctx) -> None:
            fires.append((ctx.job, ctx.scheduled_ms, time.time_ns()))
    else:
        async def mark(ctx) -> None:            # type: ignore[misc]
            fires.append((ctx.job, ctx.scheduled_ms, time.time_ns()))
    w.handler(HANDLER)(mark)
    # how long before its due time each assignment arrived (negative: after it): tells a late
    # start caused upstream (the leader's claim, the stream) from one caused here
    from schedd_worker.runtime import WorkerRuntime
    leads: list[int] = []
    accept = WorkerRuntime._on_assignment

    def on_assignment(self, msg) -> None:
        leads.append(msg.due_ms - time.time_ns() // 1_000_000 if msg.due_ms else 0)
        accept(self, msg)

    WorkerRuntime._on_assignment = on_assignment       # type: ignore[method-assign]
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
        Path(a.out + ".leads").write_text(json.dumps(leads))
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
        leader = self.c.wait_leader(timeout=10)
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

    def leads(self) -> str:
        """Stop the workers (a drain) and say how early their assignments arrived."""
        for _, p, _ in self.workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        leads: list[int] = []
        for _, p, path in self.workers:
            try:
                p.wait(timeout=30)
                leads += json.loads(Path(str(path) + ".leads").read_text())
            except (subprocess.TimeoutExpired, OSError, ValueError):
                pass
        if not leads:
            return "assignment arrival: not recorded"
        late = sum(1 for x in leads if x < 0)
        return (f"assignments arrived before due: p1 {percentile(leads, 0.01)} ms, p50 "
                f"{percentile(leads, 0.50)} ms; {late:,} of {len(leads):,} arrived after due")

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
    say(f"  {run.leads()}")
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
    say(f"  herd {a.size:,}: started {len(per_instant):,} within {a.settle} s (not started by then: {missed}, "
        f"duplicated {dups}); last start {last if last is None else f'{last:.3f}'} s after due; "
        f"lateness {lat_summary(lat)}")
    say(f"  {cpu_text(cpu0, cpu1, len(per_instant))}")
    say(f"  {run.leads()}")
    return res


# ------------------------------------------------------------------ the worker alone

def alone(args: argparse.Namespace, root: Path) -> dict:
    """The worker alone, against a fake leader in this process that pushes `size` assignments
    due at T (`--rate` per second for `--window` s with `steady`), each 1.5 s ahead, the way
    the leader does (batched when the worker's hello says it takes batches), and acks every
    result. What it measures is the worker's own part of the lateness."""
    import grpc
    import grpc.aio
    from schedd_proto import scheduler_pb2 as pb
    from schedd_proto import scheduler_pb2_grpc as pb_grpc

    lead_ms = 1500
    handler = json.dumps({"python": {"name": HANDLER}})
    plan: list[tuple[int, str]] = []            # (due_ms, job), made when the worker connects
    connected = asyncio.Event()

    def make_plan() -> None:
        t0 = (math.floor(time.time()) + 3) * 1000
        if args.workload == "alone-herd":
            plan.extend((t0, f"h-{i:06d}") for i in range(args.size))
        else:
            for sec in range(args.window):       # `rate` due at each whole second
                plan.extend((t0 + sec * 1000, f"s-{i:06d}") for i in range(args.rate))
        connected.set()

    class Fake(pb_grpc.ClusterServicer, pb_grpc.WorkersServicer):
        address = ""
        results = 0

        async def Status(self, request, context):
            return pb.ClusterStatus(leader_id="fake", leader_grpc_address=self.address, term=1)

        async def Connect(self, request_iterator, context):
            hello = (await anext(aiter(request_iterator))).hello
            make_plan()
            out: asyncio.Queue = asyncio.Queue()
            batches = "batches" in pb.Welcome.DESCRIPTOR.fields_by_name    # (not in older code)
            welcome = pb.Welcome(leader_id="fake", term=1, lease_ms=10_000,
                                 **({"batches": True} if batches else {}))

            async def read() -> None:
                async for msg in request_iterator:
                    ms = msg.batch.messages if msg.WhichOneof("kind") == "batch" else [msg]
                    for m in ms:
                        if m.WhichOneof("kind") == "result":
                            self.results += 1
                            out.put_nowait(pb.LeaderMessage(ack=pb.ResultAck(
                                fencing_token=m.result.fencing_token, outcome="committed")))

            async def push() -> None:
                chunks = []                      # built before the first is due out
                k = 0
                while k < len(plan):             # up to 512 due at one instant per message
                    n = 1
                    while n < 512 and k + n < len(plan) and plan[k + n][0] == plan[k][0]:
                        n += 1
                    chunk, k0, k = plan[k:k + n], k, k + n
                    msgs = [pb.LeaderMessage(assignment=pb.Assignment(
                        execution_id=f"{job}@{due}", job=job, scheduled_ms=due, attempt=1,
                        fencing_token=k0 + i + 1, term=1, due_ms=due, handler_json=handler))
                        for i, (due, job) in enumerate(chunk)]
                    chunks.append((chunk[0][0], [pb.LeaderMessage(batch=pb.LeaderBatch(messages=msgs))]
                                   if batches and hello.batches else msgs))
                for due, msgs in chunks:
                    await asyncio.sleep(max(0.0, (due - lead_ms) / 1000 - time.time()))
                    for m in msgs:
                        out.put_nowait(m)

            tasks = [asyncio.ensure_future(read()), asyncio.ensure_future(push())]
            try:
                yield pb.LeaderMessage(welcome=welcome)
                while True:
                    yield await out.get()
            finally:
                for t in tasks:
                    t.cancel()

    async def run() -> dict:
        fake = Fake()
        server = grpc.aio.server()
        pb_grpc.add_ClusterServicer_to_server(fake, server)
        pb_grpc.add_WorkersServicer_to_server(fake, server)
        fake.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        out = root / "fires-alone.jsonl"
        cmd = [sys.executable, os.path.abspath(__file__), "_worker", "--cluster", fake.address,
               "--name", "alone", "--slots", str(args.slots), "--out", str(out), "--kind", args.kind]
        log = (root / "worker-alone.log").open("ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        profilers: list[subprocess.Popen] = []
        try:
            cpu0 = None
            await asyncio.wait_for(connected.wait(), 60)
            t0 = plan[0][0]
            deadline = plan[-1][0] / 1000 + args.settle
            while time.time() < deadline and fake.results < len(plan):
                if cpu0 is None and time.time() > t0 / 1000 - lead_ms / 1000 - 0.5:
                    cpu0 = cpu_seconds(proc.pid)
                    if args.profile:
                        for fmt, ext in (("flamegraph", "svg"), ("raw", "txt")):
                            profilers.append(subprocess.Popen(
                                ["py-spy", "record", "-o", f"{args.profile}-worker.{ext}", "--format",
                                 fmt, "--pid", str(proc.pid), "--duration", str(int(args.settle)),
                                 "--rate", "100", "--nonblocking"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                await asyncio.sleep(0.1)
            cpu1 = cpu_seconds(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 30)
            await server.stop(grace=0)
            for p in profilers:
                await asyncio.to_thread(p.wait, 60)
        fires = [json.loads(line) for line in out.read_text().splitlines()]
        try:
            leads = json.loads(Path(str(out) + ".leads").read_text())
            say(f"  assignments arrived before due: p1 {percentile(leads, 0.01)} ms, p50 "
                f"{percentile(leads, 0.50)} ms, min {min(leads)} ms")
        except (OSError, ValueError):
            pass
        lat = [t / 1e6 - sched for _, sched, t in fires]
        res = {"workload": f"{args.workload} {args.size if args.workload == 'alone-herd' else args.rate}",
               "fires": len(fires), "missed": len(plan) - len(fires),
               "p50_ms": percentile(lat, 0.50), "p99_ms": percentile(lat, 0.99),
               "last_s": max(lat) / 1000 if lat else None,
               "worker_cpu_s": (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None}
        say(f"  {res['workload']} (worker alone, fake leader): {len(fires):,} of {len(plan):,} "
            f"started; lateness {lat_summary(lat)}; worker CPU {res['worker_cpu_s']:.2f} s")
        return res

    return asyncio.run(run())


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        return worker_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=("steady", "herd", "alone-steady", "alone-herd"))
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
        need = args.rate * 2 if "steady" in args.workload else args.size
        args.slots = max(64, -(-need // args.workers))
    root = Path(tempfile.mkdtemp(prefix="bench-lateness-"))
    run = Run(args, root) if not args.workload.startswith("alone") else None
    try:
        if run is None:
            res = alone(args, root)
        else:
            run.start()
            res = steady(run) if args.workload == "steady" else herd(run)
    finally:
        if run is not None:
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
