"""The checker: a pure function from a recorded history to anomalies and statistics.

    results = check(records, meta)

`records` are the history lines of every process (dicts with ts, proc, type, ...); `meta` is the
run's meta.json (jobs, lease, the fault window). Nothing here reads files, clocks or the network,
so it is unit-tested on synthetic good and bad histories (tests/jepsen_like/test_checker.py).

Checks:
  C1 every scheduled instant in the window ended fired, queued behind its predecessor (caught up),
     or SKIPPED with a reason; none silently missing; every one of them ended (liveness)
  C2 at most one intent per (job, scheduled time), at most one execution per client request id,
     and every replica applied the same entry with the same state hash at each index
  C3 no overlapping accepted executions for jobs whose policy forbids it; at_most_once never twice
  C4 only the current fencing token completes (by the worker it was given to); stale completions
     are rejected and recorded; an attempt is expired only after a lease without news, or as
     never started (its worker process reconnected without it) when no handler started under it
  C5 every acknowledged write and completion is in the log
  C6 no dispatch, handler start or effect without a committed claim for that key and token
  C7 replicas converge after healing: at the end, and within a deadline after each heal (records
     `converge`: every replica caught up to the heal's commit index, equal state digests at an
     equal applied index; a different digest at the same index is divergence)
  C8 DAG order: no task of a run claimed (in the log) or started (at the sink) before its
     upstreams ended as its trigger rule wants; a succeeded task of a run is never run again
  C9 lateness p50/p99/max of first attempts; nothing fired early
  C10 the majority keeps committing while one node is cut off: no gap longer than COMMIT_GAP_S
     between entries applied by the other nodes within a one-node partition window (liveness)

Sharded runs (meta "shards" = S > 1): every group has its own log, so the nodes' records say
their group ("shard") and everything that compares indexes, terms, hashes or leaders is grouped
by it: C2 per (shard, index), C7 per shard's final digests, C10 per shard, leader terms per
shard, fencing tokens (a claim's log index, so equal in two groups) per (shard, token), a term's
epoch per (shard, term). A worker's or the sink's record names a job, whose shard is
`shard_of(routing_key(job), S)`. Checks per job (C1 C3 C4 C5 C6 C8 C9) are then within one shard.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

from schedd.core.commands import CLIENT_RID
from schedd.core.shards import routing_key, shard_of

CHECKS = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10")
SAFETY = {"C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9early"}
TERMINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "SKIPPED", "UPSTREAM_FAILED", "LOST"}
EARLY_TOLERANCE_MS = 10
SLACK_MS = 1500
COMMIT_GAP_S = 8.0       # election (0.6-1.2 s) + a deposed leader's fallback (2.5 s), doubled for load



def _base_rid(entry: dict) -> str:
    """An entry's request id as its proposer sent it: without the test hooks' `#nodedup` suffix
    and, for a client's write, without the API's client namespace prefix."""
    rid = str(entry.get("rid", "")).split("#nodedup")[0]
    return rid[len(CLIENT_RID):] if rid.startswith(CLIENT_RID) else rid

def _entries_of(log: dict[tuple[int, int], dict]):
    """((shard, index), record, entry, result) in each shard's log order, a group commit's
    entries one by one."""
    for idx in sorted(log):
        r = log[idx]
        e, res = r["entry"], r.get("res", {})
        if e.get("k") == "group" and isinstance(res.get("parts"), list):
            for text, part in zip(e.get("entries") or [], res["parts"]):
                try:
                    sub = json.loads(text)
                except (TypeError, ValueError):
                    continue
                yield idx, r, sub, part
        else:
            yield idx, r, e, res


def load(lines) -> list[dict]:
    out = []
    for line in lines:
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue            # a torn last line of a killed process
    out.sort(key=lambda r: r.get("ts", 0))
    return out


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, math.ceil(p / 100 * len(v)) - 1))
    return v[k]


def _period_of(spec_text) -> tuple[int, dict]:
    try:
        spec = json.loads(spec_text) if isinstance(spec_text, str) else dict(spec_text or {})
    except ValueError:
        return 0, {}
    s = str(spec.get("schedule") or "")
    if s.startswith("@every "):
        v = s.split()[1]
        mult = {"s": 1000, "m": 60_000, "h": 3_600_000}.get(v[-1], 0)
        try:
            return int(float(v[:-1]) * mult), spec
        except ValueError:
            return 0, spec
    return 0, spec


class _Anoms:
    def __init__(self) -> None:
        self.items: list[dict] = []

    def add(self, check: str, what: str, ts: float | None = None, **ev) -> None:
        self.items.append({"check": check, "what": what, "ts": ts, **ev})


# Entry kinds that name a job or DAG row (sharded: found in that row's shard's log only).
_JOB_ROWS = frozenset({"put", "pause", "resume", "delete", "trigger", "start", "start_many", "finish", "finish_many",
                       "expire", "cancel", "fire", "skip", "dag_put", "dag_delete", "dag_run"})


class _Shards:
    """How records map to shard groups (module doc). With S = 1 every record is shard 0 and
    nothing in the report mentions shards."""

    def __init__(self, shards: int) -> None:
        self.n = max(1, shards)

    def of_job(self, name) -> int:
        return shard_of(routing_key(str(name)), self.n) if self.n > 1 else 0

    def of(self, r: dict) -> int:
        """A record's shard: its own field (a node's records), else its job's."""
        if "shard" in r:
            return int(r["shard"])
        return self.of_job(r["job"]) if "job" in r else 0

    def label(self, node: str, k: int) -> str:
        """A replica's name in the statistics: the node, or node/s<k> when sharded."""
        return node if self.n == 1 else f"{node}/s{k}"

    def where(self, k: int) -> str:
        return f" of shard {k}" if self.n > 1 else ""

    def tag(self, k: int) -> dict:
        return {"shard": k} if self.n > 1 else {}


