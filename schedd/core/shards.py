"""Shards: where a job lives when the cluster is many Raft groups (docs/architecture.md
"Shards"). Pure values and functions only.

- `shard_of` routes a job (a DAG and all its rows by the DAG) to a shard. It is a wire contract:
  every node and every SDK must compute the same shard for the same name forever, so it hashes
  with a fixed digest (never `hash()`, which `PYTHONHASHSEED` salts per process), and a golden
  table (tests/unit/testdata/shard_routing.json) fails the build if it ever changes.
- `ShardMap` says which nodes hold each shard's replicas. It is what the metadata group
  replicates; every change is a new version, made by a pure operation that validates first, so
  a refused change commits nothing.
- `fencing_token` keeps a job's fencing tokens unique and increasing when its shard's leader
  changes, when the shard's replicas move, and when the shard's log starts over.
- `apply_map` is the apply of group 0's `shard_map` entry: the next version of the map, or a
  refusal that changes nothing.
- `merge_pages` turns one page from each shard into one page of the global order, with one
  opaque cursor, for list calls that fan out to every shard.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.naming import dag_of_job
from schedd.core.results import ApplyResult, Code, ok, reject

# --------------------------------------------------------------------------------------------
# Routing


def routing_key(name: str) -> str:
    """The key a job row routes by: its name, or its DAG's name for a DAG's rows (`etl:load`
    and `etl:` route as `etl`), so a DAG and every one of its tasks share one shard and one
    log (a DAG run's bookkeeping is one apply, never a cross-shard transaction).

    The team is not part of the key: job names are unique in the cluster, the calls that name
    a job (get, pause, trigger, its executions) carry only the name, and a job whose team
    changes must not change shards."""
    return dag_of_job(name) or name


def shard_of(key: str, shards: int) -> int:
    """The shard (0 <= shard < `shards`) that owns `key` (a `routing_key`).

    Wire contract, frozen by the golden table: h = the first 8 bytes, big-endian, of
    BLAKE2b-64(key as UTF-8); shard = (h * shards) >> 64. The shards are equal ranges of the
    hash space (as TiKV's regions and CockroachDB's ranges split a key space), so doubling the
    shard count splits every shard in two and moves no key between old shards:
    shard_of(k, 2S) // 2 == shard_of(k, S). A split is then one group's local business."""
    if shards < 1:
        raise ValueError(f"shard count must be at least 1, got {shards}")
    h = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")
    return (h * shards) >> 64


SHARED_PORT = "shared"          # every group of a node on the node's one Raft port
PER_GROUP_PORTS = "per_group"   # group k on the node's Raft port + k (clusters made before the shared port)
RAFT_PORT_MODES = (SHARED_PORT, PER_GROUP_PORTS)


def shares_port(shards: int, ports: str) -> bool:
    """Whether a node's groups share its one Raft port: a sharded cluster in `SHARED_PORT` mode.
    An unsharded node (one group) keeps pysyncobj's own transport, whatever the mode says."""
    return shards > 1 and ports == SHARED_PORT


def shard_raft_address(address: str, shard: int, ports: str) -> str:
    """The Raft address of a node's replica of `shard`, for a node whose Raft address is
    `address`, in the cluster's port mode `ports` (`RAFT_PORT_MODES`). The one place that
    decides it, with the same rule on every node, so a node can compute every peer's address
    for every shard from the one Raft address the configuration names.

    - `SHARED_PORT`: the node's own address for every shard. The groups' transports tell their
      connections apart by a preamble sent before pysyncobj's handshake
      (schedd.replication.raft_port); pysyncobj identifies a peer by the address it dials, and
      each group has a transport of its own, so the same address in every group is no clash.
    - `PER_GROUP_PORTS`: the node's Raft port plus the shard's number, on the same host (shard
      0 is the node's own address): one port per replica, as stock pysyncobj allows. Kept for
      the clusters whose data a build before the shared port made (docs/architecture.md
      "Shards")."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not host:port: {address!r}")
    if ports not in RAFT_PORT_MODES:
        raise ValueError(f"unknown Raft port mode {ports!r}: one of {', '.join(RAFT_PORT_MODES)}")
    if shard < 0:
        raise ValueError(f"no shard {shard}")
    if ports == SHARED_PORT:
        return address
    p = int(port) + shard
    if p > 65535:
        raise ValueError(f"shard {shard} of {address} has no port (past 65535)")
    return f"{host}:{p}"


# --------------------------------------------------------------------------------------------
# The shard map


class ShardMapError(ValueError):
    """A shard map change or document that is refused; the message says why."""


def quorum(replicas: int) -> int:
    """The majority of a group of `replicas` voters."""
    return replicas // 2 + 1


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard's group: its replicas' node ids (the first is where its leader is placed when
    the map is made) and its epoch (see `fencing_token`)."""

    replicas: tuple[str, ...]
    epoch: int


@dataclass(frozen=True, slots=True)
class Transfer:
    """A suggested leadership transfer of `shard` from node `src` to node `dst`."""

    shard: int
    src: str
    dst: str


MAP_FORMAT = 1


@dataclass(frozen=True, slots=True)
class ShardMap:
    """Which nodes hold each shard's replicas, at a version.

    `replication` is the replica count every shard is kept at (R); a move passes through R + 1
    (add, then remove), never through R - 1. `nodes` are the cluster's node ids, in the order
    they joined. Every change returns a new map with `version + 1`, or raises
    `ShardMapError` and changes nothing."""

    version: int
    replication: int
    nodes: tuple[str, ...]
    shards: tuple[Shard, ...]

    # ---- making one

    @staticmethod
    def initial(nodes: Sequence[str], shards: int, replication: int) -> ShardMap:
        """The map of a new cluster: `shards` groups of `replication` replicas over `nodes`.

        Deterministic (the same arguments give the same map on every node) and balanced: each
        shard takes the nodes holding the fewest replicas so far, ties broken by node order, so
        replica counts differ by at most one; the first replica (where the leader is placed) is
        the chosen node leading the fewest shards so far, so leaders are balanced too. All epochs
        start at 0, so a one-shard cluster's fencing tokens are exactly today's."""
        _check_nodes(nodes)
        if shards < 1:
            raise ShardMapError(f"shard count must be at least 1, got {shards}")
        if not 1 <= replication <= len(nodes):
            raise ShardMapError(f"replication must be between 1 and the node count ({len(nodes)}), "
                                f"got {replication}")
        order = {n: i for i, n in enumerate(nodes)}
        held = dict.fromkeys(nodes, 0)
        led = dict.fromkeys(nodes, 0)
        out: list[Shard] = []
        for _ in range(shards):
            chosen = sorted(nodes, key=lambda n: (held[n], order[n]))[:replication]
            first = min(chosen, key=lambda n: (led[n], held[n], order[n]))
            for n in chosen:
                held[n] += 1
            led[first] += 1
            out.append(Shard((first, *(n for n in chosen if n != first)), 0))
        return ShardMap(1, replication, tuple(nodes), tuple(out))

    # ---- reading

    @property
    def count(self) -> int:
        return len(self.shards)

    def replicas_on(self, node: str) -> tuple[int, ...]:
        """The shards with a replica on `node`."""
        return tuple(i for i, s in enumerate(self.shards) if node in s.replicas)

    def shard(self, index: int) -> Shard:
        if not 0 <= index < len(self.shards):
            raise ShardMapError(f"no shard {index}: the map has shards 0 to {len(self.shards) - 1}")
        return self.shards[index]

    # ---- changing

    def add_node(self, node: str) -> ShardMap:
        """A new node joins the cluster (holding no replica until moves put some on it)."""
        _check_nodes((*self.nodes, node))
        return replace(self, version=self.version + 1, nodes=(*self.nodes, node))

    def remove_node(self, node: str) -> ShardMap:
        """A node leaves the cluster; it must hold no replica (move them off first). That alone
        keeps R nodes: with only R nodes every node holds a replica of every shard."""
        self._known(node)
        held = self.replicas_on(node)
        if held:
            raise ShardMapError(f"node {node!r} still holds replicas of shards {list(held)}: move them first")
        return replace(self, version=self.version + 1, nodes=tuple(n for n in self.nodes if n != node))

    def add_replica(self, shard: int, node: str) -> ShardMap:
        """The first step of a move: `node` joins the shard's group (it catches up from the
        group's leader). At most R + 1 replicas: one move at a time per shard."""
        s = self.shard(shard)
        self._known(node)
        if node in s.replicas:
            raise ShardMapError(f"node {node!r} already holds a replica of shard {shard}")
        if len(s.replicas) > self.replication:
            raise ShardMapError(f"shard {shard} is mid-move ({len(s.replicas)} replicas for "
                                f"{self.replication}): remove one before adding another")
        return self._with(shard, replace(s, replicas=(*s.replicas, node)))

    def remove_replica(self, shard: int, node: str) -> ShardMap:
        """The second step of a move: `node` leaves the shard's group. Only a shard above its
        replica count gives one up, so the group never drops below R replicas and the quorum
        of R (a majority) stays reachable with one replica lost throughout a move."""
        s = self.shard(shard)
        if node not in s.replicas:
            raise ShardMapError(f"node {node!r} holds no replica of shard {shard}")
        if len(s.replicas) <= self.replication:
            raise ShardMapError(f"removing {node!r} from shard {shard} leaves {len(s.replicas) - 1} replicas, "
                                f"below {self.replication} (quorum {quorum(self.replication)}): add a "
                                "replica first")
        return self._with(shard, replace(s, replicas=tuple(n for n in s.replicas if n != node)))

    def move(self, shard: int, src: str, dst: str) -> tuple[ShardMap, ShardMap]:
        """A replica of `shard` moves from `src` to `dst`: the map after adding `dst` and the map
        after then removing `src`, each a version of its own (the metadata group commits the
        first, waits until `dst` has caught up, then commits the second). Both steps are
        checked before either is returned. The shard's epoch is unchanged: the group and its
        log are the same, so its fencing counter keeps growing (see `fencing_token`)."""
        if src == dst:
            raise ShardMapError(f"moving shard {shard} from {src!r} to itself")
        if src not in self.shard(shard).replicas:
            raise ShardMapError(f"node {src!r} holds no replica of shard {shard}")
        added = self.add_replica(shard, dst)
        return added, added.remove_replica(shard, src)

    def zero_on(self, nodes: Sequence[str]) -> ShardMap:
        """Shard 0's entry named on `nodes` (R of the cluster's nodes). Shard 0 is the metadata
        group, which every node of the cluster holds (nodes join and leave it, not moves), so
        placement never reads its entry: this only keeps the document valid as nodes leave."""
        s = self.shard(0)
        if len(nodes) != self.replication:
            raise ShardMapError(f"shard 0's entry needs {self.replication} nodes, got {list(nodes)}")
        for n in nodes:
            self._known(n)
        return self._with(0, replace(s, replicas=tuple(nodes)))

    def renew_epoch(self, shard: int) -> ShardMap:
        """Give `shard` an epoch above every epoch of the map: needed whenever the shard's log
        starts over (its group rebuilt from a snapshot, a restore, or keys taken over from
        another shard in a split), so its new tokens outrank every token issued before."""
        s = self.shard(shard)
        top = max(x.epoch for x in self.shards)
        if top + 1 > MAX_EPOCH:
            raise ShardMapError(f"epoch {top + 1} does not fit the fencing token ({EPOCH_BITS} bits)")
        return self._with(shard, replace(s, epoch=top + 1))

    def leaders_balance(self, leaders: Mapping[int, str]) -> tuple[Transfer, ...]:
        """Leadership transfers that even out how many shards each node leads.

        `leaders` is shard -> the node that leads it now (a shard without a known leader is left
        out). Each step moves one leadership from a node leading the most to a replica of that
        shard leading at least two fewer, so the spread shrinks and the steps end; it stops when
        no such transfer exists (the replica placement may allow no better). Deterministic: the
        lowest shard and node order break ties."""
        count = dict.fromkeys(self.nodes, 0)
        now: dict[int, str] = {}
        for shard, node in sorted(leaders.items()):
            if node not in self.shard(shard).replicas:
                raise ShardMapError(f"node {node!r} is said to lead shard {shard} but holds no replica of it")
            now[shard] = node
            count[node] += 1
        order = {n: i for i, n in enumerate(self.nodes)}
        out: list[Transfer] = []
        while True:
            step = self._best_transfer(now, count, order)
            if step is None:
                return tuple(out)
            out.append(step)
            count[step.src] -= 1
            count[step.dst] += 1
            now[step.shard] = step.dst

    def _best_transfer(self, now: Mapping[int, str], count: Mapping[str, int],
                       order: Mapping[str, int]) -> Transfer | None:
        for src in sorted(count, key=lambda n: (-count[n], order[n])):
            for shard in sorted(s for s, n in now.items() if n == src):
                targets = [n for n in self.shards[shard].replicas if count[n] <= count[src] - 2]
                if targets:
                    dst = min(targets, key=lambda n: (count[n], order[n]))
                    return Transfer(shard, src, dst)
        return None

    # ---- the metadata group's log and snapshots

    def to_dict(self) -> dict[str, object]:
        return {"format": MAP_FORMAT, "version": self.version, "replication": self.replication,
                "nodes": list(self.nodes),
                "shards": [{"replicas": list(s.replicas), "epoch": s.epoch} for s in self.shards]}

    @staticmethod
    def from_dict(d: Mapping[str, object]) -> ShardMap:
        """The map of `to_dict`'s document, checked as a whole: a document some other build
        wrote, or a corrupt one, is refused with the reason, never half-read."""
        if d.get("format") != MAP_FORMAT:
            raise ShardMapError(f"shard map format {d.get('format')!r} is not {MAP_FORMAT}")
        nodes, shards = d.get("nodes"), d.get("shards")
        version = _int_or_none(d.get("version"))
        if version is None or version < 1:
            raise ShardMapError(f"shard map version must be a positive integer, got {d.get('version')!r}")
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise ShardMapError("shard map nodes must be a list of node ids")
        _check_nodes(nodes)
        replication = _int_or_none(d.get("replication"))
        if replication is None or not 1 <= replication <= len(nodes):
            raise ShardMapError(f"replication must be between 1 and {len(nodes)}, got {d.get('replication')!r}")
        if not isinstance(shards, list) or not shards:
            raise ShardMapError("shard map shards must be a non-empty list")
        return ShardMap(version, replication, tuple(nodes),
                        tuple(_shard_from(i, s, nodes, replication) for i, s in enumerate(shards)))

    # ---- helpers

    def _known(self, node: str) -> None:
        if node not in self.nodes:
            raise ShardMapError(f"unknown node {node!r}: the cluster's nodes are {list(self.nodes)}")

    def _with(self, index: int, shard: Shard) -> ShardMap:
        shards = (*self.shards[:index], shard, *self.shards[index + 1:])
        return replace(self, version=self.version + 1, shards=shards)


def _int_or_none(x: object) -> int | None:
    """`x` if it is an int (a bool is not), else None."""
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _check_nodes(nodes: Sequence[str]) -> None:
    if not nodes:
        raise ShardMapError("a cluster needs at least one node")
    if any(not isinstance(n, str) or not n for n in nodes):
        raise ShardMapError(f"node ids must be non-empty strings, got {list(nodes)}")
    if len(set(nodes)) != len(nodes):
        raise ShardMapError(f"node ids must be unique, got {list(nodes)}")


def _shard_from(index: int, s: object, nodes: Sequence[str], replication: int) -> Shard:
    if not isinstance(s, dict):
        raise ShardMapError(f"shard {index} must be an object")
    reps, epoch = s.get("replicas"), _int_or_none(s.get("epoch"))
    if not isinstance(reps, list) or not all(isinstance(n, str) and n in nodes for n in reps):
        raise ShardMapError(f"shard {index}: replicas must be a list of the cluster's node ids, got {reps!r}")
    if len(set(reps)) != len(reps):
        raise ShardMapError(f"shard {index}: two replicas on one node in {reps}")
    if not replication <= len(reps) <= replication + 1:
        raise ShardMapError(f"shard {index}: {len(reps)} replicas, expected {replication} "
                            f"(or {replication + 1} mid-move)")
    if epoch is None or not 0 <= epoch <= MAX_EPOCH:
        raise ShardMapError(f"shard {index}: epoch must be an integer 0 to {MAX_EPOCH}, got {s.get('epoch')!r}")
    return Shard(tuple(reps), epoch)


# --------------------------------------------------------------------------------------------
# Fencing across shards

#: A fencing token is an int64 (the proto's type): EPOCH_BITS of epoch above COUNTER_BITS of
#: the shard's counter (today's token: the claim's log index * 1024 + its place in the entry).
COUNTER_BITS = 48
EPOCH_BITS = 15
MAX_COUNTER = (1 << COUNTER_BITS) - 1
MAX_EPOCH = (1 << EPOCH_BITS) - 1


def fencing_token(epoch: int, counter: int) -> int:
    """The fencing token of a claim applied in a shard at `epoch` with the shard's `counter`.

    Why it stays unique and increasing per job:
    1. Within one shard log: the counter is derived from the claim's log index, which grows
       strictly along the log on every replica, and the epoch a claim uses is the one in the
       shard's replicated state when the claim is applied, which never decreases along the
       log. So (epoch, counter) grows strictly in lexicographic order along the log.
    2. A leader change does not restart the log: the new leader's log holds every committed
       entry, and tokens are made at apply (only committed claims get one), so a token of a
       discarded entry never existed.
    3. A replica move (`ShardMap.move`) changes the group's members, not its log: same as 2.
    4. When a log starts over (a rebuilt group, a restore, keys taken over in a split), the
       counter restarts low, so the shard first gets an epoch above every epoch in the map
       (`ShardMap.renew_epoch`), committed in its new log before any claim. Every later token
       is then above every token any shard issued before (point 5), whatever the counter.
    5. epoch * 2**COUNTER_BITS + counter orders exactly like (epoch, counter) because the
       counter is below 2**COUNTER_BITS; with EPOCH_BITS = 15 the token fits an int64.
    Epoch 0 gives token == counter: a one-shard cluster's tokens are exactly today's."""
    if not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"epoch {epoch} outside 0..{MAX_EPOCH}")
    if not 0 <= counter <= MAX_COUNTER:
        raise ValueError(f"fencing counter {counter} outside 0..{MAX_COUNTER}")
    return (epoch << COUNTER_BITS) | counter


