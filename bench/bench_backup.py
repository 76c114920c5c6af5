"""Backup and restore at scale: how long `cluster snapshot save` and `schedd restore` take and how
big the file is, for a state of N jobs.

    python bench/bench_backup.py --jobs 100000 [--jobs 1000000] [--executions-per-job 1]
    python bench/bench_backup.py --cluster 100000      # a real 3-node cluster, end to end
    python bench/bench_backup.py --jobs 100000 --encodings   # plus: plain values vs the old pickle

The state is built in-process through SchedulerState.apply (bench_snapshot.register: put_many
entries as the API proposes them, plus one fire of every job when asked), then:
- save: what the leader does for Backup.SaveSnapshot after its barrier: fork under the node lock
  (the lock is held only for the fork: measured apart), the child encodes (plain values, JSON),
  compresses and hashes the image and computes the state digest; then the file is written as
  schedctl writes it (the signed header + body). The network stream is not included (a local gRPC stream moves ~1 GB/s).
- restore: `schedd restore` itself (schedd.runtime.restore.restore): read and check the file,
  decode the image, recompute the digest, check versions and the secret, seed the data dir (the
  pysyncobj dump + journal). Starting the node then loads that dump like any restart
  (bench_snapshot.py measures it).
- --encodings: the body in-process, plain values (this build) against the pickled
  columnar image of the builds before (format 5, what `pickle5+zlib1` bodies held; read back with
  an unrestricted pickle.loads, which is no slower than the restricted unpickler it had), and the
  pysyncobj snapshot (protocol 2 + gzip level 1, as the node writes its dump) at format 6 against 5.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench_snapshot import T0, register, rss_mb

import gzip
import io
import pickle
import zlib

from schedd.core import commands as C
from schedd.core.snapshot import SnapshotImage
from schedd.core.state import SchedulerState
from schedd.replication import backup
from schedd.runtime import config as config_mod
from schedd.runtime.daemon import tune_gc
from schedd.runtime.restore import restore
from schedd.security.backup_key import BackupKey
from schedd.versions import build_info
from schedd_client import snapshot_file


SECRET = "bench-backup-secret-Zt3kq9VxPw2LmN8rYb4HcJ6sFd1GaE5uTo7iKy0QeR"


def fire_all(st, rounds: int) -> None:
    """`rounds` fires of every job (one execution each), as the planner proposes them."""
    index = st.last_index
    for _ in range(rounds):
        due = sorted((j.next_fire, j.name) for j in st.jobs.values() if j.next_fire is not None)
        for i in range(0, len(due), 500):
            index += 1
            items = [[name, t] for t, name in due[i:i + 500]]
            st.apply(C.encode(C.FIRE, rid="", now=max(t for t, _ in due[i:i + 500]), term=1, items=items), index)


def save(st, tmp: str) -> tuple[str, dict]:
    lock = threading.RLock()
    body_path, out = os.path.join(tmp, "body.tmp"), os.path.join(tmp, "backup.snap")
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pending = backup.fork_image(st, lock, body_path)
    forked = time.perf_counter() - started
    info = pending.wait()
    child = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    b = build_info()
    meta = snapshot_file.SnapshotMeta(index=info.index, term=1, digest=info.digest, schedd_version=b.version,
                                      snapshot_format=b.snapshot_format, tzdata=b.tzdb, croniter=b.croniter,
                                      created_ms=T0, body_encoding=backup.BODY_ENCODING,
                                      body_length=info.length, body_sha256=info.sha256)
    with open(out, "wb") as f, open(body_path, "rb") as body:
        f.write(snapshot_file.encode_header(meta, BackupKey(SECRET).sign))
        shutil.copyfileobj(body, f, 1 << 20)
        f.flush()
        os.fsync(f.fileno())
    pending.discard()
    total = time.perf_counter() - started
    return out, {"fork_s": forked, "child_s": child, "child_cpu_s": child_cpu, "total_s": total, "size": os.path.getsize(out)}


def timed(fn):
    gc.collect()
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def old_body(st) -> bytes:
    """The body of the builds before the plain-value body: the pickled columnar image, zlib level 1."""
    return zlib.compress(pickle.dumps(SnapshotImage(st), protocol=pickle.HIGHEST_PROTOCOL), 1)


def restored(image) -> SchedulerState:
    state = SchedulerState()
    state.restore(image)
    return state


def at_level(st, level: int) -> None:
    st.feature_level, st._digest = level, None       # the format an image is written in follows it


def encodings(st) -> None:
    """Plain values vs the old pickle: body (backup) and pysyncobj dump, each written and read."""
    level = st.feature_level
    st.state_digest()
    for name, lv in (("old pickle (format 5)", 3), ("plain values (format 6)", 4)):
        at_level(st, lv)
        st.state_digest()                                          # cached, as a backup has it
        if lv == 3:
            body, enc = timed(lambda: old_body(st))
            _, dec = timed(lambda: restored(pickle.loads(zlib.decompress(body))))
        else:
            out = io.BytesIO()
            _, enc = timed(lambda: backup.encode_body(st, out))
            body = out.getvalue()
            _, dec = timed(lambda: backup.state_from_body(body))
        print(f"  backup body, {name}: encode {enc:.2f} s, decode + restore {dec:.2f} s, {len(body) / 1e6:.1f} MB")
        buf = io.BytesIO()

        def dump():
            with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1) as g:
                pickle.dump(SnapshotImage(st), g, protocol=2)
        _, enc = timed(dump)
        raw = buf.getvalue()
        _, dec = timed(lambda: restored(pickle.loads(gzip.decompress(raw))))
        print(f"  pysyncobj dump, {name}: write {enc:.2f} s, load + restore {dec:.2f} s, {len(raw) / 1e6:.1f} MB")
    at_level(st, level)


def real_cluster(n: int) -> None:
    """A real 3-node cluster (TLS, ACL) with `n` jobs registered through the API: `schedctl cluster
    snapshot save` as the SDK does it, then `schedd restore` of all three nodes of a new cluster
    (side by side) and the time until it has a leader with the state loaded."""
    import subprocess
    from schedd.runtime.cluster import LocalCluster
    from schedd_client import job_spec
    tmp = tempfile.mkdtemp(prefix="schedd-bench-backup-cluster-")
    src = dst = None
    try:
        src = LocalCluster(os.path.join(tmp, "src"), size=3)
        src.start()
        src.wait_leader(timeout=120)
        started = time.perf_counter()
        with src.client(timeout=120) as client:
            for i in range(0, n, 5000):
                client.put_jobs([job_spec(f"job-{j:07d}", schedule="@every 1h", command="true")
                                 for j in range(i, min(n, i + 5000))])
            print(f"real cluster: {n:,} jobs registered in {time.perf_counter() - started:.0f} s")
            out = os.path.join(tmp, "backup.snap")
            started = time.perf_counter()
            meta = client.save_snapshot(out)
            print(f"  save (SDK, asked of any node): {time.perf_counter() - started:.1f} s, index {meta.index}, "
                  f"{os.path.getsize(out) / 1e6:.1f} MB")
        src.stop()
        os.makedirs(os.path.join(tmp, "dst"))
        shutil.copy(os.path.join(tmp, "src", "cluster.secret"), os.path.join(tmp, "dst", "cluster.secret"))
        dst = LocalCluster(os.path.join(tmp, "dst"), size=3, admin_token=src.admin_token)
        started = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-m", "schedd", "restore", "--from", out, "--config",
                                   str(node.config)], stdout=subprocess.DEVNULL) for node in dst.nodes.values()]
        assert all(p.wait() == 0 for p in procs)
        restored = time.perf_counter() - started
        dst.start()
        dst.wait_leader(timeout=300)
        print(f"  restore: 3 nodes side by side {restored:.1f} s; started to a leader with the state "
              f"{time.perf_counter() - started - restored:.1f} s more")
    finally:
        for c in (src, dst):
            if c is not None:
                c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, action="append", help="state sizes (repeatable; default 100000)")
    ap.add_argument("--executions-per-job", type=int, default=1)
    ap.add_argument("--encodings", action="store_true",
                    help="also compare the body and dump encodings, plain values vs the old pickle")
    ap.add_argument("--cluster", type=int, default=0, metavar="N",
                    help="instead: a real 3-node cluster with N jobs (save and restore end to end)")
    a = ap.parse_args()
    print(f"# {' '.join(sys.argv)}  (python {sys.version.split()[0]}, {os.cpu_count()} cpus)")
    tune_gc()
    if a.cluster:
        real_cluster(a.cluster)
        return
    for n in a.jobs or [100_000]:
        tmp = tempfile.mkdtemp(prefix="schedd-bench-backup-")
        try:
            st, _, _ = register(n)
            fire_all(st, a.executions_per_job)
            print(f"{n:,} jobs, {len(st.execs):,} executions (RSS {rss_mb():,.0f} MB)")
            if a.encodings:
                encodings(st)
            path, s = save(st, tmp)
            print(f"  save: {s['total_s']:.1f} s (fork under the lock {s['fork_s'] * 1e3:.0f} ms; the child's "
                  f"encode + zlib + sha256 + digest {s['child_s']:.1f} s, {s['child_cpu_s']:.1f} s CPU), file {s['size'] / 1e6:.1f} MB "
                  f"({s['size'] / n:.0f} B/job)")
            del st
            gc.collect()
            cfg = config_mod.from_dict({"node_id": "n1", "data_dir": os.path.join(tmp, "n1"),
                                        "raft_address": "127.0.0.1:1", "grpc_address": "127.0.0.1:2",
                                        "secret": SECRET})
            started, cpu = time.perf_counter(), time.process_time()
            done, notes = restore(path, cfg)
            rest, rest_cpu = time.perf_counter() - started, time.process_time() - cpu
            dump = os.path.getsize(os.path.join(tmp, "n1", "raft.dump"))
            print(f"  restore: {rest:.1f} s, {rest_cpu:.1f} s CPU (read + check + decode + digest + seed), {done.jobs:,} jobs; "
                  f"seeded dump {dump / 1e6:.1f} MB{'; ' + '; '.join(notes) if notes else ''}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            gc.collect()


if __name__ == "__main__":
    main()
