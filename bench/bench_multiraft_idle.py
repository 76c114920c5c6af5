#!/usr/bin/env python
"""What an idle pysyncobj group costs, and how many one process can host: the measurement that
decides how a node hosts many shard groups (docs/architecture.md "Shards").

    python bench/bench_multiraft_idle.py [--groups 1,8,32,128] [--modes auto,manual:10,evented:50]
                                         [--seconds 30] [--writes 200] [--loop-ms 10] [--json F]

For each G and mode, three node processes on 127.0.0.1 each host one replica of each of G
three-replica groups (stock pysyncobj 0.3.17, a `ReplCounter` each, one port per replica):

- `auto`: pysyncobj's default, `autoTick=True`: one tick thread per replica, each polling its
  own sockets with `autoTickPeriod` (50 ms) as the wait.
- `manual`: `autoTick=False` and ONE thread per process calling `doTick(0)` on every replica in
  turn, then sleeping what is left of `--loop-ms`. pysyncobj gives each SyncObj its own poller
  and transport, so the sockets (one listening port per replica) stay as they are.
- `shared`: as `manual`, but every replica's sockets are registered with ONE `poll` object
  (`share_one_poller`), and the one thread waits on it (at most `--loop-ms`) before ticking
  every replica: a message wakes the loop at once instead of at the next period.
- `evented`: as `shared`, but a wake ticks only the replicas whose sockets (or queued
  commands) woke it; every replica is ticked once per `--loop-ms` for its timers.

Per run: the time from spawning the processes to every group having a leader that all three
replicas agree on; then, after a short settle, each process's CPU (utime + stime from
/proc/<pid>/stat, in % of one core) and thread count over `--seconds` with nothing proposed;
the one tick thread's full sweeps per second and the thread CPU one sweep takes, per replica
("us/tick": what an idle replica's tick costs, whatever the machine's load lets the loop reach);
then `--writes` sequential `inc(sync=True)` calls on group 0's leader while the other groups
idle (commit latency p50/p99 of those that succeeded within 30 s; "fail" counts the others,
e.g. LEADER_CHANGED or a 2 s timeout). "terms+" is how much the groups' terms grew during the
idle window (the most of the three nodes' sums): elections nothing but load caused. Raft
settings are schedd's defaults where stock pysyncobj has them (100 ms heartbeat, 600-1200 ms
election timeout, 2.5 s leader fallback, 50 ms tick) and prompt sends
(`appendEntriesUseBatch=False`), the nearest stock mode to schedd's.

Measured 2026-12-07 (2-core VM, shared; the table and what is doubtful: bench/README.md "Many
Raft groups in one process"): at 128 groups a thread per group cost 55% of a core per process
idle, 129 threads, and 28 and 267 elections in 30 idle s in two runs; one loop on one shared
poller (`evented:50`) 26%, 2 threads, no election, commit p50 0.9 ms.

Sharing a socket: not tried. pysyncobj's `TCPTransport` opens a server per SyncObj and
identifies a peer by the address string of its first message, so groups cannot share a port
through it; the transport is replaceable (`transportClass`, as schedd's in-memory test network
does), so one port per node needs a transport that tags each message with its group over one
connection per node pair. The poller, though, can be shared without touching pysyncobj's code
(`share_one_poller`).

Every process is started here and stopped by its pid on exit (also on failure or Ctrl-C), and
a node exits by itself when its stdin closes (the parent died).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
MODES = ("auto", "manual", "shared", "evented")


# ---------------------------------------------------------------------------------------------
# The node process: G replicas, driven by JSON lines on stdin, answering on stdout.

def node_main(index: int, mode: str, loop_ms: float) -> None:
    from pysyncobj import SyncObj, SyncObjConf, SyncObjException
    from pysyncobj.batteries import ReplCounter

    shared, use_proxy_of, dirty = None, None, set()
    if mode in ("shared", "evented"):
        shared, use_proxy_of = share_one_poller(dirty)
    spec = json.loads(sys.stdin.readline())
    groups: list[list[int]] = spec["ports"]            # per group, the three replicas' ports
    objs: list[SyncObj] = []
    counters: list[ReplCounter] = []
    for g, ports in enumerate(groups):
        if use_proxy_of is not None:
            use_proxy_of(g)
        me = f"127.0.0.1:{ports[index]}"
        others = [f"127.0.0.1:{p}" for i, p in enumerate(ports) if i != index]
        conf = SyncObjConf(autoTick=(mode == "auto"), pollerType="poll", autoTickPeriod=0.05, appendEntriesPeriod=0.1,
                           raftMinTimeout=0.6, raftMaxTimeout=1.2, leaderFallbackTimeout=2.5,
                           appendEntriesUseBatch=False, bindAddress=me, connectionRetryTime=1.0)
        counter = ReplCounter()
        objs.append(SyncObj(me, others, conf=conf, consumers=[counter]))
        counters.append(counter)
    stop = threading.Event()
    ticks = [0]
    sweeps = [0, 0.0]                               # full sweeps over every replica, their thread CPU s

    def sweep_all() -> None:
        c = time.thread_time()
        for o in objs:
            o.doTick(0.0)
        sweeps[0] += 1
        sweeps[1] += time.thread_time() - c
    if mode == "manual":
        def loop() -> None:
            period = loop_ms / 1000.0
            while not stop.is_set():
                t0 = time.monotonic()
                sweep_all()
                ticks[0] += 1
                left = period - (time.monotonic() - t0)
                if left > 0:
                    time.sleep(left)
        threading.Thread(target=loop, name="tick-all", daemon=True).start()
    elif shared is not None and mode == "evented":
        def loop_evented() -> None:
            period = loop_ms / 1000.0
            sweep = time.monotonic()
            while not stop.is_set():
                shared.poll(max(0.0, sweep - time.monotonic()))
                if time.monotonic() >= sweep:       # timers: heartbeats, elections, retries
                    dirty.clear()
                    sweep_all()
                    sweep = time.monotonic() + period
                else:                               # only the replicas a socket or command woke
                    todo = sorted(dirty)
                    dirty.clear()
                    for g in todo:
                        objs[g].doTick(0.0)
                ticks[0] += 1
        threading.Thread(target=loop_evented, name="tick-all", daemon=True).start()
    elif shared is not None:
        def loop_shared() -> None:
            wait = loop_ms / 1000.0
            while not stop.is_set():
                shared.poll(wait)               # wakes on any replica's socket or queued command
                sweep_all()                     # each one's own poll is a no-op: the loop polled for all
                ticks[0] += 1
        threading.Thread(target=loop_shared, name="tick-all", daemon=True).start()

    def say(d: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(d) + "\n")
        sys.stdout.flush()

    say({"ready": True})
    for line in sys.stdin:                  # EOF (the parent died or is done): leave
        cmd = json.loads(line)
        if cmd["op"] == "status":
            say({"leading": [g for g, o in enumerate(objs) if o._isLeader()],
                 "known": sum(1 for o in objs if o._getLeader() is not None), "loops": ticks[0], "terms": sum(o.raftCurrentTerm for o in objs),
                 "sweeps": sweeps[0], "sweep_cpu_s": sweeps[1]})
        elif cmd["op"] == "writes":
            c = counters[cmd["group"]]
            lat: list[float] = []
            failed: list[str] = []
            until = time.monotonic() + 30.0        # a bound on the whole series, whatever fails
            for _ in range(cmd["n"]):
                if time.monotonic() > until:
                    failed.append("series deadline")
                    break
                t0 = time.perf_counter()
                try:
                    c.inc(sync=True, timeout=2.0)
                except SyncObjException as e:      # LEADER_CHANGED, a timeout: counted, not timed
                    failed.append(str(e.errorCode))
                    continue
                lat.append((time.perf_counter() - t0) * 1000.0)
            say({"latencies_ms": lat, "failed": failed})
        elif cmd["op"] == "quit":
            break
    stop.set()
    os._exit(0)                             # the tick threads are non-daemon; do not wait for them


def share_one_poller(dirty: set[int]) -> tuple[Any, Any]:
    """Make every SyncObj built afterwards in this process register its sockets (and its pipe
    notifier) with ONE `poll` object, and make its own per-tick poll a no-op: the loop polls
    once for all replicas. pysyncobj builds its poller with `createPoller` in `SyncObj.__init__`
    and reaches it only through `_poller`, so a proxy per replica is enough; the proxy of
    replica g wraps its callbacks to add g to `dirty` (a message or a command arrived for it).
    Returns the shared poller and `use_proxy_of(g)`, to call before building replica g."""
    import pysyncobj.syncobj as so
    from pysyncobj.poller import Poller, PollPoller

    shared = PollPoller()

    class Proxy(Poller):                        # type: ignore[misc]
        def __init__(self, g: int) -> None:
            self.g = g

        def subscribe(self, descr: Any, callback: Any, eventMask: int) -> None:
            def marked(d: Any, event: int) -> None:
                dirty.add(self.g)
                callback(d, event)
            shared.subscribe(descr, marked, eventMask)

        def unsubscribe(self, descr: Any) -> None:
            shared.unsubscribe(descr)

        def poll(self, timeout: float) -> None:
            pass

    def use_proxy_of(g: int) -> None:
        proxy = Proxy(g)
        so.createPoller = lambda _kind: proxy
    return shared, use_proxy_of


# ---------------------------------------------------------------------------------------------
# The parent: start, wait, measure, stop.

def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports: all bound at once (so distinct), then released."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK       # utime, stime (fields 14, 15)


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


@dataclass(slots=True)
class Node:
    proc: subprocess.Popen[str]

    def ask(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"node {self.proc.pid} exited (rc {self.proc.poll()})")
        out: dict[str, Any] = json.loads(line)
        return out


def stop_all(nodes: list[Node]) -> None:
    for n in nodes:
        try:
            if n.proc.stdin:
                n.proc.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + 5.0
    for n in nodes:
        try:
            n.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.kill(n.proc.pid, 9)
            n.proc.wait()


def one_run(g: int, label: str, a: argparse.Namespace) -> dict[str, Any]:
    mode, _, ms = label.partition(":")              # e.g. "evented:50": the mode's loop period
    loop_ms = float(ms or a.loop_ms)
    ports = free_ports(3 * g)
    spec = {"ports": [ports[3 * i:3 * i + 3] for i in range(g)]}
    nodes: list[Node] = []
    try:
        t_spawn = time.monotonic()
        for i in range(3):
            p = subprocess.Popen([sys.executable, __file__, "--node", str(i), "--mode", mode,
                                  "--loop-ms", str(loop_ms)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            nodes.append(Node(p))
        for n in nodes:
            assert n.proc.stdin is not None and n.proc.stdout is not None
            n.proc.stdin.write(json.dumps(spec) + "\n")
            n.proc.stdin.flush()
        for n in nodes:
            assert n.proc.stdout is not None
            if not json.loads(n.proc.stdout.readline() or "{}").get("ready"):
                raise RuntimeError("a node failed to start")
        t_ready = time.monotonic()
        deadline = t_ready + 60.0 + g * 0.5
        leaders: dict[int, int] = {}
        while True:
            st = [n.ask({"op": "status"}) for n in nodes]
            leaders = {grp: i for i, s in enumerate(st) for grp in s["leading"]}
            if len(leaders) == g and sum(len(s["leading"]) for s in st) == g and all(s["known"] == g for s in st):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"G={g} {mode}: {len(leaders)}/{g} leaders after {deadline - t_ready:.0f} s")
            time.sleep(0.1)
        t_elected = time.monotonic()
        time.sleep(a.settle)
        pids = [n.proc.pid for n in nodes]
        s0 = [n.ask({"op": "status"}) for n in nodes]
        c0, w0 = [cpu_seconds(p) for p in pids], time.monotonic()
        time.sleep(a.seconds)
        c1, w1 = [cpu_seconds(p) for p in pids], time.monotonic()
        s1 = [n.ask({"op": "status"}) for n in nodes]
        swept = sum(y["sweeps"] - x["sweeps"] for x, y in zip(s0, s1))
        sweep_ms = 1000.0 * sum(y["sweep_cpu_s"] - x["sweep_cpu_s"] for x, y in zip(s0, s1)) / swept \
            if swept else 0.0
        cpu = [100.0 * (y - x) / (w1 - w0) for x, y in zip(c0, c1)]
        threads = [threads_of(p) for p in pids]
        rss = [rss_mib(p) for p in pids]
        st = [n.ask({"op": "status"}) for n in nodes]
        steady = sum(len(s["leading"]) for s in st) == g
        leader0 = next(i for i, s in enumerate(st) if 0 in s["leading"]) if any(0 in s["leading"] for s in st) \
            else leaders[0]
        wrote = nodes[leader0].ask({"op": "writes", "group": 0, "n": a.writes})
        lat = sorted(wrote["latencies_ms"]) or [float("nan")]
        return {"groups": g, "mode": label, "elect_s": t_elected - t_spawn, "elect_from_ready_s": t_elected - t_ready,
                "cpu_pct": cpu, "loops_per_s": [(y["loops"] - x["loops"]) / (w1 - w0) for x, y in zip(s0, s1)],
                "sweeps_per_s": swept / 3 / (w1 - w0), "write_failures": wrote["failed"],
                "idle_elections": max(y["terms"] - x["terms"] for x, y in zip(s0, s1)), "sweep_cpu_ms": sweep_ms, "threads": threads, "rss_mib": rss, "leaders_per_node":
                [sum(1 for v in leaders.values() if v == i) for i in range(3)], "one_leader_each_after": steady,
                "p50_ms": statistics.median(lat), "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
                "loadavg": os.getloadavg()[0]}
    finally:
        stop_all(nodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--node", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="auto", help=argparse.SUPPRESS)
    ap.add_argument("--groups", default="1,8,32,128")
    ap.add_argument("--modes", default="auto,manual:10,evented:50",
                    help="each mode, with its loop period in ms after a colon (else --loop-ms)")
    ap.add_argument("--seconds", type=float, default=30.0, help="the idle CPU window")
    ap.add_argument("--settle", type=float, default=3.0, help="wait after the last election")
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--loop-ms", type=float, default=10.0, help="manual: the one tick loop's period; shared: its longest poll wait; evented: "
                    "the period of ticking every replica")
    ap.add_argument("--json", help="also append each run as a JSON line to this file")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))     # run one_run's cleanup on a kill too
    if a.node is not None:
        node_main(a.node, a.mode, a.loop_ms)
        return
    for label in a.modes.split(","):
        if label.partition(":")[0] not in MODES:
            ap.error(f"unknown mode {label!r}: use {', '.join(MODES)}, each with an optional :<loop ms>")
    print(f"{'G':>4} {'mode':>10} {'elect s':>7} {'CPU % per node':>17} {'sweeps/s':>8} {'us/tick':>7} "
          f"{'threads':>7} {'RSS MiB':>7} {'p50 ms':>7} {'p99 ms':>7} {'fail':>4} {'terms+':>6} {'load':>5}",
          flush=True)
    for g in (int(x) for x in a.groups.split(",")):
        for label in a.modes.split(","):
            r = one_run(g, label, a)
            cpu = "/".join(f"{c:.1f}" for c in r["cpu_pct"])
            per_tick = 1000.0 * r["sweep_cpu_ms"] / g         # CPU of one idle replica's tick, in one sweep
            print(f"{g:>4} {r['mode']:>10} {r['elect_s']:>7.2f} {cpu:>17} {r['sweeps_per_s']:>8.1f} {per_tick:>7.1f} "
                  f"{max(r['threads']):>7} {max(r['rss_mib']):>7.1f} {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} "
                  f"{len(r['write_failures']):>4} {r['idle_elections']:>6} {r['loadavg']:>5.1f}", flush=True)
            if a.json:
                with open(a.json, "a", encoding="utf-8") as f:
                    f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
