"""Shards (schedd/core/shards.py): the routing contract against its golden table, the shard
map's placement and changes, fencing tokens across leader changes, moves and restarted logs,
and the fan-out list merge paged to the end."""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.core.shards import (
    COUNTER_BITS, MAX_COUNTER, MAX_EPOCH, CursorError, Position, ShardMap, ShardMapError, ShardPage,
    Transfer, encode_cursor, fencing_token, merge_pages, positions, quorum, routing_key, shard_of,
    token_parts,
)

GOLDEN = Path(__file__).parent / "testdata" / "shard_routing.json"


# ---- routing

def test_routing_matches_the_golden_table() -> None:
    """The wire contract: a change here reroutes the jobs of every multi-shard cluster. The
    SDK's copy (schedd_client._routing, a distribution of its own) is held to the same table."""
    from schedd_client import _routing as client
    doc = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert len(doc["routes"]) >= 50
    for r in doc["routes"]:
        for key_of, of in ((routing_key, shard_of), (client.routing_key, client.shard_of)):
            assert key_of(r["name"]) == r["key"], r["name"]
            assert [of(r["key"], s) for s in doc["shard_counts"]] == r["shards"], r["name"]


def test_routing_spreads_the_golden_names() -> None:
    doc = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert len({r["shards"][doc["shard_counts"].index(8)] for r in doc["routes"]}) == 8


def test_a_dag_and_its_rows_route_together() -> None:
    assert routing_key("etl:load") == routing_key("etl:") == routing_key("etl") == "etl"
    assert routing_key("plain-job") == "plain-job"
    assert len({shard_of(routing_key(n), 128) for n in ("etl", "etl:", "etl:load", "etl:x")}) == 1


@given(st.text(max_size=40), st.integers(1, 4096))
@settings(max_examples=120, deadline=None)
def test_doubling_the_shards_splits_each_shard_in_two(key: str, shards: int) -> None:
    s = shard_of(key, shards)
    assert 0 <= s < shards
    assert shard_of(key, 2 * shards) // 2 == s


def test_shard_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        shard_of("x", 0)


# ---- the shard map

@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n), st.integers(1, 64))))
@settings(max_examples=100, deadline=None)
def test_initial_placement_is_balanced_and_deterministic(nrs: tuple[int, int, int]) -> None:
    n, r, s = nrs
    nodes = [f"n{i}" for i in range(n)]
    m = ShardMap.initial(nodes, s, r)
    assert m == ShardMap.initial(nodes, s, r)
    assert (m.version, m.count, m.replication) == (1, s, r)
    assert all(len(set(x.replicas)) == r and x.epoch == 0 for x in m.shards)
    held = Counter(node for x in m.shards for node in x.replicas)
    led = Counter(x.replicas[0] for x in m.shards)
    assert max(held[x] for x in nodes) - min(held[x] for x in nodes) <= 1
    assert max(led[x] for x in nodes) - min(led[x] for x in nodes) <= 1


@pytest.mark.parametrize(("nodes", "shards", "replication", "why"), [
    ([], 4, 1, "at least one node"),
    (["a", "a", "b"], 4, 3, "unique"),
    (["a", ""], 4, 1, "non-empty"),
    (["a", "b", "c"], 0, 3, "shard count"),
    (["a", "b", "c"], 4, 4, "replication"),
    (["a", "b", "c"], 4, 0, "replication"),
])
def test_initial_refuses_bad_arguments(nodes: list[str], shards: int, replication: int, why: str) -> None:
    with pytest.raises(ShardMapError, match=why):
        ShardMap.initial(nodes, shards, replication)


def four_nodes() -> ShardMap:
    return ShardMap.initial(["a", "b", "c"], 4, 3).add_node("d")


def test_a_move_is_add_then_remove_each_a_version() -> None:
    m = four_nodes()
    added, moved = m.move(2, "b", "d")
    assert (added.version, moved.version) == (m.version + 1, m.version + 2)
    assert set(added.shards[2].replicas) == {"a", "b", "c", "d"}
    assert set(moved.shards[2].replicas) == {"a", "c", "d"}
    assert moved.shards[2].epoch == m.shards[2].epoch          # same group, same log
    assert moved.shards[:2] == m.shards[:2] and moved.shards[3:] == m.shards[3:]


