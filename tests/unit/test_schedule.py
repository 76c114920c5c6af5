"""Tests for schedd.core.schedule: parsing, next fire instants, DST rules, RFC 3339 I/O.

Transition dates used below (all real, tzdata 2026):
  Europe/Berlin     2026-03-29 02:00 CET -> 03:00 CEST (01:00Z)
                    2026-10-25 03:00 CEST -> 02:00 CET (01:00Z)
  America/New_York  2026-03-08 02:00 EST -> 03:00 EDT (07:00Z)
                    2026-11-01 02:00 EDT -> 01:00 EST (06:00Z)
  Australia/Lord_Howe (30-minute DST) 2026-04-05 02:00 -> 01:30; 2026-10-04 02:00 -> 02:30
"""

from __future__ import annotations

import json
import os
import re
import pickle
import subprocess
import sys
import time
from datetime import datetime, timedelta, UTC
from pathlib import Path

import pytest
from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schedd.core import schedule as S
from tests.unit import cron_reference as ref
from schedd.core.schedule import (
    Schedule, ScheduleError, format_ms, next_after, next_n, parse, parse_time, validate_tz,
)

REPO = Path(__file__).resolve().parents[2]
EPOCH = datetime(1970, 1, 1)
MS = timedelta(milliseconds=1)


def ms(text: str, tz: str = "UTC") -> int:
    return parse_time(text, tz)


def fires(spec: str, tz: str, after: str, n: int, *, key: str = "") -> list[str]:
    """The next n fires after `after` (read in tz), written in tz."""
    s = parse(spec, tz, hash_key=key)
    return [format_ms(t, tz) for t in next_n(s, ms(after, tz), n)]


# ------------------------------------------------------------------------------------ parse

VALID = [
    # spec, tz, kind, normalized spec
    (None, "UTC", "none", "none"),
    ("", "UTC", "none", "none"),
    ("none", "UTC", "none", "none"),
    ("  NONE ", "UTC", "none", "none"),
    ("@none", "UTC", "none", "none"),
    ("*/15 9-17 * * mon-fri", "UTC", "cron", "*/15 9-17 * * MON-FRI"),
    ("  0   0 1  *   *  ", "UTC", "cron", "0 0 1 * *"),
    ("*/10 * * * * *", "UTC", "cron", "*/10 * * * * *"),
    ("0 0 12 ? jan-mar,dec sun", "Europe/Berlin", "cron", "0 0 12 ? JAN-MAR,DEC SUN"),
    ("0 0 L * *", "UTC", "cron", "0 0 L * *"),
    ("0 9 ? * fri#3", "UTC", "cron", "0 9 ? * FRI#3"),
    ("0 9 * * L5", "UTC", "cron", "0 9 * * L5"),
    ("0 22-2 * * *", "UTC", "cron", "0 22-2 * * *"),
    ("@yearly", "UTC", "cron", "@yearly"),
    ("@annually", "UTC", "cron", "@annually"),
    ("@MONTHLY", "UTC", "cron", "@monthly"),
    ("@weekly", "UTC", "cron", "@weekly"),
    ("@daily", "America/New_York", "cron", "@daily"),
    ("@midnight", "UTC", "cron", "@midnight"),
    ("@hourly", "UTC", "cron", "@hourly"),
    ("@minutely", "UTC", "cron", "@minutely"),
    ("H H * * *", "UTC", "cron", "H H * * *"),
    ("h/15 * * * *", "UTC", "cron", "H/15 * * * *"),
    ("H(0-29) H(9-17) * * *", "UTC", "cron", "H(0-29) H(9-17) * * *"),
    ("H(0-29)/10 * * * * *", "UTC", "cron", "H(0-29)/10 * * * * *"),
    ("0 0 H * H", "UTC", "cron", "0 0 H * H"),
    ("@every 30s", "UTC", "every", "@every 30s"),
    ("@every 90m", "Europe/Berlin", "every", "@every 1h30m"),
    ("@EVERY 1h30m", "UTC", "every", "@every 1h30m"),
    ("@every 1d", "UTC", "every", "@every 1d"),
    ("@every 1500ms", "UTC", "every", "@every 1s500ms"),
    ("@every 2h0m", "UTC", "every", "@every 2h"),
    ("at 2026-12-01T10:00:00Z", "UTC", "at", "at 2026-12-01T10:00:00Z"),
    ("AT 2026-12-01T10:00:00+01:00", "UTC", "at", "at 2026-12-01T09:00:00Z"),
    ("at 2026-12-01T10:00:00", "Europe/Berlin", "at", "at 2026-12-01T10:00:00+01:00"),
    ("at 2026-12-01 10:00:00.250Z", "UTC", "at", "at 2026-12-01T10:00:00.250Z"),
    ("at 2026-07-01T12:00:00Z", "Asia/Kolkata", "at", "at 2026-07-01T17:30:00+05:30"),
]


@pytest.mark.parametrize("spec,tz,kind,normalized", VALID)
def test_parse_valid(spec, tz, kind, normalized):
    s = parse(spec, tz, hash_key="job-1")
    assert (s.kind, s.spec, s.tz) == (kind, normalized, tz)
    again = parse(s.spec, s.tz, hash_key="job-1")  # the normalized text means the same
    assert again == s
    assert next_n(again, 0, 3) == next_n(s, 0, 3)


