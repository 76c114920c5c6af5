"""``python -m bench``: the users' yardstick. Every workload against schedd (3 nodes and
one worker, TLS and ACL on) and APScheduler 3.11 (memory store, SQLite store) in the same run,
interleaved per workload (schedd, then the peers, then schedd again...), one table at the end:
medians of the runs, ratios to each peer, the issue's target per row and whether schedd meets it.

    python -m bench all [--quick] [--runs N] [--no-peers] [--keep]
    python -m bench steady-100 [herd-10k ...] [--quick]
    python -m bench --report bench/results/2026-12-02-vm.jsonl [--code b0d22ac]

Every run appends one JSON line to bench/results/<date>-<host>.jsonl (--results DIR elsewhere);
`--report` prints the table of lines already written (an interrupted run's, or runs of one
code made at different times), without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from bench import _peers
from bench._metrics import code_version, fmt_bytes, fmt_s, table
from bench._schedd import running
from bench.workloads import RUNS, SIZES, SYSTEMS, peer_limit, run_one, say

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{socket.gethostname()}: {os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, " \
           f"load {os.getloadavg()[0]:.1f} at start"


def results_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{datetime.now(UTC):%Y-%m-%d}-{socket.gethostname()}.jsonl"


def workloads_for(names: list[str], mode: str) -> list[str]:
    if names == ["all"]:
        return [w for w in SIZES if mode in SIZES[w]]
    bad = [w for w in names if w not in SIZES]
    if bad:
        raise SystemExit(f"unknown workload(s) {', '.join(bad)}: choose from all, {', '.join(SIZES)}")
    missing = [w for w in names if mode not in SIZES[w]]
    if missing:
        raise SystemExit(f"{', '.join(missing)} has no {mode} size (try without --quick)")
    return names


def run(names: list[str], mode: str, runs: int | None = None, peers: bool = True,
        results: Path = RESULTS, keep: bool = False) -> list[dict]:
    """Run the workloads; return every run's record (also appended to the results file)."""
    chosen = workloads_for(names, mode)
    runs = runs or RUNS[mode]
    why_not = _peers.ensure(say) if peers else "not asked for (--no-peers)"
    peer_version = _peers.version() if why_not is None else f"unavailable: {why_not}"
    systems = [s for s in SYSTEMS if s == "schedd" or why_not is None]
    out_file = results_file(results)
    work = Path(tempfile.mkdtemp(prefix="schedd-yardstick-"))
    head = {"ts": datetime.now(UTC).isoformat(timespec="seconds"), "mode": mode, "machine": machine(),
            "code": code_version(), "peers": peer_version}
    say(f"yardstick {mode}: {', '.join(chosen)}; {runs} run(s) each, systems {', '.join(systems)}")
    say(f"  {head['machine']}; code {head['code']}; peers {peer_version}")
    records: list[dict] = []

    def keep_record(r: int, w: str, system: str, fig: dict) -> None:
        rec = {**head, "workload": w, "system": system, "run": r + 1, "params": SIZES[w][mode], **fig}
        records.append(rec)
        with out_file.open("a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        say(f"  [{r + 1}/{runs}] {w:13s} {system:10s} {brief(rec)}")

    try:
        if mode == "tiny":
            # The smoke run checks that every workload runs, not what it measures: one cluster for
            # all of schedd's turns, and the peers' runs alongside in a pool. Measuring runs never
            # overlap: they interleave, schedd then each peer, one at a time.
            with running(work / "shared") as shared, ThreadPoolExecutor(3) as pool:
                futs = [(r, w, s, pool.submit(run_one, w, s, mode, work)) for r in range(runs) for w in chosen
                        for s in systems if s != "schedd" and not peer_limit(w, s, mode)]
                for r in range(runs):
                    for w in chosen:
                        keep_record(r, w, "schedd", run_one(w, "schedd", mode, work, shared))
                for r, w, s, fut in futs:
                    keep_record(r, w, s, fut.result())
        else:
            for r in range(runs):
                for w in chosen:
                    for system in systems:
                        if not peer_limit(w, system, mode):
                            keep_record(r, w, system, run_one(w, system, mode, work))
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"  kept {work}")
    say("")
    text = render(records, systems, head, why_not)
    say(text)
    say(f"\n  JSON lines: {out_file}")
    if mode != "tiny" and names == ["all"]:
        (results / "latest.md").write_text(f"`python -m bench all{' --quick' if mode == 'quick' else ''}`\n\n"
                                            f"```\n{text}\n```\n")
        say(f"  summary: {results / 'latest.md'}")
    return records


