"""Membership at run time: nodes join with `schedd serve --join`, leave with
`schedctl cluster remove-node`, and a dead node is replaced with `replace-node`; under a load of
per-second jobs, going 3 -> 5 -> 3 nodes (the leader removed too) loses no instant and runs none
twice, judged from the execution history."""

from __future__ import annotations

import json
import threading
import time

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from schedd_client.errors import Conflict, Unavailable
from tests.support.cluster import schedctl, workers_of

pytestmark = pytest.mark.integration

JOBS = 4


def voters(c, at: str | None = None) -> list[str]:
    st = c.status(at)
    return sorted(m.id for m in st.members if m.voter) if st is not None else []


def settled(c, want: list[str]):
    """Every running member reports `want` as the voters, and no change is in flight."""
    st = c.status()
    if st is None or st.membership_change or not st.leader_id:
        return None
    views = {n.id: sorted(m.id for m in n.members if m.voter) for n in st.nodes if n.role != "unreachable"}
    return st if sorted(views) == want and all(v == want for v in views.values()) else None


def join(c, nid: str) -> None:
    c.new_node(nid)
    c.start_node(nid)


def remove(client, nid: str, timeout: float = 60.0) -> None:
    """remove_node, retried while another change holds the gate or leadership moves."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.remove_node(nid)
            return
        except (Conflict, Unavailable):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def assert_exactly_once(client, since_ms: int, until_ms: int) -> int:
    """Every per-second instant of every job in [since, until] has exactly one execution, run
    by one attempt that succeeded."""
    execs = [e for e in client.list_executions(limit=1000 * JOBS, oldest_first=True)
             if since_ms <= e.scheduled_ms <= until_ms]
    by_job: dict[str, list] = {}
    for e in execs:
        by_job.setdefault(e.job, []).append(e)
    assert sorted(by_job) == [f"tick{i}" for i in range(JOBS)]
    for job, rows in by_job.items():
        times = [e.scheduled_ms for e in rows]
        assert len(times) == len(set(times)), f"{job}: an instant has two executions"
        gaps = [b - a for a, b in zip(times, times[1:]) if b - a != 1000]
        assert not gaps, f"{job}: instants missed (gaps of {gaps} ms)"
        assert times[0] - since_ms <= 1000 and until_ms - times[-1] <= 1000, f"{job}: ends missing"
        twice = [e.id for e in rows if len(e.attempts) != 1 or e.state != "SUCCEEDED"]
        assert not twice, f"{job}: executions not run exactly once: {twice}"
    return len(execs)


def test_three_to_five_to_three_under_load_loses_no_instant_and_runs_none_twice(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    c.wait_feature_level()              # the member table is a level-2 kind
    c.start_worker("w1", slots=4 * JOBS)
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to connect")
    client.put_jobs([job_spec(f"tick{i}", schedule="@every 1s", command="true") for i in range(JOBS)])
    wait_until(lambda: len(list(client.list_executions(state="SUCCEEDED", limit=4 * JOBS))) >= 2 * JOBS,
               timeout=60, what="the jobs to run")
    since = int(time.time() * 1000) + 1000

    # both start at once: the leader takes one join at a time, the other retries while refused
    join(c, "n4")
    join(c, "n5")
    wait_until(lambda: settled(c, ["n1", "n2", "n3", "n4", "n5"]), timeout=90, what="n4 and n5 to join and catch up")
    for n in c.nodes.values():
        assert c.node_info(n.id).applied_index > 0
    for nid in ("n4", "n5"):                 # each followed the cluster as a non-voter first
        assert "as a non-voter in" in c.nodes[nid].log.read_text()

    leader = c.wait_leader(timeout=30)
    other = next(n for n in ("n1", "n2", "n3") if n != leader)
    logs = {}
    for nid in (leader, other):
        remove(client, nid)
        c.stop_node(nid)
        logs[nid] = c.nodes.pop(nid).log.read_text()
        want = sorted(set(c.nodes))
        wait_until(lambda: settled(c, want), timeout=60, what=f"the cluster to settle without {nid}")
    assert f"removing the leader {leader}: handing leadership over first" in logs[leader]

    client = c.client(timeout=30)          # the remaining nodes' addresses
    until = int(time.time() * 1000) + 3000
    wait_until(lambda: len([e for e in client.list_executions(state="SUCCEEDED", limit=10 * JOBS)
                            if e.scheduled_ms >= until]) >= JOBS,
               timeout=60, what="the instants after the changes to run")
    assert assert_exactly_once(client, since, until) >= JOBS * ((until - since) // 1000 - 1)


def test_replace_node_swaps_a_killed_node_for_a_new_one(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    c.wait_feature_level()              # the member table is a level-2 kind
    client = c.client(timeout=30)
    client.put_job(job_spec("before", schedule="@every 1h", command="true"))
    victim = next(n for n in c.nodes if n != c.leader())
    c.kill_node(victim)
    new = c.new_node("n4")
    out = schedctl(c, "-o", "json", "cluster", "replace-node", victim, "n4", "--raft", new.raft, "--grpc", new.grpc)
    assert json.loads(out.stdout)["added"]["members"], out.stdout
    assert "step 1/2" in out.stderr and "step 2/2" in out.stderr
    del c.nodes[victim]
    # n4 is not running yet: its add is committed but it cannot catch up, so the change is still
    # in flight and a second one is refused
    spare = c.new_node("n5")
    refused = schedctl(c, "cluster", "add-node", "n5", "--raft", spare.raft, "--grpc", spare.grpc, check=False)
    assert refused.returncode != 0 and "another membership change is in flight (add n4" in refused.stderr, refused
    assert "Membership change in flight: add n4" in schedctl(c, "cluster", "status").stdout
    del c.nodes["n5"]
    c.start_node("n4")
    want = sorted(set(c.nodes))
    st = wait_until(lambda: settled(c, want), timeout=60, what="n4 to join in the dead node's place")
    assert {m.id for m in st.members} == set(want)
    client = c.client(timeout=30)
    client.put_job(job_spec("after", schedule="@every 1h", command="true"))
    wait_until(lambda: c.node_info("n4").applied_index >= c.node_info(c.leader()).commit_index,
               timeout=30, what="n4 to apply what the leader committed")
    text = schedctl(c, "cluster", "status").stdout
    assert "Voters (3): " + ", ".join(want) in text, text
    # the survivors' config files still list the dead node: reported, and the membership wins
    assert f"the config file's peers disagree with the committed membership (which wins): it lists {victim}" in text

    # restarts: n4 (no peers in its config) comes back from its data dir; so does the leader
    for nid in ("n4", c.leader()):
        c.stop_node(nid)
        c.start_node(nid)
        wait_until(lambda: settled(c, want), timeout=60, what=f"{nid} to come back as a member")
    assert "from membership.json in the data dir" in c.nodes["n4"].log.read_text()


class Writer:
    """Puts a job every ~0.1 s from a thread of its own, noting how long each put took and
    any that failed: the cluster must stay writable while a membership change holds the gate."""

    def __init__(self, c) -> None:
        self.client = c.client(timeout=10)
        self.times: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(0.1):
            started = time.monotonic()
            try:
                self.client.put_job(job_spec(f"w{i % 20}", schedule="@every 1h", command="true"))
            except Exception as e:  # noqa: BLE001 - every failure is a finding
                self.errors.append(f"{type(e).__name__}: {e}")
            self.times.append(time.monotonic() - started)
            i += 1

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.client.close()


def test_remove_node_takes_back_an_add_of_a_node_that_never_starts_at_once(cluster_factory):
    """An add of an address where nothing listens (a typo) is committed (3 of
    the 4 voters answer), then waits for a node that never comes; its remove used to be refused
    until that wait gave up (60 s). It is the next single-server change and goes at once."""
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    c.wait_feature_level()              # the member table is a level-2 kind
    ghost = c.new_node("n4")            # its ports are free; it is never started
    del c.nodes["n4"]
    with Writer(c) as writer:
        wait_until(lambda: len(writer.times) >= 5, timeout=30, what="the first writes")
        schedctl(c, "cluster", "add-node", "n4", "--raft", ghost.raft, "--grpc", ghost.grpc)
        assert "Membership change in flight: add n4" in schedctl(c, "cluster", "status").stdout
        before = len(writer.times)
        wait_until(lambda: len(writer.times) >= before + 5, timeout=30, what="writes with 4 voters")
        started = time.monotonic()
        out = schedctl(c, "cluster", "remove-node", "n4")
        took = time.monotonic() - started
        assert "took back the add of n4" in out.stdout, out.stdout
        assert took < 5.0, f"remove-node took {took:.1f} s"
        before = len(writer.times)
        wait_until(lambda: len(writer.times) >= before + 5, timeout=30, what="writes after the remove")
    assert not writer.errors, writer.errors
    assert max(writer.times) < 5.0, f"a write took {max(writer.times):.1f} s"
    st = wait_until(lambda: settled(c, ["n1", "n2", "n3"]), timeout=30, what="3 voters everywhere")
    assert sorted(m.id for m in st.members) == ["n1", "n2", "n3"]
    text = schedctl(c, "cluster", "status").stdout
    assert "Voters (3): n1, n2, n3" in text and "Membership change in flight" not in text, text
