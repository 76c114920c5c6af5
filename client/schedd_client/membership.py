"""Cluster membership in the SDK: ``add_node``, ``remove_node`` and ``join`` methods of
``Client`` / ``AsyncClient`` (``schedctl cluster add-node|remove-node|replace-node``).

Each call is answered by the leader, which runs one membership change at a time: a call made
while another change is in flight raises ``Conflict`` (FAILED_PRECONDITION) naming it. The answer lists the
voters after the change and the steps taken. They need the ``membership`` capability on the
cluster (the management policy).
"""

from __future__ import annotations

from typing import Any

from schedd_proto import membership_pb2 as mpb

from ._plans import Call, Plan, _single


def add_node(id: str, *, raft_address: str, grpc_address: str,
             wait_caught_up_s: float = 0.0) -> Plan[mpb.MembershipChangeResponse]:
    """Add a voter: its id and addresses are recorded, then pysyncobj's add is committed (the
    node votes from then on: start it right after, with the cluster's secret and these
    addresses). ``wait_caught_up_s`` > 0 also waits that long for it to catch up."""
    request = mpb.AddNodeRequest(id=id, raft_address=raft_address, grpc_address=grpc_address,
                                 wait_caught_up_s=wait_caught_up_s)
    return _single(Call("membership", "AddNode", request, mutating=True), mpb.MembershipChangeResponse)


def remove_node(id: str) -> Plan[mpb.MembershipChangeResponse]:
    """Remove a voter (the leader hands its leadership over first); stop the node afterwards."""
    return _single(Call("membership", "RemoveNode", mpb.RemoveNodeRequest(id=id), mutating=True),
                   mpb.MembershipChangeResponse)


_BUILDERS = ("add_node", "remove_node")


def attach(client_cls: Any, async_cls: Any) -> None:
    """Give ``Client`` and ``AsyncClient`` the membership methods (called once, from the package)."""
    from .client import _awaitable, _blocking
    for name in _BUILDERS:
        build = globals()[name]
        setattr(client_cls, name, _blocking(build))
        setattr(async_cls, name, _awaitable(build))
