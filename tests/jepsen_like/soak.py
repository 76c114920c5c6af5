"""Soak: one long-lived cluster, a random nemesis per round, a rolling check after each round
(heal, converge within 20 s at equal state digests, let the round's executions end, converge
again at rest, check the whole history so far), and the RSS and open-fd counts of every node and
worker, so growth shows. As root, the cluster runs in network namespaces (netns.py) and the mix
includes leader cuts by iptables DROP (10 s and 30 s, both ways and one way); the other
partitions then drop packets in the namespaces too (no link delay there: no tc netem)."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from . import checker
from .harness import Harness
from .runner import load_history
from .netns import unavailable
from .scenarios import (CONVERGE_S, nemesis_isolate_leader, nemesis_kill_leader, nemesis_kill_worker,
                        nemesis_ns_partition, nemesis_partition_storm, nemesis_pause_leader, nemesis_pause_worker)

ROUND_NEMESES = [nemesis_kill_leader, nemesis_pause_leader, nemesis_isolate_leader, nemesis_partition_storm,
                 nemesis_pause_worker, nemesis_kill_worker]
NETNS_NEMESES = [nemesis_ns_partition, nemesis_ns_partition]      # twice: weighed like the rest together
ROUND_S = 40
SOAK_CHURN_CAP = 10
SOAK_HISTORY = 200


def _proc_stats(pid: int) -> dict:
    try:
        rss = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
        return {"rss_kb": rss, "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    except OSError:
        return {}


def soak(duration_s: float, seed: int | None, store: Path, netns: bool | None = None) -> int:
    """`netns`: None = in namespaces when they can be made here (root, iproute2, iptables)."""
    seed = random.randrange(1 << 30) if seed is None else seed
    run_dir = Path(store) / f"soak-{seed}-{time.strftime('%Y%m%dT%H%M%S')}"
    why_not = unavailable()
    if netns is None:
        netns = why_not is None
    print(f"soak in network namespaces: {netns}" + (f" ({why_not})" if why_not and not netns else ""), flush=True)
    nemeses = ROUND_NEMESES + (NETNS_NEMESES if netns else [])
    # A bounded workload (at most SOAK_CHURN_CAP churn jobs, SOAK_HISTORY executions kept per job), so the
    # state stops growing after warm-up and the RSS rows show growth of the processes, not of the data.
    h = Harness(scenario="soak", seed=seed, out=run_dir, netns=netns, churn_cap=SOAK_CHURN_CAP,
                history_limit=SOAK_HISTORY)
    rows = []
    ok = True
    started = time.monotonic()
    try:
        h.start()
        h.start_client()
        rnd = 0
        while time.monotonic() - started < duration_s:
            rnd += 1
            nem = h.rng.choice(nemeses)
            h.rec("soak_round", round=rnd, nemesis=nem.__name__)
            nem(h, h.rng, min(ROUND_S, max(10.0, duration_s - (time.monotonic() - started))))
            h.heal_all()
            h.converge(CONVERGE_S, what=f"round {rnd} heal")
            h.meta["window_end"] = time.time()
            h.c.wait_leader(timeout=60)
            h.settle(h.meta["window_end"])
            h.record_final_execs()          # before the pause below ends pending intents SKIPPED
            # a consistent cut: pause everything, converge, check, resume
            names = [j.name for j in h.jobs if j.period_s] + [j["name"] for j in h.meta.get("churn", [])]
            for n in names:
                h.simple("pause", n)
            # the write load goes on, so the replicas are compared at one future index (digest_at),
            # never required to sit at one index together
            out = h.converge(60, what=f"round {rnd} cut")
            conv = out["ok"]
            at = out.get("compared_at", 0)
            via_at = all(v and v["at_digest"] for v in out["nodes"].values())
            infos = {n: None if v is None else {"applied": at if conv else v["applied"],
                                                "hash": v["at_digest"] if conv and via_at else v["digest"]}
                     for n, v in out["nodes"].items()}
            h.rec("final", nodes=infos, converged=conv)
            (run_dir / "meta.json").write_text(json.dumps(h.meta, indent=1))
            # the workload keeps running: judge only what was written before this instant, so an
            # effect (a worker's ack) is never read without its cause (the node's apply record)
            cut = time.time()
            res = checker.check([r for r in load_history(run_dir) if r.get("ts", 0) <= cut], h.meta)
            procs = {n: _proc_stats(p.proc.pid) for n, p in {**h.c.nodes, **h.c.workers}.items() if p.alive()}
            row = {"round": rnd, "nemesis": nem.__name__, "elapsed_s": round(time.monotonic() - started),
                   "anomalies": len(res["anomalies"]), "safety_ok": res["safety_ok"], "procs": procs,
                   "entries": res["stats"]["entries"], "p99_ms": res["stats"]["lateness"]["p99_ms"],
                   "converge_s": [c["seconds"] for c in res["stats"]["convergence"][-2:]]}
            rows.append(row)
            h.rec("soak_check", **row)
            print(json.dumps(row), flush=True)
            if not res["safety_ok"]:
                ok = False
                break
            for n in names:
                if not n.startswith("churn"):
                    h.simple("resume", n)
    finally:
        h.stop()
        (run_dir / "soak.json").write_text(json.dumps(rows, indent=1))
    from .runner import check_dir
    res = check_dir(run_dir)
    print((run_dir / "summary.txt").read_text())
    return 0 if ok and res["safety_ok"] else 1
