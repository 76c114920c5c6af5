"""The membership part of `cluster status` (NodeStatus and ClusterStatus fields 30-39), kept
apart from ClusterService so the status code and the membership code each stay in one place."""

from __future__ import annotations

from schedd.replication.membership import MemberInfo
from schedd.replication.node import RaftNode
from schedd_proto import scheduler_pb2 as pb


def member_pb(m: MemberInfo, voter: bool = True) -> pb.MemberInfo:
    return pb.MemberInfo(id=m.id, raft_address=m.raft_address, grpc_address=m.grpc_address, voter=voter)


def node_membership(node: RaftNode) -> dict:
    """The NodeStatus fields 30-33 of this node (ClusterService.local_info)."""
    ms = node.membership
    voters = ms.members()
    voting = {m.raft_address for m in voters}
    out = [member_pb(m) for m in voters]
    out += [member_pb(m, voter=False) for m in ms.recorded() if m.raft_address not in voting]
    return {"members": out, "membership_source": ms.source, "membership_change": node.changes.in_flight(),
            "config_disagreement": ms.config_disagreement(), "learners": node.learners()}


def cluster_membership(nodes: list[pb.NodeStatus], leader: pb.NodeStatus | None,
                       answering: RaftNode) -> tuple[list[pb.MemberInfo], str, str, list[str]]:
    """ClusterStatus fields 30-32 and the membership warnings: the leader's view (else the
    answering node's), and every reachable node whose config file disagrees."""
    view = leader if leader is not None else next((n for n in nodes if n.id == answering.cfg.node_id), None)
    members = list(view.members) if view is not None else []
    change = view.membership_change if view is not None else ""
    warnings = [f"{n.id}: {n.config_disagreement}" for n in nodes if n.config_disagreement]
    if leader is not None:
        mine = sorted(m.raft_address for m in leader.members if m.voter)
        for n in nodes:
            theirs = sorted(m.raft_address for m in n.members if m.voter)
            if n.role != "unreachable" and n is not leader and n.members and theirs != mine:
                warnings.append(f"{n.id} sees voters {', '.join(theirs)}, the leader {', '.join(mine)} "
                                "(a membership change still replicating to it?)")
    return members, change, answering.changes.last, warnings
