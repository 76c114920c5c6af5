"""Why an instant of a job ran, or did not: a typed Explanation built from the replicated state.

Every answer comes from what every replica holds at the same applied index: the job row and
its ledger gaps (schedd.core.ledger), the execution with its attempts and events (from the
tables, or the node's history store, which holds the same rows on every node), the policies
in the job's spec, the quotas and the audit trail. Nothing is read from logs or from the
leader's memory (which worker is connected, what the assigner is doing), so every node gives
the same answer; the time it compares with is the newest leader time applied (`Tables.clock_ms`).

A disposition is what became of the instant (the ledger's words, plus a few of this module's:
not-yet-due, before-created, not-an-instant, no-such-job). `DISPOSITIONS` says how each reads
and which policy fields explain it: a new disposition (a calendar's skip, say) is one row
there, and one not in the table still reads with its recorded detail.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from schedd.core import ledger
from schedd.core import windows
from schedd.core import schedule as sched
from schedd.core import sla as S
from schedd.core.audit import AuditRecord
from schedd.core.firing import OPEN_END
from schedd.core.model import (
    FAILED, LOST, REJECTED, RETRY_WAIT, RUNNING, SCHEDULED, SUCCEEDED, TIMED_OUT, Attempt, Execution, Job, execution_id,
)
from schedd.core.policy import JobPolicy, blocked, jitter_offset_ms
from schedd.core.retry import RetryPolicy
from schedd.core.tables import Tables, schedule_of

DELETE_ACTION = "Scheduler.DeleteJob"
NEAREST_SPAN_MS = 400 * 86_400_000       # how far back the nearest earlier instant is looked for
_EXECUTION_ID = re.compile(r"\S+@\d{4}-\d\d-\d\dT\S+?Z")


@dataclass(slots=True, frozen=True)
class Finding:
    """One fact in the explanation: what (`kind`, a stable word), when (`at_ms`, 0 = not a
    moment), said for people (`text`), and its values for programs (`details`)."""

    kind: str
    text: str
    at_ms: int = 0
    details: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class Explanation:
    id: str                      # the execution id of (job, instant)
    job: str
    instant_ms: int
    disposition: str             # ran, running, pending, paused, skipped-overlap, not-an-instant, ...
    summary: str                 # one sentence
    findings: list[Finding] = field(default_factory=list)
    index: int = 0               # the applied index the answer was read at


@dataclass(slots=True, frozen=True)
class Says:
    """How a disposition reads: its sentence, and the policy fields (JobPolicy attributes) that
    explain it."""

    summary: str
    policy: tuple[str, ...] = ()


DISPOSITIONS: dict[str, Says] = {
    "ran": Says("ran"),
    "running": Says("is running"),
    "pending": Says("waits to run"),
    "cancelled": Says("was cancelled"),
    "upstream-failed": Says("did not run: an upstream task failed"),
    "skipped": Says("was skipped"),
    "skipped-overlap": Says("was skipped by the overlap policy: an earlier run was still active",
                            ("overlap", "max_active", "queue_limit")),
    "skipped-deadline": Says("was skipped: its starting deadline had passed", ("deadline_ms",)),
    "skipped-backlog": Says("was skipped: more runs waited than the job keeps (history_limit)"),
    "paused": Says("did not run: the job was paused"),
    "coalesced": Says("did not run: missed, and coalesced into a later run", ("catchup",)),
    "skipped-window": Says("did not run: missed, and older than the catch-up window",
                           ("catchup", "catchup_window_ms", "deadline_ms")),
    "skipped-cap": Says("did not run: missed, and over the catch-up cap",
                        ("catchup", "catchup_max", "catchup_order")),
    "skipped-catchup": Says("did not run: missed, and the catch-up policy is none", ("catchup",)),
    "skipped-calendar": Says("was skipped by a calendar", ("calendar_skip", "calendar_only", "on_skip")),
    "moved": Says("was moved by a calendar to the schedule's next allowed instant",
                  ("calendar_skip", "calendar_only", "on_skip")),
    "skipped-blackout": Says("was skipped: a blackout window was in force", ("on_blackout",)),
    "pruned": Says("is older than the history the job keeps: its record was deleted by retention",
                   ("max_age_ms",)),
    "missing": Says("has no execution and no recorded reason (the scheduler promises there are none)"),
    "retry-wait": Says("waits to run again after a failed attempt"),
    "waiting-overlap": Says("waits for an earlier run of the job to finish", ("overlap", "max_active")),
    "waiting-quota": Says("waits for a quota to free up"),
    "waiting-slot": Says("waits for a free worker slot"),
    "not-yet-due": Says("is not due yet"),
    "before-created": Says("is before the job existed"),
    "not-an-instant": Says("is not an instant of the job's schedule"),
    "no-such-job": Says("names no job the cluster holds"),
}


def says(disposition: str) -> Says:
    return DISPOSITIONS.get(disposition) or Says(f"did not run ({disposition})")


def explain(st: Tables, name: str, t: int, *, on_disk: Execution | None = None,
            audit: Iterable[AuditRecord] | None = None) -> Explanation:
    """What became of instant `t` of job `name`. `on_disk`: the execution of (name, t) in the
    node's history store when the tables no longer hold it; `audit`: the audit trail, when the
    caller may read it (a deleted job is named there), else None."""
    job = st.jobs.get(name)
    ex = st.execs.get((name, t)) or on_disk
    if job is None:
        return _no_job(st, name, t, ex, audit)
    if ex is not None:
        return _of_execution(st, job, ex)
    if t < job.created_ms:
        at = f" (log index {job.incarnation})" if job.incarnation else ""
        return _done(st, job, t, "before-created", [Finding(
            "created", f"job {name} was created at {_when(job.created_ms)}{at}", job.created_ms,
            (("log_index", str(job.incarnation or "")),))])
    s = schedule_of(job)
    if s.kind == "none":
        return _done(st, job, t, "not-an-instant", [Finding(
            "schedule", f"job {name} has no schedule (on demand): only triggers, backfills and DAG runs "
                        "make its executions", details=(("schedule", job.schedule),))])
    if sched.next_after(s, t - 1) != t:
        return _done(st, job, t, "not-an-instant", _nearest(job, s, t))
    if (job.next_fire is not None and t >= job.next_fire) or (job.paused and job.next_fire is None):
        return _not_yet(st, job, t)                # (a job with no instant left ran them all: the ledger)
    rows = ledger.instants(st, job, t, t, 1)
    disposition = rows[0].disposition if rows else "missing"
    detail = rows[0].detail if rows else ""
    return _done(st, job, t, disposition, [*_gap_findings(job, t, disposition, detail),
                                           *_policy_findings(st, job, disposition)])


# ------------------------------------------------------------------ instants without an execution


def _no_job(st: Tables, name: str, t: int, ex: Execution | None, audit: Iterable[AuditRecord] | None) -> Explanation:
    findings: list[Finding] = []
    deleted = [r for r in audit or () if r.action == DELETE_ACTION and r.target == name and r.result == "ok"]
    if deleted:
        r = deleted[-1]
        findings.append(Finding("deleted", f"job {name} was deleted at {_when(r.time_ms)} by {r.principal} "
                                           f"(log index {r.log_index})", r.time_ms,
                                (("by", r.principal), ("log_index", str(r.log_index)))))
    elif audit is None:
        findings.append(Finding("not-recorded", "whether it was deleted is in the audit trail, which this "
                                                "caller may not read"))
    else:
        findings.append(Finding("not-recorded", "no audit record names its deletion: it never existed, or "
                                                "the record has passed the audit retention"))
    disposition = "deleted" if deleted else "no-such-job"
    summary = f"{execution_id(name, t)} " + ("belongs to a deleted job" if deleted else says(disposition).summary)
    out = Explanation(execution_id(name, t), name, t, disposition, summary, findings, _index(st))
    if ex is not None:
        out.findings.append(Finding("execution", f"the execution is still in this node's history: {ex.state}",
                                    ex.updated_ms, (("state", ex.state),)))
    return out


def _not_yet(st: Tables, job: Job, t: int) -> Explanation:
    if job.paused:
        gap = job.gaps[-1] if job.gaps and job.gaps[-1][1] == OPEN_END else None
        since = f" since {_when(gap[0])} ({gap[3]})" if gap is not None else ""
        return _done(st, job, t, "paused", [Finding(
            "paused", f"job {job.name} is paused{since}: its instants are not recorded until it is resumed",
            gap[0] if gap is not None else 0)])
    policy = st.policy(job)
    due = t + jitter_offset_ms(job.name, policy.jitter_ms)
    findings = [Finding("next", f"the job's next instant to record is {_when(job.next_fire)}" if job.next_fire
                        else "the job has no instant left to record", job.next_fire or 0)]
    if due != t:
        findings.append(Finding("jitter", f"with its jitter it is due at {_when(due)}", due,
                                (("due_ms", str(due)),)))
    placed, note = windows.preview(st, job, t)
    if note:                             # a window job: its window, and the placed second once chosen
        findings.append(Finding("window", note + ("" if placed else ": the leader places it before the window "
                                                  "opens, at the least-loaded second by the forecast"),
                                placed, (("placed_ms", str(placed)),) if placed else ()))
    findings.append(Finding("lookahead", "the leader records an instant shortly before it is due (its lookahead)"))
    return _done(st, job, t, "not-yet-due", findings)


def _nearest(job: Job, s: sched.Schedule, t: int) -> list[Finding]:
    after = sched.next_after(s, t)
    before = _previous(s, t, max(job.created_ms, t - NEAREST_SPAN_MS))
    details = (("schedule", s.spec), ("tz", s.tz))
    findings = [Finding("schedule", f"the schedule is {s.spec!r} in {s.tz}", details=details)]
    if before is not None:
        findings.append(Finding("before", f"the nearest instant before is {_when(before)} "
                                          f"({execution_id(job.name, before)})", before))
    if after is not None:
        findings.append(Finding("after", f"the nearest instant after is {_when(after)} "
                                         f"({execution_id(job.name, after)})", after))
    return findings


def _previous(s: sched.Schedule, t: int, lo: int) -> int | None:
    """The newest instant of `s` before `t`, no earlier than `lo` (the window grows backwards)."""
    span = 60_000
    while True:
        start = max(lo, t - span)
        found, x = None, sched.next_after(s, start - 1)
        while x is not None and x < t:
            found, x = x, sched.next_after(s, x)
        if found is not None or start == lo:
            return found
        span *= 8


def _gap_findings(job: Job, t: int, disposition: str, detail: str) -> list[Finding]:
    gap = next((g for g in reversed(job.gaps) if g[0] <= t < g[1]), None)
    if gap is None:
        return [Finding(disposition, detail)] if detail else []
    start, end, _, text = gap
    span = f"from {_when(start)}" + ("" if end == OPEN_END else f" to {_when(end)}")
    finding = Finding(disposition, f"{text} ({span})", start,
                      (("from_ms", str(start)), ("to_ms", "" if end == OPEN_END else str(end))))
    if disposition == "paused":
        return [Finding("paused", f"{text}: the job was paused {span}", start, finding.details)]
    return [finding]


def _policy_findings(st: Tables, job: Job, disposition: str) -> list[Finding]:
    fields = says(disposition).policy
    if not fields:
        return []
    policy = st.policy(job)
    values = [(f, _policy_value(policy, f)) for f in fields if hasattr(policy, f)]
    if not values:
        return []
    text = ", ".join(f"{f.removesuffix('_ms')} {v}" for f, v in values)
    return [Finding("policy", f"the job's policy: {text}", details=tuple(values))]


def _policy_value(policy: JobPolicy, name: str) -> str:
    value = getattr(policy, name)
    if name.endswith("_ms"):
        return "none" if not value else f"{value / 1000:g}s"
    return str(value)


# ------------------------------------------------------------------ executions


def _of_execution(st: Tables, job: Job, ex: Execution) -> Explanation:
    findings = [_recorded(ex), Finding("not-recorded", f"which node led term {ex.term} is not kept in the "
                                                       "replicated state (only the term is)")]
    if ex.due != ex.scheduled_ms and not any(e.kind == "placed" for e in ex.events):
        findings.append(Finding("jitter", f"due at {_when(ex.due)} (the job's jitter)", ex.due))
    retry = RetryPolicy.from_spec(job.spec)
    failures = 0
    for a in ex.attempts:
        findings += _attempt(ex, a)
        if a.state in (FAILED, TIMED_OUT):
            failures += 1
        if a is not ex.attempts[-1] and a.state not in (RUNNING, REJECTED):
            findings.append(_retried(ex, a, failures, retry))
    findings += [Finding(e.kind, e.message, e.time_ms) for e in ex.events if e.kind != "params"]
    disposition = ledger.disposition_of(ex)
    if ex.state in (SCHEDULED, RETRY_WAIT):
        disposition, waiting = _waiting(st, job, ex)
        findings += waiting
    elif ex.reason and ex.state not in (SUCCEEDED, RUNNING):      # a success keeps its last retry's reason
        held = _EXECUTION_ID.search(ex.reason) if disposition == "skipped-overlap" else None
        findings.append(Finding("reason", ex.reason, ex.updated_ms,
                                (("held_by", held.group(0)),) if held else ()))
    findings += _policy_findings(st, job, disposition)
    findings += _sla(st, job, ex)
    return _done(st, job, ex.scheduled_ms, disposition, findings, state=ex.state)


def _recorded(ex: Execution) -> Finding:
    return Finding("recorded", f"recorded ({ex.trigger}) at {_when(ex.created_ms)}, log index {ex.log_index}, "
                               f"by the leader of term {ex.term}", ex.created_ms,
                   (("log_index", str(ex.log_index)), ("term", str(ex.term)), ("trigger", ex.trigger)))


def _attempt(ex: Execution, a: Attempt) -> list[Finding]:
    incarnation = getattr(a, "worker_incarnation", "")
    claim = Finding("claimed", f"attempt {a.number} claimed by worker {a.worker} with fencing token "
                               f"{a.fencing_token} (the log index of the claim)", a.started_ms,
                    (("attempt", str(a.number)), ("worker", a.worker), ("fencing_token", str(a.fencing_token)),
                     ("worker_incarnation", incarnation)))
    if a.state == RUNNING:
        return [claim]
    outcome = [f"attempt {a.number} ended {a.state}"]
    if a.exit_code:
        outcome.append(f"exit code {a.exit_code}")
    if a.http_status:
        outcome.append(f"HTTP {a.http_status}")
    if a.error:
        outcome.append(a.error)
    out = [claim, Finding("outcome", ", ".join(outcome), a.ended_ms,
                          (("attempt", str(a.number)), ("state", a.state), ("exit_code", str(a.exit_code))))]
    if a.rejected:
        out.append(Finding("fenced", f"a late result of attempt {a.number} was refused by fencing: {a.rejected}",
                           a.ended_ms))
    return out


def _retried(ex: Execution, a: Attempt, failures: int, retry: RetryPolicy) -> Finding:
    if a.state == LOST:
        why = "its worker was lost: at least once, it runs again whatever the retry policy"
    elif a.state in (FAILED, TIMED_OUT):
        wait = retry.delay_ms(ex.id, failures) / 1000
        why = (f"failure {failures} of max_attempts {retry.max_attempts}: the retry policy allowed another, "
               f"after a backoff of {wait:g}s")
    else:
        why = f"it ended {a.state}, and a new attempt was asked for"
    return Finding("retry", f"retried after attempt {a.number}: {why}", a.ended_ms,
                   (("attempt", str(a.number)), ("max_attempts", str(retry.max_attempts))))


def _waiting(st: Tables, job: Job, ex: Execution) -> tuple[str, list[Finding]]:
    """Why a run that waits for a claim waits, from the replicated counters (policy.blocked)."""
    now = st.clock_ms
    start = ex.retry_at if ex.state == RETRY_WAIT and ex.retry_at is not None else ex.due
    if start > now:
        kind = "retry-wait" if ex.state == RETRY_WAIT else "not-yet-due"
        return kind, [Finding("due", f"it may start at {_when(start)}", start)]
    policy = st.policy(job)
    why = blocked(st, ex, policy)
    if why.startswith(("overlap", "max_active")):
        return "waiting-overlap", [Finding("waiting", f"waiting since {_when(start)}: {why}", start)]
    if why:
        key = why.split("'")[1] if "'" in why else ""
        return "waiting-quota", [Finding("waiting", f"waiting since {_when(start)}: {why}", start,
                                         (("quota", key),))]
    pool = f"pool {policy.pool}" if policy.pool else "any pool"
    return "waiting-slot", [Finding("waiting", f"waiting since {_when(start)} for a free worker slot in {pool}: "
                                               "no quota or overlap rule holds it back", start,
                                    (("pool", policy.pool),))]


def _sla(st: Tables, job: Job, ex: Execution) -> list[Finding]:
    sla = S.job_sla(st, job)
    if sla is None:
        return [Finding("sla", "no SLA")]
    deadline = S.deadline_ms(sla, ex.scheduled_ms)
    if deadline is None:
        return [Finding("sla", f"SLA {sla.describe()}: the deadline cannot be computed")]
    verdict, why = S.verdict(ex, deadline, st.clock_ms)
    return [Finding("sla", f"SLA {sla.describe()}, deadline {_when(deadline)}: {verdict} ({why})", deadline,
                    (("verdict", verdict), ("deadline_ms", str(deadline))))]


# ------------------------------------------------------------------ shared


def _done(st: Tables, job: Job, t: int, disposition: str, findings: list[Finding], state: str = "") -> Explanation:
    eid = execution_id(job.name, t)
    summary = f"{eid} {says(disposition).summary}" + (f" ({state})" if state and disposition != state.lower() else "")
    return Explanation(eid, job.name, t, disposition, summary, findings, _index(st))


def _index(st: Tables) -> int:
    return int(getattr(st, "last_index", 0))


def _when(ms: int | None) -> str:
    return "never" if ms is None else sched.format_ms(ms)
