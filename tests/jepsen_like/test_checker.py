"""The checker on synthetic histories: a good one is quiet, and each kind of bad one is caught by
the right check (so the suite can fail)."""

from __future__ import annotations

import copy
import json

from tests.jepsen_like import checker

T0 = 1_800_000_000_000
NODES = ("n1", "n2", "n3")


class Hist:
    def __init__(self) -> None:
        self.recs: list[dict] = []
        self.idx = 0

    def apply(self, entry: dict, res: dict, ts_ms: int) -> int:
        self.idx += 1
        entry = {"v": 1, "rid": "", "by": "n1", "term": 1, **entry}
        for n in NODES:
            self.recs.append({"ts": ts_ms / 1000, "proc": n, "type": "apply", "node": n, "index": self.idx,
                              "hash": f"h{self.idx}", "entry": entry, "res": res})
        return self.idx

    def add(self, type_: str, ts_ms: int, **f) -> None:
        self.recs.append({"ts": ts_ms / 1000, "proc": "x", "type": type_, **f})


def good(n: int = 6, *, delivery: str = "", overlap: str = "") -> tuple[Hist, dict]:
    h = Hist()
    h.apply({"k": "epoch", "now": T0, "rid": "epoch-n1-1"}, {"ok": True, "epoch": 1}, T0)
    spec = {"name": "j", "schedule": "@every 1s", "delivery": delivery, "overlap": overlap}
    h.apply({"k": "put", "now": T0, "rid": "put-j", "spec": json.dumps(spec)}, {"ok": True, "name": "j"}, T0)
    h.add("ok", T0 + 5, op="put", rid="put-j", job="j")
    for i in range(1, n + 1):
        t = T0 + 1000 * i
        h.apply({"k": "fire", "now": t - 1500, "items": [["j", t]]}, {"ok": True, "items": [["j", t, "created"]]}, t - 1490)
        tok = h.apply({"k": "start", "now": t - 1000, "job": "j", "scheduled_ms": t, "attempt": 1, "worker": "w1",
                       "rid": f"start-j@{t}#1"}, {"ok": True, "token": 0}, t - 990)
        h.add("push", t - 985, node="n1", worker="w1", job="j", scheduled_ms=t, token=tok, attempt=1, applied=tok)
        h.add("w_recv", t - 980, worker="w1", job="j", scheduled_ms=t, token=tok, attempt=1, term=1)
        h.add("h_start", t + 1, worker="w1", job="j", scheduled_ms=t, token=tok, attempt=1)
        h.add("effect", t + 5, job="j", scheduled_ms=t, token=tok, attempt=1, verdict="accepted", arrived=(t + 5) / 1000)
        h.add("effect_end", t + 6, job="j", scheduled_ms=t, token=tok, verdict="accepted")
        h.add("h_end", t + 8, worker="w1", job="j", scheduled_ms=t, token=tok, attempt=1, state="SUCCEEDED")
        h.apply({"k": "finish", "now": t + 10, "job": "j", "scheduled_ms": t, "token": tok, "by": "w1",
                 "state": "SUCCEEDED", "rid": f"finish-{tok}"}, {"ok": True, "state": "SUCCEEDED"}, t + 12)
        h.add("w_ack", t + 15, worker="w1", token=tok, outcome="committed")
    end = T0 + 1000 * n + 500
    h.add("final", end + 1000, nodes={x: {"applied": h.idx, "hash": f"h{h.idx}"} for x in NODES}, converged=True)
    return h, {"lease_ms": 3000, "window_end": end / 1000, "scenario": "synthetic", "seed": 0}


def run(h: Hist, meta: dict) -> dict:
    return checker.check(checker.load(json.dumps(r) for r in h.recs), meta)


def checks(res: dict) -> set[str]:
    return {a["check"] for a in res["anomalies"]}


def test_good_history_is_quiet():
    h, meta = good()
    res = run(h, meta)
    assert res["ok"], res["anomalies"]
    assert res["stats"]["instants_checked"] == 6
    assert res["stats"]["lateness"]["n"] == 6 and res["stats"]["lateness"]["p99_ms"] == 5


def test_a_put_inside_a_group_entry_is_read_like_one_of_its_own():
    """Group commit: PutJob entries proposed together share one GROUP entry; the checker reads
    its parts (a job it missed would make every one of its instants look unexplained)."""
    h, meta = good()
    for r in h.recs:
        if r["type"] == "apply" and r["entry"]["k"] == "put":
            put, res = r["entry"], r["res"]
            r["entry"] = {"v": 1, "k": "group", "rid": "", "now": 0, "term": 1, "by": "",
                          "entries": [json.dumps(put)]}
            r["res"] = {"ok": True, "code": "ok", "parts": [res]}
    res = run(h, meta)
    assert res["ok"], res["anomalies"]
    assert res["stats"]["instants_checked"] == 6


