"""Linearizable single-job reads under leader cuts and pauses: a workload, a nemesis and
a checker, on a real 3-node cluster secured as in production (TLS, mTLS, ACL).

Workload: one job. Writers (each with the whole cluster as its address list) read the job's
version and write it back with `expected_version` and a command naming the writer and its count,
so every written value is unique and says which write made it. Readers are each pinned to one
node and read the job with plain reads (or `stale_ok` in the negative control). Every operation
is timed with this process's monotonic clock: its invocation and its completion.

Nemesis: in turns, the leader's Raft links are cut while its gRPC port stays reachable (a
peers-only cut: iptables DROP of its peers inside its network namespace), long enough for the
others to elect a leader and commit writes and for it to step down (past leader_fallback_ms);
or the leader is SIGSTOPped, then resumed, its queued calls answered first.

Checker (`check`, pure): a simple sufficient condition for linearizability of single-register
reads with versioned writes: a read that began after a write was acknowledged returns a version
at or above that write's, and a read never returns a (version, value) that no write made (the
initial one aside; a write whose outcome is unknown may have made its value, at any version).
"""

from __future__ import annotations

import bisect
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from schedd_client import Client, Conflict, SchedError, job_spec

from .harness import RAFT, JLCluster
from .netns import NetnsNet

JOB = "lin"
CUT_S = 3.5            # > leader_fallback_ms (2.5 s): the cut leader steps down within the cut
PAUSE_S = 2.0          # > an election timeout: the others elect a new leader meanwhile


@dataclass(slots=True, frozen=True)
class Write:
    start: float
    end: float | None          # None: the outcome is unknown (it may have been applied)
    version: int               # the version it made (0 while unknown)
    value: str


@dataclass(slots=True, frozen=True)
class Read:
    start: float
    end: float
    version: int
    value: str
    node: str


def check(writes: list[Write], reads: list[Read], initial: tuple[int, str]) -> list[str]:
    """Anomalies: stale reads (older than a write acknowledged before the read began) and reads
    of a (version, value) no write made."""
    acked = sorted((w for w in writes if w.end is not None), key=lambda w: w.end or 0.0)
    ends = [w.end or 0.0 for w in acked]
    best: list[Write] = []                  # best[i]: the highest version among acked[:i + 1]
    for w in acked:
        best.append(w if not best or w.version > best[-1].version else best[-1])
    made = {(w.version, w.value) for w in acked} | {initial}
    maybe = {w.value for w in writes if w.end is None}
    out = []
    for r in reads:
        i = bisect.bisect_left(ends, r.start) - 1
        if i >= 0 and best[i].version > r.version:
            w = best[i]
            out.append(f"stale read on {r.node}: version {r.version} ({r.value}) read at "
                       f"{r.start:.3f}-{r.end:.3f}, but version {w.version} ({w.value}) was "
                       f"acknowledged at {w.end:.3f}, {r.start - (w.end or 0):.3f}s before the read began")
        if (r.version, r.value) not in made and r.value not in maybe:
            out.append(f"read on {r.node} of version {r.version} ({r.value}), which no write made")
    return out


@dataclass
class Run:
    """One run: the cluster in network namespaces, the workload, the nemesis, the history."""
    root: Path
    duration_s: float
    stale_ok: bool = False
    seed: int = 0
    writers: int = 4
    readers: int = 4
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    refused: int = 0                         # reads that failed (refused or timed out): unchecked
    initial: tuple[int, str] = (0, "")

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.rng = random.Random(self.seed)

    def execute(self) -> None:
        net = NetnsNet(["n1", "n2", "n3"])
        try:
            hosts = {n: net.addr(n) for n in ("n1", "n2", "n3")}
            c = JLCluster(self.root / "cluster", size=3, raft=dict(RAFT), base_port=7100, hosts=hosts,
                          wrap={n: net.exec_prefix(n) for n in hosts})
            try:
                c.start()
                c.wait_leader(timeout=60)
                with c.client(timeout=10) as cl:
                    job = cl.put_job(job_spec(JOB, command="echo initial"))
                self.initial = (job.version, job.spec.handler.shell.command)
                self._workload(c, net)
            finally:
                c.stop(timeout=15)
        finally:
            net.close()

    def _workload(self, c: JLCluster, net: NetnsNet) -> None:
        threads = [threading.Thread(target=self._writer, args=(c, i), daemon=True) for i in range(self.writers)]
        nodes = list(c.nodes)
        threads += [threading.Thread(target=self._reader, args=(c, nodes[i % len(nodes)]), daemon=True)
                    for i in range(self.readers)]
        for t in threads:
            t.start()
        try:
            self._nemesis(c, net, time.monotonic() + self.duration_s)
        finally:
            self._stop.set()
            for t in threads:
                t.join(timeout=30)

    def _nemesis(self, c: JLCluster, net: NetnsNet, until: float) -> None:
        turn = 0
        while time.monotonic() < until and not self._stop.is_set():
            lead = c.wait_leader(timeout=30)
            time.sleep(0.5 + self.rng.random())          # writes and reads under this leader
            if turn % 3 == 2:
                self.faults.append(f"pause {lead}")
                c.signal_node(lead, signal.SIGSTOP)
                try:
                    time.sleep(PAUSE_S)
                finally:
                    c.signal_node(lead, signal.SIGCONT)
            else:
                self.faults.append(f"cut {lead} from its peers")
                net.block(lead, [n for n in c.nodes if n != lead], "both")
                try:
                    time.sleep(CUT_S)
                finally:
                    net.heal(lead)
            turn += 1

    def _writer(self, c: JLCluster, i: int) -> None:
        with c.client(timeout=3) as cl:
            k = 0
            while not self._stop.is_set():
                try:
                    current = cl.get_job(JOB).version
                except SchedError:
                    continue
                k += 1
                value = f"echo w{i}-{k}"
                started = time.monotonic()
                try:
                    reply = cl.put_job_result(job_spec(JOB, command=value), expected_version=current)
                except Conflict:
                    continue                     # another writer got there first: not written
                except SchedError:
                    self._note(Write(started, None, 0, value))
                    continue
                # The version this write made: reply.job is read after the write and may
                # already show a later writer's (version, value).
                self._note(Write(started, time.monotonic(), reply.version, value))

    def _reader(self, c: JLCluster, nid: str) -> None:
        with Client(c.nodes[nid].grpc, security=c.security(), timeout=2) as cl:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    job = cl.get_job(JOB, stale_ok=self.stale_ok)
                except SchedError:
                    with self._lock:
                        self.refused += 1
                    continue
                self._note(Read(started, time.monotonic(), job.version, job.spec.handler.shell.command, nid))

    def _note(self, op: Write | Read) -> None:
        with self._lock:
            (self.writes if isinstance(op, Write) else self.reads).append(op)

    def anomalies(self) -> list[str]:
        return check(self.writes, self.reads, self.initial)
