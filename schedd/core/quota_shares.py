"""Cluster-wide quotas in a sharded cluster: each group's share, and group 0's allocation.

A quota (`team:payments` at most 10 running) is a limit on the whole cluster, but each shard
group's apply decides alone whether a claim fits (schedd.core.policy.blocked): it can count only
its own running attempts. So the limit Q is split into shares, one per group, whose sum never
exceeds Q, and each group enforces its own share:

- `quota_alloc` (group 0's log): the allocation, one share per group, decided by group 0's
  leader (schedd.leader.quota_balance) from each group's demand, and refused by apply if the
  shares add up to more than the quota group 0 holds.
- `quota_share` (each group's log): the share this group enforces, copied from group 0's
  allocation by the group's own leader, with the allocation's version (the log index group 0
  recorded it at). A share older than the one held is ignored, so a leader copying from a
  replica that lags can never put back a share that was lowered since. While a group holds a
  share for a key, the share is its limit (`limit_of`), 0 meaning nothing may start.

Never exceeded, also while the shares move: a share is lowered at once, but raised only once
every group's log holds the current allocation (the versions match), and only by what no group
can still be using (`next_allocation`): Q minus, for every group, the largest of its allocation,
the share its own log holds and what it runs now. A lowered group keeps what it
runs (nothing is killed) and starts nothing until it is under its new share; only then is that
room given to another group. A new quota starts at share 0 in every group before group 0 holds
it (the API writes those first), so no group is ever without a limit once the quota exists. The
backfill lane's default limit (2 running, cluster-wide) is split the same way; until the first
allocation reaches the groups, just after a sharded cluster is made, each group applies the
default on its own.

Pure: no clock, no I/O; the balancing functions take what the leader read from the groups'
replicas (its own, or another node's for a group it does not host: schedd.api.quota_reads). Any
replica is safe to read, each group at its own moment: one showing the current allocation's
share holds it committed, so its group starts nothing above that share from then on, and the
largest of that share and the running count it shows bounds the group until the next
allocation reaches it; a lagging replica shows an older share (no raise) or a smaller demand
(another split, never a larger sum).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.policy import BACKFILL, DEFAULT_BACKFILL_QUOTA, QUOTA_KINDS
from schedd.core.results import ApplyResult, Code, ok, reject
from schedd.core.tables import Tables

MAX_GROUPS = 1024


def _key_ok(key: object) -> bool:
    if not isinstance(key, str):
        return False
    kind, _, name = key.partition(":")
    return kind in QUOTA_KINDS and bool(name)


def share(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """This group's share of a cluster quota: `share` >= 0 at allocation `version`, or None to
    forget it (the quota was removed: the group is then as unlimited as the cluster). A share
    of an older version than the one held changes nothing."""
    key, value, version = cmd.args.get("key"), cmd.args.get("share"), cmd.args.get("version", 0)
    if not _key_ok(key):
        return reject(Code.INVALID, f"bad quota key {key!r}: expected team:<name>, pool:<name> or lane:backfill")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        return reject(Code.INVALID, "version must be a whole number >= 0")
    assert isinstance(key, str)
    if value is None:
        st.shares.pop(key, None)
        return ok(R.Quota(key, 0))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return reject(Code.INVALID, "share must be a whole number >= 0")
    held = st.shares.get(key)
    if held is not None and held[0] > version:
        return ok(R.Quota(key, held[1]))        # an older allocation: the newer share stays
    st.shares[key] = (version, value)
    return ok(R.Quota(key, value))


def alloc(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    """Group 0's allocation of a quota over the groups: `shares` (one per group, summing to at
    most the quota), or None to drop it (the quota was removed)."""
    key, shares = cmd.args.get("key"), cmd.args.get("shares")
    if not _key_ok(key):
        return reject(Code.INVALID, f"bad quota key {key!r}")
    assert isinstance(key, str)
    if shares is None:
        st.allocations.pop(key, None)
        return ok(R.Quota(key, 0))
    if (not isinstance(shares, list) or not 0 < len(shares) <= MAX_GROUPS
            or not all(type(n) is int and n >= 0 for n in shares)):
        return reject(Code.INVALID, "shares must be a list of whole numbers >= 0, one per shard group")
    limit = cluster_limit(st.quotas, key)
    if limit is None:
        return reject(Code.INVALID, f"no quota {key!r} to allocate")
    if sum(shares) > limit:
        return reject(Code.INVALID, f"shares {shares} add up to more than the quota {limit}")
    st.allocations[key] = (index, tuple(shares))
    return ok(R.Quota(key, sum(shares)))


HANDLERS = {C.QUOTA_SHARE: share, C.QUOTA_ALLOC: alloc}

BACKFILL_LANE = f"lane:{BACKFILL}"


def cluster_limit(quotas: dict[str, int], key: str) -> int | None:
    """The cluster's limit on `key` as group 0 holds it: a quota set, or the backfill lane's
    default (it is a cluster-wide limit too, so it is split like one)."""
    limit = quotas.get(key)
    return DEFAULT_BACKFILL_QUOTA if limit is None and key == BACKFILL_LANE else limit


def cluster_quotas(quotas: dict[str, int]) -> dict[str, int]:
    """Every limit group 0's leader splits over the groups."""
    return {BACKFILL_LANE: DEFAULT_BACKFILL_QUOTA, **quotas}


