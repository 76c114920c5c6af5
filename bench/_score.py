"""Scoring shared by every system the bench measures (schedd and the peers), so a figure means the
same in every column.

A fire is one record ``(start, job, scheduled)`` written by the handler's first statement.
lateness = start - scheduled (the scheduled time the system hands the handler; a peer that hands
none gets its job's grid instant at or before the start, see `grid_instant`); missed = instants
that should have started in the window and did not; duplicated = an instant started twice.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench._metrics import percentile


@dataclass(slots=True, frozen=True)
class Fire:
    start: float       # wall clock, seconds
    job: str
    scheduled: float   # wall clock, seconds


def parse_time(text: str) -> float:
    """A scheduled time as a record carries it: epoch seconds, or RFC 3339 (shell handlers)."""
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def read_fires(path: Path, offset: int = 0) -> tuple[list[Fire], int]:
    """Complete record lines of `path` from byte `offset`; returns them and the next offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].decode().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append(Fire(float(parts[0]), parts[1], parse_time(parts[2])))
    return out, offset + end


def grid_instant(start: float, phase: float, period: float) -> float:
    """The instant of a job firing every `period` s at offset `phase` that a start belongs to
    (the last one at or before it): for a peer whose handler is not told its scheduled time."""
    return start - ((start - phase) % period)


def periodic_expected(jobs: dict[str, float], period: int, a: float, b: float) -> set[tuple[str, float]]:
    """Every (job, instant) due in [a, b) for jobs {name: phase}, firing at phase + k * period."""
    out = set()
    for job, phase in jobs.items():
        first = phase + math.ceil((a - phase) / period) * period
        t = first
        while t < b:
            out.add((job, round(t, 3)))
            t += period
    return out


def score(fires: list[Fire], expected: set[tuple[str, float]]) -> dict:
    """Lateness p50/p99/max, missed, duplicated over the expected instants."""
    seen = Counter((f.job, round(f.scheduled, 3)) for f in fires)
    lat = [f.start - f.scheduled for f in fires if (f.job, round(f.scheduled, 3)) in expected]
    started = {k for k in seen if k in expected}
    starts = [f.start for f in fires if (f.job, round(f.scheduled, 3)) in expected]
    return {
        "expected": len(expected),
        "started": len(started),
        "missed": len(expected) - len(started),
        "duplicated": sum(n - 1 for k, n in seen.items() if n > 1 and k in expected),
        "p50_s": percentile(lat, 0.5),
        "p99_s": percentile(lat, 0.99),
        "max_s": max(lat) if lat else None,
        "last_start": max(starts) if starts else None,
    }
