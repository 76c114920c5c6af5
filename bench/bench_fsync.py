#!/usr/bin/env python
"""Commit latency and throughput of the durable journal's fsync policies on a local 3-node cluster.

    python bench/bench_fsync.py [--seq-writes 150] [--seq-seconds 3] [--thr-seconds 2]

For each mode (stock pysyncobj FileJournal as the baseline, then DurableJournal with fsync=never,
batch and always), the script starts 3 pysyncobj nodes as subprocesses on free 127.0.0.1 ports
(appendEntriesPeriod=0.02, autoTickPeriod=0.01, journal + dump in a temp dir) and then, on the
leader:

* seq: sequential ``sync=True`` writes; per-write latency p50/p99 and writes/s;
* thr: async writes with 200 in flight for --thr-seconds; acknowledged writes/s;
* fdatasync calls per node during the run (counted by wrapping os.fdatasync).

Every process is started by this script and killed by process group in ``finally``. Runtime is
about 40 s. This file is also the node program: ``bench_fsync.py node '<json>'``.
"""

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import secrets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["stock", "never", "batch", "always"]

sys.path.insert(0, REPO)
from bench._metrics import free_ports  # noqa: E402 - after the path


def node_main(cfg):
    import logging
    sys.path.insert(0, REPO)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    counters = {"fdatasync": 0}
    real_fdatasync = os.fdatasync

    def fdatasync(fd):
        counters["fdatasync"] += 1
        return real_fdatasync(fd)

    os.fdatasync = fdatasync

    from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated, FAIL_REASON

    class Store(SyncObjConsumer):
        def __init__(self):
            super().__init__()
            self.data = {}

        @replicated
        def set(self, key, value):
            self.data[key] = value

    kw = {}
    transport = {}
    data_dir = cfg["data_dir"]
    if cfg["mode"] == "stock":
        kw = {"journalFile": os.path.join(data_dir, "raft.journal"),
              "fullDumpFile": os.path.join(data_dir, "raft.dump")}
    else:
        from schedd.replication.journal import prepare_durable_journal
        hooks = prepare_durable_journal(data_dir, fsync=cfg["mode"])
        kw = hooks.conf_kwargs
        transport = {"transportClass": hooks.transport_class}
    store = Store()
    conf = SyncObjConf(password=cfg["password"], bindAddress=cfg["self"],
                       appendEntriesPeriod=0.02, autoTickPeriod=0.01,
                       raftMinTimeout=0.4, raftMaxTimeout=0.9, connectionTimeout=1.5,
                       connectionRetryTime=0.2, leaderFallbackTimeout=2.0, **kw)
    obj = SyncObj(cfg["self"], cfg["peers"], conf=conf, consumers=[store], **transport)
    if cfg["mode"] != "stock":
        hooks.attach(obj)

    def reply(msg):
        sys.stdout.write("@@" + json.dumps(msg) + "\n")
        sys.stdout.flush()

    def seq(req):
        lat = []
        t_end = time.perf_counter() + req["max_s"]
        t0 = time.perf_counter()
        for i in range(req["n"]):
            t = time.perf_counter()
            store.set("s%d" % i, i, sync=True, timeout=5)
            lat.append(time.perf_counter() - t)
            if t > t_end:
                break
        return {"lat": lat, "elapsed": time.perf_counter() - t0}

    def thr(req):
        sem = threading.Semaphore(req["window"])
        acked = [0]
        lock = threading.Lock()

        def cb(res, err):
            if err == FAIL_REASON.SUCCESS:
                with lock:
                    acked[0] += 1
            sem.release()

        t0 = time.perf_counter()
        i = 0
        while time.perf_counter() - t0 < req["seconds"]:
            if sem.acquire(timeout=0.05):
                store.set("t%d" % i, i, callback=cb)
                i += 1
        elapsed = time.perf_counter() - t0
        with lock:
            return {"acked": acked[0], "elapsed": elapsed}

    reply({"ready": True})
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "status":
            s = obj.getStatus()
            res = {"state": s["state"], "leader": str(s["leader"]) if s["leader"] else None,
                   "commit_idx": s["commit_idx"], "last_applied": s["last_applied"]}
        elif op == "seq":
            res = seq(req)
        elif op == "thr":
            res = thr(req)
        elif op == "stats":
            res = dict(counters)
        else:
            res = {"error": op}
        res["id"] = req["id"]
        reply(res)


# ------------------------------------------------------------------------------------------ driver