@pytest.mark.parametrize(("src", "dst", "why"), [
    ("b", "b", "to itself"),
    ("b", "c", "already holds"),
    ("d", "a", "holds no replica"),
    ("b", "e", "unknown node"),
])
def test_a_bad_move_is_refused(src: str, dst: str, why: str) -> None:
    with pytest.raises(ShardMapError, match=why):
        four_nodes().move(1, src, dst)


def test_no_shard_drops_below_its_replica_count_or_moves_twice_at_once() -> None:
    m = four_nodes()
    with pytest.raises(ShardMapError, match="below 3 .quorum 2.: add a replica first"):
        m.remove_replica(0, "a")
    added = m.add_replica(0, "d")
    m5 = added.add_node("e")
    with pytest.raises(ShardMapError, match="mid-move"):
        m5.add_replica(0, "e")
    with pytest.raises(ShardMapError, match="no shard 9"):
        m.add_replica(9, "d")
    assert quorum(3) == 2 and quorum(4) == 3 and quorum(5) == 3


def test_nodes_join_and_leave_only_empty() -> None:
    m = four_nodes()
    with pytest.raises(ShardMapError, match="unique"):
        m.add_node("a")
    with pytest.raises(ShardMapError, match="still holds replicas"):
        m.remove_node("a")
    assert m.remove_node("d").nodes == ("a", "b", "c")
    with pytest.raises(ShardMapError, match="unknown node"):
        m.remove_node("e")


def test_renewed_epoch_is_above_every_epoch() -> None:
    m = four_nodes().renew_epoch(1).renew_epoch(3).renew_epoch(1)
    assert [s.epoch for s in m.shards] == [0, 3, 0, 2]


ops = st.lists(st.tuples(st.sampled_from(["move", "renew", "add_node"]), st.integers(0, 7),
                         st.integers(0, 7), st.integers(0, 7)), max_size=12)


@given(ops)
@settings(max_examples=80, deadline=None)
def test_any_map_round_trips_through_its_dict(steps: list[tuple[str, int, int, int]]) -> None:
    m = ShardMap.initial(["a", "b", "c", "d"], 5, 3)
    for op, x, y, z in steps:
        try:
            if op == "move":
                shard = x % m.count
                m = m.move(shard, m.shards[shard].replicas[y % 3], m.nodes[z % len(m.nodes)])[y % 2]
            elif op == "renew":
                m = m.renew_epoch(x % m.count)
            else:
                m = m.add_node(f"n{x}")
        except ShardMapError:
            pass
        doc = json.loads(json.dumps(m.to_dict()))
        assert ShardMap.from_dict(doc) == m


@pytest.mark.parametrize(("change", "why"), [
    (lambda d: d.update(format=2), "format"),
    (lambda d: d.update(version=True), "version"),
    (lambda d: d.update(version=0), "version"),
    (lambda d: d.update(replication=4), "replication"),
    (lambda d: d.update(nodes=["a", "a", "b"]), "unique"),
    (lambda d: d.update(shards=[]), "non-empty"),
    (lambda d: d["shards"][0].update(replicas=["a", "a", "b"]), "two replicas on one node"),
    (lambda d: d["shards"][0].update(replicas=["a", "b", "x"]), "node ids"),
    (lambda d: d["shards"][0].update(replicas=["a", "b"]), "2 replicas, expected 3"),
    (lambda d: d["shards"][0].update(epoch=-1), "epoch"),
    (lambda d: d["shards"][0].update(epoch="1"), "epoch"),
])
def test_a_bad_document_is_refused(change: object, why: str) -> None:
    d = json.loads(json.dumps(ShardMap.initial(["a", "b", "c"], 2, 3).to_dict()))
    change(d)  # type: ignore[operator]
    with pytest.raises(ShardMapError, match=why):
        ShardMap.from_dict(d)


