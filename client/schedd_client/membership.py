"""Cluster membership in the SDK: the plan builders of the ``add_node`` and ``remove_node``
methods of ``Client`` / ``AsyncClient`` (declared in ``_methods``; ``schedctl cluster
add-node|remove-node|replace-node``).

Each call is answered by the leader, which runs one membership change at a time: a call made
while another change is in flight raises ``Conflict`` (FAILED_PRECONDITION) naming it. The answer lists the
voters after the change and the steps taken. They need the ``membership`` capability on the
cluster (the management policy).
"""

from __future__ import annotations

from schedd_proto import membership_pb2 as mpb

from ._plans import Call, Plan, _single


def add_node(id: str, *, raft_address: str, grpc_address: str,
             wait_caught_up_s: float = 0.0) -> Plan[mpb.MembershipChangeResponse]:
    request = mpb.AddNodeRequest(id=id, raft_address=raft_address, grpc_address=grpc_address,
                                 wait_caught_up_s=wait_caught_up_s)
    return _single(Call("membership", "AddNode", request, mutating=True), mpb.MembershipChangeResponse)


def remove_node(id: str) -> Plan[mpb.MembershipChangeResponse]:
    return _single(Call("membership", "RemoveNode", mpb.RemoveNodeRequest(id=id), mutating=True),
                   mpb.MembershipChangeResponse)