def brief(rec: dict) -> str:
    if "error" in rec:
        return "ERROR " + rec["error"]
    keys = [k for k in ("p50_s", "p99_s", "missed", "duplicated", "cpu_s", "last_start_after_due_s", "single_per_s",
                        "batched_per_s", "rss_per_job_max", "kill_to_start_p99_s") if k in rec]
    return ", ".join(f"{k}={rec[k]:.4g}" if isinstance(rec[k], float) else f"{k}={rec[k]}" for k in keys) \
        + f" ({rec['elapsed_s']:.0f} s)"


# ------------------------------------------------------------------------------------------ the table


def per_1000(rec: dict) -> float | None:
    return rec["cpu_s"] / rec["started"] * 1000 if rec.get("started") else None


def after_due(rec: dict) -> float | None:
    if rec.get("last_start") is None or rec.get("due") is None:
        return None
    return rec["last_start"] - rec["due"]


def per_s(rec: dict) -> float | None:
    return rec["started"] / rec["window_s"] if rec.get("window_s") else None


def key(name: str):
    return lambda rec: rec.get(name)


def ms(v: float | None) -> str:
    return fmt_s(v)


def num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def shown_fmt(v: float | None) -> str:
    return "-" if v is None else "yes" if v >= 1 else "no" if v <= 0 else "in some runs"


def cpu_fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} s"


