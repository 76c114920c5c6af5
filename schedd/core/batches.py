"""Batches of jobs that commit whole or not at all, however many Raft entries they take.

A PutJobs call that fits one entry (commands.BATCH_ENTRY_BYTES) is one `put_many` entry. A bigger
one is replicated as

    batch_stage  {batch, seq, specs}   x N   a chunk kept under the batch id: not a job (not
                                             listed, not scheduled, no name taken)
    batch_commit {batch, chunks, jobs}       every staged spec is checked, then all become jobs;
                                             or none does and the batch is aborted
    batch_abort  {batch, reason}             the staged chunks are dropped; from then on nothing
                                             of the batch can stage or commit

Every batch id leaves a record: staged, then committed or aborted. A finished record is kept for
FINISHED_KEEP_MS after it ended (by entry time), so the proposer's abort after an unknown outcome
learns the truth from the log's order: "aborted" (the commit, if it comes later, is refused) or
"committed" (with the commit's counts). So the API never answers "failed" for a batch that
commits, and never commits one it answered "failed" for.

A staged batch nobody commits (its proposer died) is aborted by the leader once the newest
entry time is BATCH_TTL_MS past its first stage (`expired`), and a commit entry stamped past the
TTL is refused by apply itself: the outcome depends on entry times only, never on a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schedd.core import commands as C

if TYPE_CHECKING:
    from schedd.core.state import SchedulerState

STAGED, COMMITTED, ABORTED = "staged", "committed", "aborted"
BATCH_TTL_MS = 120_000            # a staged batch not committed this long after its first stage
FINISHED_KEEP_MS = 15 * 60 * 1000  # a finished record answers late aborts and refuses late stages
MAX_CHUNKS = 100_000
MAX_BATCH_ID = 64


@dataclass(slots=True)
class Batch:
    since: int                                   # entry time of its first entry
    state: str = STAGED
    ended: int = 0
    chunks: dict[int, list] = field(default_factory=dict)
    result: dict = field(default_factory=dict)   # the commit's counts, or why it was aborted


def _reject(code: str, msg: str, **extra) -> dict:
    return {"ok": False, "code": code, "msg": msg, **extra}


def _batch_id(cmd: C.Command) -> str | dict:
    b = cmd.args.get("batch")
    if not isinstance(b, str) or not 0 < len(b) <= MAX_BATCH_ID:
        return _reject("invalid", f"batch must be an id of 1-{MAX_BATCH_ID} characters")
    return b


def _refuse_finished(b: str, rec: Batch) -> dict:
    if rec.state == ABORTED:
        return _reject("aborted", f"batch {b} was aborted ({rec.result.get('reason', 'by its proposer')}); "
                                  "nothing of it was committed")
    return _reject("conflict", f"batch {b} is already committed")


def _finish(st: "SchedulerState", b: str, rec: Batch, state: str, now: int, result: dict) -> None:
    for seq in rec.chunks:
        st.batch_checked.pop((b, seq), None)
    rec.state, rec.ended, rec.chunks, rec.result = state, now, {}, result


def stage(st: "SchedulerState", cmd: C.Command, index: int) -> dict:
    b = _batch_id(cmd)
    if isinstance(b, dict):
        return b
    seq, specs = cmd.args.get("seq"), cmd.args.get("specs")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < MAX_CHUNKS:
        return _reject("invalid", f"seq must be an integer in [0, {MAX_CHUNKS})")
    if not isinstance(specs, list) or not all(isinstance(t, str) for t in specs):
        return _reject("invalid", "specs must be a list of spec texts")
    first = cmd.args.get("first", 1)
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        return _reject("invalid", "first must be a position >= 1")
    rec = st.batches.get(b)
    if rec is None:
        rec = st.batches[b] = Batch(since=cmd.now)
    elif rec.state != STAGED:
        return _refuse_finished(b, rec)
    checked = st.check_specs(specs, first)     # parsed here, in small steps, not all at commit
    if isinstance(checked, dict):
        return checked
    rec.chunks[seq] = specs
    st.batch_checked[(b, seq)] = checked
    return {"ok": True, "code": "ok", "batch": b, "seq": seq}


def commit(st: "SchedulerState", cmd: C.Command, index: int) -> dict:
    b = _batch_id(cmd)
    if isinstance(b, dict):
        return b
    rec = st.batches.get(b)
    if rec is None:
        return _reject("not_found", f"batch {b} has no staged chunks")
    if rec.state != STAGED:
        return _refuse_finished(b, rec)
    if cmd.now - rec.since > BATCH_TTL_MS:
        _finish(st, b, rec, ABORTED, cmd.now, {"reason": f"not committed within {BATCH_TTL_MS // 1000}s"})
        return _refuse_finished(b, rec)
    n = cmd.args.get("chunks")
    if not isinstance(n, int) or sorted(rec.chunks) != list(range(n)):
        _finish(st, b, rec, ABORTED, cmd.now, {"reason": f"{len(rec.chunks)} chunks staged, "
                                                    f"not the {n!r} the commit names"})
        return _refuse_finished(b, rec)
    checked: list = []
    for seq in range(n):
        # A node restored from a snapshot between stage and commit parses the chunk again.
        part = st.batch_checked.get((b, seq)) or st.check_specs(rec.chunks[seq], len(checked) + 1)
        if isinstance(part, dict):
            _finish(st, b, rec, ABORTED, cmd.now, {"reason": part.get("msg", "refused")})
            return part
        checked += part
    result = st.put_specs(checked, cmd, index)
    if result.get("ok"):
        _finish(st, b, rec, COMMITTED, cmd.now, {"created": result["created"], "updated": result["updated"]})
    else:
        _finish(st, b, rec, ABORTED, cmd.now, {"reason": result.get("msg", "refused")})
    return result


def abort(st: "SchedulerState", cmd: C.Command, index: int) -> dict:
    """Idempotent. Answers `committed` (with the commit's counts) when the commit came first."""
    b = _batch_id(cmd)
    if isinstance(b, dict):
        return b
    rec = st.batches.get(b)
    if rec is None:
        rec = st.batches[b] = Batch(since=cmd.now)
    if rec.state == COMMITTED:
        return {"ok": True, "code": "ok", "aborted": False, "committed": True, **rec.result}
    if rec.state == STAGED:
        _finish(st, b, rec, ABORTED, cmd.now, {"reason": str(cmd.args.get("reason") or "aborted")[:200]})
    return {"ok": True, "code": "ok", "aborted": True}


def record_single(st: "SchedulerState", cmd: C.Command) -> dict | None:
    """For a one-entry batch (`put_many` with a batch id): a refusal if the batch was aborted
    before the entry applied, else None. The caller records the outcome with `single_done`."""
    b = cmd.args.get("batch")
    if b is None:
        return None
    if not isinstance(b, str) or not 0 < len(b) <= MAX_BATCH_ID:
        return _reject("invalid", f"batch must be an id of 1-{MAX_BATCH_ID} characters")
    rec = st.batches.get(b)
    return None if rec is None else _refuse_finished(b, rec)


def single_done(st: "SchedulerState", cmd: C.Command, result: dict) -> None:
    b = cmd.args.get("batch")
    if isinstance(b, str) and result.get("ok"):
        rec = st.batches[b] = Batch(since=cmd.now)
        _finish(st, b, rec, COMMITTED, cmd.now, {"created": result["created"], "updated": result["updated"]})


def forget_finished(st: "SchedulerState", now: int) -> None:
    """Drop finished records older than FINISHED_KEEP_MS, oldest first; O(1) when none is due."""
    horizon = now - FINISHED_KEEP_MS
    batches = st.batches
    while batches:
        b = next(iter(batches))
        rec = batches[b]
        if rec.state == STAGED or rec.ended >= horizon:
            return
        del batches[b]


def staged(st: "SchedulerState") -> list[str]:
    return [b for b, rec in st.batches.items() if rec.state == STAGED]


def expired(st: "SchedulerState", now: int) -> list[str]:
    """Staged batches past BATCH_TTL_MS at leader time `now`: the leader proposes their abort."""
    return [b for b, rec in st.batches.items() if rec.state == STAGED and now - rec.since > BATCH_TTL_MS]


def team_overflow(st: "SchedulerState", pairs: list[tuple[str, str]], cap: int) -> str:
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


HANDLERS = {C.BATCH_STAGE: stage, C.BATCH_COMMIT: commit, C.BATCH_ABORT: abort}
