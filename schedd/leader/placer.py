"""The leader's placement of window instants (schedd.core.windows): before a window opens, the
second its run starts, chosen where the herd forecast is least loaded and recorded in the log
(`place` entry) so every replica holds the same answer and it never moves.

`Placer.step(now, term)` runs in the dispatcher's leader step (only while this node leads its
epoch). It looks through the window jobs in passes, 10,000 a step (`windows.unplaced`, under the
node lock), and gathers the jobs whose next instant has no placement (a job just created or
changed, or one whose previous window just opened) to place them together at the pass's end
(or every MAX_PER_ROUND). A pass starts at most once every PLACE_EVERY_MS, and only when a window
job was written or its next instant moved since a pass found everything placed
(`view.window_moves`; a pass every RESCAN_MS all the same). Placing counts the load of each
window (the window runs already placed, under the lock; the forecast rows of exact-time jobs,
read under the lock in parts of READ_CHUNK; the forecast and the choice, `placing.place_all`, in
a thread off the event loop) and proposes the placements in entries of at most
`windows.MAX_PLACE_ITEMS`. A proposal that fails is simply planned again at the next pass: apply
refuses an instant no longer next and never moves one already placed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from schedd.core import commands as C
from schedd.core import placing, windows
from schedd.core.view import StateView
from schedd.replication.node import ProposalError

log = logging.getLogger("schedd.placer")

PLACE_EVERY_MS = 1_000            # a round of placements at most this often
RESCAN_MS = 60_000                # a look even when nothing seems to have moved (the count restarts on a restore)
MAX_PER_ROUND = 50_000            # window instants placed in one round, at most (a step looks at
                                  # 10,000 window jobs: windows.unplaced)
PROPOSE_TIMEOUT_S = 5.0
READ_CHUNK = 10_000               # forecast rows read under one hold of the node lock (as the API does)


class Placer:
    """The dispatcher's collaborator for window placements: stepped from its leader step."""

    def __init__(self, node, clock, spawn: Callable, view: StateView) -> None:
        self.node, self.clock, self.spawn, self.view = node, clock, spawn, view
        self.busy = False
        self.next_ms = 0
        self.cursor = ""                # where the look through the window jobs goes on ("": a new pass)
        self.pass_moves = -1            # view.window_moves when this pass began
        self.pass_clean = True          # this pass found nothing to place so far
        self.settled_at = -1            # view.window_moves when a pass last found nothing to place
        self.rescan_ms = 0
        self.gathered: list[windows.Want] = []   # this pass's instants to place, placed together

    def step(self, now: int, term: int) -> None:
        if self.busy or now < self.next_ms:
            return
        fresh = self.cursor == ""
        if fresh and self.view.window_moves == self.settled_at and now < self.rescan_ms:
            return
        with self.node.lock:
            if fresh:
                self.pass_moves, self.pass_clean = self.view.window_moves, True
            wants, self.cursor = self.view.unplaced_windows(MAX_PER_ROUND, self.cursor)
        if wants:
            self.pass_clean = False
            self.gathered += wants
        if self.cursor == "":                       # the pass is over
            self.next_ms, self.rescan_ms = now + PLACE_EVERY_MS, now + RESCAN_MS
            if self.pass_clean:
                self.settled_at = self.pass_moves
        if self.gathered and (self.cursor == "" or len(self.gathered) >= MAX_PER_ROUND):
            gathered, self.gathered = self.gathered, []
            self.busy = True                        # one load read and one choice for them all
            self.spawn(self._place(gathered, term))

    async def _place(self, wants: list[windows.Want], term: int) -> None:
        try:
            keys = sorted({(w.pool, w.lo, w.hi) for w in wants})
            with self.node.lock:
                taken = self.view.window_taken(keys)
                book = self.view.book()
                names = self.view.job_names()
            rows: list = []
            for i in range(0, len(names), READ_CHUNK):        # the lock released between parts
                with self.node.lock:
                    rows += self.view.exact_rows(names[i:i + READ_CHUNK])
            items = await asyncio.to_thread(placing.place_all, rows, wants, taken, book)
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
