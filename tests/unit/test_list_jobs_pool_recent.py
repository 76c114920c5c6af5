"""ListJobs' pool filter and its `recent` outcomes (the dashboard's last-20 strip): the pool with
the other filters; the last runs of each job of a page, oldest first, from the tables and the
history store together (finished runs leave memory for the store), in one read per job."""

from __future__ import annotations

import threading

from schedd.api.history_reads import recent_runs
from schedd.core import commands as C
from schedd.core.model import Execution
from schedd.core.queries import list_jobs
from schedd.history import HistoryStore
from tests.support.state import Harness


def test_pool_filters_with_team_state_and_paging():
    h = Harness()
    for name, team, pool in (("a1", "red", "gpu"), ("a2", "red", "cpu"), ("a3", "blue", "gpu"), ("a4", "red", "gpu")):
        h.put(name=name, team=team, pool=pool)
    h.apply(C.PAUSE, name="a4")
    page, nxt, total = list_jobs(h.state, pool="gpu", limit=2)
    assert [j.name for j in page] == ["a1", "a3"] and nxt == "a3" and total == 3
    assert [j.name for j in list_jobs(h.state, pool="gpu", after=nxt)[0]] == ["a4"]
    page, _, total = list_jobs(h.state, pool="gpu", team="red", state="active")
    assert [j.name for j in page] == ["a1"] and total == 1
    assert [j.name for j in list_jobs(h.state, pool="gpu", visible={"blue"})[0]] == ["a3"]
    assert list_jobs(h.state, pool="none-such")[2] == 0


def test_recent_runs_merge_the_tables_and_the_store_oldest_first(tmp_path):
    h = Harness()
    h.put(name="j", schedule="@every 1m")
    fired = [h.apply(C.TRIGGER, name="j") for _ in range(3)]
    assert all(r.ok for r in fired)
    in_memory = [ex.scheduled_ms for ex in h.state.execs.values()]
    store = HistoryStore(tmp_path / "h.db", writer_thread=False)
    try:
        older = [Execution(job="j", scheduled_ms=t, state="FAILED", trigger="schedule", created_ms=t, term=1,
                           log_index=1, updated_ms=t)
                 for t in (min(in_memory) - 60_000 * (i + 1) for i in range(25))]
        store.add(older, applied_index=h.index, teams={"j": "default"})
        store.flush()
        got = recent_runs(h.state, threading.RLock(), store, ["j", "absent"], 20)
        assert [t for t, _ in got["j"]] == sorted(t for t, _ in got["j"])
        assert len(got["j"]) == 20 and got["absent"] == []
        assert [s for _, s in got["j"]][-3:] == ["SCHEDULED"] * 3     # the newest: the tables'
        assert {s for _, s in got["j"][:-3]} == {"FAILED"}             # before them: the store's
        assert [t for t, _ in recent_runs(h.state, threading.RLock(), None, ["j"], 2)["j"]] == sorted(in_memory)[-2:]
        assert store.outcomes(["j"], 2)["j"] == [(older[0].scheduled_ms, "FAILED"), (older[1].scheduled_ms, "FAILED")]
    finally:
        store.close(flush=False)
