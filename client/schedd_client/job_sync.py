"""Bringing a cluster's jobs in line with a file: batches, what changes, and the report.

``job apply -f``, ``job diff -f`` and ``job apply --dry-run`` (and ``Client.apply_jobs`` /
``Client.diff_jobs``) share this. The server decides what a job's stored form is, so "what
changes" is its answer (``DiffJobs``: the spec as stored now and as the write would store it,
both canonical, secrets masked); this module only splits the work into calls, turns two specs
into field-by-field changes, and counts. No I/O here: the clients carry the calls out.

Why diff before writing: a write of an unchanged spec would still bump the job's version, and a
bad spec anywhere in a file of several batches would stop the apply with some batches written;
the diff pass checks every batch first and the write sends only what changes.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from schedd_proto import scheduler_pb2 as pb

from . import _plans
from ._plans import Plan
from ._routing import routing_key, shard_of
from .errors import ResourceExhausted, SchedError
from .specs import spec_to_dict

__all__ = ["DEFAULT_BATCH_JOBS", "DEFAULT_BATCH_BYTES", "FieldChange", "ApplyReport", "Progress", "Steps",
           "Driver", "apply_steps", "batches", "field_changes", "smaller"]

#: Below the node's default caps (limits.max_jobs_per_call 5000, max_bytes_per_call 8 MiB), so a
#: call of a default batch is never refused for its size, and each commits in a short step.
DEFAULT_BATCH_JOBS = 1000
DEFAULT_BATCH_BYTES = 4 << 20

#: (stage "check" | "write", jobs done so far, jobs in that stage): called after each call.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field of a job document that a write changes: ``path`` like ``retry.max_attempts``
    or ``env_secret.DB_PASSWORD``; ``None`` where the field is absent (at its default)."""

    path: str
    before: Any
    after: Any