def test_replica_divergence_is_c2():
    h, meta = good()
    r = next(r for r in h.recs if r["type"] == "apply" and r["node"] == "n3" and r["index"] == 5)
    r["hash"] = "other"
    assert checks(run(h, meta)) == {"C2"}


def test_second_intent_for_one_instant_is_c2():
    h, meta = good()
    t = T0 + 2000
    h.apply({"k": "fire", "now": t, "items": [["j", t]]}, {"ok": True, "items": [["j", t, "created"]]}, t + 100)
    h.recs.append(h.recs.pop(next(i for i, r in enumerate(h.recs) if r["type"] == "final")))
    for v in h.recs[-1]["nodes"].values():
        v.update(applied=h.idx, hash=f"h{h.idx}")
    assert "C2" in checks(run(h, meta))


def test_one_request_two_executions_is_c2():
    h, meta = good()
    for k in range(2):
        h.apply({"k": "trigger", "now": T0 + 3000 + k, "rid": f"trig#nodedup{h.idx + 1}", "name": "j"},
                {"ok": True, "name": "j", "scheduled_ms": T0 + 3000 + k}, T0 + 3000 + k)
    res = run(h, meta)
    assert any("created 2 executions" in a["what"] for a in res["anomalies"])


def test_missing_instant_is_c1():
    h, meta = good()
    t = T0 + 3000
    drop = {r["index"] for r in h.recs if r["type"] == "apply" and r["entry"].get("scheduled_ms") == t} | {
        r["index"] for r in h.recs if r["type"] == "apply" and r["entry"].get("k") == "fire" and r["entry"]["items"][0][1] == t}
    h.recs = [r for r in h.recs if not (r["type"] == "apply" and r["index"] in drop)
              and not (r.get("scheduled_ms") == t)]
    tokens = {r["entry"].get("token") for r in h.recs if r["type"] == "apply"}
    h.recs = [r for r in h.recs if not (r["type"] == "w_ack" and r["token"] not in tokens)]
    assert checks(run(h, meta)) == {"C1"}


def test_pause_explains_a_gap():
    h, meta = good()
    t = T0 + 3000
    h.recs = [r for r in h.recs if not (r.get("scheduled_ms") == t or (r["type"] == "apply" and (
        r["entry"].get("scheduled_ms") == t or (r["entry"].get("k") == "fire" and r["entry"]["items"][0][1] == t))))]
    tokens = {r["entry"].get("token") for r in h.recs if r["type"] == "apply"}
    h.recs = [r for r in h.recs if not (r["type"] == "w_ack" and r["token"] not in tokens)]
    h.apply({"k": "pause", "now": t - 500, "name": "j"}, {"ok": True}, t - 400)
    h.apply({"k": "resume", "now": t + 400, "name": "j"}, {"ok": True}, t + 400)
    res = run(h, meta)
    assert "C1" not in checks(res), res["anomalies"]


def _gap_at(t: int) -> tuple[Hist, dict]:
    h, meta = good()
    h.recs = [r for r in h.recs if not (r.get("scheduled_ms") == t or (r["type"] == "apply" and (
        r["entry"].get("scheduled_ms") == t or (r["entry"].get("k") == "fire" and r["entry"]["items"][0][1] == t))))]
    tokens = {r["entry"].get("token") for r in h.recs if r["type"] == "apply"}
    h.recs = [r for r in h.recs if not (r["type"] == "w_ack" and r["token"] not in tokens)]
    return h, meta


def test_a_pause_stamped_by_a_skewed_leader_explains_a_gap_only_under_a_clock_fault():
    """S09: the pause's `now` is its leader's clock, 2.5 s fast here, so the gap it caused
    starts before the stamp. Without an injected clock offset the same gap is a miss."""
    t = T0 + 3000
    for offset, flagged in ((0, True), (2500, False)):
        h, meta = _gap_at(t)
        if offset:
            h.add("nemesis", T0, fault="clock", phase="start", node="n1", offset_ms=offset)
        h.apply({"k": "pause", "now": t + 2000, "name": "j"}, {"ok": True}, t - 400)
        h.apply({"k": "resume", "now": t + 2400, "name": "j"}, {"ok": True}, t + 400)
        assert ("C1" in checks(run(h, meta))) is flagged, offset


