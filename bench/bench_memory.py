#!/usr/bin/env python
"""Memory per registered job, and registration throughput, with optional py-spy profiles.

    python bench/bench_memory.py cluster [--jobs N] [--single N] [--profile DIR]
    python bench/bench_memory.py inprocess [--jobs N] [--tracemalloc] [--breakdown] [--restored]
    python bench/bench_memory.py propose [--single N]

cluster     a 3-node LocalCluster (TLS + ACL, no rate limit). Registers ``--single`` jobs with one
            PutJob each (64 in flight, AsyncClient), then ``--jobs`` daily jobs with ``put_jobs``
            (calls of 5,000), and reads each node's VmRSS minus its reading before registration,
            once every replica has applied everything. The RSS includes the Raft log's in-memory
            copy. With ``--profile DIR``, py-spy records the leader and one follower during each
            phase (flame graphs ``DIR/<phase>-<role>.svg``).
inprocess   the same daily jobs applied as ``put_many`` entries to a SchedulerState in this
            process: RSS growth per job of the state alone (no Raft log, no gRPC), and with
            ``--tracemalloc`` the top allocation sites. ``--breakdown``: where the bytes are, per
            structure (each object's sys.getsizeof rounded up to pymalloc's 16-byte blocks,
            counted once, under the first structure that reaches it: a string 200,000 rows share
            counts once). ``--restored``: the same for a replica restored from this state's own
            snapshot (the plain format a cluster at this build's feature level writes), with the
            bytes tracemalloc saw the restore keep.
propose     CPU per PutJob entry on a 1-node RaftNode in this process (fsync always, no network, no
            gRPC): ``--single`` PUT proposals, 64 in flight, each alone and then group-committed
            (schedd.replication.node.GroupCommit): what one log entry per call costs.

Daily jobs: ``M H * * *`` spread over the day's 1,440 minutes, one shell handler each.

To measure another checkout (say main) run it from that checkout's folder with its packages
first on PYTHONPATH: the nodes start as ``python -m schedd`` in the current folder, which Python
puts ahead of PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _metrics import cpu_seconds, put_jobs_in_calls, rss_bytes, scrape, total


def daily(i: int) -> tuple[str, str]:
    """(name, schedule) of the i-th daily job."""
    return f"daily-{i:07d}", f"{i % 60} {(i // 60) % 24} * * *"


def self_rss() -> int:
    return rss_bytes(os.getpid()) or 0


# ---------------------------------------------------------------------------- in process

def inprocess(args: argparse.Namespace) -> None:
    import tracemalloc

    from schedd.core import commands as C
    from schedd.core.model import canonical_spec
    from schedd.core.state import SchedulerState

    def entries(n: int, per: int = 300):
        """put_many entries of `per` daily jobs, made as they are applied (nothing held before)."""
        for k, start in enumerate(range(0, n, per)):
            texts = []
            for i in range(start, min(n, start + per)):
                name, schedule = daily(i)
                texts.append(canonical_spec({"name": name, "schedule": schedule, "timezone": "UTC",
                                             "handler": {"shell": {"command": "true"}}})[1])
            yield C.encode(C.PUT_MANY, rid=f"c/bench-{k}", now=1_800_000_000_000, term=1, by="admin", specs=texts)

    n = args.jobs
    gc.collect()
    st = SchedulerState()
    if args.tracemalloc:
        tracemalloc.start()
    base = self_rss()
    log_bytes, cpu = 0, 0.0
    for index, entry in enumerate(entries(n), 1):
        log_bytes += len(entry)
        t = time.process_time()             # CPU time: the machine may be shared
        assert st.apply(entry, index).ok
        cpu += time.process_time() - t
    if args.tracemalloc:
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:12]:
            print("  ", stat)
        tracemalloc.stop()
    gc.collect()
    grown = self_rss() - base
    print(f"in process: {n:,} daily jobs in {len(st.jobs):,} rows; apply {n / cpu:,.0f} jobs per CPU second; "
          f"state RSS {grown / n:,.0f} B per job (the log's text would add {log_bytes / n:,.0f} B per job)")
    if args.breakdown:
        print_breakdown("applied", st, n)
    if args.restored:
        print_breakdown("restored", restored(st), n)


def restored(st: Any) -> Any:
    """A replica restored from `st`'s snapshot, written at this build's highest feature level
    (format 6, as a cluster of this build writes it); `st` is emptied, so one state is held at
    a time. Prints the bytes tracemalloc saw the restore keep."""
    import pickle
    import tracemalloc

    from schedd.core.state import SchedulerState

    st.feature_level = st.features.max_level
    blob = pickle.dumps(st.snapshot(), protocol=5)
    st.__dict__.clear()
    gc.collect()
    n = len(blob)
    tracemalloc.start()
    again = SchedulerState()
    again.restore(pickle.loads(blob))
    del blob
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"restored from a {n / 2**20:,.1f} MiB snapshot: tracemalloc {kept / len(again.jobs):,.0f} B per job kept")
    return again


# ---------------------------------------------------------------------------- breakdown

def _block(size: int) -> int:
    """What an object of `size` bytes takes: pymalloc's 16-byte blocks up to 512, malloc above."""
    return (size + 15) // 16 * 16 if size <= 512 else size + 16


