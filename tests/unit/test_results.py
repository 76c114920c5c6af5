"""The typed apply result (schedd.core.results): it reads like the dict results it replaced, what
is kept in replicated state is plain, and effects are reported once, by the apply that made them."""

from __future__ import annotations

import pytest

from schedd.core import commands as C
from schedd.core.results import ApplyResult, CancelAttempt, Code, EpochApplied, Launch, ok, reject
from tests.support.state import T0, Harness


def test_a_result_reads_as_the_mapping_it_replaced():
    r = ok(name="j1", created=True, effects=(Launch("j1", T0),))
    assert r == {"ok": True, "code": "ok", "name": "j1", "created": True}
    assert r.ok and r.code is Code.OK and "msg" not in r and r.get("token") is None
    no = reject(Code.NOT_FOUND, "job 'x' not found", position=3)
    assert dict(no) == {"ok": False, "code": "not_found", "msg": "job 'x' not found", "position": 3}
    assert ApplyResult.from_dict(no.as_dict()) == no and ApplyResult.from_dict(r.as_dict()).effects == ()
    with pytest.raises(ValueError):
        reject("no_such_code", "x")                    # every code is one of Code
    odd = ApplyResult.from_dict({"ok": False, "code": "from_the_future", "msg": "m"})   # never raises
    assert odd.code is Code.INTERNAL and odd.msg == "m"


def test_apply_reports_effects_and_the_dedup_table_keeps_plain_values():
    h = Harness()
    assert h.apply(C.NOOP).effects == (EpochApplied(1),)
    h.put(schedule="@every 60s")
    fired = h.plan_and_fire()
    assert fired == [["j1", T0, "created"]]
    first = h.apply(C.TRIGGER, rid="once", name="j1")
    assert first.effects == (Launch("j1", first["scheduled_ms"]),)
    again = h.apply(C.TRIGGER, rid="once", name="j1")
    assert again["deduplicated"] and again.effects == ()      # launched by the first apply only
    assert h.state.dedup and all(type(result) is dict for _, result in h.state.dedup.values())
    tok = h.apply(C.START, job="j1", scheduled_ms=T0, attempt=1, worker="w1")["token"]
    cancel = h.apply(C.CANCEL, job="j1", scheduled_ms=T0)
    assert cancel.effects == (CancelAttempt(tok, h.state.execs[("j1", T0)].id),)


@pytest.mark.parametrize("r", [
    ok(name="j1", created=True), ok(), reject(Code.CONFLICT, "m", position=2),
    ApplyResult(Code.OK, "ignored", {"ok": False, "code": "x", "msg": "y", "z": 1}),   # reserved keys in a payload
    ApplyResult(Code.INVALID, "m", {"msg": "shadowed", "a": [1]}),
])
def test_as_dict_is_the_items_in_their_order(r):
    """as_dict is built directly (it runs for every applied entry with a request id); what the
    dedup table keeps must stay exactly the mapping's items, in order (snapshots hold it)."""
    assert list(r.as_dict().items()) == list(r.items())
