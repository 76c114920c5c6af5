"""How long a follower's Raft tick thread is held per tick under load, and
what holds it: a real 3-node cluster (TLS, fsync always) and the recording worker, `--fires`
@every-1s jobs firing, and one small PutJob every `1 / --puts` s from one client.

For each follower over the window: the tick's hold (its wall time less the poll's wait for a
message: schedd_raft_tick_seconds{part="held"}), the tick thread's CPU over the tick (part="cpu")
and each part (messages, apply, fdatasync, sending, gc, ...), p50/p99 as histogram buckets and
the exact largest; the ticks the node logged as held 100 ms or more (`raft tick held`), with
their parts and CPU; and the tick thread's own scheduler figures from
/proc/<pid>/task/<tid>/schedstat: CPU, and time runnable but waiting for a core (run delay). A
hold far above the thread's CPU, with the difference in run delay, is the host (cores busy), not
the thread's work. The client side: PutJob latency p50/p99/max (the commit needs the leader and
one follower).

    python bench/bench_follower_hold.py [--fires 100 1000] [--puts 20] [--window 20]
        [--pyspy DIR]     # py-spy record (raw, --threads --idle) of one follower per row
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._metrics import Hist, fmt_bucket, percentile, scrape, table, value
from bench._schedd import running
from schedd_client import job_spec

PARTS = ("held", "cpu", "messages", "apply", "fdatasync", "sending", "gc", "rest (tick callbacks)")
HELD = re.compile(r"raft tick held (\d+) ms \(cpu (\d+) ms, as (\w+)\): (.*?)(?:; \d+ such ticks since start)?$")


def tick_tid(pid: int) -> int | None:
    """The OS thread id of pysyncobj's tick thread (py-spy dump names each thread's stack)."""
    try:
        out = subprocess.run(["py-spy", "dump", "-p", str(pid)], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    tid = None
    for line in out.splitlines():
        m = re.match(r"Thread (0x[0-9A-Fa-f]+|\d+)", line)
        if m:
            tid = int(m.group(1), 0)
        elif "_autoTickThread" in line and tid is not None:
            return tid if tid < 1 << 32 else None    # a pthread address, not an OS id
    return None


def schedstat(pid: int, tid: int | None) -> tuple[float, float]:
    """(CPU seconds, seconds runnable waiting for a core) of one thread (every thread of the
    process if None; threads that ended meanwhile are missed)."""
    paths = [Path(f"/proc/{pid}/task/{tid}/schedstat")] if tid else list(Path(f"/proc/{pid}/task").glob("*/schedstat"))
    cpu = delay = 0
    for path in paths:
        try:
            c, d = path.read_text().split()[:2]
        except (OSError, ValueError):
            if tid:
                return math.nan, math.nan
            continue
        cpu, delay = cpu + int(c), delay + int(d)
    return cpu / 1e9, delay / 1e9


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def putter(s, rate: float, stop: threading.Event, lat: list[float], errors: list[str]) -> None:
    i, t_next = 0, time.monotonic()
    while not stop.is_set():
        t_next += 1 / rate
        t = time.perf_counter()
        try:
            s.client.put_job(job_spec(f"small-{i}", schedule="@every 3600s", python="rec"))
            lat.append(time.perf_counter() - t)
        except Exception as e:  # noqa: BLE001 - counted and shown
            errors.append(type(e).__name__)
        i += 1
        time.sleep(max(0.0, t_next - time.monotonic()))


def hog() -> None:
    """Another session's busy process (the shared machine the slow holds were seen on)."""
    while True:
        sum(i * i for i in range(10_000))


def io_hog(path: str) -> None:
    """Another session's disk writer: 1 MiB written and fsynced, over and over."""
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        while True:
            f.seek(0)
            f.write(block)
            f.flush()
            os.fsync(f.fileno())