INVALID = [
    # spec, tz, fragments expected in the message
    ("61 * * * *", "UTC", ["bad cron field 'minute' in '61 * * * *': 61 is out of range 0-59"]),
    ("0 24 * * *", "UTC", ["'hour'", "24 is out of range 0-23"]),
    ("0 0 32 * *", "UTC", ["'day-of-month'", "32 is out of range 1-31"]),
    ("0 0 0 * *", "UTC", ["'day-of-month'", "0 is out of range 1-31"]),
    ("0 0 * 13 *", "UTC", ["'month'", "13 is out of range 1-12"]),
    ("0 0 * * 8", "UTC", ["'day-of-week'", "8 is out of range 0-7"]),
    ("60 * * * * *", "UTC", ["'second'", "60 is out of range 0-59"]),
    ("0 0 * FOO *", "UTC", ["'month'", "'FOO' is not a number or month name"]),
    ("0 0 * * FUN", "UTC", ["'day-of-week'", "'FUN' is not a number or weekday name"]),
    ("x * * * *", "UTC", ["'minute'", "'X' is not a number"]),
    ("*/0 * * * *", "UTC", ["'minute'", "step '0'", "at least 1"]),
    ("1-2-3 * * * *", "UTC", ["'minute'", "'1-2-3' is not a value or a range"]),
    ("-5 * * * *", "UTC", ["'minute'", "negative numbers"]),
    ("5 ? * * *", "UTC", ["'hour'", "'?' is only allowed in day-of-month and day-of-week"]),
    ("*,5 * * * *", "UTC", ["'minute'", "cannot be combined"]),
    ("0 0 15W * *", "UTC", ["'day-of-month'", "W (nearest weekday) is not supported"]),
    ("0 0 15 * 5#3", "UTC", ["'day-of-month'", "cannot be combined with a day-of-month"]),
    ("0 0 * * 5#6", "UTC", ["'day-of-week'", "must be 1-5"]),
    ("0 0 * * L", "UTC", ["'day-of-week'", "'L'"]),
    ("0 0 30 2 *", "UTC", ["never fires", "30", "FEB"]),
    ("0 0 31 4,6 *", "UTC", ["never fires", "APR,JUN"]),
    ("0 0 * * * * *", "UTC", ["expected 5 cron fields", "got 7"]),
    ("* * * *", "UTC", ["expected 5 cron fields", "got 4"]),
    ("every day", "UTC", ["expected 5 cron fields", "got 2"]),
    ("0 0 * * *;", "UTC", ["unexpected character ';'"]),
    ("H,5 * * * *", "UTC", ["'minute'", "H must be the whole field"]),
    ("H(50-70) * * * *", "UTC", ["'minute'", "H range 50-70 is out of range 0-59"]),
    ("H(30-10) * * * *", "UTC", ["'minute'", "end above its start"]),
    ("H/0 * * * *", "UTC", ["'minute'", "H/0"]),
    ("R * * * *", "UTC", ["'minute'", "R (random) is not allowed"]),
    ("@reboot", "UTC", ["unknown schedule macro '@reboot'"]),
    ("@every", "UTC", ["expected '@every <duration>'"]),
    ("@every 5x", "UTC", ["bad duration '5x'", "ms, s, m, h, d"]),
    ("@every 1.5h", "UTC", ["bad duration '1.5h'"]),
    ("@every 5M", "UTC", ["bad duration '5M'"]),
    ("@every 500ms", "UTC", ["bad duration '500ms'", "at least 1s"]),
    ("@every 0s", "UTC", ["at least 1s"]),
    ("@every 3651d", "UTC", ["at most 3650d"]),
    ("at", "UTC", ["expected 'at <RFC 3339 time>'"]),
    ("at tomorrow", "UTC", ["bad at-time in 'at tomorrow'", "not an RFC 3339 time"]),
    ("at 2026-02-30T10:00:00Z", "UTC", ["bad at-time", "not a valid time"]),
    ("at 2026-12-01T25:00:00Z", "UTC", ["bad at-time", "not a valid time"]),
    ("at 2026-12-01T10:00:00+24:00", "UTC", ["bad UTC offset"]),
    ("0 0 * * *", "Europe/Berln", ["unknown time zone 'Europe/Berln'", "Europe/Berlin"]),
    ("0 0 * * *", "Mars/Olympus", ["unknown time zone 'Mars/Olympus'"]),
    ("0 0 * * *", "../../etc/passwd", ["unknown time zone"]),
    ("@every 5m", "Nowhere", ["unknown time zone 'Nowhere'"]),
]


@pytest.mark.parametrize("spec,tz,fragments", INVALID)
def test_parse_invalid(spec, tz, fragments):
    with pytest.raises(ScheduleError) as info:
        parse(spec, tz, hash_key="job-1")
    for fragment in fragments:
        assert fragment in str(info.value)


def test_schedule_error_is_a_value_error():
    assert issubclass(ScheduleError, ValueError)


@pytest.mark.parametrize("spec", [5, b"* * * * *"])
def test_parse_rejects_non_text(spec):
    with pytest.raises(ScheduleError, match="must be text"):
        parse(spec)  # type: ignore[arg-type]


def test_parse_is_cached_and_shared_without_h():
    assert parse("*/5 * * * *", "UTC") is parse("*/5 * * * *", "UTC")
    # No H: the hash key plays no part, so all jobs share one schedule.
    assert parse("0 9 * * THU", hash_key="a") is parse("0 9 * * THU", hash_key="b")
    # With H the key matters.
    a, b = parse("H H * * *", hash_key="job-a"), parse("H H * * *", hash_key="job-b")
    assert a != b and a.spec == b.spec


def test_pickle_round_trip_keeps_hash_key():
    s = parse("H/15 H * * *", "Europe/Berlin", hash_key="job-42")
    restored = pickle.loads(pickle.dumps(s))
    assert restored == s
    assert next_n(restored, 0, 5) == next_n(s, 0, 5)
    assert len(pickle.dumps(s)) < 200