def test_runs_recorded_before_a_delete_need_not_end_whatever_the_stamps():
    """S09: the fire was recorded by a leader whose clock ran fast, the delete after it by a
    slower one: by stamps the runs came after the delete; by log order they went with it."""
    h, meta = good()
    t = T0 + 6000
    h.recs = [r for r in h.recs if not (r["type"] == "apply" and r["entry"].get("k") == "finish" and r["entry"]["scheduled_ms"] == t)]
    h.recs = [r for r in h.recs if not (r["type"] == "w_ack" and r["token"] == max(x["token"] for x in h.recs if x["type"] == "w_ack"))]
    assert checks(run(copy.deepcopy(h), meta)) == {"C1"}
    h.apply({"k": "delete", "now": t - 3000, "name": "j"}, {"ok": True}, t + 100)
    assert "C1" not in checks(run(h, meta))


def test_stale_completion_accepted_is_c4():
    h, meta = good()
    t = T0 + 4000
    fin = [r for r in h.recs if r["type"] == "apply" and r["entry"].get("k") == "finish" and r["entry"]["scheduled_ms"] == t]
    for r in fin:
        r["entry"]["by"] = "w2"          # the zombie's result overwrote the current attempt's
    assert checks(run(h, meta)) == {"C4"}


def test_stale_completion_rejected_is_fine_and_counted():
    h, meta = good()
    t = T0 + 4000
    h.apply({"k": "finish", "now": t + 4000, "job": "j", "scheduled_ms": t, "token": 1, "by": "w2", "state": "SUCCEEDED"},
            {"ok": False, "code": "stale"}, t + 4000)
    final = next(r for r in h.recs if r["type"] == "final")
    for v in final["nodes"].values():
        v.update(applied=h.idx, hash=f"h{h.idx}")
    res = run(h, meta)
    assert res["ok"], res["anomalies"]
    assert res["stats"]["stale_completions_rejected"] == 1


def test_expiry_without_lease_grace_is_c4():
    h, meta = good()
    t = T0 + 4000
    start = next(r for r in h.recs if r["type"] == "apply" and r["entry"].get("k") == "start" and r["entry"]["scheduled_ms"] == t)
    h.apply({"k": "epoch", "now": t, "term": 2, "rid": "epoch-n2-2"}, {"ok": True}, t)
    h.apply({"k": "expire", "now": t + 300, "term": 2, "job": "j", "scheduled_ms": t, "token": start["index"],
             "outcome": "LOST"}, {"ok": True, "state": "RETRY_WAIT"}, t + 300)
    assert "C4" in checks(run(h, meta))


def never_started_expiry(h: Hist, t: int) -> int:
    """A new leader (term 2) expires the claim of instant t as never started, 300 ms after it leads."""
    start = next(r for r in h.recs if r["type"] == "apply" and r["entry"].get("k") == "start"
                 and r["entry"]["scheduled_ms"] == t)
    h.apply({"k": "epoch", "now": t, "term": 2, "rid": "epoch-n2-2"}, {"ok": True}, t)
    h.apply({"k": "expire", "now": t + 300, "term": 2, "job": "j", "scheduled_ms": t, "token": start["index"],
             "outcome": "LOST", "never_started": True}, {"ok": True, "state": "SCHEDULED"}, t + 300)
    return start["index"]


def test_a_never_started_expiry_needs_no_lease_but_its_handler_must_not_have_started():
    h, meta = good()
    t = T0 + 4000
    tok = never_started_expiry(h, t)
    h.recs = [r for r in h.recs if not (r.get("token") == tok and r["type"] != "apply")]   # never pushed
    assert "C4" not in checks(run(h, meta))
    h2, meta2 = good()
    never_started_expiry(h2, t)                    # but this one was pushed and started
    res = run(h2, meta2)
    assert any(a["check"] == "C4" and "expired as never started, but w1 started" in a["what"]
               for a in res["anomalies"]), res["anomalies"]


def test_push_before_commit_and_unclaimed_effect_are_c6():
    h, meta = good()
    h.add("push", T0 + 2500, node="n1", worker="w1", job="j", scheduled_ms=T0 + 3000, token=999, attempt=1, applied=20)
    h.add("effect", T0 + 3001, job="j", scheduled_ms=T0 + 3000, token=999, attempt=1, verdict="duplicate",
          arrived=(T0 + 3001) / 1000)
    res = run(h, meta)
    assert checks(res) == {"C6"} and len(res["counts"]) and res["counts"]["C6"] == 2


def test_push_of_a_claim_not_yet_applied_is_c6():
    h, meta = good()
    p = next(r for r in h.recs if r["type"] == "push")
    p["applied"] = p["token"] - 1
    assert checks(run(h, meta)) == {"C6"}


def test_at_most_once_started_twice_is_c3():
    h, meta = good(delivery="at_most_once")
    s = next(r for r in h.recs if r["type"] == "h_start")
    h.recs.append({**s, "ts": s["ts"] + 5, "token": s["token"] + 100, "worker": "w2"})
    assert "C3" in checks(run(h, meta))


