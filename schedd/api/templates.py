"""Validation of a batch of jobs made from one template, once per template.

A PutJobs call of 5,000 jobs is usually a handful of specs that differ only by name. Validating
each in full (proto -> dict, canonical_spec, JSON) cost about 40-60 µs per job on the leader, the
largest part of registering a batch. `SpecTemplates` validates the first spec of each
shape with a placeholder name and makes the others from its canonical text, checking only their
names; the result is exactly what `canonical_spec` gives for each (tests/unit/test_spec_templates.py
compares them).

That is sound because the name enters canonical_spec in two places only: its own checks
(`model.job_name`, run for every job) and the placing of H fields in a schedule (`hash_key`), so a
spec whose schedule has an H field, or whose secret env must be sealed against the job's stored
one, takes the full path. The canonical text is JSON with sorted keys, and a valid name is plain
ASCII without quotes or backslashes, so it is its own JSON string; the text is cut around the
placeholder by `core.jobs.cut_at_name`, the same cut apply uses for a batch's texts (else the
full path).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schedd.api import convert
from schedd.core import schedule as sched
from schedd.core.jobs import cut_at_name
from schedd.core.model import MAX_SPEC_BYTES, NAME_RE, job_name
from schedd.core.model import ValidationError
from schedd.core.specs import JobSpec
from schedd_proto import scheduler_pb2 as pb

PLACEHOLDER = "schedd.template.name"        # a valid job name, unlikely inside any other field


@dataclass(slots=True, frozen=True)
class _Template:
    spec: JobSpec                # the spec under the placeholder name
    before: str                  # canonical text up to the name's opening quote (excluded)
    after: str                   # from the name's closing quote (excluded) to the end


@dataclass(slots=True)
class SpecTemplates:
    """canonical_spec for specs, each distinct spec-without-its-name done once: for one call's
    batch (no `limit`), or for a whole node (at most `limit` shapes kept: when full it starts
    over). Validation rules are fixed for a process, so a shape's template stays right for as
    long as it is kept.

    Shared by threads (the event loop's PutJob, batches validated in worker threads): a
    template is immutable once built, and the table is only read by key, written one key at a
    time and cleared whole, each one step under the GIL. Two threads that miss the same shape at
    once both build it and one write stays; a clear may drop a template another thread has
    just put, which is then built again. Either costs time, never a wrong text."""

    limit: int = 0                       # 0: unbounded (one call's batch, itself bounded)
    _seen: dict[bytes, _Template | None] = field(default_factory=dict)   # spec bytes without the name

    def canonical(self, spec: pb.JobSpec) -> tuple[JobSpec, str] | None:
        """(spec, canonical text) as canonical_spec gives them, or None: this spec takes the
        full path (which then also says what is wrong with it). Raises ValidationError for a bad
        name."""
        if spec.env_secret:
            return None                        # sealing reads the job's stored secrets by name
        key = _without_name(spec.SerializeToString(deterministic=True))
        if key in self._seen:
            template = self._seen[key]
        else:
            if self.limit and len(self._seen) >= self.limit:
                self._seen.clear()
            bare = pb.JobSpec()
            bare.CopyFrom(spec)
            template = self._seen[key] = _template(bare)
        if template is None:
            return None
        name = spec.name
        if not NAME_RE.fullmatch(name):        # implies every check of job_name (charset, length)
            job_name({"name": name})           # raises, worded as the full path words it
            return None
        text = f'{template.before}"{name}"{template.after}'
        if len(text) > MAX_SPEC_BYTES:
            return None                        # the full path words the refusal
        return template.spec.renamed(name), text        # every other value shared: specs are immutable


def _without_name(raw: bytes) -> bytes:
    """A serialized JobSpec without its name field, when the name comes first (field 1, as
    the encoder writes fields in number order); else the bytes as they are (then the key only
    ever matches the same spec, name included: slower, never wrong)."""
    if not raw or raw[0] != 0x0A:
        return raw
    size, pos, shift = 0, 1, 0
    while pos < len(raw):
        byte = raw[pos]
        size |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return raw[pos + size:]
        shift += 7
    return raw


def _template(bare: pb.JobSpec) -> _Template | None:
    """The canonical form of `bare` under the placeholder name, or None when it cannot stand
    for other names (an H schedule, an invalid spec, the placeholder found twice)."""
    bare.name = PLACEHOLDER                   # (bare is a copy of the caller's spec)
    try:
        spec, text = convert.job_spec_from_pb(bare)
    except ValidationError:
        return None
    if sched.uses_hash(bare.schedule) or sched.uses_hash(spec.schedule):
        return None
    cut = cut_at_name(text, PLACEHOLDER)
    if cut is None:
        return None
    return _Template(spec, *cut)
