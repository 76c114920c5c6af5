"""Which node a call that names a job should go to first, in a sharded cluster (no I/O).

A sharded cluster splits the job table into groups by a hash of each job's name; any node
accepts any call and hands it to the owning group's leader, one hop further, and its answer
then says so in its trailers: ``x-schedd-leader`` (that leader's gRPC address) and
``x-schedd-shard`` (``K/S``: shard K of S). The clients remember it (``ShardMap``) and send the
next call naming a job of that shard to its leader first, skipping the hop; a leader that does
not answer is forgotten, and a new one is learned from the next forwarded answer. Nothing is
asked for it: an unsharded cluster never sends the shard trailer, and its clients route as
before.

``shard_of`` and ``routing_key`` are the wire contract of the daemon's ``schedd.core.shards``
(one golden table tests both): BLAKE2b-64 of the key, scaled to the shard count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

LEADER_TRAILER = "x-schedd-leader"
SHARD_TRAILER = "x-schedd-shard"


def routing_key(name: str) -> str:
    """A DAG's rows (``etl:load``, ``etl:``) route as the DAG (``etl``)."""
    dag, sep, _task = name.partition(":")
    return dag if sep and dag else name


def shard_of(key: str, shards: int) -> int:
    if shards < 1:
        raise ValueError(f"shard count must be at least 1, got {shards}")
    h = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")
    return (h * shards) >> 64


def _run_job(run_id: str) -> str:
    return run_id.partition("@")[0]


# The job a request names, by method (the daemon's `Key` rules, schedd.api.shard_routing).
_NAMES: dict[str, Callable[[Any], str]] = {
    "PutJob": lambda r: r.job.name, "GetJob": lambda r: r.name, "PauseJob": lambda r: r.name,
    "ResumeJob": lambda r: r.name, "DeleteJob": lambda r: r.name, "TriggerJob": lambda r: r.name,
    "BackfillJob": lambda r: r.name, "ListInstants": lambda r: r.job, "ListExecutions": lambda r: r.job,
    "GetExecution": lambda r: _run_job(r.id), "CancelExecution": lambda r: _run_job(r.id),
    "RetryExecution": lambda r: _run_job(r.id), "Explain": lambda r: r.job or _run_job(r.id),
    "ReadRunLogs": lambda r: _run_job(r.id), "PutDag": lambda r: r.dag.name, "GetDag": lambda r: r.name,
    "DeleteDag": lambda r: r.name, "RunDag": lambda r: r.name, "ListDagRuns": lambda r: r.name,
    "GetDagRun": lambda r: r.name, "ClearDagTask": lambda r: r.name, "WatchDagRun": lambda r: r.name,
    # a batch goes to its first job's shard: all of it when its jobs share one shard (the node
    # splits any other batch, from wherever it lands)
    "PutJobs": lambda r: r.jobs[0].name if r.jobs else "", "DiffJobs": lambda r: r.jobs[0].name if r.jobs else "",
}
_SERVICES = frozenset({"scheduler", "dags", "logs"})


def route_of(service: str, method: str, request: Any) -> str:
    """The routing key of a call ("" when it names no job: any node will do)."""
    of = _NAMES.get(method) if service in _SERVICES else None
    name = str(of(request)) if of is not None else ""
    return routing_key(name) if name else ""


@dataclass(slots=True)
class ShardMap:
    """Each shard's leader as the forwarded answers named it (module doc)."""

    shards: int = 0                        # 0: never told (an unsharded cluster, or no forward yet)
    leaders: dict[int, str] = field(default_factory=dict)

    def leader_for(self, key: str) -> str | None:
        if self.shards <= 1 or not key:
            return None
        return self.leaders.get(shard_of(key, self.shards))

    def forget(self, key: str) -> None:
        """`key`'s shard leader did not answer: route by the usual order until told again."""
        if self.shards > 1 and key:
            self.leaders.pop(shard_of(key, self.shards), None)

    def heard(self, trailers: Iterable[tuple[str, Any]]) -> None:
        """A forwarded answer's trailers: which shard of how many, and its leader."""
        found = {k: v for k, v in trailers if k in (LEADER_TRAILER, SHARD_TRAILER) and isinstance(v, str)}
        leader, where = found.get(LEADER_TRAILER, ""), found.get(SHARD_TRAILER, "")
        shard, sep, count = where.partition("/")
        if not (leader and sep and shard.isdigit() and count.isdigit()) or not int(shard) < int(count):
            return
        if int(count) != self.shards:
            self.shards, self.leaders = int(count), {}
        self.leaders[int(shard)] = leader