def token_parts(token: int) -> tuple[int, int]:
    """(epoch, counter) of a `fencing_token` (for explain and logs)."""
    if not 0 <= token < 1 << (EPOCH_BITS + COUNTER_BITS):
        raise ValueError(f"fencing token {token} outside the int64 range of tokens")
    return token >> COUNTER_BITS, token & MAX_COUNTER


# --------------------------------------------------------------------------------------------
# Fan-out list merge


class _Ordered(Protocol):
    """A sort key: anything `<` compares (tuples, ints, strings), as typeshed spells it."""

    def __lt__(self, other: Any, /) -> bool: ...


T = TypeVar("T")
K = TypeVar("K", bound=_Ordered)

CURSOR_VERSION = 1


class CursorError(ValueError):
    """A page token that is not one of ours, or from a cluster with another shard count."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where the merged listing stands in one shard: `after` is that shard's own page token
    ("" = from its start); `done` means the shard has nothing more to give."""

    after: str = ""
    done: bool = False


@dataclass(frozen=True, slots=True)
class ShardPage(Generic[T]):
    """One shard's answer to "up to n items after `Position.after`", in the global sort order:
    its items, its own token after the last of them (None when it has no more), and its total."""

    items: tuple[T, ...]
    next_after: str | None
    total: int


