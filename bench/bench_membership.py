"""How long membership changes take under load: from the command to the new node voting.

A 3-node cluster holds --jobs hourly jobs (state a new node must receive: with compaction at
--compaction entries, it arrives as a snapshot) and --ticking per-second jobs run by one worker
(the load). Then:

1. add: `schedd serve --join` of a new node n4 (its JoinCluster commits the add), until the
   cluster has settled with n4 voting and caught up (the leader's gate reports it caught up: its
   matchIndex reached the add's commit index; every node lists the same voters);
2. replace: a follower is killed, `schedctl cluster replace-node` swaps it for n5 (remove, then
   add), n5 is started with --join, until the cluster has settled with n5 voting and caught up;
3. remove, join: another follower is killed, `schedctl cluster remove-node` removes it, and n6
   is started with --join (it learns as a non-voter first, then is added).

Each figure is printed with the time to the commit of the change (what the command waits for)
and to caught up (the node votes from the commit; caught up is when its vote can help a quorum).

    python bench/bench_membership.py [--jobs 20000] [--ticking 20] [--compaction 2000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._metrics import put_jobs_in_calls
from schedd.ports.fakes import wait_until
from schedd.runtime.cluster import LocalCluster
from schedd_client import job_spec


def settled(c: LocalCluster, want: list[str]):
    st = c.status()
    if st is None or st.membership_change or not st.leader_id:
        return None
    views = {n.id: sorted(m.id for m in n.members if m.voter) for n in st.nodes if n.role != "unreachable"}
    return st if sorted(views) == want and all(v == want for v in views.values()) else None


def in_leader_config(c: LocalCluster, nid: str) -> bool:
    st = c.status()
    return st is not None and nid in {m.id for m in st.members if m.voter}


def schedctl(c: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    env = {"SCHEDD_CONTEXT": str(c.write_context()), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "schedd_client.schedctl", *args], env=env, check=True,
                          capture_output=True, text=True, timeout=120)


def applied_up_to(c: LocalCluster, nid: str, index: int) -> bool:
    info = c.node_info(nid)
    return info is not None and info.applied_index >= index


def measure(c: LocalCluster, nid: str, start, want: list[str]) -> tuple[float, float, float]:
    """Seconds from `start()` to the add's commit, to settled and caught up (matchIndex), and to
    the new node having applied what the leader had committed by then."""
    t0 = time.monotonic()
    start()
    wait_until(lambda: in_leader_config(c, nid), timeout=120, interval=0.05, what=f"{nid} in the config")
    committed = time.monotonic() - t0
    st = wait_until(lambda: settled(c, want), timeout=180, interval=0.05, what=f"{nid} caught up")
    caught_up = time.monotonic() - t0
    wait_until(lambda: applied_up_to(c, nid, st.commit_index), timeout=180, interval=0.05,
               what=f"{nid} to apply the log")
    return committed, caught_up, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=20_000, help="hourly jobs held in the state")
    ap.add_argument("--ticking", type=int, default=20, help="per-second jobs run during the changes")
    ap.add_argument("--compaction", type=int, default=1000, help="[raft] compaction_entries (small: the "
                                                                "new node gets a snapshot)")
    ap.add_argument("--root", help="keep the cluster's files here (default: a temporary dir, removed)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-membership-") as tmp:
        root = args.root or tmp
        c = LocalCluster(Path(root), size=3, raft={"compaction_entries": args.compaction})
        try:
            c.start()
            c.wait_leader(timeout=60)
            c.start_worker("w1", slots=4 * args.ticking)
            client = c.client(timeout=60)
            put_jobs_in_calls(client, [job_spec(f"h{i:06d}", schedule="@every 1h", command="true")
                                       for i in range(args.jobs)])
            client.put_jobs([job_spec(f"tick{i}", schedule="@every 1s", command="true")
                             for i in range(args.ticking)])
            wait_until(lambda: len(list(client.list_executions(state="SUCCEEDED", limit=3 * args.ticking)))
                       >= 3 * args.ticking, timeout=120, what="the load to run")
            figures = {}
            c.new_node("n4")
            figures["add (--join)"] = measure(c, "n4", lambda: c.start_node("n4"), ["n1", "n2", "n3", "n4"])

            victim = next(n for n in ("n1", "n2", "n3") if n != c.leader())
            c.kill_node(victim)
            spare = c.new_node("n5")

            def replace() -> None:
                schedctl(c, "cluster", "replace-node", victim, "n5", "--raft", spare.raft, "--grpc", spare.grpc)
                c.start_node("n5")
            del c.nodes[victim]
            figures[f"replace dead {victim}"] = measure(c, "n5", replace, sorted(c.nodes))

            victim = next(n for n in sorted(c.nodes) if n != c.leader())
            c.kill_node(victim)
            c.new_node("n6")

            def remove_then_join() -> None:
                schedctl(c, "cluster", "remove-node", victim)
                c.start_node("n6")
            del c.nodes[victim]
            figures[f"remove {victim}, join"] = measure(c, "n6", remove_then_join, sorted(c.nodes))
            snapshots = sum("restored snapshot" in c.nodes[n].log.read_text() for n in ("n4", "n5", "n6"))
            print(f"state: {args.jobs + args.ticking} jobs; load: {args.ticking} per-second jobs; "
                  f"compaction every {args.compaction} entries; new nodes that caught up from a snapshot: "
                  f"{snapshots} of 3")
            print(f"{'change':<22} {'to commit (s)':>14} {'to caught up (s)':>17} {'to applied (s)':>15}")
            for name, (committed, caught_up, applied) in figures.items():
                print(f"{name:<22} {committed:>14.2f} {caught_up:>17.2f} {applied:>15.2f}")
            print(json.dumps({k: {"commit_s": round(a, 3), "caught_up_s": round(b, 3), "applied_s": round(d, 3)}
                              for k, (a, b, d) in figures.items()}))
        finally:
            c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
