"""Crash tests for the durable journal with real pysyncobj nodes (3 subprocesses on 127.0.0.1).

This file is also the node program: ``python test_journal_crash.py node '<json cfg>'``. A node
talks JSON lines on stdin/stdout (``@@{...}``) and runs these probes:

* ``fdatasync``/``fsync`` counters (``os.fdatasync``/``os.fsync`` are wrapped, no strace needed);
* ``send_dirty``: Raft messages handed to TCPTransport.send while the journal had unsynced data
  (persist-before-send says this must be 0 with ``fsync=always``), except the leader's in
  parallel mode (``send_parallel``: the parallel disk write of raft_patches, Raft thesis §10.2.1: it sends before
  its background fdatasync and counts itself in a commit only for durable entries);
* ``apply_not_durable``: entries applied (so acknowledged to clients) while not yet fdatasynced on
  this node (must be 0 with ``fsync=always``, on the leader and on the followers);
* a side file ``durable.side`` holding (inode, durable_size) of the journal after every sync. It lets
  the test simulate a power loss: after SIGKILL, each journal is cut back to what was fdatasynced,
  plus a torn fragment.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import queue
import secrets

from schedd.ports.fakes import WaitTimeout, wait_until
from schedd.runtime.cluster import restartable_ports

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

if __name__ != "__main__":  # the node subprocesses do not need pytest
    import pytest

    pytestmark = pytest.mark.integration

# --------------------------------------------------------------------------------------------- node


def node_main(cfg):  # pragma: no cover - runs in the subprocesses
    import logging

    sys.path.insert(0, REPO)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    counters = {"fdatasync": 0, "fsync": 0, "sends": 0, "send_dirty": 0, "send_parallel": 0,
                "applies": 0, "apply_not_durable": 0}
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def fdatasync(fd):
        counters["fdatasync"] += 1
        return real_fdatasync(fd)

    def fsync(fd):
        counters["fsync"] += 1
        return real_fsync(fd)

    os.fdatasync, os.fsync = fdatasync, fsync

    import pysyncobj.syncobj
    from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated, FAIL_REASON
    from pysyncobj.transport import TCPTransport
    from schedd.replication.journal import prepare_durable_journal, speed_up_snapshots
    from schedd.replication.raft_patches import RepairingSyncObj

    data_dir = cfg["data_dir"]
    hooks = prepare_durable_journal(data_dir, fsync=cfg["fsync"])
    speed_up_snapshots(level=1)

    side_fd = os.open(os.path.join(data_dir, "durable.side"), os.O_RDWR | os.O_CREAT, 0o600)

    def record_durable(j):
        ino = os.fstat(j._file.fd).st_ino
        os.pwrite(side_fd, b"%020d %020d\n" % (ino, j.durable_size), 0)

    durable_create = pysyncobj.syncobj.createJournal

    def create_journal(path):
        j = durable_create(path)
        j.on_durable = record_durable
        record_durable(j)
        return j

    pysyncobj.syncobj.createJournal = create_journal

    real_send = TCPTransport.send

    def probed_send(self, node, message):
        counters["sends"] += 1
        j = hooks.journal
        if j is not None and j.dirty:
            counters["send_parallel" if j.parallel else "send_dirty"] += 1
        return real_send(self, node, message)

    TCPTransport.send = probed_send  # DurableTCPTransport.send syncs, then calls this

    class Probe(SyncObjConsumer):
        def __init__(self):
            super().__init__()
            self.data = {}

        @replicated
        def set(self, key, value):
            counters["applies"] += 1
            # during the apply of entry i, raftLastApplied == i - 1
            if hooks.journal.durable_index < self._syncObj.raftLastApplied + 1:
                counters["apply_not_durable"] += 1
            self.data[key] = value

    probe = Probe()
    conf = SyncObjConf(password=cfg["password"], bindAddress=cfg["self"],
                       appendEntriesPeriod=0.02, autoTickPeriod=0.01,
                       raftMinTimeout=0.4, raftMaxTimeout=0.9, connectionTimeout=1.5,
                       connectionRetryTime=0.2, leaderFallbackTimeout=2.0, bindRetryTime=0.1,
                       logCompactionMinEntries=cfg["compaction_min"], useFork=True,
                       **hooks.conf_kwargs)
    raft_class = RepairingSyncObj if cfg.get("raft") == "repairing" else SyncObj
    obj = raft_class(cfg["self"], cfg["peers"], conf=conf, consumers=[probe],
                     transportClass=hooks.transport_class)
    journal = hooks.attach(obj)

    def reply(msg):
        sys.stdout.write("@@" + json.dumps(msg) + "\n")
        sys.stdout.flush()

    def do_write(req):
        prefix, n = req["prefix"], req["n"]
        acked, failed = [], []
        lock, done = threading.Lock(), threading.Event()
        pending = [n]

        def make_cb(key):
            def cb(res, err):
                with lock:
                    (acked if err == FAIL_REASON.SUCCESS else failed).append(key)
                    pending[0] -= 1
                    if pending[0] == 0:
                        done.set()
            return cb

        for i in range(n):
            key = "%s%d" % (prefix, i)
            probe.set(key, i, callback=make_cb(key))
        if n:
            done.wait(req.get("timeout", 20))
        for i in range(req.get("sync_n", 0)):
            key = "%ss%d" % (prefix, i)
            try:
                probe.set(key, i, sync=True, timeout=3)
                acked.append(key)
            except Exception:  # noqa: BLE001 - any failure to commit counts as not acknowledged
                failed.append(key)
        with lock:
            return {"acked": list(acked), "failed": list(failed), "pending": pending[0]}

    def start_load(req):
        """Submit writes forever (bounded in-flight window); append each acked key to acked.log."""
        prefix, window = req["prefix"], req.get("window", 100)
        acked_fd = os.open(os.path.join(data_dir, "acked.log"),
                           os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        sem = threading.Semaphore(window)

        def make_cb(key):
            line = (key + "\n").encode()

            def cb(res, err):
                if err == FAIL_REASON.SUCCESS:
                    os.write(acked_fd, line)
                sem.release()
            return cb

        def run():
            i = 0
            while True:
                sem.acquire()
                key = "%s%d" % (prefix, i)
                probe.set(key, i, callback=make_cb(key))
                i += 1

        threading.Thread(target=run, daemon=True).start()
        return {"started": True}

    reply({"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "status":
            s = obj.getStatus()
            res = {"state": s["state"], "leader": str(s["leader"]) if s["leader"] else None,
                   "commit_idx": s["commit_idx"], "last_applied": s["last_applied"],
                   "term": s["raft_term"], "log_len": s["log_len"]}
        elif op == "write":
            res = do_write(req)
        elif op == "load":
            res = start_load(req)
        elif op == "missing":
            data = probe.data
            res = {"missing": [k for k in req["keys"] if k not in data]}
        elif op == "stats":
            res = dict(counters, journal=dict(journal.stats), durable_index=journal.durable_index,
                       policy=journal.policy)
        else:
            res = {"error": "unknown op %r" % op}
        res["id"] = req["id"]
        reply(res)


# --------------------------------------------------------------------------------------------- harness


class Node:
    def __init__(self, addr, peers, data_dir, fsync, password, compaction_min, raft):
        self.addr = addr
        self.data_dir = data_dir
        self.cfg = {"self": addr, "peers": peers, "data_dir": data_dir, "fsync": fsync,
                    "password": password, "compaction_min": compaction_min, "raft": raft}
        self.proc = None
        self.q = None
        self._n = 0

    def spawn(self):
        os.makedirs(self.data_dir, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED="1")
        err = open(os.path.join(self.data_dir, "stderr.log"), "ab")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "node",
                                      json.dumps(self.cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                     cwd=REPO, env=env, start_new_session=True)
        err.close()
        self.q = queue.Queue()
        threading.Thread(target=self._reader, args=(self.proc.stdout, self.q), daemon=True).start()

    @staticmethod
    def _reader(stream, q):
        for raw in stream:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("@@"):
                q.put(json.loads(line[2:]))
        q.put(None)

    def _get(self, deadline):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("node %s: no answer (%s)" % (self.addr, self.stderr_tail()))
            try:
                msg = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if msg is None:
                raise RuntimeError("node %s exited rc=%s: %s" % (self.addr, self.proc.poll(), self.stderr_tail()))
            return msg

    def wait_ready(self, timeout=20):
        msg = self._get(time.monotonic() + timeout)
        assert msg.get("ready"), msg

    def call(self, op, timeout=30, **kw):
        self._n += 1
        req = dict(kw, op=op, id=self._n)
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            msg = self._get(deadline)
            if msg.get("id") == self._n:
                return msg

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                # the node's own process group (start_new_session): the node and its
                # snapshot fork child, nothing else
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait(timeout=10)
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except Exception:  # noqa: BLE001 - closing a dead child's pipes
                    pass

    def stderr_tail(self, n=1500):
        try:
            with open(os.path.join(self.data_dir, "stderr.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


class Cluster:
    def __init__(self, base_dir, fsync, compaction_min, raft="repairing"):
        base = restartable_ports(3)
        ports = [base, base + 1, base + 2]
        addrs = ["127.0.0.1:%d" % p for p in ports]
        password = secrets.token_urlsafe(32)
        self.nodes = [Node(a, [b for b in addrs if b != a], os.path.join(base_dir, "n%d" % i),
                           fsync, password, compaction_min, raft) for i, a in enumerate(addrs)]

    def start(self):
        for n in self.nodes:
            n.spawn()
        for n in self.nodes:
            n.wait_ready()

    def kill_all(self):
        for n in self.nodes:  # SIGKILL all three back to back
            if n.proc is not None and n.proc.poll() is None:
                try:
                    os.killpg(n.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for n in self.nodes:
            n.kill()

    def wait_leader(self, timeout=20):
        def stable_leader():
            sts = [n.call("status") for n in self.nodes]
            leaders = [n for n, s in zip(self.nodes, sts) if s["state"] == 2]
            if len(leaders) == 1 and all(s["leader"] == leaders[0].addr for s in sts):
                ldr = sts[self.nodes.index(leaders[0])]
                if ldr["last_applied"] >= ldr["commit_idx"] > 1:
                    return leaders[0]
            return None
        try:
            return wait_until(stable_leader, timeout=timeout, interval=0.05, what="a stable leader", errors=False)
        except WaitTimeout:
            raise AssertionError("no stable leader: %r" % ([n.call("status") for n in self.nodes],)) from None

    def wait_all_have(self, keys, timeout=25):
        def none_missing():
            return not any(n.call("missing", keys=keys)["missing"] for n in self.nodes)
        try:
            wait_until(none_missing, timeout=timeout, interval=0.05, what="every acknowledged write", errors=False)
        except WaitTimeout:
            missing = {n.addr: n.call("missing", keys=keys)["missing"] for n in self.nodes}
            raise AssertionError("acknowledged writes missing after restart: %s; status=%r" % (
                {a: (len(m), m[:5]) for a, m in missing.items()}, [n.call("status") for n in self.nodes])) from None

    def simulate_power_loss(self, torn=40):
        """Cut every journal back to its last fdatasynced size plus a torn fragment of at most
        `torn` bytes (smaller than any client record), as if the unsynced page cache was lost."""
        report = {}
        for n in self.nodes:
            jpath = os.path.join(n.data_dir, "raft.journal")
            with open(os.path.join(n.data_dir, "durable.side"), "rb") as f:
                ino, durable = (int(x) for x in f.read().split())
            st = os.stat(jpath)
            if st.st_ino != ino:
                # killed between a compaction rename and the side-file update: the new file
                # was fully fsynced before the rename, nothing to cut
                report[n.addr] = 0
                continue
            keep = durable + min(max(st.st_size - durable, 0) // 2, torn)
            os.truncate(jpath, keep)
            report[n.addr] = st.st_size - keep
        return report


# --------------------------------------------------------------------------------------------- tests


def _stats(cluster):
    return {n.addr: n.call("stats") for n in cluster.nodes}


def _check_probes(stats, leader):
    for addr, s in stats.items():
        assert s["policy"] == "always"
        assert s["fdatasync"] > 0, (addr, s)
        assert s["send_dirty"] == 0, (addr, s)  # persist before send
        assert s["apply_not_durable"] == 0, (addr, s)  # nothing applied/acked before fsync
        assert s["sends"] > 0
    # group commit: far fewer log fsyncs than entries on the leader, done off its tick (the parallel disk write)
    ls = stats[leader.addr]
    assert ls["fdatasync"] < ls["journal"]["appends"] / 3, ls
    assert ls["journal"]["background_fdatasync"] > 0, ls


def _read_acked(node):
    try:
        with open(os.path.join(node.data_dir, "acked.log"), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [k.decode() for k in data.split(b"\n")[:-1]]  # complete lines only


def test_sigkill_and_simulated_power_loss_keep_every_acknowledged_write(tmp_path):
    """Round a: 400 async + 15 sync acknowledged writes, SIGKILL all three, restart.
    Round b: continuous write load with 100 in flight; SIGKILL all three in the middle of it, cut
    every journal back to its last fdatasync (plus a torn fragment) as a power loss would, restart.
    Every write acknowledged in either round must be on every node."""
    cluster = Cluster(str(tmp_path), fsync="always", compaction_min=150)
    try:
        cluster.start()
        leader = cluster.wait_leader()
        res = leader.call("write", prefix="a", n=400, sync_n=15, timeout=60)
        acked = res["acked"]
        assert len(acked) >= 300, res
        stats = _stats(cluster)
        print("round a stats:", json.dumps(stats))
        _check_probes(stats, leader)
        assert sum(s["journal"]["rewrites"] for s in stats.values()) > 3  # compactions ran
        cluster.kill_all()
        cluster.start()
        cluster.wait_all_have(acked)

        leader = cluster.wait_leader()
        leader.call("load", prefix="b", window=100)
        wait_until(lambda: len(_read_acked(leader)) >= 1500, timeout=30, interval=0.02,
                   what="1500 acknowledged writes", errors=False)
        stats = _stats(cluster)  # taken under load
        cluster.kill_all()
        acked_b = _read_acked(leader)
        assert len(acked_b) >= 1500
        print("round b stats:", json.dumps(stats))
        _check_probes(stats, leader)
        cut = cluster.simulate_power_loss()
        print("round b: %d acked under load; simulated page-cache loss, bytes cut per node: %s"
              % (len(acked_b), cut))
        assert all(os.path.exists(os.path.join(n.data_dir, "raft.dump")) for n in cluster.nodes)
        cluster.start()
        cluster.wait_all_have(acked + acked_b)
        print("after restart:", json.dumps({a: s["journal"] for a, s in _stats(cluster).items()}))
    finally:
        cluster.kill_all()


def test_fsync_never_does_not_sync_and_loses_writes_on_simulated_power_loss(tmp_path):
    """Control: with fsync=never the probes fire and the same simulated power loss loses acknowledged
    writes, so the simulation can really lose data and the assertions above are not vacuous."""
    cluster = Cluster(str(tmp_path), fsync="never", compaction_min=100000)
    try:
        cluster.start()
        leader = cluster.wait_leader()
        res = leader.call("write", prefix="n", n=200, sync_n=5, timeout=60)
        acked = res["acked"]
        assert len(acked) >= 150, res
        stats = _stats(cluster)
        print("never stats: %s" % json.dumps(stats))
        for addr, s in stats.items():
            assert s["fdatasync"] == 0, (addr, s)
            assert s["journal"]["fdatasync"] == 0
        assert sum(s["send_dirty"] for s in stats.values()) > 0
        assert sum(s["apply_not_durable"] for s in stats.values()) > 0
        cluster.kill_all()
        cut = cluster.simulate_power_loss()
        print("never: bytes cut per node:", cut)
        assert all(v > 0 for v in cut.values())
        cluster.start()
        leader = cluster.wait_leader()
        commit = leader.call("status")["commit_idx"]
        wait_until(lambda: all(n.call("status")["last_applied"] >= commit for n in cluster.nodes), timeout=20,
                   interval=0.05, what="every node to catch up with the new leader", errors=False)
        for n in cluster.nodes:
            missing = n.call("missing", keys=acked)["missing"]
            assert len(missing) == len(acked), (n.addr, len(missing), len(acked))
    finally:
        cluster.kill_all()


def test_synced_data_is_on_disk_and_unsynced_tail_loss_is_clean(tmp_path):
    """File-level power-loss model: what sync() covered is in the file (read through another fd);
    an append that was not synced and whose pages are lost (file cut back, or zero-filled) comes
    back as "not there", with no error and no partial entry."""
    sys.path.insert(0, REPO)
    from schedd.replication.journal import DurableJournal
    from schedd.replication.journal_records import HEADER_SIZE

    path = str(tmp_path / "raft.journal")
    j = DurableJournal(path, dump_path=None, fsync="always", on_fatal=lambda e: None)
    entries = [(b"cmd-%d" % i * 7, i, 1) for i in range(1, 6)]
    for e in entries:
        j.add(*e)
    assert j.sync()
    synced_size = j.durable_size
    fd = os.open(path, os.O_RDONLY)  # separate fd
    try:
        on_disk = os.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)
    assert len(on_disk) == synced_size == os.path.getsize(path)
    assert all(e[0] in on_disk for e in entries)

    j.add(b"unsynced-entry" * 20, 6, 1)  # written to the page cache only
    assert j.dirty and j.durable_size == synced_size < os.path.getsize(path)
    full = open(path, "rb").read()
    j._destroy = lambda: None  # "power loss": the process never gets to close or sync

    variants = {
        "lost": full[:synced_size],
        "torn": full[:synced_size + 11],
        "zero_filled": full[:synced_size] + b"\0" * (len(full) - synced_size),
        "garbage_page": full[:synced_size] + os.urandom(len(full) - synced_size),
    }
    for name, data in variants.items():
        d = tmp_path / name
        d.mkdir()
        (d / "raft.journal").write_bytes(data)
        j2 = DurableJournal(str(d / "raft.journal"), dump_path=None, fsync="always",
                            on_fatal=lambda e: None)
        assert list(j2) == entries, name
        assert os.path.getsize(d / "raft.journal") == synced_size, name
        j2.add(b"after-recovery", 6, 2)
        j2.sync()
        j2._destroy()
        j3 = DurableJournal(str(d / "raft.journal"), dump_path=None, fsync="always")
        assert list(j3) == entries + [(b"after-recovery", 6, 2)], name
        j3._destroy()
    assert HEADER_SIZE < synced_size


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[1] == "node":
    node_main(json.loads(sys.argv[2]))
