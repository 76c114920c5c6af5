"""The ports (schedd/ports): the do-nothing defaults change nothing, the test implementations
with nothing switched on behave like them, every Metrics implementation takes the calls the shell
makes, the fakes keep their promises, and the wiring rules hold (the test hooks are reached only
through the composition roots; ports import no other schedd package)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import schedd
from schedd.ports.clock import SystemClock
from schedd.ports.fakes import FakeNode, ManualClock, RecordingMetrics, WaitTimeout, wait_until, wait_until_async
from schedd.ports.faults import NO_FAULTS, ClaimAnswer, Faults
from schedd.ports.metrics import NullMetrics
from schedd.runtime.metrics import Metrics as PrometheusMetrics
from schedd.testing.hooks import TestFaults

ROOT = Path(schedd.__file__).parent
ENTRY = json.dumps({"k": "trigger", "rid": "r1", "name": "j1"})


@pytest.fixture(params=["default", "test-mode, nothing on"])
def faults(request) -> Faults:
    return NO_FAULTS if request.param == "default" else TestFaults()


def test_faults_that_are_off_change_nothing(faults):
    clock = ManualClock(5_000)
    assert faults.entry_to_apply(ENTRY, 7) == ENTRY
    assert faults.lease_grace_from(1234) == 1234
    assert faults.due(clock, 9_000) == 9_000
    assert faults.finish_token(None, "j1", 1, 42) == 42
    assert faults.transport(dict) is dict
    assert faults.stock_raft is False

    async def proposal():
        return {"ok": True, "token": 3}
    assert asyncio.run(faults.claim(proposal(), None, None, "j1", 1, 1, 0, {})) == ClaimAnswer({"ok": True, "token": 3})
    for hook in (lambda: faults.applied("n1", ENTRY, {"ok": True}, 7, b"\0" * 16),
                 lambda: faults.role_changed("n1", 0, 2, 3), lambda: faults.claimed(3, "j1", 1, "w1"),
                 lambda: faults.result_arrived(3), lambda: faults.pushed(None, "w1", None),
                 lambda: faults.assignment_pushed(None, 3, "j1", 1, "w1"),
                 lambda: faults.fire_applied(None, [("j1", 1)], 7, None),
                 lambda: faults.fire_proposed(None, [("j1", 1)], None)):
        assert hook() is None


def test_the_switches_bend_only_their_own_rule():
    clock = ManualClock(5_000)
    clock.offset_ms = 0
    assert TestFaults(unsafe=frozenset({"no_dedup"})).entry_to_apply(ENTRY, 7) != ENTRY
    assert TestFaults(unsafe=frozenset({"no_lease_grace"})).lease_grace_from(1234) == 0
    assert TestFaults(unsafe=frozenset({"stock_raft"})).stock_raft is True
    assert TestFaults(unsafe=frozenset({"no_fencing"})).due(clock, 9_000) == 9_000


@pytest.mark.parametrize("make", [NullMetrics, RecordingMetrics, PrometheusMetrics])
def test_every_metrics_takes_what_the_shell_records(make):
    m = make()
    m.fire_lateness.observe(0.01)
    m.fire_lead.observe(0.5)
    m.skipped.inc(2)
    m.late_intents.inc()
    m.fired.labels("cron").inc()
    m.proposals.labels("fire", "ok").inc()
    m.commit_latency.labels("fire").observe(0.02)
    m.attempts_expired.labels("lost").inc()
    m.requests.labels("PutJob", "OK").inc()
    m.sla_missed.labels("j1").inc()


def test_recording_metrics_sums_per_label():
    m = RecordingMetrics()
    m.sla_missed.labels("j1").inc()
    m.sla_missed.labels("j1").inc()
    m.sla_missed.labels("j2").inc(3)
    m.skipped.inc(2)
    assert m.sla_missed.counts == {("j1",): 2, ("j2",): 3} and m.skipped.counts == {(): 2}


def test_clocks():
    manual = ManualClock(1_000)
    assert manual.now_ms() == 1_000 and manual.advance(500) == 1_500 and manual.now_ms() == 1_500
    manual.offset_ms = -100
    assert manual.now_ms() == 1_400
    h = SimpleNamespace(now=7)
    following = ManualClock(source=lambda: h.now)
    h.now = 9
    assert following.now_ms() == 9
    skewed = SystemClock(offset_ms=60_000)
    assert abs(skewed.now_ms() - time.time_ns() // 1_000_000 - 60_000) < 5_000


def test_fake_node_applies_proposals_at_once_under_its_lock():
    applied: list[str] = []
    node = FakeNode(lambda e: applied.append(e) or {"ok": True, "index": len(applied)}, lambda: "state",
                    cfg=SimpleNamespace(grpc_address="127.0.0.1:1"))
    assert asyncio.run(node.propose("e1")) == {"ok": True, "index": 1}
    assert node.proposed == applied == ["e1"] and node.state == "state"
    assert node.is_leader() and node.leads_epoch() and node.leader_grpc_address() == "127.0.0.1:1"


def test_wait_until():
    seen = iter([0, 0, "yes"])
    assert wait_until(lambda: next(seen), timeout=10, interval=0.001) == "yes"
    with pytest.raises(WaitTimeout, match="waiting for nothing"):
        wait_until(lambda: False, timeout=0.05, interval=0.01, what="nothing")
    assert issubclass(WaitTimeout, AssertionError) and issubclass(WaitTimeout, TimeoutError)
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 / 0, timeout=1, errors=False)

    async def later():
        n = iter([0, 5])
        async def settle_then_look():
            await asyncio.sleep(0)
            return next(n)
        return await wait_until_async(settle_then_look, timeout=10)
    assert asyncio.run(later()) == 5
