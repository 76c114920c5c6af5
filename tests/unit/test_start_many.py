"""Batched claims: one `start_many` entry claims many executions, each decided as `start`
decides it, each with its own fencing token (index * TOKENS_PER_INDEX + position), and the
leader's chunks of claims never exceed one entry's bounds."""

from __future__ import annotations

import pytest

from schedd.core import commands as C
from schedd.core.attempts import MAX_CLAIMS_PER_ENTRY, TOKENS_PER_INDEX
from schedd.leader.assigner import claim_chunks
from schedd.leader.assignment import Claim
from tests.support.state import T0, TOP_LEVEL, Harness


def _claims(*names: str, attempt: int = 1) -> list[dict]:
    return [{"job": n, "scheduled_ms": T0, "attempt": attempt, "worker": "w1", "worker_incarnation": "i1",
             "created": None} for n in names]


def _due(h: Harness, *names: str) -> None:
    for n in names:
        h.put(name=n, schedule="@every 60s")
    h.plan_and_fire()


def test_each_claim_is_decided_alone_with_its_own_token():
    h = Harness(level=TOP_LEVEL)
    _due(h, "a", "b", "c")
    items = _claims("a", "b", "missing", "c")
    items[1]["attempt"] = 2                                   # b expects attempt 1: refused
    r = h.apply(C.START_MANY, claims=items)
    index = h.index
    assert r.ok
    got = [(c.ok, getattr(c.payload, "token", None), c.code) for c in r.payload.claims]
    assert got == [(True, index * TOKENS_PER_INDEX, "ok"), (False, None, "conflict"),
                   (False, None, "not_found"), (True, index * TOKENS_PER_INDEX + 3, "ok")]
    a, b, c = (h.state.execs[(n, T0)] for n in "abc")
    assert a.state == c.state == "RUNNING" and b.state == "SCHEDULED"
    assert a.attempts[0].fencing_token == index * TOKENS_PER_INDEX and a.attempts[0].worker == "w1"
    # the token of a claim that follows is larger than every earlier one (start gave its index)
    later = h.apply(C.START_MANY, claims=_claims("b")).payload.claims[0].payload.token
    assert later > c.attempts[0].fencing_token
    # and the result of a finish under that token is accepted, the attempt's fencing as before
    assert h.apply(C.FINISH, job="a", scheduled_ms=T0, token=a.attempts[0].fencing_token, state="SUCCEEDED").ok


def test_a_claim_under_an_old_term_or_a_malformed_list_changes_nothing():
    h = Harness(level=TOP_LEVEL)
    _due(h, "a")
    assert h.apply(C.START_MANY, claims=_claims("a"), term=h.term - 1).code == "stale_term"
    for bad in ([], "a", [1], _claims(*["a"] * (MAX_CLAIMS_PER_ENTRY + 1))):
        assert h.apply(C.START_MANY, claims=bad).code == "invalid"
    assert h.state.execs[("a", T0)].state == "SCHEDULED"
    assert not h.state.execs[("a", T0)].attempts


class _Conn:
    def __init__(self, name: str) -> None:
        self.name, self.incarnation = name, "x" * 64


@pytest.mark.parametrize("n, name_len", [(1, 1), (MAX_CLAIMS_PER_ENTRY + 1, 10), (2000, 250), (600, 40)])
def test_claim_chunks_fit_one_entry_each(n, name_len):
    conn = _Conn("w" * 128)
    batch = [(conn, Claim(T0, f"{i:06d}" + "j" * (name_len - 6 if name_len > 6 else 0), T0, 1, 10**9, None, ()),
              {}) for i in range(n)]
    chunks = claim_chunks(batch)                              # type: ignore[arg-type]
    assert [item for chunk in chunks for item in chunk] == batch
    for chunk in chunks:
        assert 0 < len(chunk) <= MAX_CLAIMS_PER_ENTRY
        entry = C.encode(C.START_MANY, rid="", now=T0, term=7, by="n1", claims=[
            {"job": c.job, "scheduled_ms": c.scheduled_ms, "attempt": c.attempt, "worker": w.name,
             "worker_incarnation": w.incarnation, "created": c.created} for w, c, _ in chunk])
        assert len(entry) <= C.BATCH_ENTRY_BYTES + C.BATCH_ENVELOPE_BYTES


