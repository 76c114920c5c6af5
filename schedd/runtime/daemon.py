"""Composition root of one `schedd serve` node: Raft node, gRPC server, dispatcher, metrics.

Order matters: the RaftNode (and so pysyncobj's tick thread) is built on the main thread, inside
the running event loop's thread, because the tick thread exits when its creating thread does.
Shutdown (SIGTERM/SIGINT): stop accepting calls (grace), stop the dispatcher, then destroy the
SyncObj, which flushes and closes the journal.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from schedd.api.auth import AuditQueue, AuthInterceptor, NodeSigner, RateLimiter
from schedd.api.auth import current as auth_current
from schedd.api.halted import HaltedGate
from schedd.api.limits import InflightLimit, max_receive_bytes
from schedd.api import quota_reads, shard_routing
from schedd.api.service import ClusterService, Router, SchedulerService
from schedd.api.shard_routing import ShardFront, owning_parts
from schedd.leader.leader_balance import LeaderBalancer
from schedd.leader.quota_balance import QuotaBalancer
from schedd.api.shard_calls import GroupCalls, RemoteGroup
from schedd.runtime.shard_moves import ShardMover
from schedd.runtime import placement
from schedd.runtime.groups import (Group, GroupSet, NodeParts, ShardCountError, build_group, check_shard_count,
                                   group_config, group_dir, holds_state)
from schedd.runtime.placement import boot_shards
from schedd.api.watch import WatchSlots
from schedd.dashboard.login_codes import LoginCodes
from schedd.core.features import build_behind_message
from schedd.core.commands import FEATURES
from schedd.replication import level_file
from schedd.ports.clock import SystemClock
from schedd.runtime.config import NodeConfig
from schedd.runtime import http as node_http
from schedd.runtime import join as joining
from schedd.runtime.metrics import by_shard
from schedd.runtime.restore import header_sealer
from schedd.security.startup import plaintext_refusal
from schedd.security.tls import CertReloader, ServerTlsFiles, TlsError, channel_credentials
from schedd.settings import Peer, TlsSettings
from schedd.versions import build_info
from schedd_client.channels import KEEPALIVE_MIN_MS, Security, open_aio_channel
from schedd.testing import hooks as testing
from schedd_proto import (acl_pb2_grpc, backup_pb2_grpc, calendars_pb2_grpc, dags_pb2_grpc, logs_pb2_grpc,
                          membership_pb2_grpc)
from schedd_proto import scheduler_pb2_grpc as pb_grpc

log = logging.getLogger("schedd")

# Health service names (grpc.health.v1). Liveness ("" and schedd.liveness) is SERVING while the
# process runs; writes is SERVING only while this node knows a leader, has a quorum and is not a
# replica stuck in log repair (ReplicaWatch), so a load balancer or probe can route around it.
LIVENESS_SERVICE = "schedd.liveness"
WRITES_SERVICE = "schedd.writes"


class StartupError(RuntimeError):
    pass


# Every service the node serves: its full name, generated base class and registration.
SERVICES: dict[str, tuple[str, type, Callable[[Any, grpc.aio.Server], None]]] = {
    "Scheduler": ("schedd.v1.Scheduler", pb_grpc.SchedulerServicer, pb_grpc.add_SchedulerServicer_to_server),
    "Cluster": ("schedd.v1.Cluster", pb_grpc.ClusterServicer, pb_grpc.add_ClusterServicer_to_server),
    "Dags": ("schedd.v1.Dags", dags_pb2_grpc.DagsServicer, dags_pb2_grpc.add_DagsServicer_to_server),
    "Workers": ("schedd.v1.Workers", pb_grpc.WorkersServicer, pb_grpc.add_WorkersServicer_to_server),
    "Acl": ("schedd.v1.Acl", acl_pb2_grpc.AclServicer, acl_pb2_grpc.add_AclServicer_to_server),
    "Audit": ("schedd.v1.Audit", acl_pb2_grpc.AuditServicer, acl_pb2_grpc.add_AuditServicer_to_server),
    "Membership": ("schedd.v1.Membership", membership_pb2_grpc.MembershipServicer,
                   membership_pb2_grpc.add_MembershipServicer_to_server),
    "Backup": ("schedd.v1.Backup", backup_pb2_grpc.BackupServicer, backup_pb2_grpc.add_BackupServicer_to_server),
    "Logs": ("schedd.v1.Logs", logs_pb2_grpc.LogsServicer, logs_pb2_grpc.add_LogsServicer_to_server),
    "Calendars": ("schedd.v1.Calendars", calendars_pb2_grpc.CalendarsServicer,
                  calendars_pb2_grpc.add_CalendarsServicer_to_server),
}
# What reflection lists (grpcurl): every service above, health and reflection itself.
REFLECTED = (*(full for full, _, _ in SERVICES.values()), health.SERVICE_NAME, reflection.SERVICE_NAME)
# The services health also answers by name, SERVING with liveness (a follower still answers
# Cluster.Status and stale reads): the names load balancers and probes were given to check.
HEALTH_BY_SERVICE = tuple(SERVICES[name][0] for name in ("Scheduler", "Cluster"))


def server_tls(tls: TlsSettings, binds: dict[str, str]) -> CertReloader | None:
    """The start-up rule (schedd.security.startup) and, with TLS, the reloader that serves every
    gRPC port of the node; a node that may not serve as configured raises StartupError naming
    the address or the file and the fix."""
    why = plaintext_refusal(binds, tls=tls.enabled, insecure=tls.insecure)
    if why:
        raise StartupError(why)
    if not tls.enabled or tls.cert is None or tls.key is None:
        return None
    try:
        return CertReloader(ServerTlsFiles(tls.cert, tls.key, tls.client_ca))
    except TlsError as e:
        raise StartupError(f"[tls]: {e}") from None


def peer_channels(tls: TlsSettings) -> Callable[[str], grpc.aio.Channel]:
    """How this node dials its peers (forwarding, status): TLS trusting [tls].client_ca (the
    system roots without one) and, under mTLS, presenting the node's own certificate. The files
    are read now: call again after a reload for channels with the new ones."""
    if not tls.enabled:
        return lambda addr: open_aio_channel(addr, Security())
    if tls.client_ca is not None:
        creds = channel_credentials(tls.client_ca, tls.cert, tls.key)
        security = Security(credentials=creds)
    else:
        security = Security(tls=True)
    return lambda addr: open_aio_channel(addr, security)


def tune_gc() -> None:
    """The state holds up to millions of long-lived objects. Young collections every 700
    allocations (the default) cost more than they find, and each one runs while holding the GIL
    that the Raft tick thread needs; collect young objects less often. Snapshot restores freeze
    what they load (state.restore), so full collections skip the bulk of the state."""
    gc.set_threshold(50_000, 20, 20)


def _describe_tls(reloader: CertReloader | None) -> str:
    if reloader is None:
        return "plaintext, loopback only"
    return "TLS, client certificates required" if reloader.mtls else "TLS"


def _reload(cfg: NodeConfig, reloader: CertReloader | None, routers: list[Router],
            tasks: set[asyncio.Task], web: node_http.HttpServer | None = None) -> None:
    """SIGHUP: re-read the TLS files now (new handshakes get them; open connections keep theirs;
    a bad file keeps the old certificate, logged), then rebuild the forwarding channels so the
    node presents its new certificate to its peers too."""
    if reloader is None:
        log.info("SIGHUP: no [tls] configured, nothing to reload")
        return
    error = reloader.reload_now()
    if error is not None:
        return                                  # logged by the reloader; still serving the old files
    if web is not None:
        web.reload()
    try:
        factory = peer_channels(cfg.tls)
    except TlsError as e:
        log.warning("SIGHUP: keeping the forwarding channels: %s", e)
        return
    async def swap() -> None:
        closed = sum([await router.replace_channels(factory) for router in routers])
        log.info("TLS: forwarding channels rebuilt with the new files (%d old ones closed)", closed)

    task = asyncio.get_running_loop().create_task(swap())
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def _freed(state: weakref.ref, shard: int, after_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)) -> None:
    """Collect a dropped replica's state and say so if anything still holds it: its memory
    would stay taken. The replica's objects were frozen out of the collector as its state grew
    (schedd.replication.node.GrowthFreezer), and the group's parts hold each other in cycles,
    which only a collection of the frozen objects frees: one full collection per drop (a
    shard move's last step, rare), then everything alive is frozen again."""
    waited = 0.0
    for pause in after_s:
        await asyncio.sleep(pause)            # the caller's frames and the group's cancelled tasks end
        waited += pause
        started = time.monotonic()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        if state() is None:
            log.info("shard %d: the dropped replica's memory is freed (%.0f s after the drop; a full collection "
                     "of %.2f s)", shard, waited, time.monotonic() - started)
            return
    log.warning("shard %d: the dropped replica's state is still referenced %.0f s after the drop: its memory "
                "stays taken", shard, waited)


async def _close_groups(groups: GroupSet) -> None:
    for g in groups:
        await g.stop()


async def serve(cfg: NodeConfig, *, ready: asyncio.Event | None = None) -> None:
    # Everything this process creates (journal, meta, the dump written by pysyncobj's fork child
    # and its .tmp) is private to the node's user; secure_data_dir fixes what already exists.
    os.umask(0o077)
    # pysyncobj forks to write snapshots. The child only pickles and exits; with the garbage
    # collector off it cannot run a gRPC object's finalizer, which would start gRPC machinery in
    # a child that shares the parent's epoll descriptor.
    os.register_at_fork(after_in_child=gc.disable)
    tune_gc()
    reloader = server_tls(cfg.tls, {"grpc_address": cfg.grpc_address})   # before anything binds
    http_refusal = node_http.refusal(cfg.metrics_address, cfg.tls) if cfg.metrics_address else None
    if http_refusal:
        raise StartupError(http_refusal)
    try:
        faults = testing.configure_node(cfg)   # NO_FAULTS unless a test asks (history, switches, dialing)
    except testing.TestModeError as e:
        raise StartupError(str(e)) from None
    clock = SystemClock()
    loop = asyncio.get_running_loop()
    table = faults.feature_table(FEATURES)         # this build's (a test's node: an older build's)
    version = build_info(table).version
    booted = boot_shards(cfg, first_start=not holds_state(group_dir(cfg, 0)))   # before anything is written
    join_now = joining.needs_join(cfg)
    try:
        cfg = check_shard_count(cfg)               # and its Raft port mode settled
    except ShardCountError as e:
        raise StartupError(str(e)) from None
    for k in booted:
        data_dir = group_config(cfg, k).data_dir
        behind = level_file.refusal(data_dir, table.max_level)
        if behind is not None:                     # a rollback: never join in below the cluster
            raise StartupError(f"{build_behind_message(version, table.max_level, behind)} (the data dir "
                               f"{data_dir} holds feature level {behind}); refusing to start")
    if join_now:
        try:
            channels = peer_channels(cfg.tls)
            voters, member = await joining.join(cfg, channels, prepare=True, table=table)
            if not member:
                await joining.learn(cfg, voters, faults=faults)
            joining.save(cfg, (await joining.join(cfg, channels, table=table))[0])
        except joining.JoinRefused as e:
            raise StartupError(str(e)) from None

    signer = NodeSigner(cfg.secret)
    audit_box: list[AuditQueue] = []
    watchers = WatchSlots()                 # the node's bound on concurrent watches, for every service
    # One-time dashboard login codes: minted by Acl.LoginLink, redeemed by the dashboard's login
    # page (both on this loop); their `url` is set once the HTTP port serves.
    login_codes = LoginCodes(ttl_s=cfg.acl.login_link_seconds)
    parts = NodeParts(cfg, clock, faults, version, signer, peer_channels(cfg.tls), watchers, login_codes,
                      lambda entry: audit_box[0].add(entry), KEEPALIVE_MIN_MS, header_sealer(cfg.secret))
    groups = GroupSet({k: build_group(parts, k) for k in booted})
    first = groups.zero
    node, metrics = first.node, first.metrics
    audit_queue = AuditQueue(lambda entry: node.propose(entry, timeout=10.0), clock)
    audit_box.append(audit_queue)
    limiter = RateLimiter(cfg.acl.rate_per_second, cfg.acl.rate_burst) if cfg.acl.enabled else None
    authn = AuthInterceptor(node, clock, signer, enabled=cfg.acl.enabled, queue=audit_queue, limiter=limiter,
                            local_source=node_http.DASHBOARD_SOURCE)

    def wire(g: Group) -> None:
        """What a group needs of the node, whether built at start or placed here later."""
        g.hub.acl_enabled = cfg.acl.enabled
        g.hub.identify = lambda: (info.principal if (info := auth_current()) is not None else None)
        g.hub.acl_node = node                   # tokens live in group 0's table
    for g in groups:
        wire(g)
    calls = GroupCalls(cfg.node_id, lambda k: placement.holders(node, k), signer, clock.now_ms, parts.peer_channels)
    cluster_service = first.servicers["Cluster"]
    assert isinstance(cluster_service, ClusterService)
    scheduler_service = first.servicers["Scheduler"]
    assert isinstance(scheduler_service, SchedulerService)
    keeper = placement.MapKeeper(node, cfg.shards, clock)
    if cfg.shards > 1:
        cluster_service.hosted, cluster_service.calls = groups.nodes, calls
        cluster_service.mover = ShardMover(node, calls, clock, keeper)
        cluster_service.shard_map = lambda: placement.current_map(node)
        scheduler_service.groups, scheduler_service.calls = groups.nodes, calls

    def halted() -> str:
        return next((h for g in groups if (h := g.node.halted)), "")
    server = grpc.aio.server(
        interceptors=[authn, HaltedGate(halted), InflightLimit(cfg.limits.max_inflight_per_connection)],
        options=[("grpc.so_reuseport", 0),
                 ("grpc.max_receive_message_length", max_receive_bytes(cfg.limits)),
                 # workers ping their stream every second to notice a leader that stopped
                 # answering (schedd_worker.runtime KEEPALIVE_MS); gRPC's default would count
                 # pings more often than every 5 minutes as abuse on a stream carrying no data
                 ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_MIN_MS)])
    metrics.count_streams("schedd_watches", "Watch streams this node serves now (--watch, dashboard pages)",
                          lambda: watchers.active)
    if cfg.shards > 1:
        front = ShardFront(cfg.shards, lambda k: g.servicers if (g := groups.get(k)) is not None else None,
                           lambda k, service: RemoteGroup(calls, k, service))
        # a group held elsewhere: its holder authorizes the call against its replica
        authn.groups_of = lambda method, request: [(g.node, part) for k, part in owning_parts(front, method, request)
                                                   if (g := groups.get(k)) is not None]
        mux = shard_routing.worker_mux(front)
        servicers = {name: shard_routing.build(front, name, full, shard_routing.RULES[name], base, mux)
                     for name, (full, base, _) in SERVICES.items()}
    else:
        servicers = first.servicers
        mux = first.hub.mux
    metrics.count_streams("schedd_worker_node_streams", "Workers.ConnectNode streams this node serves now "
                          "(one per worker holding a sub-stream here)", lambda: mux.active)
    for name, (_, _, add) in SERVICES.items():
        add(servicers[name], server)
    if cfg.test_mode:
        testing.add_admin_service(server, clock, node, faults)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(REFLECTED, server)
    port = (server.add_secure_port(cfg.grpc_address, reloader.credentials()) if reloader is not None
            else server.add_insecure_port(cfg.grpc_address))
    if port == 0:
        await _close_groups(groups)
        raise StartupError(f"cannot bind the gRPC address {cfg.grpc_address}")
    # The dashboard's way to the API: a unix socket in the private data dir (the token is the
    # credential there; audit records name the dashboard), else the gRPC address itself.
    dashboard_socket = node_http.local_socket(cfg.data_dir) if cfg.metrics_address else None
    if dashboard_socket is not None:
        dashboard_socket.unlink(missing_ok=True)            # a previous run's
        if server.add_insecure_port(f"unix:{dashboard_socket}") == 0:
            dashboard_socket = None
    await server.start()
    if dashboard_socket is not None:
        dashboard_socket.chmod(0o600)          # like every file of the data dir (connecting needs write)
    for name in ("", LIVENESS_SERVICE, *HEALTH_BY_SERVICE):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set(WRITES_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def writes_health(writable: bool) -> None:
        await health_servicer.set(WRITES_SERVICE, health_pb2.HealthCheckResponse.SERVING if writable
                                  else health_pb2.HealthCheckResponse.NOT_SERVING)
    web: node_http.HttpServer | None = None
    if cfg.metrics_address:          # /metrics and the dashboard (which calls this node's gRPC port)
        try:
            api_channels: Callable[[str], grpc.aio.Channel] = node_http.unix_channel
            if dashboard_socket is not None:
                api_address = f"unix:{dashboard_socket}"
            else:
                api_address, api_channels = node_http.self_address(cfg.grpc_address), peer_channels(cfg.tls)
            registry = metrics.registry if cfg.shards == 1 else \
                by_shard(lambda: {g.shard: g.metrics.registry for g in groups})
            web = await node_http.start(cfg.metrics_address, cfg.tls, registry, api_address, api_channels,
                                        codes=login_codes, grpc_address=cfg.grpc_address)
        except OSError as e:
            await server.stop(grace=None)
            await _close_groups(groups)
            raise StartupError(f"cannot bind metrics_address {cfg.metrics_address}: {e}") from None

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    background: set[asyncio.Task] = set()         # tasks the node fires and forgets (reloads, collections)
    loop.add_signal_handler(signal.SIGHUP, lambda: _reload(cfg, reloader, [g.router for g in groups], background,
                                                           web))
    for g in groups:
        g.start(writes_health if g is first else None)
    audit_task = asyncio.create_task(audit_queue.run())

    async def place(k: int, peers: tuple[Peer, ...]) -> Group:
        placement.seed_membership(cfg, k, peers)
        g = build_group(parts, k, peers)
        wire(g)
        groups.by_shard[k] = g
        g.start()
        return g

    async def drop(g: Group) -> None:
        groups.by_shard.pop(g.shard, None)         # no call reaches it from now on
        g.hub.close_all(f"this node no longer holds shard {g.shard}")
        await g.stop()
        await placement.forget_replica(g)
        freed = asyncio.create_task(_freed(weakref.ref(g.node.state), g.shard))
        background.add(freed)
        freed.add_done_callback(background.discard)
    # Sharded: the groups placed here (schedd.runtime.placement), the cluster's quotas split over
    # the groups (schedd.leader.quota_balance) and leaders spread over the nodes.
    balancers = [asyncio.create_task(QuotaBalancer(groups.nodes, clock, partial(quota_reads.remote_uses, calls)).run()),
                 asyncio.create_task(LeaderBalancer(cfg.node_id, groups.nodes,
                                                    lambda: placement.current_map(node)).run()),
                 asyncio.create_task(placement.Placement(cfg, groups, place, drop, keeper).run())] \
        if cfg.shards > 1 else []
    log.info("node %s serving gRPC on %s (%s), Raft on %s, metrics and dashboard on %s, fsync=%s", cfg.node_id,
             cfg.grpc_address, _describe_tls(reloader), cfg.raft_address,
             web.url if web is not None else "off", cfg.fsync)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        log.info("node %s stopping", cfg.node_id)
        audit_task.cancel()
        for t in balancers:
            t.cancel()
        for name in ("", LIVENESS_SERVICE, WRITES_SERVICE, *HEALTH_BY_SERVICE):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        for g in groups:
            g.hub.close_all("node stopping")
        if web is not None:
            await web.close()
        await server.stop(grace=2.0)
        await _close_groups(groups)
        await calls.close()
        log.info("node %s stopped", cfg.node_id)


