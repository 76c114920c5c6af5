#!/usr/bin/env python
"""What TLS costs per call: the same sequential calls against a 3-node cluster in plaintext
(``[tls] insecure = true``) and with TLS + mTLS (``LocalCluster(tls=True)``), in one run.

    python bench/bench_tls.py [--calls N] [--rounds R] [--acl]

For each mode: N PutJob calls updating one job (a Raft commit each) to the leader and to a
follower (forwarded over the nodes' own channels), and N GetJob calls to the leader. Client-side
latency p50/p99. The modes alternate R rounds (each on its own cluster, both running all the
while) so a burst of load on the shared machine hits both alike; the figures are over all rounds.
Connections are set up before timing: TLS costs a handshake per connection, not per call.

--acl measures the access-control check instead: both clusters with TLS + mTLS, one with
``[acl] enabled = false`` (the baseline), one with it on as in production (the admin's
management token on every call, no per-principal rate limit, so the limiter is not what is timed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._metrics import percentile, timed_ms
from schedd.runtime.cluster import LocalCluster
from schedd_client import job_spec


def _pct(xs: list[float], q: float) -> float:
    return percentile(xs, q) or 0.0


def _round(c: LocalCluster, n: int, samples: dict[str, list[float]]) -> None:
    lead = c.wait_leader(60)
    follower = next(x for x in c.nodes if x != lead)
    spec = job_spec("bench-tls", command="true")
    with c.client() as cl_any:
        cl_any.put_job(spec)
    from schedd_client import Client
    with Client(c.nodes[lead].grpc, security=c.security()) as leader, \
            Client(c.nodes[follower].grpc, security=c.security()) as fol:
        leader.get_job("bench-tls")
        fol.get_job("bench-tls")                           # connect before timing
        samples["commit leader"] += timed_ms(lambda: leader.put_job(spec), n)
        samples["commit follower"] += timed_ms(lambda: fol.put_job(spec), n)
        samples["GetJob leader"] += timed_ms(lambda: leader.get_job("bench-tls"), n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200, help="calls per kind per round (default 200)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--acl", action="store_true", help="ACL off vs on (both with TLS) instead of TLS off vs on")
    args = ap.parse_args()
    kinds = ("commit leader", "commit follower", "GetJob leader")
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        if args.acl:
            # the ACL-off cluster is the baseline the check is measured against
            clusters = {"ACL off": LocalCluster(f"{tmp}/noacl", acl=False),
                        "ACL on": LocalCluster(f"{tmp}/acl", acl_settings={"rate_per_second": 0})}
        else:
            # the plaintext baseline is what this bench measures TLS against
            clusters = {"plaintext": LocalCluster(f"{tmp}/plain", tls=False), "TLS+mTLS": LocalCluster(f"{tmp}/tls")}
        samples = {mode: {k: [] for k in kinds} for mode in clusters}
        try:
            for c in clusters.values():
                c.start()
            for _ in range(args.rounds):
                for mode, c in clusters.items():
                    _round(c, args.calls, samples[mode])
        finally:
            for c in clusters.values():
                c.stop()
    print(f"{'mode':<10} {'call':<16} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}  (n={args.calls * args.rounds})")
    for mode, by_kind in samples.items():
        for kind, xs in by_kind.items():
            print(f"{mode:<10} {kind:<16} {_pct(xs, .5):8.2f} {_pct(xs, .99):8.2f} {statistics.mean(xs):8.2f}")
    base, other = list(samples)
    for kind in kinds:
        b, o = samples[base][kind], samples[other][kind]
        print(f"{other} - {base}, {kind}: p50 {_pct(o, .5) - _pct(b, .5):+.2f} ms, p99 {_pct(o, .99) - _pct(b, .99):+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
