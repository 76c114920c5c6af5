"""Jitter: 10,000 jobs at `0 0 * * *` with `jitter: 60s`, against 10,000 without (the baseline,
in the same run), on a real 3-node cluster whose clocks are set 20 s before midnight through the
test-only clock offset.

Prints, per group: when the runs became due (per-second peak and the spread over the window,
from the replicated executions' due_ms) and the leader's dispatch lateness against due time.

    python bench/bench_jitter.py [--jobs 10000] [--window 60]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._metrics import Hist, fmt_bucket, put_jobs_in_calls, scrape
from schedd.runtime.cluster import LocalCluster
from schedd_proto import testing_pb2 as tpb
from schedd_proto import testing_pb2_grpc as tpb_grpc
from schedd_client import job_spec

DAY_MS = 86_400_000


class TestModeCluster(LocalCluster):
    def _write_config(self, node) -> None:
        super()._write_config(node)
        node.config.write_text("test_mode = true\n" + node.config.read_text())


def set_clock(c: LocalCluster, offset_ms: int) -> None:
    for nid in c.nodes:
        with c.channel(nid) as ch:
            tpb_grpc.TestingStub(ch).SetClockOffset(tpb.SetClockOffsetRequest(offset_ms=offset_ms), timeout=10)


def spread(dues: list[int], midnight: int) -> str:
    per_s = Counter((d - midnight) // 1000 for d in dues)
    last = max(dues) - midnight
    return (f"{len(dues):>6} runs, due over {last / 1000:5.1f} s after midnight, "
            f"peak {max(per_s.values()):>5}/s, seconds with runs due {len(per_s):>3}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--group", choices=("both", "jitter", "base"), default="both",
                    help="register one group only, to read the dispatch lateness of each alone")
    args = ap.parse_args()
    os.environ["SCHEDD_TEST_MODE"] = "1"
    with tempfile.TemporaryDirectory(prefix="bench-jitter-") as root:
        c = TestModeCluster(root=root, size=3, env={"SCHEDD_TEST_MODE": "1"})
        try:
            c.start()
            c.wait_leader(timeout=60)
            now = time.time_ns() // 1_000_000
            midnight = (now // DAY_MS + 1) * DAY_MS
            lead_s = 20 + args.jobs / 2000                  # time to register before midnight
            offset = midnight - int(lead_s * 1000) - now
            set_clock(c, offset)
            client = c.client(timeout=60)
            specs = []
            if args.group in ("both", "jitter"):
                specs += [job_spec(f"jit-{i:05d}", schedule="0 0 * * *", command="true", jitter=args.window)
                          for i in range(args.jobs)]
            if args.group in ("both", "base"):
                specs += [job_spec(f"base-{i:05d}", schedule="0 0 * * *", command="true")
                          for i in range(args.jobs)]
            t0 = time.perf_counter()
            put_jobs_in_calls(client, specs)
            print(f"registered {len(specs)} jobs in {time.perf_counter() - t0:.1f} s; "
                  f"cluster clock {lead_s - (time.perf_counter() - t0):.1f} s before midnight")
            leader = c.nodes[c.leader()]
            before = scrape(leader.metrics, ca=c.metrics_ca)
            end = midnight + int(args.window * 1000) + 5_000
            while time.time_ns() // 1_000_000 + offset < end:
                time.sleep(0.5)
            after = scrape(leader.metrics, ca=c.metrics_ca)
            dues: dict[str, list[int]] = {"jit": [], "base": []}
            for ex in client.list_executions(page_size=1000):
                if ex.scheduled_ms == midnight:
                    dues[ex.job.split("-")[0]].append(ex.due_ms)
            print(f"\n{args.jobs} jobs at 0 0 * * * with jitter {args.window:g}s, against {args.jobs} without:")
            if dues["base"]:
                print(f"  baseline (no jitter): {spread(dues['base'], midnight)}")
            if dues["jit"]:
                print(f"  jitter {args.window:g}s:          {spread(dues['jit'], midnight)}")
            late = Hist.of(after, "schedd_fire_lateness_seconds") - Hist.of(before, "schedd_fire_lateness_seconds")
            print(f"  leader dispatch lateness vs due time, {args.group} ({late.count:.0f} launches): "
                  f"p50 {fmt_bucket(late.quantile(0.5))}, p99 {fmt_bucket(late.quantile(0.99))}, "
                  f"max {fmt_bucket(late.max_bucket())}")
        finally:
            c.stop()


if __name__ == "__main__":
    main()
