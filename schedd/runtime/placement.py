"""Which shard groups this node hosts, kept in step with the shard map (a sharded cluster).

The shard map (schedd.core.shards.ShardMap) lives in group 0's log, the `shard_map` entry, so
every node reads the same versions in the same order. Every node hosts group 0 (its member
table names the cluster's nodes and their addresses; the ACL and the map live there); a replica
of group k lives on the nodes the map lists for k.

- `MapKeeper` runs on group 0's leader: it records the first map (every member of a cluster
  made with S shards holds every shard, as the nodes were started), then adds each node that
  joins group 0 (holding nothing until a move places replicas on it) and drops a node that left
  holding nothing.
- `Placement` runs on every node: it builds a replica of each group the map places here and
  it does not host yet (its peers are the map's replicas of that group, at the addresses group
  0's member table gives them: `shards.shard_raft_address`), and drops one the map no longer places here
  (stopped, then its directory deleted). A move (schedd.runtime.shard_moves) adds a replica to the
  group's Raft configuration before the map places it, and records the map without the old
  one only after the group's Raft configuration dropped it, so neither a build nor a drop ever
  runs ahead of the group's own membership.

At start, before group 0 has applied the map, a node hosts group 0, every group whose directory
holds a replica, and, on its first start as one of the nodes the cluster was made with, every
group (`boot_shards`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from schedd.core import commands as C
from schedd.core.shards import ShardMap, ShardMapError, recorded_map, shard_raft_address
from schedd.ports.clock import Clock
from schedd.replication import membership as members_file
from schedd.replication.membership import MemberInfo
from schedd.runtime.config import NodeConfig
from schedd.runtime.groups import Group, GroupSet, group_dir, holds_state, raft_ports
from schedd.settings import Peer

log = logging.getLogger("schedd.shards")

PERIOD_S = 0.5
MAP_LEVEL = C.FEATURES.level_of(C.SHARD_MAP)


def boot_shards(cfg: NodeConfig, *, first_start: bool) -> list[int]:
    """The groups a node builds as it starts (module doc)."""
    if cfg.shards <= 1:
        return [0]
    if first_start and not cfg.join:
        return list(range(cfg.shards))
    return [0] + [k for k in range(1, cfg.shards) if holds_state(group_dir(cfg, k))]


def current_map(zero: Any) -> ShardMap | None:
    """The map group 0's replica here has applied (None: none recorded yet)."""
    with zero.lock:
        doc = dict(zero.state.shard_map)
    try:
        return recorded_map(doc)
    except ShardMapError as e:                 # never written by apply; said loudly if ever seen
        log.error("shard map: the recorded map is unreadable: %s", e)
        return None


def members_of(zero: Any) -> dict[str, MemberInfo]:
    """Group 0's members by id: every node of the cluster and its addresses."""
    return {m.id: m for m in zero.membership.members()}


def peers_of(m: ShardMap, shard: int, members: Mapping[str, MemberInfo]) -> tuple[Peer, ...] | None:
    """The nodes holding `shard`'s replicas, with their own (group 0) addresses, for a replica
    built here to start from (its group's log then brings the group's own membership). A node
    group 0 no longer lists (a dead one removed, whose replica a move is taking over) is left
    out; None while fewer than a majority of the replicas are known (a map ahead of the member
    table: wait)."""
    reps = m.shard(shard).replicas
    out = tuple(Peer(n, members[n].raft_address, members[n].grpc_address) for n in reps if n in members)
    return out if len(out) > len(reps) // 2 else None


def holders(zero: Any, shard: int) -> list[str]:
    """The gRPC addresses of the nodes holding `shard`'s replicas, as the map says (before
    any map: every member)."""
    members = members_of(zero)
    m = current_map(zero)
    ids = m.shard(shard).replicas if m is not None and shard < m.count else tuple(members)
    return [members[n].grpc_address for n in ids if n in members and members[n].grpc_address]


