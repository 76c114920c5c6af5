#!/usr/bin/env python
"""What bounds single-call registration (one PutJob per job, 64 in flight, target
2,000 jobs/s): the CPU each process spends per call, schedd against gRPC's own floor, in the
same run.

    python bench/bench_register.py [--jobs 8000] [--inflight 64] [--runs 2]

The floor: a grpc.aio server on uvloop with TLS and mTLS (a throwaway deployment from
schedd.security.certs, as the cluster's) whose PutJob answers at once with the job it was sent,
called by the SDK's AsyncClient exactly as the yardstick's `register` workload calls schedd
(bench._metrics.put_jobs_one_each). Then a bench cluster (bench._schedd.running: 3 nodes, TLS
and ACL on, `fsync = "always"`, no worker), a fresh one per run, with the same calls. For each:
calls/s, the mean call latency, and CPU µs per call of every process: the server (the leader)
split into its event-loop thread, its other Python threads (the Raft tick thread, the
journal's syncer; the floor's grpc.aio poller) and gRPC's core threads; each follower; the
client (this process). Their sum bounds the rate on this machine whatever the concurrency:
cores / (CPU per call) is printed as the ceiling.

Measured 2026-12-04 (2-core AMD EPYC VM, quiet; `python bench/bench_register.py`, 2 runs each):
the floor 3,681 and 3,896 calls/s, 502–528 µs of CPU per call (server 264–274, client 238–254);
schedd 1,362 and 1,326 calls/s, 1,119–1,166 µs per call (leader 662–681: its loop 396–410, its
other Python threads 229–232; followers 121–134 each; client 212–220), a ceiling of 1,715–1,788
calls/s on the two cores. bench/README.md, "What bounds single-call registration", reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere

from bench._metrics import Hist, cpu_seconds, free_ports, put_jobs_one_each, scrape, table, thread_cpu
from bench._schedd import running
from schedd_client import job_spec

LOOP, PY, CORE = "loop", "python threads", "grpc core"


def serve_floor(port: int, tls: Path) -> None:
    """The floor server (run in its own process): PutJob answers at once."""
    import grpc
    import uvloop

    from schedd.security import certs
    from schedd_proto import scheduler_pb2 as pb
    from schedd_proto import scheduler_pb2_grpc as pb_grpc

    class Floor(pb_grpc.SchedulerServicer):
        async def PutJob(self, request, context):
            return pb.PutJobResponse(job=pb.Job(spec=request.job), created=True)

    async def main() -> None:
        server = grpc.aio.server()
        pb_grpc.add_SchedulerServicer_to_server(Floor(), server)
        leaf = certs.leaf_paths(tls, "node", "n1")
        creds = grpc.ssl_server_credentials([(leaf.key.read_bytes(), leaf.cert.read_bytes())],
                                            certs.ca_paths(tls).cert.read_bytes(), True)
        server.add_secure_port(f"127.0.0.1:{port}", creds)
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    uvloop.run(main())


def by_kind(pid: int, before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
            ) -> dict[str, float]:
    """CPU seconds between two thread_cpu readings, by kind of thread: the main thread (the
    event loop), threads named as the main thread (Python threads) and the rest (gRPC's own)."""
    main_name = after.get(pid, ("", 0.0))[0]
    out = {LOOP: 0.0, PY: 0.0, CORE: 0.0}
    for tid, (name, sec) in after.items():
        d = sec - before.get(tid, (name, 0.0))[1]
        out[LOOP if tid == pid else PY if name == main_name else CORE] += d
    return out


def measure(pid: int, others: dict[str, int], addrs: list[str], security, n: int, inflight: int,
            prefix: str) -> dict:
    """N PutJobs with `inflight` in flight; CPU µs per call of `pid` (by kind), of `others`
    (whole processes) and of this process (the client)."""
    specs = [job_spec(f"{prefix}{i}", command="true") for i in range(n)]
    t0, o0, c0 = thread_cpu(pid), {k: cpu_seconds(p) or 0.0 for k, p in others.items()}, time.process_time()
    took, lat, errors = asyncio.run(put_jobs_one_each(addrs, security, specs, inflight))
    t1, o1, c1 = thread_cpu(pid), {k: cpu_seconds(p) or 0.0 for k, p in others.items()}, time.process_time()
    per = {k: v / n * 1e6 for k, v in by_kind(pid, t0, t1).items()}
    per.update({k: (o1[k] - o0[k]) / n * 1e6 for k in others})
    per["client"] = (c1 - c0) / n * 1e6
    return {"rate": n / took, "latency_ms": sum(lat) / len(lat) * 1e3, "us": per,
            "errors": sum(errors.values())}


def floor_run(n: int, inflight: int) -> dict:
    from schedd.security import certs
    from schedd_client.channels import Security
    with tempfile.TemporaryDirectory(prefix="schedd-floor-") as tmp:
        tls = Path(tmp) / "tls"
        certs.create_deployment(tls, nodes=[certs.NodeSpec("n1", tuple(certs.LOCAL_HOSTS))], admins=["admin"])
        leaf = certs.leaf_paths(tls, "admin", "admin")
        security = Security(ca=certs.ca_paths(tls).cert, cert=leaf.cert, key=leaf.key)
        port = free_ports(1)[0]
        proc = subprocess.Popen([sys.executable, __file__, "--serve-floor", str(port), str(tls)],
                                stdout=subprocess.PIPE, text=True)
        try:
            if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                raise RuntimeError("the floor server did not start")
            addrs = [f"127.0.0.1:{port}"]
            measure(proc.pid, {}, addrs, security, min(n, 1000), inflight, "warm")     # channels, caches
            return measure(proc.pid, {}, addrs, security, n, inflight, "a")
        finally:
            proc.kill()
            proc.wait(timeout=30)


def schedd_run(n: int, inflight: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="schedd-register-") as tmp, running(Path(tmp), worker=False) as s:
        s.client.put_job(job_spec(s.name("warm"), command="true"))
        lead = s.c.leader()
        assert lead is not None
        pids = s.pids(with_worker=False)
        followers = {f"follower {k}": p for k, p in pids.items() if k != lead}
        m0 = scrape(s.c.nodes[lead].metrics, ca=s.c.metrics_ca)
        out = measure(pids[lead], followers, s.addrs(), s.c.security(), n, inflight, "a")
        m1 = scrape(s.c.nodes[lead].metrics, ca=s.c.metrics_ca)
    commit = (Hist.of(m1, "schedd_commit_latency_seconds", kind="put")
              - Hist.of(m0, "schedd_commit_latency_seconds", kind="put"))
    out["commit_ms"] = commit.sum / commit.count * 1e3 if commit.count and commit.sum is not None else None
    return out


def row(name: str, r: dict, cores: int) -> list[object]:
    us = r["us"]
    server = us[LOOP] + us[PY] + us[CORE]
    followers = [v for k, v in us.items() if k.startswith("follower")]
    total = server + sum(followers) + us["client"]
    return [name, f"{r['rate']:,.0f}", f"{r['latency_ms']:.1f}",
            f"{r['commit_ms']:.1f}" if r.get("commit_ms") is not None else "-",
            f"{us[LOOP]:.0f}", f"{us[PY]:.0f}", f"{us[CORE]:.0f}", f"{server:.0f}",
            " + ".join(f"{v:.0f}" for v in followers) or "-", f"{us['client']:.0f}", f"{total:.0f}",
            f"{cores / total * 1e6:,.0f}/s", r["errors"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=8000, help="calls per run")
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--runs", type=int, default=2, help="floor and schedd runs, interleaved")
    ap.add_argument("--serve-floor", nargs=2, metavar=("PORT", "TLSDIR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_floor:
        serve_floor(int(a.serve_floor[0]), Path(a.serve_floor[1]))
        return
    cores = os.cpu_count() or 1
    rows = []
    for i in range(1, a.runs + 1):
        for name, run in (("gRPC floor", floor_run), ("schedd", schedd_run)):
            r = run(a.jobs, a.inflight)
            rows.append(row(f"{name} #{i}", r, cores))
            print(f"  {rows[-1][0]}: {rows[-1][1]} calls/s", flush=True)
    print(f"\n{a.jobs:,} PutJob calls per run, {a.inflight} in flight, CPU µs per call; "
          f"ceiling = {cores} cores / all processes' CPU per call")
    print(table(["run", "calls/s", "call ms", "commit ms", "server loop", "server py threads",
                 "server grpc core", "server", "followers", "client", "all", "ceiling", "errors"], rows))


if __name__ == "__main__":
    main()
