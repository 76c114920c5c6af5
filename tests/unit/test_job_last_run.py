"""A job's LAST RUN (Job.last_run_ms) is its newest execution whatever the trigger: a manual
run after the schedule's last firing is the last run (Job.last_scheduled_ms stays the firing)."""

from __future__ import annotations

from schedd.api import convert
from schedd.core import commands as C
from tests.support.state import T0, Harness


def test_a_manual_run_is_the_last_run():
    h = Harness()
    h.put(name="j", schedule="@every 10s")
    h.plan_and_fire()
    job = convert.job_to_pb(h.state.jobs["j"], h.state, summary=True)
    assert job.last_run_ms == job.last_scheduled_ms == T0
    h.now = T0 + 4_000
    manual = h.apply(C.TRIGGER, name="j").payload.scheduled_ms
    job = convert.job_to_pb(h.state.jobs["j"], h.state, summary=True)
    assert manual > T0 and job.last_run_ms == manual and job.last_scheduled_ms == T0
    assert job.last_execution_id.startswith("j@")
