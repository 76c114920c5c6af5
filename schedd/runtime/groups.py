"""One Raft group as a node hosts it: its replica, leader side and services (schedd.runtime.daemon).

An unsharded node hosts one group, the whole job table. A node of a cluster with `shards = S`
hosts one replica of each of the S shard groups (schedd/core/shards.py), each built here the
same way: its own RaftNode (log, journal, snapshots, feature level, history store, data dir),
WorkerHub and Dispatcher (it fires and dispatches only what its group holds, when its replica
leads), Router (forwarding to its group's leader) and the gRPC servicers bound to it. What is
the node's, not a group's, stays in the daemon: the one gRPC server and its interceptors, the
clock, TLS, the dashboard, the audit queue of refused calls (group 0's).

Shard k's replica on a node lives in `<data_dir>/shards/<k>` (shard 0 in `data_dir` itself, so
an unsharded node's data dir is shard 0's). Its Raft address is `shards.shard_raft_address`'s,
the same rule on every node: the node's own Raft address, one port for all its groups
(`schedd.replication.raft_port`), or on a cluster made before the shared port, the node's Raft
port + k (`settle_raft_ports` says which). Which groups a node hosts is the
shard map's business (schedd.runtime.placement): every node hosts group 0; a replica of another
group comes and goes as `schedctl shard move` moves it (`GroupSet` holds the ones hosted now).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from schedd.api.acl_service import AclService, AuditService
from schedd.api.backup_service import BackupService
from schedd.api.calendars_service import CalendarsService
from schedd.api.dags_service import DagsService
from schedd.api.logs_service import LogsService
from schedd.api.membership_service import MembershipService
from schedd.api.service import ClusterService, Router, SchedulerService
from schedd.api.watch import WatchSlots
from schedd.core.shards import PER_GROUP_PORTS, SHARED_PORT, shard_raft_address, shares_port
from schedd.leader.dispatcher import Dispatcher
from schedd.leader.features import FeatureRaiser, Joiners
from schedd.leader.run_logs import RunLogs
from schedd.leader.workers import WorkerHub
from schedd.ports.clock import Clock
from schedd.ports.faults import Faults
from schedd.replication.convergence import ConvergenceTracker
from schedd.replication.node import LEADER, RaftNode
from schedd.replication.raft_port import PortLimits, SharedRaftPort
from schedd.replication.transport import TransportLimits
from schedd.replication.ticker import TickLoop
from schedd.runtime import history as node_history
from schedd.runtime.config import NodeConfig
from schedd.runtime.leader_terms import LeaderTerms
from schedd.runtime.metrics import Metrics
from schedd.runtime.replica_watch import ReplicaWatch
from schedd.settings import Peer

log = logging.getLogger("schedd")

SHARDS_FILE = "shards.json"


class ShardCountError(RuntimeError):
    """The data dir was made for another shard count (S is fixed when the cluster is made)."""


def group_config(cfg: NodeConfig, shard: int, peers: tuple[Peer, ...] | None = None) -> NodeConfig:
    """The configuration of this node's replica of `shard`: its data dir and Raft addresses
    (every peer's too: `peers`, the nodes' own addresses, default the config's); the gRPC
    addresses stay the nodes' own (any node accepts any call)."""
    if cfg.shards <= 1 or shard == 0:
        return cfg
    ports = raft_ports(cfg)
    return dataclasses.replace(
        cfg, data_dir=group_dir(cfg, shard),
        raft_address=shard_raft_address(cfg.raft_address, shard, ports),
        raft_bind=shard_raft_address(cfg.raft_bind, shard, ports) if cfg.raft_bind else "",
        peers=tuple(Peer(p.id, shard_raft_address(p.raft_address, shard, ports), p.grpc_address)
                    for p in (cfg.peers if peers is None else peers)))


def raft_ports(cfg: NodeConfig) -> str:
    """The cluster's Raft port mode as `settle_raft_ports` left it in the config ("" before
    that: a configuration no node started from yet, which makes a new cluster: shared)."""
    return cfg.raft_ports or SHARED_PORT


def group_dir(cfg: NodeConfig, shard: int) -> Path:
    """Where this node keeps its replica of `shard`."""
    return Path(cfg.data_dir) if shard == 0 else Path(cfg.data_dir) / "shards" / str(shard)


def check_shard_count(cfg: NodeConfig) -> NodeConfig:
    """Record S in a new data dir; refuse one made for another S (its jobs live in the shards
    of that count: a different S would route them elsewhere). Returns `cfg` with its Raft port
    mode settled (`settle_raft_ports`)."""
    path = Path(cfg.data_dir) / SHARDS_FILE
    try:
        doc = json.loads(path.read_text())
        saved, recorded = doc["shards"], doc.get("raft_ports")
    except FileNotFoundError:
        saved = 1 if holds_state(Path(cfg.data_dir)) else None    # made before shards were recorded
        recorded = None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ShardCountError(f"cannot read {path}: {e}") from None
    if saved is not None and saved != cfg.shards:
        raise ShardCountError(f"the data dir {cfg.data_dir} holds a cluster of {saved} shard(s) and the config "
                              f"says shards = {cfg.shards}; the shard count is fixed when a cluster is made")
    if cfg.shards <= 1:                           # an unsharded dir stays as it always was
        return cfg
    settled = dataclasses.replace(cfg, raft_ports=settle_raft_ports(cfg.raft_ports, path.exists(), recorded))
    if not path.exists() or recorded != settled.raft_ports:
        if path.exists():
            log.warning("Raft ports: the data dir says %s, the config says %s: the config's from now on (every "
                        "node of the cluster must use the same)", recorded or PER_GROUP_PORTS, settled.raft_ports)
        record_shard_count(settled)
    return settled


def settle_raft_ports(configured: str, recorded_shards: bool, recorded: object) -> str:
    """A sharded node's Raft port mode. The config's `raft_ports` when set (an operator's
    choice: a new node joining a cluster made before the shared port sets "per_group"; a
    cluster switched to one port sets "shared" on every node at one restart); else what the
    data dir records; a data dir that records its shard count but no mode was made by a build
    before the shared port, whose groups listen on port + k on every node, so it keeps them (a
    rolling upgrade must not cut a group's replicas apart); a new data dir makes a new cluster,
    which shares one port."""
    if configured:
        return configured
    if isinstance(recorded, str) and recorded in (SHARED_PORT, PER_GROUP_PORTS):
        return recorded
    return PER_GROUP_PORTS if recorded_shards else SHARED_PORT


def record_shard_count(cfg: NodeConfig) -> None:
    """Write S (and the Raft port mode) into the data dir (a new sharded node's, or one
    `schedd restore` just seeded)."""
    path = Path(cfg.data_dir) / SHARDS_FILE
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(json.dumps({"shards": cfg.shards, "raft_ports": raft_ports(cfg)}) + "\n")
    path.chmod(0o600)


def holds_state(data_dir: Path) -> bool:
    """Whether a replica's directory holds anything (a replica was made there)."""
    return data_dir.is_dir() and any(data_dir.iterdir())


@dataclass(slots=True)
class Group:
    """One group's replica on this node and everything bound to it."""

    shard: int
    cfg: NodeConfig
    node: RaftNode
    metrics: Metrics
    hub: WorkerHub
    dispatcher: Dispatcher
    replicas: ReplicaWatch
    router: Router
    history: Any
    led: LeaderTerms
    joiners: Joiners
    servicers: dict[str, object] = field(default_factory=dict)
    raiser: FeatureRaiser | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)

    def start(self, writes_health: Callable[[bool], Any] | None = None) -> None:
        cfg, node = self.cfg, self.node

        async def quiet(_: bool) -> None:
            return None
        self.tasks = [
            asyncio.create_task(self.dispatcher.run()),
            asyncio.create_task(self.replicas.run(writes_health or quiet)),
            asyncio.create_task(_keep_membership(node, self.shard == 0)),
            asyncio.create_task(node_history.keep_pruned(self.history, self.hub.clock.now_ms, cfg.history,
                                                         self._shortest_age)),
            asyncio.create_task(node_history.fill_gaps(
                self.history, lambda: [p.grpc_address for p in node.membership.members()
                                       if p.id != cfg.node_id and p.grpc_address],
                self.router._channel, self.router.node_metadata)),
        ]
        if self.raiser is not None:
            self.tasks.append(asyncio.create_task(self.raiser.run()))

    def _shortest_age(self) -> int:
        node = self.node
        with node.lock:
            jobs = list(node.state.jobs.values())
            return min((a for job in jobs if (a := node.state.policy(job).max_age_ms)), default=0)

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await self.dispatcher.close()
        await self.router.close()
        self.node.close()
        self.history.close()


