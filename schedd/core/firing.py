"""Firing and catch-up: which executions exist, and when they were recorded.

Decides what a `fire` entry records for each (job, instant) the leader planned (a plain run, a
catch-up under the job's policy, a duplicate, nothing), what `trigger` and `backfill` record,
which waiting runs the leader's `skip` ends, and how much history a job keeps. Every missed
instant without an execution of its own gets a disposition in the job's ledger (`add_gap`).
Deterministic: instants come from the entry and the schedule, never from a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from schedd.core import calendars
from schedd.core import commands as C
from schedd.core import history
from schedd.core import params as run_params
from schedd.core import schedule as sched
from schedd.core import sla as sla_index
from schedd.core import windows
from schedd.core.model import (
    MAX_ERROR_CHARS, SCHEDULED, SKIPPED, TERMINAL_STATES, Execution, ExecutionEvent, Job, ValidationError,
    execution_id,
)
from schedd.core.policy import BACKFILL, jitter_offset_ms
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code, Launch, ok, reject
from schedd.core.tables import MIN_MS, Tables, job_or_reject, schedule_of

MISSED_GRACE_MS = 10_000       # later than this, an instant was missed: the catch-up policy decides
                               # (and it is labelled "catchup"); sooner, it was only delayed
GAPS_KEEP = 50                 # ledger gaps kept per job
OPEN_END = 2 ** 62             # the end of a gap still open (a job paused now)
MAX_BACKFILL_PER_ENTRY = 1000


def _newest(s: sched.Schedule, lo: int, hi: int, n: int) -> list[int]:
    """The newest `n` instants of `s` in [lo, hi], oldest first, without walking from `lo`: the
    window looked at grows backwards from `hi` until it holds n instants or reaches lo."""
    span = 60_000
    while True:
        start = max(lo, hi - span)
        found: deque[int] = deque(maxlen=n)
        x = sched.next_after(s, start - 1)
        while x is not None and x <= hi:
            found.append(x)
            x = sched.next_after(s, x)
        if len(found) >= n or start == lo:
            return list(found)
        span *= 8


def _launches(items: list[list[Any]]) -> tuple[Launch, ...]:
    return tuple(Launch(name, t) for name, t, code in items if code == "created")


def record(st: Tables, job: Job, t: int, trigger: str, cmd: C.Command, index: int, *,
            lane: str = "", params: dict[str, str] | None = None) -> Execution:
    """`params`: the ones given for this run (a trigger's), over the job's defaults."""
    policy = st.policy(job)
    due = t + jitter_offset_ms(job.name, policy.jitter_ms) if trigger in ("schedule", "catchup") else t
    window = windows.of(st, job) if trigger in ("schedule", "catchup") else ()
    placed = ""
    if window:
        due, placed = windows.due(st, job, t, window)    # the placed second (schedd.core.windows)
    ex = Execution(job=job.name, scheduled_ms=t, state=SCHEDULED, trigger=trigger,
                   created_ms=cmd.now, term=cmd.term, log_index=index, updated_ms=cmd.now,
                   due_ms=due if due != t else 0, lane=lane)
    if placed:
        ex.events += (ExecutionEvent(cmd.now, "placed", placed),)
    if (policy.overlap == "queue" and trigger in ("schedule", "catchup", "manual")
            and st.active_count(job.name) and st.pending.get(job.name, 0) >= policy.queue_limit):
        ex.state = SKIPPED
        ex.reason = (f"overlap queue full: {st.pending[job.name]} run(s) already waiting behind "
                     f"{st.active_desc(job.name)}")
    if trigger in ("schedule", "catchup"):
        calendars.shape(st, job, ex, cmd.now)     # a calendar's skip or move, a blackout's skip or defer
    if policy.params or params:
        ex.events += run_params.event(cmd.now, run_params.defaults(policy.params, params or {}, st.feature_level))
    st.add_exec(ex)
    job.fired_total += 1
    prune_history(st, job, cmd.now, index)
    sla_index.on_record(st, job, ex, cmd.now)
    return ex


def prune_history(st: Tables, job: Job, now: int, index: int) -> None:
    """Bound what a job keeps in memory, deterministically. From the history level on, finished
    executions leave for the history stores (schedd.core.history.retire); below it, the job keeps
    its newest `history_limit` executions and none finished longer than its
    `history_max_age_seconds` ago. Only finished executions leave: work that has not run yet is
    never dropped to make room (past `history_limit` waiting runs, the oldest are skipped)."""
    times = st.by_job.get(job.name)
    if times is None:
        return
    if st.pending.get(job.name, 0) > job.history_limit:
        skip_backlog(st, job, times, now)
    if history.archives(st, job):
        history.retire(st, job, index)
        return
    excess = len(times) - job.history_limit
    max_age = st.policy(job).max_age_ms
    if excess <= 0 and not max_age:
        return
    horizon = now - max_age if max_age else MIN_MS
    victims: list[Execution] = []
    for t in times:
        if len(victims) >= excess and t >= horizon:
            break
        ex = st.execs[(job.name, t)]
        if ex.state in TERMINAL_STATES and (len(victims) < excess or ex.updated_ms < horizon):
            victims.append(ex)
    for ex in victims:
        st.drop_exec(ex)


def skip_backlog(st: Tables, job: Job, times: Iterable[int], now: int) -> None:
    """A job whose runs nobody starts (no worker for its pool) must not grow without bound:
    past `history_limit` waiting runs, the oldest is recorded SKIPPED, saying why."""
    excess = st.pending[job.name] - job.history_limit
    for t in list(times):
        if excess <= 0:
            break
        ex = st.execs[(job.name, t)]
        if ex.state == SCHEDULED and not ex.attempts:
            ex.reason = (f"backlog: never started while {job.history_limit} newer runs were waiting "
                         "(history_limit)")
            st.set_state(ex, SKIPPED, now)
            excess -= 1


def trigger(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    job = job_or_reject(st, cmd)
    if isinstance(job, ApplyResult):
        return job
    try:
        given = run_params.from_entry(cmd)      # checked before anything changes
    except ValidationError as e:
        return reject(Code.INVALID, str(e))
    t = history.trigger_time(st, job.name, cmd.now)
    ex = record(st, job, t, "forced" if cmd.args.get("force") else "manual", cmd, index, params=given)
    items = [[job.name, t, "created" if ex.state == SCHEDULED else "skipped"]]
    return ok(R.Triggered(job.name, t, ex.state, items), effects=_launches(items))


def fire(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    if cmd.term != st.epoch:
        return reject(Code.STALE_TERM, f"fire from term {cmd.term}, but the leader epoch is {st.epoch}")
    items = []
    for name, t in cmd.args.get("items") or []:
        for when, code in fire_one(st, name, t, cmd, index):
            items.append([name, when, code])
    return ok(R.Items(items), effects=_launches(items))


def fire_one(st: Tables, name: str, t: int, cmd: C.Command, index: int) -> list[tuple[int, str]]:
    job = st.jobs.get(name)
    if job is None:
        return [(t, "unknown_job")]
    if job.paused:
        return [(t, "paused")]
    due = job.next_fire == t
    if due and (name, t) not in st.execs and t < cmd.now - MISSED_GRACE_MS:
        return catch_up(st, job, t, cmd, index)
    if due:
        job.next_fire = sched.next_after(schedule_of(job), t)
        job.last_fire = t
        st.schedule_wheel(job)
    if (name, t) in st.execs or history.may_be_archived(st, name, t):
        return [(t, "duplicate")]
    if not due:
        return [(t, "not_due")]
    # Late by less than the missed grace (an outage, a failover): delayed, not missed. It is a
    # plain scheduled run, never throttled by the catch-up rate, whatever the number of them.
    ex = record(st, job, t, "schedule", cmd, index)
    return [(t, "created" if ex.state == SCHEDULED else "skipped")]


def catch_up(st: Tables, job: Job, t: int, cmd: C.Command, index: int) -> list[tuple[int, str]]:
    """The job's catch-up policy over the instants it missed, from `t` (its next_fire) to
    `now - MISSED_GRACE_MS` (an instant late by less than that is a failover's delay, and runs).
    Runs are recorded as executions; every other missed instant gets a disposition in the
    ledger (a gap): outside the window, past the starting deadline, coalesced, over the cap,
    or policy none. With `all` and no cap, one instant is recorded per call and the planner
    feeds the rest, rate-limited by the assigner."""
    s, p, now = schedule_of(job), st.policy(job), cmd.now
    horizon = now - MISSED_GRACE_MS
    out: list[tuple[int, str]] = []
    cut, disposition, detail = MIN_MS, "", ""
    if p.catchup_window_ms:
        cut, disposition = now - p.catchup_window_ms, "skipped-window"
        detail = f"older than the catch-up window of {p.catchup_window_ms / 1000:g}s"
    if p.deadline_ms and now - p.deadline_ms > cut:
        cut, disposition = now - p.deadline_ms, "skipped-deadline"
        detail = f"its starting deadline of {p.deadline_ms / 1000:g}s had passed"
    lo: int | None = t
    if t < cut:
        lo = sched.next_after(s, min(cut, horizon + 1) - 1)
        end = lo if lo is not None and lo <= horizon else horizon + 1
        add_gap(job, t, end, disposition, f"missed while no leader ran it; {detail}")
        out.append((t, "skipped"))
    if lo is None or lo > horizon:
        job.next_fire, job.last_fire = lo, horizon
        st.schedule_wheel(job)
        return out
    if p.catchup == "all" and not p.catchup_max:
        job.next_fire, job.last_fire = sched.next_after(s, lo), lo
        st.schedule_wheel(job)
        ex = record(st, job, lo, "catchup", cmd, index)
        return out + [(lo, "created" if ex.state == SCHEDULED else "skipped")]
    if p.catchup == "none":
        keep: list[int] = []
        add_gap(job, lo, horizon + 1, "skipped-catchup",
                      "missed while no leader ran it; catch-up policy none")
    else:
        n = 1 if p.catchup == "latest" else p.catchup_max
        if p.catchup == "all" and p.catchup_order == "oldest":
            keep = sched.next_n(s, lo - 1, n)
            keep = [x for x in keep if x <= horizon]
            add_gap(job, keep[-1] + 1, horizon + 1, "skipped-cap",
                          f"missed; over the catch-up cap of {n} (oldest first)")
        else:
            keep = _newest(s, lo, horizon, n)
            if p.catchup == "latest":
                add_gap(job, lo, keep[0], "coalesced",
                              f"missed; coalesced into {execution_id(job.name, keep[-1])} (catch-up latest)")
            else:
                add_gap(job, lo, keep[0], "skipped-cap",
                              f"missed; over the catch-up cap of {n} (newest first)")
    job.next_fire, job.last_fire = sched.next_after(s, horizon), horizon
    st.schedule_wheel(job)
    for x in keep:
        if (job.name, x) not in st.execs:
            ex = record(st, job, x, "catchup", cmd, index)
            out.append((x, "created" if ex.state == SCHEDULED else "skipped"))
    if not keep:
        out.append((t, "skipped"))
    return out


def skip(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """The leader's decision that executions due now will not run (overlap skip, starting
    deadline): recorded SKIPPED with the reason, never dropped silently."""
    if cmd.term != st.epoch:
        return reject(Code.STALE_TERM, f"skip from term {cmd.term}, but the leader epoch is {st.epoch}")
    items = []
    for name, t, reason in cmd.args.get("items") or []:
        ex = st.execs.get((name, t))
        if ex is None or ex.state != SCHEDULED or ex.attempts:
            items.append([name, t, "conflict"])
            continue
        ex.reason = str(reason)[:MAX_ERROR_CHARS]
        st.set_state(ex, SKIPPED, cmd.now)
        items.append([name, t, "skipped"])
    return ok(R.Items(items))


def backfill(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """Executions for past instants of a job's schedule, on the backfill lane: served after
    today's runs, under their own quota. Instants already recorded are left as they are: those in
    memory here, those the proposer found in its history store (`stored`, counted as duplicates),
    and, for an instant whose record may have left memory, the rule of schedd.core.history
    (`checked`: the store index at which the proposer found the instants absent)."""
    job = job_or_reject(st, cmd)
    if isinstance(job, ApplyResult):
        return job
    times, checked, stored = cmd.args.get("times"), cmd.args.get("checked"), cmd.args.get("stored", 0)
    if not isinstance(times, list) or len(times) > MAX_BACKFILL_PER_ENTRY \
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in times):
        return reject(Code.INVALID, f"times must be a list of at most {MAX_BACKFILL_PER_ENTRY} integers")
    if not _count(stored) or (checked is not None and not _count(checked)):
        return reject(Code.INVALID, "checked and stored must be integers >= 0")
    s = schedule_of(job)
    for x in times:
        if sched.next_after(s, x - 1) != x:
            return reject(Code.INVALID, f"{sched.format_ms(x)} is not an instant of {job.name}'s schedule")
    floor, left_at = st.archived.get(job.name, (MIN_MS, 0))
    if checked is not None and checked < left_at and any(x <= floor for x in times):
        return reject(Code.CONFLICT, f"history of {job.name} moved since the check at index {checked} "
                      f"(an execution left memory at {left_at}): check again")
    created, duplicates = 0, stored
    for x in times:
        if (job.name, x) in st.execs or (x <= floor and checked is None):
            duplicates += 1
            continue
        record(st, job, x, BACKFILL, cmd, index, lane=BACKFILL)
        created += 1
    return ok(R.Backfilled(job.name, created, duplicates))


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


def add_gap(job: Job, start: int, end: int, disposition: str, detail: str) -> None:
    """Record instants [start, end) that were not run, and why: the ledger of dispositions
    for instants that have no execution of their own (a day of a per-second job paused is one
    record, not 86,400)."""
    if end <= start:
        return
    job.gaps = (*job.gaps[-(GAPS_KEEP - 1):], (start, end, disposition, detail[:MAX_ERROR_CHARS]))