class Sizer:
    """Deep sizes, each object counted once (the first structure that reaches it has it).
    Immortal or code-owned objects (None, bools, small ints, types, functions, modules) are not
    counted."""

    def __init__(self) -> None:
        import types
        self.seen: set[int] = set()
        self.skip = (type(None), bool, type, types.FunctionType, types.MethodType, types.ModuleType,
                     types.BuiltinFunctionType)

    def own(self, obj: Any) -> int:
        """obj alone (not what it refers to)."""
        if id(obj) in self.seen:
            return 0
        self.seen.add(id(obj))
        return _block(sys.getsizeof(obj))

    def deep(self, obj: Any) -> int:
        total, stack = 0, [obj]
        while stack:
            x = stack.pop()
            if id(x) in self.seen or isinstance(x, self.skip) or (type(x) is int and -5 <= x <= 256):
                continue
            self.seen.add(id(x))
            total += _block(sys.getsizeof(x))
            if not isinstance(x, (str, int, float, bytes)):
                stack.extend(gc.get_referents(x))
        return total


def print_breakdown(what: str, st: Any, n: int) -> None:
    """Bytes per job by structure: the job table, each slot of its rows, the indexes, the rest."""
    from schedd.core import model

    z = Sizer()
    rows: list[tuple[str, int]] = [("jobs dict (its table)", z.own(st.jobs))]
    jobs = list(st.jobs.values())
    rows.append((f"Job rows ({type(jobs[0]).__name__}, {len(type(jobs[0]).__slots__)} slots)",
                 sum(z.own(j) for j in jobs)))
    for slot in type(jobs[0]).__slots__:
        if not slot.startswith("__"):
            rows.append((f"  .{slot}", sum(z.deep(getattr(j, slot)) for j in jobs)))
    for attr in ("names", "by_team", "paused_names", "windowed", "wheel", "instants", "_policies", "dedup", "audit"):
        if hasattr(st, attr):
            rows.append((f"state.{attr}", z.deep(getattr(st, attr))))
    rows.append(("state: everything else", sum(z.deep(v) for v in vars(st).values())))
    rows.append(("model caches (RowSpecs, traits)",
                 sum(z.deep(getattr(model, c)) for c in ("ROW_SPECS", "TRAITS") if hasattr(model, c))))
    print(f"breakdown, {what} ({n:,} jobs), B per job:")
    for label, size in rows:
        if size >= n // 20:          # 0.05 B per job and up
            print(f"  {label:34s} {size / n:7.1f}")
    print(f"  {'total':34s} {sum(s for _, s in rows) / n:7.1f}")