@dataclass(frozen=True, slots=True)
class MergedPage(Generic[T]):
    """One page of the merged listing; `cursor` is "" on the last page."""

    items: tuple[T, ...]
    cursor: str
    total: int


def positions(cursor: str, shards: int) -> tuple[Position, ...]:
    """Each shard's position for a merged page token ("" = the first page)."""
    if not cursor:
        return tuple(Position() for _ in range(shards))
    try:
        doc = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error):
        raise CursorError(f"bad page token {cursor!r}") from None
    if not isinstance(doc, dict) or doc.get("v") != CURSOR_VERSION or not isinstance(doc.get("p"), list):
        raise CursorError(f"bad page token {cursor!r}: not a listing cursor of version {CURSOR_VERSION}")
    pos = doc["p"]
    if len(pos) != shards:
        raise CursorError(f"page token made for {len(pos)} shards, the cluster has {shards}: list again "
                          "from the start")
    if not all(p is None or isinstance(p, str) for p in pos):
        raise CursorError(f"bad page token {cursor!r}")
    return tuple(Position(done=True) if p is None else Position(after=p) for p in pos)


def encode_cursor(pos: Sequence[Position]) -> str:
    """The merged page token of per-shard positions; "" when every shard is done."""
    if all(p.done for p in pos):
        return ""
    doc = {"v": CURSOR_VERSION, "p": [None if p.done else p.after for p in pos]}
    return base64.urlsafe_b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode("ascii")