def check(records: list[dict], meta: dict) -> dict:
    A = _Anoms()
    S = _Shards(int(meta.get("shards") or 1))
    lease = int(meta.get("lease_ms", 3000))
    window_end_ms = int(meta["window_end"] * 1000) if meta.get("window_end") else None
    by_type: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_type[r.get("type")].append(r)

    # ---------------------------------------------------------------- C2: replicas agree per index
    # (per shard: each group's log has its own indexes)
    per_index: dict[tuple[int, int], dict[str, tuple]] = defaultdict(dict)
    log: dict[tuple[int, int], dict] = {}
    last_applied: dict[str, int] = {}
    jumps: dict[str, int] = defaultdict(int)     # a node applied past a gap: it loaded a snapshot
    latest: dict[tuple[int, int], dict] = {}
    for r in by_type["apply"]:
        k, idx, node = S.of(r), r["index"], r["node"]
        replica = S.label(node, k)
        if replica in last_applied and idx > last_applied[replica] + 1:
            jumps[replica] += 1
        key = (r["hash"], json.dumps(r["entry"], sort_keys=True), json.dumps(r.get("res"), sort_keys=True))
        seen = per_index[(k, idx)].get(node)
        if seen is not None and seen != key:
            A.add("C2", f"{node} applied index {idx}{S.where(k)} twice with different entries or hashes", r["ts"],
                  index=idx, **S.tag(k))
        per_index[(k, idx)][node] = key
        log.setdefault((k, idx), r)
        latest[(k, idx)] = r              # what the index holds in the end (records are in ts order)
        last_applied[replica] = max(last_applied.get(replica, 0), idx)
    diverged = 0
    for k, idx in sorted(per_index):
        views = per_index[(k, idx)]
        if len({v for v in views.values()}) > 1:
            diverged += 1
            if diverged <= 20:
                what = "hash" if len({v[0] for v in views.values()}) > 1 else (
                    "entry" if len({v[1] for v in views.values()}) > 1 else "apply result")
                A.add("C2", f"replicas differ at index {idx}{S.where(k)} ({what}): " +
                      ", ".join(f"{n}={v[0][:8]}" for n, v in sorted(views.items())), log[(k, idx)]["ts"],
                      index=idx, **S.tag(k))

    # ---------------------------------------------------------------- replay the log
    jobs: dict[str, dict] = {}               # name -> {period, spec, created_now, deleted_now, pauses}
    execs: dict[tuple, dict] = {}
    # (shard, token) -> {job, t, worker, attempt, now, term, index of the claim}: a token is a
    # claim's log index (times 1024), so two shards' logs give out the same numbers
    tokens: dict[tuple[int, int], dict] = {}
    epochs: dict[tuple[int, int], int] = {}  # (shard, term) -> now of its epoch entry
    rid_created: dict[str, list] = defaultdict(list)
    rids: set[str] = set()
    finishes_ok: dict[tuple[int, int], dict] = {}     # (shard, token) ->
    stale_finishes = []
    expires = []
    never_started = []          # expiries of claims whose worker process reconnected without them
    dag_specs: dict[str, dict] = {}          # DAG -> {task: (upstream, rule)} (as last put)
    dag_runs: dict[tuple, dict] = {}         # (DAG, logical_ms) -> {"graph", "index", "ts"}
    dag_claims: list[tuple] = []             # (index, ts, dag, t, task, token)
    dag_ended: dict[tuple, dict] = {}        # (DAG, t, task) -> {"state", "index", "ts"} (first end)
    misplaced: set[tuple[int, str]] = set()

    def owned(name, sk: int, idx: int, ts: float) -> None:
        """Sharded: a job's rows live in its shard's log only (shard_of(routing_key(name)))."""
        if S.n > 1 and name and S.of_job(name) != sk and (sk, name) not in misplaced:
            misplaced.add((sk, name))
            A.add("C2", f"{name} (shard {S.of_job(name)}) has an entry in shard {sk}'s log at index {idx}", ts,
                  job=name, index=idx, shard=sk)
    for (sk, idx), r, e, res in _entries_of(log):
        k, now = e.get("k"), e.get("now", 0)
        if S.n > 1 and k in _JOB_ROWS:        # (not the cluster-wide tables: ACL, calendars, quotas)
            named = [e.get("job") or e.get("name") or (_period_of(e.get("spec"))[1].get("name") if k == "put" else None)]
            named += [c.get("job") for c in (e.get("claims") or []) + (e.get("results") or []) if isinstance(c, dict)]
            named += [item[0] for item in (res.get("items") or []) if k in ("fire", "skip") and item]
            for name in named:
                owned(name, sk, idx, r["ts"])
        base_rid = _base_rid(e)
        if base_rid:
            rids.add(base_rid)
        if k == "epoch":
            epochs.setdefault((sk, e.get("term")), now)
        elif k == "dag_put" and res.get("ok"):
            g = _dag_graph(e.get("spec"))
            if g is not None:
                dag_specs[e.get("name") or res.get("name")] = g
        elif k == "dag_delete" and res.get("ok"):
            dag_specs.pop(e.get("name"), None)
        elif k == "dag_run" and res.get("ok") and "logical_ms" in res and res.get("name") in dag_specs:
            dag_runs.setdefault((res["name"], res["logical_ms"]), {"graph": dag_specs[res["name"]], "index": idx,
                                                                   "ts": r["ts"]})
        elif k == "put" and res.get("ok"):
            period, spec = _period_of(e.get("spec"))
            j = jobs.setdefault(spec.get("name") or res.get("name"), {"pauses": [], "created": now})
            j.update(period=period, spec=spec, deleted=None)
            if spec.get("paused"):
                j["pauses"].append([now, None])
        elif k in ("pause", "resume", "delete") and res.get("ok"):
            j = jobs.get(e.get("name"))
            if j is not None:
                if k == "pause" and not (j["pauses"] and j["pauses"][-1][1] is None):
                    j["pauses"].append([now, None])
                elif k == "resume" and j["pauses"] and j["pauses"][-1][1] is None:
                    j["pauses"][-1][1] = now
                elif k == "delete":
                    j["deleted"], j["deleted_index"] = now, idx
        elif k == "fire" and res.get("ok"):
            for name, t, code in res.get("items", []):
                if name.endswith(":") and code == "created":        # a DAG's schedule row: a run starts
                    dag = name[:-1]
                    if dag in dag_specs:
                        dag_runs.setdefault((dag, t), {"graph": dag_specs[dag], "index": idx, "ts": r["ts"]})
                    execs[(name, t)] = {"job": name, "t": t, "index": idx, "now": now, "trigger": "dag_fire",
                                        "state": "SUCCEEDED", "attempts": [], "term": e.get("term")}
                    continue
                if code == "skipped" and (name, t) not in execs:     # recorded SKIPPED with a reason
                    execs[(name, t)] = {"job": name, "t": t, "index": idx, "now": now, "trigger": "schedule",
                                        "state": "SKIPPED", "attempts": [], "term": e.get("term")}
                elif code == "created":
                    if (name, t) in execs and not execs[(name, t)].get("deleted"):
                        A.add("C2", f"a second intent for {name}@{t} at index {idx}", r["ts"], job=name, t=t)
                    execs[(name, t)] = {"job": name, "t": t, "index": idx, "now": now, "trigger": "schedule",
                                        "state": "SCHEDULED", "attempts": [], "term": e.get("term")}
        elif k == "trigger" and res.get("ok") and "scheduled_ms" in res and not res.get("deduplicated"):
            name, t = res.get("name"), res["scheduled_ms"]
            rid_created[base_rid].append((name, t, idx))
            execs[(name, t)] = {"job": name, "t": t, "index": idx, "now": now, "trigger": "manual",
                                "state": "SCHEDULED", "attempts": [], "term": e.get("term")}
        elif k in ("start", "start_many") and res.get("ok") and not res.get("deduplicated"):
            # start: one claim, its token the entry's index; start_many: each claim's own token
            claims = [(e, res, idx)] if k == "start" else \
                [(c, cr, cr.get("token")) for c, cr in zip(e.get("claims") or [], res.get("claims") or [])]
            for c, cres, tok in claims:
                if not cres.get("ok"):
                    continue
                key = (c.get("job"), c.get("scheduled_ms"))
                tokens[(sk, tok)] = {"job": key[0], "t": key[1], "worker": c.get("worker"),
                                     "attempt": c.get("attempt"), "now": now, "term": e.get("term"), "index": idx}
                if ":" in str(key[0]) and key not in execs:   # a DAG task: apply recorded it, no entry did
                    execs[key] = {"job": key[0], "t": key[1], "index": idx, "now": now, "trigger": "dag",
                                  "state": "SCHEDULED", "attempts": [], "term": e.get("term")}
                if ":" in str(key[0]):
                    dag, _, task = str(key[0]).partition(":")
                    dag_claims.append((idx, r["ts"], dag, key[1], task, tok))
                ex = execs.get(key)
                if ex is not None:
                    ex["attempts"].append(tok)
                    ex["state"] = "RUNNING"
        elif k in ("finish", "finish_many"):
            # finish: one result; finish_many: each result with its own worker (its `by`)
            results = [(e, res)] if k == "finish" else \
                [({**x, "by": x.get("worker")}, xr) for x, xr in zip(e.get("results") or [], res.get("results") or [])]
            for e1, res1 in results:
                key = (e1.get("job"), e1.get("scheduled_ms"))
                tok = e1.get("token")
                if res1.get("ok") and not res1.get("deduplicated"):
                    finishes_ok[(sk, tok)] = {"by": e1.get("by"), "state": res1.get("state"), "index": idx,
                                              "ts": r["ts"]}
                    info = tokens.get((sk, tok))
                    ex = execs.get(key)
                    current = ex["attempts"][-1] if ex and ex["attempts"] else None
                    if info is None or current != tok:
                        A.add("C4", f"completion of {key[0]}@{key[1]} with token {tok} accepted, but it is not "
                              f"the current attempt", r["ts"], index=idx)
                    elif info["worker"] != e1.get("by"):
                        A.add("C4", f"completion of {key[0]}@{key[1]} token {tok} (given to {info['worker']}) "
                              f"accepted from {e1.get('by')}: a stale attempt's result overwrote the current one",
                              r["ts"], index=idx, job=key[0], t=key[1])
                    if ex is not None and res1.get("state"):
                        ex["state"] = res1["state"]
                    if ":" in str(key[0]) and res1.get("state") in TERMINAL:
                        dag, _, task = str(key[0]).partition(":")
                        dag_ended.setdefault((dag, key[1], task), {"state": res1["state"], "index": idx, "ts": r["ts"]})
                elif res1.get("code") == "stale":
                    stale_finishes.append({"token": tok, "by": e1.get("by"), "index": idx, "ts": r["ts"],
                                           "job": key[0], "t": key[1], "shard": sk})
        elif k == "expire" and res.get("ok") and not res.get("deduplicated"):
            tok = e.get("token")
            info = tokens.get((sk, tok), {})
            expires.append({"token": tok, "index": idx, "ts": r["ts"], "shard": sk})
            grace_from = max(info.get("now", 0), epochs.get((sk, e.get("term")), 0))
            if e.get("never_started"):
                # not bound by the lease: its worker said it never got it; checked against the
                # handler starts below (an attempt that started must never be called unstarted)
                never_started.append({"token": tok, "ts": r["ts"], "job": info.get("job"), "t": info.get("t"),
                                      "shard": sk})
            elif now - grace_from < lease:
                A.add("C4", f"attempt token {tok} of {info.get('job')}@{info.get('t')} expired "
                      f"{now - grace_from} ms after its start or its leader's takeover (< lease {lease} ms)",
                      r["ts"], index=idx)
            ex = execs.get((e.get("job"), e.get("scheduled_ms")))
            if ex is not None and res.get("state"):
                ex["state"] = res["state"]
            if ":" in str(e.get("job")) and res.get("state") in TERMINAL:
                dag, _, task = str(e.get("job")).partition(":")
                dag_ended.setdefault((dag, e.get("scheduled_ms"), task), {"state": res["state"], "index": idx,
                                                                         "ts": r["ts"]})
        elif k == "skip" and res.get("ok"):
            for name, t, code in res.get("items", []):
                ex = execs.get((name, t))
                if ex is not None:
                    ex["state"] = "SKIPPED"
        elif k == "cancel" and res.get("ok"):
            ex = execs.get((e.get("job"), e.get("scheduled_ms")))
            if ex is not None and res.get("state"):
                ex["state"] = res["state"]
    for rid, made in rid_created.items():
        if len(made) > 1:
            A.add("C2", f"request {rid[:12]} created {len(made)} executions: " +
                  ", ".join(f"{n}@{t}" for n, t, _ in made), None, rid=rid)
    # An execution recorded before its job's delete went with it. By log order, not by the
    # entries' `now` stamps: under clock skew (S09) a fire recorded by a leader whose clock ran
    # fast carries a later stamp than the delete a slower leader recorded after it, and its runs
    # were reported as never ended.
    for name, j in jobs.items():
        if j.get("deleted") is not None:
            for key, ex in execs.items():
                if key[0] == name and ex["index"] < j["deleted_index"]:
                    ex["deleted"] = True

    # ---------------------------------------------------------------- C1: no instant silently missing
    instants_checked = 0
    instants_by_shard: dict[int, int] = defaultdict(int)
    # A pause's or resume's `now` is the stamp of the leader that recorded it: under an injected
    # clock offset (S09) it is off by up to that offset from the instants it stops, so an instant
    # that close to a pause's edges may or may not have been recorded.
    skew = max((abs(r.get("offset_ms") or 0) for r in by_type["nemesis"] if r.get("fault") == "clock"),
               default=0)
    for name, j in sorted(jobs.items()):
        period = j.get("period") or 0
        if not period:
            continue
        times = sorted(t for (n, t), ex in execs.items() if n == name and ex["trigger"] != "manual")
        end = window_end_ms
        if j.get("deleted") is not None:
            end = min(end or j["deleted"], j["deleted"]) if end else j["deleted"]
        if not times:
            if end and end - j["created"] > 2 * period + SLACK_MS and not j["pauses"]:
                A.add("C1", f"{name}: no instant fired at all", None, job=name)
            continue

        def paused_at(m: int) -> bool:
            return any(p0 - SLACK_MS - skew <= m <= (p1 if p1 is not None else 2 ** 62) + period + skew
                       for p0, p1 in j["pauses"])
        for a, b in zip(times, times[1:]):
            m = a + period
            while m < b:
                if not paused_at(m):
                    A.add("C1", f"{name}: instant {m} missing (between {a} and {b})", m / 1000, job=name, t=m)
                    break
                m += period
        if end and not paused_at(end) and j.get("deleted") is None and times[-1] < end - period - SLACK_MS:
            A.add("C1", f"{name}: nothing fired after {times[-1]} though the window ran to {end}",
                  times[-1] / 1000, job=name)
        for t in times:
            if end is None or t <= end:
                instants_checked += 1
                instants_by_shard[S.of_job(name)] += 1
    unfinished = []

    def held(name: str) -> bool:           # paused at the end of the window: its executions wait
        j = jobs.get(name)
        end = window_end_ms if window_end_ms is not None else 2 ** 62
        return bool(j) and any(p0 <= end and (p1 is None or p1 > end) for p0, p1 in j["pauses"])
    final_view = {}     # every view in order: a later one may have pruned what an earlier saw end
    for view in by_type["final_execs"]:
        final_view.update({(j, t): (st, why) for j, t, st, why in view["execs"]})
    for key, ex in execs.items():
        if ex["trigger"] == "dag":          # DAG tasks: C8 (a task may be created after the window)
            continue
        if ex.get("deleted") or (window_end_ms is not None and key[1] > window_end_ms) or held(key[0]):
            continue
        state = final_view[key][0] if key in final_view else ex["state"]
        if state not in TERMINAL:
            ex["state"] = state
            unfinished.append(key)
    if unfinished and meta.get("settled", True) is not None:
        for key in sorted(unfinished)[:10]:
            A.add("C1", f"{key[0]}@{key[1]} never ended (still {execs[key]['state']})", key[1] / 1000,
                  job=key[0], t=key[1], liveness=True)

    # ---------------------------------------------------------------- C6: nothing without a claim
    for r in by_type["push"]:
        tok, k = r["token"], S.of(r)
        info = tokens.get((k, tok))
        if info is None or (info["job"], info["t"]) != (r["job"], r["scheduled_ms"]):
            A.add("C6", f"{r['node']} pushed {r['job']}@{r['scheduled_ms']} token {tok}{S.where(k)} to {r['worker']} "
                  f"without a committed claim for it", r["ts"], job=r["job"], t=r["scheduled_ms"])
        elif r.get("applied", info["index"]) < info["index"]:      # the claim's entry, not its token
            A.add("C6", f"{r['node']} pushed {r['job']}@{r['scheduled_ms']} token {tok}{S.where(k)} before applying "
                  f"its claim (applied {r.get('applied')})", r["ts"], job=r["job"], t=r["scheduled_ms"])
    for r in by_type["h_start"]:
        info = tokens.get((S.of(r), r["token"]))
        if info is None or (info["job"], info["t"]) != (r["job"], r["scheduled_ms"]):
            A.add("C6", f"{r['worker']} started {r['job']}@{r['scheduled_ms']} token {r['token']}{S.where(S.of(r))} "
                  f"without a committed claim", r["ts"], job=r["job"], t=r["scheduled_ms"])
    started = {(S.of(r), r["token"]): r for r in by_type["h_start"]}
    for x in never_started:
        s = started.get((x["shard"], x["token"]))
        if s is not None:
            A.add("C4", f"attempt token {x['token']} of {x['job']}@{x['t']} expired as never started, but "
                  f"{s['worker']} started its handler", x["ts"], job=x["job"], t=x["t"])
    effects = by_type["effect"]
    for r in effects:
        info = tokens.get((S.of(r), r["token"]))
        if info is None or (info["job"], info["t"]) != (r["job"], r["scheduled_ms"]):
            A.add("C6", f"effect for {r['job']}@{r['scheduled_ms']} with token {r['token']}{S.where(S.of(r))} that no "
                  f"committed claim gave out ({r['verdict']})", r["ts"], job=r["job"], t=r["scheduled_ms"])

    # ---------------------------------------------------------------- C3: overlap and at-most-once
    delivery = {n: (j.get("spec") or {}).get("delivery", "") for n, j in jobs.items()}
    overlap = {n: (j.get("spec") or {}).get("overlap", "") for n, j in jobs.items()}
    starts_by_key: dict[tuple, set] = defaultdict(set)
    for r in by_type["h_start"]:
        starts_by_key[(r["job"], r["scheduled_ms"])].add(r["token"])
    for key, toks in starts_by_key.items():
        if delivery.get(key[0]) == "at_most_once" and len(toks) > 1:
            A.add("C3", f"at_most_once {key[0]}@{key[1]} started {len(toks)} times (tokens {sorted(toks)})",
                  key[1] / 1000, job=key[0], t=key[1])
    ends = {(r["job"], r["scheduled_ms"], r["token"]): r["ts"] for r in by_type["effect_end"]}
    intervals: dict[str, list] = defaultdict(list)
    for r in effects:
        # only attempts the scheduler held live to the end (a zombie's late effect is fenced
        # by its token, not by the overlap policy)
        if r["verdict"] == "accepted" and (S.of(r), r["token"]) in finishes_ok:
            intervals[r["job"]].append((r["arrived"], ends.get((r["job"], r["scheduled_ms"], r["token"]),
                                                               r["arrived"]), r["scheduled_ms"]))
    for name, iv in intervals.items():
        if overlap.get(name) not in ("skip", "queue"):
            continue
        iv.sort()
        for (s1, e1, t1), (s2, e2, t2) in zip(iv, iv[1:]):
            if s2 < e1 - 0.005:
                A.add("C3", f"{name}: {t1} and {t2} ran at the same time (overlap {overlap[name]})", s2, job=name)

    # ---------------------------------------------------------------- C5: acknowledged means durable
    final_rids = {_base_rid(e) for _, _, e, _ in _entries_of(latest)}
    for r in by_type["ok"]:
        if r.get("rid") and r["rid"] not in final_rids:
            A.add("C5", f"client {r['op']} {r.get('job')} (request {r['rid'][:12]}) was acknowledged but is "
                  f"not in the log", r["ts"])
    # a worker's ack names only the token: its shard is that of the assignment the worker got
    # with that token (either, in the rare case it got the same number from two shards)
    recv_shards: dict[tuple, set[int]] = defaultdict(set)
    for r in by_type["w_recv"]:
        recv_shards[(r.get("worker"), r["token"])].add(S.of(r))
    for r in by_type["w_ack"]:
        cands = {int(r["shard"])} if "shard" in r else (recv_shards.get((r.get("worker"), r["token"]))
                                                        or set(range(S.n)))
        if r.get("outcome") == "committed" and not any((k, r["token"]) in finishes_ok for k in cands):
            A.add("C5", f"result of token {r['token']} acknowledged as committed to {r['worker']} but no "
                  f"completion is in the log", r["ts"])

    # ---------------------------------------------------------------- C7: convergence after healing
    finals = by_type["final"]
    final_by_shard: dict[int, bool] = {}
    if finals:
        f = finals[-1]
        # sharded: {"shards": {k: {node: ...}}}, each group's replicas compared with each other
        groups = {int(k): v or {} for k, v in f["shards"].items()} if "shards" in f else {0: f.get("nodes") or {}}
        for k, nodes in sorted(groups.items()):
            vals = {(v["applied"], v["hash"]) for v in nodes.values() if v}
            agree = len(vals) == 1 and all(nodes.values())
            stores = {(v["history"], v["history_rows"]) for v in nodes.values() if v and "history" in v}
            final_by_shard[k] = agree and len(stores) <= 1
            if not agree or (S.n == 1 and not f.get("converged")):
                A.add("C7", f"replicas{S.where(k)} did not converge after healing: {nodes}", f["ts"], **S.tag(k))
            if len(stores) > 1:
                view = ", ".join(f"{n} history {v['history'][:8]} ({v['history_rows']} runs @{v['history_index']}"
                                 f"{', copying ' + v['history_gap'] if v['history_gap'] else ''})"
                                 for n, v in sorted(nodes.items()) if v)
                A.add("C7", f"the history stores{S.where(k)} differ after healing: {view}", f["ts"], **S.tag(k))
        if S.n > 1 and not f.get("converged") and all(final_by_shard.values()):
            A.add("C7", "the harness saw the replicas not converge after healing (every group's last view agrees)",
                  f["ts"])
    else:
        A.add("C7", "no final convergence record (the run did not finish)", None)
    convergence = []
    for r in by_type["converge"]:
        convergence.append({"heal_ts": r["heal_ts"], "ok": r["ok"], "seconds": r.get("seconds"),
                            "what": r.get("what"), **S.tag(S.of(r))})
        nodes = r.get("nodes") or {}
        view = ", ".join(f"{n} applied {v['applied']} digest {v['digest'][:8]}@{v['digest_index']}" if v else
                         f"{n} unreachable" for n, v in sorted(nodes.items()))
        if r.get("diverged"):
            A.add("C7", f"replicas hold different states at the same applied index after the {r.get('what')} "
                  f"at {r['heal_ts']:.1f}: {view}", r["ts"], diverged=True)
        elif not r["ok"]:
            behind = sorted(n for n, v in nodes.items() if v is None or v["applied"] < r["target"])
            A.add("C7", f"replicas did not converge within {r['deadline_s']:g} s after the {r.get('what')} at "
                  f"{r['heal_ts']:.1f} (commit index then {r['target']}; behind: {', '.join(behind) or 'none'}): "
                  f"{view}", r["ts"], stuck=behind)

    # ---------------------------------------------------------------- C10: the majority commits
    applies_by_shard: dict[int, list[dict]] = defaultdict(list)
    for r in by_type["apply"]:
        applies_by_shard[S.of(r)].append(r)
    commit_gaps = []                 # per shard: every group's majority must keep committing
    for k in sorted(applies_by_shard) or [0]:
        commit_gaps += [{**g, **S.tag(k)} for g in _commit_gaps(applies_by_shard[k], _fault_windows(by_type["nemesis"]))]
    for g in commit_gaps:
        if g["gap_s"] > COMMIT_GAP_S:
            where = S.where(g["shard"]) if "shard" in g else ""
            A.add("C10", f"no entry committed{where} for {g['gap_s']:.1f} s while only {g['node']} was cut off "
                  f"(partition {g['start']:.1f}-{g['stop']:.1f}): the majority stopped", g["at"], **S.tag(g.get("shard", 0)))

    # ---------------------------------------------------------------- C8: DAG order
    c8 = _check_dags(A, dag_runs, dag_claims, dag_ended, effects, by_type["effect_end"])

    # ---------------------------------------------------------------- C9: lateness, nothing early
    late = []
    fault_windows = _fault_windows(by_type["nemesis"])
    for r in effects:
        t = r["scheduled_ms"]
        lat = r["arrived"] * 1000 - t
        if lat < -EARLY_TOLERANCE_MS:
            A.add("C9", f"{r['job']}@{t} fired {-lat:.0f} ms early (token {r['token']})", r["arrived"],
                  job=r["job"], t=t, early=True)
        ex = execs.get((r["job"], t))
        if (r.get("attempt") == 1 and ex is not None and ex["trigger"] == "schedule" and r["verdict"] == "accepted"
                and overlap.get(r["job"]) != "queue"):      # queued runs wait for their predecessor
            late.append(lat)
    lateness = {"n": len(late), "p50_ms": _pct(late, 50), "p99_ms": _pct(late, 99), "max_ms": max(late) if late else None}
    lateness["calm"] = _calm_lateness([r for r in effects if overlap.get(r["job"]) != "queue"], execs,
                                      fault_windows, lease)

    # ---------------------------------------------------------------- needless expiries (not anomalies)
    # An attempt expired as lost although its worker was never faulted and its handler succeeded:
    # legal under at-least-once (fencing refuses the late result), but the work is run again.
    worker_faults = [(f[1], f[2], f[3]) for f in _fault_windows(by_type["nemesis"])
                     if f[0] in ("pause_worker", "kill_worker", "failpoint", "worker_partition")]
    expired_by_fault: dict[str, int] = defaultdict(int)     # expiries of a worker under that fault
    for x in expires:
        w = tokens.get((x["shard"], x["token"]), {}).get("worker")
        for kind, fw, a, b in _fault_windows(by_type["nemesis"]):
            if fw == w and a <= x["ts"] and (b is None or x["ts"] <= b + lease / 1000 + 1):
                expired_by_fault[kind] += 1
    h_end = {(S.of(r), r["token"]): r for r in by_type["h_end"]}
    needless = []
    for x in expires:
        info = tokens.get((x["shard"], x["token"]), {})
        end = h_end.get((x["shard"], x["token"]))
        w = info.get("worker")
        faulted = any(fw == w and a <= x["ts"] + 1 and (b is None or b >= info.get("now", 0) / 1000 - 5)
                      for fw, a, b in worker_faults)
        if end is not None and not faulted and end.get("state") == "SUCCEEDED":
            needless.append({"token": x["token"], "job": info.get("job"), "t": info.get("t"), "worker": w,
                             "expired_ts": x["ts"], "handler_end_ts": end["ts"]})

    # ---------------------------------------------------------------- statistics and fault evidence
    terms_by_shard: dict[int, set] = defaultdict(set)
    for r in by_type["role"]:
        if r.get("new") == 2:
            terms_by_shard[S.of(r)].add(r["term"])
    if S.n == 1:
        terms: object = sorted(terms_by_shard[0])
        leader_changes = len(terms_by_shard[0])
    else:
        terms = {str(k): sorted(v) for k, v in sorted(terms_by_shard.items())}
        leader_changes = sum(len(v) for v in terms_by_shard.values())
    stats = {
        "entries": len(log), "nodes_last_index": last_applied, "snapshot_jumps": dict(jumps), "instants_checked": instants_checked,
        "executions": len(execs), "effects": len(effects),
        "effects_accepted": sum(1 for r in effects if r["verdict"] == "accepted"),
        "effects_duplicate": sum(1 for r in effects if r["verdict"] == "duplicate"),
        "effects_stale": sum(1 for r in effects if r["verdict"] == "stale"),
        "stale_completions_rejected": len(stale_finishes), "expired_attempts": len(expires),
        "needless_expiries": len(needless), "expired_by_fault": dict(expired_by_fault), "needless_expiry_examples": needless[:5],
        "leader_terms": terms, "leader_changes": leader_changes,
        "worker_rejects": len(by_type["w_reject"]), "faults": sum(1 for r in by_type["nemesis"] if r.get("phase") == "start"),
        "fault_kinds": sorted({r["fault"] for r in by_type["nemesis"]}), "fault_windows": fault_windows,
        "client_ops": {s: len(by_type[s]) for s in ("invoke", "ok", "fail", "info")},
        "lateness": lateness, "unfinished": len(unfinished),
        "failpoints": sorted({(r.get("name"), r.get("action")) for r in by_type["failpoint"]}),
        "convergence": convergence,
        "converge_max_s": max((c["seconds"] for c in convergence if c["ok"]), default=None),
        "commit_gap_max_s": max((g["gap_s"] for g in commit_gaps), default=None),
        "dag_runs": c8["runs"], "dag_tasks_claimed": c8["tasks_claimed"], "dag_tasks_succeeded": c8["tasks_succeeded"],
    }
    per_check = {c: [a for a in A.items if a["check"] == c] for c in CHECKS}
    safety = [a for a in A.items if a["check"] in SAFETY or a.get("early")]
    out = {"ok": not A.items, "safety_ok": not safety, "anomalies": A.items,
           "counts": {c: len(v) for c, v in per_check.items()}, "stats": stats,
           "c8": c8}
    if S.n > 1:
        for a in A.items:             # an anomaly about a job is its shard's
            if "shard" not in a and a.get("job") is not None:
                a["shard"] = S.of_job(a["job"])
        stats["shards"] = _per_shard(S, log, last_applied, jumps, terms_by_shard, execs, tokens, effects, expires,
                                     stale_finishes, jobs, instants_by_shard, per_index, final_by_shard, commit_gaps)
        stats["faults_on_multi_leader"] = sum(1 for r in by_type["nemesis"]
                                              if r.get("phase") == "start" and len(r.get("led_shards") or []) >= 2)
        out["per_shard"] = {str(k): {c: sum(1 for a in A.items if a["check"] == c and a.get("shard") == k)
                                     for c in CHECKS} for k in range(S.n)}
    return out


