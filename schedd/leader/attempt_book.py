"""Every fencing token's life on the leader, one record per token: the attempt book.

Why one place: what the leader knows of an attempt it handed out (which worker stream holds it,
when that stream was sent it, when a worker last vouched for it, whether it was inherited from
an earlier leader, whether its result is on the way to the log, when a cancel was last pushed,
whether an expiry or a pause-cancel is being proposed) used to be spread over six maps in three
objects, each added and cleared on its own path; a token forgotten in one and kept in another is
how an attempt gets expired while its result is being committed (it ran twice). Here each token
has one `Attempt`, and the operations are the events of its life, so the reaper, the result path,
vouching and adoption all ask the same record. (The model is etcd raft's `tracker.Progress`: one
record per follower that every decision about it reads.)

The book holds what this leader saw, never what the log says: the replicated state
(`Execution.attempts`) is the truth about which token is current, and the book only decides when
to propose (expire, cancel) and what to trust meanwhile (vouching). A record is dropped when
nothing about its token is pending any more; a new leader starts with an empty book and marks
the running attempts it inherits (`inherit`).

Pure bookkeeping: no I/O, no clock (times are passed in), no lock (it lives on the leader's event
loop).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


class WorkerConn(Protocol):
    """What the book needs of a worker stream (schedd.leader.workers.WorkerConn): the tokens it
    holds, and how many messages were queued on it (a Protocol: the stream's module uses the book)."""

    name: str
    running: dict[int, str]
    sent: int

__all__ = ["Attempt", "AttemptBook"]


@dataclass(slots=True)
class Attempt:
    """What this leader knows of one fencing token."""

    token: int
    conn: WorkerConn | None = None   # the worker stream that holds it now (None: none does)
    sent_on: WorkerConn | None = None   # the stream its assignment was queued on, and as
    sent_at: int = 0                 # that stream's `sent`-th message (vouching: `vouches`)
    vouched_ms: int = 0              # last time a worker vouched for it (claim, hello, heartbeat,
                                     # result); 0: never since this leader's streams opened
    inherited: str = ""              # the worker that held it when this leader took over, until
                                     # that worker says what became of it ("": not inherited)
    settling: bool = False           # its result is on its way to the log
    cancel_sent_ms: int = 0          # when a cancel was last pushed to its worker (0: never)
    expiring: bool = False           # an `expire` entry for it is being proposed
    pause_cancelling: bool = False   # a `cancel` entry (its job was paused) is being proposed

    def idle(self) -> bool:
        """Nothing about this token is pending: the record can go."""
        return (self.conn is None and self.sent_on is None and not self.vouched_ms and not self.inherited
                and not self.settling and not self.cancel_sent_ms and not self.expiring
                and not self.pause_cancelling)


class AttemptBook:
    """The leader's records, by fencing token, with the events that change them."""

    __slots__ = ("_by_token", "_inherited")

    def __init__(self) -> None:
        self._by_token: dict[int, Attempt] = {}
        self._inherited = 0              # records with `inherited` set (the reaper asks every step)

    def __len__(self) -> int:
        return len(self._by_token)

    def __iter__(self) -> Iterator[Attempt]:
        return iter(list(self._by_token.values()))

    def get(self, token: int) -> Attempt | None:
        return self._by_token.get(token)

    def _record(self, token: int) -> Attempt:
        rec = self._by_token.get(token)
        if rec is None:
            rec = self._by_token[token] = Attempt(token)
        return rec

    def _tidy(self, rec: Attempt) -> None:
        if rec.idle():
            self._by_token.pop(rec.token, None)

    def _set_inherited(self, rec: Attempt, worker: str) -> None:
        self._inherited += bool(worker) - bool(rec.inherited)
        rec.inherited = worker

    # ------------------------------------------------------------ streams

    def hold(self, conn: WorkerConn, token: int, execution_id: str, now: int) -> Attempt:
        """`conn` holds the attempt (its claim committed for it, or it reconnected still running
        it): the stream vouches for it from `now`. A stream that held it before no longer does."""
        rec = self._record(token)
        if rec.conn is not None and rec.conn is not conn:
            rec.conn.running.pop(token, None)
        rec.conn, rec.vouched_ms = conn, now
        conn.running[token] = execution_id
        return rec

    def sent(self, conn: WorkerConn, token: int) -> None:
        """Its assignment was queued on `conn` as that stream's `conn.sent`-th message."""
        rec = self._record(token)
        rec.sent_on, rec.sent_at = conn, conn.sent

    def sent_at(self, conn: WorkerConn, token: int) -> int:
        """Which message of `conn` carried its assignment (0: none of this stream's)."""
        rec = self._by_token.get(token)
        return rec.sent_at if rec is not None and rec.sent_on is conn else 0

    def release(self, token: int) -> None:
        """Its stream no longer holds it (it reported a result, or the attempt expired)."""
        rec = self._by_token.get(token)
        if rec is None:
            return
        if rec.conn is not None:
            rec.conn.running.pop(token, None)
        rec.conn, rec.sent_on, rec.sent_at = None, None, 0
        self._tidy(rec)

    def holder(self, token: int) -> WorkerConn | None:
        rec = self._by_token.get(token)
        return rec.conn if rec is not None else None

    def vouch(self, token: int, now: int) -> None:
        """A worker said it still runs it (a heartbeat listing it, or its result)."""
        self._record(token).vouched_ms = now

    def vouched_ms(self, token: int) -> int:
        rec = self._by_token.get(token)
        return rec.vouched_ms if rec is not None else 0

    def streams_closed(self) -> None:
        """This leader's streams all ended (it stepped down): no stream holds or vouches for
        anything any more."""
        for rec in self:
            if rec.conn is not None:
                rec.conn.running.pop(rec.token, None)
            rec.conn, rec.sent_on, rec.sent_at, rec.vouched_ms = None, None, 0, 0
            self._tidy(rec)

    # ------------------------------------------------------------ leadership

    def inherit(self, held: dict[int, str]) -> None:
        """A takeover: the attempts running now (token -> worker) are this leader's to settle;
        what an earlier term of this node was proposing about them is forgotten."""
        for rec in self:
            self._set_inherited(rec, "")
            rec.cancel_sent_ms, rec.expiring = 0, False
            self._tidy(rec)
        for token, worker in held.items():
            self._set_inherited(self._record(token), worker)

    def await_word(self, token: int, worker: str) -> None:
        """A new stream of the very process it was claimed for left it out of its hello: it is
        `inherited` from that process's earlier stream, as from an earlier leader, until the
        worker says what became of it (the reaper's `inherited_claim_fate`). Not one whose result
        is on its way to the log or whose expiry is being proposed: that news is the answer."""
        rec = self._by_token.get(token)
        if rec is not None and (rec.settling or rec.expiring or rec.inherited):
            return
        self._set_inherited(self._record(token), worker)

    def inheriting(self) -> bool:
        """Whether a claim inherited at the takeover is still unsettled."""
        return self._inherited > 0

    def settle_inherited(self, token: int) -> None:
        """Its worker said what became of it (it holds it, or it reported): the usual rules apply."""
        rec = self._by_token.get(token)
        if rec is not None and rec.inherited:
            self._set_inherited(rec, "")
            self._tidy(rec)

    # ------------------------------------------------------------ results

    def result_arrived(self, token: int, now: int) -> None:
        """A result for it came: its stream releases it, and it counts as news (the attempt
        stays alive until its finish is committed); any cancel is answered."""
        self.release(token)
        rec = self._record(token)
        self._set_inherited(rec, "")
        rec.vouched_ms, rec.cancel_sent_ms = now, 0

    def begin_settling(self, token: int) -> bool:
        """Its result goes to the log; False when one already is on its way (a copy the worker
        resent after a lease without an ack)."""
        rec = self._record(token)
        if rec.settling:
            return False
        rec.settling = True
        return True

    def no_news(self, token: int) -> None:
        """What arrived for it was not news after all (a result naming no valid execution)."""
        rec = self._by_token.get(token)
        if rec is not None:
            rec.vouched_ms = 0
            self._tidy(rec)

    def result_settled(self, token: int) -> None:
        """Its finish committed or was given up (the worker resends it): no longer news."""
        rec = self._by_token.get(token)
        if rec is not None:
            rec.vouched_ms, rec.settling = 0, False
            self._tidy(rec)

    # ------------------------------------------------------------ expiry and cancels

    def start_expiry(self, token: int) -> None:
        self._record(token).expiring = True

    def expired(self, token: int) -> None:
        """Its expiry committed: its stream lets it go and nothing more is pending about it."""
        self.release(token)
        rec = self._by_token.get(token)
        if rec is not None:
            self._set_inherited(rec, "")
            rec.vouched_ms, rec.cancel_sent_ms = 0, 0
            self._tidy(rec)

    def end_expiry(self, token: int) -> None:
        rec = self._by_token.get(token)
        if rec is not None:
            rec.expiring = False
            self._tidy(rec)

    def cancel_pushed(self, token: int, now: int) -> None:
        self._record(token).cancel_sent_ms = now

    def start_pause_cancel(self, token: int) -> None:
        self._record(token).pause_cancelling = True

    def end_pause_cancel(self, token: int) -> None:
        rec = self._by_token.get(token)
        if rec is not None:
            rec.pause_cancelling = False
            self._tidy(rec)