def test_acknowledged_write_lost_is_c5():
    h, meta = good()
    h.add("ok", T0 + 100, op="trigger", rid="lost-rid", job="j")
    assert checks(run(h, meta)) == {"C5"}


def test_no_convergence_is_c7():
    h, meta = good()
    final = next(r for r in h.recs if r["type"] == "final")
    final["nodes"]["n2"] = {"applied": h.idx - 1, "hash": "x"}
    final["converged"] = False
    assert checks(run(h, meta)) == {"C7"}


def test_history_stores_that_differ_after_healing_are_c7():
    h, meta = good()
    final = next(r for r in h.recs if r["type"] == "final")
    for n, v in final["nodes"].items():
        v.update(history="a" * 16, history_rows=40, history_index=h.idx, history_gap="")
    assert checks(run(h, meta)) == set()
    final["nodes"]["n3"].update(history="b" * 16, history_rows=39)
    res = run(h, meta)
    assert checks(res) == {"C7"} and "history stores differ" in res["anomalies"][0]["what"]


def test_fired_early_is_c9():
    h, meta = good()
    e = [r for r in h.recs if r["type"] == "effect"][2]
    e["arrived"] = e["scheduled_ms"] / 1000 - 0.8
    res = run(h, meta)
    assert checks(res) == {"C9"} and not res["safety_ok"]


def test_unfinished_execution_is_liveness_only():
    h, meta = good()
    t = T0 + 6000
    h.recs = [r for r in h.recs if not (r["type"] == "apply" and r["entry"].get("k") == "finish" and r["entry"]["scheduled_ms"] == t)]
    h.recs = [r for r in h.recs if not (r["type"] == "w_ack" and r["token"] == max(x["token"] for x in h.recs if x["type"] == "w_ack"))]
    res = run(copy.deepcopy(h), meta)
    assert checks(res) == {"C1"} and res["safety_ok"] and not res["ok"]


def test_overlap_forbidden_is_c3_but_a_fenced_zombie_is_not():
    h, meta = good(overlap="skip")
    ends = [r for r in h.recs if r["type"] == "effect_end"]
    ends[1]["ts"] += 1.5                 # instant 2 still runs when instant 3 starts
    res = run(h, meta)
    assert checks(res) == {"C3"}
    h, meta = good(overlap="skip")
    e = [r for r in h.recs if r["type"] == "effect"][1]
    h.add("effect", e["scheduled_ms"] + 900, job="j", scheduled_ms=e["scheduled_ms"] + 10, token=777, attempt=1,
          verdict="accepted", arrived=(e["scheduled_ms"] + 900) / 1000)   # not a live attempt: C6, not C3
    assert "C3" not in checks(run(h, meta))


def test_acknowledged_write_overwritten_after_a_crash_is_c5_and_c2():
    h, meta = good()
    i = h.apply({"k": "trigger", "now": T0 + 100, "rid": "acked", "name": "j"},
                {"ok": True, "name": "j", "scheduled_ms": T0 + 100}, T0 + 100)
    h.add("ok", T0 + 101, op="trigger", rid="acked", job="j")
    h.add("ok", T0 + 101, op="trigger", rid="acked", job="j")
    # after a whole-cluster crash the index holds another entry on every node
    for n in NODES:
        h.recs.append({"ts": (T0 + 9000) / 1000, "proc": n, "type": "apply", "node": n, "index": i, "hash": "new",
                       "entry": {"v": 1, "k": "noop", "rid": "", "now": T0 + 9000, "term": 2}, "res": {"ok": True}})
    assert {"C5", "C2"} <= checks(run(h, meta))


def test_replicas_with_different_apply_results_is_c2():
    h, meta = good()
    r = next(r for r in h.recs if r["type"] == "apply" and r["node"] == "n2" and r["entry"].get("k") == "finish")
    r["res"] = {"ok": False, "code": "stale"}
    res = run(h, meta)
    assert "C2" in checks(res) and any("apply result" in a["what"] for a in res["anomalies"])


def _left_pending(t: int) -> tuple[Hist, dict]:
    """A good history whose run at `t` never finishes in the log."""
    h, meta = good()
    h.recs = [r for r in h.recs if not (r["type"] == "apply" and r["entry"].get("k") == "finish" and r["entry"]["scheduled_ms"] == t)]
    last_tok = max(x["token"] for x in h.recs if x["type"] == "w_ack")
    h.recs = [r for r in h.recs if not (r["type"] == "w_ack" and r["token"] == last_tok)]
    return h, meta