def _per_shard(S: _Shards, log, last_applied, jumps, terms_by_shard, execs, tokens, effects, expires, stale,
               jobs, instants, per_index, final_ok, gaps) -> dict:
    """What was checked in each shard group (the report's per-shard lines)."""
    out = {}
    for k in range(S.n):
        mine = [e for e in effects if S.of(e) == k]
        suffix = f"/s{k}"
        out[str(k)] = {
            "entries": sum(1 for sk, _ in log if sk == k),
            "indexes_compared": sum(1 for sk, _ in per_index if sk == k),
            "replicas_last_index": {n[:-len(suffix)]: i for n, i in sorted(last_applied.items()) if n.endswith(suffix)},
            "snapshot_jumps": {n[:-len(suffix)]: i for n, i in sorted(jumps.items()) if n.endswith(suffix)},
            "leader_terms": sorted(terms_by_shard.get(k, ())),
            "jobs": sorted(n for n in jobs if S.of_job(n) == k),
            "executions": sum(1 for (n, _) in execs if S.of_job(n) == k),
            "instants_checked": instants.get(k, 0),
            "claims": sum(1 for sk, _ in tokens if sk == k),
            "effects": len(mine), "effects_accepted": sum(1 for e in mine if e["verdict"] == "accepted"),
            "expired_attempts": sum(1 for x in expires if x["shard"] == k),
            "stale_completions_rejected": sum(1 for x in stale if x["shard"] == k),
            "final_converged": final_ok.get(k),
            "commit_gap_max_s": max((g["gap_s"] for g in gaps if g.get("shard") == k), default=None),
        }
    return out