def one_row(fires: int, puts: float, window: float, pyspy: Path | None, hogs: int, gil: list[str],
            io_hogs: int = 0, blocking: bool = False) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-hold-") as root, running(Path(root)) as s:
        s.put([job_spec(f"f{i}", schedule="@every 1s", python="rec") for i in range(fires)])
        lead = s.c.leader()
        followers = {n: p for n, p in s.c.nodes.items() if n != lead}
        tids = {n: tick_tid(p.pid) for n, p in followers.items()}
        time.sleep(5)                                  # the fires under way
        hogging = [subprocess.Popen(["timeout", str(int(window) + 60), sys.executable, "-c",   # never outlive us
                                     "from bench.bench_follower_hold import hog; hog()"],
                                    cwd=Path(__file__).resolve().parent.parent) for _ in range(hogs)]
        hogging += [subprocess.Popen(["timeout", str(int(window) + 60), sys.executable, "-c",
                                      f"from bench.bench_follower_hold import io_hog; io_hog({str(Path(root) / f'io{i}')!r})"],
                                     cwd=Path(__file__).resolve().parent.parent) for i in range(io_hogs)]
        offsets = {n: p.log.stat().st_size for n, p in followers.items()}
        before = {n: scrape(p.metrics, ca=s.c.metrics_ca) for n, p in followers.items()}
        sched0 = {n: schedstat(p.pid, tids[n]) for n, p in followers.items()}
        proc0 = {n: schedstat(p.pid, None) for n, p in followers.items()}
        cpu0 = s.cpu()
        rec0 = s.records.stat().st_size if s.records.exists() else 0
        load0 = loadavg()
        stop, lat, errors = threading.Event(), [], []
        th = threading.Thread(target=putter, args=(s, puts, stop, lat, errors), daemon=True)
        spy = None
        spied = next(iter(followers))
        if pyspy is not None:
            pyspy.mkdir(parents=True, exist_ok=True)
            spy = subprocess.Popen(["py-spy", "record", "-p", str(followers[spied].pid), "--threads", *gil,
                                    *([] if blocking else ["--nonblocking"]),   # else it stops the process per sample
                                    "--idle", "-r", "200", "-d", str(int(window)), "--format", "raw",
                                    "-o", str(pyspy / f"follower-{fires}fires-{hogs}hogs.txt")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.monotonic()
        th.start()
        time.sleep(window)
        stop.set()
        th.join(30)
        took = time.monotonic() - t0
        for h in hogging:
            h.terminate()           # timeout passes it on to the hog
            h.wait()
        if spy is not None:
            spy.wait(60)
        after = {n: scrape(p.metrics, ca=s.c.metrics_ca) for n, p in followers.items()}
        sched1 = {n: schedstat(p.pid, tids[n]) for n, p in followers.items()}
        proc1 = {n: schedstat(p.pid, None) for n, p in followers.items()}
        cpu1 = s.cpu()
        fired = len(read_from(s.records, rec0)) if s.records.exists() else 0
        load1 = loadavg()
        cpu = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
        print(f"\n{fires} fires/s (@every 1s) + {puts:g} PutJob/s for {took:.1f} s ({fired / took:.0f} "
              f"fires/s recorded), {hogs} CPU hogs, {io_hogs} disk writers"
              f"{'' if pyspy is None else ', py-spy ' + ('blocking' if blocking else 'nonblocking')}; leader {lead}; load average {load0} before, "
              f"{load1} after; {os.cpu_count()} cores")
        print("  CPU-s/s by process: " + ", ".join(f"{k} {v / took:.2f}" for k, v in sorted(cpu.items()))
              + f" (sum {sum(cpu.values()) / took:.2f})")
        print(f"  PutJob: {len(lat)} ok, {len(errors)} failed; latency p50 {fmt_ms(percentile(lat, 0.5))}, "
              f"p99 {fmt_ms(percentile(lat, 0.99))}, max {fmt_ms(max(lat) if lat else None)}")
        for n, p in followers.items():
            rows = []
            for part in PARTS:
                h = Hist.of(after[n], "schedd_raft_tick_seconds", part=part) - \
                    Hist.of(before[n], "schedd_raft_tick_seconds", part=part)
                if h.count <= 0:
                    continue
                top = value(after[n], "schedd_raft_tick_max_seconds", part=part)
                rows.append([part, f"{h.count:.0f}", fmt_bucket(h.quantile(0.5)), fmt_bucket(h.quantile(0.99)),
                             f"{h.share_at_most(0.1) * 100:.2f}%", fmt_ms(h.sum) if h.sum else "-",
                             fmt_ms(top)])
            tc, td = (a - b for a, b in zip(sched1[n], sched0[n]))
            pc, pd = (a - b for a, b in zip(proc1[n], proc0[n]))
            print(f"  follower {n} (pid {p.pid}, tick thread {tids[n]}): tick thread CPU {tc / took:.3f} s/s, "
                  f"run delay {td / took:.3f} s/s; whole process CPU {pc / took:.2f} s/s, run delay {pd / took:.2f} s/s")
            h = Hist.of(after[n], "schedd_raft_tick_seconds", part="held") - \
                Hist.of(before[n], "schedd_raft_tick_seconds", part="held")
            c = Hist.of(after[n], "schedd_raft_tick_seconds", part="cpu") - \
                Hist.of(before[n], "schedd_raft_tick_seconds", part="cpu")
            if h.sum is not None and c.sum is not None:
                print(f"    ticks held it {h.sum:.2f} s: its CPU {c.sum:.2f} s, runnable without a core at most "
                      f"{td:.2f} s, so blocked (the GIL, the disk, a lock) at least {h.sum - c.sum - td:.2f} s")
            print(table(["part", "ticks", "p50", "p99", "<=100ms", "sum", "max (since start)"], rows, indent="    "))
            long = [HELD.search(line) for line in read_from(p.log, offsets[n])]
            long = [m for m in long if m]
            n_long = sum(h.count - h.share_at_most(0.1) * h.count for h in [
                Hist.of(after[n], "schedd_raft_tick_seconds", part="held")
                - Hist.of(before[n], "schedd_raft_tick_seconds", part="held")] if h.count)
            print(f"    ticks held over 100 ms in the window: {n_long:.0f} (logged, at most one a second: {len(long)})")
            for m in sorted(long, key=lambda m: -int(m.group(1)))[:5]:
                print(f"      held {m.group(1)} ms, cpu {m.group(2)} ms: {m.group(4)}")
        if spy is not None:
            out = pyspy / f"follower-{fires}fires-{hogs}hogs.txt"
            print(f"  py-spy raw profile of follower {spied}: {out}")
            print(spy_summary(out, tids[spied]))


def spy_summary(path: Path, tid: int | None, top: int = 12) -> str:
    """The tick thread's samples in a py-spy raw profile: waiting in its poll (idle), and the
    rest by innermost frame."""
    by_leaf: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        m = re.match(r"thread \((\d+)\): ([^;]*);(.*) (\d+)$", line)
        if not m or (tid is not None and int(m.group(1)) != tid) or "_autoTickThread" not in m.group(3):
            continue
        n = int(m.group(4))
        total += n
        frames = m.group(3).split(";")
        leaf = "waiting in the poll" if "_TimedWait.poll" in frames[-1] else frames[-1]
        by_leaf[leaf] = by_leaf.get(leaf, 0) + n
    if not total:
        return "    (no tick thread samples)"
    lines = [f"    tick thread: {total} samples"]
    for leaf, n in sorted(by_leaf.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    {n / total * 100:5.1f}%  {leaf}")
    return "\n".join(lines)


def read_from(path: Path, offset: int) -> list[str]:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fires", type=int, nargs="+", default=[100, 1000], help="@every-1s jobs per row")
    ap.add_argument("--puts", type=float, default=20.0, help="single small PutJob calls per second")
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--pyspy", type=Path, default=None, help="folder for py-spy raw profiles")
    ap.add_argument("--gil", action="store_true",
                    help="py-spy keeps only the samples of a thread holding the GIL (--gil)")
    ap.add_argument("--spy-blocking", action="store_true",
                    help="py-spy's default mode (it stops the follower for each sample) instead of --nonblocking")
    ap.add_argument("--io-hogs", type=int, default=0,
                    help="processes writing and fsyncing 1 MiB in a loop on the cluster's disk")
    ap.add_argument("--hogs", type=int, nargs="+", default=[0],
                    help="busy processes beside the cluster during the window (each value: a row)")
    args = ap.parse_args()
    if args.pyspy is not None and shutil.which("py-spy") is None:
        ap.error("py-spy is not installed")
    for hogs in args.hogs:
        for fires in args.fires:
            one_row(fires, args.puts, args.window, args.pyspy, hogs, ["--gil"] if args.gil else [],
                    args.io_hogs, args.spy_blocking)


if __name__ == "__main__":
    main()
