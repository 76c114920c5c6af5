"""What one replica spends applying an execution's three entries: its intent (`fire`), its claim
(`start_many`) and its result (`finish_many`), for a herd of one-off jobs made from one spec.

Every node applies every entry, so on a 3-node cluster each execution costs three times these
figures before Raft, gRPC and the worker add theirs; they bound the herd and the sustained rate.
The baseline in the same run is the same herd with every job's spec different (a label per job):
nothing derived from a spec can be shared between jobs there.

Run: python bench/bench_apply.py [--jobs 100000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.commands import FEATURES
from schedd.core.model import validate_spec
from schedd.core.state import SchedulerState
from schedd.leader.planner import plan_fires

T0 = 1_800_000_000_000          # 2027-01-15T08:00:00Z
DUE = "2027-01-15T08:01:00Z"


class Feed:
    """Entries fed as the log would: consecutive indexes, one term, the times given."""

    def __init__(self) -> None:
        self.state, self.index = SchedulerState(), 0
        self.apply(C.EPOCH, now=1)
        self.apply(C.FEATURE_LEVEL, now=1, level=FEATURES.max_level)

    def apply(self, kind: str, *, now: int, **args) -> dict:
        self.index += 1
        return self.state.apply(C.encode(kind, rid="", now=now, term=1, by="bench", **args), self.index)


def timed(feed: Feed, entries: list[tuple[str, dict]], now: int) -> tuple[float, list[dict]]:
    gc.collect()
    t = time.perf_counter()
    out = [feed.apply(kind, now=now, **args) for kind, args in entries]
    return time.perf_counter() - t, out


def run(n: int, distinct: bool) -> dict[str, float]:
    feed = Feed()
    specs = [validate_spec({"name": f"h{i}", "schedule": f"at {DUE}", "handler": {"python": {"name": "rec"}},
                            **({"labels": {"k": f"v{i}"}} if distinct else {})}).text() for i in range(n)]
    for i in range(0, n, 200):
        assert feed.apply(C.PUT_MANY, now=T0, specs=specs[i:i + 200]).ok
    due = T0 + 60_000
    keys = plan_fires(feed.state, due - 1000, 2000, limit=n)
    took_fire, _ = timed(feed, [(C.FIRE, {"items": [list(k) for k in keys[i:i + 500]]}) for i in range(0, n, 500)],
                         due - 1000)
    created = {k: feed.state.execs[k].log_index for k in keys}
    took_claim, results = timed(feed, [(C.START_MANY, {"claims": [
        {"job": j, "scheduled_ms": t, "attempt": 1, "worker": "w1", "worker_incarnation": "x", "created": created[(j, t)]}
        for j, t in keys[i:i + 256]]}) for i in range(0, n, 256)], due)
    tokens = [c.of(R.Claimed).token for r in results for c in r.of(R.ClaimedMany).claims]
    took_result, _ = timed(feed, [(C.FINISH_MANY, {"results": [
        {"job": j, "scheduled_ms": t, "token": tok, "state": "SUCCEEDED", "worker": "w1", "started_ms": due + 1,
         "ended_ms": due + 2} for (j, t), tok in zip(keys[i:i + 256], tokens[i:i + 256])]}) for i in range(0, n, 256)],
                           due + 5)
    assert len(tokens) == n and all(ex.state == "SUCCEEDED" for ex in feed.state.execs.values())
    return {"intent": took_fire / n * 1e6, "claim": took_claim / n * 1e6, "result": took_result / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    a = ap.parse_args()
    print(f"apply on one replica, {a.jobs:,} one-off jobs due at once, µs per execution")
    print(f"{'specs':32s} {'intent':>8s} {'claim':>8s} {'result':>8s} {'all three':>10s}")
    for label, distinct in (("one template (a herd)", False), ("every spec distinct (baseline)", True)):
        r = run(a.jobs, distinct)
        print(f"{label:32s} {r['intent']:8.1f} {r['claim']:8.1f} {r['result']:8.1f} {sum(r.values()):10.1f}")


if __name__ == "__main__":
    main()