def _dag_graph(spec_text) -> dict | None:
    """{task: (upstream list, trigger rule)} from a committed DAG spec (canonical JSON)."""
    try:
        spec = json.loads(spec_text) if isinstance(spec_text, str) else dict(spec_text or {})
        return {t["name"]: (list(t.get("upstream") or []), t.get("trigger_rule") or "all_success")
                for t in spec.get("tasks") or []}
    except (ValueError, TypeError, KeyError):
        return None


_FAILED = {"FAILED", "TIMED_OUT", "CANCELLED", "LOST", "UPSTREAM_FAILED"}


def _check_dags(A: _Anoms, runs: dict, claims: list, ended: dict, effects: list, effect_ends: list) -> dict:
    """C8, from the log (claims and completions, by index) and from the sink (ground truth, by time):
    - a task of a run is claimed only after its upstreams ended as its rule wants (all_success:
      every upstream SUCCEEDED; all_done: every upstream ended; one_failed: one failed), each of
      those completions at a lower log index;
    - at the sink, no effect of a task arrives before the accepted effect of every upstream that
      had to succeed was over;
    - a task that SUCCEEDED in a run is never claimed again in that run, and at most one of its
      effects is accepted."""
    checked = succeeded = 0
    for idx, ts, dag, t, task, tok in claims:
        run = runs.get((dag, t))
        if run is None:
            A.add("C8", f"{dag}:{task}@{t} claimed (index {idx}) but no run of {dag} started at {t}", ts,
                  job=f"{dag}:{task}", t=t)
            continue
        graph = run["graph"]
        if task not in graph:
            A.add("C8", f"{dag}:{task}@{t} claimed but the run's graph has no task {task}", ts, job=f"{dag}:{task}", t=t)
            continue
        checked += 1
        ups, rule = graph[task]
        before = {u: ended.get((dag, t, u)) for u in ups}
        before = {u: (v if v is not None and v["index"] < idx else None) for u, v in before.items()}
        if rule == "all_done":
            bad = [u for u, v in before.items() if v is None]
        elif rule == "one_failed":
            bad = [] if any(v is not None and v["state"] in _FAILED for v in before.values()) else list(ups)
        else:
            bad = [u for u, v in before.items() if v is None or v["state"] != "SUCCEEDED"]
        if bad:
            A.add("C8", f"{dag}:{task}@{t} claimed at index {idx} (token {tok}) before its upstream(s) "
                  f"{', '.join(bad)} ended as {rule} wants (" +
                  ", ".join(f"{u}: {'-' if v is None else v['state'] + ' @' + str(v['index'])}"
                            for u, v in sorted(before.items())) + ")", ts, job=f"{dag}:{task}", t=t)
        mine = ended.get((dag, t, task))
        if mine is not None and mine["state"] == "SUCCEEDED" and mine["index"] < idx:
            A.add("C8", f"{dag}:{task}@{t} claimed again at index {idx} (token {tok}) after it SUCCEEDED at "
                  f"index {mine['index']}", ts, job=f"{dag}:{task}", t=t)
    for key, v in ended.items():
        if v["state"] == "SUCCEEDED":
            succeeded += 1
    # the sink's view
    accepted_end: dict[tuple, float] = {}
    for r in effect_ends:
        if ":" in str(r.get("job")) and r.get("verdict") == "accepted":
            accepted_end.setdefault((r["job"], r["scheduled_ms"]), r["ts"])
    accepted: dict[tuple, int] = defaultdict(int)
    first_arrival: dict[tuple, dict] = {}
    for r in effects:
        if ":" not in str(r.get("job")):
            continue
        key = (r["job"], r["scheduled_ms"])
        if r["verdict"] == "accepted":
            accepted[key] += 1
        if key not in first_arrival or r["arrived"] < first_arrival[key]["arrived"]:
            first_arrival[key] = r
    for key, n in accepted.items():
        if n > 1:
            A.add("C8", f"{key[0]}@{key[1]}: {n} effects accepted (a task of a run ran twice)", None,
                  job=key[0], t=key[1])
    for (job, t), r in first_arrival.items():
        dag, _, task = job.partition(":")
        run = runs.get((dag, t))
        if run is None or task not in run["graph"]:
            continue
        ups, rule = run["graph"][task]
        if rule != "all_success":
            continue
        for u in ups:
            end = accepted_end.get((f"{dag}:{u}", t))
            if end is None or r["arrived"] < end:
                A.add("C8", f"{job}@{t} reached the sink at {r['arrived']:.3f} (token {r['token']}) before "
                      f"upstream {u}'s effect was over ({'never' if end is None else f'{end:.3f}'})",
                      r["arrived"], job=job, t=t)
    return {"runs": len(runs), "tasks_claimed": checked, "tasks_succeeded": succeeded,
            "verdict": "checked" if runs else "not applicable: no DAG run in the log"}


