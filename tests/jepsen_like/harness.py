"""One run of the fault suite: a 3-node cluster dialing through per-link proxies, 2 workers, the
effect sink, a client workload and a nemesis; every process records a history; the checker reads
it afterwards (checker.py is pure: history in, anomalies out).

Layout of a run folder (tests/jepsen_like/store/<scenario>-<seed>-<stamp>/):
    meta.json           scenario, seed, jobs, tuning, the fault window
    history/*.jsonl     one file per process (harness, sink, n1..n3, worker-w1, worker-w2)
    cluster/            configs, data and logs of the nodes and workers
    results.json, summary.txt, timeline.png
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc

from schedd.api.shard_routing import SHARD_HEADER
from schedd.core.shards import SHARED_PORT, routing_key, shard_of, shard_raft_address
from schedd.ports.fakes import wait_until
from schedd.runtime.cluster import LocalCluster, restartable_ports
from schedd.testing.hooks import Recorder
from schedd_proto import dags_pb2_grpc as dpb_grpc
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_proto import testing_pb2 as tpb
from schedd_proto import testing_pb2_grpc as tpb_grpc
from schedd_client import job_spec
from schedd_client.dags import dag_from_dict

from .netns import NetnsNet
from .proxy import ProxyNet
from .sink import EffectSink

STORE = Path(__file__).resolve().parent / "store"
LEASE_MS = 3000
RAFT = {"heartbeat_ms": 20, "tick_ms": 10, "election_timeout_ms": [600, 1200], "leader_fallback_ms": 2500,
        "compaction_entries": 20000}
NON_TERMINAL = ("SCHEDULED", "RUNNING", "RETRY_WAIT")


class JLCluster(LocalCluster):
    """A LocalCluster in test mode with a per-node environment (history, dialing, unsafe)."""

    node_env: dict = None

    def _write_config(self, node) -> None:
        super()._write_config(node)
        text = node.config.read_text()
        node.config.write_text("test_mode = true\n" + text)

    def start_node(self, nid: str):
        saved = self.env
        self.env = {**saved, **(self.node_env or {}).get(nid, {})}
        try:
            return super().start_node(nid)
        finally:
            self.env = saved


class SmallDisk:
    """A size-limited tmpfs over one node's data dir, mounted in a private mount namespace held
    by a small process (`unshare -m`; needs root). The node runs inside it (nsenter); the harness
    reaches its files through /proc/<holder>/root. The tmpfs lives as long as the holder: closing
    its stdin (or the harness dying) ends it, and with it the mount. Nothing is mounted outside."""

    def __init__(self, directory: Path, size: str) -> None:
        import subprocess
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount -t tmpfs -o size="$1" tmpfs "$0" && echo ready && read _ ; exit 0', str(directory), size],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        line = self.proc.stdout.readline().decode(errors="replace").strip()
        if line != "ready":
            self.close()
            raise RuntimeError(f"cannot mount a tmpfs in a mount namespace here: {line!r}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def path(self) -> Path:
        """The node's data dir as the harness sees it (inside the namespace)."""
        return Path(f"/proc/{self.proc.pid}/root") / str(self.dir).lstrip("/")

    def usable(self) -> bool:
        import shutil
        return shutil.disk_usage(self.path()).total < 1 << 30

    def close(self) -> None:
        import subprocess
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@dataclass
class Job:
    name: str
    period_s: int = 0               # 0: on demand
    hold_s: float = 0.0             # handler duration (the sink holds the request)
    delivery: str = ""
    overlap: str = ""
    churn: bool = False


WORKLOAD = [
    Job("every1", 1), Job("every2", 2), Job("long", 2, hold_s=2.5), Job("once", 3, delivery="at_most_once"),
    Job("ondemand", 0, hold_s=0.2),
    Job("skipper", 1, hold_s=2.5, overlap="skip"), Job("queuer", 2, hold_s=2.2, overlap="queue"),
]



def job_in_shard(j: Job, shard: int, shards: int) -> Job:
    """`j` renamed `<name>-<i>` with the first i whose name the cluster routes to `shard`."""
    for i in range(10_000):
        name = f"{j.name}-{i}"
        if shard_of(routing_key(name), shards) == shard:
            return replace(j, name=name)
    raise ValueError(f"no name for {j.name} in shard {shard} of {shards}")


def sharded_workload(shards: int) -> list[Job]:
    """The workload spread over every shard: each shard gets an every-second job (so each group's
    log moves on: C10 per shard), an every-2-s one and an at-most-once one, and one of the long,
    overlap-skip, overlap-queue jobs in turn (few enough for 2 workers of 4 slots). "ondemand"
    keeps its name (the client triggers it); churn jobs and the DAG land wherever they hash."""
    every1, every2, long_, once, ondemand, skipper, queuer = WORKLOAD
    jobs = [job_in_shard(j, k, shards) for k in range(shards) for j in (every1, every2, once)]
    jobs += [job_in_shard(j, k % shards, shards) for k, j in enumerate((long_, skipper, queuer), start=1)]
    return jobs + [ondemand]


