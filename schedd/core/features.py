"""Feature levels: which entry kinds and snapshot formats a cluster may use, so a rolling upgrade
(one node at a time) never makes a node that has not been upgraded yet apply an entry it does
not understand.

The table (`commands.FEATURES`, defined beside the entry kinds it registers, since `encode`
stamps every entry from it) says, per feature level N, what level N introduces. Every entry kind and
snapshot format that existed when levels were introduced is level 1. A build supports the
levels of its table (`FeatureTable.max_level`); every node advertises that in NodeInfo
(schedd.versions.build_info, schedd.api.service.ClusterService.local_info).

The cluster's level is replicated state (`SchedulerState.feature_level`, in the snapshot image;
older images load at level 1). Only the leader raises it (schedd.leader.features), with a
`feature_level` entry, once every voter of the membership reports supporting the new level; it
is never lowered. Then:
- proposers (the API's CommittingService._propose, the leader's own proposals) check `refusal`
  before proposing a kind above the cluster's level and answer FAILED_PRECONDITION, telling the
  operator to finish the rolling upgrade;
- apply refuses, deterministically, an entry whose kind is above the cluster's level. The level
  an entry needs is written in the entry itself (`fl`, stamped by commands.encode from the
  table), so an old node that does not know the kind at all refuses it with the same result as
  a new node: both compare the entry's `fl` with the replicated level, never their own tables.

Adding an entry kind: define it in schedd/core/commands.py and register it there, in `FEATURES`,
at a NEW level (`Level(N, kinds=(MY_KIND,))`), one line; never at an existing one
(CONTRIBUTING.md).

The table is injectable (`SchedulerState(table)`; `RaftNode` takes it from the Faults object
the composition root hands it), so a test can run a node of an older build
(`commands.table_upto`).
"""

from __future__ import annotations

from typing import Any

from schedd.core import commands as C
from schedd.core.commands import FeatureTable
from schedd.core.specs import CONTAINER_FEATURE_LEVEL, committed_level
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code, ok, reject
from schedd.core.tables import Tables


def behind_message(kind: str, needed: int, cluster: int) -> str:
    """The one refusal text, in apply and at proposers alike."""
    return (f"entry kind {kind!r} needs feature level {needed}, cluster is at {cluster}: finish the "
            f"rolling upgrade (every voter on a build that supports level {needed}) and let the leader "
            f"raise the level (see `schedctl cluster status`)")


def build_behind_message(version: str, build_level: int, cluster_level: int) -> str:
    """Why a node whose build is below the cluster's level stops (schedd.replication halts it):
    the one text of its log line, its API's refusals, NodeInfo and the refusal to start."""
    return (f"this node runs schedd {version or '?'}, feature level {build_level}; the cluster is at "
            f"{cluster_level}: upgrade this node")


def beyond_build(table: FeatureTable, cluster_level: int, epoch: int, cmd: C.Command) -> int | None:
    """The cluster level above this build's table that applying `cmd` would need (None: this
    build can apply it). Either the cluster is there already (a snapshot of a newer cluster was
    restored) or `cmd` is a `feature_level` entry that `raise_level` would accept (the epoch's
    leader, never lowering) raising it there. An entry stamped above the cluster's level is not
    this: every build refuses that one alike (`behind_message`), so a hand-made `fl` can never
    halt a replica."""
    top = table.max_level
    if cluster_level > top:
        return cluster_level
    if cmd.kind == C.FEATURE_LEVEL and cmd.term == epoch:
        level = cmd.args.get("level")
        if type(level) is int and level > top:
            return level
    return None


# The entries whose args carry job or DAG-task specs, and where (a text, or a list of texts).
SPEC_ARGS = {C.PUT: "spec", C.PUT_MANY: "specs", C.BATCH_STAGE: "specs", C.DAG_PUT: "spec"}
_CONTAINER_KEY = '"container":'      # how canonical JSON names the handler (a cheap pre-filter)