def _calm_lateness(effects, execs, windows, lease_ms: int) -> dict:
    """Lateness of first attempts scheduled outside every fault window (and a lease after it)."""
    spans = [(a, (b if b is not None else 2 ** 40) + lease_ms / 1000) for _, _, a, b in windows]
    late = []
    for r in effects:
        t = r["scheduled_ms"] / 1000
        ex = execs.get((r["job"], r["scheduled_ms"]))
        if (r.get("attempt") == 1 and r["verdict"] == "accepted" and ex is not None and ex["trigger"] == "schedule"
                and not any(a <= t <= b for a, b in spans)):
            late.append(r["arrived"] * 1000 - r["scheduled_ms"])
    return {"n": len(late), "p50_ms": _pct(late, 50), "p99_ms": _pct(late, 99), "max_ms": max(late) if late else None}


def _commit_gaps(applies: list[dict], windows: list[list]) -> list[dict]:
    """Per closed one-node partition window: the longest time without an entry applied by any
    other node (the window's edges count as entries)."""
    from bisect import bisect_left, bisect_right
    by_node: dict[str, list[float]] = defaultdict(list)
    for r in applies:
        by_node[r["node"]].append(r["ts"])
    for ts in by_node.values():
        ts.sort()
    out = []
    for kind, node, a, b in windows:
        if kind != "partition" or not node or b is None:
            continue
        times = sorted(t for n, ts in by_node.items() if n != node for t in ts[bisect_left(ts, a):bisect_right(ts, b)])
        marks = [a, *times, b]
        gap, at = max(((y - x, y) for x, y in zip(marks, marks[1:])), default=(0.0, b))
        out.append({"node": node, "start": a, "stop": b, "gap_s": round(gap, 2), "at": at})
    return out