# ---------------------------------------------------------------------------- cluster

@contextmanager
def cpu_per_job(pids: dict[str, int], jobs: int, what: str) -> Iterator[None]:
    """Print each node's CPU milliseconds per job spent while the block ran (a figure that a
    machine shared with other work changes less than jobs/s)."""
    before = {n: cpu_seconds(pid) or 0.0 for n, pid in pids.items()}
    yield
    used = {n: (cpu_seconds(pid) or 0.0) - before[n] for n, pid in pids.items()}
    print(f"  CPU per job during {what}: " + ", ".join(f"{n} {1e3 * u / jobs:.3f} ms" for n, u in used.items()))


@contextmanager
def profiled(pids: dict[str, int], out: Path | None, phase: str) -> Iterator[None]:
    """py-spy record on each pid while the block runs (nothing when out is None)."""
    procs = []
    if out is not None and shutil.which("py-spy"):
        out.mkdir(parents=True, exist_ok=True)
        for role, pid in pids.items():
            procs.append(subprocess.Popen(
                ["py-spy", "record", "--pid", str(pid), "--rate", "50", "--threads", "--nonblocking",
                 "--output", str(out / f"{phase}-{role}.svg")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)          # py-spy attaches
    try:
        yield
    finally:
        for p in procs:
            p.send_signal(2)     # SIGINT: py-spy writes the flame graph and exits
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_applied(c: Any, count: int, timeout: float = 600.0) -> bool:
    """Until every node's schedd_jobs gauge reads `count`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all(total(scrape(p.metrics, ca=c.metrics_ca), "schedd_jobs") == count for p in c.nodes.values()):
                return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def cluster(args: argparse.Namespace) -> None:
    from schedd.runtime.cluster import LocalCluster
    from schedd_client import AsyncClient, Client, job_spec

    root = Path(tempfile.mkdtemp(prefix="schedd-mem-"))
    out = Path(args.profile) if args.profile else None
    c = LocalCluster(root, acl_settings={"rate_per_second": 0}, limits={"max_jobs_per_call": 5000, "max_jobs_per_team": 0})
    try:
        c.start()
        leader = c.wait_leader(timeout=60)
        follower = next(n for n in c.nodes if n != leader)
        addrs = [c.nodes[leader].grpc] + [p.grpc for n, p in c.nodes.items() if n != leader]
        pids = {n: p.pid for n, p in c.nodes.items()}
        roles = {"leader": pids[leader], "follower": pids[follower]}
        with Client(addrs, security=c.security(), timeout=300) as cl:
            cl.put_job(job_spec("warm", command="true"))
        have = 1
        wait_applied(c, have)
        time.sleep(1.0)
        base = {n: rss_bytes(pid) or 0 for n, pid in pids.items()}

        if args.single:
            singles = [job_spec(f"one-{i:06d}", command="true") for i in range(args.single)]

            async def one_each() -> float:
                it = iter(singles)
                async with AsyncClient(addrs, security=c.security(), timeout=60) as ac:
                    await ac.get_job("warm")

                    async def worker() -> None:
                        for spec in it:
                            await ac.put_job(spec)

                    t0 = time.perf_counter()
                    await asyncio.gather(*(worker() for _ in range(64)))
                    return time.perf_counter() - t0

            with profiled(roles, out, "single"), cpu_per_job(pids, args.single, "single calls"):
                el = asyncio.run(one_each())
            have += args.single
            print(f"single PutJob x{args.single:,} (64 in flight): {args.single / el:,.0f} jobs/s; commit index "
                  f"{total(scrape(c.nodes[leader].metrics, ca=c.metrics_ca), 'schedd_raft_commit_index'):,.0f}")

        specs = []
        for i in range(args.jobs):
            name, schedule = daily(i)
            specs.append(job_spec(name, schedule=schedule, command="true"))
        with Client(addrs, security=c.security(), timeout=600) as cl, profiled(roles, out, "batched"), \
                cpu_per_job(pids, args.jobs, "put_jobs"):
            t = time.perf_counter()
            put_jobs_in_calls(cl, specs)
            el = time.perf_counter() - t
        del specs
        have += args.jobs
        print(f"put_jobs of {args.jobs:,} daily jobs: {args.jobs / el:,.0f} jobs/s (leader acks)")
        caught = wait_applied(c, have)
        time.sleep(2.0)
        print(f"  commit index {total(scrape(c.nodes[leader].metrics, ca=c.metrics_ca), 'schedd_raft_commit_index'):,.0f}")
        for n, pid in pids.items():
            rss = rss_bytes(pid) or 0
            role = "leader" if n == leader else "follower"
            print(f"  {n} {role:8s} RSS {base[n] / 2**20:7.1f} -> {rss / 2**20:7.1f} MiB: "
                  f"{(rss - base[n]) / (have - 1):,.0f} B per job"
                  + ("" if caught else " (not caught up)"))
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def propose(args: argparse.Namespace) -> None:
    from schedd.core import commands as C
    from schedd.core.model import canonical_spec
    from schedd.replication.node import RaftNode
    from schedd.runtime.cluster import restartable_ports
    from schedd.runtime.config import from_dict

    n = args.single or 4000
    texts = [canonical_spec({"name": f"j{i:06d}", "handler": {"shell": {"command": "true"}}})[1] for i in range(n)]
    for groupable in (False, True):
        root = tempfile.mkdtemp(prefix="schedd-propose-")
        base = restartable_ports(2)
        node = RaftNode(from_dict({"node_id": "n1", "data_dir": root, "raft_address": f"127.0.0.1:{base}",
                                   "grpc_address": f"127.0.0.1:{base + 1}"}))

        async def run(node: RaftNode = node, groupable: bool = groupable) -> tuple[float, float]:
            while not (node.is_leader() and node.state.epoch == node.term):
                if node.is_leader():
                    await node.propose(C.encode(C.EPOCH, rid=f"epoch-{node.term}", now=1, term=node.term, by="n1"))
                await asyncio.sleep(0.05)
            it = iter(enumerate(texts))

            async def worker() -> None:
                for i, text in it:
                    entry = C.encode(C.PUT, rid=f"c/{i}", now=1_800_000_000_000, term=node.term, by="bench",
                                     spec=text, name=f"j{i:06d}")
                    assert (await node.propose(entry, timeout=60, groupable=groupable)).ok

            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(64)))
            return time.process_time() - cpu, time.perf_counter() - wall

        try:
            cpu, wall = asyncio.run(run())
            print(f"{'group commit' if groupable else 'one entry each'}: {1e3 * cpu / n:.3f} ms CPU per PUT "
                  f"(Raft + apply, this process), {n / wall:,.0f} PUTs/s, {node.state.last_index:,} log entries")
        finally:
            node.close()
            shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("cluster", "inprocess", "propose"))
    ap.add_argument("--jobs", type=int, default=100_000, help="daily jobs registered with put_jobs")
    ap.add_argument("--single", type=int, default=0,
                    help="cluster: jobs registered first, one PutJob each; propose: proposals (default 4000)")
    ap.add_argument("--profile", default="", help="cluster: py-spy flame graphs into this folder")
    ap.add_argument("--tracemalloc", action="store_true", help="inprocess: top allocation sites")
    ap.add_argument("--breakdown", action="store_true", help="inprocess: bytes per job by structure")
    ap.add_argument("--restored", action="store_true",
                    help="inprocess: the same for a replica restored from the state's snapshot")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)      # type: ignore[union-attr]
    {"cluster": cluster, "inprocess": inprocess, "propose": propose}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