def apply(leaders: dict[int, str], steps: tuple[Transfer, ...]) -> dict[int, str]:
    out = dict(leaders)
    for t in steps:
        assert out[t.shard] == t.src
        out[t.shard] = t.dst
    return out


def test_leaders_piled_on_one_node_are_spread() -> None:
    m = ShardMap.initial(["a", "b", "c"], 8, 3)
    steps = m.leaders_balance(dict.fromkeys(range(8), "a"))
    assert Counter(apply(dict.fromkeys(range(8), "a"), steps).values()) == {"a": 3, "b": 3, "c": 2}
    assert m.leaders_balance(dict.fromkeys(range(8), "a")) == steps           # deterministic


def test_balanced_leaders_need_no_transfer_and_strangers_are_refused() -> None:
    m = ShardMap.initial(["a", "b", "c"], 3, 3)
    assert m.leaders_balance({0: "a", 1: "b", 2: "c"}) == ()
    with pytest.raises(ShardMapError, match="holds no replica"):
        ShardMap.initial(["a", "b", "c", "d"], 4, 3).leaders_balance({0: "d"})


@given(st.integers(3, 7).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, 24),
                                                      st.lists(st.integers(0, 6), min_size=24, max_size=24))))
@settings(max_examples=80, deadline=None)
def test_balancing_only_transfers_to_replicas_and_ends_with_no_better_step(
        case: tuple[int, int, list[int]]) -> None:
    n, s, picks = case
    m = ShardMap.initial([f"n{i}" for i in range(n)], s, 3)
    leaders = {i: m.shards[i].replicas[picks[i] % 3] for i in range(s)}
    steps = m.leaders_balance(leaders)
    for t in steps:
        assert t.dst in m.shards[t.shard].replicas
    after = apply(leaders, steps)
    count = Counter(after.values())
    assert max(count.values()) <= max(Counter(leaders.values()).values())
    for shard, node in after.items():
        assert all(count[r] >= count[node] - 1 for r in m.shards[shard].replicas)


# ---- fencing

def test_epoch_zero_is_todays_token() -> None:
    assert fencing_token(0, 12345) == 12345
    assert token_parts(fencing_token(7, 99)) == (7, 99)
    assert fencing_token(MAX_EPOCH, MAX_COUNTER) == 2 ** 63 - 1        # the proto's int64
    for bad in ((-1, 0), (MAX_EPOCH + 1, 0), (0, -1), (0, MAX_COUNTER + 1)):
        with pytest.raises(ValueError):
            fencing_token(*bad)


events = st.lists(st.tuples(st.sampled_from(["claim", "entries", "leader_change", "move", "restart"]),
                            st.integers(1, 5000)), min_size=1, max_size=60)


@given(events)
@settings(max_examples=120, deadline=None)
def test_a_jobs_tokens_grow_across_leader_changes_moves_and_restarted_logs(
        life: list[tuple[str, int]]) -> None:
    """A job's claims as its shard's log sees them. The counter is the claim's log index times
    1024 (plus its place in the entry); a leader change may discard uncommitted entries (their
    indexes are reused, but no token was made for them); a move keeps the log; a restarted log
    (rebuilt group, restore, split) starts low and first renews the shard's epoch."""
    m = ShardMap.initial(["a", "b", "c", "d"], 4, 3)
    shard, index, tokens = 2, 1, []
    for kind, n in life:
        if kind == "claim":
            index += 1
            tokens.append(fencing_token(m.shards[shard].epoch, index * 1024 + n % 1024))
        elif kind == "entries":
            index += n                             # other jobs' entries, heartbeats, no-ops
        elif kind == "leader_change":
            index += n % 3                         # the new leader's no-op; discarded entries got no token
        elif kind == "move":
            src = m.shards[shard].replicas[n % 3]
            dst = next(x for x in m.nodes if x not in m.shards[shard].replicas)
            m = m.move(shard, src, dst)[1]
        else:
            m = m.renew_epoch(shard if n % 2 else (shard + 1) % 4).renew_epoch(shard)
            index = n % 7                          # the new log starts over
    assert tokens == sorted(set(tokens))
    assert all(t < 2 ** 63 for t in tokens)
    assert all(token_parts(t)[1] < 2 ** COUNTER_BITS for t in tokens)


