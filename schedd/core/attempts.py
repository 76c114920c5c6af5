"""Attempts: the leader's claim (`start`), a worker's result (`finish`, a sensor's NOT_READY
included), a lost worker (`expire`) and a user's `cancel`.

Fencing: an attempt's token is the log index of its claim; a result or an expiry for a token that
is not the current attempt's is refused (and the refusal is kept on that attempt). A worker's
report is checked as a whole (`read_report`) before anything is written (`write_report`): the
one path by which an attempt's outcome is recorded, for jobs and DAG tasks alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schedd.core import commands as C
from schedd.core import schedule as sched
from schedd.core.model import (
    CANCELLED, FAILED, LOST, MAX_ERROR_CHARS, MAX_OUTPUT_TAIL_CHARS, REJECTED, RETRY_WAIT, RUNNING, SCHEDULED,
    SUCCEEDED, TERMINAL_STATES, TIMED_OUT, Attempt, Execution, ExecutionEvent, execution_id,
)
from schedd.core.naming import dag_of_job
from schedd.core.policy import blocked
from schedd.core import results as R
from schedd.core.results import ApplyResult, CancelAttempt, Code, ok, reject
from schedd.core.retry import RetryPolicy
from schedd.core.specs import SensorHandler
from schedd.core.tables import Tables, exec_or_reject

LOST_RETRY_LIMIT = 5           # re-runs of attempts lost with their worker (at_least_once)
NOT_READY = "NOT_READY"        # a sensor attempt's outcome: the condition does not hold yet
DEFAULT_POLL_S = 30.0
DEFAULT_SENSOR_TIMEOUT_S = 3600.0
OUTCOMES = (SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, REJECTED)


@dataclass(slots=True, frozen=True)
class Report:
    """What a worker reported about an attempt, checked: every field has its type and bound."""

    started_ms: int | None        # the worker's own start, after the claim (None: not reported)
    ended_ms: int
    exit_code: int
    http_status: int
    error: str
    output_tail: str


def read_report(args: dict[str, Any], now: int) -> Report | ApplyResult:
    """The report of a `finish` entry, or the refusal of a malformed one (nothing written yet)."""
    try:
        started = int(args["started_ms"]) if args.get("started_ms") else None
        ended = int(args.get("ended_ms") or now)
        exit_code = int(args.get("exit_code") or 0)
        http_status = int(args.get("http_status") or 0)
    except (TypeError, ValueError, OverflowError) as e:
        return reject(Code.INVALID, f"malformed result: {type(e).__name__}: {e}")
    return Report(started, ended, exit_code, http_status, str(args.get("error") or "")[:MAX_ERROR_CHARS],
                  str(args.get("output_tail") or "")[-MAX_OUTPUT_TAIL_CHARS:])


def write_report(attempt: Attempt, outcome: str, r: Report) -> None:
    attempt.state = outcome
    if r.started_ms is not None:
        attempt.started_ms = r.started_ms
    attempt.ended_ms, attempt.exit_code, attempt.http_status = r.ended_ms, r.exit_code, r.http_status
    attempt.error, attempt.output_tail = r.error, r.output_tail


def current(ex: Execution, token: object) -> Attempt | None:
    """The attempt `token` fences, if it is the running one."""
    cur = ex.attempts[-1] if ex.attempts else None
    if ex.state == RUNNING and cur is not None and cur.fencing_token == token:
        return cur
    return None


def refuse_stale(ex: Execution, token: object, what: str, cmd: C.Command) -> ApplyResult:
    """Fencing: a result for an attempt that is no longer current (a zombie worker, a retry
    already under way) is refused, and the refusal is kept on that attempt for the history."""
    for a in ex.attempts:
        if a.fencing_token == token and not a.rejected:
            a.rejected = f"{what} reported at {sched.format_ms(cmd.now)} refused: token {token} is not current"
    return reject(Code.STALE, f"token {token} is not the current attempt of {ex.id} ({ex.state})")


def start(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """The leader's claim. The attempt's fencing token is this entry's log index: unique and
    increasing across the whole cluster, and known to every replica."""
    if cmd.term != st.epoch:
        return reject(Code.STALE_TERM, f"claim from term {cmd.term}, but the leader epoch is {st.epoch}")
    return claim(st, cmd.args, cmd.now, index)


MAX_CLAIMS_PER_ENTRY = 256
TOKENS_PER_INDEX = 1024        # a start_many entry at index i gives its k-th claim token i * 1024 + k


def start_many(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """Many claims in one entry (`claims`: each as a `start` entry's arguments), each decided
    on its own exactly as `start` decides it; `claims` in the result holds each one's result in
    order. Claim k's fencing token is index * TOKENS_PER_INDEX + k: unique, and above every
    token a `start` entry gave before (a start entry's token is its index), so tokens still
    grow across the cluster as long as a leader that proposes start_many never goes back to
    `start` (its feature level gates the kind)."""
    if cmd.term != st.epoch:
        return reject(Code.STALE_TERM, f"claims from term {cmd.term}, but the leader epoch is {st.epoch}")
    items = cmd.args.get("claims")
    if not isinstance(items, list) or not 0 < len(items) <= MAX_CLAIMS_PER_ENTRY \
            or not all(isinstance(x, dict) for x in items):
        return reject(Code.INVALID, f"claims must be a list of 1 to {MAX_CLAIMS_PER_ENTRY} objects")
    return ok(R.ClaimedMany(tuple(claim(st, args, cmd.now, index * TOKENS_PER_INDEX + k)
                                  for k, args in enumerate(items))))


def claim(st: Tables, args: dict[str, Any], now: int, token: int) -> ApplyResult:
    """One claim: attempt `args.attempt` of the execution (args.job, args.scheduled_ms) goes to
    `args.worker` under `token`, if the execution waits for exactly that attempt and its policy
    lets it start; else a refusal, nothing changed."""
    name, t = args.get("job"), args.get("scheduled_ms")
    ex = st.execs.get((name, t)) if isinstance(name, str) and isinstance(t, int) else None
    if ex is None:
        return reject(Code.NOT_FOUND, f"execution {name}@{t} not found")
    if ex.state not in (SCHEDULED, RETRY_WAIT):
        return reject(Code.CONFLICT, f"execution {ex.id} is {ex.state}")
    created = args.get("created")
    if created is not None and created != ex.log_index:
        # a claim decided for an execution that was deleted (with its job) since, and
        # recorded again under the same key by the job's successor: not this one's claim
        return reject(Code.CONFLICT, f"execution {ex.id} was recorded again at index {ex.log_index} "
                                     f"(the claim is for the one recorded at {created})")
    number = args.get("attempt")
    if number != len(ex.attempts) + 1:
        return reject(Code.CONFLICT, f"execution {ex.id} expects attempt {len(ex.attempts) + 1}, not {number}")
    job = st.jobs.get(ex.job)
    if job is None:
        return reject(Code.NOT_FOUND, f"job {ex.job!r} not found")
    policy = st.policy(job)
    why = blocked(st, ex, policy)
    if why:
        return reject(Code.BLOCKED, why)
    ex.holds = policy.holds(ex.lane)
    ex.attempts.append(Attempt(number=len(ex.attempts) + 1, worker=str(args.get("worker", ""))[:128],
                               fencing_token=token, started_ms=now,
                               worker_incarnation=str(args.get("worker_incarnation") or "")[:64]))
    st.set_state(ex, RUNNING, now)
    return ok(R.Claimed(token, number))


def finish(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    ex = exec_or_reject(st, cmd)
    if isinstance(ex, ApplyResult):
        return ex
    outcome, token = cmd.args.get("state"), cmd.args.get("token")
    if outcome != NOT_READY and outcome not in OUTCOMES:
        return reject(Code.INVALID, f"bad outcome {outcome!r}")
    report = read_report(cmd.args, cmd.now)
    if isinstance(report, ApplyResult):
        return report
    if outcome == NOT_READY:                  # a sensor's poll: wait, don't fail
        return sensor_not_ready(st, ex, token, report, cmd)
    attempt = current(ex, token)
    if attempt is None:
        return refuse_stale(ex, token, str(outcome), cmd)
    write_report(attempt, str(outcome), report)
    if outcome == SUCCEEDED:
        st.set_state(ex, SUCCEEDED, cmd.now)
    elif outcome == CANCELLED:
        ex.reason = "cancelled"
        st.set_state(ex, CANCELLED, cmd.now)
    elif outcome == REJECTED:                 # never started: back in line, not a failure
        st.set_state(ex, SCHEDULED, cmd.now)
    else:
        after_failure(st, ex, str(outcome), attempt.error, cmd.now)
    return ok(R.Finished(ex.state, ex.retry_at))


MAX_RESULTS_PER_ENTRY = 256


def finish_many(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """Many workers' results in one entry (`results`: each as a `finish` entry's arguments plus
    the reporting `worker`), each decided exactly as `finish` decides it; `results` in the
    result holds each one's outcome in order. A result already recorded (its attempt ended
    with that outcome at that time: the leader retried an entry whose commit it could not
    confirm) answers ok and deduplicated, and changes nothing."""
    items = cmd.args.get("results")
    if not isinstance(items, list) or not 0 < len(items) <= MAX_RESULTS_PER_ENTRY \
            or not all(isinstance(x, dict) for x in items):
        return reject(Code.INVALID, f"results must be a list of 1 to {MAX_RESULTS_PER_ENTRY} objects")
    out = []
    for args in items:
        one = C.Command(kind=C.FINISH, rid="", now=cmd.now, term=cmd.term, by=str(args.get("worker", "")),
                        args=args)
        out.append(_recorded(st, args) or finish(st, one, index))
    return ok(R.FinishedMany(tuple(out)))


def _recorded(st: Tables, args: dict[str, Any]) -> ApplyResult | None:
    name, t, token = args.get("job"), args.get("scheduled_ms"), args.get("token")
    ex = st.execs.get((name, t)) if isinstance(name, str) and isinstance(t, int) else None
    if ex is None or current(ex, token) is not None:
        return None
    for a in ex.attempts:
        if a.fencing_token == token and a.state == args.get("state") and a.ended_ms == args.get("ended_ms"):
            return ok(R.Finished(ex.state, ex.retry_at)).again()
    return None


def sensor_not_ready(st: Tables, ex: Execution, token: object, report: Report, cmd: C.Command) -> ApplyResult:
    """A sensor attempt found its condition false: wait a poll interval (RETRY_WAIT, no slot
    held, no retry consumed), or end TIMED_OUT once the sensor's timeout from the first poll
    has passed."""
    attempt = current(ex, token)
    if attempt is None:
        return refuse_stale(ex, token, NOT_READY, cmd)
    job = st.jobs.get(ex.job)
    sensor = job.spec.handler if job is not None else None
    if not isinstance(sensor, SensorHandler):
        return reject(Code.INVALID, f"{ex.id} is not a sensor: NOT_READY is a sensor's outcome")
    write_report(attempt, NOT_READY, report)
    if ex.cancel_requested:
        ex.reason = "cancelled"
        st.set_state(ex, CANCELLED, cmd.now)
        return ok(R.Finished(ex.state, None))
    poll_ms = int(float(sensor.poll_interval_seconds or DEFAULT_POLL_S) * 1000)
    timeout_ms = int(float(sensor.timeout_seconds or DEFAULT_SENSOR_TIMEOUT_S) * 1000)
    first = ex.attempts[0].started_ms
    polls = sum(1 for a in ex.attempts if a.state == NOT_READY)
    deadline = first + timeout_ms
    why = attempt.error or "condition not met"
    if cmd.now >= deadline:
        ex.reason = (f"sensor timed out: not ready after {polls} poll(s) in "
                     f"{(cmd.now - first) / 1000:g}s (timeout {timeout_ms / 1000:g}s): {why}")[:MAX_ERROR_CHARS]
        st.set_state(ex, TIMED_OUT, cmd.now)
    else:
        ex.retry_at = min(cmd.now + poll_ms, deadline)
        ex.reason = f"sensor not ready (poll {polls}): {why}"[:MAX_ERROR_CHARS]
        st.set_state(ex, RETRY_WAIT, cmd.now)
    return ok(R.Finished(ex.state, ex.retry_at))


def expire(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """The leader lost an attempt's worker (no heartbeat for a lease, or past its timeout).
    Its fate is unknown: at_most_once jobs end LOST and never run again; others retry."""
    if cmd.term != st.epoch:
        return reject(Code.STALE_TERM, f"expiry from term {cmd.term}, but the leader epoch is {st.epoch}")
    ex = exec_or_reject(st, cmd)
    if isinstance(ex, ApplyResult):
        return ex
    token = cmd.args.get("token")
    attempt = current(ex, token)
    if attempt is None:
        return reject(Code.STALE, f"token {token} is not the current attempt of {ex.id} ({ex.state})")
    reason = str(cmd.args.get("reason") or "worker lost")[:MAX_ERROR_CHARS]
    outcome = TIMED_OUT if cmd.args.get("outcome") == TIMED_OUT else LOST
    attempt.state, attempt.ended_ms, attempt.error = outcome, cmd.now, reason
    job = st.jobs.get(ex.job)
    never_started = outcome == LOST and cmd.args.get("never_started") is True
    if (outcome == LOST and job is not None and job.spec.policies.delivery == "at_most_once"
            and not ex.cancel_requested):
        ex.reason = f"at_most_once: attempt {attempt.number} lost ({reason}); not run again"
        st.set_state(ex, LOST, cmd.now)
    elif never_started and not ex.cancel_requested:
        # Its worker reconnected to a new leader without it (schedd.leader.assigner,
        # inherited_claim_fate): like an assignment the worker declined, it goes back in line
        # at once, counted neither as a failure nor as a lost attempt.
        attempt.state = REJECTED
        ex.reason = f"attempt {attempt.number} never started: {reason}"[:MAX_ERROR_CHARS]
        st.set_state(ex, SCHEDULED, cmd.now)
        return ok(R.Finished(ex.state, None, never_started=True))
    else:
        after_failure(st, ex, outcome, reason, cmd.now)
    return ok(R.Finished(ex.state, ex.retry_at))


def after_failure(st: Tables, ex: Execution, outcome: str, error: str, now: int) -> None:
    if ex.cancel_requested:
        ex.reason = "cancelled"
        st.set_state(ex, CANCELLED, now)
        return
    job = st.jobs.get(ex.job)
    policy = RetryPolicy.from_spec(job.spec) if job is not None else RetryPolicy()
    if outcome == LOST:
        # At least once: an attempt lost with its worker did not fail, it may never have run;
        # it is run again whatever the retry policy, up to LOST_RETRY_LIMIT times (so a job
        # that kills its worker every time cannot loop forever).
        lost = sum(1 for a in ex.attempts if a.state == LOST)
        if lost <= LOST_RETRY_LIMIT:
            ex.retry_at = now + policy.delay_ms(ex.id, lost)
            ex.reason = f"attempt {ex.attempts[-1].number} lost: {error}"[:MAX_ERROR_CHARS]
            st.set_state(ex, RETRY_WAIT, now)
        else:
            ex.reason = f"gave up after {lost} lost attempts: {error}"[:MAX_ERROR_CHARS]
            st.set_state(ex, FAILED, now)
        return
    failures = sum(1 for a in ex.attempts if a.state in (FAILED, TIMED_OUT))
    if failures < policy.max_attempts:
        ex.retry_at = now + policy.delay_ms(ex.id, failures)
        ex.reason = f"attempt {ex.attempts[-1].number} {outcome.lower()}: {error}"[:MAX_ERROR_CHARS]
        st.set_state(ex, RETRY_WAIT, now)
    else:
        ex.reason = f"gave up after {failures} failed attempt(s): {error}"[:MAX_ERROR_CHARS]
        st.set_state(ex, TIMED_OUT if outcome == TIMED_OUT else FAILED, now)


def cancel(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    ex = exec_or_reject(st, cmd)
    if isinstance(ex, ApplyResult):
        return ex
    if ex.state in TERMINAL_STATES:
        return reject(Code.CONFLICT, f"execution {ex.id} already ended {ex.state}")
    if ex.state == RUNNING:
        ex.cancel_requested = True
        ex.updated_ms = cmd.now
        token = ex.attempts[-1].fencing_token
        return ok(R.Cancelled(RUNNING, token, cancel_requested=True), effects=(CancelAttempt(token, ex.id),))
    ex.reason = "cancelled before it ran"
    st.set_state(ex, CANCELLED, cmd.now)
    return ok(R.Cancelled(CANCELLED))


# ------------------------------------------------------------------ run retry


RETRY_EVENT = "retry"          # the execution event that says who asked for a new attempt


def retained(st: Tables, name: str, t: int, eid: str) -> Execution | ApplyResult:
    """The execution (name, t) as the replicated tables hold it, or why it cannot be acted on.
    Only what the tables hold can change: a run that is no longer there (its history kept
    elsewhere, or pruned) is refused, never recreated."""
    ex = st.execs.get((name, t))
    if ex is not None:
        return ex
    if name not in st.jobs:
        return reject(Code.NOT_FOUND, f"run {eid}: job {name!r} not found")
    return reject(Code.NOT_FOUND, f"run {eid} is in history only; retry the latest run or trigger the job")


def reopen(st: Tables, ex: Execution, now: int, why: str) -> None:
    """A finished execution waits for its next attempt again: same id, its attempts kept, the
    next claim gives it a new fencing token. `why` is recorded as an event (who asked)."""
    ex.cancel_requested = False
    ex.retry_at = None
    ex.reason = why[:MAX_ERROR_CHARS]
    ex.events += (ExecutionEvent(now, RETRY_EVENT, ex.reason),)
    st.set_state(ex, SCHEDULED, now)


def retry(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """`run_retry {job, scheduled_ms}`: a user asks for a new attempt of a finished run. A DAG
    task is refused (its run decides when tasks run: `dag clear`), and so is a run still under
    way. The run gets one attempt: its job's retry policy counts the failures it already had."""
    name, t = cmd.args.get("job"), cmd.args.get("scheduled_ms")
    if not isinstance(name, str) or type(t) is not int:
        return reject(Code.INVALID, "run_retry needs job (a string) and scheduled_ms (an integer)")
    eid = execution_id(name, t)
    if dag_of_job(name) is not None:
        return reject(Code.INVALID, f"run {eid} is a task of DAG {dag_of_job(name)!r}: use "
                                    f"`schedctl dag clear RUN --task TASK` to run it again")
    ex = retained(st, name, t, eid)
    if isinstance(ex, ApplyResult):
        return ex
    if name not in st.jobs:
        return reject(Code.NOT_FOUND, f"run {eid}: job {name!r} not found")
    if ex.state not in TERMINAL_STATES:
        return reject(Code.CONFLICT, f"run {eid} is {ex.state}: only a finished run can be retried "
                                     "(cancel it first)")
    who = cmd.by or "anonymous"
    reopen(st, ex, cmd.now, f"attempt {len(ex.attempts) + 1} requested by {who} (was {ex.state})")
    return ok(R.Retried(name, t, len(ex.attempts) + 1))
