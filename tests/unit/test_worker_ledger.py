"""The worker's ledger (schedd_worker.ledger): what a heartbeat lists and when nothing is owed."""

from __future__ import annotations

from schedd_proto import scheduler_pb2 as pb
from schedd_worker.ledger import Held, Ledger


def held(token: int) -> Held:
    return Held(msg=pb.Assignment(execution_id=f"j@{token}", fencing_token=token), ex=None)


def test_a_heartbeat_lists_what_is_held_and_held_back_never_what_was_only_reported() -> None:
    led = Ledger()
    assert led.settled.is_set()
    for t in (3, 1, 2):
        led.accept(held(t))
    led.end(3)
    led.owe(pb.AttemptResult(fencing_token=3), hold_back=True)      # a herd is starting: held back
    led.end(2)
    led.owe(pb.AttemptResult(fencing_token=2), hold_back=False)     # sent at once: the leader has it
    assert led.listed() == [1, 3] and led.running() == {1: "j@1"}
    assert not led.settled.is_set()
    assert led.take_held_back() == [3] and led.listed() == [1]
    assert led.settle(3) is not None and not led.settled.is_set()
    assert led.settle(2) is not None and led.settled.is_set()
    assert led.settle(2) is None
