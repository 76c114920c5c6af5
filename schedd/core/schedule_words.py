"""A schedule read in words, for people: "at 02:30 every day, Europe/Berlin", "every 5 minutes",
"on demand", "once, at 2026-12-01 10:00 (Europe/Berlin)".

Pure: it reads the parsed `Schedule` (cron fields as `schedule.cron_sets` expands them, so H,
names, wrapping ranges and steps read as what they match, and the day-of-month/day-of-week rule
is schedule.py's, not re-derived here). The API sends it with every job (Job.schedule_words) so
that `schedctl` and the dashboard show the same words without schedule code of their own.

The words describe the wall-clock times in the job's zone, which they name whenever hours or
days matter; DST handling is not repeated here (`dst_note` says how a transition shapes a fire).
"""

from __future__ import annotations

import functools

from schedd.core import schedule as sched
from schedd.core.schedule import CronSets, Schedule

__all__ = ["describe", "words"]

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_NTH = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 0: "last"}
_UNITS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1000, "second"), (1, "millisecond"))
_MAX_TIMES = 6          # at most this many times of day are listed one by one


def words(spec: str, tz: str = "UTC", hash_key: str = "", gap: str = "", fold: str = "") -> str:
    """`describe` of schedule text (`parse`'s arguments); text that does not parse reads as
    itself. Cached: listings ask for the same few specs again and again (the hash key counts
    only where the spec has an H)."""
    return _words(spec, tz, hash_key if sched.uses_hash(spec) else "", gap, fold)


@functools.lru_cache(maxsize=4096)
def _words(spec: str, tz: str, hash_key: str, gap: str, fold: str) -> str:
    try:
        return describe(sched.parse(spec, tz, hash_key=hash_key, gap=gap, fold=fold))
    except sched.ScheduleError:
        return spec


def describe(s: Schedule) -> str:
    if s.kind == "none":
        return "on demand"
    if s.kind == "every":
        return "every " + _duration(sched.period_ms(s))
    if s.kind == "at":
        local = sched.format_ms(sched.at_ms(s), s.tz)
        return f"once, at {local[:10]} {local[11:16]}{local[16:19] if local[17:19] != '00' else ''} ({s.tz})"
    sets = sched.cron_sets(s)
    assert sets is not None
    time = _time_of_day(sets)
    days = _days(sets)
    if days == "every day" and "every" in time and _even(sets.hours, 0, 23):
        days = ""                    # "every 5 minutes", not "every 5 minutes every day"
    text = f"{time} {days}".strip() if days else time
    if _zone_matters(sets):
        text += f", {s.tz}"
    return text


# ---------------------------------------------------------------- durations and lists

def _duration(ms: int) -> str:
    """1h30m -> "1 hour 30 minutes"; 1d -> "day"."""
    for unit_ms, name in _UNITS:
        if ms == unit_ms:
            return name
    parts = []
    for unit_ms, name in _UNITS:
        n, ms = divmod(ms, unit_ms)
        if n:
            parts.append(f"{n} {name}" + ("s" if n > 1 else ""))
    return " ".join(parts)


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _even(values: tuple[int, ...], lo: int, hi: int) -> int:
    """The step of `values` when they repeat evenly through the whole field (``*/n``, ``H/n``,
    ``*``: every n-th value from one below n), else 0."""
    if not values or values[0] - lo >= (values[1] - values[0] if len(values) > 1 else hi - lo + 1):
        return 0
    step = values[1] - values[0] if len(values) > 1 else hi - lo + 1
    return step if values == tuple(range(values[0], hi + 1, step)) and len(values) > 1 else 0


def _progression(values: tuple[int, ...]) -> int:
    """The common step of `values` (at least 3 of them, evenly spaced), else 0."""
    if len(values) < 3:
        return 0
    step = values[1] - values[0]
    return step if all(b - a == step for a, b in zip(values, values[1:])) else 0


def _is_all(values: tuple[int, ...], lo: int, hi: int) -> bool:
    return values == tuple(range(lo, hi + 1))


# ---------------------------------------------------------------- time of day

def _time_of_day(c: CronSets) -> str:
    secs, mins, hours = c.seconds, c.minutes, c.hours
    if len(secs) * len(mins) * len(hours) <= _MAX_TIMES:
        show_s = secs != (0,)
        times = [f"{h:02d}:{m:02d}" + (f":{s:02d}" if show_s else "") for h in hours for m in mins for s in secs]
        return "at " + _join(times)
    if secs != (0,):
        return _seconds_phrase(secs) + _within(mins, hours)
    return _minutes_phrase(mins, hours)


def _seconds_phrase(secs: tuple[int, ...]) -> str:
    if _is_all(secs, 0, 59):
        return "every second"
    step = _even(secs, 0, 59)
    if step:
        return f"every {step} seconds" + (f" from :{secs[0]:02d}" if secs[0] else "")
    if len(secs) == 1:
        return f"at second {secs[0]} of every minute"
    return "at seconds " + _values(secs)


def _within(mins: tuple[int, ...], hours: tuple[int, ...]) -> str:
    """Where a sub-minute repetition happens: "" (every minute of the day), " during minute :05
    of every hour", " from 09:00 to 09:59"."""
    all_m, all_h = _is_all(mins, 0, 59), _is_all(hours, 0, 23)
    where = []
    if not all_m:
        where.append("during " + _minute_set(mins) + (" of every hour" if all_h else ""))
    if not all_h:
        where.append(_hour_window(hours))
    return "".join(" " + w for w in where)