def test_final_view_settles_what_the_log_leaves_pending():
    t = T0 + 6000
    h, meta = _left_pending(t)
    h.add("final_execs", T0 + 9000, execs=[["j", t, "SKIPPED", "paused"]])
    assert run(h, meta)["ok"]


def test_a_terminal_state_pruned_from_a_later_final_view_still_counts():
    """A soak takes a final view after every round; retention prunes old executions from later
    views. An execution seen ended in an earlier view has ended (found by the 2 h soak: four
    paused-and-SKIPPED instants reported as 'never ended (still SCHEDULED)')."""
    t = T0 + 6000
    h, meta = _left_pending(t)
    h.add("final_execs", T0 + 9000, execs=[["j", t, "SKIPPED", "paused"]])
    h.add("final_execs", T0 + 9500, execs=[])
    assert run(h, meta)["ok"]


# ------------------------------------------------------------------ C8: DAG order

DAG_SPEC = {"name": "chain", "team": "default", "schedule": "@every 3s", "timezone": "UTC",
            "tasks": [{"name": "a", "handler": {}}, {"name": "b", "handler": {}, "upstream": ["a"]},
                      {"name": "c", "handler": {}, "upstream": ["b"]}]}


def _dag_task(h: Hist, task: str, t: int, at: int, *, worker: str = "w1", state: str = "SUCCEEDED",
              verdict: str = "accepted", finish: bool = True) -> int:
    """One attempt of chain:<task> for the run at logical time t: claim, effect, completion."""
    job = f"chain:{task}"
    tok = h.apply({"k": "start", "now": at, "job": job, "scheduled_ms": t, "attempt": 1, "worker": worker,
                   "rid": f"start-{job}@{t}@{at}"}, {"ok": True, "token": 0}, at)
    h.add("h_start", at + 2, worker=worker, job=job, scheduled_ms=t, token=tok, attempt=1)
    h.add("effect", at + 3, job=job, scheduled_ms=t, token=tok, attempt=1, verdict=verdict, arrived=(at + 3) / 1000)
    h.add("effect_end", at + 4, job=job, scheduled_ms=t, token=tok, verdict=verdict)
    h.add("h_end", at + 5, worker=worker, job=job, scheduled_ms=t, token=tok, attempt=1, state=state)
    if finish:
        h.apply({"k": "finish", "now": at + 6, "job": job, "scheduled_ms": t, "token": tok, "by": worker,
                 "state": state, "rid": f"finish-{tok}"}, {"ok": True, "state": state}, at + 6)
    return tok


def dag_good(runs: int = 2) -> tuple[Hist, dict, list]:
    h = Hist()
    h.apply({"k": "epoch", "now": T0, "rid": "epoch-n1-1"}, {"ok": True, "epoch": 1}, T0)
    h.apply({"k": "dag_put", "now": T0, "rid": "put-chain", "name": "chain", "spec": json.dumps(DAG_SPEC)},
            {"ok": True, "name": "chain"}, T0)
    h.add("ok", T0 + 5, op="put_dag", rid="put-chain", dag="chain")
    times = []
    for i in range(1, runs + 1):
        t = T0 + 3000 * i
        times.append(t)
        h.apply({"k": "fire", "now": t - 1500, "items": [["chain:", t]]},
                {"ok": True, "items": [["chain:", t, "created"]]}, t - 1490)
        for j, task in enumerate("abc"):
            _dag_task(h, task, t, t + 10 + 100 * j)
    end = T0 + 3000 * runs + 1000
    return h, {"lease_ms": 3000, "window_end": end / 1000, "scenario": "synthetic", "seed": 0}, times


def _finalize(h: Hist) -> None:
    h.add("final", max(r["ts"] for r in h.recs) * 1000 + 1000,
          nodes={x: {"applied": h.idx, "hash": f"h{h.idx}"} for x in NODES}, converged=True)


def test_dag_good_history_is_quiet_and_checked():
    h, meta, _ = dag_good()
    _finalize(h)
    res = run(h, meta)
    assert res["ok"], res["anomalies"]
    assert res["c8"]["verdict"] == "checked"
    assert res["stats"]["dag_runs"] == 2 and res["stats"]["dag_tasks_claimed"] == 6
    assert res["stats"]["dag_tasks_succeeded"] == 6