def test_equal_range_means_single_value():
    # croniter 7 reads "5-5" as the whole field; Vixie cron (and we) read it as 5.
    assert fires("5-5 * * * *", "UTC", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-01T00:05:00Z", "2026-01-01T01:05:00Z"]


# ---------------------------------------------------------------------------- validate_tz

@pytest.mark.parametrize("given_tz,expected", [
    (None, "UTC"), ("", "UTC"), ("  ", "UTC"), ("UTC", "UTC"), ("Etc/UTC", "Etc/UTC"),
    ("Europe/Berlin", "Europe/Berlin"), ("europe/berlin", "Europe/Berlin"),
    (" America/New_York ", "America/New_York"), ("Asia/Kolkata", "Asia/Kolkata"),
])
def test_validate_tz(given_tz, expected):
    assert validate_tz(given_tz) == expected


@pytest.mark.parametrize("bad", ["Europe/Berln", "Nowhere", "Europe", "/etc/passwd", "UTC+1",
                                 "localtime", "posixrules"])  # host files, not zones
def test_validate_tz_rejects(bad):
    with pytest.raises(ScheduleError, match=re.escape(f"unknown time zone {bad!r}")):
        validate_tz(bad)


# ----------------------------------------------------------------------- RFC 3339 in/out

FORMAT = [
    (0, "UTC", "1970-01-01T00:00:00Z"),
    (1_500, "UTC", "1970-01-01T00:00:01.500Z"),
    (-1, "UTC", "1969-12-31T23:59:59.999Z"),
    (ms("2026-11-29T01:00:00Z"), "Europe/Berlin", "2026-11-29T02:00:00+01:00"),
    (ms("2026-07-01T00:00:00Z"), "Europe/Berlin", "2026-07-01T02:00:00+02:00"),
    (ms("2026-07-01T00:00:00Z"), "America/New_York", "2026-06-30T20:00:00-04:00"),
    (ms("2026-07-01T00:00:00.007Z"), "Asia/Kolkata", "2026-07-01T05:30:00.007+05:30"),
    (ms("2026-01-15T12:00:00Z"), "Europe/London", "2026-01-15T12:00:00+00:00"),
    (ms("2026-01-15T12:00:00Z"), "Etc/UTC", "2026-01-15T12:00:00Z"),
]


@pytest.mark.parametrize("value,tz,text", FORMAT)
def test_format_ms(value, tz, text):
    assert format_ms(value, tz) == text
    assert parse_time(text) == value  # the text carries its offset


PARSE_TIME = [
    ("2026-12-01T10:00:00Z", "UTC", "2026-12-01T10:00:00Z"),
    ("2026-12-01t10:00:00z", "UTC", "2026-12-01T10:00:00Z"),
    ("2026-12-01 10:00:00+01:00", "UTC", "2026-12-01T09:00:00Z"),
    ("2026-12-01T10:00:00-05:30", "UTC", "2026-12-01T15:30:00Z"),
    ("2026-12-01T10:00:00.5Z", "UTC", "2026-12-01T10:00:00.500Z"),
    ("2026-12-01T10:00:00.123999Z", "UTC", "2026-12-01T10:00:00.123Z"),  # sub-ms truncated
    ("2026-12-01T10:00:00", "Europe/Berlin", "2026-12-01T09:00:00Z"),  # no offset: read in tz
    ("2026-12-01T10:00:00Z", "Europe/Berlin", "2026-12-01T10:00:00Z"),  # offset wins over tz
    # Spring-forward gap: the transition instant.
    ("2026-03-29T02:30:00", "Europe/Berlin", "2026-03-29T01:00:00Z"),
    ("2026-03-08T02:30:00", "America/New_York", "2026-03-08T07:00:00Z"),
    # Fall-back fold: the first occurrence.
    ("2026-10-25T02:30:00", "Europe/Berlin", "2026-10-25T00:30:00Z"),
    ("2026-11-01T01:30:00", "America/New_York", "2026-11-01T05:30:00Z"),
]


@pytest.mark.parametrize("text,tz,utc", PARSE_TIME)
def test_parse_time(text, tz, utc):
    assert format_ms(parse_time(text, tz)) == utc


@pytest.mark.parametrize("bad", [
    "2026-12-01", "2026-12-01T10:00Z", "tomorrow", "2026-13-01T10:00:00Z",
    "2026-12-01T10:00:60Z", "2026-12-01T10:00:00+1:00", "",
])
def test_parse_time_rejects(bad):
    with pytest.raises(ScheduleError):
        parse_time(bad)


# --------------------------------------------------------------------------- next_after: UTC

NEXT_UTC = [
    # spec, after, expected next fires (UTC)
    ("*/15 9-17 * * MON-FRI", "2026-03-27T17:50:00Z",  # Friday evening -> Monday
     ["2026-03-30T09:00:00Z", "2026-03-30T09:15:00Z"]),
    ("*/15 9-17 * * MON-FRI", "2026-03-30T09:00:00Z",  # exactly on a fire: strictly after
     ["2026-03-30T09:15:00Z"]),
    ("*/15 9-17 * * MON-FRI", "2026-03-30T09:14:59.999Z", ["2026-03-30T09:15:00Z"]),
    ("* * * * * *", "2026-03-30T10:00:00.500Z", ["2026-03-30T10:00:01Z", "2026-03-30T10:00:02Z"]),
    ("*/10 * * * * *", "2026-03-30T10:00:00Z", ["2026-03-30T10:00:10Z", "2026-03-30T10:00:20Z"]),
    ("30 59 23 31 12 *", "2026-06-01T00:00:00Z", ["2026-12-31T23:59:30Z", "2027-12-31T23:59:30Z"]),
    ("0 0 13 * FRI", "2026-02-01T00:00:00Z",  # both restricted: the 13th OR a Friday
     ["2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z",
      "2026-02-27T00:00:00Z", "2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z"]),
    ("0 0 * * FRI", "2026-02-01T00:00:00Z", ["2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z"]),
    ("0 0 1-31 * MON", "2026-02-01T00:00:00Z",  # full range + weekday: croniter ORs -> daily
     ["2026-02-02T00:00:00Z", "2026-02-03T00:00:00Z"]),
    ("0 0 */10 * *", "2026-02-01T00:00:00Z",
     ["2026-02-11T00:00:00Z", "2026-02-21T00:00:00Z", "2026-03-01T00:00:00Z"]),
    ("0 0 31 * *", "2026-01-31T00:00:00Z", ["2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z"]),
    ("0 0 L * *", "2026-01-31T00:00:00Z",
     ["2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z"]),
    ("0 0 L 2 *", "2027-03-01T00:00:00Z", ["2028-02-29T00:00:00Z", "2029-02-28T00:00:00Z"]),
    ("0 0 29 2 *", "2096-03-01T00:00:00Z", ["2104-02-29T00:00:00Z"]),  # 2100 is no leap year
    ("0 9 * * FRI#3", "2026-01-01T00:00:00Z",
     ["2026-01-16T09:00:00Z", "2026-02-20T09:00:00Z", "2026-03-20T09:00:00Z"]),
    ("0 9 ? * MON#5", "2026-01-01T00:00:00Z", ["2026-03-30T09:00:00Z", "2026-06-29T09:00:00Z"]),
    ("0 9 * * L5", "2026-01-01T00:00:00Z", ["2026-01-30T09:00:00Z", "2026-02-27T09:00:00Z"]),
    ("0 22-2 * * *", "2026-01-01T12:00:00Z",  # wrapping range
     ["2026-01-01T22:00:00Z", "2026-01-01T23:00:00Z", "2026-01-02T00:00:00Z",
      "2026-01-02T01:00:00Z", "2026-01-02T02:00:00Z", "2026-01-02T22:00:00Z"]),
    ("0 0 * * SAT-MON", "2026-01-01T00:00:00Z",  # Thursday
     ["2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-05T00:00:00Z",
      "2026-01-10T00:00:00Z"]),
    ("0 0 * * 7", "2026-01-01T00:00:00Z", ["2026-01-04T00:00:00Z"]),  # 7 is Sunday
    ("@yearly", "2026-03-01T00:00:00Z", ["2027-01-01T00:00:00Z"]),
    ("@monthly", "2026-03-01T00:00:00Z", ["2026-04-01T00:00:00Z"]),
    ("@weekly", "2026-03-01T00:00:00Z", ["2026-03-08T00:00:00Z"]),  # Sunday midnight
    ("@daily", "2026-03-01T00:00:00Z", ["2026-03-02T00:00:00Z"]),
    ("@hourly", "2026-03-01T00:59:59.999Z", ["2026-03-01T01:00:00Z"]),
    ("@minutely", "2026-03-01T00:00:30Z", ["2026-03-01T00:01:00Z"]),
]


@pytest.mark.parametrize("spec,after,expected", NEXT_UTC)
def test_next_after_utc(spec, after, expected):
    assert fires(spec, "UTC", after, len(expected)) == expected


def test_cron_far_past_and_far_future():
    s = parse("0 0 1 1 *")
    assert format_ms(next_after(s, -(2 ** 62))) == "1900-01-01T00:00:00Z"
    assert next_after(s, ms("9998-12-31T00:00:00Z")) is None
    assert next_after(s, 2 ** 62) is None
    berlin = parse("0 0 1 1 *", "Europe/Berlin")
    assert next_after(berlin, 2 ** 62) is None
    assert next_after(berlin, -(2 ** 62)) is not None


# ------------------------------------------------------------------ next_after: time zones

NEXT_TZ = [
    # spec, tz, after (read in tz unless it has an offset), expected fires written in tz
    # --- Europe/Berlin spring forward 2026-03-29: 02:00 CET -> 03:00 CEST
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00",
     ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
    ("30 2 * * *", "Europe/Berlin", "2026-03-29T00:59:59.999Z",  # just before the transition
     ["2026-03-29T03:00:00+02:00"]),
    ("30 2 * * *", "Europe/Berlin", "2026-03-29T01:00:00Z",  # at it: already fired
     ["2026-03-30T02:30:00+02:00"]),
    ("0 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00", ["2026-03-29T03:00:00+02:00"]),
    ("0 3 * * *", "Europe/Berlin", "2026-03-28T12:00:00",  # 03:00 exists: same instant as
     ["2026-03-29T03:00:00+02:00", "2026-03-30T03:00:00+02:00"]),  # a gap shift would be
    ("*/15 * * * *", "Europe/Berlin", "2026-03-29T01:30:00",
     ["2026-03-29T01:45:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:15:00+02:00"]),
    ("*/15 2 * * *", "Europe/Berlin", "2026-03-28T23:00:00",  # four gap times fire once
     ["2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"]),
    # --- Europe/Berlin fall back 2026-10-25: 03:00 CEST -> 02:00 CET
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00",
     ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00Z",  # exactly the first pass fire
     ["2026-10-26T02:30:00+01:00"]),
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T01:15:00Z",  # inside the second pass
     ["2026-10-26T02:30:00+01:00"]),
    # an hour field that repeats follows real time: the repeated hour fires in both passes
    ("*/15 * * * *", "Europe/Berlin", "2026-10-25T01:40:00",
     ["2026-10-25T01:45:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:15:00+02:00",
      "2026-10-25T02:30:00+02:00", "2026-10-25T02:45:00+02:00", "2026-10-25T02:00:00+01:00",
      "2026-10-25T02:15:00+01:00", "2026-10-25T02:30:00+01:00"]),
    ("*/15 * * * *", "Europe/Berlin", "2026-10-25T02:10:00+01:00",  # inside the second pass
     ["2026-10-25T02:15:00+01:00"]),
    ("0 * * * *", "Europe/Berlin", "2026-10-25T00:00:00",
     ["2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00",
      "2026-10-25T03:00:00+01:00"]),
    ("0 2 * * *", "Europe/Berlin", "2026-10-25T00:00:00",  # a fixed time: the first pass only
     ["2026-10-25T02:00:00+02:00", "2026-10-26T02:00:00+01:00"]),
    # --- America/New_York spring forward 2026-03-08: 02:00 EST -> 03:00 EDT
    ("30 2 * * *", "America/New_York", "2026-03-07T12:00:00",
     ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]),
    ("*/15 * * * *", "America/New_York", "2026-03-08T01:40:00",
     ["2026-03-08T01:45:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:15:00-04:00"]),
    # --- America/New_York fall back 2026-11-01: 02:00 EDT -> 01:00 EST
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00",
     ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]),
    ("30 2 * * *", "America/New_York", "2026-10-31T12:00:00",  # 02:30 exists once
     ["2026-11-01T02:30:00-05:00"]),
    ("*/15 * * * *", "America/New_York", "2026-11-01T00:50:00",
     ["2026-11-01T01:00:00-04:00", "2026-11-01T01:15:00-04:00", "2026-11-01T01:30:00-04:00",
      "2026-11-01T01:45:00-04:00", "2026-11-01T01:00:00-05:00"]),
    ("*/15 * * * *", "America/New_York", "2026-11-01T01:05:00-05:00",  # second pass
     ["2026-11-01T01:15:00-05:00"]),
    ("@daily", "America/New_York", "2026-03-07T12:00:00", ["2026-03-08T00:00:00-05:00"]),
    # --- zones without DST, and a 30-minute DST
    ("0 9 * * *", "Asia/Kolkata", "2026-03-29T00:00:00Z", ["2026-03-29T09:00:00+05:30"]),
    ("30 2 * * *", "Asia/Kolkata", "2026-03-28T12:00:00", ["2026-03-29T02:30:00+05:30"]),
    ("0 * * * *", "Australia/Lord_Howe", "2026-04-05T00:30:00",  # 02:00 -> 01:30
     ["2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30"]),
    ("*/15 1 * * *", "Australia/Lord_Howe", "2026-04-05T00:30:00",
     ["2026-04-05T01:00:00+11:00", "2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+11:00",
      "2026-04-05T01:45:00+11:00", "2026-04-06T01:00:00+10:30"]),
    ("0 * * * *", "Australia/Lord_Howe", "2026-10-04T00:30:00",  # 02:00 -> 02:30: no 02:00
     ["2026-10-04T01:00:00+10:30", "2026-10-04T03:00:00+11:00", "2026-10-04T04:00:00+11:00"]),
]


