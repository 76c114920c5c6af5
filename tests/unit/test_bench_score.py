"""The yardstick's scoring (bench/_score.py), the same for schedd and the peers: which instants a
window expects, what counts as missed, duplicated and late."""

from __future__ import annotations

from bench._score import Fire, grid_instant, parse_time, periodic_expected, read_fires, score


def test_periodic_expected_is_every_instant_of_the_window_per_phase():
    got = periodic_expected({"a": 0.0, "b": 3.0}, 10, 100.0, 130.0)
    assert got == {("a", 100.0), ("a", 110.0), ("a", 120.0), ("b", 103.0), ("b", 113.0), ("b", 123.0)}
    assert periodic_expected({"a": 0.0}, 10, 100.5, 110.0) == set()      # [a, b): 110 is outside


def test_score_counts_missed_duplicated_and_lateness_of_expected_instants_only():
    expected = {("a", 10.0), ("a", 20.0), ("b", 10.0)}
    fires = [Fire(10.002, "a", 10.0), Fire(10.5, "a", 10.0),      # twice
             Fire(10.010, "b", 10.0),
             Fire(30.0, "a", 30.0)]                                  # outside the window: ignored
    out = score(fires, expected)
    assert (out["expected"], out["started"], out["missed"], out["duplicated"]) == (3, 2, 1, 1)
    assert abs(out["max_s"] - 0.5) < 1e-9 and out["last_start"] == 10.5


def test_grid_instant_and_scheduled_times_as_records_carry_them(tmp_path):
    assert grid_instant(123.4, 3.0, 10.0) == 123.0 and grid_instant(122.9, 3.0, 10.0) == 113.0
    assert parse_time("1700000000.5") == 1700000000.5
    assert parse_time("2023-11-14T22:13:20Z") == 1700000000.0          # a shell handler's SCHEDD_SCHEDULED_TIME
    path = tmp_path / "r.txt"
    path.write_text("1.5 a 1.0\n2.5 b 2023-11-14T22:13:20Z\n3.5 c")      # the last line is not complete yet
    fires, offset = read_fires(path)
    assert [f.job for f in fires] == ["a", "b"] and offset == len("1.5 a 1.0\n2.5 b 2023-11-14T22:13:20Z\n")
    more, _ = read_fires(path, offset)
    assert more == []