class Node:
    def __init__(self, cfg):
        self.cfg = cfg
        self.addr = cfg["self"]
        env = dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED="1")
        self.err = open(os.path.join(cfg["data_dir"], "stderr.log"), "wb")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "node", json.dumps(cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     env=env, cwd=REPO, start_new_session=True)
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.n = 0

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("@@"):
                self.q.put(json.loads(line[2:]))
        self.q.put(None)

    def get(self, timeout):
        msg = self.q.get(timeout=timeout)
        if msg is None:
            raise RuntimeError("node %s died; see %s" % (self.addr, self.err.name))
        return msg

    def call(self, op, timeout=30, **kw):
        self.n += 1
        self.proc.stdin.write((json.dumps(dict(kw, op=op, id=self.n)) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            msg = self.get(timeout)
            if msg.get("id") == self.n:
                return msg

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        self.err.close()


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def run_mode(mode, base, args):
    addrs = ["127.0.0.1:%d" % p for p in free_ports(3)]
    password = secrets.token_urlsafe(32)
    nodes = []
    try:
        for i, a in enumerate(addrs):
            d = os.path.join(base, mode, "n%d" % i)
            os.makedirs(d)
            nodes.append(Node({"self": a, "peers": [b for b in addrs if b != a], "data_dir": d,
                               "mode": mode, "password": password}))
        for n in nodes:
            assert n.get(20).get("ready")
        deadline = time.monotonic() + 20
        leader = None
        while time.monotonic() < deadline and leader is None:
            sts = [n.call("status") for n in nodes]
            ls = [n for n, s in zip(nodes, sts) if s["state"] == 2]
            if len(ls) == 1 and all(s["leader"] == ls[0].addr for s in sts):
                st = sts[nodes.index(ls[0])]
                if st["last_applied"] >= st["commit_idx"] > 1:
                    leader = ls[0]
            if leader is None:
                time.sleep(0.05)
        if leader is None:
            raise RuntimeError("no leader for mode %s" % mode)
        before = [n.call("stats")["fdatasync"] for n in nodes]
        s = leader.call("seq", n=args.seq_writes, max_s=args.seq_seconds, timeout=60)
        mid = [n.call("stats")["fdatasync"] for n in nodes]
        t = leader.call("thr", window=200, seconds=args.thr_seconds, timeout=60)
        after = [n.call("stats")["fdatasync"] for n in nodes]
        lat = s["lat"]
        li = nodes.index(leader)
        return {
            "mode": mode,
            "seq_n": len(lat),
            "p50_ms": pct(lat, 50) * 1e3,
            "p99_ms": pct(lat, 99) * 1e3,
            "seq_wps": len(lat) / s["elapsed"],
            "thr_wps": t["acked"] / t["elapsed"],
            "fsync_leader_seq": (mid[li] - before[li]) / max(1, len(lat)),
            "fsync_leader_thr": (after[li] - mid[li]) / max(1, t["acked"]),
            "fsync_per_s_node": max((a - b) / (s["elapsed"] + t["elapsed"]) for a, b in zip(after, before)),
        }
    finally:
        for n in nodes:
            n.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq-writes", type=int, default=150)
    ap.add_argument("--seq-seconds", type=float, default=3.0)
    ap.add_argument("--thr-seconds", type=float, default=2.0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--dir", default=None, help="parent of the temp data dir (default: system temp)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench_fsync_", dir=args.dir)
    t0 = time.monotonic()
    rows = []
    try:
        for mode in args.modes.split(","):
            r = run_mode(mode, base, args)
            rows.append(r)
            print("  %-6s done (%.1fs)" % (mode, time.monotonic() - t0), file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    hdr = ("mode", "seq n", "p50 ms", "p99 ms", "seq w/s", "async w/s", "fds/entry seq",
           "fds/entry async", "max fds/s/node")
    fmt = "%-8s %6s %8s %8s %8s %10s %14s %16s %15s"
    print("3-node local cluster, appendEntriesPeriod=0.02 autoTickPeriod=0.01, data dir on %s"
          % base.rsplit("/", 1)[0])
    print("(fds = fdatasync calls by the node process; 'stock' = pysyncobj FileJournal + TCPTransport)")
    print(fmt % hdr)
    for r in rows:
        print(fmt % (r["mode"], r["seq_n"], "%.1f" % r["p50_ms"], "%.1f" % r["p99_ms"],
                     "%.1f" % r["seq_wps"], "%.0f" % r["thr_wps"], "%.2f" % r["fsync_leader_seq"],
                     "%.3f" % r["fsync_leader_thr"], "%.0f" % r["fsync_per_s_node"]))
    print("total %.1fs" % (time.monotonic() - t0))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "node":
        node_main(json.loads(sys.argv[2]))
    else:
        main()