@pytest.mark.parametrize("spec,tz,after,expected", NEXT_TZ)
def test_next_after_in_zones(spec, tz, after, expected):
    assert fires(spec, tz, after, len(expected)) == expected


def test_every_second_cron_with_fold_first_is_fast_and_fires_once_per_wall_second():
    s = parse("* * * * * *", "Europe/Berlin", fold="first")
    start = time.perf_counter()
    got = next_n(s, ms("2026-10-24T23:59:59Z"), 3601)
    took = time.perf_counter() - start
    # 00:00Z..00:59:59Z is 02:00-02:59:59 CEST; 01:00Z..01:59:59Z repeats those wall times
    # and fires nothing; 02:00Z is 03:00 CET.
    assert format_ms(got[0]) == "2026-10-25T00:00:00Z"
    assert format_ms(got[3599]) == "2026-10-25T00:59:59Z"
    assert format_ms(got[3600]) == "2026-10-25T02:00:00Z"
    # From inside the repeated hour the next fire is found in one skip, not 3600 steps.
    start2 = time.perf_counter()
    assert format_ms(next_after(s, ms("2026-10-25T01:00:00Z")), "Europe/Berlin") == \
        "2026-10-25T03:00:00+01:00"
    assert time.perf_counter() - start2 < 0.01
    assert took < 2.0


def test_every_second_cron_follows_real_time_across_fall_back_by_default():
    s = parse("* * * * * *", "Europe/Berlin")
    got = next_n(s, ms("2026-10-24T23:59:59Z"), 7201)
    assert [format_ms(t) for t in (got[0], got[3599], got[3600], got[7200])] == [
        "2026-10-25T00:00:00Z", "2026-10-25T00:59:59Z", "2026-10-25T01:00:00Z",
        "2026-10-25T02:00:00Z"]
    assert all(b - a == 1000 for a, b in zip(got, got[1:]))  # every real second, once


def test_every_second_cron_across_spring_forward():
    s = parse("* * * * * *", "America/New_York")
    got = next_n(s, ms("2026-03-08T01:59:58-05:00"), 3)
    assert [format_ms(t, "America/New_York") for t in got] == [
        "2026-03-08T01:59:59-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:00:01-04:00"]


