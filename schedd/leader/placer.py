"""The leader's placement of window instants (schedd.core.windows): before a window opens, the
second its run starts, chosen where the herd forecast is least loaded and recorded in the log
(`place` entry) so every replica holds the same answer and it never moves.

`Placer.step(now, term)` runs in the dispatcher's leader step (only while this node leads its
epoch), at most once every PLACE_EVERY_MS: it reads the window jobs whose next instant has no
placement (a job just created or changed, or one whose previous window just opened), counts
the load of each of their windows (the forecast of exact-time jobs, off the loop in a thread,
plus window runs already placed), chooses with `windows.plan` and proposes the placements in
entries of at most `windows.MAX_PLACE_ITEMS`. A proposal that fails is simply planned again at
the next round: apply refuses an instant no longer next and never moves one already placed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from schedd.core import commands as C
from schedd.core import windows
from schedd.core.view import StateView
from schedd.replication.node import ProposalError

log = logging.getLogger("schedd.placer")

PLACE_EVERY_MS = 1_000            # a round of placements at most this often
MAX_PER_ROUND = 20_000            # window instants placed in one round, at most
PROPOSE_TIMEOUT_S = 5.0


class Placer:
    """The dispatcher's collaborator for window placements: stepped from its leader step."""

    def __init__(self, node, clock, spawn: Callable, view: StateView) -> None:
        self.node, self.clock, self.spawn, self.view = node, clock, spawn, view
        self.busy = False
        self.next_ms = 0

    def step(self, now: int, term: int) -> None:
        if self.busy or now < self.next_ms:
            return
        self.next_ms = now + PLACE_EVERY_MS
        with self.node.lock:
            wants = self.view.unplaced_windows(MAX_PER_ROUND)
        if not wants:
            return
        self.busy = True
        self.spawn(self._place(wants, term))

    async def _place(self, wants: list[windows.Want], term: int) -> None:
        try:
            keys = sorted({(w.pool, w.lo, w.hi) for w in wants})
            with self.node.lock:
                rows = self.view.exact_rows()
                taken = {key: self.view.window_taken(*key) for key in keys}
            exact = await asyncio.to_thread(windows.exact_load, rows, wants)
            items = windows.plan(wants, exact, taken)
            for i in range(0, len(items), windows.MAX_PLACE_ITEMS):
                entry = C.encode(C.PLACE, rid="", now=self.clock.now_ms(), term=term, by=self.node.cfg.node_id,
                                 items=items[i:i + windows.MAX_PLACE_ITEMS])
                result = await self.node.propose(entry, timeout=PROPOSE_TIMEOUT_S)
                if not result.ok:
                    log.info("placements not recorded: %s", result.msg)
                    return
        except ProposalError as e:
            log.info("placements not confirmed: %s", e)
        finally:
            self.busy = False
