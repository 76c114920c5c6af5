"""Log repair after a partition: heartbeat rounds (and messages) until a replica whose divergent
suffix spans many pipelined batches matches the leader again, RepairingSyncObj against stock
pysyncobj 0.3.17 (the baseline), on the in-memory network (no sockets: counts, not timings).

    python bench/bench_repair.py [--max-rounds 200]

A round is one heartbeat period (schedd's default heartbeat is 20 ms), so rounds x 20 ms is the
repair time a real cluster adds on top of reconnecting.
"""

from __future__ import annotations

import argparse

from pysyncobj import SyncObj

from schedd.replication.memory_network import (MemoryNetwork, append_raw, driven_conf, make_leader,
                                               raft_log, send_heartbeats, set_term)
from schedd.replication.raft_patches import RepairingSyncObj

A, B, C = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"
BATCH = 65536                   # pysyncobj's appendEntriesBatchSizeBytes, as schedd runs it


def repair_rounds(cls: type, stale: int, fresh: int, entry_bytes: int, max_rounds: int
                  ) -> tuple[int | None, int]:
    net = MemoryNetwork()
    for addr in (A, B, C):
        net.add(addr, (A, B, C), cls=cls, conf=driven_conf(appendEntriesBatchSizeBytes=BATCH))
    net.connect_all()
    for addr in (A, B, C):
        append_raw(net.nodes[addr], [1] * 100, size=entry_bytes)
    append_raw(net.nodes[B], [1] * stale, size=entry_bytes)
    for addr in (A, C):
        append_raw(net.nodes[addr], [2] * fresh, size=entry_bytes)
    for addr in (A, B, C):
        set_term(net.nodes[addr], 2)
    make_leader(net.nodes[A], 3)
    for rnd in range(1, max_rounds + 1):
        send_heartbeats(net.nodes[A])
        net.deliver_all()
        if raft_log(net.nodes[A]) == raft_log(net.nodes[B]):
            return rnd, net.delivered
    return None, net.delivered


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--max-rounds", type=int, default=200)
    args = p.parse_args()
    batch = BATCH // 200             # entries of 200 bytes per batch
    print(f"{'stale':>6} {'fresh':>6} {'batches':>8} | {'patched rounds':>14} {'msgs':>6} | "
          f"{'stock rounds':>12} {'msgs':>6}")
    for stale, fresh in [(40, 60), (300, 500), (1000, 2000), (3000, 5000)]:
        p_rounds, p_msgs = repair_rounds(RepairingSyncObj, stale, fresh, 200, args.max_rounds)
        s_rounds, s_msgs = repair_rounds(SyncObj, stale, fresh, 200, args.max_rounds)
        print(f"{stale:>6} {fresh:>6} {fresh // batch + 1:>8} | {p_rounds or 'never':>14} {p_msgs:>6} | "
              f"{s_rounds or f'>{args.max_rounds}':>12} {s_msgs:>6}")


if __name__ == "__main__":
    main()
