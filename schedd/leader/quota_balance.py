"""Cluster quotas across shard groups, the leaders' side (the rules: schedd.core.quota_shares).

Two duties, one loop per node (a node hosts a replica of every group, so each reads every
group's replica locally, never over the network):

- Balancing, where this node leads group 0: for each quota group 0 holds, read every group's
  share, running attempts and waiting runs for its key, and record the next allocation
  (`quota_shares.next_allocation`) in group 0's log; drop the allocation of a removed quota.
- Copying, for each group this node leads: when group 0's allocation (as this node's replica
  of group 0 has it) gives this group a share its own log does not hold yet, record it there
  with the allocation's version.

Both only record; apply decides. What a lagging replica shows is at worst an older allocation
or a smaller use, and the rules make either safe (a share of an older version is ignored; a
raise waits until every group's log holds the current allocation).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from schedd.leader.hosted import Hosted, hosted
from schedd.core import commands as C
from schedd.core.quota_shares import GroupUse, cluster_quotas, next_allocation
from schedd.ports.clock import Clock

log = logging.getLogger("schedd.quotas")

PERIOD_S = 0.5
WAITING_SCAN = 20_000        # ready runs looked at per group and pass (demand is a proportion)
PROPOSE_TIMEOUT_S = 5.0


def use_of(state: Any, key: str) -> GroupUse:
    """A group's use of quota `key` from its replica's state (read under its lock)."""
    held = state.shares.get(key)
    waiting = 0
    for _, name, t in state.ready.islice(0, WAITING_SCAN):     # the runs waiting for a claim, in claim order
        ex, job = state.execs.get((name, t)), state.jobs.get(name)
        if ex is not None and job is not None and key in state.policy(job).holds(ex.lane):
            waiting += 1
    return GroupUse(share=held[1] if held is not None else None, running=int(state.held.get(key, 0)),
                    waiting=waiting, version=held[0] if held is not None else 0)


class QuotaBalancer:
    """The loop (module doc) over this node's replicas: `nodes()` is group k's RaftNode by k,
    for the groups it hosts now (a list: every group, in order).

    Only a node hosting every group rebalances (it reads each group's demand and recorded
    share from its own replicas; without one of them it cannot tell that raising a share
    is safe): elsewhere the shares stay as recorded, which never exceeds a quota. Every
    group's leader copies its share from group 0 (every node hosts group 0)."""

    def __init__(self, nodes: Sequence[Any] | Hosted, clock: Clock) -> None:
        self._nodes = hosted(nodes)
        self.clock = clock
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
        if any(k not in nodes for k in range(shards)):
            return                        # not every group's replica here (class doc)
        with zero.lock:
            quotas = cluster_quotas(zero.state.quotas)
            allocations = dict(zero.state.allocations)
        for key in sorted(set(allocations) - set(quotas)):
            await self._propose(zero, C.QUOTA_ALLOC, key=key, shares=None)
        for key, limit in sorted(quotas.items()):
            uses = []
            for k in range(shards):
                node = nodes[k]
                with node.lock:
                    uses.append(use_of(node.state, key))
            version, current = allocations.get(key, (0, None))
            nxt = next_allocation(limit, current, uses, version)
            if nxt is not None:
                await self._propose(zero, C.QUOTA_ALLOC, key=key, shares=list(nxt))

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
