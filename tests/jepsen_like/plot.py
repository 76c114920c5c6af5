"""timeline.png of a run: a lane per job (scheduled instants: green ended, red anomaly), a lane per
worker (handler runs as bars, labelled with their tokens), a leader lane (who led, in which term),
fault windows shaded, anomalies marked."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def plot_run(records: list[dict], results: dict, meta: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = meta.get("started") or (records[0]["ts"] if records else 0)
    rel = lambda ts: ts - t0  # noqa: E731
    jobs = [j["name"] for j in meta.get("jobs", [])] + [j["name"] for j in meta.get("churn", [])]
    workers = meta.get("workers", ["w1", "w2"])
    nodes = sorted(meta.get("nodes", {}))
    shards = int(meta.get("shards") or 1)
    # sharded: one leader lane per shard group (each group has its own leader and terms)
    leader_lanes = ["leader"] if shards == 1 else [f"leader s{k}" for k in range(shards)]
    lanes = leader_lanes + [f"worker {w}" for w in workers] + jobs
    y = {name: i for i, name in enumerate(reversed(lanes))}
    fig, ax = plt.subplots(figsize=(16, max(4, 0.45 * len(lanes) + 1.5)))

    for kind, target, a, b in results["stats"].get("fault_windows", []):
        end = b if b is not None else (meta.get("window_end") or a + 1)
        ax.axvspan(rel(a), rel(end), color="orange", alpha=0.15)
        ax.text(rel(a), len(lanes) - 0.4, f"{kind} {target}", fontsize=6, rotation=90, va="top")

    # leader lane: who led from when (role records: new == 2 is leader)
    colors = {n: c for n, c in zip(nodes, ["tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:pink"])}
    lead = [r for r in records if r.get("type") == "role"]
    open_: dict[tuple, tuple] = {}         # (node, shard) -> (since, term)
    end_ts = meta.get("ended") or (records[-1]["ts"] if records else t0)
    spans = []
    for r in lead:
        key = (r["node"], int(r.get("shard") or 0))
        if r.get("new") == 2:
            open_[key] = (r["ts"], r.get("term"))
        elif r.get("old") == 2 and key in open_:
            a, term = open_.pop(key)
            spans.append((key, a, r["ts"], term))
    for r in records:                      # a killed leader never records stepping down
        if r.get("type") == "nemesis" and r.get("fault") == "kill" and r.get("phase") == "start":
            for key in [k for k in open_ if k[0] == r.get("node")]:
                a, term = open_.pop(key)
                spans.append((key, a, r["ts"], term))
    for key, (a, term) in open_.items():
        spans.append((key, a, end_ts, term))
    for (n, k), a, b, term in spans:      # one thin sub-lane per node: two believers show as two bars
        lane = y[leader_lanes[k if shards > 1 else 0]]
        off = (nodes.index(n) - (len(nodes) - 1) / 2) * 0.25 if n in nodes else 0
        ax.barh(lane + off, rel(b) - rel(a), left=rel(a), height=0.22, color=colors.get(n, "grey"), alpha=0.8)
        ax.text(rel(a), lane + off, f"{n} t{term}", fontsize=5, va="center")

    # worker lanes: handler runs
    starts = {}
    for r in records:
        if r.get("type") == "h_start":
            starts[(r["worker"], r["job"], r["token"])] = r      # a token is unique per shard, so per job
        elif r.get("type") == "h_end":
            s = starts.pop((r["worker"], r["job"], r["token"]), None)
            if s is not None and f"worker {r['worker']}" in y:
                ok = r.get("state") == "SUCCEEDED"
                ax.barh(y[f"worker {r['worker']}"], max(0.05, r["ts"] - s["ts"]), left=rel(s["ts"]), height=0.5,
                        color="tab:green" if ok else "tab:red", alpha=0.5)
                if r["job"] in ("long", "once"):
                    ax.text(rel(s["ts"]), y[f"worker {r['worker']}"] + 0.3, str(r["token"]), fontsize=5)
    for (w, _, tok), s in starts.items():          # never ended (killed, paused)
        if f"worker {w}" in y:
            ax.plot([rel(s["ts"])], [y[f"worker {w}"]], marker=">", color="black", ms=4)

    # job lanes: instants
    bad = {(a.get("job"), a.get("t")) for a in results["anomalies"] if a.get("job")}
    eff = defaultdict(list)
    for r in records:
        if r.get("type") == "effect":
            eff[r["job"]].append(r)
    skipped = defaultdict(set)
    first_node = nodes[0] if nodes else None     # (each shard's fire entries: a job is in one shard)
    for r in records:
        if r.get("type") == "apply" and r.get("node") == first_node and r["entry"].get("k") in ("fire", "skip"):
            for item in (r.get("res") or {}).get("items") or []:
                if len(item) == 3 and str(item[2]).startswith("skipped"):
                    skipped[item[0]].add(item[1])
    for job in jobs:
        if job not in y:
            continue
        xs = [rel(t / 1000) for t in sorted(skipped[job])]
        ax.scatter(xs, [y[job]] * len(xs), s=8, color="grey")
        xs_ok = [rel(r["scheduled_ms"] / 1000) for r in eff[job] if (job, r["scheduled_ms"]) not in bad and r["verdict"] == "accepted"]
        xs_dup = [rel(r["arrived"]) for r in eff[job] if r["verdict"] != "accepted"]
        ax.scatter(xs_ok, [y[job]] * len(xs_ok), s=8, color="tab:green")
        ax.scatter(xs_dup, [y[job]] * len(xs_dup), s=14, marker="x", color="tab:orange")
    for a in results["anomalies"]:
        job, ts = a.get("job"), a.get("ts") or (a.get("t", 0) / 1000 if a.get("t") else None)
        if ts is None:
            continue
        yy = y.get(job, y[leader_lanes[a.get("shard", 0) if shards > 1 else 0]])
        ax.scatter([rel(ts)], [yy], s=40, marker="X", color="red", zorder=5)
        ax.annotate(a["check"], (rel(ts), yy), fontsize=6, color="red", xytext=(2, 4), textcoords="offset points")

    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)), fontsize=7)
    ax.set_xlabel("seconds since start")
    verdict = "OK" if results["ok"] else ("liveness only" if results["safety_ok"] else "SAFETY VIOLATION")
    lat = results["stats"]["lateness"]
    ax.set_title(f"{meta.get('scenario')} seed {meta.get('seed')} unsafe={','.join(meta.get('unsafe') or []) or '-'}: "
                 f"{verdict}; {len(results['anomalies'])} anomalies; lateness p99 "
                 f"{'-' if lat.get('p99_ms') is None else round(lat['p99_ms'])} ms "
                 f"(green: accepted effect, grey: SKIPPED, orange x: duplicate/stale effect, red X: anomaly)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
