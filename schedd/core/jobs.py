"""Jobs: create, update, delete, pause and resume job rows, and the quota table.

Decides what `put`, `delete`, `pause`, `resume` and `quota` entries do to the job table. `upsert`
is the one path that writes a job row from a checked spec, for a user's job and for a DAG's rows
(schedd.core.dags) alike. Validation happens before the first write: a refused entry changes
nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from schedd.core import calendars
from schedd.core import commands as C
from schedd.core import schedule as sched
from schedd.core.firing import OPEN_END, add_gap, prune_history
from schedd.core.model import (
    NAME_RE, DEFAULT_HISTORY_LIMIT, RUNNING, SCHEDULED, SKIPPED, Job, ValidationError, spec_template,
)
from schedd.core.specs import JobHead, JobSpec, load_job
from schedd.core.policy import QUOTA_KINDS
from schedd.core import results as R
from schedd.core.results import ApplyResult, CancelAttempt, Code, ok, reject
from schedd.core.tables import Tables, job_or_reject, next_fire_for, schedule_of

Checked = tuple[JobHead, str, sched.Schedule]     # (spec's head, its committed text, its schedule)


def parse_schedule(spec: JobHead | JobSpec) -> sched.Schedule:
    """The schedule of a job spec, with its DST policy (ScheduleError if it does not parse)."""
    return sched.parse(spec.schedule, spec.timezone, hash_key=spec.name, gap=spec.dst_gap, fold=spec.dst_fold)


def committed_spec(text: object) -> Checked:
    spec = load_job(text)
    try:
        s = parse_schedule(spec)
    except sched.ScheduleError as e:
        raise ValidationError(str(e)) from None
    return spec, str(text), s


def team_cap(cmd: C.Command) -> int:
    """The proposer's limits.max_jobs_per_team, carried in the entry (0 = none)."""
    cap = cmd.args.get("team_cap") or 0
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else 0


def team_overflow(st: Tables, pairs: list[tuple[str, str]], cap: int) -> str:
    """Why creating or moving the jobs `pairs` (name, team) would put a team over `cap` jobs
    ("" if it would not; cap 0 = no cap). Updates within a team add nothing."""
    if not cap:
        return ""
    adds: dict[str, int] = {}
    for name, team in pairs:
        job = st.jobs.get(name)
        if job is None or job.team != team:
            adds[team] = adds.get(team, 0) + 1
    for team, n in adds.items():
        have = len(st.by_team.get(team, ()))
        if have + n > cap:
            return (f"team {team!r} would hold {have + n} jobs ({have} now), more than "
                    f"limits.max_jobs_per_team ({cap})")
    return ""


