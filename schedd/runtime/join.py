"""`schedd serve --join ADDRS`: a node with an empty data dir asks a running cluster to add it.

Before its Raft node exists, the joiner calls Membership.JoinCluster on the listed nodes in turn
(a follower refuses a node's own signed call with UNAVAILABLE rather than forward it, so the
joiner simply tries the next address until the leader answers), signed with the cluster secret
(NodeSigner: its node credential; under mTLS it also presents its node certificate). The leader
checks the joiner's schedule dependencies (tzdata, croniter) against its own and commits the add;
the answer is the membership the joiner then builds its SyncObj with (written to membership.json
so a restart finds it). A refusal (different dependencies, an id or address in use) stops the
node with the leader's message.
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
from schedd.replication import membership as members_file
from schedd.replication.membership import MemberInfo
from schedd.settings import NodeConfig
from schedd.versions import build_info
from schedd_proto import membership_pb2 as mpb
from schedd_proto import membership_pb2_grpc as mpb_grpc

log = logging.getLogger("schedd.join")

JOIN_METHOD = "/schedd.v1.Membership/JoinCluster"
JOIN_DEADLINE_S = 90.0
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
               deadline_s: float = JOIN_DEADLINE_S) -> list[MemberInfo]:
    """Ask the cluster to add this node; the voters after the add. Raises JoinRefused."""
    tz, cron = build_info().schedule_deps()
    request = mpb.JoinClusterRequest(id=cfg.node_id, raft_address=cfg.raft_address,
                                     grpc_address=cfg.grpc_address, tzdata=tz, croniter=cron)
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
            log.info("join: %s added by the cluster in %.1f s: %s", cfg.node_id, reply.seconds,
                     "; ".join(reply.steps))
            return members
        await asyncio.sleep(0.5)
    raise JoinRefused(f"no node of {', '.join(cfg.join)} added {cfg.node_id} within {deadline_s:g} s "
                      f"(last answer: {last or 'none'})")


def save(cfg: NodeConfig, members: list[MemberInfo]) -> None:
    """The membership the SyncObj starts with (schedd.replication.node reads it back)."""
    os.makedirs(cfg.data_dir, mode=0o700, exist_ok=True)
    members_file.write_file(cfg.data_dir, members)
