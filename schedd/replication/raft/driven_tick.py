"""Driven ticks: a replica ticked by the node's one tick loop (schedd.replication.ticker) instead
of a pysyncobj tick thread of its own.

- The loop's poller. pysyncobj builds its poller itself (`self._poller = createPoller(...)` in
  `SyncObj.__init__`) and hands it to the transport and its sockets there; `_poller` is a
  property here, so a poller given to the constructor (the loop's `GroupPoller`) is the one every
  part uses from the start.
- Mail first. With its own thread, a replica's tick ends in a poll that waits for its sockets and
  handles what arrives, and the next tick follows at once. Driven, the loop does the waiting (for
  every replica at once); when this replica's descriptors fired, its tick begins by reading them
  (`_read_mail`), inside the tick's clock, so a message is handled and acted on in one tick, as
  with a thread of its own. The tick then says how long it may wait (the deadline sleep's
  `_poll_wait`), which the loop waits instead of it.
- Bind in the tick. Built with autoTick off, stock `SyncObj.__init__` spins on binding the Raft
  port until it succeeds (a port held by another process: a core at 100% in the constructor, for
  as long as it is held); with a thread, it tries once there and then on every tick. The
  transport reports ready while the SyncObj is being built (`bind_in_tick`), so the loop's ticks
  bind it, retrying like the thread's.
"""

from __future__ import annotations

from typing import Any

from schedd.replication.raft.base import RaftBase


class DrivenTick(RaftBase):
    """Owns `_given_poller` (the loop's poller, None with a thread of its own), `_poller_in_use`,
    `_mail` (the loop saw this replica's descriptors fire) and `bind_in_tick`."""

    def _init_driven_tick(self, poller: Any) -> None:
        self._given_poller = poller
        self._mail = False
        self.bind_in_tick = poller is not None      # read by the transport while SyncObj.__init__ runs

    def _after_driven_init(self) -> None:
        """After SyncObj.__init__: the transport reports its real state from now on."""
        self.bind_in_tick = False

    @property
    def driven(self) -> bool:
        """Ticked by the node's tick loop (built with its poller, autoTick off)."""
        return self._given_poller is not None

    @property
    def _poller(self) -> Any:
        return self._poller_in_use

    @_poller.setter
    def _poller(self, made: Any) -> None:
        self._poller_in_use = self._given_poller if self._given_poller is not None else made

    def driven_tick(self, mail: bool) -> float:
        """The loop's tick of this replica (`mail`: its descriptors fired since its last tick);
        returns how long until it needs the next one (the deadline sleep)."""
        self._mail = mail
        self.doTick(0.0)
        return float(self._poll_wait(float(self._SyncObj__conf.autoTickPeriod)))

    def _take_mail(self) -> bool:
        mail, self._mail = self._mail, False
        return mail

    def _read_mail(self) -> None:
        """Mail first: what woke this replica, before its timers (the poll is timed as the
        tick's "poll+messages", like the poll that ends a tick). Also before the Raft port is
        bound, unlike stock's poll: the loop's selector reports a descriptor for as long as it
        is readable, so what woke it must be read or the loop would wake again at once."""
        self._poller.poll(0)