def merge_pages(at: Sequence[Position], pages: Sequence[ShardPage[T]], *, limit: int,
                key: Callable[[T], K], token_of: Callable[[T], str]) -> MergedPage[T]:
    """One page of up to `limit` items in the global order, from each shard's page fetched at
    `at` (a shard already done sends an empty page, for its total).

    `key` must order items totally (e.g. (scheduled_ms, job)); items are unique across shards
    (a job lives in one shard). `token_of(item)` is the item's shard's page token "after
    item". An item is emitted only if no shard with more to give could still hold a smaller
    one: every such shard's page reaches at least as far (its last key is not below it). So a
    shard that answered n >= limit items (or all it has) never holds the page back, and a
    shorter page only makes the merged page shorter, never wrong."""
    if limit < 1:
        raise ValueError(f"page size must be at least 1, got {limit}")
    if len(at) != len(pages):
        raise ValueError(f"{len(pages)} pages for {len(at)} shards")
    bound: K | None = None
    for i, (p, page) in enumerate(zip(at, pages)):
        if p.done and (page.items or page.next_after is not None):
            raise ValueError(f"shard {i} is done but its page has more")
        if page.next_after is not None:
            if not page.items:
                raise ValueError(f"shard {i} has more but sent an empty page")
            last = key(page.items[-1])
            bound = last if bound is None or last < bound else bound
    merged = sorted(((key(x), i, j) for i, page in enumerate(pages) for j, x in enumerate(page.items)),
                    key=lambda t: (t[0], t[1]))
    taken: list[tuple[int, int]] = []
    for k, i, j in merged:
        if len(taken) == limit or (bound is not None and bound < k):
            break
        taken.append((i, j))
    used = [0] * len(pages)
    for i, j in taken:
        used[i] = j + 1
    nxt = [_advance(p, page, n, token_of) for p, page, n in zip(at, pages, used)]
    return MergedPage(tuple(pages[i].items[j] for i, j in taken), encode_cursor(nxt),
                      sum(page.total for page in pages))