def put(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    try:
        spec, text, s = committed_spec(cmd.args.get("spec"))
    except ValidationError as e:
        return reject(Code.INVALID, str(e))
    current = st.jobs.get(spec.name)
    if current is not None and cmd.args.get("create_only"):
        return reject(Code.EXISTS, f"job {spec.name!r} already exists")
    expected = cmd.args.get("expected_version") or 0
    if expected and (current is None or current.version != expected):
        have = "absent" if current is None else f"at version {current.version}"
        return reject(Code.CONFLICT, f"job {spec.name!r} is {have}, not at version {expected}")
    over = team_overflow(st, [(spec.name, spec.team)], team_cap(cmd))
    if over:
        return reject(Code.EXHAUSTED, over)
    missing = calendars.unknown_refs(st, [(spec.name, spec.source)])
    if missing:
        return reject(Code.INVALID, missing)
    created = upsert(st, spec, text, s, cmd, index)
    job = st.jobs[spec.name]
    return ok(R.Stored(created, job.name, job.version))


def check_specs(texts: list[Any], first: int = 1) -> list[Checked] | ApplyResult:
    """Parse committed spec texts (the costly half of registering a job), or the refusal of
    the first bad one, named with its 1-based `position` in the batch (`first` = position of
    texts[0]). A text that is an earlier one with another name (a batch made from a template)
    is not parsed again (`_Shape`): the same result, in a fraction of the time."""
    checked: list[Checked] = []
    shapes: list[_Shape] = []
    for i, text in enumerate(texts, first):
        done: Checked | None = None
        if isinstance(text, str):
            for shape in shapes:
                done = shape.renamed(text)
                if done is not None:
                    break
        if done is None:
            try:
                done = committed_spec(text)
            except ValidationError as e:
                return reject(Code.INVALID, f"job #{i}: {e}", position=i)
            if len(shapes) < MAX_SHAPES:
                learned = _Shape.of(done)
                if learned is not None:
                    shapes.append(learned)
        checked.append(done)
    return checked


MAX_SHAPES = 4                  # templates remembered per chunk (each costs a compare per job)
_PROBES = ("schedd-probe-a", "schedd-probe-b")


def cut_at_name(text: str, name: str) -> tuple[str, str] | None:
    """(before, after) with `text == before + '"<name>"' + after` where that literal is the
    JSON object's top-level "name" value, or None. Another valid job name put there gives the
    same object under that name (a valid name is its own JSON string): the template of a batch
    whose specs differ only by name. That the cut is the top-level name is proven by parsing the
    text once with a probe name in it."""
    literal = f'"{name}"'
    if text.count(literal) != 1 or not NAME_RE.fullmatch(name):
        return None
    before, _, after = text.partition(literal)
    probe = _PROBES[name == _PROBES[0]]
    try:
        again = json.loads(f'{before}"{probe}"{after}')
    except ValueError:
        return None
    return (before, after) if isinstance(again, dict) and again.get("name") == probe else None


@dataclass(slots=True, frozen=True)
class _Shape:
    """A checked spec text cut around its top-level name literal: `before + '"<name>"' +
    after`. Another text of that form with a valid name parses to the same spec under that
    name (JSON parsing is compositional: one string token changed changes one value), so it
    gets the checked spec as it is, renamed, without json.loads or the checks. That the cut is
    the top-level name is proven once, by parsing the shape with a probe name in it."""

    before: str
    after: str
    spec: JobHead
    schedule: sched.Schedule | None      # None: an H schedule, placed by the name (parsed per job)

    @staticmethod
    def of(checked: Checked) -> _Shape | None:
        spec, text, s = checked
        cut = cut_at_name(text, spec.name)
        if cut is None:
            return None
        return _Shape(*cut, spec, None if sched.uses_hash(spec.schedule) else s)

    def renamed(self, text: str) -> Checked | None:
        b, a = self.before, self.after
        end = len(text) - len(a)
        if end - len(b) < 3 or not text.startswith(b) or not text.endswith(a) \
                or text[len(b)] != '"' or text[end - 1] != '"':
            return None
        name = text[len(b) + 1:end - 1]
        if not NAME_RE.fullmatch(name):      # no quote, backslash or control character in it
            return None
        spec = self.spec.renamed(name)       # every other value shared: apply only reads them
        try:
            s = self.schedule or parse_schedule(spec)
        except sched.ScheduleError:
            return None                      # the full path words the refusal
        return spec, text, s


def put_specs(st: Tables, checked: list[Checked], cmd: C.Command, index: int) -> ApplyResult:
    """Create or update every job of a checked batch, or none: all are checked against the
    table (duplicates, create_only, the team cap) before the first is written."""
    names: dict[str, int] = {}
    for i, (spec, _, _) in enumerate(checked, 1):
        name = spec.name
        if name in names:
            return reject(Code.INVALID, f"job {name!r} (#{i}) appears more than once in the batch "
                                        f"(first at #{names[name]})", position=i)
        names[name] = i
        if cmd.args.get("create_only") and name in st.jobs:
            return reject(Code.EXISTS, f"job {name!r} (#{i}) already exists", position=i)
    over = team_overflow(st, [(spec.name, spec.team) for spec, _, _ in checked], team_cap(cmd))
    if over:
        return reject(Code.EXHAUSTED, over)
    missing = calendars.unknown_refs(st, [(spec.name, spec.source) for spec, _, _ in checked])
    if missing:
        return reject(Code.INVALID, missing)
    created = sum(upsert(st, spec, text, s, cmd, index) for spec, text, s in checked)
    return ok(R.PutMany(created, len(checked) - created))


def upsert(st: Tables, spec: JobHead, text: str, s: sched.Schedule, cmd: C.Command, index: int,
           *, keep_if_same: bool = False) -> bool:
    """Create or update a job row from a checked spec; True if it was created. A new job's
    incarnation is `index`, the entry that created it. With `keep_if_same` (a DAG's rows, written
    again by every `dag apply`), a row whose spec text is unchanged is left as it is. Repeated
    values (team, schedule, zone, ...) are one tuple shared by the rows that hold them (Job.traits)."""
    paused = spec.paused
    team, schedule, tz = spec.team, spec.schedule, spec.timezone
    limit = spec.history_limit or DEFAULT_HISTORY_LIMIT
    dst = spec.dst_policy
    job = st.jobs.get(spec.name)
    if job is None:
        job = Job(name=spec.name, team=team, schedule=schedule, tz=tz, spec_t=spec_template(text, spec.name),
                  version=1, paused=paused, next_fire=next_fire_for(s, cmd.now, None), created_ms=cmd.now,
                  updated_ms=cmd.now, created_by=cmd.by, history_limit=limit, dst=dst, incarnation=index)
        st.seed_policy(job, spec)
        st.add_job(job)
        return True
    if keep_if_same and job.spec_text == text:
        return False
    timing_changed = (job.schedule, job.tz, job.dst) != (schedule, tz, dst)
    resumed = job.paused and not paused
    st.set_team(job, team)
    job.set_traits(team=team, schedule=schedule, tz=tz, history_limit=limit, dst=dst, paused=paused,
                   version=job.version + 1)
    job.spec_text = text
    st.seed_policy(job, spec)
    job.updated_ms = cmd.now
    if timing_changed or resumed:
        job.next_fire = next_fire_for(s, cmd.now, st.recorded_floor(job))
    st.schedule_wheel(job)
    prune_history(st, job, cmd.now, index)
    return False


# A claimed attempt due at least this much after a pause or delete cannot have started, even on a
# worker whose clock runs ahead of the leader's: the leader cancels it (the rule: a pause, delete or
# failover inside the lookahead window cancels the pushed assignment).
NOT_STARTED_MARGIN_MS = 1_000


def delete(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    job = job_or_reject(st, cmd)
    if isinstance(job, ApplyResult):
        return job
    held = tuple(CancelAttempt(ex.attempts[-1].fencing_token, ex.id)
                 for t in st.by_job.get(job.name, ())
                 if (ex := st.execs[(job.name, t)]).state == RUNNING and ex.attempts
                 and ex.due > cmd.now + NOT_STARTED_MARGIN_MS)
    st.drop_job(job)
    return ok(R.Named(job.name), effects=held)   # the leader tells their workers (state unchanged by it)


def set_paused(st: Tables, cmd: C.Command, paused: bool) -> ApplyResult:
    job = job_or_reject(st, cmd)
    if isinstance(job, ApplyResult):
        return job
    if job.paused != paused:
        spec = job.spec.with_paused(paused)
        if paused:
            skip_pending(st, job, f"paused by {cmd.by or 'a user'}", cmd.now)
            add_gap(job, cmd.now, OPEN_END, "paused", f"paused by {cmd.by or 'a user'}")
        else:
            job.next_fire = resume_from(job, cmd, st.recorded_floor(job))
        job.paused, job.spec_text = paused, spec.text()
        st.seed_policy(job, JobHead.of(spec))
        job.version += 1
        job.updated_ms = cmd.now
        st.schedule_wheel(job)
    return ok(R.Revised(job.name, job.version))


def resume_from(job: Job, cmd: C.Command, recorded: int | None) -> int | None:
    """Close the pause's gap in the ledger. With `catch_up`, the instants missed while paused
    are handed to the job's catch-up policy (the fire path) instead of being recorded paused.
    `recorded`: the newest instant that may have a record (Tables.recorded_floor)."""
    s = schedule_of(job)
    gaps = list(job.gaps)
    since = None
    if gaps and gaps[-1][1] == OPEN_END:
        since = gaps[-1][0]
        if cmd.args.get("catch_up"):
            gaps.pop()
        else:
            gaps[-1] = (since, cmd.now, *gaps[-1][2:])
        job.gaps = tuple(gaps)
    if cmd.args.get("catch_up") and since is not None:
        floor = since - 1 if recorded is None else max(recorded, since - 1)
        return sched.next_after(s, floor)
    return next_fire_for(s, cmd.now, recorded)


def skip_pending(st: Tables, job: Job, reason: str, now: int) -> None:
    """Pausing: intents already recorded (within the lookahead) end SKIPPED, not forgotten."""
    if not st.pending.get(job.name):
        return
    for t in list(st.by_job.get(job.name, ())):
        ex = st.execs[(job.name, t)]
        if ex.state == SCHEDULED and not ex.attempts and ex.trigger in ("schedule", "catchup"):
            ex.reason = f"paused: {reason}"
            st.set_state(ex, SKIPPED, now)


def pause(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    return set_paused(st, cmd, True)


def resume(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    return set_paused(st, cmd, False)


def quota(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    key, limit = cmd.args.get("key"), cmd.args.get("limit")
    kind, _, name = key.partition(":") if isinstance(key, str) else ("", "", "")
    if kind not in QUOTA_KINDS or not name:
        return reject(Code.INVALID, f"bad quota key {key!r}: expected team:<name>, pool:<name> or lane:backfill")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        return reject(Code.INVALID, "limit must be a whole number >= 0 (0 removes the quota)")
    assert isinstance(key, str)
    if limit:
        st.quotas[key] = limit
    else:
        st.quotas.pop(key, None)
    return ok(R.Quota(key, limit))
