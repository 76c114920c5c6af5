"""How `schedctl run list` and `run get` word an execution: a run claimed before its due time
is not shown RUNNING, an attempt killed by a signal says which, and the DURATION, WORKER and
EXIT columns read the last attempt."""

from __future__ import annotations

from schedd_client.run_columns import duration_text, exit_text, last_exit_text, shown_state, worker_text
from schedd_proto import scheduler_pb2 as pb

NOW = 1_800_000_000_000


def _run(state: str, due: int, *attempts: pb.Attempt) -> pb.Execution:
    return pb.Execution(id="j@x", job="j", state=state, scheduled_ms=due, due_ms=due, attempts=list(attempts))


def test_a_run_claimed_ahead_of_its_due_time_is_not_shown_running():
    claimed = _run("RUNNING", NOW + 3_000, pb.Attempt(number=1, worker="w1", started_ms=NOW - 500))
    assert shown_state(claimed, NOW) == "SCHEDULED (claimed, due in 3s)"
    assert duration_text(claimed, NOW) == "-"
    assert shown_state(claimed, NOW + 3_000) == "RUNNING"
    assert duration_text(claimed, NOW + 5_000) == "2s"           # from its due time, not the claim
    assert shown_state(_run("SUCCEEDED", NOW + 3_000), NOW) == "SUCCEEDED"


def test_the_exit_says_the_signal_in_words():
    ended = dict(started_ms=NOW, ended_ms=NOW + 1)
    assert exit_text(pb.Attempt(exit_code=-15, state="CANCELLED", **ended)) == "killed by SIGTERM"
    assert exit_text(pb.Attempt(exit_code=-9, **ended)) == "killed by SIGKILL"
    assert exit_text(pb.Attempt(exit_code=-200, **ended)) == "killed by signal 200"
    assert exit_text(pb.Attempt(exit_code=3, **ended)) == "3"
    assert exit_text(pb.Attempt(exit_code=0, **ended)) == "0"
    assert exit_text(pb.Attempt(http_status=503, **ended)) == "HTTP 503"
    assert exit_text(pb.Attempt(started_ms=NOW)) == "-"          # still running


def test_duration_worker_and_exit_read_the_last_attempt():
    run = _run("SUCCEEDED", NOW,
               pb.Attempt(number=1, worker="w1", started_ms=NOW, ended_ms=NOW + 1_000, exit_code=1),
               pb.Attempt(number=2, worker="w2", started_ms=NOW + 5_000, ended_ms=NOW + 95_000, exit_code=0))
    assert (duration_text(run, NOW + 10**6), worker_text(run), last_exit_text(run)) == ("1m30s", "w2", "0")
    none = _run("SCHEDULED", NOW)
    assert (duration_text(none, NOW), worker_text(none), last_exit_text(none)) == ("-", "-", "-")
