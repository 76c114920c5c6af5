"""Helpers shared by the benchmarks (bench_cluster.py and the yardstick, ``python -m bench``):
scrape a node's Prometheus text, take histogram deltas and read bucketed percentiles, read a
process's RSS and CPU time from /proc, format durations and tables, register many jobs in capped
calls or one call each with many in flight, wait for a cluster's followers, name the code measured.

Percentiles from a histogram are bucket bounds, never interpolated: ``Hist.quantile(0.99)``
returns ``(lower, upper]``, the bucket holding the 99th-percentile observation.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def put_jobs_in_calls(client, specs: list, per_call: int = 5000):
    """Register `specs` in PutJobs calls of `per_call` (each atomic; a node caps one call at
    limits.max_jobs_per_call, 5,000 by default); returns the summed PutJobsResponse."""
    total = None
    for i in range(0, len(specs), per_call):
        r = client.put_jobs(specs[i:i + per_call])
        if total is None:
            total = r
        else:
            total.created += r.created
            total.updated += r.updated
    return total


async def put_jobs_one_each(addrs: list[str], security, specs: list, conc: int = 64, warm: str = ""):
    """One PutJob per spec with `conc` calls in flight (AsyncClient); returns (elapsed s, per-call
    latencies, Counter of errors). `warm`: a job to GetJob first, so channels are up."""
    from schedd_client import AsyncClient
    lat: list[float] = []
    errors: Counter = Counter()
    it = iter(specs)
    async with AsyncClient(addrs, security=security, timeout=30) as ac:
        if warm:
            await ac.get_job(warm)

        async def worker():
            for spec in it:
                t = time.perf_counter()
                try:
                    await ac.put_job(spec)
                except Exception as e:  # noqa: BLE001 - count and go on
                    errors[type(e).__name__ + ": " + str(e)[:120]] += 1
                lat.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        return time.perf_counter() - t0, lat, errors


def wait_caught_up(c, timeout: float = 60.0, until_wall: float | None = None) -> bool:
    """Until every live node of LocalCluster `c` has lag 0 and applied what the leader committed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (until_wall is None or time.time() < until_wall):
        infos = {n: c.node_info(n) for n, p in c.nodes.items() if p.alive()}
        leaders = [i for i in infos.values() if i is not None and i.role == "leader"]
        if leaders and all(i is not None for i in infos.values()):
            commit = max(i.commit_index for i in leaders)
            if all(i.lag == 0 and i.applied_index >= commit for i in infos.values()):
                return True
        time.sleep(0.2)
    return False


REPO = Path(__file__).resolve().parent.parent


