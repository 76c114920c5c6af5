"""Run one scenario end to end and write results.json, summary.txt and timeline.png."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from . import checker
from .harness import STORE, Harness
from .scenarios import SCENARIOS


def load_history(run_dir: Path) -> list[dict]:
    lines: list[str] = []
    for f in sorted((Path(run_dir) / "history").glob("*.jsonl")):
        lines.extend(f.read_text(errors="replace").splitlines())
    return checker.load(lines)


def check_dir(run_dir: Path, *, plot: bool = True) -> dict:
    run_dir = Path(run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    records = load_history(run_dir)
    results = checker.check(records, meta)
    scen = SCENARIOS.get(meta.get("scenario"))
    missing = []
    if scen is not None and not meta.get("unsafe"):
        for ev in scen.evidence:
            missing += ev(results, meta)
    results["fault_evidence_missing"] = missing
    results["duration_s"] = round((meta.get("ended") or 0) - (meta.get("started") or 0), 1)
    results["scenario"], results["seed"], results["unsafe"] = meta.get("scenario"), meta.get("seed"), meta.get("unsafe")
    (run_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    text = checker.summarize(results, meta)
    if missing:
        text += "fault evidence missing: " + "; ".join(missing) + "\n"
    if meta.get("small_disk_unavailable"):
        text += f"full-disk step NOT RUN (no small filesystem could be mounted: {meta['small_disk_unavailable']})\n"
    if meta.get("disk_outcomes"):
        text += "disk outcomes: " + "; ".join(f"{n} {how}: {out}" for n, how, out in meta["disk_outcomes"]) + "\n"
    text += f"duration {results['duration_s']} s\n"
    (run_dir / "summary.txt").write_text(text)
    if plot:
        try:
            from .plot import plot_run
            plot_run(records, results, meta, run_dir / "timeline.png")
        except ImportError:
            pass
    return results


def run_scenario(name: str, seed: int | None = None, *, unsafe=(), root: Path = STORE, nemesis=None,
                 seconds: float | None = None, plot: bool = True, jobs=None) -> tuple[dict, Path]:
    scen = SCENARIOS[name]
    seed = random.randrange(1 << 30) if seed is None else seed
    stamp = time.strftime("%Y%m%dT%H%M%S")
    tag = f"-{'+'.join(unsafe)}" if unsafe else ""
    run_dir = Path(root) / f"{name}{tag}-{seed}-{stamp}"
    h = Harness(scenario=name, seed=seed, out=run_dir, unsafe=tuple(unsafe), raft=dict(scen.raft),
                failpoints=scen.failpoints, worker_proxies=scen.worker_proxies, small_disks=dict(scen.small_disks),
                netns=scen.netns, shards=scen.shards)
    if jobs is not None or scen.jobs is not None:
        h.jobs = list(jobs if jobs is not None else scen.jobs)
    try:
        h.start()
        h.start_client()
        (nemesis or scen.nemesis)(h, h.rng, scen.seconds if seconds is None else seconds)
        h.finish()
    except Exception as e:  # record it; the checker still reads what happened
        h.rec("harness_error", error=repr(e))
        h.meta["harness_error"] = repr(e)
        raise
    finally:
        h.stop()
        logs = list((run_dir / "cluster" / "logs").glob("n*.log"))
        h.meta["snapshot_installed"] = [p.name for p in logs if "restored snapshot" in p.read_text(errors="replace")]
        (run_dir / "meta.json").write_text(json.dumps(h.meta, indent=1))
    return check_dir(run_dir, plot=plot), run_dir
