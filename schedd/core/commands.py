"""The versioned codec of Raft log entries.

An entry is a compact JSON text (a `str`: pysyncobj pickles arguments, and pickle inflates `bytes`
but stores `str` as UTF-8). Every entry carries what apply may not look up itself: the proposer's
wall-clock time `now` (ms), its Raft term, a request id for deduplication and the principal.
Decoding never raises to the caller of apply: a bad entry becomes a deterministic rejection.
Every kind is registered in `FEATURES` at the feature level that introduced it, and `encode`
stamps an entry above level 1 with its level (schedd.core.features says what that is for).
"""

from __future__ import annotations

import json
from collections.abc import Container
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, TypeVar

VERSION = 1
MAX_ENTRY_BYTES = 60 * 1024          # pysyncobj chunks entries above 64 KiB, badly (architecture.md "Facts" F5)
BATCH_ENTRY_BYTES = 48 * 1024        # a batch's entries: the specs of one chunk plus the envelope
BATCH_ENVELOPE_BYTES = 1024          # what a chunk's entry holds besides its specs (ids, principal)

# Entry kinds.
EPOCH = "epoch"          # a new leader records its term before it fires anything
PUT = "put"              # create or update one job
PUT_MANY = "put_many"    # batched registration, all or nothing
DELETE = "delete"
PAUSE = "pause"
RESUME = "resume"
TRIGGER = "trigger"      # run now, on demand
FIRE = "fire"            # a batch of (job, scheduled instant) intents from the leader
NOOP = "noop"            # a barrier: proves leadership by a commit round trip
START = "start"          # the leader's claim: attempt k of an execution goes to a worker; token = log index
FINISH = "finish"        # a worker's result for the attempt holding `token`
EXPIRE = "expire"        # the leader gave up on an attempt whose worker went silent (lease lost)
CANCEL = "cancel"        # a user's cancel of an execution
SKIP = "skip"            # the leader records executions that will not run (overlap, deadline)
BACKFILL = "backfill"    # executions for past instants, on the backfill lane
QUOTA = "quota"          # set or remove a concurrency quota (team, pool, backfill lane)
KINDS: tuple[str, ...] = (EPOCH, PUT, PUT_MANY, DELETE, PAUSE, RESUME, TRIGGER, FIRE, NOOP, START, FINISH, EXPIRE,
         CANCEL, SKIP, BACKFILL, QUOTA)
DAG_PUT = "dag_put"      # create or replace a DAG (schedd.core.dags)
DAG_DELETE = "dag_delete"
DAG_RUN = "dag_run"      # start a DAG run now, on demand
KINDS += (DAG_PUT, DAG_DELETE, DAG_RUN)
SLA = "sla"              # the leader records an execution's SLA miss (schedd.core.sla), once
KINDS += (SLA,)
BATCH_STAGE = "batch_stage"     # one chunk of a batch too big for one entry, kept aside (schedd.core.batches)
BATCH_COMMIT = "batch_commit"   # every staged chunk of a batch becomes jobs, atomically, or none does
BATCH_ABORT = "batch_abort"     # a batch is discarded: nothing of it can commit afterwards
KINDS += (BATCH_STAGE, BATCH_COMMIT, BATCH_ABORT)
# Access control and the audit trail (schedd.core.access): the ACL table and the hash-chained trail.
ACL_POLICY_PUT = "acl_policy_put"
ACL_POLICY_DELETE = "acl_policy_delete"
ACL_ROLE_PUT = "acl_role_put"
ACL_ROLE_DELETE = "acl_role_delete"
ACL_TOKEN_CREATE = "acl_token_create"     # only the secret's hash: the API node minted the secret
ACL_TOKEN_DELETE = "acl_token_delete"
ACL_ANONYMOUS_SET = "acl_anonymous_set"
ACL_BOOTSTRAP = "acl_bootstrap"           # the first management token, once per cluster
AUDIT_APPEND = "audit_append"             # denied calls and login failures, batched by the API node
AUDIT_CONFIG = "audit_config"             # retention and the denied-record rate limit
ACL_KINDS = (ACL_POLICY_PUT, ACL_POLICY_DELETE, ACL_ROLE_PUT, ACL_ROLE_DELETE, ACL_TOKEN_CREATE,
             ACL_TOKEN_DELETE, ACL_ANONYMOUS_SET, ACL_BOOTSTRAP, AUDIT_APPEND, AUDIT_CONFIG)
