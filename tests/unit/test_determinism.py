"""Replicas run in different processes, each with its own string hash seed: a state machine that
iterated over a set of strings (or anything else hash-ordered) would apply the same log to
different states there. A replay in the same process cannot see that, so the log built here is
replayed in subprocesses under other PYTHONHASHSEED values and the state digests, the log hashes
and every entry's result are compared."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core.state import SchedulerState
from tests.support.state import T0, Harness, text

REPLAY = """
import hashlib, json, sys
from schedd.core.state import SchedulerState
entries = json.load(open(sys.argv[1]))
state, results = SchedulerState(), hashlib.sha256()
for index, entry in enumerate(entries, 2):
    results.update(json.dumps(state.apply(entry, index).as_dict(), sort_keys=True).encode())
print(json.dumps({"digest": state.state_digest(), "log_hash": state.log_hash_hex(),
                  "results": results.hexdigest()}))
"""


def _workload() -> Harness:
    """A log that touches every part of the state machine: teams, policies, catch-up, quotas,
    retries, cancels, pauses, backfill, batches, a DAG with every trigger rule, SLAs, deletes."""
    h = Harness()
    h.apply(C.QUOTA, key="team:ops", limit=2)
    h.apply(C.QUOTA, key="lane:backfill", limit=3)
    for i, team in enumerate(("ops", "dev", "ops", "data", "ml", "dev")):
        h.put(name=f"job{i}", team=team, schedule="H/2 * * * * *" if i % 2 else f"@every {i + 1}s",
              priority=i - 3, overlap=("allow", "skip", "queue")[i % 3], catchup="all",
              retry={"max_attempts": 3}, sla={"within_seconds": 5})
    dag = {"name": "etl", "schedule": "@every 30s", "tasks": [
        {"name": "extract", "handler": {"shell": {"command": "true"}}},
        {"name": "a", "upstream": ["extract"], "handler": {"shell": {"command": "true"}}},
        {"name": "b", "upstream": ["extract"], "handler": {"shell": {"command": "true"}}},
        {"name": "done", "upstream": ["a", "b"], "trigger_rule": "all_done",
         "handler": {"shell": {"command": "true"}}},
        {"name": "alarm", "upstream": ["a", "b"], "trigger_rule": "one_failed",
         "handler": {"shell": {"command": "true"}}}]}
    h.apply(C.DAG_PUT, spec=D.canonical_dag(dag)[1])
    h.apply(C.PUT_MANY, specs=[_text(f"bulk{i}", "ops" if i % 2 else "dev") for i in range(8)])
    h.apply(C.BACKFILL, name="job0", times=[T0 - 1000 * k for k in range(1, 6)])
    for step in range(40):
        h.now += 700
        h.plan_and_fire(lookahead=1500)
        for (name, t), ex in sorted(h.state.execs.items())[: 12]:
            if ex.state in ("SCHEDULED", "RETRY_WAIT") and (ex.retry_at or 0) <= h.now:
                h.apply(C.START, job=name, scheduled_ms=t, attempt=len(ex.attempts) + 1, worker=f"w{step % 3}")
            elif ex.state == "RUNNING":
                token = ex.attempts[-1].fencing_token
                if (step + t // 1000) % 5 == 0:
                    h.apply(C.EXPIRE, job=name, scheduled_ms=t, token=token, reason="lost")
                elif (step + t // 1000) % 7 == 0:
                    h.apply(C.CANCEL, job=name, scheduled_ms=t)
                else:
                    h.apply(C.FINISH, job=name, scheduled_ms=t, token=token,
                            state="FAILED" if (step + t // 1000) % 3 == 0 else "SUCCEEDED", exit_code=step % 4)
        if step == 10:
            h.apply(C.PAUSE, name="job2")
        if step == 20:
            h.apply(C.RESUME, name="job2", catch_up=True)
        if step == 25:
            h.apply(C.DELETE, name="job5")
            h.apply(C.DAG_RUN, name="etl")
        if step == 30:
            h.apply(C.TRIGGER, name="job1", rid="again")
            h.apply(C.TRIGGER, name="job1", rid="again")            # answered from the dedup table
    return h


def _text(name: str, team: str) -> str:
    return text(name=name, team=team, schedule="@every 5s")


def _replay(path: Path, seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", REPLAY, str(path)], env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def test_the_same_log_gives_the_same_state_under_other_hash_seeds(tmp_path):
    h = _workload()
    assert len(h.state.dag_runs) >= 2 and len(h.state.execs) > 50          # the workload did work
    path = tmp_path / "log.json"
    path.write_text(json.dumps(h.entries))
    here, results = SchedulerState(), hashlib.sha256()
    for index, entry in enumerate(h.entries, 2):
        results.update(json.dumps(here.apply(entry, index).as_dict(), sort_keys=True).encode())
    expected = {"digest": h.state.state_digest(), "log_hash": h.state.log_hash_hex(),
                "results": results.hexdigest()}
    assert here.state_digest() == expected["digest"]
    for seed in ("0", "1", "424242"):
        assert _replay(path, seed) == expected, f"PYTHONHASHSEED={seed}"
