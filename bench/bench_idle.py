#!/usr/bin/env python
"""What the yardstick's cluster costs doing nothing: CPU seconds per second of each process of
an idle bench cluster (3 nodes, TLS and ACL on, and the recording worker; no job), at the
default Raft heartbeat (the baseline) and at a longer one, in the same run.

    python bench/bench_idle.py [--seconds 20] [--heartbeats 20/10,50/10,50/25,100/50]

Why it matters: at 100 fires/s the yardstick divides all of the cluster's CPU by the fires, so
the idle cost counts 10x more per fire than at 1,000 fires/s (the yardstick's "CPU per 1,000
fires"). Every process is started by bench._schedd.running and stopped on exit.

Measured 2026-12-02 (2-core AMD EPYC VM, the yardstick's APScheduler memory-1m run alongside;
`python bench/bench_idle.py`): heartbeat 20 ms (default) 0.225 CPU-s/s for the three nodes
(n1 0.093, n2 0.066, n3 0.065), worker 0.003; heartbeat 50 ms 0.163 (0.051, 0.049, 0.063).
An earlier script over the nodes alone in the same window: 0.270 and 0.204.
2026-12-03 (same VM, `--heartbeats 100/50`, interleaved with e25fbaf): 0.068 and 0.075 before
the deadline sleep (Raft: the tick sleeps until its next deadline) and the quiet follower loops,
0.048 and 0.047 after. Later that day (an Intel Xeon 2-core VM, `--seconds 15`, interleaved with
1df6f84): 0.045, 0.041 and 0.039 before quiet heartbeats (Raft), 0.036, 0.035 and 0.036
after.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere

from bench._schedd import running


def idle(heartbeat_ms: int, tick_ms: int, seconds: float) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix=f"schedd-idle-{heartbeat_ms}-"))
    with running(root, raft={"heartbeat_ms": heartbeat_ms, "tick_ms": tick_ms}) as s:
        time.sleep(5.0)                          # past the start-up (elections, the worker's hello)
        c0, t0 = s.cpu(), time.monotonic()
        time.sleep(seconds)
        c1, el = s.cpu(), time.monotonic() - t0
    return {k: (c1[k] - c0.get(k, 0.0)) / el for k in c1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--heartbeats", default="20/10,50/10,50/25,100/50",
                    help="[raft] heartbeat_ms/tick_ms pairs (a lone number keeps tick_ms 10); the first "
                         "is the baseline")
    a = ap.parse_args()
    for pair in a.heartbeats.split(","):
        hb_text, _, tick_text = pair.partition("/")
        hb, tick = int(hb_text), int(tick_text or 10)
        per = idle(hb, tick, a.seconds)
        nodes = sum(v for k, v in per.items() if k != "worker")
        detail = ", ".join(f"{k} {v:.3f}" for k, v in sorted(per.items()))
        print(f"heartbeat {hb:4d} ms, tick {tick:3d} ms: idle CPU {nodes:.3f} s/s for "
              f"the three nodes ({detail})", flush=True)


if __name__ == "__main__":
    main()