# ---------------------------------------------------------------------- @every, at, none

@pytest.mark.parametrize("spec,after,expected", [
    ("@every 1h", "2026-03-01T10:20:00Z", ["2026-03-01T11:00:00Z", "2026-03-01T12:00:00Z"]),
    ("@every 1h", "2026-03-01T11:00:00Z", ["2026-03-01T12:00:00Z"]),
    ("@every 10s", "2026-03-01T10:00:03.250Z", ["2026-03-01T10:00:10Z", "2026-03-01T10:00:20Z"]),
    ("@every 1500ms", "1970-01-01T00:00:00Z", ["1970-01-01T00:00:01.500Z", "1970-01-01T00:00:03Z"]),
    ("@every 7m", "1969-12-31T23:50:00Z", ["1969-12-31T23:53:00Z", "1970-01-01T00:00:00Z"]),
])
def test_every(spec, after, expected):
    assert fires(spec, "UTC", after, len(expected)) == expected


def test_every_ignores_the_zone():
    assert next_n(parse("@every 1h", "Asia/Kolkata"), 0, 3) == next_n(parse("@every 1h"), 0, 3)


def test_at_fires_once():
    s = parse("at 2026-12-01T10:00:00+01:00")
    at = ms("2026-12-01T09:00:00Z")
    assert next_after(s, at - 1) == at
    assert next_after(s, -(2 ** 62)) == at
    assert next_after(s, at) is None
    assert next_n(s, 0, 5) == [at]


def test_none_never_fires():
    assert next_after(parse(None), 0) is None
    assert next_n(parse("none"), 0, 3) == []


def test_next_n_edges():
    s = parse("@every 1m")
    assert next_n(s, 0, 0) == []
    assert next_n(s, 0, -1) == []
    assert next_n(s, 0, 3) == [60_000, 120_000, 180_000]


# ------------------------------------------------------------------------------ hashing (H)

def test_h_is_spread_by_key_and_within_ranges():
    minutes = {next_after(parse("H * * * *", hash_key=f"job-{i}"), 0) // 60_000 % 60
               for i in range(200)}
    assert len(minutes) > 30  # spread, not all in one minute
    for i in range(50):
        got = next_n(parse("H(0-29)/10 H(9-17) * * *", hash_key=f"job-{i}"), 0, 6)
        for t in got:
            wall = EPOCH + t * MS
            assert 9 <= wall.hour <= 17 and wall.minute % 10 == got[0] // 60_000 % 10
            assert wall.minute <= 29


# A golden value: if croniter changes its hash, every H job would move on upgrade.
GOLDEN_H = [
    ("H H * * *", "job-1", "2026-01-01T23:23:00Z"),
    ("H/15 * * * *", "job-1", "2026-01-01T00:08:00Z"),
    ("H(0-29) H(9-17) * * *", "nightly-report", "2026-01-01T09:06:00Z"),
]


@pytest.mark.parametrize("spec,key,expected", GOLDEN_H)
def test_h_golden_values(spec, key, expected):
    assert format_ms(next_after(parse(spec, hash_key=key), ms("2026-01-01T00:00:00Z"))) == expected


H_SPECS = ["H H * * *", "H/15 H(9-17) * * MON-FRI", "H(0-29)/10 * * * * *", "0 0 H * H"]
H_KEYS = [f"job-{i}" for i in range(40)] + ["", "ünïcode-job"]


def _h_fires() -> list:
    return [[next_n(parse(s, "Europe/Berlin", hash_key=k), 1767225600000, 3) for k in H_KEYS]
            for s in H_SPECS]


H_PROBE = f"""
import json, sys
sys.path.insert(0, {str(REPO)!r})
from schedd.core.schedule import parse, next_n
print(json.dumps([[next_n(parse(s, "Europe/Berlin", hash_key=k), 1767225600000, 3)
                   for k in {H_KEYS!r}] for s in {H_SPECS!r}]))
"""


def test_h_is_deterministic_across_processes():
    """croniter hashes H with CRC-32 (binascii.crc32), never Python's seeded hash()."""
    here = _h_fires()
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", H_PROBE], env=env, capture_output=True,
                             text=True, check=True, timeout=60)
        assert json.loads(out.stdout) == here


def test_h_matches_croniter_hash_id():
    """Every field's H lands where croniter.expand(hash_id=...) puts it."""
    for key in ("job-1", "job-2", "x" * 100, "ünïcode", ""):
        (minute, hour, day, month, _), _ = croniter.expand("H H H H *", hash_id=key.encode())
        wall = EPOCH + next_after(parse("H H H H *", hash_key=key), 0) * MS
        assert [wall.minute, wall.hour, wall.day, wall.month] == [
            minute[0], hour[0], day[0], month[0]]
        expanded, _ = croniter.expand("H 0 0 * * *", hash_id=key.encode(),
                                      second_at_beginning=True)
        wall = EPOCH + next_after(parse("H 0 0 * * *", hash_key=key), 0) * MS
        assert wall.second == expanded[5][0]
        expanded, _ = croniter.expand("H(0-29)/10 H/6 * * *", hash_id=key.encode())
        got = {(EPOCH + t * MS).minute for t in next_n(parse("H(0-29)/10 H/6 * * *",
                                                             hash_key=key), 0, 10)}
        assert got == set(expanded[0])


# ------------------------------------------------------------------------ property tests

_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much]
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=_HEALTH)
ZONE_PROPS = settings(max_examples=100, deadline=None, suppress_health_check=_HEALTH)
CHEAP_PROPS = settings(max_examples=100, deadline=None, suppress_health_check=_HEALTH)


