"""One snapshot child at a time per process (schedd.replication.raft.snapshot_turns): groups that
all want to compact on the same ticks fork one after another, each gets its turn, and a group
dropped mid-snapshot does not keep the others waiting."""

from __future__ import annotations

import random
import threading

from schedd.replication.raft.snapshot_turns import SnapshotTurn, compact_in_turn


class Group:
    """pysyncobj's compaction step as the turn sees it: a long log forks a child, which a later
    step reaps once it has run `child_ticks` ticks."""

    def __init__(self, name: str, child_ticks: int) -> None:
        self.name, self.child_ticks = name, child_ticks
        self.child_left = 0             # ticks until the running child ends (0: none running)
        self.wants = True               # its log is past the threshold
        self.snapshots = 0

    def running(self) -> bool:
        return self.child_left > 0

    def compact(self) -> None:
        if self.child_left > 0:
            self.child_left -= 1
            if self.child_left == 0:
                self.snapshots += 1     # reaped: the dump's entries are dropped
                self.wants = False
            return
        if self.wants:
            self.child_left = self.child_ticks


def test_groups_that_all_want_a_snapshot_fork_one_at_a_time_and_each_gets_one():
    turn = SnapshotTurn()
    groups = [Group(f"g{k}", child_ticks=1 + k % 3) for k in range(8)]
    most = 0
    for tick in range(200):
        for g in random.Random(tick).sample(groups, len(groups)):
            compact_in_turn(turn, g, g.running, g.compact)
        most = max(most, sum(g.running() for g in groups))
    assert most == 1
    assert [g.snapshots for g in groups] == [1] * 8
    assert turn.holder is None


def test_a_group_that_forks_nothing_gives_the_turn_back_at_once():
    turn = SnapshotTurn()
    idle, busy = Group("idle", 2), Group("busy", 2)
    idle.wants = False
    compact_in_turn(turn, idle, idle.running, idle.compact)
    assert turn.holder is None
    compact_in_turn(turn, busy, busy.running, busy.compact)
    assert turn.holder is busy and busy.running()


def test_a_dropped_group_gives_its_turn_back():
    turn = SnapshotTurn()
    dropped, other = Group("dropped", 100), Group("other", 1)
    compact_in_turn(turn, dropped, dropped.running, dropped.compact)
    compact_in_turn(turn, other, other.running, other.compact)
    assert not other.running()                     # waits for the turn
    turn.give_back(dropped)                        # RepairingSyncObj.destroy
    compact_in_turn(turn, other, other.running, other.compact)
    assert other.running()


def test_threads_never_hold_two_children_at_once():
    """Each group's steps run on its own tick thread (a node's groups tick in parallel)."""
    turn = SnapshotTurn()
    groups = [Group(f"g{k}", child_ticks=3) for k in range(6)]
    seen: list[int] = []
    lock = threading.Lock()

    def ticks(g: Group) -> None:
        for _ in range(400):
            compact_in_turn(turn, g, g.running, g.compact)
            with lock:
                seen.append(sum(x.running() for x in groups))
    threads = [threading.Thread(target=ticks, args=(g,)) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(seen) == 1 and all(g.snapshots == 1 for g in groups)
