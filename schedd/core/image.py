"""What a state image is made of, shared by its two encodings: the columnar pickle of
schedd.core.snapshot (formats 1-5) and the plain-value text of schedd.core.plain (format 6).

The format tags, the field lists of job and execution rows (their dataclasses' field order), the
keys of the extra tables, and the two types: `Image`, what a loader returns, and `Imaged`, what
an image is taken from (SchedulerState).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Protocol

from schedd.core.acl import AclTable
from schedd.core.audit import AuditTrail
from schedd.core.model import Execution, Job
from schedd.core.rows import Batch, DagDef, DagRun

SNAPSHOT_FORMAT = ("schedd-state", 6)
# Images this version still reads: version 1 had no DAGs, quotas or per-execution policy fields,
# version 2 no job incarnations (rows of older versions are shorter; the fields added since have
# defaults at the end).
# version 3 no ACL table or hash-chained audit trail (its audit rows are dropped on load).
# versions 1-4 hold each job's full spec text where version 5 holds its template (model.spec_template).
# version 6 is the plain-value text of schedd.core.plain (no schedd class is named by the pickle).
READABLE_FORMATS = (("schedd-state", 1), ("schedd-state", 2), ("schedd-state", 3), ("schedd-state", 4),
                    ("schedd-state", 5), SNAPSHOT_FORMAT)
PLAIN_FORMAT = SNAPSHOT_FORMAT
FULL_SPEC_FORMATS = frozenset(READABLE_FORMATS[:4])
JOB_FIELDS = Job.ROW_FIELDS        # the constructor's arguments (a row's slots hold some in one shared tuple)
EXEC_FIELDS = tuple(f.name for f in fields(Execution))
AUDIT_FIELDS = ("time_ms", "principal", "action", "target", "result", "log_index")
# Smaller tables, pickled as they are (dicts of slotted dataclasses or plain values).
EXTRA_FIELDS = ("dags", "dag_runs", "quotas", "batches", "members", "archived", "calendars", "blackouts",
                "placements", "shares", "allocations", "shard_map")
SNAPSHOT_DIGEST = "digest"   # extra key: (last_index, state digest) when the image was pickled
FEATURE_LEVEL_KEY = "feature_level"   # extra key: the cluster's feature level (absent: 1)

Image = tuple[Any, ...]      # what a loader returns (snapshot._from_image, plain.loads): (format, jobs,
                             # execs, epoch, dedup, audit, log hash, last index, clock, extra tables)


class Imaged(Protocol):
    """What an image is made of (SchedulerState)."""

    jobs: dict[str, Job]
    execs: dict[tuple[str, int], Execution]
    epoch: int
    dedup: dict[str, tuple[int, dict[str, Any]]]
    log_hash: bytes
    last_index: int
    clock_ms: int
    feature_level: int

    dags: dict[str, DagDef]
    dag_runs: dict[tuple[str, int], DagRun]
    quotas: dict[str, int]
    batches: dict[str, Batch]
    members: dict[str, tuple[str, str]]
    archived: dict[str, tuple[int, int]]
    calendars: dict[str, Any]
    blackouts: dict[str, Any]
    placements: dict[str, tuple[int, int]]
    shares: dict[str, tuple[int, int]]
    allocations: dict[str, tuple[int, tuple[int, ...]]]
    shard_map: dict[str, Any]
    acl: AclTable
    audit: AuditTrail

    def state_digest(self) -> str: ...
