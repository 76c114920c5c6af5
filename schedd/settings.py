"""A node's settings as typed values: what the config file says once runtime/config.py has parsed
and validated it. Plain frozen dataclasses with their defaults, no parsing and no I/O, so every
layer that is configured (replication, leader, api) reads its settings from here instead of
importing the composition root's config loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from schedd_client.net.policy import NetPolicy


@dataclass(slots=True, frozen=True)
class Peer:
    id: str
    raft_address: str
    grpc_address: str


@dataclass(slots=True, frozen=True)
class RaftTuning:
    heartbeat_ms: int = 100
    tick_ms: int = 50
    election_timeout_ms: tuple[int, int] = (600, 1200)
    leader_fallback_ms: int = 2500
    compaction_entries: int = 20000
    compaction_seconds: int = 600
    compaction_bytes: int = 256 << 20    # or once the applied log holds this much (a restart replays it)
    max_frame_bytes: int = 4 << 20       # a Raft frame larger than this drops its connection
    handshake_timeout_ms: int = 5000     # a Raft connection not authenticated by then is dropped
    replica_stuck_ms: int = 10000     # a replica behind with no progress this long is "stuck"


@dataclass(slots=True, frozen=True)
class SchedulerTuning:
    lookahead_ms: int = 1500
    max_fire_batch: int = 500
    burst_lookahead_ms: int = 15000
    burst_threshold: int = 2000
    lease_ms: int = 10000
    catchup_per_second: int = 10      # catch-up runs (policy all) started per second, cluster-wide


@dataclass(slots=True, frozen=True)
class Limits:
    """Caps on what a caller may make a node hold; past one, the call fails RESOURCE_EXHAUSTED
    naming the key to raise."""

    max_worker_streams: int = 512     # worker streams per node, handshakes included
    max_worker_slots: int = 256       # slots a worker may advertise
    max_worker_streams_per_token: int = 64   # worker streams one worker token holds, handshakes included
    max_jobs_per_call: int = 5_000
    max_bytes_per_call: int = 8 * 1024 * 1024
    max_jobs_per_team: int = 1_000_000
    max_inflight_per_connection: int = 64


@dataclass(slots=True, frozen=True)
class TlsSettings:
    """[tls]: the node's certificate and key (PEM) serve every gRPC port; a client_ca requires
    client certificates (mTLS) and is what the node trusts when it dials its peers. `insecure`
    allows plaintext, and only on loopback binds (schedd.security.startup)."""

    cert: Path | None = None
    key: Path | None = None
    client_ca: Path | None = None
    insecure: bool = False

    @property
    def enabled(self) -> bool:
        return self.cert is not None


@dataclass(slots=True, frozen=True)
class AclSettings:
    """Access control (docs/security-acl.md): default-deny when enabled; mutating calls are
    rate-limited per principal (0 turns the limit off); a one-time dashboard login link lives
    `login_link_seconds` (a test shortens it to see one expire)."""

    enabled: bool = True
    rate_per_second: int = 200
    rate_burst: int = 400
    login_link_seconds: int = 60      # a one-time dashboard link's lifetime (shorter only, never longer)


@dataclass(slots=True, frozen=True)
class HistorySettings:
    """[history]: the node's store of finished executions (schedd.history). A job keeps its newest
    `history_limit` runs (its spec; 1,000 by default) and none finished more than
    `history_max_age_seconds` ago (its spec), else `max_age_days`; pruned a little at a time."""

    max_age_days: float = 30.0
    prune_rows_per_step: int = 2000


@dataclass(slots=True, frozen=True)
class MetricsSettings:
    """[metrics]: how many jobs get series of their own. Per-job series (runs by outcome, last
    success, durations, queue wait, SLA misses) are labelled for at most `job_series_limit`
    jobs; past it only the jobs of `job_series_teams` get their own, the rest count under
    job_name="_other" of their team, so a cluster of a million jobs cannot make a million series."""

    job_series_limit: int = 500
    job_series_teams: tuple[str, ...] = ()


@dataclass(slots=True, frozen=True)
class NodeConfig:
    node_id: str
    data_dir: Path
    raft_address: str
    grpc_address: str
    metrics_address: str = ""
    raft_bind: str = ""
    secret: str = field(default="", repr=False)
    fsync: str = "always"
    peers: tuple[Peer, ...] = ()
    raft: RaftTuning = RaftTuning()
    scheduler: SchedulerTuning = SchedulerTuning()
    webhooks: NetPolicy = NetPolicy()   # where SLA webhooks may be POSTed
    limits: Limits = Limits()
    tls: TlsSettings = TlsSettings()
    acl: AclSettings = AclSettings()
    history: HistorySettings = HistorySettings()
    metrics: MetricsSettings = MetricsSettings()
    join: tuple[str, ...] = ()        # gRPC addresses of a cluster to join (empty data dir only)
    test_mode: bool = False          # enables test-only admin calls (clock offset); never in production
    shards: int = 1                  # shard groups S (schedd/core/shards.py); fixed when the cluster is made
    # sharded clusters: "shared" (every group on the node's one Raft port) or "per_group" (group k
    # on the Raft port + k); "" = as the data dir records (schedd.runtime.groups.settle_raft_ports)
    raft_ports: str = ""

    @property
    def members(self) -> tuple[Peer, ...]:
        """All voting members, this node included, ordered by id."""
        me = Peer(self.node_id, self.raft_address, self.grpc_address)
        return tuple(sorted((me, *self.peers), key=lambda p: p.id))

    def grpc_of_raft(self, raft_address: str) -> str:
        for p in self.members:
            if p.raft_address == raft_address:
                return p.grpc_address
        return ""

    def id_of_raft(self, raft_address: str) -> str:
        for p in self.members:
            if p.raft_address == raft_address:
                return p.id
        return ""