async def _keep_membership(node: RaftNode, configured: bool = True, period_s: float = 1.0) -> None:
    """Write the Raft configuration to membership.json whenever it changes (what a restart
    before the next dump starts from) and log each change, with a config-file disagreement
    (`configured`: group 0's, whose members the config file lists; another shard group's
    members are the shard map's business)."""
    warned = ""
    while True:
        try:
            if node.membership.persist():
                log.info("membership now: %s", node.membership.describe())
            disagreement = node.membership.config_disagreement() if configured else ""
            if disagreement and disagreement != warned:
                log.warning("membership: %s", disagreement)
            warned = disagreement
        except OSError as e:
            log.warning("membership: cannot write %s: %s", "membership.json", e)
        await asyncio.sleep(period_s)


@dataclass(slots=True)
class GroupSet:
    """The shard groups this node hosts now, by shard (group 0 always). Everything the node
    does over its groups reads it when it acts, so a replica built or dropped at run time
    (a shard move) is seen at once."""

    by_shard: dict[int, Group] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Group]:
        return iter([self.by_shard[k] for k in sorted(self.by_shard)])

    def get(self, shard: int) -> Group | None:
        return self.by_shard.get(shard)

    @property
    def zero(self) -> Group:
        return self.by_shard[0]

    def nodes(self) -> dict[int, RaftNode]:
        """Each hosted group's replica, by shard."""
        return {k: self.by_shard[k].node for k in sorted(self.by_shard)}