# (row label, workload, figure, format, target text, met(schedd value, peers' values) -> bool | None)
ROWS = [
    ("100 fires/s: lateness p50", "steady-100", key("p50_s"), ms, "<= 1 ms", lambda v, p: v <= 0.001),
    ("100 fires/s: lateness p99", "steady-100", key("p99_s"), ms, "<= 5 ms and <= 3x APS-memory",
     lambda v, p: v <= 0.005 and (p.get("aps-memory") is None or v <= 3 * p["aps-memory"])),
    ("100 fires/s: missed", "steady-100", key("missed"), num, "0", lambda v, p: v == 0),
    ("100 fires/s: duplicated", "steady-100", key("duplicated"), num, "0", lambda v, p: v == 0),
    ("100 fires/s: CPU s per 1,000 fires (all processes)", "steady-100", per_1000, cpu_fmt, "<= 1.0 s",
     lambda v, p: v <= 1.0),
    ("1,000 fires/s: lateness p50", "steady-1000", key("p50_s"), ms, "", None),
    ("1,000 fires/s: lateness p99", "steady-1000", key("p99_s"), ms, "<= 20 ms", lambda v, p: v <= 0.020),
    ("1,000 fires/s: missed", "steady-1000", key("missed"), num, "0", lambda v, p: v == 0),
    ("1,000 fires/s: duplicated", "steady-1000", key("duplicated"), num, "0", lambda v, p: v == 0),
    ("1,000 fires/s: CPU s per 1,000 fires", "steady-1000", per_1000, cpu_fmt, "<= 1.0 s", lambda v, p: v <= 1.0),
    ("1,000 fires/s: elections during the run (terms)", "steady-1000", key("elections"), num, "0 (none by load)",
     lambda v, p: v == 0),
    ("100 fires/s, shell handlers: lateness p50", "steady-shell", key("p50_s"), ms, "(fork/exec shown)", None),
    ("100 fires/s, shell handlers: lateness p99", "steady-shell", key("p99_s"), ms, "", None),
    ("100 fires/s, shell handlers: CPU s per 1,000", "steady-shell", per_1000, cpu_fmt, "", None),
    ("herd 10k one-offs: last start after due", "herd-10k", after_due, ms, "<= 0.5 s", lambda v, p: v <= 0.5),
    ("herd 10k one-offs: not started within the settle time", "herd-10k", key("missed"), num, "0", lambda v, p: v == 0),
    ("herd 100k one-offs: last start after due", "herd-100k", after_due, ms, "<= 3 s", lambda v, p: v <= 3.0),
    ("herd 100k one-offs: not started within the settle time", "herd-100k", key("missed"), num, "0", lambda v, p: v == 0),
    ("herd 10k one-offs: elections during the run", "herd-10k", key("elections"), num, "0 (none by load)",
     lambda v, p: v == 0),
    ("herd 100k one-offs: elections during the run", "herd-100k", key("elections"), num, "0 (none by load)",
     lambda v, p: v == 0),
    ("sustained: handler starts/s", "sustained", per_s, num, ">= 3,000/s", lambda v, p: v >= 3000),
    ("sustained: lateness p99", "sustained", key("p99_s"), ms, "<= 100 ms", lambda v, p: v <= 0.100),
    ("sustained: missed", "sustained", key("missed"), num, "0", lambda v, p: v == 0),
    ("sustained: duplicated", "sustained", key("duplicated"), num, "0", lambda v, p: v == 0),
    ("sustained: overload shown by cluster status (runs)", "sustained",
     lambda r: None if "overload_shown" not in r else (1.0 if r["overload_shown"] else 0.0),
     shown_fmt, "yes when behind", None),
    ("register, one call each (64 in flight), jobs/s", "register", key("single_per_s"), num, ">= 2,000",
     lambda v, p: v >= 2000),
    ("register, batched put_jobs, jobs/s", "register", key("batched_per_s"), num, ">= 30,000",
     lambda v, p: v >= 30000),
    ("memory, RSS per job per node (worst node)", "memory-100k", key("rss_per_job_max"), fmt_bytes,
     "(the target is at 1M: next row)", None),
    ("memory 1M jobs, RSS per job per node", "memory-1m", key("rss_per_job_max"), fmt_bytes, "<= 500 B",
     lambda v, p: v <= 500),
    ("failover: leader SIGKILL -> next handler start p99", "failover", key("kill_to_start_p99_s"), ms,
     "<= 1.5 s", lambda v, p: v <= 1.5),
    ("failover: missed / duplicated", "failover", lambda r: (r.get("missed") or 0) + (r.get("duplicated") or 0),
     num, "0", lambda v, p: v == 0),
]


def median_of(recs: list[dict], fig, fmt=lambda v: f"{v:.3g}") -> tuple[float | None, str]:
    """The median of a figure over the runs, and its [min..max] in the row's own format."""
    vals = [v for v in (fig(r) for r in recs if "error" not in r) if v is not None]
    if not vals:
        none = any(r.get("started") == 0 and r.get("expected") for r in recs)
        return None, "none started" if none else ""
    spread = f" [{fmt(min(vals))}..{fmt(max(vals))}]" if len(vals) > 1 else ""
    return statistics.median(vals), spread