KINDS += ACL_KINDS
# Feature levels: every kind is registered in FEATURES below at the level that introduced it; a
# kind above level 1 is stamped with that level (`fl`) by encode (schedd.core.features: what
# proposers and apply do with the levels).
FEATURE_LEVEL = "feature_level"   # the leader raises the cluster's feature level (never lowers it)
AUDIT_NOTE = "audit_note"         # level 2: an operator's note in the audit trail (schedctl audit note)
KINDS += (FEATURE_LEVEL, AUDIT_NOTE)
# The member table (schedd.core.members): each Raft member's id, raft and gRPC address, the whole
# table in one entry, committed by the leader around a pysyncobj membership change.
MEMBERS = "members"
KINDS += (MEMBERS,)
START_MANY = "start_many"   # many claims in one entry; claim k's token = index * 1024 + k (schedd.core.attempts)
FINISH_MANY = "finish_many"  # many workers' results in one entry (schedd.core.attempts)
KINDS += (START_MANY, FINISH_MANY)
# Group commit: client entries proposed together by one node, applied one after another in one
# log entry, each with its own request id, dedup, audit record and result (state.apply_group).
GROUP = "group"
GROUPABLE = frozenset({PUT})   # kinds whose apply does not use the log index as a unique id
KINDS += (GROUP,)
# Run flow (level 7): a new attempt of a finished run (schedd.core.attempts.retry), and a DAG
# run's task cleared to run again with what depends on it (schedd.core.dags.clear).
RUN_RETRY = "run_retry"
DAG_CLEAR = "dag_clear"
KINDS += (RUN_RETRY, DAG_CLEAR)
# Calendars and blackouts (level 8, schedd.core.calendars): named calendars a job's instants are
# skipped or moved by, and windows in which matching jobs do not fire.
CALENDAR_PUT = "calendar_put"
CALENDAR_DELETE = "calendar_delete"
BLACKOUT_PUT = "blackout_put"
BLACKOUT_DELETE = "blackout_delete"
KINDS += (CALENDAR_PUT, CALENDAR_DELETE, BLACKOUT_PUT, BLACKOUT_DELETE)
# Flexible windows (level 9, schedd.core.windows): the leader's placement of window instants.
PLACE = "place"
KINDS += (PLACE,)
# Sharded clusters (level 10, schedd.core.quota_shares): a group's share of a cluster quota, and
# group 0's allocation of it over the groups.
QUOTA_SHARE = "quota_share"
QUOTA_ALLOC = "quota_alloc"
KINDS += (QUOTA_SHARE, QUOTA_ALLOC)
# Shard placement (level 11, schedd.core.shards): group 0's record of which nodes hold each shard
# group's replicas (the shard map), one version per change.
SHARD_MAP = "shard_map"
KINDS += (SHARD_MAP,)


# ---------------------------------------------------------------- feature levels
# The table of feature levels lives beside the kinds it registers: `encode` stamps each entry
# with its kind's level from it, and schedd.core.features (the rules built on the levels), the
# snapshot writer and the node's advertised build info read it from here.


