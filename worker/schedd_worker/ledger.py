"""The worker's attempts, one ledger: what it holds and what it owes the leader.

Why one place: the leader decides whether an attempt is alive from what this worker tells it
(the tokens its hello and heartbeats list, the results it reports and resends), so what the
worker tells must come from one record of what it holds. An attempt is first *held* (accepted:
waiting for its due time or a slot, or running), then its result is *owed* (reported, resent
after a lease without an acknowledgement, until the leader settles it); a result may be *held
back* for a moment while a herd starts (`Reports.report`). A heartbeat lists what is held
and what is held back, never what was only reported: the leader has that result. The shape is
the leader's (schedd.leader.attempt_book): one ledger that every decision about an attempt reads.

No I/O here: `reports` sends, `starts` times; the ledger only keeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schedd_proto import scheduler_pb2 as pb
from schedd_worker.handlers.base import Cancel

if TYPE_CHECKING:
    from schedd_worker.executors import Assignment, Call

__all__ = ["Held", "Owed", "Ledger"]


@dataclass(slots=True, eq=False)
class Held:
    """An accepted attempt, until it ends."""

    msg: pb.Assignment
    ex: Assignment | None                # built when accepted; None: invalid handler_json
    call: Call | None = None             # a Python handler resolved when accepted
    cancel: Cancel = field(default_factory=Cancel)
    phase: str = "waiting"               # waiting (for its due time, or due and for a slot) |
                                         # running (takes a slot) | ended
    task: asyncio.Future | None = None   # ends with the attempt, from its start on: its own task,
                                         # or its handler's future (watched by callback)
    started: tuple[Call, asyncio.Future, int] | None = None   # a prepared call, once started
    timer: asyncio.TimerHandle | None = None                  # its timeout, while watched by callback
    queued_ms: int = 0                   # when it began to wait for a slot (due, every slot busy)


@dataclass(slots=True, eq=False)
class Owed:
    """A result reported and not settled by the leader yet."""

    result: pb.AttemptResult
    sent_at: float | None = None         # loop time of the last send, None = not sent yet


@dataclass(slots=True)
class Ledger:
    held: dict[int, Held] = field(default_factory=dict)      # token -> accepted, not ended
    owed: dict[int, Owed] = field(default_factory=dict)      # token -> result not settled
    held_back: list[int] = field(default_factory=list)       # owed results not sent yet
    settled: asyncio.Event = field(default_factory=asyncio.Event)   # set: nothing is owed

    def __post_init__(self) -> None:
        self.settled.set()

    # ------------------------------------------------------------ held

    def accept(self, att: Held) -> None:
        self.held[att.msg.fencing_token] = att

    def end(self, token: int) -> None:
        """The attempt ended (ran, or was handed back): no longer held."""
        self.held.pop(token, None)

    def attempts(self) -> Iterator[Held]:
        """The held attempts, safe to change the ledger while iterating."""
        return iter(list(self.held.values()))

    def running(self) -> dict[int, str]:
        """token -> execution id of every held attempt (introspection)."""
        return {t: a.msg.execution_id for t, a in self.held.items()}

    def listed(self) -> list[int]:
        """The tokens a heartbeat lists: those held, and those whose result is held back."""
        return sorted([*self.held, *self.held_back])

    # ------------------------------------------------------------ owed

    def owe(self, result: pb.AttemptResult, *, hold_back: bool) -> None:
        self.owed[result.fencing_token] = Owed(result)
        self.settled.clear()
        if hold_back:
            self.held_back.append(result.fencing_token)

    def take_held_back(self) -> list[int]:
        held, self.held_back = self.held_back, []
        return held

    def settle(self, token: int) -> Owed | None:
        """The leader settled its result (committed, stale or refused): no longer owed."""
        u = self.owed.pop(token, None)
        if u is not None and not self.owed:
            self.settled.set()
        return u