def _fault_windows(nemesis: list[dict]) -> list[list]:
    open_: dict[tuple, float] = {}
    out = []
    for r in nemesis:
        key = (r["fault"], r.get("node") or r.get("worker") or "")
        if r.get("phase") == "start":
            open_.setdefault(key, r["ts"])
        elif r.get("phase") == "stop":
            if key in open_:
                out.append([r["fault"], key[1], open_.pop(key), r["ts"]])
            else:   # a stop without target closes every open window of that kind
                for k in [k for k in open_ if k[0] == r["fault"]]:
                    out.append([k[0], k[1], open_.pop(k), r["ts"]])
    for k, t0 in open_.items():
        out.append([k[0], k[1], t0, None])
    return out


def summarize(results: dict, meta: dict) -> str:
    s = results["stats"]
    lat = s["lateness"]
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    lines = [f"scenario {meta.get('scenario')} seed {meta.get('seed')} unsafe={','.join(meta.get('unsafe') or []) or '-'}",
             f"verdict: {'OK' if results['ok'] else ('LIVENESS ONLY' if results['safety_ok'] else 'SAFETY VIOLATION')}",
             f"faults injected: {s['faults']} ({', '.join(s['fault_kinds']) or 'none'}); leader terms {s['leader_terms']}",
             f"log entries {s['entries']}, executions {s['executions']}, instants checked {s['instants_checked']}, "
             f"effects {s['effects']} (accepted {s['effects_accepted']}, duplicate {s['effects_duplicate']}, "
             f"stale {s['effects_stale']})",
             f"stale completions rejected {s['stale_completions_rejected']}, expired attempts {s['expired_attempts']}, "
             f"worker rejects {s['worker_rejects']}, needless expiries (healthy worker, handler succeeded) "
             f"{s['needless_expiries']}",
             f"lateness (first attempts, n={lat['n']}): p50 {fmt(lat['p50_ms'])} ms, p99 {fmt(lat['p99_ms'])} ms, "
             f"max {fmt(lat['max_ms'])} ms; outside fault windows (n={lat['calm']['n']}): "
             f"p50 {fmt(lat['calm']['p50_ms'])} ms, p99 {fmt(lat['calm']['p99_ms'])} ms",
             f"convergence after heals: {_conv_line(s.get('convergence') or [])}; longest commit gap while one node "
             f"was cut off: {_fmt1(s.get('commit_gap_max_s'))} s",
             "anomalies per check: " + ", ".join(f"{c}={n}" for c, n in results["counts"].items()),
             f"C8: {results['c8']['verdict']}: {results['c8']['runs']} DAG runs, {results['c8']['tasks_claimed']} "
             f"task claims checked, {results['c8']['tasks_succeeded']} tasks succeeded"]
    lines += _shard_lines(results)
    for a in results["anomalies"][:40]:
        lines.append(f"  [{a['check']}] {a['what']}")
    return "\n".join(lines) + "\n"