@dataclass(frozen=True, slots=True)
class Level:
    """What feature level `number` introduces."""

    number: int
    kinds: tuple[str, ...] = ()
    snapshot_formats: tuple[int, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class FeatureTable:
    """The feature levels one build understands, in order (1, 2, ...)."""

    levels: tuple[Level, ...]
    # kind -> level, built once: proposers look a kind up on every proposal
    _level_of: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        numbers = tuple(lv.number for lv in self.levels)
        if numbers != tuple(range(1, len(numbers) + 1)):
            raise ValueError(f"feature levels must be 1..N in order, got {numbers}")
        kinds = [k for lv in self.levels for k in lv.kinds]
        if len(kinds) != len(set(kinds)):
            raise ValueError("an entry kind is registered at two feature levels")
        object.__setattr__(self, "_level_of", {k: lv.number for lv in self.levels for k in lv.kinds})

    @property
    def max_level(self) -> int:
        """The highest level this build supports (what the node advertises)."""
        return len(self.levels)

    def level_of(self, kind: str) -> int | None:
        """The level that introduced `kind`, or None when this build does not know it."""
        return self._level_of.get(kind)

    def snapshot_formats(self) -> tuple[int, ...]:
        return tuple(f for lv in self.levels for f in lv.snapshot_formats)

    def format_for(self, level: int) -> int:
        """The newest snapshot format a cluster at `level` may write: every voter reads it (a
        follower that lags gets the leader's snapshot, and an older build cannot read a newer
        format)."""
        return max(f for lv in self.levels[:max(1, level)] for f in lv.snapshot_formats)


# Level 1: every kind and snapshot format that existed when feature levels were introduced,
# including `feature_level` itself (it is proposed only once every voter reports a table, which
# a build older than this mechanism never does, so no such build ever sees one). Listed one by
# one: a kind added later and registered nowhere fails tests/unit/test_features.py instead of
# silently becoming level 1.
LEVEL_1 = Level(1, kinds=(
    EPOCH, PUT, PUT_MANY, DELETE, PAUSE, RESUME, TRIGGER, FIRE, NOOP, START, FINISH,
    EXPIRE, CANCEL, SKIP, BACKFILL, QUOTA, DAG_PUT, DAG_DELETE, DAG_RUN, SLA,
    BATCH_STAGE, BATCH_COMMIT, BATCH_ABORT, *ACL_KINDS, FEATURE_LEVEL,
), snapshot_formats=(1, 2, 3, 4), note="every kind and format before feature levels")
FEATURES = FeatureTable((
    LEVEL_1,
    Level(2, kinds=(AUDIT_NOTE, MEMBERS),
          note="operator notes in the audit trail (schedctl audit note); the member table of run-time "
               "membership changes (schedctl cluster add-node/remove-node, schedd serve --join)"),
    Level(3, kinds=(START_MANY, FINISH_MANY, GROUP), snapshot_formats=(5,),
          note="batched claims and results (one entry per dispatcher step; below it the leader "
               "proposes one start/finish per execution), group commit of single registrations "
               "(below it each goes alone), snapshot format 5 (job specs as shared templates; "
               "below it images are written in format 4)"),
    Level(4, snapshot_formats=(6,),
          note="snapshot format 6: the image as plain values (schedd.core.plain), so a snapshot's "
               "pickle names one loader and a string, never a schedd class (below it images are "
               "written in format 5)"),
    Level(5, note="audit records of writes apply refused count under the per-principal denied-record "
                  "limit (schedd.core.audit; below it every such record is kept)"),
    Level(6, note="container handler: an entry that carries a job or DAG-task spec with a "
                  "`container:` handler is stamped fl=6 by its proposer (schedd.core.specs.handler_level), "
                  "since an older build's apply refuses that spec as invalid"),
    Level(7, kinds=(RUN_RETRY, DAG_CLEAR),
          note="run flow: `run_retry` (a new attempt of a finished run) and `dag_clear` (a DAG run's "
               "task and what depends on it run again); a `trigger` or `dag_run` entry carrying run "
               "parameters is stamped fl=7 by its proposer (schedd.core.params), since an older "
               "build's apply ignores them. History on disk: a job's finished executions but its "
               "newest leave the replicated tables for every node's history store (schedd.core.history; "
               "below it a job keeps its newest history_limit in memory), a backfill entry says at which "
               "store index its instants were checked absent"),
    Level(8, kinds=(CALENDAR_PUT, CALENDAR_DELETE, BLACKOUT_PUT, BLACKOUT_DELETE),
          note="calendars and blackouts (schedd.core.calendars): named calendars and blackout windows; "
               "a `put` carrying a spec with `calendar:` or `on_blackout:` is stamped fl=8 by its "
               "proposer (schedd.core.specs.JobSpec.level), since an older build's apply ignores them; "
               "below it apply never consults calendars or blackouts"),
    Level(9, kinds=(PLACE,),
          note="flexible windows (schedd.core.windows): `place` records the leader's choice of the second "
               "a window instant runs at; a `put` carrying a spec with `window:` is stamped fl=9 by its "
               "proposer (schedd.core.specs.JobSpec.level), since an older build's apply ignores it; "
               "below it apply never consults placements"),
    Level(10, kinds=(QUOTA_SHARE, QUOTA_ALLOC),
          note="cluster quotas over shard groups (schedd.core.quota_shares): `quota_alloc` records group 0's "
               "split of a quota over the groups, `quota_share` the share a group enforces; below it no "
               "group holds a share and each enforces its own quota table"),
    Level(11, kinds=(SHARD_MAP,),
          note="shard placement (schedd.core.shards): `shard_map` records in group 0 which nodes hold each "
               "shard group's replicas, a version per change (a replica moved to a new node); below it every "
               "node holds every shard"),
    # Level(12, kinds=(MY_KIND,), note="..."),   <- the next kind goes here (CONTRIBUTING.md)
))


def table_upto(level: int, table: FeatureTable = FEATURES) -> FeatureTable:
    """The table of an older build, that knows only levels 1..`level` (tests, rolling upgrades)."""
    if not 1 <= level <= table.max_level:
        raise ValueError(f"feature level must be 1..{table.max_level}")
    return FeatureTable(table.levels[:level])


def level_needed(kind: str) -> int:
    """The level an entry of `kind` needs, from the newest table (what `encode` stamps)."""
    return FEATURES.level_of(kind) or 1


class EntryTooLarge(ValueError):
    pass


# Request ids have two namespaces. The leader's own proposals use ids derived from what they do
# (`epoch-<node>-<term>`, `start-<execution>#<attempt>.<index>`, `finish-<token>`,
# `expire-<token>`, `sla-<execution>#<index>`), and apply deduplicates on them. A client's id
# (PutJob.request_id and the like) always gets CLIENT_RID in front (`client_rid`, applied by the
# API to every client write), so no client can make a write look like an internal proposal and
# have the real one answered from the dedup table instead of applied.
CLIENT_RID = "c/"
MAX_CLIENT_RID = 256


def client_rid(request_id: str) -> str:
    """The dedup id of a client's request id (raises ValueError past MAX_CLIENT_RID chars)."""
    if len(request_id) > MAX_CLIENT_RID:
        raise ValueError(f"request_id is too long ({len(request_id)} characters, at most {MAX_CLIENT_RID})")
    return CLIENT_RID + request_id


@dataclass(slots=True, frozen=True)
class Command:
    kind: str
    rid: str
    now: int
    term: int
    by: str
    args: dict[str, Any] = field(default_factory=dict)
    level: int = 1               # the feature level the entry needs (`fl`; absent: 1)


def encode(kind: str, *, rid: str, now: int, term: int, by: str = "", **args: Any) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown entry kind {kind!r}")
    body = {"v": VERSION, "k": kind, "rid": rid, "now": int(now), "term": int(term), "by": by}
    body.update(args)
    # A proposer may ask for more than the kind's level (`fl` in args: what the entry carries
    # needs it, e.g. a container spec in a `put`); never less.
    level = max(level_needed(kind), int(args.get("fl", 1)))
    if level > 1:                # level-1 entries encode as they did before feature levels
        body["fl"] = level
    text = json.dumps(body, separators=(",", ":"), sort_keys=True)
    if len(text) > MAX_ENTRY_BYTES:
        raise EntryTooLarge(f"entry of {len(text)} bytes exceeds {MAX_ENTRY_BYTES}")
    return text


_escape = json.encoder.encode_basestring_ascii     # json.dumps(str) with its defaults


def encoded_size(text: str) -> int:
    """What a string costs inside an entry: JSON-escaped, quoted, plus a separator. (The
    encoder json.dumps uses for a str, without its per-call set-up: called per job of a batch.)"""
    return len(_escape(text)) + 1


def chunk_by_bytes(texts: list[str], budget: int = BATCH_ENTRY_BYTES - BATCH_ENVELOPE_BYTES) -> list[list[str]]:
    """Split spec texts, in order, into chunks whose encoded size (as JSON strings inside an
    entry) stays within `budget`. A text bigger than the budget alone gets a chunk of its own
    (the caller refuses specs that cannot fit any entry before it gets here)."""
    return chunk_by_size(texts, encoded_size, budget)


T = TypeVar("T")


def chunk_by_size(items: list[T], size: Callable[[T], int], budget: int, max_items: int = 0) -> list[list[T]]:
    """Split `items`, in order, into chunks whose summed `size` stays within `budget` and that
    hold at most `max_items` each (0: no limit); an item bigger than the budget alone gets a
    chunk of its own."""
    chunks: list[list[T]] = []
    chunk: list[T] = []
    total = 0
    for item in items:
        n = size(item)
        if chunk and (total + n > budget or (max_items and len(chunk) >= max_items)):
            chunks.append(chunk)
            chunk, total = [], 0
        chunk.append(item)
        total += n
    if chunk:
        chunks.append(chunk)
    return chunks


def decode(text: str, *, known: Container[str] | None = KINDS) -> Command:
    """Raises ValueError on anything malformed (apply turns that into a rejection). `known` None
    leaves the kind to the caller: apply checks the entry's feature level first, then the kind
    against its own feature table (schedd.core.features), so an old node refuses a newer kind
    exactly as a new node does while the cluster's level is below it."""
    body = json.loads(text)
    if not isinstance(body, dict) or body.get("v") != VERSION:
        raise ValueError(f"unsupported entry version {body.get('v') if isinstance(body, dict) else '?'}")
    kind = body.pop("k")
    if not isinstance(kind, str) or (known is not None and kind not in known):
        raise ValueError(f"unknown entry kind {kind!r}")
    body.pop("v")
    now, term, level = body.pop("now"), body.pop("term"), body.pop("fl", 1)
    if not isinstance(now, int) or not isinstance(term, int):
        raise ValueError("now and term must be integers")
    if type(level) is not int or level < 1:
        raise ValueError("fl (the feature level) must be an integer >= 1")
    return Command(kind=kind, rid=str(body.pop("rid")), now=now, term=term,
                   by=str(body.pop("by", "")), args=body, level=level)
