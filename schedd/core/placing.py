"""What a window's placement reads: the runs of exact-time jobs due in each second of the
window, by the herd forecast (schedd.core.forecast), calendars and blackouts counted as they will
decide; the choice itself is schedd.core.windows.plan. Apart from windows.py so that the
decisions (calendars, which windows.py serves) never import the forecast that counts by them.

Pure: the leader reads the rows and the book under the node lock, in parts, and runs
`place_all` off its event loop (schedd.leader.placer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from schedd.core import calendars as cal
from schedd.core import forecast
from schedd.core.tables import Tables
from schedd.core.windows import Want, plan


def place_all(job_rows: Sequence[forecast.JobRow], wants: Sequence[Want],
              window_taken: Mapping[tuple[str, int, int], Mapping[int, int]],
              book: cal.Book = forecast.NO_BOOK) -> list[list[object]]:
    """`plan` with the exact-time load counted from `job_rows`: the leader's whole choice, run off
    its event loop (the forecast walks every job's schedule; the choice is about 60 us a job)."""
    return plan(wants, exact_load(job_rows, wants, book), window_taken)


def exact_rows(st: Tables, names: Iterable[str] | None = None) -> list[forecast.JobRow]:
    """The forecast's rows of the jobs with exact times, all or those of `names` (window jobs
    are counted where they are placed, `taken`; call under the node lock)."""
    windowed = st.windowed
    return [row for row in forecast.rows(st, names) if row[0] not in windowed]


def exact_load(job_rows: Sequence[forecast.JobRow], wants: Iterable[Want],
               book: cal.Book = forecast.NO_BOOK) -> dict[tuple[str, int, int], list[int]]:
    """Runs of exact-time jobs due per second of each wanted window, by pool: one forecast per
    distinct window (off the node lock: it walks every job's schedule)."""
    keys: dict[tuple[int, int], set[str]] = {}
    for w in wants:
        keys.setdefault((w.lo, w.hi), set()).add(w.pool)
    out: dict[tuple[str, int, int], list[int]] = {}
    for (lo, hi), pools in sorted(keys.items()):
        fc = forecast.compute(job_rows, lo, hi, by="pool", top=1, book=book)
        for pool in pools:
            g = fc.group(pool)
            out[(pool, lo, hi)] = g.series if g is not None else []
    return out
