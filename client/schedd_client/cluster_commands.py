"""``schedctl worker list`` and ``schedctl cluster status``: what the cluster itself reports.

Separate from the job and run commands because the status view decides something of its own:
how a node that did not answer, or a cluster without a leader, is shown (never as zeros) in the
table and in ``-o json|yaml`` (``status_dict``).
"""

from __future__ import annotations

from typing import Any

from schedd_proto import scheduler_pb2 as pb

from . import membership_commands
from ._cli import _shorten, _table
from .convert import to_dict
from .invocation import Invocation
from .watch_commands import watch_listing


def worker_list(cmd: Invocation) -> None:
    if cmd.args.watch:
        watch_listing(cmd, cmd.client.watch_workers(), "worker", lambda workers: workers_table(cmd, workers),
                      lambda w: f"{w.name} slots={w.slots} running={len(w.running)} "
                                f"{'draining' if w.draining else 'ready'}")
        return
    workers = list(cmd.client.list_workers().workers)
    cmd.emit([to_dict(w) for w in workers], lambda: workers_table(cmd, workers))


def workers_table(cmd: Invocation, workers: list[pb.WorkerInfo]) -> str:
    """`worker list`'s table (also what `worker list --watch` redraws)."""
    return _table(
            ("NAME", "SLOTS", "RUNNING", "POOL", "LABELS", "HANDLERS", "STATE", "CONNECTED", "LAST HEARTBEAT"),
            [
                (w.name, w.slots, len(w.running), w.pool or "-",
                 ",".join(f"{k}={v}" for k, v in sorted(w.labels.items())) or "-", ",".join(w.handlers) or "-",
                 "draining" if w.draining else "ready", cmd.when(w.connected_ms),
                 cmd.when(w.last_heartbeat_ms))  # fmt: skip
                for w in workers
            ],
            empty="No workers connected.",
        ) + ("".join(f"\n  {w.name}: {', '.join(w.running)}" for w in workers if w.running))


def leader_list(cmd: Invocation) -> None:
    """``cluster leaders``: the terms each node led since it started, newest first."""
    changes = cmd.client.leader_changes(stale_ok=cmd.args.stale)
    cmd.emit([{"node": c.node, "term": c.term, "since_ms": c.since_ms, "until_ms": c.until_ms} for c in changes],
             lambda: _table(("TERM", "LEADER", "SINCE", "UNTIL"),
                            [(c.term, c.node, cmd.when(c.since_ms), cmd.when(c.until_ms) if c.until_ms else "(leads)")
                             for c in changes],
                            empty="No leader recorded (each node remembers the terms it led since it started)."))


def shard_rows(answer: pb.ListShardsResponse) -> list[dict[str, Any]]:
    return [{"shard": s.shard, "leader": s.leader_id or None, "leader_address": s.leader_grpc_address or None,
             "replicas": list(s.replicas), "term": s.term, "jobs": s.jobs, "executions": s.executions,
             "lag": s.lag, "commit_index": s.commit_index, "applied_index": s.applied_index}
            for s in answer.items]


def shards_table(rows: list[dict[str, Any]]) -> str:
    return _table(("SHARD", "LEADER", "REPLICAS", "TERM", "JOBS", "LAG"),
                  [(r["shard"], r["leader"] or "(none)", ",".join(r["replicas"]), r["term"], r["jobs"], r["lag"])
                   for r in rows], empty="No shard answered.")


def shard_list(cmd: Invocation) -> None:
    """``shard list``: every shard group as the answering node's replica of it sees it."""
    rows = shard_rows(cmd.client.list_shards())
    cmd.emit(rows, lambda: shards_table(rows))


def shard_move(cmd: Invocation) -> None:
    """``shard move SHARD --from N1 --to N4``: one replica of a shard to another node."""
    a = cmd.args
    out = cmd.client.move_shard(a.shard, from_node=a.from_node, to_node=a.to_node)
    cmd.emit(to_dict(out), lambda: "\n".join([*out.steps, f"shard {a.shard} moved in {out.seconds:.1f} s: "
                                                            f"replicas {', '.join(out.replicas)} "
                                                            f"(map version {out.map_version})"]))


