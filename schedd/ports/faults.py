"""The fault-hooks port: the fixed points where a test process may record what the daemon did,
bend a rule on purpose (the fault suite's negative controls) or stop it dead (failpoints).

The daemon's composition root (runtime/daemon.py) picks one `Faults` object at start and hands
it to everything that has a hook; production gets `NO_FAULTS`, whose every hook does nothing
(returns its input unchanged), so the code around a hook has no test branch. The test-mode
implementation is `schedd.testing.hooks.TestFaults`.

Hooks receive what they need as arguments; a hook may read the public surface of what it is
given (a node's lock, state, term) and never reaches into private attributes. Typed loosely
(`Any`): this module sits below every schedd package and imports none of them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, frozen=True)
class ClaimAnswer:
    """What the `claim` hook answers: apply's result of the claim (its share of a `start_many`
    entry's), and whether the assignment was pushed already (an unsafe switch did, before the
    commit), so the leader must not push it again."""

    result: Any                      # schedd.core.results.ApplyResult
    pushed: bool = False


class Faults:
    """Every hook, doing nothing. A test implementation overrides the ones it uses."""

    __slots__ = ()

    #: build the Raft node on stock pysyncobj (no log-repair patches): negative control only
    stock_raft: bool = False

    def for_shard(self, shard: int) -> Faults:
        """The hooks shard group `shard`'s replica gets on a sharded node (every group its own
        RaftNode, dispatcher and hub): the same hooks; a recording implementation names the shard
        in its records, since each group's log has its own indexes, terms and leader."""
        return self

    # ---------------------------------------------------------------- the Raft node

    def transport(self, base: type) -> type:
        """The transport class the node uses (a test dials some peers through proxies)."""
        return base

    def feature_table(self, table: Any) -> Any:
        """The feature table (schedd.core.features) the node's state machine runs: a test runs
        an older build's, to simulate a rolling upgrade in one source tree."""
        return table

    def entry_to_apply(self, entry: str, index: int) -> str:
        """The entry apply sees for log index `index` (tick thread, every apply)."""
        return entry

    def applied(self, node_id: str, entry: str, result: Any, index: int, log_hash: bytes) -> None:
        """After `entry` applied at `index` (tick thread, every apply)."""

    def role_changed(self, node_id: str, old: int, new: int, term: int) -> None:
        """pysyncobj changed this node's role (tick thread)."""

    # ---------------------------------------------------------------- the leader

    def fire_applied(self, node: Any, created: Sequence[tuple[str, int]], index: int,
                     loop: asyncio.AbstractEventLoop) -> None:
        """Tick thread: a fire entry that created these intents applied on this node."""

    def fire_proposed(self, leader: Any, items: Sequence[tuple[str, int]],
                      spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        """The leader's loop: a fire entry for `items` was just proposed. `leader` is the
        Dispatcher (node, hub, assigner, clock); `spawn` runs a coroutine beside it."""

    def lease_grace_from(self, now: int) -> int:
        """A new leader's takeover time, from which running attempts get a lease of grace."""
        return now

    async def claim(self, proposal: Awaitable[Any], assigner: Any, conn: Any, name: str,
                    t: int, attempt: int, due: int, spec: Any) -> ClaimAnswer:
        """Commit a claim (`proposal` proposes its `start` entry) and answer apply's result
        (`spec`: the job's schedd.core.specs.JobSpec)."""
        return ClaimAnswer(await proposal)

    def claimed(self, token: int, name: str, t: int, worker: str) -> None:
        """A claim committed; its assignment is not pushed yet."""

    def due(self, clock: Any, due: int) -> int:
        """The due time pushed with an assignment (leader clock)."""
        return due

    def pushed(self, node: Any, worker: str, msg: Any) -> None:
        """The leader pushed `msg` (a LeaderMessage) to `worker`'s stream."""

    def assignment_pushed(self, node: Any, token: int, name: str, t: int, worker: str) -> None:
        """The leader pushed the assignment of a committed claim."""

    def result_arrived(self, token: int) -> None:
        """A worker's result for `token` arrived, before it is proposed."""

    def finish_token(self, node: Any, name: str, t: int, token: int) -> int:
        """The fencing token a `finish` entry carries for a result reported under `token`."""
        return token


NO_FAULTS = Faults()