# A small scheduled DAG (C8): a -> b -> c every few seconds, each task's handler calls the sink
# (job "chain:<task>", scheduled time = the run's logical time).
@dataclass
class Dag:
    name: str
    period_s: int
    tasks: list                     # [(task, [upstream...], hold_s)]


DAGS = [Dag("chain", 3, [("a", [], 0.2), ("b", ["a"], 0.2), ("c", ["b"], 0.2)])]


@dataclass
class Harness:
    scenario: str
    seed: int
    out: Path
    unsafe: tuple = ()
    lease_ms: int = LEASE_MS
    jobs: list = field(default_factory=lambda: list(WORKLOAD))
    dags: list = field(default_factory=lambda: list(DAGS))
    client_ops: bool = True
    raft: dict = field(default_factory=dict)       # overrides of RAFT for this run
    failpoints: bool = False                       # S03: SCHEDD_FAILPOINT_DIR for nodes and workers
    worker_proxies: bool = False                   # S08: workers dial the nodes through proxies
    small_disks: dict = field(default_factory=dict)  # S12: node id -> tmpfs size ("48m") for its data dir
    netns: bool = False                            # S13+: every node, and the workers, in its own netns
    churn_cap: int = 0                             # live churn jobs at most (0: no bound; the soak bounds it)
    history_limit: int = 0                         # per job (0: the default; the soak keeps less)
    shards: int = 1                                # shard groups (`shards = S`): every check per group

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.hist = self.out / "history"
        self.hist.mkdir(parents=True, exist_ok=True)
        self.rec = Recorder(str(self.hist / "harness.jsonl"), "harness")
        self.rng = random.Random(self.seed)
        self.sink = None
        self.net = None
        self.nsnet: NetnsNet | None = None
        self.c: JLCluster | None = None
        self._stop_client = threading.Event()
        self._client_thread = None
        self.stopped: set[str] = set()            # SIGSTOPped processes ("n1", "w:w1")
        self.offsets: dict[str, int] = {}
        self.faults = 0
        self.meta: dict = {}
        self.meta_notes: dict = {}
        self._churn = 0
        self.paused_jobs: set[str] = set()        # held by the client: their executions wait
        self.stuck = 0                            # convergence checks after a heal that failed
        self.led: dict[str, list[int]] = {}       # sharded: the shards each node led when last looked at

    # ------------------------------------------------------------ start / stop

    def start(self) -> None:
        env_test = {"SCHEDD_TEST_MODE": "1", "SCHEDD_HISTORY_DIR": str(self.hist)}
        self.fpdir = self.out / "failpoints"
        if self.failpoints:
            self.fpdir.mkdir(parents=True, exist_ok=True)
            env_test["SCHEDD_FAILPOINT_DIR"] = str(self.fpdir)
        hosts, wrap, base = {}, {}, 0
        if self.netns:                  # own namespaces: any ports, the same on every member
            self.nsnet = NetnsNet(["n1", "n2", "n3", "w"])
            hosts = {n: self.nsnet.addr(n) for n in ("n1", "n2", "n3")}
            wrap = {**{n: self.nsnet.exec_prefix(n) for n in hosts},
                    **{f"worker:{w}": self.nsnet.exec_prefix("w") for w in ("w1", "w2")}}
            base = 7100
        self.sink = EffectSink(Recorder(str(self.hist / "sink.jsonl"), "sink"),
                               host=self.nsnet.host if self.nsnet else "127.0.0.1")
        if self.netns and self.shards > 1:
            raise ValueError("sharded runs use the proxies, not network namespaces")
        self.c = JLCluster(self.out / "cluster", size=3, raft={**RAFT, **self.raft},
                           scheduler={"lease_ms": self.lease_ms}, env=env_test,
                           base_port=base or restartable_ports(LocalCluster.ports_needed(3, self.shards)),
                           hosts=hosts, wrap=wrap, shards=self.shards,
                           worker_http_allow=("127.0.0.1",))   # the effect sink is on loopback
        self.net = ProxyNet()
        dial: dict[str, dict] = {n: {} for n in self.c.nodes}
        ids = [] if self.netns else list(self.c.nodes)       # in namespaces, nodes dial each other
        for i, x in enumerate(ids):
            for y in ids[i + 1:]:
                for k in range(self.shards):        # every group's link (one for all on the shared Raft port)
                    rx, ry = (shard_raft_address(self.c.nodes[n].raft, k, self.c.raft_ports or SHARED_PORT)
                              for n in (x, y))
                    a, b = (x, y) if rx > ry else (y, x)     # pysyncobj: larger address dials
                    target = rx if b == x else ry
                    if target in dial[a]:
                        continue                             # the pair's one link carries every group
                    link = self.net.add_link(a, b, target, shard=k)
                    dial[a][target] = f"127.0.0.1:{link.port}"
        self.worker_dial: dict[str, dict] = {}
        if self.worker_proxies:                     # one proxy per (worker, node) link: "w:w1" dials n1
            for w in ("w1", "w2"):
                self.worker_dial[w] = {p.grpc: f"127.0.0.1:{self.net.add_link(f'w:{w}', n, p.grpc).port}"
                                       for n, p in self.c.nodes.items()}
        self.disks: dict[str, SmallDisk] = {}
        for nid, size in self.small_disks.items():
            try:
                self.disks[nid] = SmallDisk(self.c.root / nid, size)
            except (OSError, RuntimeError) as e:       # not root, no unshare, mounts refused
                self.meta_notes["small_disk_unavailable"] = repr(e)
                self.rec("small_disk_unavailable", node=nid, error=repr(e))
        for nid, d in self.disks.items():        # the node runs inside the holder's mount namespace
            self.c.wrap[nid] = ["nsenter", "-t", str(d.pid), "-m", "--"]
        self.c.node_env = {n: {**({"SCHEDD_RAFT_DIAL": json.dumps(d)} if d else {}),
                               **({"SCHEDD_UNSAFE": ",".join(self.unsafe)} if self.unsafe else {})}
                           for n, d in dial.items()}
        self.meta = {"scenario": self.scenario, "seed": self.seed, "unsafe": list(self.unsafe), "shards": self.shards,
                     "lease_ms": self.lease_ms, "raft": {**RAFT, **self.raft}, "started": time.time(),
                     "nodes": {n: {"raft": p.raft, "grpc": p.grpc} for n, p in self.c.nodes.items()},
                     "jobs": [vars(j) for j in self.jobs], "dags": [vars(d) for d in self.dags],
                     "workers": ["w1", "w2"], **self.meta_notes,
                     "netns": {"tag": self.nsnet.tag, "subnet": f"10.77.{self.nsnet.net}.0/24"} if self.nsnet else None,
                     "small_disks": {n: {"size": self.small_disks[n], "holder_pid": d.pid} for n, d in self.disks.items()}}
        self.rec("run_start", scenario=self.scenario, seed=self.seed, unsafe=list(self.unsafe))
        self.c.start()
        self.c.wait_leader(timeout=60)
        for w in ("w1", "w2"):
            self.c.start_worker(w, slots=4, drain_grace_s=2, extra_env=self.worker_env(w))
        wait_until(lambda: len(self.connected_workers()) == 2, timeout=60, what="workers to connect")
        for j in self.jobs:
            self.put_job(j)
        for d in self.dags:
            self.put_dag(d)

    def stop(self) -> None:
        self._stop_client.set()
        if self._client_thread is not None:
            self._client_thread.join(timeout=30)
        try:
            if self.c is not None:
                self.c.stop(timeout=15)
        finally:
            if self.net is not None:
                self.net.close()
            for d in getattr(self, "disks", {}).values():
                d.close()
            if self.sink is not None:
                self.sink.close()
            if self.nsnet is not None:          # after every process inside has been stopped
                self.nsnet.close()
            self.meta["ended"] = time.time()
            (self.out / "meta.json").write_text(json.dumps(self.meta, indent=1))

    def worker_env(self, w: str) -> dict:
        env = {"SCHEDD_HISTORY_DIR": str(self.hist)}
        if self.worker_dial.get(w):
            env["SCHEDD_WORKER_DIAL"] = json.dumps(self.worker_dial[w])
        return env

    # ------------------------------------------------------------ observation

    def stub(self, nid: str):
        ch = self.c.channel(nid)
        return ch, pb_grpc.SchedulerStub(ch), pb_grpc.ClusterStub(ch)

    def connected_workers(self) -> list[str]:
        lead = self.c.leader()
        if lead is None:
            return []
        with self.c.channel(lead) as ch:
            r = pb_grpc.WorkersStub(ch).ListWorkers(pb.ListWorkersRequest(), timeout=3)
            return [w.name for w in r.workers]

    def leader(self) -> str | None:
        return self.c.leader()

    # ------------------------------------------------------------ shard groups (shards > 1)

    def shard_info(self, nid: str, shard: int, timeout: float = 2.0, with_digest: bool = False,
                   digest_at: int = 0) -> pb.NodeStatus | None:
        """Node `nid`'s replica of group `shard` (NodeInfo answers for the group named in
        x-schedd-shard); an unsharded cluster's one group is the node's."""
        if self.shards == 1:
            return self.c.node_info(nid, timeout=timeout, with_digest=with_digest, digest_at=digest_at)
        with self.c.channel(nid) as ch:
            try:
                return pb_grpc.ClusterStub(ch).NodeInfo(
                    pb.NodeInfoRequest(with_digest=with_digest, digest_at=digest_at), timeout=timeout,
                    metadata=((SHARD_HEADER, str(shard)),))
            except grpc.RpcError:
                return None

    def shard_leaders(self) -> dict[int, str]:
        """shard -> the node leading it: per shard, the highest-term replica that says it leads
        (an isolated old leader still says so until it falls back; the new one has a higher
        term). Shards without a leader are missing."""
        best: dict[int, tuple[int, str]] = {}
        for nid, node in self.c.nodes.items():
            if not node.alive() or f"n:{nid}" in self.stopped:
                continue
            with self.c.channel(nid) as ch:
                try:
                    items = pb_grpc.ClusterStub(ch).ListShards(pb.ListShardsRequest(), timeout=1.5).items
                except grpc.RpcError:
                    continue
            for it in items:
                if it.leader_id == nid and (it.shard not in best or it.term > best[it.shard][0]):
                    best[it.shard] = (it.term, nid)
        return {k: v[1] for k, v in best.items()}

    def wait_shard_leaders(self, timeout: float = 30.0, exclude: str | None = None) -> dict[int, str]:
        """Until every shard has a leader (other than `exclude`); shard -> leader."""
        seen: dict[int, str] = {}

        def every():
            nonlocal seen
            seen = self.shard_leaders()
            return len(seen) == self.shards and exclude not in seen.values()
        try:
            wait_until(every, timeout=timeout, interval=0.1, what="every shard to have a leader")
        except TimeoutError:
            raise TimeoutError(f"not every shard has a leader{f' other than {exclude}' if exclude else ''} "
                               f"within {timeout:g} s (seen {seen})") from None
        return seen

    def top_leader(self, timeout: float = 30.0) -> str:
        """The node that leads the most shards (the lowest id among equals), once every shard has
        a leader: killing or isolating it fails several groups over at once."""
        seen = self.wait_shard_leaders(timeout)
        self.led = {n: sorted(k for k, v in seen.items() if v == n) for n in self.c.nodes}
        return max(sorted(self.led), key=lambda n: len(self.led[n]))

    def _led_by(self, nid: str) -> dict:
        return {"led_shards": self.led.get(nid, [])} if self.shards > 1 else {}

    def node_infos(self) -> dict:
        """Each node's applied index and the digest of its state there ("hash": what the checker's
        C7 compares; the state digest, not the log hash: equal logs are not enough, the states
        must be equal), with the log hash beside it for the report. Sharded: the same per shard
        group, {shard: {node: ...}}."""
        if self.shards > 1:
            return {k: self._node_infos(k) for k in range(self.shards)}
        return self._node_infos(0)

    def _node_infos(self, shard: int) -> dict:
        out = {}
        for nid in self.c.nodes:
            info = self.shard_info(nid, shard, timeout=2, with_digest=True) if self.c.nodes[nid].alive() else None
            out[nid] = None if info is None else {"applied": info.digest_index, "hash": info.state_digest,
                                                  "log_hash": info.state_hash, "term": info.term,
                                                  "role": info.role, "history": info.history_digest,
                                                  "history_rows": info.history_rows,
                                                  "history_index": info.history_index,
                                                  "history_gap": info.history_gap}
        return out

    # ------------------------------------------------------------ client operations

    def _call(self, op: str, method: str, request, *, timeout: float = 12.0, stub=pb_grpc.SchedulerStub, **fields):
        """One client operation with invoke / ok / fail / info records. UNAVAILABLE and deadline
        errors are retried with the same request id (indeterminate until then)."""
        self.rec("invoke", op=op, **fields)
        deadline = time.monotonic() + timeout
        order = list(self.c.nodes)
        lead = None
        try:
            lead = self.c.leader()
        except Exception:  # noqa: BLE001
            pass
        if lead:
            order.remove(lead)
            order.insert(0, lead)
        i = 0
        last = None
        while time.monotonic() < deadline:
            nid = order[i % len(order)]
            i += 1
            if not self.c.nodes[nid].alive() or f"n:{nid}" in self.stopped:
                time.sleep(0.05)
                continue
            with self.c.channel(nid) as ch:
                try:
                    resp = getattr(stub(ch), method)(
                        request, timeout=max(0.5, min(4.0, deadline - time.monotonic())))
                except grpc.RpcError as e:
                    last = e
                    if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                    grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN):
                        time.sleep(0.1)
                        continue
                    self.rec("fail", op=op, code=e.code().name, msg=e.details(), **fields)
                    return None
            extra = {}
            if op == "trigger":
                extra = {"execution": resp.id, "scheduled_ms": resp.scheduled_ms}
            self.rec("ok", op=op, **fields, **extra)
            return resp
        self.rec("info", op=op, why=repr(last.code().name if last else "timeout"), **fields)
        return None

    def spec(self, j: Job, paused: bool = False) -> pb.JobSpec:
        return job_spec(j.name, schedule=f"@every {j.period_s}s" if j.period_s else "",
                        http_url=self.sink.url(j.hold_s), timeout=10, delivery=j.delivery, overlap=j.overlap,
                        retry=pb.RetryPolicy(max_attempts=3, initial_backoff_seconds=1), paused=paused,
                        history_limit=self.history_limit)

    def put_job(self, j: Job, rid: str | None = None):
        rid = rid or uuid.uuid4().hex
        return self._call("put", "PutJob", pb.PutJobRequest(job=self.spec(j), request_id=rid), rid=rid,
                          job=j.name, period_s=j.period_s, delivery=j.delivery, overlap=j.overlap)

    def put_dag(self, d: Dag, rid: str | None = None):
        rid = rid or uuid.uuid4().hex
        doc = {"name": d.name, "schedule": f"@every {d.period_s}s",
               "tasks": [{"name": t, "upstream": up, "http": {"url": self.sink.url(hold)}, "timeout": 10,
                          "retry": {"max_attempts": 3, "initial_backoff": 1}} for t, up, hold in d.tasks]}
        req = dag_from_dict(doc)
        from schedd_proto import dags_pb2 as dpb
        return self._call("put_dag", "PutDag", dpb.PutDagRequest(dag=req, request_id=rid), stub=dpb_grpc.DagsStub,
                          rid=rid, dag=d.name, period_s=d.period_s)

    def delete_dag(self, name: str, rid: str | None = None):
        from schedd_proto import dags_pb2 as dpb
        rid = rid or uuid.uuid4().hex
        return self._call("delete_dag", "DeleteDag", dpb.DagRef(name=name, request_id=rid), stub=dpb_grpc.DagsStub,
                          rid=rid, dag=name)

    def simple(self, op: str, name: str, rid: str | None = None):
        rid = rid or uuid.uuid4().hex
        method = {"pause": "PauseJob", "resume": "ResumeJob", "delete": "DeleteJob"}[op]
        return self._call(op, method, pb.JobRef(name=name, request_id=rid), rid=rid, job=name)

    def trigger(self, name: str, rid: str | None = None):
        rid = rid or uuid.uuid4().hex
        return self._call("trigger", "TriggerJob", pb.TriggerJobRequest(name=name, request_id=rid),
                          rid=rid, job=name)

    def start_client(self) -> None:
        if not self.client_ops:
            return
        self._client_thread = threading.Thread(target=self._client_loop, name="client", daemon=True)
        self._client_thread.start()

    def _client_loop(self) -> None:
        rng = random.Random(self.seed * 7 + 1)
        churn: list[str] = []
        paused: set[str] = set()
        while not self._stop_client.wait(0.6 + rng.random() * 0.6):
            r = rng.random()
            try:
                if r < 0.4:
                    rid = uuid.uuid4().hex
                    if self.trigger("ondemand", rid) is not None and rng.random() < 0.5:
                        self.trigger("ondemand", rid)            # a retry with the same request id
                elif (r < 0.55 or not churn) and not (self.churn_cap and len(churn) >= self.churn_cap):
                    self._churn += 1
                    j = Job(f"churn{self._churn}", 1, churn=True)
                    self.meta.setdefault("churn", []).append(vars(j))
                    if self.put_job(j) is not None:
                        churn.append(j.name)
                elif r < 0.75:
                    name = rng.choice(churn)
                    if name in paused:
                        if self.simple("resume", name) is not None:
                            paused.discard(name)
                            self.paused_jobs.discard(name)
                    else:
                        self.paused_jobs.add(name)        # before the call: its outcome may be unknown
                        if self.simple("pause", name) is not None:
                            paused.add(name)
                elif (r < 0.85 or (self.churn_cap and len(churn) >= self.churn_cap)) and len(churn) > 1:
                    name = churn.pop(0)
                    self.simple("delete", name)
                    paused.discard(name)
            except Exception as e:  # noqa: BLE001 - the workload never dies
                self.rec("client_error", error=repr(e))

    # ------------------------------------------------------------ faults (the nemesis calls these)

    def fault(self, kind: str, phase: str, **fields) -> None:
        if phase == "start":
            self.faults += 1
        self.rec("nemesis", fault=kind, phase=phase, **fields)

    def kill_node(self, nid: str) -> None:
        self.fault("kill", "start", node=nid, **self._led_by(nid))
        self.c.kill_node(nid)

    def restart_node(self, nid: str) -> None:
        if self.offsets.get(nid):
            self.offsets[nid] = 0                  # the offset lived in the killed process
            self.fault("clock", "stop", node=nid, offset_ms=0, why="restarted")
        self.c.start_node(nid)
        self.stopped.discard(f"n:{nid}")
        self.fault("kill", "stop", node=nid)

    def pause_node(self, nid: str) -> None:
        self.fault("pause", "start", node=nid)
        self.c.signal_node(nid, signal.SIGSTOP)
        self.stopped.add(f"n:{nid}")

    def resume_node(self, nid: str) -> None:
        self.c.signal_node(nid, signal.SIGCONT)
        self.stopped.discard(f"n:{nid}")
        self.fault("pause", "stop", node=nid)

    def pause_worker(self, w: str) -> None:
        self.fault("pause_worker", "start", worker=w)
        self.c.signal_worker(w, signal.SIGSTOP)
        self.stopped.add(f"w:{w}")

    def resume_worker(self, w: str) -> None:
        self.c.signal_worker(w, signal.SIGCONT)
        self.stopped.discard(f"w:{w}")
        self.fault("pause_worker", "stop", worker=w)

    def kill_worker(self, w: str) -> None:
        self.fault("kill_worker", "start", worker=w)
        self.c.signal_worker(w, signal.SIGKILL)
        self.c.workers[w].proc.wait(timeout=30)

    def restart_worker(self, w: str) -> None:
        self.c.start_worker(w, slots=4, drain_grace_s=2, extra_env=self.worker_env(w))
        self.fault("kill_worker", "stop", worker=w)

    def isolate(self, nid: str, how: str = "both") -> None:
        """Cut every link of `nid` (both ways), or hold what it sends (out) or receives (in). In
        namespaces: iptables DROP of its peers inside its namespace (connections stay open)."""
        self.fault("partition", "start", node=nid, how=how, via="netns" if self.nsnet else "proxy",
                   **self._led_by(nid))
        if self.nsnet is not None:
            self.nsnet.block(nid, [n for n in self.c.nodes if n != nid], how)
            return
        for other in self.c.nodes:
            if other == nid:
                continue
            if how == "both":
                self.net.cut(nid, other)
            elif how == "out":
                self.net.stall(nid, other)
            else:
                self.net.stall(other, nid)

    def cut_links(self, pairs, kind: str = "partition", **fields) -> None:
        self.fault(kind, "start", links=[list(p) for p in pairs], **fields)
        for a, b in pairs:
            if self.nsnet is not None:
                self.nsnet.block(a, [b], "both")
            else:
                self.net.cut(a, b)

    def delay_links(self, ms: int) -> None:
        if self.nsnet is not None:
            raise RuntimeError("no link delay in namespaces (tc netem is not in this kernel)")
        self.fault("delay", "start", ms=ms)
        for link in self.net.links.values():
            if link.a in self.c.nodes and link.b in self.c.nodes:      # Raft links only
                self.net.delay(link.a, link.b, ms)

    def partition_worker(self, w: str, how: str = "both") -> None:
        """Cut worker `w` off every node (both ways), or hold what it sends (out) / receives (in).
        Its handlers still reach the sink: a partitioned worker's effects are real."""
        self.fault("worker_partition", "start", worker=w, how=how)
        for n in self.c.nodes:
            if how == "both":
                self.net.cut(f"w:{w}", n)
            elif how == "out":
                self.net.stall(f"w:{w}", n)
            else:
                self.net.stall(n, f"w:{w}")

    def heal_worker(self, w: str) -> None:
        for n in self.c.nodes:
            self.net.heal(f"w:{w}", n)
        self.fault("worker_partition", "stop", worker=w)

    def heal_net(self, kind: str = "partition") -> None:
        self.net.heal()
        if self.nsnet is not None:
            self.nsnet.heal()
        self.fault(kind, "stop")

    def converge(self, deadline_s: float = 20.0, what: str = "heal") -> dict:
        """Right after a heal: within `deadline_s`, every replica must catch up to the commit
        index the cluster had at the heal and hold the same state: equal state digests at an
        equal applied index. The workload keeps running, so replicas rarely sit at one index
        when sampled: once all have caught up, each is asked for its digest right after a
        future entry X (taken once by apply under the node lock,
        schedd.replication.node.DigestPoints); only a quiet log (nothing applied for 2 s) is
        compared at the index all sit at. A digest costs O(state) with apply blocked, so none is
        asked for while replicas catch up. Records `converge` (the checker's C7 judges it)."""
        from concurrent.futures import ThreadPoolExecutor
        t0, heal_ts = time.monotonic(), time.time()
        ids = list(self.c.nodes)
        at, quiet_since, last_applied = 0, None, None

        def info(nid, with_digest=False):
            if not self.c.nodes[nid].alive() or f"n:{nid}" in self.stopped:
                return None
            return self.c.node_info(nid, timeout=3, with_digest=with_digest, digest_at=at)
        with ThreadPoolExecutor(len(ids)) as pool:
            first = dict(zip(ids, pool.map(lambda n: self.c.node_info(n, timeout=2), ids)))
            target = max((i.commit_index for i in first.values() if i is not None), default=0)
            out = {"what": what, "heal_ts": heal_ts, "deadline_s": deadline_s, "target": target, "ok": False,
                   "diverged": False, "seconds": None, "samples": 0, "caught_up_s": None}
            infos: dict = {}
            while True:
                quiet = quiet_since is not None and time.monotonic() - quiet_since > 2.0
                infos = dict(zip(ids, pool.map(lambda n: info(n, quiet), ids)))
                out["samples"] += 1
                live = [i for i in infos.values() if i is not None]
                applied = tuple(i.applied_index for i in live)
                if applied != last_applied:
                    last_applied, quiet_since = applied, time.monotonic()
                if len(live) == len(ids) and all(i.applied_index >= target for i in live):
                    if out["caught_up_s"] is None:
                        out["caught_up_s"] = round(time.monotonic() - t0, 2)
                    digests, index = self._comparable_digests(live, at, quiet)
                    if digests is not None:
                        out["ok"] = len(digests) == 1
                        out["diverged"] = not out["ok"]
                        out["compared_at"] = index
                        break
                    missed = at and any(i.applied_index >= at and not i.at_digest for i in live)
                    if not at or missed:   # ask every node for its digest some entries ahead
                        at = max(i.applied_index for i in live) + 20
                if time.monotonic() - t0 > deadline_s:
                    break
                time.sleep(0.1 + 0.1 * self.rng.random())
        out["seconds"] = round(time.monotonic() - t0, 2) if out["ok"] else None
        out["nodes"] = {n: None if i is None else {
            "applied": i.applied_index, "commit": i.commit_index, "role": i.role, "term": i.term,
            "digest_index": i.digest_index, "digest": i.state_digest[:16], "at_digest": i.at_digest[:16]}
            for n, i in infos.items()}
        self.rec("converge", **out)
        self.stuck += not out["ok"]
        return out

    @staticmethod
    def _comparable_digests(live: list, at: int, quiet: bool) -> tuple[set | None, int]:
        """(the digests to compare, the index they were taken at), or (None, 0) while there is
        no index they were all taken at."""
        if at and all(i.at_digest for i in live):
            return {i.at_digest for i in live}, at
        if quiet and all(i.state_digest for i in live) and len({i.digest_index for i in live}) == 1:
            return {i.state_digest for i in live}, live[0].digest_index
        return None, 0

    def corrupt_journal(self, nid: str, how: str, rng) -> dict:
        """With `nid` down: damage its Raft journal (truncate the tail, or flip bits inside)."""
        path = self.node_dir(nid) / "raft.journal"
        data = bytearray(path.read_bytes())
        size = len(data)
        if how == "truncate":
            cut = rng.randrange(1, max(2, min(size // 4, 4096)))
            data = data[:size - cut]
            detail = {"cut_bytes": cut}
        else:
            lo = min(size - 1, 64)
            at = sorted(rng.randrange(lo, size) for _ in range(3))
            for i in at:
                data[i] ^= 1 << rng.randrange(8)
            detail = {"flipped_at": at}
        path.write_bytes(bytes(data))
        self.fault("disk", "start", node=nid, how=how, size=size, **detail)
        return detail

    def start_or_rebuild(self, nid: str, timeout: float = 20.0) -> str:
        """Start a node after disk damage. It must either come up (and then agree with its peers,
        which C2/C7 check) or refuse to start; refused, it is wiped and rebuilt from its peers."""
        import shutil
        self.c.start_node(nid)

        def outcome():
            node = self.c.nodes[nid]
            if not node.alive():
                return "refused"
            info = self.c.node_info(nid, timeout=1)
            return "up" if info is not None and info.applied_index > 0 else None
        try:
            result = wait_until(outcome, timeout=timeout, interval=0.2, what=f"{nid} to start or refuse")
        except TimeoutError:
            result = "hung"
        if result != "up":
            code = self.c.nodes[nid].proc.poll()
            self.c.kill_node(nid)
            d = self.node_dir(nid)
            for p in list(d.iterdir()) if d.exists() else []:     # (a tmpfs mount point itself stays)
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
            self.c.start_node(nid)
            self.rec("disk_rebuild", node=nid, outcome=result, exit_code=code)
        self.fault("disk", "stop", node=nid, outcome=result)
        return result

    def node_dir(self, nid: str) -> Path:
        d = getattr(self, "disks", {}).get(nid)
        return d.path() if d is not None else self.c.root / nid

    def fill_disk(self, nid: str) -> int:
        """Fill the (small) filesystem of `nid`'s data dir until ENOSPC; returns the bytes written."""
        import errno
        path = self.node_dir(nid) / "filler"
        written = 0
        chunk = b"\0" * (256 * 1024)
        with open(path, "wb", buffering=0) as f:
            while True:
                try:
                    written += f.write(chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        while True:                    # and the last few bytes
            try:
                with open(path, "ab", buffering=0) as f:
                    n = f.write(b"\0" * 512)
                    written += n
                    if not n:
                        break
            except OSError:
                break
        self.fault("disk", "start", node=nid, how="full", filled_bytes=written)
        return written

    def free_disk(self, nid: str) -> None:
        (self.node_dir(nid) / "filler").unlink(missing_ok=True)

    def set_clock(self, nid: str, offset_ms: int) -> None:
        def call():
            with self.c.channel(nid) as ch:
                tpb_grpc.TestingStub(ch).SetClockOffset(tpb.SetClockOffsetRequest(offset_ms=offset_ms), timeout=3)
            return True
        wait_until(call, timeout=30, interval=0.2, what=f"{nid} to take a clock offset")   # e.g. just restarted
        self.offsets[nid] = offset_ms
        self.fault("clock", "start" if offset_ms else "stop", node=nid, offset_ms=offset_ms)

    def arm(self, proc: str, name: str, value: str = "") -> Path:
        """Arm a one-shot failpoint in `proc` (a node id or "worker-<name>"): it fires when that
        process next reaches the point (schedd/testing/hooks.py)."""
        path = self.fpdir / f"{proc}.{name}"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(value)
        os.replace(tmp, path)
        self.rec("arm", proc_name=proc, name=name, value=value)
        return path

    def disarm(self, path: Path) -> bool:
        """True if the failpoint was still armed (and is now not)."""
        try:
            path.unlink()
            self.rec("disarm", file=path.name)
            return True
        except FileNotFoundError:
            return False

    def heal_all(self) -> None:
        """Undo every fault: SIGCONT, restart what is down, heal the network, reset clocks."""
        for key in list(self.stopped):
            kind, name = key.split(":", 1)
            if kind == "n":
                self.resume_node(name)
            else:
                self.resume_worker(name)
        self.net.heal()
        if self.nsnet is not None and self.nsnet.blocked:
            self.heal_net()
        for nid, node in self.c.nodes.items():
            if not node.alive():
                self.restart_node(nid)
        for w, proc in self.c.workers.items():
            if not proc.alive():
                self.restart_worker(w)
        for nid, off in list(self.offsets.items()):
            if off:
                try:
                    self.set_clock(nid, 0)
                except grpc.RpcError:
                    pass
        self.rec("healed")

    # ------------------------------------------------------------ the run

    def settle(self, window_end: float, timeout: float = 60.0) -> bool:
        """Wait until every execution scheduled before the end of the fault window has ended."""
        cutoff = int(window_end * 1000)

        def done():
            lead = self.c.leader()
            if lead is None:
                return False
            with self.c.channel(lead) as ch:
                s = pb_grpc.SchedulerStub(ch)
                for state in NON_TERMINAL:
                    r = s.ListExecutions(pb.ListExecutionsRequest(state=state, page_size=1000, oldest_first=True),
                                         timeout=5)
                    if any(e.scheduled_ms <= cutoff and e.job not in self.paused_jobs for e in r.executions):
                        return False
            return True
        try:
            wait_until(done, timeout=timeout, interval=0.3, what="executions of the fault window to end")
            return True
        except TimeoutError:
            self.rec("settle_timeout", cutoff_ms=cutoff)
            return False

    def record_final_execs(self) -> None:
        """The leader's view of every execution (state, reason), before the jobs are paused for
        the convergence check: the checker judges C1 on it (apply has side effects, e.g. a pause
        ends pending intents SKIPPED, that no entry of their own records)."""
        out = []
        try:
            lead = self.c.wait_leader(timeout=30)
            with self.c.channel(lead) as ch:
                s = pb_grpc.SchedulerStub(ch)
                token = ""
                while True:
                    r = s.ListExecutions(pb.ListExecutionsRequest(page_size=1000, page_token=token, oldest_first=True),
                                         timeout=10)
                    out += [[e.job, e.scheduled_ms, e.state, e.reason[:200]] for e in r.executions]
                    token = r.next_page_token
                    if not token:
                        break
        except (grpc.RpcError, TimeoutError, RuntimeError) as e:
            self.rec("final_execs_error", error=repr(e))
            return
        self.rec("final_execs", execs=out)

    def finish(self) -> dict:
        """After the nemesis: heal, let the fault window's executions end, pause every job, and
        wait for the replicas to converge; record the final node states."""
        self.heal_all()
        window_end = time.time()
        self.meta["window_end"] = window_end
        self._stop_client.set()
        if self._client_thread is not None:
            self._client_thread.join(timeout=60)
        try:
            self.c.wait_leader(timeout=60)
            wait_until(lambda: len(self.connected_workers()) == 2, timeout=60, what="workers to reconnect")
        except (TimeoutError, RuntimeError) as e:
            self.rec("recovery_timeout", error=str(e))
        settled = self.settle(window_end, timeout=8.0 if self.unsafe else 60.0)
        self.meta["settled"] = settled
        self.record_final_execs()
        names = [j.name for j in self.jobs if j.period_s] + [
            j["name"] for j in self.meta.get("churn", [])]
        self.rec("quiesce_start")
        for name in names:
            self.simple("pause", name)
        for d in self.dags:                 # a DAG has no pause: its schedule row goes with it
            self.delete_dag(d.name)
        self.rec("quiesce_end")
        infos: dict = {}

        def group_converged(group: dict) -> bool:
            vals = {(i["applied"], i["hash"]) for i in group.values() if i}
            # the history stores too (schedd.history): equal rows once every node holds the same
            # hand-overs and none is still copying a gap from a peer
            stores = {(i["history"], i["history_rows"]) for i in group.values() if i}
            gaps = any(i["history_gap"] for i in group.values() if i)
            return len(vals) == 1 and all(group.values()) and len(stores) == 1 and not gaps

        def converged():
            nonlocal infos
            if self.shards > 1:          # a converged group is not asked again
                todo = [k for k in range(self.shards) if k not in infos or not group_converged(infos[k])]
                infos.update({k: self._node_infos(k) for k in todo})
                return all(group_converged(g) for g in infos.values())
            infos = self.node_infos()
            return group_converged(infos)
        ok = True
        try:
            # a replica already stuck after a heal (C7 has it) is not waited for the full minute
            wait_until(converged, timeout=20 if self.unsafe or self.stuck else 60, interval=0.3, what="replicas to converge")
        except TimeoutError:
            ok = False
        if self.shards > 1:
            self.rec("final", shards={str(k): g for k, g in sorted(infos.items())}, converged=ok)
        else:
            self.rec("final", nodes=infos, converged=ok)
        return infos
