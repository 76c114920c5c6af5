"""The shard groups' replicas a node hosts, as the loops over them (quota and leader balancing)
read them: group k's RaftNode at k, read each time they act, since a shard move builds and
drops replicas at run time (schedd.runtime.placement)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Hosted = Callable[[], Mapping[int, Any]]


def hosted(nodes: Sequence[Any] | Hosted) -> Hosted:
    """`nodes` as a function of now: a live view (the node's `GroupSet.nodes`) as it is; a list
    (every group, in shard order) as a fixed one."""
    if callable(nodes):
        return nodes
    fixed = dict(enumerate(nodes))
    return lambda: fixed