def cluster_status(cmd: Invocation) -> None:
    status = cmd.client.cluster_status(stale_ok=cmd.args.stale, with_digest=cmd.args.digest)
    if not any(n.shards > 1 for n in status.nodes):
        cmd.emit(status_dict(status), lambda: _cluster_table(status, digest=cmd.args.digest))
        return
    # A sharded cluster: the nodes as shard 0's group sees them, then every shard's leader.
    shards = shard_rows(cmd.client.list_shards())
    cmd.emit({**status_dict(status), "shards": shards},
             lambda: _cluster_table(status, digest=cmd.args.digest) + "\n\n" + shards_table(shards))


LEADER_FIELDS = ("leader_id", "leader_grpc_address", "commit_index", "feature_level")


def status_dict(status: pb.ClusterStatus) -> dict[str, Any]:
    """``cluster status -o json|yaml``: what only a leader knows is ``null`` while there is none,
    never a zero that reads as a value (commit index 0, feature level 0)."""
    out = to_dict(status)
    if not status.leader_id:
        out.update(dict.fromkeys(LEADER_FIELDS))
    return out


UNREACHABLE = "unreachable"


def _cluster_table(status: pb.ClusterStatus, *, digest: bool = False) -> str:
    """The cluster as the answering node saw it. A node that did not answer shows "unreachable"
    and why, never zeros; with no leader the header says so instead of a commit index."""
    if status.leader_id:
        leader = status.leader_id + (f" ({status.leader_grpc_address})" if status.leader_grpc_address else "")
        header = f"Leader: {leader}   term {status.term}   commit {status.commit_index}"
    else:
        header = f"Leader: none (no leader elected: writes wait for one)   term {status.term}"
    header += f"   jobs {status.jobs}   executions {status.executions}"
    if status.feature_level:
        header += f"   feature level {status.feature_level}"
    if status.answered_by:
        header += f"   (answered by {status.answered_by})"
    with_errors = any(node.error for node in status.nodes)
    headers = ("ID", "ROLE", "VERSION", "LEVEL", "TERM", "COMMIT", "APPLIED", "LAG", "GRPC", "RAFT") + (
        ("DIGEST", "HISTORY") if digest else ()) + (("ERROR",) if with_errors else ())
    rows = [_node_row(node, digest=digest, with_errors=with_errors) for node in status.nodes]
    out = header + "\n" + _table(headers, rows, empty="(no nodes reported)")
    if status.feature_level and status.supported_feature_level > status.feature_level:
        out += (f"\nEvery node supports feature level {status.supported_feature_level}: "
                f"the leader raises the cluster's level to it within seconds.")
    out += membership_commands.membership_lines(status)
    return out + "".join(f"\nWARNING: {w}" for w in status.warnings)


def _node_row(node: pb.NodeStatus, *, digest: bool, with_errors: bool) -> tuple[Any, ...]:
    """One node's row: LEVEL is the highest feature level its build supports."""
    error = (_shorten(node.error, 60),) if with_errors else ()
    if node.role == UNREACHABLE:
        return (node.id, node.role, *("-",) * 6, node.grpc_address, node.raft_address) + (
            ("-", "-") if digest else ()) + error
    return (node.id, node.role, node.version or "-", node.max_feature_level or "-", node.term,
            node.commit_index, node.applied_index, node.lag, node.grpc_address, node.raft_address) + (
        (f"{node.state_digest[:12]}@{node.digest_index}" if node.state_digest else "-", _history(node))
        if digest else ()) + error


def _history(node: pb.NodeStatus) -> str:
    """The history store's digest, its index and rows (and a gap being copied), or "-"."""
    if not node.history_digest:
        return "-"
    gap = f" (copying {node.history_gap})" if node.history_gap else ""
    return f"{node.history_digest[:12]}@{node.history_index} {node.history_rows:,} runs{gap}"