def code_version() -> str:
    """HEAD and whether schedd/, client/ or worker/ differ from it: the nodes import the working
    tree at start, so a figure belongs to this code. Read-only (no optional index lock or refresh)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], env=env,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD", "--", "schedd", "client", "worker"],
                               env=env, capture_output=True, timeout=10).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return f"{head or 'unknown'}{' + uncommitted changes in schedd/, client/ or worker/' if dirty else ''}"


def scrape(address: str, timeout: float = 5.0, *, ca: str | None = None) -> Samples:
    """Every sample of ADDRESS/metrics, keyed by (sample name, sorted labels): over HTTPS trusting
    `ca` (a cluster with TLS serves its HTTP port so: LocalCluster.metrics_ca), else plain HTTP."""
    import ssl
    context = ssl.create_default_context(cafile=ca) if ca else None
    url = f"{'https' if ca else 'http'}://{address}/metrics"
    with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
        text = r.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str) -> float:
    """Sum of a sample over all its label sets (e.g. schedd_fired_total over triggers)."""
    return sum(v for (n, _), v in samples.items() if n == name)


@dataclass
class Hist:
    """A cumulative Prometheus histogram: (upper bound, cumulative count) pairs, sum and count."""

    buckets: list[tuple[float, float]]
    sum: float | None      # None: not exported (prometheus_client omits _sum when a bucket is negative)
    count: float

    @classmethod
    def of(cls, samples: Samples, name: str, **labels: str) -> Hist:
        want = tuple(sorted(labels.items()))
        buckets = []
        for (n, lab), v in samples.items():
            if n == name + "_bucket":
                le = dict(lab).get("le")
                rest = tuple((k, x) for k, x in lab if k != "le")
                if le is not None and rest == want:
                    buckets.append((float(le), v))
        buckets.sort()
        key = (name + "_sum", tuple(sorted(labels.items())))
        return cls(buckets, samples.get(key), value(samples, name + "_count", **labels))

    def __sub__(self, before: Hist) -> Hist:
        old = dict(before.buckets)
        sum_ = None if self.sum is None or before.sum is None else self.sum - before.sum
        return Hist([(le, c - old.get(le, 0.0)) for le, c in self.buckets], sum_, self.count - before.count)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count and self.sum is not None else None

    def quantile(self, q: float) -> tuple[float, float] | None:
        """(lower, upper] bounds of the bucket holding the q-quantile; None when empty."""
        if self.count <= 0:
            return None
        rank = max(1, math.ceil(q * self.count - 1e-9))
        lower = -math.inf
        for le, c in self.buckets:
            if c >= rank:
                return lower, le
            lower = le
        return lower, math.inf

    def max_bucket(self) -> tuple[float, float] | None:
        return self.quantile(1.0)

    def min_bucket(self) -> tuple[float, float] | None:
        """Bounds of the lowest non-empty bucket."""
        if self.count <= 0:
            return None
        lower = -math.inf
        for le, c in self.buckets:
            if c > 0:
                return lower, le
            lower = le
        return lower, math.inf

    def share_at_most(self, bound: float) -> float | None:
        """Fraction of observations <= bound (bound must be a bucket bound)."""
        if self.count <= 0:
            return None
        return dict(self.buckets).get(bound, 0.0) / self.count


# ------------------------------------------------------------------ processes


def rss_bytes(pid: int) -> int | None:
    """VmRSS of a process (bytes), None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> tuple[str, list[str]] | None:
    """A /proc .../stat file: the command name and the fields after it (None if it is gone)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    return head[head.index("(") + 1:], rest.split()


def cpu_seconds(pid: int, children: bool = False) -> float | None:
    """User + system CPU seconds of a process (with `children`: plus its reaped children's)."""
    stat = _stat(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat[1]
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _CLK_TCK


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """User + system CPU seconds of each thread of a process: {tid: (its name, seconds)}; the
    main thread's tid is the pid. Empty if the process is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    out: dict[int, tuple[str, float]] = {}
    for tid in tids:
        stat = _stat(f"/proc/{pid}/task/{tid}/stat")
        if stat is not None:                          # (None: the thread ended meanwhile)
            name, fields = stat
            out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / _CLK_TCK)
    return out


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on 127.0.0.1 a moment ago."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


# ------------------------------------------------------------------ formatting


def fmt_s(seconds: float | None, *, signed: bool = False) -> str:
    """A duration in the unit that reads best: 850 us, 12.3 ms, 1.42 s."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if seconds == math.inf:
        return "+inf"
    if seconds == -math.inf:
        return "-inf"
    sign = "+" if signed and seconds > 0 else ""
    a = abs(seconds)
    if a < 1e-3 and a != 0:
        return f"{sign}{seconds * 1e6:.0f} us"
    if a < 1:
        return f"{sign}{seconds * 1e3:.1f} ms"
    return f"{sign}{seconds:.2f} s"


def fmt_bound(b: float) -> str:
    if b in (math.inf, -math.inf):
        return fmt_s(b)
    if b == 0:
        return "0"
    a = abs(b)
    if a < 1:
        return f"{b * 1e3:g} ms"
    return f"{b:g} s"


def fmt_bucket(bounds: tuple[float, float] | None) -> str:
    """'<= 2 ms (1 ms, 2 ms]' for a bucket."""
    if bounds is None:
        return "-"
    lo, hi = bounds
    if hi == math.inf:
        return f"> {fmt_bound(lo)}"
    return f"<= {fmt_bound(hi)}" + (f" ({fmt_bound(lo)}..{fmt_bound(hi)}]" if lo != -math.inf else "")


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    a = abs(n)
    if a >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if a >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if a >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n:.0f} B"


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of raw values."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def timed_ms(fn: Callable[[], object], n: int) -> list[float]:
    """Milliseconds each of `n` calls of `fn` took, one after another."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def table(headers: list[str], rows: list[list[object]], indent: str = "  ") -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if n == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)
