"""The worker's history events (schedd_worker.hooks): the default does nothing, and the recorded
ones carry the fields the fault suite's checker reads."""

from __future__ import annotations

import json

from schedd_proto import scheduler_pb2 as pb
from schedd_worker.hooks import NO_EVENTS, NO_HOOKS, RecordedEvents, Recorder


def test_the_default_events_do_nothing_and_recorded_ones_carry_the_checkers_fields(tmp_path) -> None:
    a = pb.Assignment(execution_id="j@1", job="j", scheduled_ms=1000, attempt=2, fencing_token=9, term=3, due_ms=1000)
    assert NO_HOOKS.events is NO_EVENTS
    for call in (lambda e: e.received("w1", a), lambda e: e.rejected("w1", a, "old term"),
                 lambda e: e.started("w1", a), lambda e: e.ended("w1", a, "SUCCEEDED"),
                 lambda e: e.acked("w1", 9, "committed")):
        assert call(NO_EVENTS) is None
        call(RecordedEvents(Recorder(str(tmp_path / "h.jsonl"), "worker-w1")))
    lines = [json.loads(x) for x in (tmp_path / "h.jsonl").read_text().splitlines()]
    assert [x["type"] for x in lines] == ["w_recv", "w_reject", "h_start", "h_end", "w_ack"]
    common = {"worker": "w1", "job": "j", "scheduled_ms": 1000, "token": 9}
    assert lines[0].items() >= (common | {"attempt": 2, "term": 3, "due_ms": 1000}).items()
    assert lines[1].items() >= (common | {"term": 3, "why": "old term"}).items()
    assert lines[2].items() >= (common | {"attempt": 2}).items()
    assert lines[3].items() >= (common | {"attempt": 2, "state": "SUCCEEDED"}).items()
    assert lines[4].items() >= {"worker": "w1", "token": 9, "outcome": "committed"}.items()