def _value(lo: int, hi: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    nums = st.integers(lo, hi).map(str)
    return st.one_of(nums, st.sampled_from(names)) if names else nums


def _field(lo: int, hi: int, names: tuple[str, ...] = (), extra: tuple[str, ...] = (),
           hashed: bool = True) -> st.SearchStrategy[str]:
    """Random field text from croniter's grammar (no equal ranges: we differ there on purpose)."""
    value = _value(lo, hi, names)
    rng = st.tuples(value, value).filter(lambda ab: ab[0] != ab[1]).map("-".join)
    step = st.tuples(st.one_of(st.just("*"), rng, value), st.integers(1, hi - lo + 1)).map(
        lambda t: f"{t[0]}/{t[1]}")
    element = st.one_of(value, rng, step)
    items = st.lists(element, min_size=1, max_size=3).map(",".join)
    choices = [st.just("*"), items, items]
    if extra:
        choices.append(st.sampled_from(extra))
    if hashed:
        top = min(hi, 59)
        pair = st.tuples(st.integers(lo, top), st.integers(lo, top)).filter(lambda p: p[0] < p[1])
        choices.append(st.one_of(
            st.just("H"), st.integers(1, 30).map(lambda n: f"H/{n}"),
            pair.map(lambda p: f"H({p[0]}-{p[1]})"),
            st.tuples(pair, st.integers(1, 20)).map(lambda t: f"H({t[0][0]}-{t[0][1]})/{t[1]}"),
        ))
    return st.one_of(*choices)


MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


# Built once: constructing strategies inside a composite costs more than running the tests.
SECOND_F, MINUTE_F, HOUR_F = _field(0, 59), _field(0, 59), _field(0, 23)
DOM_F = _field(1, 31, extra=("?", "L", "1,L", "15,L"))
MONTH_F = _field(1, 12, MONTHS, hashed=False)
DOW_F = _field(0, 7, DAYS, extra=("?",))
# nth / last weekday only beside an unrestricted day-of-month (we refuse the mix)
NTH_F = st.one_of(
    st.tuples(st.integers(0, 7), st.integers(1, 5)).map(lambda t: f"{t[0]}#{t[1]}"),
    st.sampled_from(["L5", "L0"]))


@st.composite
def cron_exprs(draw: st.DrawFn) -> tuple[str, bool]:
    """(expression, has_seconds) built from random field pieces."""
    seconds = draw(st.booleans())
    dom = draw(DOM_F)
    if dom in ("*", "?") and draw(st.integers(0, 3)) == 0:
        dow = draw(NTH_F)
    else:
        dow = draw(DOW_F)
    fields = [draw(MINUTE_F), draw(HOUR_F), dom, draw(MONTH_F), dow]
    if seconds:
        fields.insert(0, draw(SECOND_F))
    return " ".join(fields), seconds


START = st.integers(ms("1990-01-01T00:00:00Z"), ms("2060-01-01T00:00:00Z"))
KEYS = st.sampled_from(["job-1", "job-2", "billing.nightly", "x"])


def _parse_or_skip(expr: str, tz: str = "UTC", key: str = "") -> Schedule:
    try:
        return parse(expr, tz, hash_key=key)
    except ScheduleError as e:
        # Only expressions that can never fire may be refused; anything else is a bug.
        assert "never fires" in str(e) or "cannot be combined with a day-of-month" in str(e), e
        assume(False)
        raise


@PROPS
@given(cron_exprs(), START, KEYS)
def test_utc_matches_the_reference(expr_seconds, after, key):
    expr, _ = expr_seconds
    s = _parse_or_skip(expr, "UTC", key)
    start = EPOCH + (after // 1000) * timedelta(seconds=1)
    expected = ref.compile_cron(expr, key).next_wall(start)
    assert expected is not None
    assert next_after(s, after) == (expected - EPOCH) // MS


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
         "America/Sao_Paulo", "Europe/Dublin", "Pacific/Chatham", "America/Santiago",
         "Asia/Tehran", "Pacific/Apia", "Africa/Casablanca"]


def _transitions(zone: str) -> list[int]:
    """Offset changes of `zone` in 2010-2030, in epoch ms, to aim the property tests at."""
    z = S._zone(zone)  # the module's zone data (the pinned tzdata package)
    out = []
    t = ms("2010-01-01T00:00:00Z") // 1000
    end = ms("2030-01-01T00:00:00Z") // 1000
    step = 86400  # DST transitions are months apart; a day step finds them all
    prev = datetime.fromtimestamp(t, z).utcoffset()
    while t < end:
        nxt = t + step
        off = datetime.fromtimestamp(nxt, z).utcoffset()
        if off != prev:
            lo, hi = t, nxt
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if datetime.fromtimestamp(mid, z).utcoffset() == off:
                    hi = mid
                else:
                    lo = mid
            out.append(hi * 1000)
        prev, t = off, nxt
    return out


TRANSITIONS = [(zone, t) for zone in ZONES for t in _transitions(zone)]


@st.composite
def zoned_starts(draw: st.DrawFn) -> tuple[str, int]:
    """A zone and a start time, half of the time within a few hours of a real transition."""
    if draw(st.booleans()):
        zone, t = draw(st.sampled_from(TRANSITIONS))
        return zone, t + draw(st.integers(-4 * 3_600_000, 4 * 3_600_000))
    return draw(st.sampled_from(ZONES)), draw(START)


def _tz(zone: str):
    return UTC if zone == "UTC" else S._zone(zone)


def _offset(zone: str, t_ms: int) -> timedelta:
    return datetime.fromtimestamp(t_ms // 1000, _tz(zone)).utcoffset()


def _wall_matches(expr: str, seconds: bool, key: str, wall: datetime) -> bool:
    """The brute-force reference as an independent oracle for "this wall time matches"."""
    return ref.compile_cron(expr, key).next_wall(wall - timedelta(seconds=1)) == wall


class _RefWalls:
    """The reference's matching wall times in order from `start` (what croniter's get_next in
    naive mode gave the older tests)."""

    def __init__(self, expr: str, start: datetime, key: str) -> None:
        self.cron, self.wall = ref.compile_cron(expr, key), start

    def get_next(self, _kind: object = None) -> datetime:
        nxt = self.cron.next_wall(self.wall)
        assert nxt is not None
        self.wall = nxt
        return nxt


@ZONE_PROPS
@given(cron_exprs(), zoned_starts(), KEYS)
def test_monotone_and_idempotent_in_any_zone(expr_seconds, zone_start, key):
    expr, _ = expr_seconds
    zone, after = zone_start
    s = _parse_or_skip(expr, zone, key)
    got = next_n(s, after, 4)
    assert got and got[0] > after
    assert all(a < b for a, b in zip(got, got[1:]))
    for t in got:
        assert next_after(s, t - 1) == t


@ZONE_PROPS
@given(cron_exprs(), zoned_starts(), KEYS)
def test_wall_time_matches_unless_gap_shift(expr_seconds, zone_start, key):
    expr, seconds = expr_seconds
    zone, after = zone_start
    s = _parse_or_skip(expr, zone, key)
    for t in next_n(s, after, 3):
        wall = datetime.fromtimestamp(t // 1000, _tz(zone)).replace(tzinfo=None)
        if _wall_matches(expr, seconds, key, wall):
            continue
        # Otherwise it must be a gap shift: the instant is a transition where clocks jump.
        assert _offset(zone, t - 1000) < _offset(zone, t), (format_ms(t, zone), expr)


@CHEAP_PROPS
@given(st.integers(1, 10 ** 6).map(lambda n: n * 1000), st.integers(-(10 ** 13), 10 ** 13))
def test_every_fires_on_multiples_of_the_period(period, after):
    s = parse(f"@every {period // 1000}s")
    t = next_after(s, after)
    assert t % period == 0 and after < t <= after + period


@CHEAP_PROPS
@given(st.sampled_from(ZONES), START)
def test_format_and_parse_time_round_trip(zone, t):
    assert parse_time(format_ms(t, zone), "UTC") == t
    assert parse_time(format_ms(t, zone), zone) == t


def test_module_is_pure():
    """No clock or randomness in the module's own code."""
    source = Path(S.__file__).read_text()
    for banned in ("import time", "import random", "import os", ".now(", ".today(", "time.time"):
        assert banned not in source, banned


def _oracle_instant(zone: str, wall: datetime) -> int:
    """The documented rules, written plainly: a wall time's first occurrence (fold=0), or,
    if it does not exist, the transition instant that skipped it. Epoch ms."""
    z = _tz(zone)
    first = int(wall.replace(tzinfo=z).timestamp())
    if datetime.fromtimestamp(first, z).replace(tzinfo=None) == wall:
        return first * 1000
    return max(t for z_name, t in TRANSITIONS if z_name == zone and t <= first * 1000)


@ZONE_PROPS
@given(cron_exprs(), st.sampled_from(TRANSITIONS), st.integers(-3 * 3_600_000, 3 * 3_600_000),
       KEYS)
def test_no_fire_is_missed_around_transitions(expr_seconds, transition, shift, key):
    """Against an oracle: the reference enumerates matching wall times (naive), each is mapped
    with the fixed-time rules (shift, first), and the first fires after `after` must be ours."""
    expr, seconds = expr_seconds
    zone, t = transition
    after = t + shift
    _parse_or_skip(expr, zone, key)
    s = parse(expr, zone, hash_key=key, gap="shift", fold="first")
    wall_after = datetime.fromtimestamp(after // 1000, _tz(zone)).replace(tzinfo=None)
    it = _RefWalls(expr, wall_after - timedelta(hours=3), key)
    expected: list[int] = []
    for _ in range(400):  # bounded: every-second crons would take 10800 steps to get there
        u = _oracle_instant(zone, it.get_next(datetime))
        if u > after and (not expected or u > expected[-1]):
            expected.append(u)
            if len(expected) == 5:
                break
    assume(expected)
    assert next_n(s, after, len(expected)) == expected, [format_ms(x, zone) for x in expected]


# ------------------------------------------------------------------------- DST policies
#
# Every (dst_gap, dst_fold) combination on the four real 2026 transitions of the module doc.
# A spring-forward result depends on the gap policy only, a fall-back one on the fold policy.

POLICIES = [(gap, fold) for gap in S.GAP_POLICIES for fold in S.FOLD_POLICIES]

SPRING = {  # (spec, zone, after): {gap policy: fires written in the zone}
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00"): {
        "shift": ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
        "skip": ["2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"]},
    ("30 2 * * *", "America/New_York", "2026-03-07T12:00:00"): {
        "shift": ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
        "skip": ["2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]},
    # several gap matches: shift fires once at 03:00, skip none of them; 03:00 itself is real
    ("0,20,40 2,3 * * *", "Europe/Berlin", "2026-03-29T01:50:00"): {
        "shift": ["2026-03-29T03:00:00+02:00", "2026-03-29T03:20:00+02:00"],
        "skip": ["2026-03-29T03:00:00+02:00", "2026-03-29T03:20:00+02:00"]},
    ("0,20,40 2 * * *", "America/New_York", "2026-03-08T01:50:00"): {
        "shift": ["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
        "skip": ["2026-03-09T02:00:00-04:00", "2026-03-09T02:20:00-04:00"]},
}

FALL = {  # (spec, zone, after): {fold policy: fires}
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00"): {
        "first": ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
        "last": ["2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"],
        "both": ["2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00",
                 "2026-10-26T02:30:00+01:00"]},
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00"): {
        "first": ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
        "last": ["2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"],
        "both": ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00",
                 "2026-11-02T01:30:00-05:00"]},
    # starting INSIDE the first pass through the repeated hour (02:10 CEST): the second pass
    # still lies ahead as instants although its wall times are behind
    ("*/20 * * * *", "Europe/Berlin", "2026-10-25T02:10:00+02:00"): {
        "first": ["2026-10-25T02:20:00+02:00", "2026-10-25T02:40:00+02:00",
                  "2026-10-25T03:00:00+01:00"],
        "last": ["2026-10-25T02:00:00+01:00", "2026-10-25T02:20:00+01:00",
                 "2026-10-25T02:40:00+01:00", "2026-10-25T03:00:00+01:00"],
        "both": ["2026-10-25T02:20:00+02:00", "2026-10-25T02:40:00+02:00",
                 "2026-10-25T02:00:00+01:00", "2026-10-25T02:20:00+01:00",
                 "2026-10-25T02:40:00+01:00", "2026-10-25T03:00:00+01:00"]},
    # starting inside the SECOND pass (01:10 EST)
    ("*/20 * * * *", "America/New_York", "2026-11-01T01:10:00-05:00"): {
        "first": ["2026-11-01T02:00:00-05:00", "2026-11-01T02:20:00-05:00"],
        "last": ["2026-11-01T01:20:00-05:00", "2026-11-01T01:40:00-05:00",
                 "2026-11-01T02:00:00-05:00"],
        "both": ["2026-11-01T01:20:00-05:00", "2026-11-01T01:40:00-05:00",
                 "2026-11-01T02:00:00-05:00"]},
    # the last wall second of the fold, every second: both passes, in instant order
    ("59 59 1 * * *", "America/New_York", "2026-11-01T00:00:00"): {
        "first": ["2026-11-01T01:59:59-04:00", "2026-11-02T01:59:59-05:00"],
        "last": ["2026-11-01T01:59:59-05:00", "2026-11-02T01:59:59-05:00"],
        "both": ["2026-11-01T01:59:59-04:00", "2026-11-01T01:59:59-05:00",
                 "2026-11-02T01:59:59-05:00"]},
}


def pfires(spec: str, tz: str, after: str, n: int, gap: str, fold: str) -> list[str]:
    s = parse(spec, tz, gap=gap, fold=fold)
    return [format_ms(t, tz) for t in next_n(s, ms(after, tz), n)]


@pytest.mark.parametrize("gap,fold", POLICIES)
@pytest.mark.parametrize("case", list(SPRING), ids=lambda c: f"{c[1]}:{c[0]}")
def test_dst_gap_policy_on_real_spring_forward(case, gap, fold):
    expected = SPRING[case][gap]
    assert pfires(*case, len(expected), gap, fold) == expected


@pytest.mark.parametrize("gap,fold", POLICIES)
@pytest.mark.parametrize("case", list(FALL), ids=lambda c: f"{c[1]}:{c[0]}")
def test_dst_fold_policy_on_real_fall_back(case, gap, fold):
    expected = FALL[case][fold]
    assert pfires(*case, len(expected), gap, fold) == expected


def test_dst_policy_utc_instants_of_the_documented_examples():
    berlin_gap = parse("30 2 * * *", "Europe/Berlin", gap="skip")
    assert next_after(berlin_gap, ms("2026-03-29T00:00:00Z")) == ms("2026-03-30T00:30:00Z")
    berlin_last = parse("30 2 * * *", "Europe/Berlin", fold="last")
    assert next_after(berlin_last, ms("2026-10-24T12:00:00Z")) == ms("2026-10-25T01:30:00Z")
    both = parse("30 2 * * *", "Europe/Berlin", fold="both")
    assert next_n(both, ms("2026-10-24T12:00:00Z"), 2) == [ms("2026-10-25T00:30:00Z"),
                                                            ms("2026-10-25T01:30:00Z")]


def test_dst_policies_are_part_of_identity_cache_and_pickle():
    a = parse("30 2 * * *", "Europe/Berlin")
    assert parse("30 2 * * *", "Europe/Berlin", gap="", fold="") is a
    assert parse("30 2 * * *", "Europe/Berlin", gap="shift", fold="first") == a
    b = parse("30 2 * * *", "Europe/Berlin", gap="skip", fold="both")
    assert b != a and (b.gap, b.fold) == ("skip", "both")
    assert parse("30 2 * * *", "Europe/Berlin", gap="skip", fold="both") is b
    c = pickle.loads(pickle.dumps(b))
    assert c == b and (c.gap, c.fold) == ("skip", "both")
    # only cron schedules carry a policy
    assert parse("@every 1h", "Europe/Berlin", fold="both") == parse("@every 1h", "Europe/Berlin")


@pytest.mark.parametrize("gap,fold,fragment", [
    ("later", "", "dst_gap must be one of shift, skip"),
    ("", "second", "dst_fold must be one of first, last, both"),
])
def test_dst_policy_refused(gap, fold, fragment):
    with pytest.raises(ScheduleError, match=fragment):
        parse("0 2 * * *", "Europe/Berlin", gap=gap, fold=fold)


def test_skip_gap_schedule_that_only_matches_gaps_never_fires():
    # 02:30 on the fifth Sunday of March: in Berlin that is always the spring-forward day
    s = parse("30 2 * 3 SUN#5", "Europe/Berlin", gap="skip")
    got = next_n(s, ms("2026-01-01T00:00:00Z"), 3)
    assert all(format_ms(t, "Europe/Berlin")[11:16] == "02:30" for t in got)  # years without DST day
    shifted = parse("30 2 * 3 SUN#5", "Europe/Berlin")
    assert next_after(shifted, ms("2026-01-01T00:00:00Z")) == ms("2026-03-29T01:00:00Z")


@pytest.mark.parametrize("spec,tz,at,fold,note", [
    ("30 2 * * *", "Europe/Berlin", "2026-03-29T01:00:00Z", "first",
     "shifted: 02:30 does not exist (clocks jump 02:00 -> 03:00)"),
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00Z", "first",
     "repeated: 02:30 occurs twice, this is the 1st (CEST)"),
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T01:30:00Z", "last",
     "repeated: 02:30 occurs twice, this is the 2nd (CET)"),
    ("30 1 * * *", "America/New_York", "2026-11-01T06:30:00Z", "both",
     "repeated: 01:30 occurs twice, this is the 2nd (EST)"),
    ("0 3 * * *", "Europe/Berlin", "2026-03-29T01:00:00Z", "first", ""),   # 03:00 is real
    ("30 2 * * *", "Europe/Berlin", "2026-03-30T00:30:00Z", "first", ""),
    ("30 2 * * *", "UTC", "2026-03-29T02:30:00Z", "first", ""),
])
def test_dst_note(spec, tz, at, fold, note):
    assert S.dst_note(parse(spec, tz, fold=fold), ms(at)) == note


def _oracle_instants(zone: str, wall: datetime, gap: str, fold: str) -> list[int]:
    """The documented policies, written plainly, for one matching wall time. Epoch ms."""
    z = _tz(zone)
    first = int(wall.replace(tzinfo=z).timestamp())
    second = int(wall.replace(tzinfo=z, fold=1).timestamp())
    if datetime.fromtimestamp(first, z).replace(tzinfo=None) != wall:  # in a gap
        return [] if gap == "skip" else [_oracle_instant(zone, wall)]
    if first == second:
        return [first * 1000]
    return {"first": [first * 1000], "last": [second * 1000],
            "both": [first * 1000, second * 1000]}[fold]


@ZONE_PROPS
@given(cron_exprs(), st.sampled_from(TRANSITIONS), st.integers(-3 * 3_600_000, 3 * 3_600_000),
       KEYS, st.sampled_from(POLICIES))
def test_policies_miss_no_fire_around_transitions(expr_seconds, transition, shift, key, policy):
    """Against an oracle under every policy: the reference enumerates matching wall times, each maps
    to its instants by the documented policy, and ours are the sorted union after `after`."""
    expr, seconds = expr_seconds
    zone, t = transition
    gap, fold = policy
    after = t + shift
    s = _parse_or_skip(expr, zone, key)
    s = parse(expr, zone, hash_key=key, gap=gap, fold=fold)
    wall_after = datetime.fromtimestamp(after // 1000, _tz(zone)).replace(tzinfo=None)
    it = _RefWalls(expr, wall_after - timedelta(hours=3), key)
    found: set[int] = set()
    wall = None
    for _ in range(400):
        wall = it.get_next(datetime)
        found.update(u for u in _oracle_instants(zone, wall, gap, fold) if u > after)
        if len([u for u in found if u < _oracle_instant(zone, wall)]) >= 5:
            break
    # a later wall time maps to no instant before the default mapping of the last one seen
    bound = _oracle_instant(zone, wall)
    expected = sorted(u for u in found if u < bound)[:5]
    assume(expected)
    assert next_n(s, after, len(expected)) == expected, [format_ms(x, zone) for x in expected]


@ZONE_PROPS
@given(cron_exprs(), zoned_starts(), KEYS)
def test_policies_relate_to_the_default(expr_seconds, zone_start, key):
    """both = first | last; skip drops only gap shifts of the default; with no transition in
    sight every policy is the default."""
    expr, _ = expr_seconds
    zone, after = zone_start
    _parse_or_skip(expr, zone, key)
    default = parse(expr, zone, hash_key=key, gap="shift", fold="first")
    base = next_n(default, after, 6)
    assume(len(base) == 6)
    horizon = base[-1]

    def upto(gap, fold):
        s = parse(expr, zone, hash_key=key, gap=gap, fold=fold)
        out, u = [], after
        while len(out) < 20_000:  # every second for a few hours at most
            u = next_after(s, u)
            if u is None or u > horizon:
                break
            out.append(u)
        return set(out)

    first, last, both = (upto("shift", f) for f in ("first", "last", "both"))
    assert first == set(base)
    assert both == first | last
    skip = upto("skip", "first")
    assert skip <= first
    for u in first - skip:
        assert _offset(zone, u - 1000) < _offset(zone, u)  # only gap shifts were dropped
    known = ms("2010-01-02T00:00:00Z") < after < horizon < ms("2029-12-30T00:00:00Z")
    if known and not any(after - 4 * 3_600_000 < x <= horizon + 4 * 3_600_000
                         for z, x in TRANSITIONS if z == zone):
        assert first == last == both == skip
