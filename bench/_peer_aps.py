"""APScheduler 3.11 as the bench's peer: runs INSIDE the peers' venv (bench/.peers-venv), so it
imports nothing of schedd; one process, a BackgroundScheduler with its defaults (a thread pool of
10, misfire_grace_time 1 s, coalesce on) and a memory or SQLite (SQLAlchemy) job store, as a
user would start it.

    .peers-venv/bin/python bench/_peer_aps.py '<spec as JSON>'     -> one JSON line on stdout

The handler records each fire with its first statement, like schedd's (bench/_recworker.py):
``start job scheduled`` lines in spec["records"]. APScheduler does not hand a job its scheduled
time, so the record carries the job's grid instant at or before the start (its phase plus a
whole number of periods; a one-off's due time). The parent scores (bench/_score.py).
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import subprocess
import sys
import threading
import time
from datetime import datetime, UTC

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger

_buf: list[str] = []
_fired = [0]              # fires so far (a herd stops waiting once every job has started)
SHELL = 'printf "%s %s %s\\n" "$EPOCHREALTIME" "$1" "$2" >> "$3"'


def fire(name: str, phase: float, period: float) -> None:
    t = time.time()                          # the handler's first statement
    sched = t - ((t - phase) % period) if period else phase
    _buf.append(f"{t:.6f} {name} {sched:.3f}\n")
    _fired[0] += 1


def fire_shell(name: str, phase: float, period: float, records: str) -> None:
    """The shell variant: the record is written by the child shell's first command (fork/exec
    included in the lateness, as with schedd's shell handler)."""
    sched = time.time()
    sched = sched - ((sched - phase) % period) if period else phase
    subprocess.run(["bash", "-c", SHELL, "rec", name, f"{sched:.3f}", records], check=False)


def flusher(path: str, stop: threading.Event) -> None:
    with open(path, "a") as f:
        while not stop.wait(0.2):
            flush(f)
        flush(f)


def flush(f) -> None:
    if _buf:
        chunk = _buf[:]
        del _buf[:len(chunk)]
        f.write("".join(chunk))
        f.flush()


def cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def scheduler(spec: dict, db: str | None = None) -> BackgroundScheduler:
    if spec["store"] == "sqlite":
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
        db = db or spec["db"]
        return BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db}")},
                                   timezone=UTC)
    return BackgroundScheduler(timezone=UTC)


def add_periodic(s: BackgroundScheduler, i: int, period: int, shell: str = "") -> None:
    phase = i % period
    second = "*" if period == 1 else f"{phase}/{period}"
    args = [f"j{i}", float(phase), float(period)] + ([shell] if shell else [])
    s.add_job(fire_shell if shell else fire, CronTrigger(second=second, timezone=UTC),
              args=args, id=f"j{i}")


def until(t: float) -> None:
    while (d := t - time.time()) > 0:
        time.sleep(min(d, 0.5))


def add_rate(spec: dict, n: int = 200) -> float:
    """Jobs/s this store takes (a throwaway store of the same kind): how far ahead a herd is due."""
    db = spec["db"] + ".probe" if spec["store"] == "sqlite" else None
    s = scheduler(spec, db)
    s.start()
    t = time.perf_counter()
    for i in range(n):
        s.add_job(fire, DateTrigger(datetime.fromtimestamp(time.time() + 3600, UTC)),
                  args=[f"p{i}", 0.0, 0.0], id=f"p{i}")
    rate = n / (time.perf_counter() - t)
    s.shutdown(wait=False)
    if db:
        os.unlink(db)
    return rate


def run(spec: dict) -> dict:
    logging.getLogger("apscheduler").setLevel(logging.CRITICAL)   # its misfire warnings cost CPU on stderr
    kind = spec["kind"]
    stop = threading.Event()
    if spec.get("records"):
        threading.Thread(target=flusher, args=(spec["records"], stop), daemon=True).start()
    out: dict = {}
    if kind == "periodic":
        # Jobs are added before start() (APScheduler adds its pending jobs at start): adding them to
        # a running SQLite scheduler competes with its own updates of the jobs already due.
        s = scheduler(spec)
        t = time.perf_counter()
        for i in range(spec["jobs"]):
            add_periodic(s, i, spec["period"], spec["records"] if spec.get("shell") else "")
        s.start()
        out["register_s"] = time.perf_counter() - t
        a = math.ceil(time.time()) + 2.0
        b = a + spec["duration"]
        until(a)
        c0 = cpu()
        until(b)
        out["cpu_s"] = cpu() - c0
        out["window"] = [a, b]
        until(b + spec.get("settle", 3.0))
        s.shutdown(wait=False)
    elif kind == "oneoff":
        n = spec["jobs"]
        lead = 3.0 + 1.5 * n / add_rate(spec, min(n, 200))
        due = math.ceil(time.time() + lead)
        s = scheduler(spec)
        s.start()
        when = datetime.fromtimestamp(due, UTC)
        for i in range(n):
            s.add_job(fire, DateTrigger(when), args=[f"j{i}", float(due), 0.0], id=f"j{i}")
        out["due"] = due
        out["registered_before_due_s"] = due - time.time()
        end = due + spec["settle"]
        while time.time() < end and _fired[0] < n:
            time.sleep(0.1)
        s.shutdown(wait=False)
    elif kind == "register":
        s = scheduler(spec)
        s.start()
        t = time.perf_counter()
        for i in range(spec["jobs"]):
            s.add_job(fire, CronTrigger(hour=3, minute=i % 60, timezone=UTC),
                      args=[f"j{i}", 0.0, 0.0], id=f"j{i}")
        out["jobs_per_s"] = spec["jobs"] / (time.perf_counter() - t)
        s.shutdown(wait=False)
    elif kind == "memory":
        s = scheduler(spec)
        s.start()
        time.sleep(0.5)
        r0 = rss()
        for i in range(spec["jobs"]):
            s.add_job(fire, CronTrigger(hour=3, minute=i % 60, timezone=UTC),
                      args=[f"j{i}", 0.0, 0.0], id=f"j{i}")
        time.sleep(0.5)
        out["rss_per_job"] = (rss() - r0) / spec["jobs"]
        if spec["store"] == "sqlite":
            out["db_bytes_per_job"] = os.path.getsize(spec["db"]) / spec["jobs"]
        s.shutdown(wait=False)
    stop.set()
    time.sleep(0.3)
    return out


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)
