"""Cron fields as the module doc of schedd.core.schedule defines them, and the DST split between
fixed-time and repeating-hour schedules.

Three layers: golden tables of the cases that were once wrong (an equal range spelled two ways
read as the whole field, a wrapping range with a step stepped from the wrong place, hourly jobs
shifted into a gap or skipping a repeated hour), a property test of every field against the
brute-force reference in cron_reference.py (thousands of random fields and expressions with
ranges, wraps, steps, names, lists, leading zeros and Sunday as 7), and the DST split on real
transition dates.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schedd.core import schedule as S
from schedd.core.schedule import ScheduleError, format_ms, next_n, parse, parse_time
from tests.unit import cron_reference as ref
from tests.support.properties import examples

EPOCH = datetime(1970, 1, 1)


def fires(spec: str, tz: str, after: str, n: int, **policy: str) -> list[str]:
    s = parse(spec, tz, **policy)
    return [format_ms(t, tz) for t in next_n(s, parse_time(after, tz), n)]


def days(spec: str, after: str, n: int, tz: str = "UTC") -> list[str]:
    """The local dates (and times, when not midnight) of the next n fires."""
    out = []
    for text in fires(spec, tz, after, n):
        out.append(text[:10] if text[11:19] == "00:00:00" else text[:16])
    return out


# ------------------------------------------------------------------ 1. equal ranges, any spelling

EQUAL_RANGES = [
    # (spec, zone, after, the next fires)
    ("0 0 05-5 * *", "UTC", "2026-01-01T00:00:00Z", ["2026-01-05", "2026-02-05", "2026-03-05"]),
    ("0 0 1 JUN-6 *", "UTC", "2026-01-01T00:00:00Z", ["2026-06-01", "2027-06-01"]),
    ("0 0 * * SUN-0", "UTC", "2026-01-01T00:00:00Z", ["2026-01-04", "2026-01-11", "2026-01-18"]),
    ("30 2 * * 5-FRI", "Europe/Berlin", "2026-01-01T00:00:00Z",
     ["2026-01-02T02:30", "2026-01-09T02:30", "2026-01-16T02:30"]),
    ("0 0 * * 7-SUN", "UTC", "2026-01-01T00:00:00Z", ["2026-01-04", "2026-01-11"]),
    ("0 0 * * 0-SUN", "UTC", "2026-01-01T00:00:00Z", ["2026-01-04", "2026-01-11"]),
    ("0 0 * * 7-0", "UTC", "2026-01-01T00:00:00Z", ["2026-01-04", "2026-01-11"]),
    ("0 0 * * 7-7", "UTC", "2026-01-01T00:00:00Z", ["2026-01-04", "2026-01-11"]),
    ("0 0 1 06-JUN *", "UTC", "2026-01-01T00:00:00Z", ["2026-06-01", "2027-06-01"]),
    ("0 0 1 12-DEC/3 *", "UTC", "2026-01-01T00:00:00Z", ["2026-12-01", "2027-12-01"]),
    ("0 00-0 5 * *", "UTC", "2026-01-01T00:00:00Z", ["2026-01-05", "2026-02-05"]),
    ("05-5 0 1 1 *", "UTC", "2026-01-01T00:00:00Z", ["2026-01-01T00:05", "2027-01-01T00:05"]),
    ("0 0 * * MON-1", "UTC", "2026-01-01T00:00:00Z", ["2026-01-05", "2026-01-12"]),
    # Sunday to Sunday written 0-7 is the whole week, as in crontab(5)
    ("0 0 * * 0-7", "UTC", "2025-12-31T12:00:00Z", ["2026-01-01", "2026-01-02", "2026-01-03"]),
]


@pytest.mark.parametrize("spec,tz,after,expected", EQUAL_RANGES)
def test_an_equal_range_is_one_value_however_it_is_spelled(spec, tz, after, expected):
    assert days(spec, after, len(expected), tz) == expected


# ------------------------------------------------------------------ 2. wrapping ranges with steps

WRAPS = [
    ("0 0 1 OCT-FEB/2 *", "2026-01-01T00:00:00Z",
     ["2026-02-01", "2026-10-01", "2026-12-01", "2027-02-01"]),
    ("0 0 * * FRI-TUE/3", "2026-01-01T00:00:00Z",      # 2026-01-02 is a Friday
     ["2026-01-02", "2026-01-05", "2026-01-09", "2026-01-12"]),
    ("0 0 * * SAT-MON/2", "2026-01-01T00:00:00Z",
     ["2026-01-03", "2026-01-05", "2026-01-10", "2026-01-12"]),
    ("0 23-3/2 * * *", "2026-01-01T00:00:00Z",
     ["2026-01-01T01:00", "2026-01-01T03:00", "2026-01-01T23:00", "2026-01-02T01:00"]),
    # wraps without a step were already right; they stay so
    ("0 0 * * FRI-MON", "2026-01-01T00:00:00Z",
     ["2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05", "2026-01-09"]),
    ("0 22-1 1 1 *", "2026-01-01T00:00:00Z",
     ["2026-01-01T01:00", "2026-01-01T22:00", "2026-01-01T23:00", "2027-01-01"]),
    ("0 0 30-2/2 * *", "2025-12-31T12:00:00Z",          # 30, then 1 (31 + 2 wraps to 1)
     ["2026-01-01", "2026-01-30", "2026-02-01", "2026-03-01"]),
    ("50-10/15 0 1 1 *", "2026-01-01T00:00:00Z",        # 50, 5
     ["2026-01-01T00:05", "2026-01-01T00:50", "2027-01-01T00:05"]),
    ("0 0 * * 6-2/2", "2026-01-01T00:00:00Z",           # Sat, Mon
     ["2026-01-03", "2026-01-05", "2026-01-10"]),
    ("0 0 * * 7-3/2", "2026-01-01T00:00:00Z",           # 7 starts as 0: Sun, Tue
     ["2026-01-04", "2026-01-06", "2026-01-11"]),
]


@pytest.mark.parametrize("spec,after,expected", WRAPS)
def test_a_wrapping_range_steps_across_the_wrap(spec, after, expected):
    assert days(spec, after, len(expected)) == expected


REFUSED = [
    ("0 0 * * 1,5#3", "plain weekdays cannot be combined"),
    ("0 0 * * 5#3/2", "step cannot be combined with '#'"),
    ("0 0 * * 5#6", "week number after '#' must be 1-5"),
    ("0 0 * * L5-L6", "'L' stands alone"),
    ("0 0 1-2-3 * *", "is not a value or a range a-b"),
    ("0 0 *-3 * *", "cannot be part of a range"),
    ("0 0 * * 8", "8 is out of range 0-7"),
    ("0 24 * * *", "24 is out of range 0-23"),
    ("0 0 0 * *", "0 is out of range 1-31"),
    ("0 0 * 13 *", "13 is out of range 1-12"),
    ("0 0 * FOO *", "'FOO' is not a number or month name"),
    ("0 0 * * 1-5/0", "must be a whole number of at least 1"),
    ("0 ? * * *", "'?' is only allowed in day-of-month and day-of-week"),
    ("0 0 -1 * *", "negative numbers are not allowed"),
]


@pytest.mark.parametrize("spec,fragment", REFUSED)
def test_what_cannot_be_expanded_is_refused_with_the_field_named(spec, fragment):
    with pytest.raises(ScheduleError) as info:
        parse(spec)
    assert fragment in str(info.value)
    assert "bad cron field" in str(info.value)


# ------------------------------------------------------- property: fields against the reference

FIELD_NAMES = {S._SECOND: "second", S._MINUTE: "minute", S._HOUR: "hour", S._DOM: "dom",
               S._MONTH: "month", S._DOW: "dow"}


def _number_text(lo: int, hi: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """A value, sometimes with a leading zero, sometimes by name (names start at lo)."""
    plain = st.integers(lo, hi).map(str)
    padded = st.integers(lo, min(hi, 9)).map(lambda v: f"0{v}")
    parts = [plain, plain, padded]
    if names:
        parts.append(st.sampled_from(names).map(lambda n: n.upper()))
    return st.one_of(*parts)


def field_text(idx: int) -> st.SearchStrategy[str]:
    """Random field text: values, ranges (equal, wrapping, spelled two ways), steps, lists."""
    lo, hi = S._FIELD_RANGE[idx]
    names = {S._MONTH: ref.MONTHS, S._DOW: ref.DAYS}.get(idx, ())
    value = _number_text(lo, hi, names)
    span = st.tuples(value, value).map("-".join)
    step = st.integers(1, hi - lo + 2).map(str)
    token = st.one_of(
        value, span, span,
        st.tuples(span, step).map("/".join),
        st.tuples(st.just("*"), step).map("/".join),
        st.tuples(value, step).map("/".join),
    )
    listed = st.lists(token, min_size=1, max_size=3).map(",".join)
    extra = {S._DOM: ["?", "L", "1,L"], S._DOW: ["?", "L5", "5#3", "FRI#2", "MON-WED#1"]}
    return st.one_of(st.just("*"), listed, listed, listed, st.sampled_from(extra.get(idx, ["*"])))


FIELD_PROPS = settings(max_examples=examples(1500), deadline=None,
                       suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("idx", sorted(FIELD_NAMES), ids=lambda i: FIELD_NAMES[i])
def test_every_field_expands_as_the_reference_does(idx):
    @FIELD_PROPS
    @given(field_text(idx))
    def check(text):
        low = text.lower()
        try:
            got = S._field_set(idx, S._plain_field(idx, low))
        except S._CronError:
            assume(False)  # refused: only the mixes the module doc refuses may be
            return
        want = ref.expand(FIELD_NAMES[idx], low)
        assert set(got.values) == want.values, text
        assert got.last == want.last, text
        assert set(got.nth) == set(want.nth), text

    check()


@pytest.mark.parametrize("idx", sorted(FIELD_NAMES), ids=lambda i: FIELD_NAMES[i])
def test_only_documented_mixes_are_refused(idx):
    """The property test above skips refused fields: refusals must be the documented ones."""
    @settings(max_examples=300, deadline=None)
    @given(field_text(idx))
    def check(text):
        try:
            S._plain_field(idx, text.lower())
        except S._CronError as e:
            reason = str(e.args[1])
            assert "plain weekdays cannot be combined" in reason, (text, reason)

    check()


FIELD_TEXT = {idx: field_text(idx) for idx in FIELD_NAMES}   # built once: building is slow


@st.composite
def expressions(draw: st.DrawFn) -> str:
    fields = [draw(FIELD_TEXT[i]) for i in (S._MINUTE, S._HOUR, S._DOM, S._MONTH, S._DOW)]
    if draw(st.booleans()):
        fields.insert(0, draw(FIELD_TEXT[S._SECOND]))
    if "#" in fields[-1] or fields[-1].upper().startswith("L"):
        fields[-3] = "*"                     # nth weekdays only beside a free day-of-month
    return " ".join(fields)


@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(), st.integers(946_684_800, 4_102_444_800))   # 2000 .. 2100
def test_next_fires_match_the_brute_force_reference(expr, after_s):
    try:
        s = parse(expr)
    except ScheduleError as e:
        assert "never fires" in str(e) or "plain weekdays cannot be combined" in str(e), e
        if "never fires" in str(e):   # then the reference finds nothing in 30 years either
            assert ref.compile_cron(expr).next_wall(EPOCH + timedelta(seconds=after_s)) is None
        return
    cron = ref.compile_cron(expr)
    wall = EPOCH + timedelta(seconds=after_s)
    got = next_n(s, after_s * 1000, 3)
    for t in got:
        wall = cron.next_wall(wall)
        assert wall is not None and (wall - EPOCH) // timedelta(milliseconds=1) == t, expr


# ----------------------------------------------------------------------------- 3. DST split

DST = [
    # (spec, zone, after (local), policy overrides, next fires written in the zone)
    # Europe/Berlin spring forward 2026-03-29 02:00 -> 03:00
    ("0 * * * *", "Europe/Berlin", "2026-03-29T00:30:00", {},
     ["2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"]),
    ("30 2 * * *", "Europe/Berlin", "2026-03-29T00:30:00", {},
     ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
    # Europe/Berlin fall back 2026-10-25 03:00 -> 02:00
    ("0 * * * *", "Europe/Berlin", "2026-10-25T01:30:00", {},
     ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"]),
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T01:30:00", {},
     ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
    # America/New_York 2026-03-08 02:00 -> 03:00 and 2026-11-01 02:00 -> 01:00
    ("@hourly", "America/New_York", "2026-03-08T00:30:00", {},
     ["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00"]),
    ("0 */2 * * *", "America/New_York", "2026-03-08T00:30:00", {},   # a step: real time
     ["2026-03-08T04:00:00-04:00", "2026-03-08T06:00:00-04:00"]),
    ("@hourly", "America/New_York", "2026-11-01T00:30:00", {},
     ["2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"]),
    ("30 1 * * *", "America/New_York", "2026-11-01T00:30:00", {},
     ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]),
    ("0 1,2 * * *", "America/New_York", "2026-11-01T00:30:00", {},  # a list is fixed times
     ["2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00"]),
    # Australia/Lord_Howe, a 30-minute shift: 2026-10-04 02:00 -> 02:30, 2026-04-05 02:00 -> 01:30
    ("*/30 * * * *", "Australia/Lord_Howe", "2026-10-04T01:10:00", {},
     ["2026-10-04T01:30:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T03:00:00+11:00"]),
    ("0 2 * * *", "Australia/Lord_Howe", "2026-10-04T01:10:00", {},
     ["2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"]),
    ("*/30 * * * *", "Australia/Lord_Howe", "2026-04-05T00:50:00", {},
     ["2026-04-05T01:00:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-05T01:30:00+10:30",
      "2026-04-05T02:00:00+10:30"]),
    ("30 1 * * *", "Australia/Lord_Howe", "2026-04-05T00:50:00", {},
     ["2026-04-05T01:30:00+11:00", "2026-04-06T01:30:00+10:30"]),
    # Pacific/Chatham at 02:45: 2026-09-27 02:45 -> 03:45, 2026-04-05 03:45 -> 02:45
    ("@hourly", "Pacific/Chatham", "2026-09-27T01:30:00", {},
     ["2026-09-27T02:00:00+12:45", "2026-09-27T04:00:00+13:45", "2026-09-27T05:00:00+13:45"]),
    ("0 3 * * *", "Pacific/Chatham", "2026-09-27T01:30:00", {},
     ["2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"]),
    ("@hourly", "Pacific/Chatham", "2026-04-05T01:30:00", {},
     ["2026-04-05T02:00:00+13:45", "2026-04-05T03:00:00+13:45", "2026-04-05T03:00:00+12:45",
      "2026-04-05T04:00:00+12:45"]),
    ("0 3 * * *", "Pacific/Chatham", "2026-04-05T01:30:00", {},
     ["2026-04-05T03:00:00+13:45", "2026-04-06T03:00:00+12:45"]),
    # explicit policies win over the default, both ways
    ("@hourly", "Pacific/Chatham", "2026-09-27T01:30:00", {"gap": "shift", "fold": "first"},
     ["2026-09-27T02:00:00+12:45", "2026-09-27T03:45:00+13:45", "2026-09-27T04:00:00+13:45"]),
    ("@hourly", "Europe/Berlin", "2026-10-25T01:30:00", {"fold": "first"},
     ["2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+01:00"]),
    ("30 2 * * *", "Europe/Berlin", "2026-03-29T00:30:00", {"gap": "skip"},
     ["2026-03-30T02:30:00+02:00"]),
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T01:30:00", {"fold": "both"},
     ["2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00"]),
]


@pytest.mark.parametrize("spec,tz,after,policy,expected", DST, ids=lambda v: str(v)[:24])
def test_dst_split_on_real_transitions(spec, tz, after, policy, expected):
    assert fires(spec, tz, after, len(expected), **policy) == expected


@pytest.mark.parametrize("spec,effective", [
    ("0 * * * *", ("skip", "both")), ("@hourly", ("skip", "both")), ("@minutely", ("skip", "both")),
    ("*/15 * * * *", ("skip", "both")), ("0 */2 * * *", ("skip", "both")),
    ("0 8-18/2 * * *", ("skip", "both")), ("0 H/3 * * *", ("skip", "both")),
    ("*/10 * * * * *", ("skip", "both")), ("0 30 * * * *", ("skip", "both")),
    ("30 2 * * *", ("shift", "first")), ("@daily", ("shift", "first")),
    ("0 9,17 * * *", ("shift", "first")), ("0 8-18 * * *", ("shift", "first")),
    ("* 2 * * *", ("shift", "first")), ("0 H * * *", ("shift", "first")),
    ("0 0 2 * * *", ("shift", "first")),
])
def test_the_default_policy_follows_the_hour_field(spec, effective):
    s = parse(spec, "Europe/Berlin", hash_key="job")
    assert (s.gap, s.fold) == effective
    assert ref.default_policy(S._MACROS.get(spec, spec)) == effective
