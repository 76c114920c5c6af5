"""A shard group's use of the cluster quotas, read from a node that holds a replica of it.

Group 0's leader splits each cluster quota over the groups (schedd.leader.quota_balance) from
each group's use: the share its log holds (and the allocation version of that share), its
running attempts and its waiting runs per quota key. A group its node holds no replica of (a
shard move placed it elsewhere) is read through the signed node-to-node path
(schedd.api.shard_calls): `ListShards` for that shard with `quota_keys`, which the holder
answers from its own replica, each key's share and running count read at one applied index
(`quota_shares.use_of` under the replica's lock).

The group's leader is asked when it can be: the holder that answers first names its group's
leader, and a follower's answer is asked again of that leader (which then answers first next
time). A follower's answer is still safe to balance on, as a local follower replica's always
was: it holds only committed entries, so a share of the current version there is in the group's
log, and from that index on the group starts nothing above that share, so the largest of the
share and the running count it shows bounds what the group can run until it records the next
allocation (schedd.core.quota_shares: never exceeded). Its demand may be older; that moves only
where the shares go next, never their sum.

A holder that answers without a use for every key asked (a node of an older build, which knows
no `quota_keys`) is an error like an unreachable one: the balancer then keeps the recorded
shares for that pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from schedd.api.shard_calls import GroupCallError, GroupCalls
from schedd.core.quota_shares import GroupUse, use_of
from schedd_proto import scheduler_pb2 as pb

READ_TIMEOUT_S = 3.0
MAX_KEYS = 1024                  # quota keys one ListShards may ask about (each scans the ready runs)


def uses_pb(node: Any, keys: Sequence[str]) -> list[pb.QuotaUse]:
    """Each key's use in the group `node` replicates (each under the replica's lock, one key
    at a time, so apply never waits for more than one scan)."""
    out = []
    for key in keys:
        with node.lock:
            u = use_of(node.state, key)
        out.append(pb.QuotaUse(key=key, has_share=u.share is not None, share=u.share or 0, version=u.version,
                               running=u.running, waiting=u.waiting))
    return out


def use_from_pb(u: pb.QuotaUse) -> GroupUse:
    return GroupUse(share=u.share if u.has_share else None, running=u.running, waiting=u.waiting, version=u.version)


def uses_of_row(row: pb.ShardStatus, shard: int, keys: Sequence[str]) -> dict[str, GroupUse]:
    """The uses a holder's row gives, checked to be the shard's and to name every key asked."""
    got = {u.key: use_from_pb(u) for u in row.quota_uses}
    if row.shard != shard or any(k not in got for k in keys):
        raise GroupCallError(grpc.StatusCode.FAILED_PRECONDITION,
                             f"{row.answered_by or 'a holder'} gave no quota use of shard {shard} "
                             "(a node of an older build?)")
    return {k: got[k] for k in keys}


async def remote_uses(calls: GroupCalls, shard: int, keys: Sequence[str]) -> dict[str, GroupUse]:
    """`shard`'s use of each of `keys`, as its leader's replica has it when the leader answers
    (module doc), else as the holder that answered has it. Raises GroupCallError."""
    request = pb.ListShardsRequest(shard=shard, quota_keys=list(keys))
    answer = await calls.unary(shard, "Cluster", "ListShards", request, timeout=READ_TIMEOUT_S)
    row = answer.items[0] if answer.items else pb.ShardStatus(shard=-1)
    if row.leader_id and row.answered_by != row.leader_id and row.leader_grpc_address:
        try:
            again = await calls.unary(shard, "Cluster", "ListShards", request, timeout=READ_TIMEOUT_S,
                                      address=row.leader_grpc_address)
            if again.items:
                row = again.items[0]
        except GroupCallError:
            pass                  # the follower's answer stands (module doc: still safe)
    return uses_of_row(row, shard, keys)
