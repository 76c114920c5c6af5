"""The snapshot image of the state: what pysyncobj pickles, and what unpickling it gives back.

Format 6 (feature level 4 and up): the pickle is one call of `schedd.core.state._from_plain` with
one string, the plain-value text of schedd.core.plain, so loading a snapshot constructs nothing
from pickle opcodes but that string; the text is read as JSON into rows this build names itself.

Formats 1-5 (what a cluster below level 4 writes, so older voters read it): a call of `schedd.core.state._from_image`
(the name pickles by, kept there whatever module defines it) with the format tag, a GC pause,
job and execution rows as plain tuples in field order, the epoch, the dedup table (plain dict
results), audit rows, the chained log hash, the last applied index, the clock, and the smaller
tables pickled as they are. Readers accept every format in READABLE_FORMATS. What an image
holds (formats, row fields, extra keys) is defined in schedd.core.image, shared with the
plain-value encoding.

Every image also carries the state digest at its index (`SNAPSHOT_DIGEST` in the extra tables,
`(last_index, digest)`), computed where the image is pickled: in pysyncobj's forked child, so the
Raft thread never pays for it. A restored replica keeps it as `snapshot_digest`, and
`verify_snapshot_digest()` says whether what it loaded is what was written. Readers that predate
it ignore the key. The cluster's feature level (schedd.core.features) rides in the extra tables
too (`FEATURE_LEVEL_KEY`); an image without it loads at level 1.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from itertools import starmap
from operator import attrgetter
from typing import Any

from schedd.core import plain
from schedd.core.acl import table_to_dict
from schedd.core.audit import trail_to_dict
from schedd.core.commands import FEATURES
from schedd.core.image import (
    EXEC_FIELDS, EXTRA_FIELDS, FEATURE_LEVEL_KEY, FULL_SPEC_FORMATS, JOB_FIELDS, PLAIN_FORMAT, READABLE_FORMATS,
    SNAPSHOT_DIGEST, SNAPSHOT_FORMAT, Image, Imaged,
)
from schedd.core.model import Execution, Job

@dataclass(slots=True)
class AuditRecord:
    time_ms: int
    principal: str
    action: str
    target: str
    result: str
    log_index: int


class SnapshotImage:
    """What `SchedulerState.snapshot()` hands pysyncobj. It costs nothing to make; the columnar
    copy is built when it is pickled, which happens in pysyncobj's forked child, so the Raft
    tick thread never waits for it. Rows of plain tuples pickle and load several times faster
    than a million objects do."""

    __slots__ = ("state",)

    def __init__(self, state: Imaged) -> None:
        self.state = state

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        s = self.state
        fmt = ("schedd-state", FEATURES.format_for(s.feature_level))
        if fmt == PLAIN_FORMAT:
            return (_from_plain, (plain.dumps(s),))
        extra: dict[str, Any] = {key: getattr(s, key) for key in EXTRA_FIELDS}
        extra["acl"], extra["audit"] = table_to_dict(s.acl), trail_to_dict(s.audit)
        extra[FEATURE_LEVEL_KEY] = s.feature_level
        extra[SNAPSHOT_DIGEST] = (s.last_index, s.state_digest())   # cached: a backup computed it already
        return (_from_image, (fmt, _GcPause(), _job_rows(s.jobs.values(), fmt),
                              list(map(attrgetter(*EXEC_FIELDS), s.execs.values())), s.epoch, s.dedup,
                              [], s.log_hash, s.last_index, s.clock_ms, extra))


_SPEC_T = JOB_FIELDS.index("spec_t")


def _job_rows(jobs: Any, fmt: tuple[str, int]) -> list[tuple[Any, ...]]:
    """Job rows as format `fmt` holds them: the spec template (5), or the full spec text (1-4:
    a cluster whose voters do not all read format 5 yet)."""
    rows = list(map(attrgetter(*JOB_FIELDS), jobs))
    if fmt in FULL_SPEC_FORMATS:
        rows = [(*r[:_SPEC_T], job.spec_text, *r[_SPEC_T + 1:]) for r, job in zip(rows, jobs)]
    return rows


class _GcPause:
    """Unpickled first in an image: it turns the cyclic garbage collector off while millions of
    rows and objects are built (collections triggered every few hundred allocations would
    rescan them over and over: 2x slower). `SchedulerState.restore` turns it back on."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (gc.disable, ())


def _from_image(fmt: Any, _gc_paused: Any, job_rows: list[tuple[Any, ...]], exec_rows: list[tuple[Any, ...]],
                epoch: int, dedup: dict[str, Any], audit_rows: list[tuple[Any, ...]], log_hash: bytes,
                last_index: int, clock_ms: int, extra: dict[str, Any] | None = None) -> Image:
    if tuple(fmt) not in READABLE_FORMATS or tuple(fmt) == PLAIN_FORMAT:
        gc.enable()
        raise ValueError(f"unsupported snapshot format {fmt!r}")
    jobs = {job.name: job for job in starmap(Job, job_rows)}
    plain.share_times(jobs.values())
    if tuple(fmt) in FULL_SPEC_FORMATS:
        for job in jobs.values():
            job.spec_text = job.spec_t       # the full text, read into the template slot
    execs = {(ex.job, ex.scheduled_ms): ex for ex in starmap(Execution, exec_rows)}
    audit = list(starmap(AuditRecord, audit_rows))
    return (SNAPSHOT_FORMAT, jobs, execs, epoch, dedup, audit, log_hash, last_index, clock_ms, extra or {})


def _from_plain(text: str) -> Image:
    """Format 6: the one callable a snapshot's pickle names, given one string of plain values
    (schedd.core.plain), so unpickling a snapshot builds no schedd object from pickle opcodes."""
    return plain.loads(text)


# The snapshot format names the loaders by where they were first defined; state.py re-exports them.
_from_image.__module__ = _from_plain.__module__ = "schedd.core.state"
