"""The typed apply result (schedd.core.results): each entry kind answers its own payload, what is
kept in replicated state is the plain form it always was (keys and order: snapshots and the
state digest hold it), and effects are reported once, by the apply that made them."""

from __future__ import annotations

import pytest

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.results import ApplyResult, CancelAttempt, Code, EpochApplied, Launch, ok, reject
from tests.support.state import T0, Harness


def test_a_result_has_a_typed_payload_and_a_plain_form():
    r = ok(R.Stored(True, "j1", 1), effects=(Launch("j1", T0),))
    assert r.ok and r.code is Code.OK and r.of(R.Stored).version == 1
    assert r.as_dict() == {"ok": True, "code": "ok", "created": True, "name": "j1", "version": 1}
    with pytest.raises(TypeError, match="expected a Claimed result"):
        r.of(R.Claimed)                                    # a proposer reading the wrong kind is a bug
    no = reject(Code.NOT_FOUND, "job 'x' not found", position=3)
    assert no.as_dict() == {"ok": False, "code": "not_found", "msg": "job 'x' not found", "position": 3}
    assert ApplyResult.from_dict(no.as_dict(), C.PUT_MANY) == no
    back = ApplyResult.from_dict(r.as_dict(), C.PUT)
    assert back.payload == r.payload and back.effects == ()
    with pytest.raises(ValueError):
        reject("no_such_code", "x")                    # every code is one of Code
    odd = ApplyResult.from_dict({"ok": False, "code": "from_the_future", "msg": "m"})   # never raises
    assert odd.code is Code.INTERNAL and odd.msg == "m"
    newer = ApplyResult.from_dict({"ok": True, "code": "ok", "what": 1}, C.PUT)   # a payload it cannot place
    assert newer.ok and newer.payload == R.Empty()


@pytest.mark.parametrize(("result", "plain"), [
    (ok(R.Finished("FAILED", 123)), {"ok": True, "code": "ok", "state": "FAILED", "retry_at": 123}),
    (ok(R.Finished("FAILED", None, never_started=True)),
     {"ok": True, "code": "ok", "state": "FAILED", "retry_at": None, "never_started": True}),
    (ok(R.Finished("SUCCEEDED", None)).again(),
     {"ok": True, "code": "ok", "state": "SUCCEEDED", "retry_at": None, "deduplicated": True}),
    (ok(R.Cancelled("CANCELLED")), {"ok": True, "code": "ok", "state": "CANCELLED"}),
    (ok(R.Cancelled("RUNNING", 7, cancel_requested=True)),
     {"ok": True, "code": "ok", "state": "RUNNING", "token": 7, "cancel_requested": True}),
    (ok(R.BatchAborted(True)), {"ok": True, "code": "ok", "aborted": True}),
    (ok(R.BatchAborted(False, True, 2, 1)),
     {"ok": True, "code": "ok", "aborted": False, "committed": True, "created": 2, "updated": 1}),
    (ok(R.ClaimedMany((ok(R.Claimed(1024, 1)), reject(Code.CONFLICT, "taken")))),
     {"ok": True, "code": "ok", "claims": [{"ok": True, "code": "ok", "token": 1024, "attempt": 1},
                                           {"ok": False, "code": "conflict", "msg": "taken"}]}),
    (reject(Code.BUILD_BEHIND, "m", cluster_level=7), {"ok": False, "code": "build_behind", "msg": "m", "cluster_level": 7}),
    (ok(), {"ok": True, "code": "ok"}),
])
def test_the_stored_form_is_the_keys_in_their_order(result, plain):
    """What the dedup table keeps must stay exactly these items, in this order (snapshots hold
    it), and read back as the same result (effects aside)."""
    assert list(result.as_dict().items()) == list(plain.items())
    kinds = {R.Finished: C.FINISH, R.Cancelled: C.CANCEL, R.BatchAborted: C.BATCH_ABORT, R.ClaimedMany: C.START_MANY}
    back = ApplyResult.from_dict(plain, kinds.get(type(result.payload), ""))
    assert back.as_dict() == plain


def test_apply_reports_effects_and_the_dedup_table_keeps_plain_values():
    h = Harness()
    assert h.apply(C.NOOP).effects == (EpochApplied(1),)
    h.put(schedule="@every 60s")
    fired = h.plan_and_fire()
    assert fired == [["j1", T0, "created"]]
    first = h.apply(C.TRIGGER, rid="once", name="j1")
    assert first.effects == (Launch("j1", first.of(R.Triggered).scheduled_ms),)
    again = h.apply(C.TRIGGER, rid="once", name="j1")
    assert again.deduplicated and again.effects == ()        # launched by the first apply only
    assert again.of(R.Triggered) == first.of(R.Triggered)     # the same typed answer, given again
    assert h.state.dedup and all(type(result) is dict for _, result in h.state.dedup.values())
    tok = h.apply(C.START, job="j1", scheduled_ms=T0, attempt=1, worker="w1").of(R.Claimed).token
    cancel = h.apply(C.CANCEL, job="j1", scheduled_ms=T0)
    assert cancel.effects == (CancelAttempt(tok, h.state.execs[("j1", T0)].id),)


def test_every_entry_kind_names_its_payloads():
    """A dedup answer is read back by its entry kind: every kind apply handles has its payloads."""
    from schedd.core.state import HANDLERS
    assert set(HANDLERS) - set(R.PAYLOADS) == set()