def _advance(p: Position, page: ShardPage[T], used: int, token_of: Callable[[T], str]) -> Position:
    if p.done:
        return p
    if used == len(page.items):
        return Position(done=True) if page.next_after is None else Position(after=page.next_after)
    return Position(after=token_of(page.items[used - 1])) if used else p


# --------------------------------------------------------------------------------------------
# The `shard_map` entry (group 0's log)

def recorded_map(doc: Mapping[str, object]) -> ShardMap | None:
    """The map a group 0 state holds (`Tables.shard_map`), None before the first is recorded."""
    return ShardMap.from_dict(doc) if doc else None


def apply_map(st: Any, cmd: C.Command, index: int) -> ApplyResult:
    """Record the next shard map: its document is checked whole, and it must be the version after
    the recorded one (a proposer that read an older map loses the race and asks again) with the
    same shard count (S is fixed when the cluster is made). The first map may be any version."""
    doc = cmd.args.get("map")
    if not isinstance(doc, dict):
        return reject(Code.INVALID, "map must be a shard map document")
    try:
        new = ShardMap.from_dict(doc)
        old = recorded_map(st.shard_map)
    except ShardMapError as e:
        return reject(Code.INVALID, f"shard map refused: {e}")
    if old is not None and new.version != old.version + 1:
        return reject(Code.CONFLICT, f"shard map version {new.version} does not follow the recorded "
                                     f"version {old.version}: read the map again")
    if old is not None and new.count != old.count:
        return reject(Code.INVALID, f"the shard count is fixed ({old.count}), the map has {new.count}")
    st.shard_map = new.to_dict()
    return ok(R.Members(len(new.nodes)))


HANDLERS = {C.SHARD_MAP: apply_map}
