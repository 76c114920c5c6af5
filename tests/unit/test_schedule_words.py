"""A schedule read in words (schedd.core.schedule_words): what `schedctl job get` prints as "In
words" and the dashboard shows beside each job. The table covers every kind of schedule and the
cron forms schedd accepts: steps, ranges, lists, names, wrapping ranges, L, nth and last
weekdays, seconds, macros and H."""

from __future__ import annotations

import pytest

from schedd.core import schedule as sched
from schedd.core.schedule_words import describe, words

CASES = [
    # (schedule, zone, words)
    ("", "UTC", "on demand"),
    ("none", "Europe/Berlin", "on demand"),
    ("@every 5m", "UTC", "every 5 minutes"),
    ("@every 1m", "UTC", "every minute"),
    ("@every 1d", "Europe/Berlin", "every day"),
    ("@every 1h30m", "UTC", "every 1 hour 30 minutes"),
    ("@every 90s", "UTC", "every 1 minute 30 seconds"),
    ("@every 1500ms", "UTC", "every 1 second 500 milliseconds"),
    ("at 2026-12-01T10:00:00", "Europe/Berlin", "once, at 2026-12-01 10:00 (Europe/Berlin)"),
    ("at 2026-12-01T10:00:30Z", "UTC", "once, at 2026-12-01 10:00:30 (UTC)"),
    ("30 2 * * *", "Europe/Berlin", "at 02:30 every day, Europe/Berlin"),
    ("0 0 * * *", "UTC", "at 00:00 every day, UTC"),
    ("@daily", "America/New_York", "at 00:00 every day, America/New_York"),
    ("@midnight", "UTC", "at 00:00 every day, UTC"),
    ("*/5 * * * *", "UTC", "every 5 minutes"),
    ("*/5 * * * *", "Europe/Berlin", "every 5 minutes"),          # the zone changes nothing here
    ("* * * * *", "UTC", "every minute"),
    ("@minutely", "UTC", "every minute"),
    ("@hourly", "UTC", "every hour, on the hour"),
    ("15 * * * *", "UTC", "every hour, at :15"),
    ("0 */2 * * *", "UTC", "every 2 hours, on the hour, UTC"),
    ("15 */3 * * *", "UTC", "every 3 hours, at :15, UTC"),
    ("0 1-23/2 * * *", "UTC", "every 2 hours, on the hour from 01:00, UTC"),
    ("30 8-18 * * *", "UTC", "every hour from 08:30 to 18:30 every day, UTC"),
    ("0 1,3,5,7,9,11,13 * * *", "UTC", "every 2 hours from 01:00 to 13:00 every day, UTC"),
    ("0 8-18/2 * * *", "UTC", "at 08:00, 10:00, 12:00, 14:00, 16:00 and 18:00 every day, UTC"),
    ("0 9,17 * * *", "UTC", "at 09:00 and 17:00 every day, UTC"),
    ("*/15 9 * * *", "UTC", "at 09:00, 09:15, 09:30 and 09:45 every day, UTC"),
    ("*/10 9-17 * * 1-5", "UTC", "every 10 minutes from 09:00 to 17:59 on weekdays (Monday to Friday), UTC"),
    ("*/15 */2 * * *", "UTC", "every 15 minutes in every 2nd hour, UTC"),
    ("5,20,35 * * * *", "UTC", "at minutes :05, :20 and :35 past every hour"),
    ("0-29 * * * *", "UTC", "at minutes :00 to :29 past every hour"),
    ("0 9 * * 1-5", "UTC", "at 09:00 on weekdays (Monday to Friday), UTC"),
    ("0 9 * * MON-FRI", "UTC", "at 09:00 on weekdays (Monday to Friday), UTC"),
    ("0 0 * * SAT,SUN", "UTC", "at 00:00 on weekends (Saturday and Sunday), UTC"),
    ("0 0 * * 0", "UTC", "at 00:00 on Sundays, UTC"),
    ("0 0 * * 7", "UTC", "at 00:00 on Sundays, UTC"),                # 7 is Sunday too
    ("@weekly", "UTC", "at 00:00 on Sundays, UTC"),
    ("0 0 * * 1,3,5", "UTC", "at 00:00 on Mondays, Wednesdays and Fridays, UTC"),
    ("0 0 * * FRI-MON", "UTC", "at 00:00 on Friday to Monday, UTC"),  # a wrapping range
    ("0 0 1 * *", "UTC", "at 00:00 on the 1st of every month, UTC"),
    ("@monthly", "UTC", "at 00:00 on the 1st of every month, UTC"),
    ("0 0 1,15 * *", "UTC", "at 00:00 on the 1st and the 15th of every month, UTC"),
    ("0 0 1-7 * *", "UTC", "at 00:00 on the 1st to the 7th of every month, UTC"),
    ("0 0 */2 * *", "UTC", "at 00:00 on every 2nd day of every month, UTC"),
    ("0 0 L * *", "UTC", "at 00:00 on the last day of every month, UTC"),
    ("0 0 15,L * *", "UTC", "at 00:00 on the 15th and the last day of every month, UTC"),
    ("0 0 * * 5#3", "UTC", "at 00:00 on the third Friday of every month, UTC"),
    ("0 0 ? * 1#1", "UTC", "at 00:00 on the first Monday of every month, UTC"),
    ("0 0 * * L5", "UTC", "at 00:00 on the last Friday of every month, UTC"),
    ("0 0 1 * MON", "UTC", "at 00:00 on the 1st of every month or on Mondays, UTC"),  # OR, as the day rule
    ("@yearly", "UTC", "at 00:00 on the 1st of January, UTC"),
    ("0 0 29 2 *", "UTC", "at 00:00 on the 29th of February, UTC"),
    ("0 0 1 */3 *", "UTC", "at 00:00 on the 1st of January, April, July and October, UTC"),
    ("0 12 * JAN,JUL *", "UTC", "at 12:00 every day in January and July, UTC"),
    ("0 12 * MAR-OCT *", "UTC", "at 12:00 every day in March to October, UTC"),
    ("0 0,12 1 * *", "UTC", "at 00:00 and 12:00 on the 1st of every month, UTC"),
    ("*/30 * * * * *", "UTC", "every 30 seconds"),
    ("*/20 * * * * *", "UTC", "every 20 seconds"),
    ("10 * * * * *", "UTC", "at second 10 of every minute"),
    ("*/10 5 * * * *", "UTC", "every 10 seconds during minute :05 of every hour"),
    ("30 0 9 * * *", "UTC", "at 09:00:30 every day, UTC"),
]