def render(records: list[dict], systems: list[str], head: dict, why_not: str | None) -> str:
    for r in records:                     # the herd's due time: schedd's answer carries it as expected
        if r.get("workload", "").startswith("herd") and "due" not in r and r.get("last_start") is not None:
            r["due"] = r["last_start"] - (r.get("max_s") or 0)
    rows = []
    for label, w, fig, fmt, target, met in ROWS:
        recs = {s: [r for r in records if r["workload"] == w and r["system"] == s] for s in SYSTEMS}
        if not recs["schedd"]:
            continue
        vals = {s: median_of(recs[s], fig, fmt) for s in SYSTEMS}
        sv = vals["schedd"][0]
        cells = [label, (fmt(sv) + vals["schedd"][1]) if sv is not None else vals["schedd"][1] or errors(recs["schedd"])]
        for peer in _peers.PEERS:
            if peer_limit(w, peer, head["mode"]):
                cells.append(peer_limit(w, peer, head["mode"]))
            elif peer not in systems:
                cells.append("unavailable")
            elif vals[peer][0] is None:
                cells.append(vals[peer][1] or errors(recs[peer]))
            else:
                cells.append(fmt(vals[peer][0]) + vals[peer][1])
        ratio = []
        for peer in _peers.PEERS:
            pv = vals[peer][0]
            ratio.append(f"{sv / pv:.2g}x" if sv is not None and pv else "-")
        cells.append(" / ".join(ratio))
        ok = None
        if met is not None and sv is not None:
            ok = met(sv, {p: vals[p][0] for p in _peers.PEERS})
        cells += [target, {True: "met", False: "MISSED", None: ""}[ok]]
        rows.append(cells)
    title = f"schedd yardstick, {head['mode']}, {head['ts']}: {head['machine']}; code {head['code']}; " \
            f"peers {head['peers']}"
    return title + "\n" + table(["workload", "schedd", "APS memory", "APS SQLite", "ratio schedd/mem / /sqlite",
                                 "target", "met"], rows)


def errors(recs: list[dict]) -> str:
    errs = [r["error"] for r in recs if "error" in r]
    return ("error: " + errs[0][:60]) if errs else "-"


def report(files: list[Path], code: str | None = None, mode: str = "full") -> str:
    """The table of the JSON lines in `files`: every run of `mode` measured on `code` (by
    default the code of the newest line), medians over however many runs each row has."""
    recs = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    recs = [r for r in recs if r.get("mode") == mode]
    if not recs:
        raise SystemExit(f"no {mode} runs in {', '.join(map(str, files))}")
    code = code or recs[-1].get("code")
    recs = [r for r in recs if r.get("code") == code]
    if not recs:
        raise SystemExit(f"no {mode} runs of code {code} in {', '.join(map(str, files))}")
    systems = [s for s in SYSTEMS if any(r.get("system") == s for r in recs)]
    runs = max(r.get("run", 1) for r in recs)
    head = {k: recs[0].get(k, "?") for k in ("ts", "mode", "machine", "code", "peers")}
    return render(recs, systems, head, None) + f"\n  {len(recs)} runs (up to {runs} per row) from " \
        f"{', '.join(map(str, files))}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", help=f"all, or any of: {', '.join(SIZES)}")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, shorter windows, one run")
    ap.add_argument("--tiny", action="store_true", help="the test suite's smoke sizes (figures mean nothing)")
    ap.add_argument("--runs", type=int, default=None, help="runs per workload and system (default: 1 quick, 3 full)")
    ap.add_argument("--no-peers", action="store_true", help="schedd only")
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder for the JSON lines")
    ap.add_argument("--keep", action="store_true", help="keep the clusters' folders (logs)")
    ap.add_argument("--report", type=Path, nargs="+", metavar="JSONL",
                    help="print the table of these JSON lines instead of running (full mode unless --quick)")
    ap.add_argument("--code", default=None, help="with --report: the code whose runs to show (default: the newest)")
    a = ap.parse_args(argv)
    mode = "tiny" if a.tiny else "quick" if a.quick else "full"
    if a.report:
        say(report(a.report, a.code, mode))
        return
    if not a.workloads:
        ap.error("name the workloads (or all), or give --report FILE")
    t = time.monotonic()
    run(a.workloads, mode, a.runs, not a.no_peers, a.results, a.keep)
    say(f"  took {fmt_s(time.monotonic() - t)}")
