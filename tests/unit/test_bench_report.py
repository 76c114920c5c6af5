"""`python -m bench --report FILE`: the table of JSON lines already written (an interrupted run's,
or runs of one code made at different times), medians over the runs each row has, one code only."""

from __future__ import annotations

import json

import pytest

from bench.cli import main, report


def line(code: str, run: int, p50: float, mode: str = "full", system: str = "schedd") -> dict:
    return {"ts": "2026-12-02T01:34:00+00:00", "mode": mode, "machine": "vm: 2 CPUs", "code": code,
            "peers": "APScheduler 3.11.3", "workload": "steady-100", "system": system, "run": run,
            "params": {}, "elapsed_s": 60.0, "p50_s": p50, "p99_s": 0.004, "missed": 0, "duplicated": 0,
            "expected": 6000, "started": 6000, "cpu_s": 15.0, "window_s": 60}


def write(path, recs) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_the_median_and_spread_of_the_newest_codes_full_runs_only(tmp_path):
    f = tmp_path / "a.jsonl"
    write(f, [line("old", 1, 0.5), line("new", 1, 0.0011), line("new", 2, 0.0030), line("new", 3, 0.0012),
              line("new", 1, 0.9, mode="quick"), line("new", 1, 0.0080, system="aps-memory")])
    text = report([f])
    row = next(x for x in text.splitlines() if "100 fires/s: lateness p50" in x)
    assert "1.2 ms [1.1 ms..3.0 ms]" in row and "8.0 ms" in row       # not the old code's 500 ms
    assert "code new" in text and "MISSED" in row                    # 1.2 ms > the 1 ms target
    assert "4 runs (up to 3 per row)" in text


def test_another_code_by_name_and_a_clear_error_when_there_is_none(tmp_path):
    f = tmp_path / "a.jsonl"
    write(f, [line("old", 1, 0.0005), line("new", 1, 0.002)])
    row = next(x for x in report([f], "old").splitlines() if "lateness p50" in x)
    assert "500.0 us" in row or "0.5 ms" in row or "met" in row
    with pytest.raises(SystemExit, match="no full runs of code nope"):
        report([f], "nope")
    with pytest.raises(SystemExit, match="no quick runs"):
        main(["--report", str(f), "--quick"])
