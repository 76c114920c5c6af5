"""`schedctl shard move SHARD --from N1 --to N4`: one replica of a shard group moves to another node.

Run by group 0's leader (the map's writer), one move at a time, add-then-remove so the group
never has fewer than R replicas (its quorum of R stays reachable with one replica lost
throughout):
1. the group's leader adds `to` to the group's Raft configuration (Membership.AddNode of that
   group: its member table, then pysyncobj's add), at `to`'s Raft address for it (`shards.shard_raft_address`);
2. group 0 records the map with `to` among the shard's replicas: `to`'s placement loop
   (schedd.runtime.placement) builds the replica, which catches up from the group's leader;
3. the move waits until `to`'s replica has applied what the group's leader had committed;
4. the group's leader removes `from` (handing leadership over first if it is `from`);
5. group 0 records the map without `from`: `from` drops its replica and deletes its files.
Each step is skipped when already done, so asking again after a failure part-way (a leader
lost, a timeout) resumes the move where it stopped; a shard mid-move refuses any other move.
Moving a dead node's replica: the group's R + 1 voters then include a dead one, so the add
commits only once `to` runs its replica, which it builds at step 2: step 1's first answer is a
timeout, its retry finds `to` in the configuration and goes on, and the add commits as soon as
`to`'s replica answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from schedd.api.shard_calls import GroupCallError, GroupCalls
from schedd.core.shards import ShardMap, ShardMapError, shard_raft_address
from schedd.ports.clock import Clock
from schedd.replication.node import NotApplied, OutcomeUnknown
from schedd.runtime.groups import raft_ports
from schedd.runtime.placement import MapKeeper, current_map, members_of, propose_map
from schedd_proto import membership_pb2 as mpb
from schedd_proto import scheduler_pb2 as pb

CATCH_UP_S = 300.0          # how long step 3 waits for the new replica
RETRY_S = 60.0              # how long a step retries a group that is electing or mid-change
ANSWER_WAIT_S = 15.0        # how long the target may take to answer before the move is refused
CallContext = Any


def MoveRefused(code: grpc.StatusCode, message: str) -> GroupCallError:
    """The move cannot go on: the status its caller gets, and why."""
    return GroupCallError(code, message)


class ShardMover:
    """Carries out moves on group 0's leader (module doc)."""

    def __init__(self, zero: Any, calls: GroupCalls, clock: Clock, keeper: MapKeeper) -> None:
        self.zero, self.calls, self.clock, self.keeper = zero, calls, clock, keeper
        # one move at a time (the event loop's thread only): the one running, by what it moves
        self._running: tuple[tuple[int, str, str], asyncio.Task] | None = None

    async def move(self, request: pb.MoveShardRequest) -> pb.MoveShardResponse:
        what = (request.shard, request.from_node, request.to_node)
        if self._running is not None and not self._running[1].done():
            if self._running[0] != what:
                raise MoveRefused(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"another shard move is in progress (shard {self._running[0][0]} from "
                                  f"{self._running[0][1]} to {self._running[0][2]}); retry after it")
            return await asyncio.shield(self._running[1])     # the same move asked again: its answer
        task = asyncio.get_running_loop().create_task(self._guarded(request))
        self._running = (what, task)
        return await asyncio.shield(task)

    async def _guarded(self, request: pb.MoveShardRequest) -> pb.MoveShardResponse:
        """The move, carried on even if the caller gives up (it would resume anyway)."""
        try:
            return await self._move(request)
        except ShardMapError as e:
            raise MoveRefused(grpc.StatusCode.FAILED_PRECONDITION, str(e)) from None

    async def _move(self, request: pb.MoveShardRequest) -> pb.MoveShardResponse:
        started = time.monotonic()
        steps: list[str] = []
        for _ in range(3):          # a node that joined a moment ago: the map lists it first
            await self.keeper.step()
        m = self._check(request)
        k, src, dst = request.shard, request.from_node, request.to_node
        if dst not in m.shard(k).replicas:
            await self._answers(dst)
            steps.append(await self._add(k, dst))
            m = await self._record(lambda now: now.add_replica(k, dst))
            steps.append(f"map version {m.version}: {dst} holds a replica of shard {k}")
        steps.append(await self._caught_up(k, dst))
        if src in m.shard(k).replicas:
            steps.append(await self._remove(k, src))
            m = await self._record(lambda now: now.remove_replica(k, src))
            steps.append(f"map version {m.version}: {src} no longer holds shard {k} (it drops its replica)")
        return pb.MoveShardResponse(steps=steps, seconds=time.monotonic() - started, map_version=m.version,
                                    replicas=list(m.shard(k).replicas))

    def _check(self, request: pb.MoveShardRequest) -> ShardMap:
        m = current_map(self.zero)
        if m is None:
            raise MoveRefused(grpc.StatusCode.FAILED_PRECONDITION,
                              "the shard map is not recorded yet (the cluster is starting, or not every node runs a "
                              "build that supports shard moves); retry shortly")
        k, src, dst = request.shard, request.from_node, request.to_node
        if not 0 <= k < m.count:
            raise MoveRefused(grpc.StatusCode.INVALID_ARGUMENT, f"shard {k} does not exist: the cluster has shards "
                                                                f"0 to {m.count - 1}")
        if k == 0:
            raise MoveRefused(grpc.StatusCode.INVALID_ARGUMENT,
                              "shard 0 holds the cluster's member table, ACL and shard map: every node holds it, so it "
                              "does not move (add a node with `schedd serve --join`, remove one with remove-node)")
        for role, nid in (("--from", src), ("--to", dst)):
            if not nid:
                raise MoveRefused(grpc.StatusCode.INVALID_ARGUMENT, f"{role} names no node")
            if nid not in m.nodes:
                raise MoveRefused(grpc.StatusCode.NOT_FOUND,
                                  f"{role} {nid!r} is not a node of the cluster (nodes: {', '.join(m.nodes)}); a new "
                                  "node joins with `schedd serve --join` first")
        reps = m.shard(k).replicas
        if src == dst:
            raise MoveRefused(grpc.StatusCode.INVALID_ARGUMENT, f"moving shard {k} from {src!r} to itself")
        if src not in reps and dst in reps and len(reps) == m.replication:
            return m                               # done already: answered as done (a retry)
        if src not in reps:
            raise MoveRefused(grpc.StatusCode.FAILED_PRECONDITION, f"{src!r} holds no replica of shard {k} "
                                                                   f"(its replicas: {', '.join(reps)})")
        if len(reps) > m.replication and dst not in reps:
            raise MoveRefused(grpc.StatusCode.FAILED_PRECONDITION,
                              f"shard {k} is mid-move (replicas {', '.join(reps)}): finish that move first (ask it "
                              "again) before another")
        return m

    async def _record(self, change: Callable[[ShardMap], ShardMap]) -> ShardMap:
        """`change` made to the map recorded now (group 0's leader may have recorded a node
        that joined since the move began) and recorded as the next version."""
        now = current_map(self.zero)
        assert now is not None                     # _check saw one; a map is never unrecorded
        m = change(now)
        try:
            result = await propose_map(self.zero, m, self.clock)
        except (NotApplied, OutcomeUnknown) as e:
            raise MoveRefused(grpc.StatusCode.UNAVAILABLE, f"shard map version {m.version}: {e}; ask again to "
                                                           "resume the move") from None
        if not result.ok:
            raise MoveRefused(grpc.StatusCode.UNAVAILABLE, f"shard map version {m.version} not recorded "
                                                           f"({result.msg}); ask again to resume the move")
        return m

    async def _group_call(self, k: int, method: str, request: Any, *, done_if: str = "",
                          done: Callable[[], Awaitable[bool]] | None = None) -> Any:
        """`method` of group k's Membership on its leader; retried while the group elects or
        finishes another change (within RETRY_S). `done_if`: a refusal meaning it was done;
        `done()`: asked after a call whose outcome is unknown, whether it took effect."""
        deadline = time.monotonic() + RETRY_S
        while True:
            try:
                return await self.calls.unary(k, "Membership", method, request)
            except GroupCallError as e:
                if done_if and done_if in e.details:
                    return None
                if e.code == grpc.StatusCode.UNAVAILABLE and done is not None and await done():
                    return None
                busy = e.code == grpc.StatusCode.FAILED_PRECONDITION and "in flight" in e.details
                if (e.code != grpc.StatusCode.UNAVAILABLE and not busy) or time.monotonic() >= deadline:
                    raise MoveRefused(e.code, f"shard {k}: {method}: {e.details}") from None
            await asyncio.sleep(0.5)

    async def _configured(self, k: int, nid: str) -> bool:
        """Whether a replica of group k lists `nid` in its Raft configuration (pysyncobj takes a
        configuration change when it appends it, committed or not)."""
        try:
            answer = await self.calls.unary(k, "Cluster", "ListShards", pb.ListShardsRequest(shard=k), timeout=5.0)
        except GroupCallError:
            return False
        return any(nid in row.replicas for row in answer.items)

    async def _answers(self, dst: str) -> None:
        """`dst` is up before it is made a voter: a group of R + 1 voters with one of them down
        stops at the next failure, so a move never starts by adding a node that does not answer."""
        info = members_of(self.zero).get(dst)
        addr = info.grpc_address if info is not None else ""
        deadline = time.monotonic() + ANSWER_WAIT_S       # a node that just joined opens its port next
        while True:
            try:
                await self.calls.unary(0, "Cluster", "ListShards", pb.ListShardsRequest(shard=0), address=addr,
                                       timeout=5.0)
                return
            except GroupCallError as e:
                if time.monotonic() >= deadline:
                    raise MoveRefused(grpc.StatusCode.FAILED_PRECONDITION,
                                      f"{dst} does not answer ({e.details}): start it before moving a replica "
                                      "to it") from None
            await asyncio.sleep(0.5)

    async def _add(self, k: int, dst: str) -> str:
        info = members_of(self.zero).get(dst)
        if info is None or not info.grpc_address:
            raise MoveRefused(grpc.StatusCode.FAILED_PRECONDITION, f"{dst!r} has no addresses in the member table")
        raft = shard_raft_address(info.raft_address, k, raft_ports(self.zero.cfg))
        request = mpb.AddNodeRequest(id=dst, raft_address=raft, grpc_address=info.grpc_address)
        # A group with a dead voter (a dead node's replica moving) commits the add only once
        # `dst` runs its replica, which it builds once the map places it: so an add whose
        # outcome is unknown but which the group's configuration holds goes on to the map.
        answer = await self._group_call(k, "AddNode", request, done_if=f"member {dst} ({raft}",
                                        done=lambda: self._configured(k, dst))
        if answer is None:
            return f"{dst} is in shard {k}'s Raft configuration (its commit may wait for {dst}'s replica)"
        return f"shard {k}'s leader added {dst} ({raft}) to the group: {'; '.join(answer.steps)}"

    async def _caught_up(self, k: int, dst: str) -> str:
        """Until `dst`'s replica has applied what the group's leader had committed when asked."""
        info = members_of(self.zero).get(dst)
        addr = info.grpc_address if info is not None else ""
        deadline = time.monotonic() + CATCH_UP_S
        target, last = 0, ""
        while time.monotonic() < deadline:
            try:
                if not target:
                    leader = await self.calls.unary(k, "Cluster", "ListShards", pb.ListShardsRequest(shard=k))
                    row = leader.items[0]
                    target = row.commit_index if row.leader_id and not row.lag else 0
                mine = (await self.calls.unary(k, "Cluster", "ListShards", pb.ListShardsRequest(shard=k),
                                               address=addr, timeout=5.0)).items[0]
                if target and mine.applied_index >= target:
                    return f"{dst}'s replica caught up (applied index {mine.applied_index} >= {target})"
                last = f"applied {mine.applied_index} of {target or '?'}"
            except (GroupCallError, IndexError) as e:
                last = str(e)
            await asyncio.sleep(0.3)
        raise MoveRefused(grpc.StatusCode.DEADLINE_EXCEEDED,
                          f"{dst}'s replica of shard {k} did not catch up within {CATCH_UP_S:g} s ({last}); is {dst} "
                          "running? Ask again to resume the move")

    async def _remove(self, k: int, src: str) -> str:
        answer = await self._group_call(k, "RemoveNode", mpb.RemoveNodeRequest(id=src), done_if="is not a member")
        if answer is None:
            return f"{src} was no longer in shard {k}'s Raft configuration"
        return f"shard {k}'s leader removed {src} from the group: {'; '.join(answer.steps)}"