@pytest.mark.parametrize(("spec", "tz", "expected"), CASES, ids=[c[0] or "empty" for c in CASES])
def test_a_schedule_reads_in_words(spec, tz, expected):
    assert words(spec, tz, "some-job") == expected


def test_hashed_fields_read_as_the_values_they_place_for_the_job():
    s = sched.parse("H H * * *", "UTC", hash_key="nightly")
    fire = sched.next_after(s, 0)
    hhmm = sched.format_ms(fire, "UTC")[11:16]
    assert words("H H * * *", "UTC", "nightly") == f"at {hhmm} every day, UTC"
    assert words("H/15 * * * *", "UTC", "nightly").startswith("every 15 minutes")


def test_text_that_does_not_parse_reads_as_itself():
    assert words("bogus", "UTC") == "bogus"
    assert words("0 0 * * *", "Mars/Olympus") == "0 0 * * *"


def test_describe_reads_a_parsed_schedule_with_its_zone():
    assert describe(sched.parse("0 6 * * 1-5", "Asia/Tokyo")) == "at 06:00 on weekdays (Monday to Friday), Asia/Tokyo"


def test_cron_sets_expand_names_wraps_and_the_day_rule():
    c = sched.cron_sets(sched.parse("0 9-17/4 * JAN,OCT-DEC FRI-MON"))
    assert c is not None
    assert c.hours == (9, 13, 17) and c.months == (1, 10, 11, 12) and c.weekdays == (0, 1, 5, 6)
    assert c.any_day and not c.any_weekday
    assert sched.cron_sets(sched.parse("@every 5m")) is None
    assert sched.period_ms(sched.parse("@every 5m")) == 300_000
    assert sched.at_ms(sched.parse("at 2026-01-01T00:00:00Z")) == 1_767_225_600_000