def content_level(cmd: C.Command) -> int:
    """The feature level the specs an entry carries need (`specs.committed_level`; a DAG: its tasks'),
    1 for every other entry. Only a text holding the container key is parsed: every unstamped
    put is looked at, and most say nothing of containers."""
    texts = cmd.args.get(SPEC_ARGS.get(cmd.kind, ""))
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list):
        return 1
    level = 1
    for text in texts:
        if isinstance(text, str) and _CONTAINER_KEY in text:
            level = max(level, committed_level(text, cmd.kind == C.DAG_PUT))
    return level


def understated(cmd: C.Command, cluster_level: int) -> str | None:
    """Why apply refuses an entry whose specs need more than its `fl` says (None: it does not).

    Proposers stamp an entry carrying a container spec fl=6 (`specs.handler_level`); one without
    the stamp was made by hand. It is refused only once the cluster is at the level the content
    needs, and then by every replica alike, because of who applies at each cluster level:
    - cluster at 6 or above: only builds of level >= 6 apply (an older build halts before
      applying anything, `beyond_build`), and every one of them refuses it here;
    - cluster below 6: builds older than the container handler apply too, and they STORE such a
      spec: their apply never validated a handler (`specs.load_job` checks only what apply
      computes with), which replaying hand-made put, put_many, batch stage/commit and dag_put
      entries on the last level-5 build (3085262) and a level-4 one (041870a) showed: every one
      ok, the same state digest as this build. So below 6 this build stores it too; refusing it
      there would diverge from them. (A chunk so staged below 6 commits at 6 as on every build.)
      (A stamped entry is refused below 6 by the gate on every build alike: fl=6 > the cluster.)
    The refusal, like the gate's, changes nothing but the log hash: no clock, no dedup record
    (the same request id, properly stamped, still applies), no audit record, so each replica's
    state digest is what it was."""
    if cmd.level >= CONTAINER_FEATURE_LEVEL or cluster_level < CONTAINER_FEATURE_LEVEL:
        return None
    needed = content_level(cmd)
    if needed <= cmd.level or needed > cluster_level:
        return None
    return (f"malformed entry: a {cmd.kind!r} entry carrying a container spec must say fl={needed} "
            f"(its proposer stamps it: schedd.core.specs.handler_level); this one says fl={cmd.level}")


def refusal(table: FeatureTable, cluster_level: int, kind: str) -> str | None:
    """Why a proposer must not propose `kind` now (None: it may). A kind this build does not know
    is refused too: it can only come from a newer build's code path."""
    needed = table.level_of(kind)
    if needed is None:
        return f"entry kind {kind!r} is unknown to this build (feature levels 1..{table.max_level})"
    if needed > cluster_level:
        return behind_message(kind, needed, cluster_level)
    return None


def enabled(state: Any, kind: str) -> bool:
    """Whether a leader loop may propose `kind` now (a SchedulerState: its table and level). A
    loop with a newer kind for something an older kind also does (a batched claim) proposes the
    older one while this is False: during a rolling upgrade the cluster keeps working."""
    return refusal(state.features, state.feature_level, kind) is None


class FeatureUnavailable(Exception):
    """A proposer was asked for an entry of a kind above the cluster's feature level."""


def raise_level(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """Apply of `feature_level`: the leader of the current epoch raises the cluster's level.
    Decided from the entry and the replicated state only, never from this node's own table (an
    old node applies it exactly as a new one; it then reports itself behind in its status)."""
    if cmd.term != st.epoch:
        return reject(Code.STALE_TERM, f"feature level from term {cmd.term}, but the leader epoch is {st.epoch}")
    level = cmd.args.get("level")
    if type(level) is not int or level < 1:
        return reject(Code.INVALID, "feature_level: level must be an integer >= 1")
    if level < st.feature_level:
        return reject(Code.CONFLICT, f"the feature level is never lowered (cluster is at {st.feature_level})")
    raised = level > st.feature_level
    st.feature_level = level
    return ok(R.FeatureLevel(level, raised))