@dataclass(slots=True)
class NodeParts:
    """What the node shares with every group it hosts."""

    cfg: NodeConfig
    clock: Clock
    faults: Faults
    version: str
    signer: Any
    peer_channels: Callable[[str], grpc.aio.Channel]
    watchers: WatchSlots
    login_codes: Any
    audit_add: Callable[[dict], None]
    accepts_pings_ms: int
    sealer: Any = None               # signs backup headers (schedd.runtime.restore.header_sealer)
    # the one thread ticking every group's Raft replica (S > 1; made with the first group)
    ticker: TickLoop | None = None
    # the one Raft port of all the node's groups (S > 1 and the shared port; made with the first group)
    raft_port: SharedRaftPort | None = None


def build_group(parts: NodeParts, shard: int, peers: tuple[Peer, ...] | None = None) -> Group:
    """Group `shard`'s replica and services on this node (module doc); `peers`: the nodes
    holding the group's replicas, when not the config's (a replica a shard move places here).
    Built on the main thread (pysyncobj's tick thread, and a sharded node's one tick loop,
    `parts.ticker`, die with the thread that builds the SyncObj, or the first group)."""
    cfg = group_config(parts.cfg, shard, peers)
    Path(cfg.data_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    clock = parts.clock
    # a sharded node's groups record which shard each applied entry, role change and push is for
    faults = parts.faults.for_shard(shard) if parts.cfg.shards > 1 else parts.faults
    metrics = Metrics(cfg.metrics)
    box: list[Group] = []
    led = LeaderTerms()                        # the terms this replica led (NodeStatus.leader_terms)

    def on_applied(entry, result, index):
        metrics.on_applied(entry, result)
        if box:
            box[0].dispatcher.on_applied(entry, result, index)

    def on_role_change(old, new):
        term = box[0].node.term if box else -1
        if new == LEADER:
            metrics.leader_changes.inc()
            led.became_leader(max(term, 0), clock.now_ms())
        elif old == LEADER:
            led.stepped_down(clock.now_ms())
        faults.role_changed(cfg.node_id, old, new, term)
        if box:
            box[0].dispatcher.on_role_change(old, new)

    default_retention = node_history.default_retention(cfg.history)

    def retention_of(name: str):
        if not box:
            return default_retention
        node = box[0].node
        with node.lock:
            job = node.state.jobs.get(name)
            age = node.state.policy(job).max_age_ms if job is not None else 0
        return node_history.job_retention(job, age, default_retention)

    history = node_history.open_store(cfg.data_dir, cfg.history, retention_of)
    if parts.cfg.shards > 1 and parts.ticker is None:
        parts.ticker = TickLoop()              # one tick thread for all groups (replication.ticker)
    shared = shares_port(parts.cfg.shards, raft_ports(parts.cfg))
    if shared and parts.raft_port is None:     # one Raft port for all groups (replication.raft_port)
        parts.raft_port = node_raft_port(parts.cfg, parts.ticker)
    node = RaftNode(cfg, on_applied=on_applied, on_role_change=on_role_change, faults=faults,
                    build=parts.version, history=history, ticker=parts.ticker if parts.cfg.shards > 1 else None,
                    raft_port=parts.raft_port if shared else None, port_group=shard if shared else None)
    hub = WorkerHub(node, clock, lease_ms=cfg.scheduler.lease_ms,
                    max_streams=cfg.limits.max_worker_streams, max_slots=cfg.limits.max_worker_slots,
                    max_streams_per_token=cfg.limits.max_worker_streams_per_token, faults=faults)
    hub.shard, hub.shards = shard, parts.cfg.shards
    dispatcher = Dispatcher(node, clock, metrics, hub, faults)
    replicas = ReplicaWatch(node, ConvergenceTracker(cfg.raft.replica_stuck_ms), wall_ms=clock.now_ms)
    load = dispatcher.assigner.load if dispatcher.assigner is not None else None
    metrics.watch(node, replicas, load, hub)
    router = Router(node, parts.signer, clock, parts.peer_channels)
    router.shard, router.shards = (shard if parts.cfg.shards > 1 else None), parts.cfg.shards
    hub.router = router
    group = Group(shard, cfg, node, metrics, hub, dispatcher, replicas, router, history, led, Joiners())
    box.append(group)
    cluster = ClusterService(node, router, replicas, clock, load, accepts_pings_ms=parts.accepts_pings_ms,
                             leader_terms=led.rows)
    cluster.shards, cluster.shard = parts.cfg.shards, shard
    group.raiser = FeatureRaiser(node, clock, cluster.member_infos, joiners=group.joiners)   # leader only
    acl = AclService(node, clock, metrics, router, login_links=parts.login_codes, audit=parts.audit_add)
    group.servicers = {
        "Scheduler": SchedulerService(node, clock, metrics, router, dispatcher, parts.watchers),
        "Cluster": cluster,
        "Dags": DagsService(node, clock, metrics, router, parts.watchers),
        "Workers": hub,
        "Acl": acl,
        "Audit": AuditService(node, clock, metrics, router),
        "Membership": MembershipService(node, clock, metrics, router, group.joiners),
        "Backup": BackupService(node, router, clock, parts.sealer),
        "Logs": LogsService(node, router, RunLogs(node, hub)),
        "Calendars": CalendarsService(node, clock, metrics, router),
    }
    return group


def node_raft_port(cfg: NodeConfig, ticker: TickLoop | None) -> SharedRaftPort:
    """The node's one Raft port for all its groups, driven by its tick loop."""
    if ticker is None:
        raise ValueError("the shared Raft port runs on the node's tick loop")
    return SharedRaftPort(cfg.raft_bind or cfg.raft_address, ticker,
                          PortLimits(handshake_timeout_s=cfg.raft.handshake_timeout_ms / 1000,
                                     max_pending=port_pending_cap(cfg.shards)),
                          groups=cfg.shards)


def port_pending_cap(shards: int) -> int:
    """Connections the shared port keeps before they reach their group: the transport's cap on
    strangers (32), plus room for every peer of a 5-node cluster dialing every group at once (at
    a node's start, a connection for a group not started yet waits for it), so a start never
    refuses a peer. S ports of their own allowed 32 each, more than this."""
    return TransportLimits().max_pending + MAX_PEERS * shards


MAX_PEERS = 4                  # a node's peers in the largest cluster (5 voters)
