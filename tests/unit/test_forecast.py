"""The herd forecast (schedd.core.forecast): its counts against a brute-force count that walks
every job's instants one by one, the grouping by team and pool, the peaks against the slots and
quotas, and the crowding warning a write returns."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd.core import calendars as cal
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



def row(i: int, spec: str, tz: str = "UTC", jitter: int = 0, team: str = "a", pool: str = "",
        rules: cal.Rules | None = None) -> F.JobRow:
    return (f"job-{i}", team, pool, spec, tz, "", jitter, rules or cal.Rules(team))


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


# ------------------------------------------------------------------ calendars and blackouts

DAY = 86_400_000
XMAS = 1_798_156_800_000                # 2026-12-25T00:00:00Z, a Friday
HOLIDAYS = cal.Calendar("hol", "", "", (("2026-12-25", "Christmas Day"), ("2026-12-26", "Boxing Day")), (),
                        (), (), 1, 0, "")
WEEKEND = cal.Calendar("weekend", "", "", (), (), (5, 6), (), 1, 0, "")
BUSINESS = cal.Calendar("business", "", "", (), (("2026-12-21", "2026-12-24", "Last week"),), (0, 1, 2, 3, 4), (),
                        1, 0, "")
BLACKOUTS = [cal.Blackout("freeze", XMAS + 3_600_000 + 30_000, XMAS + 5_400_000 + 500, "a", (), "release", 0, ""),
             cal.Blackout("prod", XMAS - 7_200_000, XMAS + 600_000, "", (("tier", "prod"),), "", 0, ""),
             cal.Blackout("late", XMAS + 20 * 3_600_000, XMAS + 20 * 3_600_000 + 90_000, "b", (), "", 0, "")]
RULES = [cal.Rules(), cal.Rules(skip=("hol",)), cal.Rules(skip=("hol", "weekend"), on_skip="next_allowed"),
         cal.Rules(only=("business",)), cal.Rules(on_blackout="defer"),
         cal.Rules(labels=(("tier", "prod"),), on_blackout="defer"), cal.Rules(labels=(("tier", "prod"),)),
         cal.Rules(skip=("weekend",), on_blackout="defer"), cal.Rules(skip=("missing",))]
BOOK = cal.Tablet({c.name: c for c in (HOLIDAYS, WEEKEND, BUSINESS)}, {b.name: b for b in BLACKOUTS})


def decided(i: int, spec: str, tz: str, jitter: int, team: str, rules: cal.Rules) -> F.JobRow:
    r = cal.Rules(team, rules.skip, rules.only, rules.on_skip, rules.on_blackout, rules.labels)
    return row(i, spec, tz, jitter, team=team, pool="gpu" if i % 3 else "", rules=r)


def per_second(fc: F.Forecast) -> Counter:
    got: Counter = Counter()
    for g in fc.groups:
        for i, due in enumerate(g.series):
            if due:
                got[fc.from_ms // 1000 + i] += due
    return got


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(st.tuples(st.sampled_from(SCHEDULES), st.sampled_from(ZONES), st.sampled_from(JITTERS),
                               st.sampled_from(["a", "b"]), st.sampled_from(RULES)), min_size=1, max_size=30),
       start=st.integers(-36 * 3600, 48 * 3600), length=st.integers(1, 2 * 3600), by=st.sampled_from(F.GROUPINGS))
def test_counts_with_calendars_and_blackouts_match_the_instant_by_instant_count(jobs, start, length, by):
    rows = [decided(i, *j) for i, j in enumerate(jobs)]
    lo = XMAS + start * 1000                               # around Christmas, the blackouts, a weekend
    fc = F.compute(rows, lo, lo + length * 1000, by=by, top=3, book=BOOK)
    left: Counter = Counter()
    expected = F.walk(rows, lo, lo + length * 1000, BOOK, left)
    assert per_second(fc) == expected
    assert fc.instants == sum(expected.values()) and fc.left == left
    if by == "":
        top = max(expected.values(), default=0)
        assert (fc.groups[0].peak_seconds[0].due if fc.groups[0].peak_seconds else 0) == top
        for p in fc.groups[0].peak_seconds:
            assert sum(c.jobs for c in p.contributors) <= p.due == expected[p.at_ms // 1000]


@pytest.mark.parametrize("rules, runs, left", [
    # both holidays' nine o'clock are left out; next_allowed adds no run (it runs as the next instant)
    (cal.Rules("a"), 2, {}),
    (cal.Rules("a", skip=("hol",)), 0, {"skipped": 2}),
    (cal.Rules("a", skip=("hol",), on_skip="next_allowed"), 0, {"moved": 2}),
    (cal.Rules("a", skip=("weekend",)), 1, {"skipped": 1}),           # Saturday 26th
    (cal.Rules("a", only=("business",)), 1, {"skipped": 1}),          # Friday 25th is a business day
])
def test_a_calendar_leaves_its_instants_out_and_says_how_many(rules, runs, left):
    rows = [row(0, "0 9 * * *", rules=rules)]
    fc = F.compute(rows, XMAS + 3_600_000, XMAS + 2 * DAY, book=BOOK)       # the 25th and the 26th (a Saturday)
    assert fc.instants == runs and fc.left == Counter(left)


def test_a_deferred_herd_lands_at_the_blackouts_end_and_the_peak_says_so():
    rows = [row(i, "* * * * *", rules=cal.Rules("a", on_blackout="defer")) for i in range(100)]
    fc = F.compute(rows, XMAS + 3_600_000, XMAS + 7_200_000, top=1, book=BOOK)
    end = BLACKOUTS[0].end_ms
    g = fc.groups[0]
    assert g.peak_seconds[0].at_ms == end - end % 1000 and g.peak_seconds[0].due == 30 * 100   # 01:01..01:30
    assert g.peak_seconds[0].contributors[0].jobs == 3000
    assert fc.left == Counter(deferred=3000) and fc.instants == 6000
    skipped = F.compute([row(i, "* * * * *") for i in range(100)], XMAS + 3_600_000, XMAS + 7_200_000, book=BOOK)
    assert skipped.instants == 3000 and skipped.left == Counter(skipped=3000)


def test_rows_carry_the_rules_the_decisions_read():
    from tests.support.state import Harness
    h = Harness(level=cal.CALENDAR_LEVEL)
    from schedd.core import commands as C
    assert h.apply(C.CALENDAR_PUT, calendar={"name": "hol", "team": "default", "dates": [["2027-01-16", "x"]]}).ok
    assert h.put(name="j", schedule="0 9 * * *", calendar={"skip": ["hol"], "on_skip": "next_allowed"},
                 on_blackout="defer", labels={"tier": "prod"}).ok
    (r,) = F.rows(h.state)
    job = h.state.jobs["j"]
    assert r[7] == cal.rules_of(h.state, job)
    assert (r[7].skip, r[7].on_skip, r[7].on_blackout, r[7].labels) == (("hol",), "next_allowed", "defer",
                                                                       (("tier", "prod"),))
    assert cal.book_of(h.state).calendars.keys() == {"hol"}
    assert not cal.book_of(Harness(level=cal.CALENDAR_LEVEL - 1).state).calendars


def test_the_put_warning_counts_what_calendars_and_blackouts_leave():
    from schedd.api.forecasts import _rows_of
    from schedd.core.model import validate_spec
    lo, hi = XMAS - 3_600_000, XMAS + 23 * 3_600_000
    herd = [row(i, "0 0 * * *", pool="p") for i in range(100)]
    cap = F.Capacity(slots={"p": 64})
    fc = F.compute(herd, lo, hi, by="pool", top=1, book=BOOK)
    spec = validate_spec({"name": "new", "team": "a", "pool": "p", "schedule": "0 0 * * *", "timezone": "UTC",
                          "calendar": {"skip": ["hol"]}, "handler": {"shell": {"command": "true"}}})
    (r,) = _rows_of([spec])
    assert r[7] == cal.Rules("a", skip=("hol",))
    theirs = F.compute([r], lo, hi, by="pool", top=1, book=BOOK)
    assert theirs.instants == 0 and F.crowding(fc, theirs, cap, lo) == []    # Christmas: it does not run
    plain = F.compute([row(1000, "0 0 * * *", pool="p")], lo, hi, by="pool", top=1, book=BOOK)
    assert F.crowding(fc, plain, cap, lo)[0].startswith("101 jobs due at 2026-12-25T00:00:00Z")


def test_schedctl_says_how_many_instants_calendars_and_blackouts_left_out():
    from schedd.api.forecasts import forecast_to_pb
    from schedd_client.forecast_commands import forecast_text
    rows = [row(i, "* * * * *", rules=cal.Rules("a", on_blackout="defer" if i % 2 else "skip")) for i in range(10)]
    fc = F.compute(rows, XMAS + 3_600_000, XMAS + 7_200_000, book=BOOK)
    text = forecast_text(forecast_to_pb(fc, ""))
    assert text.count("calendars and blackouts: 150 skipped, 150 deferred to a blackout's end (counted then)") == 2
    assert "all jobs: 10 jobs, 450 runs due" in text


def test_the_forecast_counts_what_firing_records_under_calendars_and_blackouts():
    """Three days from a Friday through the real core (firing.record and calendars.shape): each
    recorded run's due second is what the forecast read beforehand counts, and what it left out
    is what firing skipped, moved or deferred."""
    from schedd.core import commands as C
    from schedd.core.policy import jitter_offset_ms
    from tests.support.state import T0, Harness
    h = Harness(level=cal.CALENDAR_LEVEL)
    for doc in ({"name": "weekend", "team": "default", "weekdays": [5, 6]},
                {"name": "business", "team": "default", "weekdays": [0, 1, 2, 3, 4]}):
        assert h.apply(C.CALENDAR_PUT, calendar=doc).ok
    for doc in ({"name": "batch", "start_ms": T0 + 2 * 3_600_000, "end_ms": T0 + 5 * 3_600_000 + 30_000,
                 "labels": {"tier": "batch"}, "reason": "backup"},
                {"name": "freeze", "start_ms": T0 + 30 * 3_600_000, "end_ms": T0 + 31 * 3_600_000, "team": "default"}):
        assert h.apply(C.BLACKOUT_PUT, blackout=doc).ok
    weekend = {"skip": ["weekend"]}
    jobs = [dict(name="skips", schedule="0 * * * *", calendar=weekend),
            dict(name="moves", schedule="30 * * * *", calendar={**weekend, "on_skip": "next_allowed"}),
            dict(name="only", schedule="15 * * * *", timezone="Asia/Kolkata", calendar={"only": ["business"]}),
            dict(name="defers", schedule="@every 10m", on_blackout="defer", labels={"tier": "batch"}),
            dict(name="held", schedule="@every 20m"),
            dict(name="spread", schedule="0 * * * *", jitter_seconds=120, calendar=weekend, on_blackout="defer")]
    for j in jobs:
        assert h.put(**j).ok
    lo, hi = T0 + 3_600_000, T0 + 3 * DAY                 # from after the jobs' first instants
    fc = F.compute(F.rows(h.state), lo, hi, book=cal.book_of(h.state))
    recorded = {}
    while h.now < hi + 3_600_000:
        h.now += 600_000
        h.plan_and_fire()
        recorded.update({k: ex for k, ex in h.state.execs.items() if ex.trigger in ("schedule", "catchup")})
    runs, left = Counter(), Counter()
    for ex in recorded.values():
        due = ex.scheduled_ms + jitter_offset_ms(ex.job, 120_000 if ex.job == "spread" else 0)   # before a deferral
        if ex.state == "SKIPPED" or ex.reason.startswith("blackout"):
            if lo // 1000 <= due // 1000 < hi // 1000:
                left["moved" if "moved to" in ex.reason else "skipped" if ex.state == "SKIPPED" else "deferred"] += 1
            if ex.state == "SKIPPED":
                continue
        if lo // 1000 <= ex.due // 1000 < hi // 1000:
            runs[ex.due // 1000] += 1
    assert per_second(fc) == runs
    assert fc.left == left and all(left[k] > 0 for k in ("skipped", "moved", "deferred"))


# ------------------------------------------------------------------ shards forecast apart, merged

@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy, parts=st.integers(1, 4), start=st.integers(0, 48 * 3600), length=st.integers(1, 3600),
       by=st.sampled_from(F.GROUPINGS), listed=st.integers(1, 30))
def test_forecasts_of_the_shards_merge_into_the_clusters(jobs, parts, start, length, by, listed):
    """Each shard group forecasts its own jobs (its leader, on another node) listing its
    `listed` busiest seconds and minutes; merged, the jobs, instants and peaks are the whole
    table's, and when some list was full (flagged) a merged peak never counts more than is due."""
    rows = [row(i, *j) for i, j in enumerate(jobs)]
    lo = T0 + start * 1000
    hi = lo + length * 1000
    cap = F.Capacity({"gpu": 2, "": 1}, {"team:a": 3})
    whole = F.compute(rows, lo, hi, by=by, top=3, capacity=cap)
    shards = [F.compute(rows[k::parts], lo, hi, by=by, top=listed) for k in range(parts)]
    merged, short = F.merge(shards, 3, cap, listed=listed)
    assert (merged.jobs, merged.instants) == (whole.jobs, whole.instants)
    assert [(g.key, g.jobs, g.instants, g.slots, g.quota_key, g.quota) for g in merged.groups] == \
        [(g.key, g.jobs, g.instants, g.slots, g.quota_key, g.quota) for g in whole.groups]
    for m, w in zip(merged.groups, whole.groups):
        minutes = F._minutes(w.series, whole.from_ms // 1000)
        for p in m.peak_seconds:              # never more than is due in that second; exact unless short
            assert p.due <= w.series[(p.at_ms - whole.from_ms) // 1000]
            assert short or p.due == w.series[(p.at_ms - whole.from_ms) // 1000]
        for p in m.peak_minutes:
            assert p.due <= minutes[p.at_ms // 60_000 - whole.from_ms // 60_000]
        if not short:                         # the busiest there are (the same counts: ties may pick another second)
            assert [p.due for p in m.peak_seconds] == [p.due for p in w.peak_seconds]
            assert [p.due for p in m.peak_minutes] == [p.due for p in w.peak_minutes]
            assert [p.over for p in m.peak_seconds] == [p.over for p in w.peak_seconds]


def test_shards_listing_the_same_busy_seconds_merge_exactly_though_their_lists_are_full():
    """Every-second jobs in two shards: each lists its first `listed` seconds (all equally busy);
    merged, those seconds hold both shards' runs and no other second can be busier."""
    a, b = [row(i, "@every 1s") for i in range(3)], [row(10 + i, "@every 1s") for i in range(2)]
    parts = [F.compute(rows, T0, T0 + 600_000, top=4) for rows in (a, b)]
    merged, short = F.merge(parts, 2, listed=4)
    assert not short and [(p.at_ms, p.due) for p in merged.groups[0].peak_seconds] == [(T0, 5), (T0 + 1000, 5)]
    uneven = [F.compute(a, T0, T0 + 600_000, top=4), F.compute([row(20, "@every 7s")], T0, T0 + 600_000, top=4)]
    assert F.merge(uneven, 2, listed=4)[1]          # shard b's busy seconds are not shard a's first ones


def test_a_merged_peak_adds_the_shards_runs_and_their_contributors():
    a = [row(i, "0 * * * *") for i in range(4)]
    b = [row(10 + i, "@hourly", team="b") for i in range(3)] + [row(20, "30 * * * *")]
    merged, short = F.merge([F.compute(a, T0, T0 + 3_600_000), F.compute(b, T0, T0 + 3_600_000)], 2,
                            F.Capacity({"": 5}))
    assert not short and (merged.jobs, merged.instants) == (8, 8)
    first, second = merged.groups[0].peak_seconds
    assert (first.at_ms, first.due, first.over) == (T0, 7, True)          # 7 due, 5 slots
    assert [(c.schedule, c.jobs) for c in first.contributors] == [("0 * * * *", 4), ("@hourly", 3)]
    assert first.contributors[0].examples == ("job-0", "job-1", "job-2")
    assert (second.at_ms, second.due, second.over) == (T0 + 1_800_000, 1, False)


def test_a_forecast_another_node_answered_reads_back_as_it_was_computed():
    from schedd.api.forecasts import forecast_of_pb, forecast_to_pb
    rows = [row(i, "*/5 * * * *", team="a" if i % 2 else "b", rules=cal.Rules("a", ("hol",))) for i in range(6)]
    fc = F.compute(rows, T0, T0 + 3_600_000, by="team", capacity=F.Capacity({"": 2}, {"team:a": 1}))
    back = forecast_of_pb(forecast_to_pb(fc, ""))
    for g in fc.groups:
        g.series = []
    assert back == fc
    with pytest.raises(F.ForecastError):
        F.merge([fc, F.compute(rows, T0, T0 + 60_000, by="team")], 5)


def test_the_forecast_merges_shards_held_elsewhere_and_names_one_it_could_not_reach():
    """Group 0's leader hosts shards 0 and 1; shard 2's holder answers its own forecast, shard
    3's holders do not answer: the answer counts shards 0 to 2 and says shard 3 is missing."""
    import asyncio
    import threading
    import types

    import grpc

    from schedd.api import forecasts
    from schedd.api.service import SchedulerService
    from schedd.api.shard_calls import GroupCallError
    from schedd.ports.fakes import ManualClock
    from schedd_proto import scheduler_pb2 as pb
    from tests.support.state import Harness

    def replica(names):
        h = Harness(now=T0)
        for n in names:
            h.put(name=n, schedule="@every 60s", team="a")
        status = types.SimpleNamespace(leader_commit_index=h.index, applied_index=h.index)
        return types.SimpleNamespace(lock=threading.RLock(), state=h.state, status=lambda: status,
                                     is_leader=lambda: True)
    zero, one, two = replica(["a0"]), replica(["a1", "b1"]), replica(["a2", "b2", "c2"])

    class Calls:
        async def unary(self, shard, service, method, request, *, timeout=None, address=""):
            assert (service, method, request.top) == ("Scheduler", "Forecast", F.MAX_TOP)
            if shard == 3:
                raise GroupCallError(grpc.StatusCode.UNAVAILABLE, "n3:50051: unreachable")
            rows = forecasts.read_rows(two, None)
            return forecasts.forecast_to_pb(F.compute(rows.rows, request.from_ms, request.to_ms, by=request.by,
                                                      top=request.top), "")

    svc = types.SimpleNamespace(clock=ManualClock(T0), groups=lambda: {0: zero, 1: one}, node=zero,
                                router=types.SimpleNamespace(shard=0, shards=4), dispatcher=None, calls=Calls())
    svc._remote_forecast = types.MethodType(SchedulerService._remote_forecast, svc)
    svc._forecast = types.MethodType(SchedulerService._forecast, svc)
    context = types.SimpleNamespace(time_remaining=lambda: 10.0)
    answer = asyncio.run(SchedulerService.Forecast.__wrapped__(svc, pb.ForecastRequest(by="team"), context))
    assert answer.jobs == 6 and [(g.key, g.jobs) for g in answer.groups] == [("a", 6)]
    assert answer.instants == 6 * 1440                    # every minute of a day
    assert "shard 3 could not be counted" in answer.note and "n3:50051: unreachable" in answer.note