def _shard_lines(results: dict) -> list[str]:
    """Sharded runs: what each shard group's checks covered, and their anomalies."""
    per = results["stats"].get("shards")
    if not per:
        return []
    lines = [f"per shard ({len(per)} groups; C2 C7 C10 and leader terms compared within each group's own log, "
             "tokens per (shard, token); C1 C3-C6 C8 C9 per job, so within its shard):"]
    for k, v in sorted(per.items(), key=lambda kv: int(kv[0])):
        last = ", ".join(f"{n} {i}" for n, i in v["replicas_last_index"].items()) or "-"
        bad = {c: n for c, n in (results.get("per_shard") or {}).get(k, {}).items() if n}
        lines.append(
            f"  shard {k}: C2 {v['indexes_compared']} indexes compared (last applied: {last}); leader terms "
            f"{v['leader_terms']}; {len(v['jobs'])} jobs, {v['executions']} executions, {v['instants_checked']} "
            f"instants checked, {v['claims']} claims, {v['effects']} effects ({v['effects_accepted']} accepted), "
            f"{v['expired_attempts']} expired, {v['stale_completions_rejected']} stale completions rejected; C7 final "
            f"{'converged' if v['final_converged'] else 'NOT converged' if v['final_converged'] is False else '-'}"
            f"; C10 longest gap {_fmt1(v['commit_gap_max_s'])} s; anomalies "
            f"{', '.join(f'{c}={n}' for c, n in bad.items()) or 'none'}")
    return lines


def _conv_line(conv: list[dict]) -> str:
    if not conv:
        return "not checked"
    return ", ".join(f"{c['seconds']:.1f} s" if c["ok"] else "NOT converged" for c in conv)


def _fmt1(v) -> str:
    return "-" if v is None else f"{v:.1f}"