def test_dag_retry_of_a_lost_upstream_is_fine():
    """a's first attempt is lost (expired), its retry succeeds; b runs after: no C8."""
    h, meta, times = dag_good(1)
    t = times[-1] + 3000
    h.apply({"k": "fire", "now": t - 1500, "items": [["chain:", t]]}, {"ok": True, "items": [["chain:", t, "created"]]}, t - 1490)
    tok = _dag_task(h, "a", t, t + 10, finish=False)
    h.apply({"k": "expire", "now": t + 4000, "job": "chain:a", "scheduled_ms": t, "token": tok, "rid": f"exp-{tok}"},
            {"ok": True, "state": "RETRY_WAIT"}, t + 4000)
    _dag_task(h, "a", t, t + 5100, worker="w2", verdict="duplicate")
    _dag_task(h, "b", t, t + 5200)
    _dag_task(h, "c", t, t + 5300)
    meta["window_end"] = (t + 6000) / 1000
    _finalize(h)
    res = run(h, meta)
    assert res["ok"], res["anomalies"]


def test_dag_task_claimed_before_its_upstream_succeeded_is_c8():
    h, meta, times = dag_good(1)
    t = times[-1] + 3000
    h.apply({"k": "fire", "now": t - 1500, "items": [["chain:", t]]}, {"ok": True, "items": [["chain:", t, "created"]]}, t - 1490)
    _dag_task(h, "a", t, t + 10, finish=False)       # a still running ...
    _dag_task(h, "b", t, t + 50)                     # ... and b already claimed and run
    meta["window_end"] = (t + 1000) / 1000
    _finalize(h)
    res = run(h, meta)
    assert checks(res) == {"C8"}, res["anomalies"]
    whats = " ".join(a["what"] for a in res["anomalies"])
    assert "claimed at index" in whats and "(a: -)" in whats
    assert not res["safety_ok"]


def test_dag_task_run_after_a_failed_upstream_is_c8():
    h, meta, times = dag_good(1)
    t = times[-1] + 3000
    h.apply({"k": "fire", "now": t - 1500, "items": [["chain:", t]]}, {"ok": True, "items": [["chain:", t, "created"]]}, t - 1490)
    _dag_task(h, "a", t, t + 10, state="FAILED")
    _dag_task(h, "b", t, t + 200)
    meta["window_end"] = (t + 1000) / 1000
    _finalize(h)
    res = run(h, meta)
    assert checks(res) == {"C8"} and any("a: FAILED" in a["what"] for a in res["anomalies"]), res["anomalies"]


def test_dag_succeeded_task_run_again_is_c8():
    h, meta, times = dag_good(1)
    t = times[0]
    _dag_task(h, "b", t, t + 1000, worker="w2", verdict="duplicate")   # b succeeded at t+116; rerun
    _finalize(h)
    res = run(h, meta)
    assert checks(res) == {"C8"} and "claimed again" in res["anomalies"][0]["what"], res["anomalies"]


def test_dag_two_accepted_effects_is_c8():
    h, meta, times = dag_good(1)
    t = times[0]
    h.add("effect", t + 500, job="chain:c", scheduled_ms=t, token=999, attempt=2, verdict="accepted",
          arrived=(t + 500) / 1000)
    _finalize(h)
    res = run(h, meta)
    assert "C8" in checks(res) and any("2 effects accepted" in a["what"] for a in res["anomalies"])


def test_dag_effect_before_upstream_effect_over_is_c8():
    """The log is in order but the sink saw b's effect while a's was still being made."""
    h, meta, times = dag_good(1)
    t = times[0]
    eff = next(r for r in h.recs if r["type"] == "effect" and r["job"] == "chain:b")
    eff["arrived"] = (t + 12.5) / 1000          # a's effect ended at t+14
    _finalize(h)
    res = run(h, meta)
    assert checks(res) == {"C8"} and "before upstream a's effect was over" in res["anomalies"][0]["what"]


# ---------------------------------------------------------------- convergence after each heal, C10

def _converge(h: Hist, ts_ms: int, *, ok: bool, diverged: bool = False, stuck_at: int | None = None) -> None:
    nodes = {n: {"applied": h.idx, "commit": h.idx, "role": "follower", "term": 2, "digest_index": h.idx,
                 "digest": "d" * 16} for n in NODES}
    if stuck_at is not None:
        nodes["n1"].update(applied=stuck_at, digest_index=stuck_at, digest="e" * 16)
    if diverged:
        nodes["n2"]["digest"] = "f" * 16
    h.add("converge", ts_ms, what="heal", heal_ts=(ts_ms - 20_000) / 1000, deadline_s=20.0, target=h.idx,
          ok=ok, diverged=diverged, seconds=1.5 if ok else None, samples=3, nodes=nodes)


def test_convergence_after_each_heal_is_counted_and_timed():
    h, meta = good()
    _converge(h, T0 + 3000, ok=True)
    res = run(h, meta)
    assert res["ok"], res["anomalies"]
    assert res["stats"]["converge_max_s"] == 1.5 and res["stats"]["convergence"][0]["ok"]


