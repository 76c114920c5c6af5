"""Even out which node leads which shard group (a sharded cluster; schedd.core.shards).

Each group's leader fires and dispatches that group's jobs, so leaders piled on one node pile
the work there (elections pick whoever times out first: after a restart one node often leads
most groups). Every node runs this loop over its own replicas: it reads who leads each group,
asks `ShardMap.leaders_balance` for the transfers that even the counts out, and carries out the
ones whose group it leads (pysyncobj's TimeoutNow transfer to the chosen replica). Every node
computes the same plan from the same leaders; only a group's leader can act on it.

Transfers wait until the leaders have been the same for `STABLE_S` (a view in the middle of an
election or of another transfer is not acted on), and a node makes at most one transfer per
`GAP_S`, so a partition that moves leaders back and forth cannot turn this into a storm.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schedd.leader.hosted import Hosted, hosted
from schedd.core.shards import ShardMap

log = logging.getLogger("schedd.shards")

PERIOD_S = 2.0
STABLE_S = 6.0
GAP_S = 10.0


class LeaderBalancer:
    """The loop (module doc) over this node's replicas `nodes` (group k's RaftNode at k)."""

    def __init__(self, node_id: str, nodes: Sequence[Any] | Hosted,
                 shard_map: Callable[[], ShardMap | None] = lambda: None, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.node_id = node_id
        self._nodes = hosted(nodes)
        self.shard_map = shard_map         # the recorded map (None: every member holds every group)
        self.monotonic = monotonic
        self._seen: dict[int, str] = {}
        self._since = 0.0
        self._last_transfer = -GAP_S
        self.transfers = 0

    @property
    def nodes(self) -> dict[int, Any]:
        """The groups this node hosts now, by shard."""
        return dict(self._nodes())

    def leaders(self) -> dict[int, str]:
        out = {}
        for k, node in self.nodes.items():
            leader = node.status().leader
            nid = node.membership.id_of_raft(leader) if leader else ""
            if nid:
                out[k] = nid
        return out

    def step(self) -> tuple[int, str] | None:
        """One look; the transfer started (group, target node id), if any."""
        now = self.monotonic()
        leaders = self.leaders()
        if leaders != self._seen:
            self._seen, self._since = leaders, now
            return None
        if len(leaders) < len(self.nodes) or now - self._since < STABLE_S or now - self._last_transfer < GAP_S:
            return None
        nodes = self.nodes
        try:
            m = self._map(nodes)
            # group 0 is every node's (its map entry names only some): its leader stays where it is
            plan = m.leaders_balance({k: n for k, n in leaders.items() if k or n in m.shard(0).replicas})
        except ValueError as e:            # a member table in the middle of a change
            log.debug("leader balance: %s", e)
            return None
        mine = next((t for t in plan if t.src == self.node_id), None)
        if mine is None:
            return None
        group = nodes[mine.shard]
        target = next((m.raft_address for m in group.membership.members() if m.id == mine.dst), "")
        if not target or not group.is_leader():
            return None
        log.info("shard %d: handing leadership to %s (this node leads %d of %d shards)", mine.shard, mine.dst,
                 sum(1 for n in leaders.values() if n == self.node_id), len(nodes))
        group.transfer_leadership(to=target)
        self._last_transfer = now
        self.transfers += 1
        return mine.shard, mine.dst

    def _map(self, nodes: Mapping[int, Any]) -> ShardMap:
        """The recorded map, or before one: every member holding every group."""
        m = self.shard_map()
        if m is not None:
            return m
        members = sorted({m.id for node in nodes.values() for m in node.membership.members()})
        return ShardMap.initial(members, len(nodes), len(members))

    async def run(self) -> None:
        while True:
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - a failed look is retried next period
                log.warning("leader balance: %s", e)
            await asyncio.sleep(PERIOD_S)
