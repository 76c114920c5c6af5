"""`schedd serve --join ADDRS`: a node with an empty data dir asks a running cluster to add it.

Before its Raft node exists, the joiner calls Membership.JoinCluster on the listed nodes in turn
(any node: a follower forwards it to the leader once), signed with the cluster secret
(NodeSigner: its node credential; under mTLS it also presents its node certificate). In three
steps, so that it votes only once it holds the cluster's state:
1. prepare: the leader checks the joiner's schedule dependencies (tzdata, croniter) against its
   own, its build's feature level and snapshot formats against the cluster's (a build below the
   cluster's level is refused: it would halt at once), its id and addresses, and answers the current voters;
2. learn: the joiner follows those voters as a non-voter (pysyncobj's read-only node, counted in
   no quorum) into its data dir, snapshot and log, until it has applied what the leader had
   committed (twice over, the second round being the tail);
3. join: the leader commits the add; the joiner starts as a voter on that data dir, so only the
   entries since step 2 remain to catch up (the membership is written to membership.json so a
   restart finds it).
A node that `add-node` (or `replace-node`) made a voter before it started skips step 2: it holds
a voter's place already, and a read-only connection from the address of a voter is not a
combination pysyncobj was built for (a bench run saw that replica stall); it catches up as the
voter it is.
A refusal (different dependencies, an id or address in use) stops the node with the leader's
message.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from schedd.api.auth import NodeSigner
from schedd.core.commands import FEATURES, FeatureTable
from schedd.ports.faults import NO_FAULTS, Faults
from schedd.replication import membership as members_file
from schedd.replication.membership import MemberInfo
from schedd.settings import NodeConfig
from schedd.versions import build_info
from schedd_proto import membership_pb2 as mpb
from schedd_proto import membership_pb2_grpc as mpb_grpc

log = logging.getLogger("schedd.join")

JOIN_METHOD = "/schedd.v1.Membership/JoinCluster"
JOIN_DEADLINE_S = 90.0
LEARN_DEADLINE_S = 120.0
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.FAILED_PRECONDITION)


class JoinRefused(RuntimeError):
    """The cluster said no, for a reason retrying will not change."""


def needs_join(cfg: NodeConfig) -> bool:
    """--join is acted on only with an empty (or missing) data dir: a node that holds state was
    a member already, and its own topology (dump, journal, membership.json) wins."""
    if not cfg.join:
        return False
    d = Path(cfg.data_dir)
    if d.exists() and any(d.iterdir()):
        log.info("join: %s already holds state: not joining again (its own membership wins)", d)
        return False
    return True


async def join(cfg: NodeConfig, channel_of: Callable[[str], grpc.aio.Channel], *,
               deadline_s: float = JOIN_DEADLINE_S, prepare: bool = False,
               table: FeatureTable = FEATURES) -> tuple[list[MemberInfo], bool]:
    """Ask the cluster to add this node (`prepare`: whether it may, without adding it); the
    voters after the add (before it, with `prepare`), and whether it was a voter already.
    `table`: this build's feature levels (a test's node may run an older build's), sent with
    the snapshot formats it reads: the leader refuses a build below the cluster's level.
    Raises JoinRefused."""
    build = build_info(table)
    tz, cron = build.schedule_deps()
    request = mpb.JoinClusterRequest(id=cfg.node_id, raft_address=cfg.raft_address,
                                     grpc_address=cfg.grpc_address, tzdata=tz, croniter=cron, prepare=prepare,
                                     max_feature_level=build.feature_level, version=build.version,
                                     snapshot_formats=build.readable_snapshot_formats, shards=cfg.shards,
                                     raft_ports=cfg.raft_ports if cfg.shards > 1 else "")
    signer = NodeSigner(cfg.secret)
    deadline = time.monotonic() + deadline_s
    last = ""
    while time.monotonic() < deadline:
        for addr in cfg.join:
            channel = channel_of(addr)
            try:
                meta = signer.metadata(cfg.node_id, None, JOIN_METHOD, int(time.time() * 1000))
                reply = await mpb_grpc.MembershipStub(channel).JoinCluster(request, timeout=30.0, metadata=meta)
            except grpc.aio.AioRpcError as e:
                last = f"{addr}: {e.code().name}: {e.details()}"
                busy = e.code() == grpc.StatusCode.FAILED_PRECONDITION and "in flight" in (e.details() or "")
                if e.code() not in RETRYABLE or (e.code() == grpc.StatusCode.FAILED_PRECONDITION and not busy):
                    raise JoinRefused(f"the cluster refused to add {cfg.node_id}: {e.details()}") from None
                log.info("join: %s", last)
                continue
            finally:
                await channel.close()
            members = [MemberInfo(m.id, m.raft_address, m.grpc_address) for m in reply.members]
            log.info("join: %s %s in %.1f s: %s", cfg.node_id, "may join" if prepare else "added by the cluster",
                     reply.seconds, "; ".join(reply.steps))
            return members, reply.already_member
        await asyncio.sleep(0.5)
    raise JoinRefused(f"no node of {', '.join(cfg.join)} added {cfg.node_id} within {deadline_s:g} s "
                      f"(last answer: {last or 'none'})")


async def learn(cfg: NodeConfig, voters: list[MemberInfo], *, deadline_s: float = LEARN_DEADLINE_S,
                faults: Faults = NO_FAULTS) -> float:
    """Follow `voters` as a non-voter until this data dir holds what the leader had committed
    (two rounds: the bulk, then the tail it committed meanwhile); the seconds it took. Past the
    deadline it stops anyway: the add then catches up the rest, as a voter."""
    from schedd.replication.node import RaftNode        # the composition root's own dependency
    started = time.monotonic()
    from schedd.core.shards import shares_port
    from schedd.runtime.groups import raft_ports
    node = RaftNode(cfg, learn_from=[m.raft_address for m in voters if m.raft_address != cfg.raft_address],
                    faults=faults, build=build_info().version,
                    port_group=0 if shares_port(cfg.shards, raft_ports(cfg)) else None)   # group 0's preamble
    try:
        target, rounds = 0, 0
        while time.monotonic() - started < deadline_s and rounds < 2:
            applied, leader_commit = node.learner_progress()
            if leader_commit > 1:
                target = target or leader_commit
                if applied >= target:
                    rounds += 1
                    target = leader_commit
            await asyncio.sleep(0.05)
        applied, leader_commit = node.learner_progress()
        log.info("join: learned up to index %d (the leader's commit index %d) as a non-voter in %.1f s%s",
                 applied, leader_commit, time.monotonic() - started,
                 "" if rounds >= 2 else f" (stopped at the {deadline_s:g} s deadline)")
    finally:
        await asyncio.to_thread(node.close)
    return time.monotonic() - started


def save(cfg: NodeConfig, members: list[MemberInfo]) -> None:
    """The membership the SyncObj starts with (schedd.replication.node reads it back)."""
    os.makedirs(cfg.data_dir, mode=0o700, exist_ok=True)
    members_file.write_file(cfg.data_dir, members)