def test_a_replica_stuck_after_a_heal_is_c7_naming_it():
    h, meta = good()
    _converge(h, T0 + 3000, ok=False, stuck_at=h.idx - 40)
    res = run(h, meta)
    assert checks(res) == {"C7"} and not res["safety_ok"]
    a = res["anomalies"][0]
    assert a["stuck"] == ["n1"] and "did not converge within 20 s" in a["what"]


def test_different_digests_at_the_same_index_is_c7_divergence():
    h, meta = good()
    _converge(h, T0 + 3000, ok=False, diverged=True)
    res = run(h, meta)
    assert checks(res) == {"C7"} and res["anomalies"][0]["diverged"]


def test_majority_that_stops_committing_while_one_node_is_cut_is_c10():
    h, meta = good(n=12)
    # n1 cut off from 2.2 s to 11.9 s; the other nodes' entries stop from 3 s to 12 s
    h.add("nemesis", T0 + 2200, fault="partition", phase="start", node="n1", how="both")
    h.add("nemesis", T0 + 11_900, fault="partition", phase="stop")
    quiet = [r for r in h.recs if r["type"] == "apply" and r["node"] != "n1" and T0 + 3000 < r["ts"] * 1000 < T0 + 12_000]
    for r in quiet:
        r["node"] = "n1"                      # only the cut node "applied" them: the majority was idle
    res = run(h, meta)
    assert "C10" in checks(res) and res["stats"]["commit_gap_max_s"] > 8
    assert all(a["check"] not in checker.SAFETY for a in res["anomalies"] if a["check"] == "C10")


def test_majority_committing_through_a_cut_is_quiet():
    h, meta = good(n=12)
    h.add("nemesis", T0 + 2200, fault="partition", phase="start", node="n1", how="both")
    h.add("nemesis", T0 + 11_900, fault="partition", phase="stop")
    res = run(h, meta)
    assert "C10" not in checks(res) and res["stats"]["commit_gap_max_s"] < 2


# ------------------------------------------------------------------ sharded runs (meta "shards")

def _job_in(shard: int, shards: int = 2) -> str:
    from schedd.core.shards import shard_of
    return next(f"j{i}" for i in range(100) if shard_of(f"j{i}", shards) == shard)


def _renamed(rec: dict, name: str, worker: str) -> dict:
    """A record of good()'s job "j" and worker w1 about job `name` and `worker` instead."""
    text = json.dumps(rec)
    text = text.replace('"j"', f'"{name}"').replace('\\"j\\"', f'\\"{name}\\"').replace("-j", f"-{name}")
    return json.loads(text.replace('"w1"', f'"{worker}"'))


def good_sharded(n: int = 6) -> tuple[Hist, dict]:
    """Two shard groups, each with good()'s history for its own job and worker (w1, w2): the same
    log indexes, and so the same fencing tokens (a claim's index), in both; node records say
    their shard."""
    out = Hist()
    finals = {}
    meta = {}
    for k in (0, 1):
        h, meta = good(n)
        name = _job_in(k)
        for r in h.recs:
            r = _renamed(r, name, f"w{k + 1}")
            if r["type"] == "final":
                finals[str(k)] = r["nodes"]
                continue
            if r["type"] in ("apply", "push", "role"):
                r["shard"] = k
                r["hash"] = f"s{k}-{r['hash']}" if "hash" in r else None
                if r["hash"] is None:
                    del r["hash"]
            out.recs.append(r)
        for v in finals[str(k)].values():
            v["hash"] = f"s{k}-{v['hash']}"
    out.add("final", T0 + 1000 * n + 1500, shards=finals, converged=True)
    return out, {**meta, "shards": 2}


def test_two_shards_with_equal_indexes_and_tokens_are_no_divergence():
    h, meta = good_sharded()
    res = run(h, meta)
    assert res["ok"], res["anomalies"]
    per = res["stats"]["shards"]
    assert set(per) == {"0", "1"}
    for k in ("0", "1"):
        assert per[k]["entries"] == per[k]["indexes_compared"] > 0
        assert per[k]["instants_checked"] == 6 and per[k]["claims"] == 6 and per[k]["effects_accepted"] == 6
        assert per[k]["replicas_last_index"] == {n: per[k]["entries"] for n in NODES}
        assert per[k]["final_converged"] is True and per[k]["jobs"] == [_job_in(int(k))]
    assert res["per_shard"] == {"0": dict.fromkeys(checker.CHECKS, 0), "1": dict.fromkeys(checker.CHECKS, 0)}
    text = checker.summarize(res, meta)
    assert "shard 0: C2" in text and "shard 1: C2" in text


