#!/usr/bin/env python
"""What a linearizable read costs: GetJob on a healthy 3-node cluster (TLS + mTLS +
ACL, as in production), plain (ReadIndex: the leader confirms with a heartbeat round to a
majority before it answers) against ``stale_ok`` (answered at once from the node's own state),
in one run.

    python bench/bench_reads.py [--calls N] [--rounds R] [--concurrency C]

For each round: N sequential GetJob calls of each kind, on the leader and through a follower
(plain: forwarded to the leader; stale: answered by the follower itself); then, with
--concurrency C > 1, C threads doing the same at once, where reads asked together share one
confirmation round. Client-side latency p50/p99 over all rounds; the kinds alternate within a
round so a burst of load on the shared machine hits both alike. Connections are set up before
timing. The baseline is the stale read: what the same call costs without the confirmation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._metrics import percentile, timed_ms
from schedd.runtime.cluster import LocalCluster
from schedd_client import Client, job_spec

JOB = "bench-reads"


def _pct(xs: list[float], q: float) -> float:
    return percentile(xs, q) or 0.0


def _concurrent(make: Callable[[], Client], stale: bool, n: int, threads: int) -> list[float]:
    """`threads` clients reading at once, n calls each; every latency."""
    out: list[float] = []
    lock = threading.Lock()

    def run() -> None:
        with make() as cl:
            cl.get_job(JOB, stale_ok=stale)
            xs = timed_ms(lambda: cl.get_job(JOB, stale_ok=stale), n)
        with lock:
            out.extend(xs)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return out


def _round(c: LocalCluster, n: int, threads: int, samples: dict[str, list[float]]) -> None:
    lead = c.wait_leader(60)
    follower = next(x for x in c.nodes if x != lead)
    with Client(c.nodes[lead].grpc, security=c.security()) as leader, \
            Client(c.nodes[follower].grpc, security=c.security()) as fol:
        for cl in (leader, fol):
            cl.get_job(JOB)
            cl.get_job(JOB, stale_ok=True)                    # connect before timing
        for stale in (True, False):
            mode = "stale_ok" if stale else "plain"
            samples[f"{mode} leader"] += timed_ms(lambda: leader.get_job(JOB, stale_ok=stale), n)
            samples[f"{mode} follower"] += timed_ms(lambda: fol.get_job(JOB, stale_ok=stale), n)
    if threads > 1:
        for stale in (True, False):
            mode = "stale_ok" if stale else "plain"
            samples[f"{mode} leader x{threads}"] += _concurrent(
                lambda: Client(c.nodes[lead].grpc, security=c.security()), stale, n // threads or 1, threads)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300, help="calls per kind per round (default 300)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--concurrency", type=int, default=8, help="threads reading at once (default 8; 1: none)")
    args = ap.parse_args()
    kinds = [f"{m} {w}" for w in ("leader", "follower") for m in ("stale_ok", "plain")]
    if args.concurrency > 1:
        kinds += [f"{m} leader x{args.concurrency}" for m in ("stale_ok", "plain")]
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="bench-reads-") as tmp:
        c = LocalCluster(f"{tmp}/c")
        try:
            c.start()
            with c.client() as cl:
                cl.put_job(job_spec(JOB, command="true"))
            for _ in range(args.rounds):
                _round(c, args.calls, args.concurrency, samples)
            with c.client() as cl:
                status = cl.cluster_status()
        finally:
            c.stop()
    print(f"GetJob, 3 nodes, TLS + mTLS + ACL; {args.rounds} rounds of {args.calls} calls per kind "
          f"(leader {status.leader_id}, term {status.term})")
    print(f"{'kind':<22} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for kind in kinds:
        xs = samples[kind]
        print(f"{kind:<22} {len(xs):6d} {_pct(xs, .5):8.2f} {_pct(xs, .99):8.2f} {statistics.mean(xs):8.2f}")
    for where in ("leader", "follower") + ((f"leader x{args.concurrency}",) if args.concurrency > 1 else ()):
        b, o = samples[f"stale_ok {where}"], samples[f"plain {where}"]
        print(f"plain - stale_ok, {where}: p50 {_pct(o, .5) - _pct(b, .5):+.2f} ms, "
              f"p99 {_pct(o, .99) - _pct(b, .99):+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