def _minute_set(mins: tuple[int, ...]) -> str:
    step = _even(mins, 0, 59)
    if step:
        return f"every {_ordinal(step)} minute"
    if len(mins) == 1:
        return f"minute :{mins[0]:02d}"
    return "minutes " + _values(mins, ":")


def _values(values: tuple[int, ...], prefix: str = "") -> str:
    """A sorted set of field values: a run "a to b", or listed."""
    if len(values) > 2 and values == tuple(range(values[0], values[-1] + 1)):
        return f"{prefix}{values[0]:02d} to {prefix}{values[-1]:02d}" if prefix else f"{values[0]} to {values[-1]}"
    return _join([f"{prefix}{v:02d}" if prefix else str(v) for v in values])


def _minutes_phrase(mins: tuple[int, ...], hours: tuple[int, ...]) -> str:
    all_m, all_h = _is_all(mins, 0, 59), _is_all(hours, 0, 23)
    step = _even(mins, 0, 59)
    if all_m:
        rep = "every minute"
    elif step:
        rep = f"every {step} minutes" + (f" from :{mins[0]:02d}" if mins[0] else "")
    elif len(mins) == 1:
        return _hourly_at(mins[0], hours)
    else:
        rep = "at minutes " + _values(mins, ":") + " past every hour"
    if all_h:
        return rep
    return f"{rep} {_hour_window(hours)}"


def _hourly_at(minute: int, hours: tuple[int, ...]) -> str:
    """One minute of several hours (more than _MAX_TIMES of them)."""
    past = "on the hour" if minute == 0 else f"at :{minute:02d}"
    if _is_all(hours, 0, 23):
        return f"every hour, {past}"
    step = _even(hours, 0, 23)
    if step:
        start = f" from {hours[0]:02d}:{minute:02d}" if hours[0] else ""
        return f"every {step} hours, {past}{start}"
    step = _progression(hours)
    if step:
        every = "every hour" if step == 1 else f"every {step} hours"
        return f"{every} from {hours[0]:02d}:{minute:02d} to {hours[-1]:02d}:{minute:02d}"
    return f"at :{minute:02d} past hours " + _values(hours)


def _hour_window(hours: tuple[int, ...]) -> str:
    if len(hours) == 1:
        return f"from {hours[0]:02d}:00 to {hours[0]:02d}:59"
    if hours == tuple(range(hours[0], hours[-1] + 1)):
        return f"from {hours[0]:02d}:00 to {hours[-1]:02d}:59"
    step = _even(hours, 0, 23)
    if step:
        return f"in every {_ordinal(step)} hour" + (f" from {hours[0]:02d}:00" if hours[0] else "")
    return "in hours " + _values(hours)


# ---------------------------------------------------------------- days

def _days(c: CronSets) -> str:
    month = _months(c.months)
    if c.any_day and c.any_weekday:
        return "every day" + (f" in {month}" if month else "")
    parts = []
    of_month = f" of {month}" if month else " of every month"
    if not c.any_day:
        parts.append(_month_days(c) + of_month)
    if not c.any_weekday:
        parts.append(_weekdays(c, of_month if c.any_day else "") + (f" in {month}" if month and not c.nth_weekdays
                                                                    and c.any_day else ""))
    return " or ".join(parts)


def _month_days(c: CronSets) -> str:
    days = c.days
    items = []
    step = _progression(days)
    if step and days[0] <= step and days[-1] + step > 31 and not c.last_day:
        return f"on every {_ordinal(step)} day" + (f" from the {_ordinal(days[0])}" if days[0] != 1 else "")
    if len(days) > 2 and days == tuple(range(days[0], days[-1] + 1)):
        items.append(f"the {_ordinal(days[0])} to the {_ordinal(days[-1])}")
    else:
        items.extend(f"the {_ordinal(d)}" for d in days)
    if c.last_day:
        items.append("the last day")
    return "on " + _join(items)


def _weekdays(c: CronSets, of_month: str) -> str:
    if c.nth_weekdays:
        return "on " + _join([f"the {_NTH[k]} {_WEEKDAYS[d]}" for d, k in c.nth_weekdays]) + of_month
    wd = c.weekdays
    if wd == (1, 2, 3, 4, 5):
        return "on weekdays (Monday to Friday)"
    if wd == (0, 6):
        return "on weekends (Saturday and Sunday)"
    # a run that wraps past Saturday reads from its real start: FRI-MON is Friday to Monday
    for shift in range(7):
        rolled = tuple(sorted((d - shift) % 7 for d in wd))
        if len(wd) > 2 and rolled == tuple(range(len(wd))):
            return f"on {_WEEKDAYS[shift]} to {_WEEKDAYS[(shift + len(wd) - 1) % 7]}"
    return "on " + _join([_WEEKDAYS[d] + "s" for d in wd])


def _months(months: tuple[int, ...]) -> str:
    """"" for every month; else the months, a run of three or more as "March to October"."""
    if _is_all(months, 1, 12):
        return ""
    if len(months) > 2 and months == tuple(range(months[0], months[-1] + 1)):
        return f"{_MONTHS[months[0] - 1]} to {_MONTHS[months[-1] - 1]}"
    return _join([_MONTHS[m - 1] for m in months])


def _zone_matters(c: CronSets) -> bool:
    """Whether the zone changes what the words mean: not for a repetition within every hour of
    every day ("every 5 minutes")."""
    return not (_is_all(c.hours, 0, 23) and c.any_day and c.any_weekday and _is_all(c.months, 1, 12))