# ------------------------------------------------------------------ batched results


def _result(name: str, token: int, state: str = "SUCCEEDED", ended: int = T0 + 5) -> dict:
    return {"job": name, "scheduled_ms": T0, "token": token, "worker": "w1", "state": state, "exit_code": 0,
            "http_status": 0, "error": "", "output_tail": "ok", "started_ms": T0 + 1, "ended_ms": ended}


def test_results_are_decided_alone_and_a_result_already_recorded_is_deduplicated():
    h = Harness(level=TOP_LEVEL)
    _due(h, "a", "b", "c")
    claims = h.apply(C.START_MANY, claims=_claims("a", "b", "c")).payload.claims
    ta, tb, tc = (c.payload.token for c in claims)
    r = h.apply(C.FINISH_MANY, results=[_result("a", ta), _result("b", tb + 99), _result("c", tc, "FAILED")])
    assert [(x.ok, x.code) for x in r.payload.results] == [(True, "ok"), (False, "stale"), (True, "ok")]
    a, b, c = (h.state.execs[(n, T0)] for n in "abc")
    assert a.state == "SUCCEEDED" and a.attempts[0].output_tail == "ok" and b.state == "RUNNING"
    assert c.attempts[0].state == "FAILED"
    again = h.apply(C.FINISH_MANY, results=[_result("a", ta), _result("a", ta, ended=T0 + 6)])
    assert [(x.ok, x.deduplicated, x.code) for x in again.payload.results] == \
        [(True, True, "ok"), (False, False, "stale")]          # the same result once; another is stale
    assert h.state.execs[("a", T0)].state == "SUCCEEDED"
    for bad in ([], "x", [1], [_result("a", ta)] * 257):
        assert h.apply(C.FINISH_MANY, results=bad).code == "invalid"


@pytest.mark.parametrize("n, text", [(1, 0), (300, 10), (40, 6000)])
def test_result_chunks_fit_one_entry_each(n, text):
    from schedd.leader.assigner import result_chunks
    conn = _Conn("w" * 128)
    batch = [(conn, None, {**_result(f"j{i:05d}" + "x" * 200, i), "error": "e" * (text // 3),
                           "output_tail": "o" * text}) for i in range(n)]
    chunks = result_chunks(batch)                              # type: ignore[arg-type]
    assert [item for chunk in chunks for item in chunk] == batch
    for chunk in chunks:
        assert 0 < len(chunk) <= 256
        entry = C.encode(C.FINISH_MANY, rid="", now=T0, term=7, by="n1", results=[x for _, _, x in chunk])
        assert len(entry) <= C.BATCH_ENTRY_BYTES + C.BATCH_ENVELOPE_BYTES


@pytest.mark.parametrize("name_len, entries", [(10, 1), (128, 2)])
def test_a_steps_intents_fit_their_fire_entries_whatever_the_names(name_len, entries):
    """500 intents per fire entry (a herd's intents recorded in time), cut by size as well:
    500 names of 128 characters would not fit one entry."""
    from schedd.leader.dispatcher import FIRE_ENTRY_MAX, fire_chunks
    items = [(f"{i:05d}".rjust(name_len, "j"), 1_796_177_510_000) for i in range(FIRE_ENTRY_MAX)]
    chunks = fire_chunks(items, FIRE_ENTRY_MAX)
    assert len(chunks) == entries and [x for c in chunks for x in c] == items
    for chunk in chunks:
        entry = C.encode(C.FIRE, rid="", now=1, term=1, by="n1", items=[[n, t] for n, t in chunk])
        assert len(entry.encode()) <= C.MAX_ENTRY_BYTES
