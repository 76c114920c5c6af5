"""Prometheus metrics of one node, in a registry of its own (several nodes may share a process in
tests). Raft and state gauges are read at scrape time, so nothing updates them on the hot path;
the per-job and per-worker series are `job_metrics`' (bounded, computed at the scrape).

No `_created` series: prometheus-client would add one per counter and histogram child (the time
it was made), doubling the series for no question anyone asks of them; they are turned off for
the process before any metric is made."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from schedd.core.results import ApplyResult
from schedd.runtime.job_metrics import JobLabels, RunSeries, SlaMisses, WorkerSeries, audit_pruned, team_of
from schedd.settings import MetricsSettings

disable_created_metrics()

LATENESS_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3,
                    0.5, 1, 1.5, 2, 3, 5, 10, 30, 60)


class Metrics:
    def __init__(self, settings: MetricsSettings | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.job_labels = JobLabels(settings or MetricsSettings())
        self._runs: RunSeries | None = None
        self.fire_lateness = Histogram(
            "schedd_fire_lateness_seconds",
            "Dispatch time minus scheduled time of each fired instant, on the leader's clock",
            buckets=LATENESS_BUCKETS, registry=r)
        self.fire_lead = Histogram(
            "schedd_fire_commit_lead_seconds",
            "How far ahead of its scheduled time an intent was applied on the leader (0: late)",
            buckets=(0, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 5, 10), registry=r)
        self.skipped = Counter("schedd_skipped_total",
                               "Executions the leader recorded SKIPPED (overlap skip, starting deadline)",
                               registry=r)
        self.late_intents = Counter("schedd_late_intents_total",
                                    "Intents applied after their scheduled time (catch-up, overload)",
                                    registry=r)
        self.fired = Counter("schedd_fired_total", "Instants dispatched by this node as leader",
                             ["trigger"], registry=r)
        self.proposals = Counter("schedd_proposals_total", "Raft proposals by kind and outcome",
                                 ["kind", "outcome"], registry=r)
        self.commit_latency = Histogram(
            "schedd_commit_latency_seconds", "Propose to applied-on-this-node latency",
            ["kind"], buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10), registry=r)
        self.attempts_expired = Counter("schedd_attempts_expired_total",
                                        "Attempts the leader gave up on (worker lost, timeout) by outcome",
                                        ["outcome"], registry=r)
        self.requests = Counter("schedd_grpc_requests_total", "gRPC calls by method and code",
                                ["method", "code"], registry=r)
        self._sla_counter = Counter("schedd_sla_missed_total", "SLA misses recorded by this node as "
                                    "leader, by job (bounded: [metrics] job_series_limit)", ["job_name", "team"],
                                    registry=r)
        self.sla_missed = SlaMisses(self._sla_counter, self.job_labels, lambda job: "")
        self.leader_changes = Counter("schedd_leader_changes_total", "Times this node became the leader "
                                      "(summed over the nodes: the cluster's leader changes)", registry=r)

    def watch(self, node, replicas=None, load=None, hub=None) -> None:
        """Expose the node's Raft and state gauges, read at scrape time. `replicas` (a
        ReplicaWatch) adds the per-peer replication gauges from its published rows; `load` (the
        dispatcher's DispatchLoad) the dispatch backlog gauges; the per-job series follow what
        `on_applied` hands over; `hub` (the WorkerHub) adds the worker and pool gauges."""
        self._runs = RunSeries(node, self.job_labels)
        self.sla_missed = SlaMisses(self._sla_counter, self.job_labels, team_of(node))
        self.registry.register(_NodeCollector(node, replicas, load))
        self.registry.register(_Families(self._runs.families))
        if hub is not None:
            self.registry.register(_Families(WorkerSeries(node, hub).families))

    def count_streams(self, name: str, doc: str, count: Any) -> None:
        """A gauge of open long-lived streams, read at scrape time (`count()`): the node's watches
        (every `--watch` and dashboard page), the dashboard's live streams. A count that does not
        fall back when their callers go is a leak."""
        def families() -> Any:
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], count())
            yield g
        self.registry.register(_Families(families))

    def on_applied(self, entry: str, result: ApplyResult) -> None:
        """The apply hook's part (the Raft tick thread): hand the result over, nothing more."""
        if self._runs is not None:
            self._runs.on_applied(entry, result)


def by_shard(registries: Callable[[], Mapping[int, CollectorRegistry]]) -> CollectorRegistry:
    """One registry serving the series of every shard group this node hosts (`registries()` at
    each scrape: a replica a shard move places here or takes away is seen at once) with a
    `shard` label (a sharded node has a registry per group: its Raft, dispatch, lateness and
    per-job series). Families of the same name are merged, so `/metrics` has one HELP and TYPE
    per metric, as Prometheus expects."""
    def families() -> Any:
        merged: dict[str, Metric] = {}
        for k, registry in sorted(registries().items()):
            for fam in registry.collect():
                out = merged.get(fam.name)
                if out is None:
                    out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                out.samples.extend(Sample(s.name, {**s.labels, "shard": str(k)}, s.value, s.timestamp, s.exemplar)
                                   for s in fam.samples)
        yield from merged.values()
    out = CollectorRegistry(auto_describe=False)
    out.register(_Families(families))
    return out


class _Families:
    """A collector of the metric families a function yields at each scrape."""

    def __init__(self, families: Any) -> None:
        self.collect = families


class _NodeCollector:
    def __init__(self, node, replicas=None, load=None) -> None:
        self._node = node
        self._replicas = replicas
        self._load = load

    def collect(self):
        st = self._node.status()
        log_entries, log_bytes = self._node.log_size()
        with self._node.lock:
            jobs, execs, epoch = len(self._node.state.jobs), len(self._node.state.execs), self._node.state.epoch
            young = self._node.state.audit.young_pruned
        pruned = CounterMetricFamily("schedd_audit_records_pruned", "Audit records pruned from the trail "
                                     "(by age or by count) since it began")
        pruned.add_metric([], audit_pruned(self._node))
        yield pruned
        for name, doc, value in (
            ("schedd_raft_term", "Current Raft term", st.term),
            ("schedd_raft_is_leader", "1 if this node believes it leads", int(st.role == "leader")),
            ("schedd_raft_commit_index", "Raft commit index", st.commit_index),
            ("schedd_raft_applied_index", "Last applied log index", st.applied_index),
            ("schedd_raft_apply_lag_entries", "Committed entries this node has not applied yet",
             max(0, st.commit_index - st.applied_index)),
            ("schedd_raft_has_quorum", "1 if connected to a quorum", int(st.has_quorum)),
            ("schedd_raft_log_entries", "Entries of the Raft log since the last snapshot (a restart replays them)",
             log_entries),
            ("schedd_raft_log_bytes", "Bytes of the Raft log since the last snapshot; [raft] compaction_bytes "
             "bounds it", log_bytes),
            ("schedd_leader_epoch", "Highest leader term recorded in the state", epoch),
            ("schedd_jobs", "Registered jobs", jobs),
            ("schedd_executions", "Executions kept in history", execs),
            ("schedd_audit_pruned_young_records", "Audit records pruned by count (max_records) while "
             "younger than the trail's max_age: the trail keeps less history than configured", young),
        ):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            yield g
        yield from _tick_gauges(self._node.repair_stats)
        yield from _tick_holds(getattr(self._node.repair_stats, "tick_holds", None))
        if self._load is not None:
            for name, doc, value in (
                ("schedd_dispatch_backlog", "Runs past due waiting for a claim (the leader's; 0 on a follower)",
                 self._load.backlog),
                ("schedd_dispatch_lag_seconds", "How long ago the oldest run waiting for a claim was due "
                 "(the leader's; 0 on a follower)", self._load.lag_ms / 1000),
            ):
                g = GaugeMetricFamily(name, doc)
                g.add_metric([], value)
                yield g
        if self._replicas is not None:
            yield from _replica_gauges(self._replicas.rows)


def _tick_gauges(stats):
    """The Raft tick thread's health (raft_patches.RepairStats; absent on stock pysyncobj): how
    long it went without running, and the pre-vote rounds its election timer started."""
    if stats is None:
        return
    for name, doc, value in (
        ("schedd_raft_max_tick_gap_seconds", "Longest time between two Raft ticks since start "
         "(a stall past the election timeout is what makes a follower stand)", stats.max_tick_gap),
        ("schedd_raft_long_tick_gaps", "Raft ticks that began over half the minimum election "
         "timeout after the previous one", stats.long_tick_gaps),
        ("schedd_raft_pre_votes", "Pre-vote rounds this node started (its election timer expired)",
         stats.pre_votes),
        ("schedd_raft_apply_lock_yields", "Ticks that left committed entries for the next one "
         "because the node lock stayed busy (apply never waits past a heartbeat period for it)",
         stats.apply_lock_yields),
        ("schedd_raft_acked_entries_lost", "Times this leader found a follower without entries it had "
         "acknowledged (a lost disk, or wiped and restarted) and repaired it from its log's end",
         stats.acked_lost),
    ):
        g = GaugeMetricFamily(name, doc)
        g.add_metric([], value)
        yield g


def _tick_holds(holds):
    """raft_patches.TickHolds as two histograms labelled by part: what each tick held the tick
    thread (held, cpu, messages, apply, fdatasync, sending, gc, ...), and the largest of each."""
    if holds is None:
        return
    hist = HistogramMetricFamily(
        "schedd_raft_tick_seconds", "How long each Raft tick held the tick thread (part=held: its "
        "wall time less the poll's wait for a message), the CPU the thread got over the tick "
        "(part=cpu), and each part's time in the ticks that had it", labels=["part"])
    top = GaugeMetricFamily("schedd_raft_tick_max_seconds", "The longest of each part of "
                            "schedd_raft_tick_seconds since start", labels=["part"])
    for part, counts in sorted(holds.counts.items()):
        cumulative, buckets = 0, []
        for bound, n in zip(holds.bounds, counts):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        hist.add_metric([part], buckets, holds.sums[part])
        top.add_metric([part], holds.maxes[part])
    yield hist
    yield top


def _replica_gauges(rows):
    """On the leader, one series per peer; on a follower, one for itself (see convergence.py)."""
    lag = GaugeMetricFamily("schedd_replica_lag_entries",
                            "Entries a replica is behind: the leader's last log index minus the peer's "
                            "matchIndex (on a follower: the leader's commit index minus its own)",
                            labels=["peer"])
    stuck = GaugeMetricFamily("schedd_replica_stuck",
                              "1 if the replica is behind and its matchIndex has not moved for "
                              "[raft] replica_stuck_ms", labels=["peer"])
    for row in rows:
        lag.add_metric([row.peer], row.lag)
        stuck.add_metric([row.peer], int(row.stuck))
    yield lag
    yield stuck
