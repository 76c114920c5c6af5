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

from typing import Any

from schedd.core import commands as C
from schedd.core.jobs import Checked, check_specs, put_specs, team_overflow
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code, ok, reject
from schedd.core.rows import STAGED, Batch
from schedd.core.tables import Tables

__all__ = ["STAGED", "Batch", "team_overflow"]   # re-exported (the api checks the team cap before proposing)

COMMITTED, ABORTED = "committed", "aborted"
BATCH_TTL_MS = 120_000            # a staged batch not committed this long after its first stage
FINISHED_KEEP_MS = 15 * 60 * 1000  # a finished record answers late aborts and refuses late stages
MAX_CHUNKS = 100_000
MAX_BATCH_ID = 64


def _batch_id(cmd: C.Command) -> str | ApplyResult:
    b = cmd.args.get("batch")
    if not isinstance(b, str) or not 0 < len(b) <= MAX_BATCH_ID:
        return reject(Code.INVALID, f"batch must be an id of 1-{MAX_BATCH_ID} characters")
    return b


def _refuse_finished(b: str, rec: Batch) -> ApplyResult:
    if rec.state == ABORTED:
        return reject(Code.ABORTED, f"batch {b} was aborted ({rec.result.get('reason', 'by its proposer')}); "
                                  "nothing of it was committed")
    return reject(Code.CONFLICT, f"batch {b} is already committed")


def _finish(st: Tables, b: str, rec: Batch, state: str, now: int, result: dict[str, Any]) -> None:
    for seq in rec.chunks:
        st.batch_checked.pop((b, seq), None)
    rec.state, rec.ended, rec.chunks, rec.result = state, now, {}, result


def stage(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    b = _batch_id(cmd)
    if isinstance(b, ApplyResult):
        return b
    seq, specs = cmd.args.get("seq"), cmd.args.get("specs")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < MAX_CHUNKS:
        return reject(Code.INVALID, f"seq must be an integer in [0, {MAX_CHUNKS})")
    if not isinstance(specs, list) or not all(isinstance(t, str) for t in specs):
        return reject(Code.INVALID, "specs must be a list of spec texts")
    first = cmd.args.get("first", 1)
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        return reject(Code.INVALID, "first must be a position >= 1")
    rec = st.batches.get(b)
    if rec is None:
        rec = st.batches[b] = Batch(since=cmd.now)
    elif rec.state != STAGED:
        return _refuse_finished(b, rec)
    checked = check_specs(specs, first)     # parsed here, in small steps, not all at commit
    if isinstance(checked, ApplyResult):
        return checked
    rec.chunks[seq] = specs
    st.batch_checked[(b, seq)] = checked
    return ok(R.BatchStaged(b, seq))


def commit(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    b = _batch_id(cmd)
    if isinstance(b, ApplyResult):
        return b
    rec = st.batches.get(b)
    if rec is None:
        return reject(Code.NOT_FOUND, f"batch {b} has no staged chunks")
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
    checked: list[Checked] = []
    for seq in range(n):
        # A node restored from a snapshot between stage and commit parses the chunk again.
        part = st.batch_checked.get((b, seq)) or check_specs(rec.chunks[seq], len(checked) + 1)
        if isinstance(part, ApplyResult):
            _finish(st, b, rec, ABORTED, cmd.now, {"reason": part.msg or "refused"})
            return part
        checked += part
    result = put_specs(st, checked, cmd, index)
    if result.ok:
        counts = result.of(R.PutMany)
        _finish(st, b, rec, COMMITTED, cmd.now, {"created": counts.created, "updated": counts.updated})
    else:
        _finish(st, b, rec, ABORTED, cmd.now, {"reason": result.msg or "refused"})
    return result


def abort(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """Idempotent. Answers `committed` (with the commit's counts) when the commit came first."""
    b = _batch_id(cmd)
    if isinstance(b, ApplyResult):
        return b
    rec = st.batches.get(b)
    if rec is None:
        rec = st.batches[b] = Batch(since=cmd.now)
    if rec.state == COMMITTED:
        return ok(R.BatchAborted(False, True, rec.result.get("created"), rec.result.get("updated")))
    if rec.state == STAGED:
        _finish(st, b, rec, ABORTED, cmd.now, {"reason": str(cmd.args.get("reason") or "aborted")[:200]})
    return ok(R.BatchAborted(True))


def record_single(st: Tables, cmd: C.Command) -> ApplyResult | None:
    """For a one-entry batch (`put_many` with a batch id): a refusal if the batch was aborted
    before the entry applied, else None. The caller records the outcome with `single_done`."""
    b = cmd.args.get("batch")
    if b is None:
        return None
    if not isinstance(b, str) or not 0 < len(b) <= MAX_BATCH_ID:
        return reject(Code.INVALID, f"batch must be an id of 1-{MAX_BATCH_ID} characters")
    rec = st.batches.get(b)
    return None if rec is None else _refuse_finished(b, rec)


def single_done(st: Tables, cmd: C.Command, result: ApplyResult) -> None:
    b = cmd.args.get("batch")
    if isinstance(b, str) and result.ok:
        rec = st.batches[b] = Batch(since=cmd.now)
        counts = result.of(R.PutMany)
        _finish(st, b, rec, COMMITTED, cmd.now, {"created": counts.created, "updated": counts.updated})


def forget_finished(st: Tables, now: int) -> None:
    """Drop finished records older than FINISHED_KEEP_MS, oldest first; O(1) when none is due."""
    horizon = now - FINISHED_KEEP_MS
    batches = st.batches
    while batches:
        b = next(iter(batches))
        rec = batches[b]
        if rec.state == STAGED or rec.ended >= horizon:
            return
        del batches[b]


def staged(st: Tables) -> list[str]:
    return [b for b, rec in st.batches.items() if rec.state == STAGED]


def expired(st: Tables, now: int) -> list[str]:
    """Staged batches past BATCH_TTL_MS at leader time `now`: the leader proposes their abort."""
    return [b for b, rec in st.batches.items() if rec.state == STAGED and now - rec.since > BATCH_TTL_MS]


def put_many(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """A batch that fits one entry; with a batch id, refused if its proposer aborted it."""
    refused = record_single(st, cmd)
    if refused is not None:
        return refused
    texts = cmd.args.get("specs")
    if not isinstance(texts, list):
        return reject(Code.INVALID, "specs must be a list")
    checked = check_specs(texts)
    if isinstance(checked, ApplyResult):
        return checked
    result = put_specs(st, checked, cmd, index)
    single_done(st, cmd, result)
    return result


HANDLERS = {C.BATCH_STAGE: stage, C.BATCH_COMMIT: commit, C.BATCH_ABORT: abort}