class MapKeeper:
    """Group 0's leader records the map and keeps its node list in step (module doc)."""

    def __init__(self, zero: Any, shards: int, clock: Clock) -> None:
        self.zero, self.shards, self.clock = zero, shards, clock

    def next_map(self) -> ShardMap | None:
        """The map to record now, or None."""
        zero = self.zero
        if not zero.is_leader() or zero.state.feature_level < MAP_LEVEL:
            return None
        members = [m.id for m in zero.membership.members()]
        m = current_map(zero)
        if m is None:
            return ShardMap.initial(members, self.shards, len(members))
        for nid in members:
            if nid not in m.nodes:
                return m.add_node(nid)
        for nid in m.nodes:
            if nid not in members and set(m.replicas_on(nid)) <= {0}:
                if not m.replicas_on(nid):
                    return m.remove_node(nid)
                stay = [n for n in m.nodes if n != nid and n in members]
                if len(stay) >= m.replication:            # shard 0's entry names nodes still here
                    return m.zero_on(stay[:m.replication])
        return None

    async def step(self) -> None:
        m = self.next_map()
        if m is not None:
            await propose_map(self.zero, m, self.clock)


async def propose_map(zero: Any, m: ShardMap, clock: Clock, timeout: float = 10.0) -> Any:
    """Commit `m` as the next map through group 0 (this node leads it); the apply's result."""
    entry = C.encode(C.SHARD_MAP, rid="", now=clock.now_ms(), term=zero.term, by=zero.cfg.node_id, map=m.to_dict())
    result = await zero.propose(entry, timeout=timeout)
    if result.ok:
        log.info("shard map: version %d recorded", m.version)
    else:
        log.info("shard map: version %d refused: %s", m.version, result.msg)
    return result


class Placement:
    """Keeps the hosted groups in step with the map (module doc). `build(k, peers)` makes and
    starts group k's replica; `drop(group)` stops one and forgets it."""

    def __init__(self, cfg: NodeConfig, groups: GroupSet, build: Callable[[int, tuple[Peer, ...]], Awaitable[Group]],
                 drop: Callable[[Group], Awaitable[None]], keeper: MapKeeper) -> None:
        self.cfg, self.groups, self.build, self.drop, self.keeper = cfg, groups, build, drop, keeper

    async def run(self) -> None:
        while True:
            try:
                await self.keeper.step()
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - retried next period
                log.warning("shard placement: %s", e)
            await asyncio.sleep(PERIOD_S)

    async def step(self) -> None:
        zero = self.groups.zero.node
        m = current_map(zero)
        if m is None:
            return
        me = self.cfg.node_id
        want = {0, *m.replicas_on(me)}
        members = members_of(zero)
        for k in sorted(want - set(self.groups.by_shard)):
            peers = peers_of(m, k, members)
            if peers is None:
                continue
            log.info("shard %d: the map (version %d) places a replica here: building it", k, m.version)
            await self.build(k, peers)
        for k in sorted(set(self.groups.by_shard) - want):
            group = self.groups.by_shard[k]
            log.info("shard %d: the map (version %d) no longer places a replica here: dropping it", k, m.version)
            await self.drop(group)


async def forget_replica(group: Group) -> None:
    """Delete a dropped replica's directory (its group holds the data on the nodes the map names)."""
    path = Path(group.cfg.data_dir)
    await asyncio.to_thread(shutil.rmtree, path, True)


def seed_membership(cfg: NodeConfig, shard: int, peers: tuple[Peer, ...]) -> None:
    """The Raft configuration a replica the map places here starts from (the group's leader has
    added this node already: schedd.runtime.shard_moves), unless the replica's directory holds one."""
    path = group_dir(cfg, shard)
    if members_file.read_file(path) is not None:
        return
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    members_file.write_file(path, [MemberInfo(p.id, shard_raft_address(p.raft_address, shard, raft_ports(cfg)),
                                                      p.grpc_address)
                                   for p in peers])