def test_the_same_records_without_their_shard_would_be_a_divergence():
    """The grouping is what keeps them apart: the two logs' records read as one log clash."""
    h, meta = good_sharded()
    for r in h.recs:
        r.pop("shard", None)
    assert "C2" in checks(run(h, {**meta, "shards": 1}))


def test_divergence_inside_one_shard_is_c2_of_that_shard_only():
    h, meta = good_sharded()
    r = next(r for r in h.recs if r["type"] == "apply" and r["node"] == "n3" and r["index"] == 5 and r["shard"] == 1)
    r["hash"] = "other"
    res = run(h, meta)
    c2 = [a for a in res["anomalies"] if a["check"] == "C2"]
    assert len(c2) == 1 and c2[0]["shard"] == 1 and "index 5 of shard 1" in c2[0]["what"]
    assert res["per_shard"]["1"]["C2"] == 1 and res["per_shard"]["0"]["C2"] == 0


def test_a_workers_ack_is_matched_to_the_shard_it_got_the_token_from():
    """Shard 0's worker w1 is told its result of token T committed, but shard 0's log has no
    completion of T: C5, although shard 1 (served by w2) committed one with the same token."""
    h, meta = good_sharded()
    ack = next(r for r in h.recs if r["type"] == "w_ack" and r["worker"] == "w1")
    tok = ack["token"]
    h.recs = [r for r in h.recs if not (r["type"] == "apply" and r["shard"] == 0 and r["entry"]["k"] == "finish"
                                        and r["entry"]["token"] == tok)]
    res = run(h, meta)
    c5 = [a for a in res["anomalies"] if a["check"] == "C5"]
    assert len(c5) == 1 and f"token {tok}" in c5[0]["what"]


def test_final_views_are_compared_per_shard():
    h, meta = good_sharded()
    final = next(r for r in h.recs if r["type"] == "final")
    final["shards"]["0"]["n2"]["hash"] = "elsewhere"
    res = run(h, meta)
    c7 = [a for a in res["anomalies"] if a["check"] == "C7"]
    assert len(c7) == 1 and c7[0]["shard"] == 0 and "of shard 0" in c7[0]["what"]
    assert res["stats"]["shards"]["0"]["final_converged"] is False
    assert res["stats"]["shards"]["1"]["final_converged"] is True


def test_leader_terms_are_counted_per_shard():
    h, meta = good_sharded()
    for k, terms in ((0, (1, 2)), (1, (1, 2, 3))):
        for t in terms:
            h.add("role", T0 + 100 * t, node="n1", old=0, new=2, term=t, shard=k)
    h.add("nemesis", T0 + 200, fault="kill", phase="start", node="n1", led_shards=[0, 1])
    h.add("nemesis", T0 + 300, fault="kill", phase="stop", node="n1")
    res = run(h, meta)
    assert res["stats"]["leader_terms"] == {"0": [1, 2], "1": [1, 2, 3]}
    assert res["stats"]["leader_changes"] == 5 and res["stats"]["faults_on_multi_leader"] == 1
    assert res["stats"]["shards"]["1"]["leader_terms"] == [1, 2, 3]


def test_a_shard_whose_majority_stops_while_another_commits_is_c10_of_that_shard():
    h, meta = good_sharded(n=12)
    h.add("nemesis", T0 + 2200, fault="partition", phase="start", node="n1", how="both")
    h.add("nemesis", T0 + 11_900, fault="partition", phase="stop")
    for r in h.recs:
        if (r["type"] == "apply" and r["shard"] == 1 and r["node"] != "n1"
                and T0 + 3000 < r["ts"] * 1000 < T0 + 12_000):
            r["node"] = "n1"
    res = run(h, meta)
    c10 = [a for a in res["anomalies"] if a["check"] == "C10"]
    assert c10 and {a["shard"] for a in c10} == {1} and "of shard 1" in c10[0]["what"]


def test_a_jobs_entry_in_another_shards_log_is_c2():
    """A job's rows live in its own shard's log only: a put routed to the wrong group is caught."""
    h, meta = good_sharded()
    put = next(r for r in h.recs if r["type"] == "apply" and r["shard"] == 1 and r["entry"]["k"] == "put")
    j0 = _job_in(0)
    extra = copy.deepcopy(put)
    extra["entry"]["spec"] = json.dumps({"name": j0, "schedule": "@every 1s"})
    extra["entry"]["rid"], extra["res"] = "put-misrouted", {"ok": True, "name": j0}
    extra["index"] = 999
    h.recs += [{**extra, "node": n} for n in NODES]
    res = run(h, meta)
    c2 = [a for a in res["anomalies"] if a["check"] == "C2"]
    assert len(c2) == 1 and c2[0]["shard"] == 1 and f"{j0} (shard 0) has an entry in shard 1's log" in c2[0]["what"]