# ---- fan-out list merge

Item = tuple[int, str]


def token_of(x: Item) -> str:
    return f"{x[0]}:{x[1]}"


def after_token(token: str) -> Item | None:
    if not token:
        return None
    t, _, name = token.partition(":")
    return int(t), name


def shard_answer(rows: list[Item], at: Position, n: int) -> ShardPage[Item]:
    """What one shard's own list call answers: up to n rows after `at`, and its token."""
    if at.done:
        return ShardPage((), None, len(rows))
    start = after_token(at.after)
    rest = [r for r in rows if start is None or r > start]
    page = tuple(rest[:n])
    return ShardPage(page, token_of(page[-1]) if len(rest) > n else None, len(rows))


item = st.tuples(st.integers(0, 40), st.text("abcxyz", min_size=1, max_size=3))


@given(st.sets(item, max_size=60), st.integers(1, 6), st.integers(1, 12), st.lists(st.integers(0, 4), min_size=1))
@settings(max_examples=120, deadline=None)
def test_paging_the_merge_yields_the_sorted_union_once(rows: set[Item], shards: int, limit: int,
                                                       extra: list[int]) -> None:
    per = [sorted(r for r in rows if shard_of(token_of(r), shards) == i) for i in range(shards)]
    out: list[Item] = []
    cursor, calls = "", 0
    while True:
        at = positions(cursor, shards)
        # a shard answers at least `limit` rows, sometimes more; every few calls one answers fewer
        sizes = [limit + extra[(calls + i) % len(extra)] for i in range(shards)]
        if calls % 3 == 2:
            sizes[calls % shards] = max(1, limit // 2)
        page = merge_pages(at, [shard_answer(per[i], at[i], sizes[i]) for i in range(shards)], limit=limit,
                           key=lambda x: x, token_of=token_of)
        assert page.total == len(rows)
        assert len(page.items) <= limit
        assert page.items or not page.cursor             # progress on every page but the last
        out += page.items
        cursor, calls = page.cursor, calls + 1
        if not cursor:
            break
        assert calls <= 2 * len(rows) + 2
    assert out == sorted(rows)


def test_full_answers_fill_every_page() -> None:
    shards = [[(i, "a") for i in range(0, 30, 3)], [(i, "b") for i in range(1, 30, 3)]]
    at = positions("", 2)
    page = merge_pages(at, [shard_answer(s, p, 4) for s, p in zip(shards, at)], limit=4,
                       key=lambda x: x, token_of=token_of)
    assert page.items == ((0, "a"), (1, "b"), (3, "a"), (4, "b")) and page.total == 20
    assert positions(page.cursor, 2) == (Position("3:a"), Position("4:b"))


def test_bad_cursors_are_refused_clearly() -> None:
    good = encode_cursor([Position("x"), Position(done=True)])
    assert positions(good, 2) == (Position("x"), Position(done=True))
    assert encode_cursor([Position(done=True)] * 3) == ""
    with pytest.raises(CursorError, match="for 2 shards, the cluster has 3"):
        positions(good, 3)
    other_version = base64.urlsafe_b64encode(b'{"v":2,"p":["x"]}').decode()
    not_strings = base64.urlsafe_b64encode(b'{"v":1,"p":[3]}').decode()
    for bad in ("!!!", "bm90IGpzb24", other_version, not_strings):
        with pytest.raises(CursorError):
            positions(bad, 1)


def test_inconsistent_pages_are_refused() -> None:
    at = (Position(), Position(done=True))
    with pytest.raises(ValueError, match="shard 1 is done"):
        merge_pages(at, [ShardPage((), None, 0), ShardPage(((1, "a"),), None, 1)], limit=2,
                    key=lambda x: x, token_of=token_of)
    with pytest.raises(ValueError, match="shard 0 has more but sent an empty page"):
        merge_pages(at, [ShardPage((), "x", 1), ShardPage((), None, 0)], limit=2, key=lambda x: x,
                    token_of=token_of)