@dataclass(slots=True)
class ApplyReport:
    """What an apply did (or, dry, would do): the names per action, in file order, and for each
    created or updated job its field changes."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    changes: dict[str, list[FieldChange]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)    # the version before the write
    dry_run: bool = False
    legacy: tuple[int, int] | None = None   # a cluster without DiffJobs: (created, updated), every job written
    warnings: list[str] = field(default_factory=list)   # the server's advice on the writes (crowded seconds)

    def add(self, change: pb.JobChange) -> None:
        {"create": self.created, "update": self.updated}.get(change.action, self.unchanged).append(change.name)
        if change.action != "unchanged":
            before = change.current if change.action == "update" else None
            self.changes[change.name] = field_changes(before, change.proposed)
        if change.version:
            self.versions[change.name] = change.version

    def counts(self) -> dict[str, int]:
        if self.legacy is not None:
            return {"created": self.legacy[0], "updated": self.legacy[1], "unchanged": 0}
        return {"created": len(self.created), "updated": len(self.updated), "unchanged": len(self.unchanged)}

    def to_dict(self) -> dict[str, Any]:
        """For ``-o json|yaml``: the counts, the names per action and each change."""
        return {**self.counts(), "dry_run": self.dry_run, **({"warnings": self.warnings} if self.warnings else {}),
                "jobs": [{"name": name, "action": action, **({"version": self.versions[name]}
                                                             if name in self.versions else {}),
                          "changes": [{"field": c.path, "before": c.before, "after": c.after}
                                      for c in self.changes.get(name, [])]}
                         for action, names in (("create", self.created), ("update", self.updated),
                                               ("unchanged", self.unchanged)) for name in names]}

    def summary(self) -> str:
        """One line: ``applied 3 jobs: 1 created, 1 updated, 1 unchanged``."""
        total = len(self.created) + len(self.updated) + len(self.unchanged)
        if self.legacy is not None:
            total = sum(self.legacy)
            return (f"applied {total} job{'s' if total != 1 else ''}: {self.legacy[0]} created, "
                    f"{self.legacy[1]} updated (this cluster cannot tell unchanged jobs apart: upgrade it)")
        verb = "would apply" if self.dry_run else "applied"
        return (f"{verb} {total} job{'s' if total != 1 else ''}: {len(self.created)} "
                f"{'to create' if self.dry_run else 'created'}, {len(self.updated)} "
                f"{'to update' if self.dry_run else 'updated'}, {len(self.unchanged)} unchanged")


def batches(specs: Sequence[pb.JobSpec], max_jobs: int = DEFAULT_BATCH_JOBS,
            max_bytes: int = DEFAULT_BATCH_BYTES, shards: int = 0) -> Iterator[list[pb.JobSpec]]:
    """``specs`` in order, cut into calls of at most ``max_jobs`` jobs and about ``max_bytes``
    bytes (a single larger spec goes alone: the node says if it is too large). ``shards`` = S
    > 1 (a sharded cluster): each call holds one shard's jobs, in order within the shard. Such
    a call goes to its shard's leader and commits there in one step; a call of every shard's
    jobs is split by the node, checked in every group and committed in each (about 1.5 times
    the cluster's work per job, measured at S = 8)."""
    if shards > 1:
        by_shard: dict[int, list[pb.JobSpec]] = {}
        for spec in specs:
            by_shard.setdefault(shard_of(routing_key(spec.name), shards), []).append(spec)
        for k in sorted(by_shard):
            yield from batches(by_shard[k], max_jobs, max_bytes)
        return
    batch: list[pb.JobSpec] = []
    size = 0
    for spec in specs:
        n = spec.ByteSize() + 8
        if batch and (len(batch) >= max_jobs or size + n > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(spec)
        size += n
    if batch:
        yield batch


def smaller(batch: list[pb.JobSpec]) -> list[list[pb.JobSpec]]:
    """A batch the node refused as too large for one call, in two halves (it caps calls by its
    own ``[limits]``, which the client does not know)."""
    half = max(1, len(batch) // 2)
    return [batch[:half], batch[half:]]


def field_changes(before: pb.JobSpec | None, after: pb.JobSpec) -> list[FieldChange]:
    """The leaves of the job documents of ``before`` and ``after`` that differ, in document
    order. Both come from the server, so secret values are already masks (``***(v2)``)."""
    old = _leaves(spec_to_dict(before)) if before is not None else {}
    new = _leaves(spec_to_dict(after))
    paths = list(new) + [p for p in old if p not in new]
    return [FieldChange(p, old.get(p), new.get(p)) for p in paths if old.get(p) != new.get(p)]


def _leaves(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_leaves(value, path + "."))
        else:
            out[path] = value
    return out


#: The calls of an apply, one at a time: each Plan yielded is carried out by the client, which
#: sends its answer back in (or throws its error in); the generator returns the report.
Steps = Generator[Plan[Any], Any, ApplyReport]


def apply_steps(specs: Sequence[pb.JobSpec], *, dry_run: bool = False, batch_jobs: int = DEFAULT_BATCH_JOBS,
                progress: Progress | None = None, shards: Callable[[], int] = lambda: 0) -> Steps:
    """Diff every batch (every job checked by the server before anything is written), then,
    unless ``dry_run``, write the created and updated jobs in batches (each all or nothing).
    A batch the node refuses as too large is halved and sent again (nothing of it committed).
    ``shards()``: the cluster's shard count as the client knows it so far (0: not known), read
    when each pass is cut into batches: the checks' answers teach it, so the writes go in
    batches of one shard each (`batches`)."""
    report = ApplyReport(dry_run=dry_run)
    where = {spec.name: i for i, spec in enumerate(specs, 1)}
    changed: list[pb.JobSpec] = []
    try:
        checked = yield from _each_batch(list(batches(specs, batch_jobs, shards=shards())), len(specs), "check",
                                         progress, where, _plans.diff_jobs)
    except SchedError as err:
        if err.code != grpc.StatusCode.UNIMPLEMENTED or dry_run:
            raise
        return (yield from _write_all(specs, batch_jobs, progress, where))    # a cluster older than DiffJobs
    answered = sorted(((spec, change) for batch, answer in checked for spec, change in zip(batch, answer)),
                      key=lambda pair: where[pair[0].name])        # the report in file order, whatever the batches
    for spec, change in answered:
        report.add(change)
        if change.action != "unchanged":
            changed.append(spec)
    if not dry_run and changed:
        written = yield from _each_batch(list(batches(changed, batch_jobs, shards=shards())), len(changed), "write",
                                         progress, where, _plans.put_jobs)
        report.warnings = list(dict.fromkeys(w for _, answer in written for w in answer.warnings))
    return report


class Driver:
    """Steps carried out one at a time by a client: ``next()`` gives the next call (None when
    done: then ``report`` holds the result), ``answer``/``fail`` hand back its outcome. One
    class for the blocking and the awaited client, which differ only in how they call."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self._report: ApplyReport | None = None
        self._answer: Any = None
        self._error: SchedError | None = None

    def next(self) -> Plan[Any] | None:
        try:
            plan = self.steps.send(self._answer) if self._error is None else self.steps.throw(self._error)
        except StopIteration as done:
            self._report = done.value
            return None
        self._answer, self._error = None, None
        return plan

    @property
    def report(self) -> ApplyReport:
        if self._report is None:
            raise RuntimeError("the steps are not done")
        return self._report

    def answer(self, answer: Any) -> None:
        self._answer = answer

    def fail(self, error: SchedError) -> None:
        self._error = error


def _write_all(specs: Sequence[pb.JobSpec], batch_jobs: int, progress: Progress | None,
               where: dict[str, int]) -> Steps:
    """What apply did before clusters could diff: every job written, in batches; the report has
    the server's counts (an unchanged job is counted as updated, with a new version)."""
    written = yield from _each_batch(list(batches(specs, batch_jobs)), len(specs), "write", progress, where,
                                     _plans.put_jobs)
    return ApplyReport(legacy=(sum(a.created for _, a in written), sum(a.updated for _, a in written)))


def _each_batch(pending: list[list[pb.JobSpec]], total: int, stage: str, progress: Progress | None,
                where: dict[str, int], plan: Callable[[list[pb.JobSpec]], Plan[Any]]
                ) -> Generator[Plan[Any], Any, list[tuple[list[pb.JobSpec], Any]]]:
    done: list[tuple[list[pb.JobSpec], Any]] = []
    count = 0
    while pending:
        batch = pending.pop(0)
        try:
            answer = yield plan(batch)
        except ResourceExhausted as err:
            if len(batch) == 1 or "_per_call" not in err.message:     # a team cap, not the call's size
                _locate(err, batch, where, stage, count)
                raise
            pending[:0] = smaller(batch)
            continue
        except SchedError as err:
            _locate(err, batch, where, stage, count)
            raise
        done.append((batch, answer))
        count += len(batch)
        if progress is not None:
            progress(stage, count, total)
    return done


def _locate(err: SchedError, batch: list[pb.JobSpec], where: dict[str, int], stage: str, written: int) -> None:
    """A refusal's position made the job's place in the whole list, and a write that stops after
    some batches committed says so."""
    if err.position is not None and 0 < err.position <= len(batch):
        err.position = where[batch[err.position - 1].name]
    if stage == "write" and written:
        err.message += (f"; {written} job{'s' if written != 1 else ''} of earlier batches were written,"
                        " this batch and later ones were not")
        err.args = (err.message,)
