"""Cluster quotas across shard groups, the leaders' side (the rules: schedd.core.quota_shares).

Two duties, one loop per node:

- Balancing, where this node leads group 0: for each quota group 0 holds, read every group's
  share, running attempts and waiting runs for its key, and record the next allocation
  (`quota_shares.next_allocation`) in group 0's log; drop the allocation of a removed quota.
  A group this node hosts is read from its replica here; one it does not (a shard move placed
  it elsewhere) from a node holding it, its leader when that answers (`remote`:
  schedd.api.quota_reads). When some group cannot be read, the pass records no allocation:
  the shares stay as recorded, which never exceeds a quota.
- Copying, for each group this node leads: when group 0's allocation (as this node's replica
  of group 0 has it; every node hosts group 0) gives this group a share its own log does not
  hold yet, record it there with the allocation's version.

Both only record; apply decides. What a lagging replica shows, here or on another node, is at
worst an older allocation or a smaller use, and the rules make either safe: a share of an older
version is ignored; a raise waits until every group's log holds the current allocation, and a
replica showing that share holds it committed (a replica applies committed entries only), after
which its group starts nothing above it, so the largest of that share and the running count
the replica shows bounds what the group runs until the next allocation reaches it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from schedd.leader.hosted import Hosted, hosted
from schedd.core import commands as C
from schedd.core.quota_shares import GroupUse, cluster_quotas, next_allocation, use_of
from schedd.ports.clock import Clock

log = logging.getLogger("schedd.quotas")

PERIOD_S = 0.5
PROPOSE_TIMEOUT_S = 5.0

#: (shard, quota keys) -> that group's use of each key, read from a node holding it; raises
#: when no holder gives it.
RemoteUses = Callable[[int, Sequence[str]], Awaitable[dict[str, GroupUse]]]


class QuotaBalancer:
    """The loop (module doc) over this node's replicas: `nodes()` is group k's RaftNode by k,
    for the groups it hosts now (a list: every group, in order); `remote(k, keys)` reads a
    group hosted elsewhere (None: only a node hosting every group rebalances)."""

    def __init__(self, nodes: Sequence[Any] | Hosted, clock: Clock, remote: RemoteUses | None = None) -> None:
        self._nodes = hosted(nodes)
        self.clock = clock
        self.remote = remote
        self.unread: dict[int, str] = {}   # shard -> why its use could not be read (logged once)
        self.level = C.FEATURES.level_of(C.QUOTA_SHARE)

    async def run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a failed pass is retried next period
                log.warning("quota balancing: %s", e)
            await asyncio.sleep(PERIOD_S)

    def _ready(self, node: Any) -> bool:
        return bool(node.is_leader()) and node.state.feature_level >= self.level

    @property
    def nodes(self) -> dict[int, Any]:
        return dict(self._nodes())

    async def step(self) -> None:
        await self.balance()
        for k, node in self.nodes.items():
            if self._ready(node):
                await self.copy(k, node)

    async def balance(self) -> None:
        nodes = self.nodes
        zero = nodes[0]
        if not self._ready(zero):
            return
        shards = len(zero.state.shard_map.get("shards", ())) or len(nodes)
        if self.remote is None and any(k not in nodes for k in range(shards)):
            return                        # a group hosted elsewhere, and no way to read it
        with zero.lock:
            quotas = cluster_quotas(zero.state.quotas)
            allocations = dict(zero.state.allocations)
        for key in sorted(set(allocations) - set(quotas)):
            await self._propose(zero, C.QUOTA_ALLOC, key=key, shares=None)
        keys = sorted(quotas)
        uses = await self.uses(nodes, shards, keys)
        if uses is None:
            return                        # some group could not be read: the shares stay as recorded
        for key in keys:
            version, current = allocations.get(key, (0, None))
            nxt = next_allocation(quotas[key], current, [u[key] for u in uses], version)
            if nxt is not None:
                await self._propose(zero, C.QUOTA_ALLOC, key=key, shares=list(nxt))

    async def uses(self, nodes: dict[int, Any], shards: int,
                   keys: Sequence[str]) -> list[dict[str, GroupUse]] | None:
        """Each group's use of each key, in shard order: from its replica here, else from a
        node holding one (module doc); None when some group could not be read. Read after
        group 0's allocations, so a group showing the current version holds it."""
        elsewhere = [k for k in range(shards) if k not in nodes]
        read: dict[int, dict[str, GroupUse]] = {}
        if elsewhere:
            assert self.remote is not None
            answers = await asyncio.gather(*(self.remote(k, keys) for k in elsewhere), return_exceptions=True)
            for k, answer in zip(elsewhere, answers):
                if isinstance(answer, BaseException):
                    if self.unread.get(k) != str(answer):
                        log.warning("quota balancing: shard %d's use could not be read (%s): the shares stay "
                                    "as recorded until it can", k, answer)
                    self.unread[k] = str(answer)
                    return None
                if self.unread.pop(k, None) is not None:
                    log.info("quota balancing: shard %d's use read again", k)
                read[k] = answer
        for k in range(shards):
            if k in nodes:
                node, read[k] = nodes[k], {}
                for key in keys:
                    with node.lock:
                        read[k][key] = use_of(node.state, key)
        return [read[k] for k in range(shards)]

    async def copy(self, k: int, node: Any) -> None:
        zero = self.nodes[0]
        with zero.lock:
            allocations = dict(zero.state.allocations)
        for key, (version, shares) in sorted(allocations.items()):
            if k >= len(shares):
                continue
            with node.lock:
                held = node.state.shares.get(key)
            if held is None or held[0] < version:
                await self._propose(node, C.QUOTA_SHARE, key=key, share=shares[k], version=version)

    async def _propose(self, node: Any, kind: str, **args: Any) -> None:
        entry = C.encode(kind, rid="", now=self.clock.now_ms(), term=node.term, by=node.cfg.node_id, **args)
        result = await node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
        if not result.ok:
            log.info("quota balancing: %s %s refused: %s", kind, args.get("key"), result.msg)
