"""Leader only: raise the cluster's feature level once every voter supports a higher one.

Runs on every node and acts only while `node.leads_epoch()`. Each period it asks every member
for its NodeInfo (the `infos` callable the composition root wires to the Cluster service, over
the router's channels) and, when every voter answers and reports a build supporting a level
above the cluster's, proposes a `feature_level` entry for the highest level they all support
(never above this node's own table). It never lowers the level: apply refuses that anyway.

Non-voters count too (they apply the log, so a build below the level would halt): the member
table's members that are not voting yet (an add between its record and its Raft change, or one that
failed there; `member_infos` asks them) and the joiners following the cluster as read-only Raft
nodes (`Joiners`: what each reported at its JoinCluster prepare, for JOINER_TTL_S). A learner this
leader was not told about (it prepared with a previous leader) holds the level until it has joined
or left. A joiner below the level would otherwise learn an entry it cannot apply and halt halfway
through its join.

Why every voter and not a quorum: a node that has not been upgraded yet would refuse a newer
entry kind as `invalid` (or not know it at all) and its state would diverge from its peers'. A
node that does not answer (down, partitioned, mid-restart) or reports no level (a build older
than feature levels) holds the level where it is, which is the safe side: new features wait,
nothing breaks. (schedd.core.features has the whole story.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from schedd.core import commands as C
from schedd.ports.clock import Clock
from schedd.replication.node import ProposalError, RaftNode
from schedd_proto import scheduler_pb2 as pb

log = logging.getLogger("schedd.features")

PERIOD_S = 2.0
FIRST_CHECK_S = 0.05
FOLLOWER_CHECK_S = 0.25     # a follower only looks whether it leads now (it looked every 50 ms)


def target_level(current: int, own_max: int, reports: Sequence[pb.NodeStatus]) -> int | None:
    """The level to raise the cluster to, or None to leave it: the highest level every member
    supports (capped by this build's), if that is above `current` and every member answered."""
    if not reports:
        return None
    supported = [0 if r.role == "unreachable" else r.max_feature_level for r in reports]
    target = min(own_max, *supported)
    return target if target > current else None


JOINER_TTL_S = 300.0       # a join's learning phase is bounded well below this (schedd.runtime.join)


@dataclass(slots=True)
class Joiners:
    """The builds of joiners let in as non-voters (MembershipService's JoinCluster prepare), on
    this node while it leads: id -> (highest feature level, when it asked, ms). Only the asyncio
    thread touches it."""

    ttl_ms: int = int(JOINER_TTL_S * 1000)
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)

    def note(self, node_id: str, level: int, now_ms: int) -> None:
        self.seen[node_id] = (level, now_ms)

    def forget(self, node_id: str) -> None:
        """It joined (its NodeInfo counts from now on) or was refused."""
        self.seen.pop(node_id, None)

    def cap(self, target: int, learners: int, now_ms: int) -> int | None:
        """`target` lowered to what every recent joiner supports; None (hold) when a connected
        learner is not accounted for by a recent joiner, or a joiner supports none above it."""
        for nid, (_, at) in list(self.seen.items()):
            if now_ms - at > self.ttl_ms:
                del self.seen[nid]
        if learners > len(self.seen):
            return None
        return min([target, *(level for level, _ in self.seen.values())])


@dataclass(slots=True)
class FeatureRaiser:
    node: RaftNode
    clock: Clock
    infos: Callable[[], Awaitable[Sequence[pb.NodeStatus]]]   # every voter's NodeInfo, this node's too
    period_s: float = PERIOD_S
    joiners: Joiners = field(default_factory=Joiners)

    async def run(self) -> None:
        checked_term = -1
        while True:
            # A new leader checks at once, so a new cluster is at its level within a round trip
            # of its first election; after that, once a period.
            if not self.node.is_leader():
                wait = FOLLOWER_CHECK_S
            else:
                wait = self.period_s if self.node.term == checked_term else FIRST_CHECK_S
            await asyncio.sleep(wait)
            if self.node.leads_epoch():
                checked_term = self.node.term
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:      # the loop must outlive one bad round
                log.exception("feature level check failed")

    async def step(self) -> int | None:
        """One round; returns the level proposed (and applied), if any."""
        node = self.node
        if not node.leads_epoch():
            return None
        state = node.state
        current, own_max = state.feature_level, state.features.max_level
        if current >= own_max:
            return None
        target = target_level(current, own_max, await self.infos())
        if target is not None:
            target = self.joiners.cap(target, node.learners(), self.clock.now_ms())
        if target is None or target <= current or not node.leads_epoch():
            return None
        term = node.term
        entry = C.encode(C.FEATURE_LEVEL, rid=f"feature-{target}-{term}", now=self.clock.now_ms(), term=term,
                         by=f"node:{node.cfg.node_id}", level=target)
        try:
            result = await node.propose(entry, timeout=10.0)
        except ProposalError as e:
            log.warning("raising the feature level to %d: %s (next round retries)", target, e)
            return None
        if not result.ok:
            log.warning("raising the feature level to %d refused: %s", target, result.msg)
            return None
        log.info("cluster feature level raised from %d to %d (every voter supports it)", current, target)
        return target
