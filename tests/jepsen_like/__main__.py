"""python -m tests.jepsen_like run|soak|check|plot

    run   [--scenario S02 ...|--profile smoke|full] [--seed N] [--unsafe SWITCH]   one run per scenario
    soak  [--duration 2h] [--seed N] [--netns auto|yes|no]   combined random nemesis in rounds, rolling
                                         checks (convergence after every heal), RSS/fd growth
    check DIR                            re-run the checker on a recorded run (writes results/summary)
    plot  DIR                            redraw timeline.png
Runs are kept in tests/jepsen_like/store/ (git-ignored) unless --store says otherwise.
Exit status: 0 all OK, 1 an anomaly, 2 a harness error.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("SCHEDD_TEST_MODE", "1")


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def main(argv=None) -> int:
    from .harness import STORE
    from .scenarios import FULL, SCENARIOS, SMOKE

    p = argparse.ArgumentParser(prog="python -m tests.jepsen_like", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    r.add_argument("--profile", choices=["smoke", "full", "all"])
    r.add_argument("--seed", type=int)
    r.add_argument("--unsafe", action="append", default=[])
    r.add_argument("--store", default=str(STORE))
    s = sub.add_parser("soak")
    s.add_argument("--duration", default="10m")
    s.add_argument("--seed", type=int)
    s.add_argument("--store", default=str(STORE))
    s.add_argument("--netns", choices=["auto", "yes", "no"], default="auto",
                   help="run the cluster in network namespaces with the iptables partition nemesis (auto: as root)")
    for name in ("check", "plot"):
        c = sub.add_parser(name)
        c.add_argument("dir")
    a = p.parse_args(argv)

    if a.cmd in ("check", "plot"):
        from .runner import check_dir
        res = check_dir(Path(a.dir), plot=True)
        if a.cmd == "check":
            print((Path(a.dir) / "summary.txt").read_text(), end="")
        else:
            print(Path(a.dir) / "timeline.png")
        return 0 if res["ok"] else 1

    if a.cmd == "run":
        from .runner import run_scenario
        names = a.scenario or {"smoke": SMOKE, "full": FULL, "all": SMOKE + FULL, None: ["S01"]}[a.profile]
        rows, bad = [], False
        for name in names:
            seed = a.seed if a.seed is not None else random.randrange(1 << 30)
            try:
                res, d = run_scenario(name, seed, unsafe=tuple(a.unsafe), root=Path(a.store))
            except Exception as e:  # noqa: BLE001 - report it, go on with the next scenario
                print(f"{name}: harness error: {e!r}", file=sys.stderr)
                rows.append({"scenario": name, "seed": seed, "unsafe": ",".join(a.unsafe) or "-", "faults": "-",
                             "instants": "-", "anomalies": "harness error", "by_check": "-", "p99_ms": "-",
                             "calm_p99_ms": "-", "converge_s": "-", "commit_gap_s": "-", "duration_s": "-",
                             "evidence": "-"})
                bad = True
                continue
            print((d / "summary.txt").read_text())
            rows.append(_row(res))
            bad |= not res["ok"] or bool(res.get("fault_evidence_missing"))
        print(table(rows))
        return 1 if bad else 0

    from .soak import soak
    return soak(_duration(a.duration), a.seed, Path(a.store), {"auto": None, "yes": True, "no": False}[a.netns])


def _row(res: dict) -> dict:
    s = res["stats"]
    return {"scenario": res["scenario"], "seed": res["seed"], "unsafe": ",".join(res.get("unsafe") or []) or "-",
            "faults": s["faults"], "instants": s["instants_checked"], "anomalies": len(res["anomalies"]),
            "by_check": ",".join(f"{c}={n}" for c, n in res["counts"].items() if n) or "-",
            "p99_ms": s["lateness"]["p99_ms"], "calm_p99_ms": s["lateness"].get("calm", {}).get("p99_ms"),
            "converge_s": _converge_cell(s.get("convergence") or []),
            "commit_gap_s": "-" if s.get("commit_gap_max_s") is None else f"{s['commit_gap_max_s']:.1f}",
            "duration_s": res.get("duration_s"),
            "evidence": "ok" if not res.get("fault_evidence_missing") else "MISSING"}


def _converge_cell(conv: list[dict]) -> str:
    """Time to converge after each heal (max), or how many heals did not converge."""
    if not conv:
        return "-"
    stuck = sum(1 for c in conv if not c["ok"])
    if stuck:
        return f"STUCK {stuck}/{len(conv)}"
    return f"{max(c['seconds'] for c in conv):.1f} (n={len(conv)})"


def table(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    fmt = lambda v: f"{v:.0f}" if isinstance(v, float) else str(v)  # noqa: E731
    widths = {c: max(len(c), *(len(fmt(r[c])) for r in rows)) for c in cols}
    out = [" | ".join(c.ljust(widths[c]) for c in cols), "-+-".join("-" * widths[c] for c in cols)]
    out += [" | ".join(fmt(r[c]).ljust(widths[c]) for c in cols) for r in rows]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
