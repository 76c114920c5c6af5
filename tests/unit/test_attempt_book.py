"""The leader's attempt book (schedd.leader.attempt_book): each fencing token's life is one
record, changed only by the events of that life, and dropped once nothing about it is pending
(so the book does not grow with the attempts a leader has seen)."""

from __future__ import annotations

from schedd.leader.attempt_book import AttemptBook
from schedd.leader.workers import WorkerConn


def conn(name: str = "w1") -> WorkerConn:
    return WorkerConn(name=name, slots=4, pool="", labels={}, peer="p", connected_ms=0, last_heartbeat_ms=0)


def test_a_claimed_attempt_reported_and_committed_leaves_nothing_behind() -> None:
    book, w = AttemptBook(), conn()
    book.hold(w, 7, "j@7", 100)
    w.sent += 1
    book.sent(w, 7)
    assert w.running == {7: "j@7"} and book.holder(7) is w and book.sent_at(w, 7) == 1
    assert book.vouched_ms(7) == 100
    book.result_arrived(7, 200)
    assert w.running == {} and book.holder(7) is None and book.vouched_ms(7) == 200   # news until committed
    assert book.begin_settling(7) and not book.begin_settling(7)     # a resent copy is not proposed twice
    book.result_settled(7)
    assert len(book) == 0


def test_a_reconnected_stream_takes_over_what_the_old_one_held() -> None:
    book, old, new = AttemptBook(), conn(), conn()
    book.hold(old, 7, "j@7", 100)
    old.sent += 1
    book.sent(old, 7)
    book.hold(new, 7, "j@7", 300)                 # the hello of the new stream listed it
    assert old.running == {} and new.running == {7: "j@7"} and book.holder(7) is new
    assert book.sent_at(new, 7) == 0 and book.sent_at(old, 7) == 1   # not sent on the new stream


def test_an_inherited_claim_is_settled_by_its_result_its_holder_or_its_expiry() -> None:
    book, w = AttemptBook(), conn()
    book.inherit({1: "w1", 2: "w1", 3: "w2"})
    assert book.inheriting()
    book.result_arrived(1, 10)
    book.settle_inherited(2)
    assert book.inheriting()
    book.start_expiry(3)
    book.expired(3)
    book.end_expiry(3)
    assert not book.inheriting()
    book.result_settled(1)
    assert len(book) == 0
    book.hold(w, 4, "j@4", 0)
    book.inherit({4: "w1"})                          # a second takeover forgets the first's proposals
    book.start_expiry(4)
    book.cancel_pushed(4, 50)
    book.inherit({4: "w1"})
    rec = book.get(4)
    assert rec is not None and not rec.expiring and rec.cancel_sent_ms == 0 and rec.inherited == "w1"


def test_an_expiry_or_a_step_down_lets_the_stream_go() -> None:
    book, w = AttemptBook(), conn()
    book.hold(w, 5, "j@5", 10)
    book.cancel_pushed(5, 20)
    book.start_expiry(5)
    book.expired(5)
    assert w.running == {} and book.get(5) is not None      # still expiring
    book.end_expiry(5)
    assert len(book) == 0
    book.hold(w, 6, "j@6", 10)
    book.streams_closed()
    assert w.running == {} and len(book) == 0


def test_a_pause_cancel_and_a_malformed_result_leave_nothing_behind() -> None:
    book = AttemptBook()
    book.start_pause_cancel(8)
    assert book.get(8) is not None and book.get(8).pause_cancelling
    book.end_pause_cancel(8)
    book.result_arrived(9, 5)
    book.no_news(9)
    assert len(book) == 0
