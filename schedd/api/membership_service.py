"""The Membership service: add, remove and join Raft voters at run time, one change at a time.

Every call is forwarded to the leader, which holds the ChangeGate (schedd.replication.membership)
from the request until the change is committed and, for an add, until the new node has caught up
(its matchIndex reached the add's commit index) or CATCH_UP_S passed: a second request meanwhile
is FAILED_PRECONDITION, naming the change in flight, except a remove of the node an add is
still waiting for: that add is committed, so the remove is the next single-server change and
may go at once (ChangeGate); an add of a wrong address is undone in seconds, not CATCH_UP_S.

An add commits, in order: the member table with the new member (so every node can name it and
reach its gRPC port before it votes), then pysyncobj's add (it votes from that moment: pysyncobj
has no learner stage, architecture.md "Facts" §1f). A joiner first asks with `prepare` (checked, nothing
committed) and follows the cluster as a read-only node until it has caught up, so that window
is short (schedd.runtime.join; docs/operations.md "Membership"). A remove
commits pysyncobj's remove, then the table without the member. The leader cannot remove itself
in pysyncobj: it hands leadership to a caught-up voter first and forwards the call there.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import grpc

from schedd.api import auth
from schedd.api.service import CommittingService, Router, routed
from schedd.core import commands as C
from schedd.core import features
from schedd.core import members as member_table
from schedd.core.shards import PER_GROUP_PORTS, SHARED_PORT, ShardMapError, recorded_map
from schedd.leader.features import Joiners
from schedd.ports.clock import Clock
from schedd.ports.metrics import Metrics
from schedd.ports.rpc import CallContext
from schedd.api.membership_view import member_pb
from schedd.replication.membership import Change, ChangeRefused, MemberInfo
from schedd.replication.node import NotApplied, OutcomeUnknown, RaftNode
from schedd.security.tls import peer_principal
from schedd.versions import build_info
from schedd_proto import membership_pb2 as mpb
from schedd_proto import membership_pb2_grpc as mpb_grpc
from schedd_proto import scheduler_pb2 as spb
from schedd_proto import scheduler_pb2_grpc as spb_grpc

log = logging.getLogger("schedd.api.membership")

CATCH_UP_S = 60.0          # the gate waits at most this long for an added node to catch up
LEADER_HANDOFF_S = 10.0    # removing the leader: how long to wait for the next one


def _valid_member(nid: str, raft: str, grpc_addr: str) -> str:
    """Why (id, raft, grpc) cannot be a member ("" if it can)."""
    parsed = member_table.parse_table([[nid, raft, grpc_addr]])
    return parsed if isinstance(parsed, str) else ""


def joiner_behind(request: mpb.JoinClusterRequest, table: C.FeatureTable, level: int) -> str:
    """Why a joiner's build may not join a cluster at feature level `level` ("" if it may): below
    the level, it would stop applying at once (or, a build before the halt, apply newer entries
    as invalid, diverge, and once elected dispatch what it believed pending); unable to
    read the snapshot format the cluster writes, it could not even catch up. A joiner that sends
    no level (a build from before this check) is refused above level 1."""
    who = request.id or "?"
    if request.max_feature_level < level:
        runs = f"runs schedd {request.version}" if request.version else "runs an older schedd"
        said = (f"feature level {request.max_feature_level}" if request.max_feature_level
                else "no feature level (a build from before feature levels were reported at join)")
        return (f"refusing {who}: it {runs}, {said}; the cluster is at {level}: upgrade "
                f"{who} to a build that supports feature level {level}, then start it again")
    fmt = table.format_for(level)
    if fmt not in request.snapshot_formats:
        return (f"refusing {who}: it reads snapshot formats {list(request.snapshot_formats) or 'none reported'}, "
                f"the cluster writes format {fmt}: upgrade {who}")
    return ""


class MembershipService(CommittingService, mpb_grpc.MembershipServicer):
    SERVICE = "Membership"

    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, router: Router,
                 joiners: Joiners | None = None) -> None:
        self.node, self.clock, self.metrics, self.router = node, clock, metrics, router
        self.joiners = joiners if joiners is not None else Joiners()   # the feature raiser's too
        self._tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------ RPCs

    @routed(write=True)
    async def AddNode(self, request: mpb.AddNodeRequest, context: CallContext) -> mpb.MembershipChangeResponse:
        return await self._add(context, request.id, request.raft_address, request.grpc_address,
                               wait_s=max(0.0, request.wait_caught_up_s))

    async def JoinCluster(self, request: mpb.JoinClusterRequest, context: CallContext) -> mpb.MembershipChangeResponse:
        """Not @routed: a follower forwards the joiner's own signed call once (a forwarded
        call is otherwise never forwarded again)."""
        info = auth.current()
        own = info is not None and info.forwarded_by == request.id and info.name == f"node:{request.id}"
        if own:
            await self._check_joiner_certificate(request, context)
        if self.node.is_leader():
            return await self._join(request, context)
        return await self.router.forward(self.SERVICE, "JoinCluster", request, context, first_hop=own)

    @staticmethod
    async def _check_joiner_certificate(request: mpb.JoinClusterRequest, context: CallContext) -> None:
        """Under mTLS a joiner presents its node certificate: it must name the node that joins."""
        try:
            cert = peer_principal(context)
        except Exception:  # noqa: BLE001 - no auth context (plaintext, a test's fake)
            cert = None
        if cert is not None and cert != f"node/{request.id}":
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"a node may join only as itself: the certificate names {cert}, the request {request.id!r}")

    async def _join(self, request: mpb.JoinClusterRequest, context: CallContext) -> mpb.MembershipChangeResponse:
        mine = build_info().schedule_deps()
        theirs = (request.tzdata, request.croniter)
        if theirs != mine:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"refusing {request.id or '?'}: its schedule dependencies (tzdata {theirs[0] or '?'}, "
                                f"croniter {theirs[1] or '?'}) differ from the cluster's (tzdata {mine[0]}, "
                                f"croniter {mine[1]}); replicas would compute different instants. Install "
                                "the same versions on the joining node")
        behind = joiner_behind(request, self.node.state.features, self.node.state.feature_level)
        if behind:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, behind)
        unlike = self._shards_unlike(request)
        if unlike:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, unlike)
        if self.router is not None and self.router.shards > 1 and not self.node.state.shard_map:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the cluster's shard map is not recorded yet (it is "
                                                             "starting): retry in a few seconds")
        info = auth.current()
        who = info.name if info is not None else ""
        if who.startswith("node:") and who != f"node:{request.id}":
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"{who} may join only as itself, not as {request.id!r}")
        known = self.node.membership.by_id(request.id)
        if known is not None and (known.raft_address, known.grpc_address) == (request.raft_address,
                                                                              request.grpc_address):
            out = self._response(["already a member with these addresses: nothing to do"], time.monotonic())
            out.already_member = True
            return out
        if request.prepare:
            why = _valid_member(request.id, request.raft_address, request.grpc_address)
            clash = next((m for m in self.node.membership.members() if m.id == request.id
                          or request.raft_address == m.raft_address or request.grpc_address == m.grpc_address), None)
            if why:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
            if clash is not None:
                await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                    f"member {clash.id} ({clash.raft_address}, gRPC {clash.grpc_address}) "
                                    f"already has that id or an address of {request.id}")
            self.joiners.note(request.id, request.max_feature_level, self.clock.now_ms())
            return self._response(["may join: follow the cluster as a non-voter, then ask again"], time.monotonic())
        try:
            return await self._add(context, request.id, request.raft_address, request.grpc_address, wait_s=0.0)
        finally:
            self.joiners.forget(request.id)          # a voter now (its NodeInfo counts), or refused

    def _replicas_held(self, nid: str) -> list[int]:
        """The shard groups other than this one (group 0) that the shard map places on `nid`: a
        sharded cluster's node leaves group 0 only once its other replicas moved away."""
        router = self.router
        if router is None or router.shards <= 1 or router.shard not in (0, None):
            return []
        try:
            m = recorded_map(self.node.state.shard_map)
        except ShardMapError:
            return []
        return [k for k in (m.replicas_on(nid) if m is not None else ()) if k != 0]

    async def _answers(self, nid: str) -> bool:
        """Whether node `nid` answers now. A dead node holding replicas leaves group 0 first (as
        `replace-node` removes before it adds: a new node could not be added to a group with a
        dead voter and no room for it in the quorum); its replicas then move to the new node."""
        member = self.node.membership.by_id(nid)
        if member is None or not member.grpc_address:
            return False
        try:
            await spb_grpc.ClusterStub(self.router._channel(member.grpc_address)).NodeInfo(
                spb.NodeInfoRequest(), timeout=3.0, metadata=self.router.node_metadata("/schedd.v1.Cluster/NodeInfo"))
        except grpc.aio.AioRpcError:
            return False
        return True

    def _shards_unlike(self, request: mpb.JoinClusterRequest) -> str:
        """Why a joiner cannot join for its shard count ("" if it may): it must be the cluster's
        (fixed at creation). A sharded cluster takes a node only once its shard map is
        recorded: the first map lists the nodes it was made with as holding every shard."""
        theirs, ours = max(1, request.shards), max(1, self.router.shards if self.router is not None else 1)
        who = request.id or "?"
        if theirs != ours:
            return (f"refusing {who}: its config says shards = {theirs}, the cluster has {ours} shard group(s); "
                    f"set shards = {ours} in its config")
        if ours > 1:
            return raft_ports_unlike(who, request.raft_ports, getattr(self.node.cfg, "raft_ports", "") or SHARED_PORT)
        return ""

    @routed(write=True)
    async def RemoveNode(self, request: mpb.RemoveNodeRequest, context: CallContext) -> mpb.MembershipChangeResponse:
        held = self._replicas_held(request.id)
        if held and await self._answers(request.id):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"{request.id} still holds replicas of shards {', '.join(map(str, held))}: move each "
                                f"first (schedctl shard move K --from {request.id} --to NODE), then remove it")
        started = time.monotonic()
        ms = self.node.membership
        target = ms.by_id(request.id)
        if target is None and any(m.id == request.id for m in ms.recorded()):
            return await self._forget(request.id, context, started)
        if target is None:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"{request.id!r} is not a member (members: {ms.describe()})")
        voters = ms.members()
        if len(voters) <= 1:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "cannot remove the last member")
        if target.raft_address == self.node.cfg.raft_address:
            return await self._hand_off(request, context)
        pending = self.node.changes.current
        change = await self._begin(context, "remove", target)
        steps: list[str] = []
        if pending is not None and pending.outcome:
            steps.append(f"took back the add of {target.id}: committed, never caught up")
        try:
            self._step(change, steps, "removing it from the Raft configuration")
            await self._change_config(context, change, "remove")
            if features.enabled(self.node.state, C.MEMBERS):
                self._step(change, steps, "recording the member table without it")
                table = {m.id: (m.raft_address, m.grpc_address) for m in voters if m.id != target.id}
                await self._commit(context, C.MEMBERS, uuid.uuid4().hex, members=member_table.rows_of(table))
            # else: a cluster below the member table's feature level (mid rolling upgrade) still
            # removes a dead node, or it could never raise the level: names come from the config.
            steps.append(f"done: stop {target.id} now (it no longer gets entries or votes)")
            self.node.changes.end(change, "committed")
        except BaseException:
            self.node.changes.end(change, f"failed at: {change.step}")
            raise
        return self._response(steps, started)

    # ------------------------------------------------------------ steps

    async def _forget(self, nid: str, context: CallContext, started: float) -> mpb.MembershipChangeResponse:
        """A member recorded in the table but not voting (an add that failed after its record):
        only the table changes."""
        change = await self._begin(context, "remove", MemberInfo(nid, "", ""))
        try:
            table = {m.id: (m.raft_address, m.grpc_address) for m in self.node.membership.members()}
            await self._commit(context, C.MEMBERS, uuid.uuid4().hex, members=member_table.rows_of(table))
            self.node.changes.end(change, "committed")
        except BaseException:
            self.node.changes.end(change, "failed")
            raise
        return self._response([f"{nid} was recorded but not voting: the member table no longer lists it"],
                              started)

    async def _add(self, context: CallContext, nid: str, raft: str, grpc_addr: str, *,
                   wait_s: float) -> mpb.MembershipChangeResponse:
        started = time.monotonic()
        why = _valid_member(nid, raft, grpc_addr)
        if why:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        ms = self.node.membership
        voters = ms.members()
        for m in voters:
            if m.id == nid or m.raft_address == raft or m.grpc_address == grpc_addr:
                await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                    f"member {m.id} ({m.raft_address}, gRPC {m.grpc_address}) already has "
                                    f"that id or an address of {nid}; remove it first (or use replace-node)")
        if len(voters) == 1:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "a 1-node cluster cannot grow at run time (its Raft port does not listen "
                                "without peers); start it with its peers in the config instead")
        member = MemberInfo(nid, raft, grpc_addr)
        change = await self._begin(context, "add", member)
        steps: list[str] = []
        try:
            self._step(change, steps, "recording its id and addresses in the member table")
            table = {m.id: (m.raft_address, m.grpc_address) for m in voters}
            table[nid] = (raft, grpc_addr)
            await self._commit(context, C.MEMBERS, uuid.uuid4().hex, members=member_table.rows_of(table))
            self._step(change, steps, "adding it to the Raft configuration (it votes from this commit)")
            await self._change_config(context, change, "add")
            self.node.changes.committed(change)
            add_index = self.node.status().commit_index
            self._step(change, steps, f"committed; waiting for it to catch up to index {add_index}")
        except BaseException:
            self.node.changes.end(change, f"failed at: {change.step}")
            raise
        task = asyncio.get_running_loop().create_task(self._catch_up(change, raft, add_index))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        caught_up = False
        if wait_s > 0:
            try:
                caught_up = await asyncio.wait_for(asyncio.shield(task), wait_s)
            except TimeoutError:
                steps.append(f"not caught up within {wait_s:g} s (still catching up)")
        if caught_up:
            steps.append("caught up")
        return self._response(steps, started, caught_up=caught_up)

    async def _catch_up(self, change: Change, raft: str, index: int) -> bool:
        """Hold the gate until the new voter's matchIndex reaches `index` (or CATCH_UP_S)."""
        deadline = time.monotonic() + CATCH_UP_S
        try:
            while time.monotonic() < deadline:
                if change.outcome:              # taken back by a remove of the node (ChangeGate)
                    return False
                st = self.node.status()
                if st.role != "leader":
                    self.node.changes.end(change, "leadership changed while it caught up")
                    return False
                if st.match_index.get(raft, 0) >= index:
                    self.node.changes.end(change, "committed and caught up")
                    return True
                await asyncio.sleep(0.1)
            self.node.changes.end(change, f"committed; not caught up within {CATCH_UP_S:g} s "
                                          "(is the new node running?)")
            return False
        except BaseException:
            self.node.changes.end(change, "catch-up watch stopped")
            raise

    async def _hand_off(self, request: mpb.RemoveNodeRequest, context: CallContext) -> mpb.MembershipChangeResponse:
        """Removing the leader: hand leadership to a caught-up voter, then forward the call."""
        if self.node.changes.current is not None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"another membership change is in flight ({self.node.changes.in_flight()})")
        log.info("membership: removing the leader %s: handing leadership over first", request.id)
        self.node.transfer_leadership()
        deadline = time.monotonic() + LEADER_HANDOFF_S
        while time.monotonic() < deadline:
            leader = self.node.leader_raft_address()
            if not self.node.is_leader() and leader and leader != self.node.cfg.raft_address:
                return await self.router.forward(self.SERVICE, "RemoveNode", request, context)
            await asyncio.sleep(0.05)
        await context.abort(grpc.StatusCode.UNAVAILABLE,
                            f"{request.id} is the leader and no voter took over within {LEADER_HANDOFF_S:g} s; retry")

    async def _begin(self, context: CallContext, op: str, member: MemberInfo) -> Change:
        try:
            return self.node.changes.begin(op, member.id, member.raft_address)
        except ChangeRefused as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
            raise                       # unreachable: abort raises

    def _step(self, change: Change, steps: list[str], step: str) -> None:
        self.node.changes.step(change, step)
        steps.append(step)

    async def _change_config(self, context: CallContext, change: Change, op: str) -> None:
        try:
            await self.node.change_config(op, change.raft_address)
        except NotApplied as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{op} {change.node_id} not committed ({e}); "
                                                             "safe to retry")
        except OutcomeUnknown as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{op} {change.node_id}: {e}; check "
                                                             "`schedctl cluster status` before retrying")

    def _response(self, steps: list[str], started: float, *, caught_up: bool = False) -> mpb.MembershipChangeResponse:
        return mpb.MembershipChangeResponse(members=[member_pb(m) for m in self.node.membership.members()],
                                            steps=steps, seconds=time.monotonic() - started, caught_up=caught_up)


def raft_ports_unlike(who: str, theirs: str, ours: str) -> str:
    """Why a joiner of a sharded cluster cannot join for its Raft port mode ("" if it may): its
    groups must listen as the cluster's do, or no peer reaches them (a joiner's empty data dir
    makes it choose one port, a cluster made by the build before the shared port has a port per
    group). A joiner that sends no mode is such a build: a port per group."""
    theirs = theirs or PER_GROUP_PORTS
    if theirs == ours:
        return ""
    return (f"refusing {who}: its Raft port mode is {theirs!r} and this cluster's nodes use {ours!r} "
            f"(every node of a cluster must use the same); set raft_ports = \"{ours}\" in its config")
