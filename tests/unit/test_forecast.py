"""The herd forecast (schedd.core.forecast): its counts against a brute-force count that walks
every job's instants one by one, the grouping by team and pool, the peaks against the slots and
quotas, and the crowding warning a write returns."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd.core import forecast as F
from schedd.core import schedule as sched
from tests.support.properties import examples

T0 = 1_793_491_200_000                  # 2026-11-01T00:00:00Z
BERLIN_FALL = 1_792_890_000_000         # 2026-10-25T01:00:00Z: Berlin's clocks go back
SCHEDULES = ["* * * * *", "*/5 * * * *", "0 * * * *", "@hourly", "H * * * *", "H/15 * * * *", "30 2 * * *",
             "*/20 * * * * *", "0 0 * * *", "@every 90s", "@every 1500ms", "15,45 * * * *", "H H * * *",
             "0 */2 * * *", "@every 7s"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]
JITTERS = [0, 0, 999, 1500, 7000, 60_000]



def row(i: int, spec: str, tz: str = "UTC", jitter: int = 0, team: str = "a", pool: str = "") -> F.JobRow:
    return (f"job-{i}", team, pool, spec, tz, "", jitter)


jobs_strategy = st.lists(st.tuples(st.sampled_from(SCHEDULES), st.sampled_from(ZONES), st.sampled_from(JITTERS),
                                   st.sampled_from(["a", "b"]), st.sampled_from(["", "gpu"])),
                         min_size=1, max_size=40)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy, start=st.integers(0, 48 * 3600), length=st.integers(1, 3600),
       by=st.sampled_from(F.GROUPINGS))
def test_counts_match_a_brute_force_count(jobs, start, length, by):
    rows = [row(i, *j) for i, j in enumerate(jobs)]
    lo = BERLIN_FALL - 24 * 3_600_000 + start * 1000        # across a DST fold, now and then
    fc = F.compute(rows, lo, lo + length * 1000, by=by, top=3)
    expected = F.walk(rows, lo, lo + length * 1000)
    got: Counter = Counter()
    for g in fc.groups:
        for i, due in enumerate(g.series):
            if due:
                got[fc.from_ms // 1000 + i] += due
    assert got == expected
    assert fc.instants == sum(expected.values()) and fc.jobs == len(rows)
    if by == "":
        top = max(expected.values(), default=0)
        assert (fc.groups[0].peak_seconds[0].due if fc.groups[0].peak_seconds else 0) == top


def test_jobs_on_one_schedule_are_one_class_however_many():
    rows = [row(i, "0 * * * *") for i in range(5000)] + [row(5000 + i, "@hourly") for i in range(10)]
    fc = F.compute(rows, T0, T0 + 3 * 3_600_000)
    g = fc.groups[0]
    assert [p.due for p in g.peak_seconds] == [5010, 5010, 5010]
    assert [p.at_ms for p in g.peak_seconds] == [T0, T0 + 3_600_000, T0 + 7_200_000]   # the earliest first
    (c,) = g.peak_seconds[0].contributors                      # @hourly and 0 * * * * are the same instants
    assert c.jobs == 5010 and len(c.examples) == F.EXAMPLES


def test_jitter_spreads_the_herd_over_seconds():
    rows = [row(i, "0 * * * *", jitter=60_000) for i in range(6000)]
    fc = F.compute(rows, T0, T0 + 3_600_000, top=1)
    g = fc.groups[0]
    assert g.instants == 6000 and g.peak_seconds[0].due < 200
    assert g.peak_minutes[0].due == 6000 and g.peak_minutes[0].at_ms == T0


def test_by_team_and_by_pool_split_the_counts():
    rows = [row(i, "* * * * *", team="a", pool="gpu") for i in range(3)] + \
           [row(10 + i, "* * * * *", team="b") for i in range(2)]
    by_team = F.compute(rows, T0, T0 + 60_000, by="team")
    assert {(g.key, g.jobs, g.instants) for g in by_team.groups} == {("a", 3, 3), ("b", 2, 2)}
    by_pool = F.compute(rows, T0, T0 + 60_000, by="pool")
    assert {(g.key, g.instants) for g in by_pool.groups} == {("", 2), ("gpu", 3)}
    assert F.compute(rows, T0, T0 + 60_000).groups[0].instants == 5


def test_peaks_compare_with_the_slots_and_quota_that_serve_them():
    rows = [row(i, "0 0 * * *", pool="gpu") for i in range(100)] + [row(200 + i, "0 0 * * *") for i in range(10)]
    cap = F.Capacity(slots={"gpu": 64, "": 8}, quotas={"pool:gpu": 20})
    fc = F.compute(rows, T0, T0 + 3_600_000, by="pool", capacity=cap)
    gpu, anywhere = fc.group("gpu"), fc.group("")
    assert gpu is not None and anywhere is not None
    assert (gpu.slots, gpu.quota_key, gpu.quota) == (64, "pool:gpu", 20)
    assert gpu.peak_seconds[0].due == 100 and gpu.peak_seconds[0].over
    assert anywhere.slots == 72 and not anywhere.peak_seconds[0].over     # no pool: any worker's slots
    unknown = F.compute(rows, T0, T0 + 3_600_000, by="pool")
    assert unknown.groups[0].slots is None and not unknown.groups[0].peak_seconds[0].over


def test_crowding_warns_when_jobs_land_on_a_second_over_the_slots():
    lo, hi = T0 - 3_600_000, T0 + 23 * 3_600_000
    fc = F.compute([row(i, "0 0 * * *", pool="p") for i in range(1240)], lo, hi, by="pool", top=1)
    cap = F.Capacity(slots={"p": 64, "q": 1})

    def written(*rows: F.JobRow) -> F.Forecast:
        return F.compute(list(rows), lo, hi, by="pool", top=1)
    new = written(row(9000, "0 0 * * *", pool="p"))
    assert F.crowding(fc, new, cap, lo) == [
        "1,241 jobs due at 2026-11-01T00:00:00Z in pool p, 64 slots: add `jitter` or a window"]
    assert F.crowding(fc, new, cap, lo, counted=True)[0].startswith("1,240 jobs")
    assert F.crowding(fc, new, cap, T0 + 1000) == []                             # from a later moment on
    assert F.crowding(fc, written(row(9000, "30 0 * * *", pool="p")), cap, lo) == []
    assert F.crowding(fc, written(row(9000, "0 0 * * *", pool="q")), cap, lo) == []   # 1 due, 1 slot
    assert F.crowding(fc, new, F.Capacity(), lo) == []                                # slots unknown
    with pytest.raises(F.ForecastError):
        F.crowding(fc, F.compute([], lo, hi + 1000, by="pool"), cap, lo)


def test_jobs_written_since_the_forecast_count_for_the_next_warning():
    lo, hi = T0 - 3_600_000, T0 + 23 * 3_600_000
    fc = F.compute([row(0, "0 0 * * *", pool="p")], lo, hi, by="pool", top=1)
    cap = F.Capacity(slots={"p": 2, "q": 1})

    def written(*rows: F.JobRow) -> F.Forecast:
        return F.compute(list(rows), lo, hi, by="pool", top=1)
    a = written(row(1, "0 0 * * *", pool="p"))
    assert F.crowding(fc, a, cap, lo) == []                                   # 2 due, 2 slots
    F.count_in(fc, a)
    assert F.crowding(fc, written(row(2, "0 0 * * *", pool="p")), cap, lo)[0].startswith("3 jobs due at")
    F.count_in(fc, written(row(3, "0 0 * * *", pool="q")))                    # a pool the forecast had not
    assert F.crowding(fc, written(row(4, "0 0 * * *", pool="q")), cap, lo)[0].startswith("2 jobs due at")


@pytest.mark.parametrize("start, end, by, top, message", [
    (T0, T0, "", 5, "the window is empty"),
    (T0, T0 + 8 * 86_400_000, "", 5, "longer than 7 days"),
    (T0, T0 + 1000, "host", 5, "by must be team or pool"),
    (T0, T0 + 1000, "", 0, "top must be between 1 and 100"),
])
def test_bad_windows_are_refused_with_a_reason(start, end, by, top, message):
    with pytest.raises(F.ForecastError, match=message):
        F.compute([], start, end, by=by, top=top)


@pytest.mark.parametrize("spec", ["H * * * *", "H H * * *", "H/15 * * * *", "H(0-29) 3 * * *", "0 H(1-5)/2 * * MON"])
def test_hashed_jobs_grouped_by_their_fields_have_the_same_instants(spec):
    by_fields: dict[tuple[str, ...] | None, set] = {}
    for i in range(300):
        key = f"job-{i}"
        by_fields.setdefault(sched.hashed_fields(spec, key), set()).add(
            sched.instant_key(sched.parse(spec, "UTC", hash_key=key)))
    assert None not in by_fields and all(len(keys) == 1 for keys in by_fields.values())
    assert sched.hashed_fields("0 * * * *", "x") is None and sched.hashed_fields("@every 1h", "x") is None


def test_forecast_times_count_from_now_on_and_back_with_ago():
    from schedd_client._cli import _time_arg, time_arg
    ahead, now = time_arg(ahead=True), 1_000_000.0
    assert ahead("1h")(now) == ahead("+1h")(now) == (now + 3600) * 1000
    assert ahead("1h ago")(now) == ahead("-1h")(now) == _time_arg("1h")(now) == (now - 3600) * 1000
    assert ahead("now")(now) == now * 1000 and ahead("2026-11-01T00:00:00Z")(now) == T0


def test_schedctl_prints_the_forecast_with_the_peaks_against_the_slots():
    from schedd.api.forecasts import forecast_to_pb
    from schedd_client.forecast_commands import forecast_text
    rows = [row(i, "0 0 * * *", pool="p") for i in range(130)]
    fc = F.compute(rows, T0, T0 + 3_600_000, by="pool", top=1, capacity=F.Capacity(slots={"p": 64}))
    text = forecast_text(forecast_to_pb(fc, ""))
    assert "pool p: 130 jobs, 130 runs due; worker slots 64" in text
    seconds = text.split("busiest seconds:")[1].split("busiest minutes:")[0]
    assert "2026-11-01T00:00:00Z  130    2.0x the slots  130 x 0 0 * * * (UTC: job-0, job-1, job-2, ...)" in seconds


def test_a_large_table_is_read_in_parts_and_the_note_says_so(monkeypatch):
    import threading
    import types

    from schedd.api import forecasts
    from tests.support.state import Harness
    h = Harness()
    for i in range(5):
        h.put(name=f"j{i}", schedule="@every 60s", team="a" if i % 2 else "b")
    node = types.SimpleNamespace(lock=threading.RLock(), state=h.state)
    whole = forecasts.read_rows(node, None)
    assert sorted(whole.rows) == sorted(F.rows(h.state)) and len(whole.rows) == 5 and whole.note() == ""
    monkeypatch.setattr(forecasts, "READ_CHUNK", 2)
    parts = forecasts.read_rows(node, {"a"})
    assert sorted(parts.rows) == sorted(r for r in whole.rows if r[1] == "a") and parts.note() == ""
    assert "moved from index 3 to 9" in forecasts.Rows([], {}, 3, 9).note()