def limit_of(st: Tables, key: str) -> int | None:
    """This group's share of `key`, if it holds one (None: no share; the group's own quota table
    decides, as in an unsharded cluster)."""
    held = st.shares.get(key)
    return held[1] if held is not None else None


# ------------------------------------------------------------------ balancing (leader side)


@dataclass(frozen=True, slots=True)
class GroupUse:
    """One group's use of a quota, as its replica on the balancing node shows it."""

    share: int | None          # the share its log holds (None: none yet)
    running: int               # attempts holding the key now
    waiting: int               # runs ready to start that would hold it
    version: int = 0           # the allocation version of that share


WAITING_SCAN = 20_000        # ready runs looked at per group and key (demand is a proportion)


def use_of(st: Tables, key: str) -> GroupUse:
    """A group's use of quota `key` from its replica's state (call under its lock: the share
    and the running count of one applied index, which `next_allocation`'s argument needs)."""
    held = st.shares.get(key)
    waiting = 0
    for _, name, t in st.ready.islice(0, WAITING_SCAN):     # the runs waiting for a claim, in claim order
        ex, job = st.execs.get((name, t)), st.jobs.get(name)
        if ex is not None and job is not None and key in st.policy(job).holds(ex.lane):
            waiting += 1
    return GroupUse(share=held[1] if held is not None else None, running=int(st.held.get(key, 0)),
                    waiting=waiting, version=held[0] if held is not None else 0)


def target(quota: int, uses: Sequence[GroupUse]) -> tuple[int, ...]:
    """Where the shares should go: `quota` split in proportion to each group's demand (what it
    runs plus what waits), by largest remainder; with no demand anywhere, evenly. Sums to
    `quota` exactly."""
    n = len(uses)
    if n == 0:
        return ()
    demand = [u.running + u.waiting for u in uses]
    total = sum(demand)
    weights = demand if total else [1] * n
    wsum = sum(weights)
    base = [quota * w // wsum for w in weights]
    rest = quota - sum(base)
    order = sorted(range(n), key=lambda i: (-(quota * weights[i] % wsum), i))
    for i in order[:rest]:
        base[i] += 1
    return tuple(base)


def next_allocation(quota: int, current: Sequence[int] | None, uses: Sequence[GroupUse],
                    version: int = 0) -> tuple[int, ...] | None:
    """The allocation to record next (None: keep `current`, recorded at `version`): every group
    above its target is lowered to it at once; a group below it is raised only once every
    group's log holds the current allocation, and only into room no group can still be using,
    counting for each group the largest of its allocation, its recorded share and what it runs
    (module doc: never exceeded)."""
    want = target(quota, uses)
    have = list(current) if current is not None and len(current) == len(uses) else [0] * len(uses)
    nxt = [min(h, w) for h, w in zip(have, want)]
    settled = current is not None and all(u.version == version and u.share == a for u, a in zip(uses, have))
    if current is None:
        settled = all(u.share == 0 for u in uses)          # a new quota: every group starts at 0
    if not settled:
        out = tuple(nxt)
        return None if current is not None and tuple(current) == out else out
    used = sum(max(a, u.share or 0, u.running) for a, u in zip(nxt, uses))
    room = quota - used
    for i in sorted(range(len(uses)), key=lambda i: (nxt[i] - want[i], i)):
        if room <= 0:
            break
        if want[i] > nxt[i]:
            held = max(nxt[i], uses[i].share or 0, uses[i].running)
            grow = min(want[i] - nxt[i], room + max(0, held - nxt[i]))
            new = nxt[i] + grow
            room -= max(0, new - held)
            nxt[i] = new
    out = tuple(nxt)
    return None if current is not None and tuple(current) == out else out
