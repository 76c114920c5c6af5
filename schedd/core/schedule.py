"""Schedules: parse a job's schedule text and compute its fire instants.

Pure and deterministic: no clock, no I/O after a zone is first loaded, no randomness and no
Python `hash()` of strings, so every Raft replica computes the same instants from the same log.
All instants are integer UTC epoch milliseconds.

Syntax (see `parse`):

- ``""``, ``none``, ``@none``: on demand only; never fires by itself.
- cron, 5 fields ``minute hour day-of-month month day-of-week`` or 6 fields with LEADING
  seconds ``second minute hour day-of-month month day-of-week``. Numbers, ``*``, ``?`` (day
  fields only; same as ``*``), ranges ``a-b`` (wrapping ones like ``FRI-MON`` too), steps ``/n``,
  lists, ``JAN``..``DEC``, ``SUN``..``SAT`` (``0`` and ``7`` are Sunday), ``L`` (last day of
  the month), ``5#3`` (third Friday), ``L5`` (last Friday). Hashed fields, Jenkins style:
  ``H``, ``H/15``, ``H(0-29)``, ``H(0-29)/10``, spread by the schedule's hash key (the job id)
  through croniter's CRC-32 based expansion. Macros ``@yearly``/``@annually``, ``@monthly``,
  ``@weekly``, ``@daily``/``@midnight``, ``@hourly``, ``@minutely`` expand to the usual fixed
  expressions (not hashed).
- ``@every <duration>``: whole numbers with units ``ms s m h d`` (``90s``, ``1h30m``), at least
  1 s. Fires at every multiple of the period since the Unix epoch, so ``@every 1h`` fires on
  the hour and ``@every 10s`` at :00, :10, ... The time zone plays no part.
- ``at <RFC 3339 time>``: a one-off. A time without an offset is read in the schedule's zone.

Field arithmetic (schedd expands fields itself; croniter only places H). A field is a list of
tokens; its values are the union of theirs. ``*`` (and ``?``) is every value of the field
(day-of-week 0-6); ``a`` is one value (leading zeros and names are the same value: ``05``,
``5``, ``FRI``; ``7`` is Sunday); ``a-b`` with a <= b is a through b, so an equal range ``5-5``,
``05-5`` or ``SUN-0`` is that one value and ``0-7`` is the whole week; ``a-b`` with a > b wraps
past the end of the field (``FRI-MON`` is Fri, Sat, Sun, Mon; ``23-3`` is 23, 0, 1, 2, 3; a
day-of-week range starting at 7 reads 7 as 0, so ``7-3`` is ``0-3``). A step ``/n`` takes every
n-th value counting from the range's start and across the wrap (``OCT-FEB/2`` is Oct, Dec, Feb;
``23-3/2`` is 23, 1, 3; ``FRI-TUE/3`` is Fri, Mon); ``*/n`` counts from the field's lowest value
and ``a/n`` means ``a-<highest value>/n``. A step larger than its range leaves the start alone.

The day rule (croniter's, not Vixie cron's): a day field is *unrestricted* when written ``*``,
``?`` or ``*/1``, or when it lists every value of its field (day-of-month 1-31, where ``L``
counts as 31) while the other day field contains a ``*``. Both unrestricted: every day. One
unrestricted: the other decides alone. Both restricted: a day matches if EITHER matches (OR).
Vixie cron differs: it ANDs the two whenever either field starts with ``*``, so ``0 0 */2 * MON``
fires on odd days that are Mondays there, and on odd days or Mondays here.

Refused rather than guessed: ``#``/``L5`` beside a restricted day-of-month (croniter silently
drops the day-of-month there), plain weekdays mixed with ``#``/``L`` ones in one list, ``W``
and the random ``R``, and an expression that can never fire (``0 0 30 2 *``).

Time zones and daylight saving time. Cron expressions are matched against the local
wall-clock time of the schedule's IANA zone; each matching wall time is then mapped to UTC:

- Spring forward (a gap): a wall time that does not exist fires once, at the first valid
  instant after the gap, which is the transition instant itself (Europe/Berlin 2026-03-29
  02:30 fires at 03:00 CEST = 01:00Z). Several matches inside one gap all map to that one
  instant, so they fire once in total.
- Fall back (a fold): a wall time that occurs twice fires once, at its FIRST occurrence. The
  second pass through the repeated hour fires nothing.

Those rules (gap ``shift``, fold ``first``) are the default of a cron at FIXED local times: one
whose hour field names hours (``30 2 * * *``, ``0 9,17 * * *``, ``0 8-18 * * *``). A cron whose
hour field is a wildcard or has a step (``@hourly``, ``*/15 * * * *``, ``0 */2 * * *``,
``0 H/3 * * *``) follows REAL time instead, as Vixie cron does: a wall time inside a gap does not
exist and fires nothing (gap ``skip``), and a wall time in a fold fires in both passes (fold
``both``): ``@hourly`` fires once every real hour through both transitions. A job may name
either policy explicitly (`parse(..., gap=, fold=)`, job spec keys ``dst_gap`` and
``dst_fold``); an explicit policy wins over the default:

- ``gap="shift"``: as above; ``gap="skip"``: a wall time inside a gap does not fire at all that
  day (Berlin ``30 2 * * *`` has no fire on 2026-03-29).
- ``fold="first"``: as above; ``fold="last"``: a repeated wall time fires once, at its SECOND
  occurrence (Berlin 2026-10-25 02:30 fires at 02:30 CET = 01:30Z); ``fold="both"``: it fires
  at both occurrences (00:30Z and 01:30Z).

With any policy `next_after` is strictly increasing, and neither a gap nor the second pass
through a fold is walked second by second. The default rules also read a local time without
offset in `parse_time` and ``at`` (policies apply to cron schedules only; give an ``at`` time an
explicit offset to pick the other occurrence of a repeated time).

Cron granularity is one second; `next_after` accepts any millisecond. Instants are computed
between 1900 and the end of year 9998: for an earlier `after_ms` the first fire from
1900-01-01T00:00:00Z on is returned, and nothing is returned beyond 9998.

Speed: fields are expanded once per field text (cached), so jobs that differ only in their
hash key share nearly all work, and the fire search itself is table lookups over the expanded
sets (a few microseconds per next fire).

Zone data and zone names come from the `tzdata` package when it is installed, never from the
host's /usr/share/zoneinfo: replicas must agree on every offset, and a pinned Python dependency is
the same on every node while host packages drift. Keep the `tzdata` and `croniter` versions
identical across a cluster (croniter's hash expansion decides where ``H`` lands).
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from typing import Any, cast
from collections.abc import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterError, croniter
from croniter.croniter import HashExpander

__all__ = [
    "FOLD_POLICIES",
    "GAP_POLICIES",
    "RULES",
    "CronSets",
    "Schedule",
    "ScheduleError",
    "at_ms",
    "cron_sets",
    "dst_note",
    "format_ms",
    "hashed_fields",
    "instant_key",
    "next_after",
    "next_n",
    "parse",
    "parse_time",
    "period_ms",
    "validate_tz",
]


class ScheduleError(ValueError):
    """A schedule, time zone or time that cannot be accepted; the message names the bad part."""


# ----------------------------------------------------------------------------------- constants

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MIN_YEAR, _MAX_YEAR = 1900, 9998
_MIN_S = (date(_MIN_YEAR, 1, 1).toordinal() - _EPOCH_ORDINAL) * 86400
_MAX_S = (date(_MAX_YEAR + 1, 1, 1).toordinal() - _EPOCH_ORDINAL) * 86400  # exclusive
_MAX_SEARCH_STEPS = 12 * 500  # month/day steps; the sparsest valid cron ("1#5" in FEB) needs ~400
_MIN_PERIOD_MS = 1000
_MAX_PERIOD_MS = 3650 * 86_400_000

#: Zone names that are UTC at every instant: they take the arithmetic-only fast path and are
#: written with a "Z".
_UTC_NAMES = frozenset({
    "UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu",
    "GMT", "Etc/GMT", "Etc/GMT0", "Etc/GMT+0", "Etc/GMT-0", "GMT0", "GMT+0", "GMT-0",
    "Etc/Greenwich", "Greenwich",
})

# croniter's internal field order (seconds last) and per-field facts.
_MINUTE, _HOUR, _DOM, _MONTH, _DOW, _SECOND = range(6)
_FIELD_NAME = ("minute", "hour", "day-of-month", "month", "day-of-week", "second")
_FIELD_RANGE = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7), (0, 59))
_USER_ORDER = {5: (_MINUTE, _HOUR, _DOM, _MONTH, _DOW),
               6: (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW)}
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DOW_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MONTH_LEN = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ALL_DAYS = tuple(tuple(range(1, n + 1)) for n in range(32))

_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *", "@minutely": "* * * * *",
}
_NONE_SPECS = frozenset({"", "none", "@none"})

#: The revision of schedd's own cron rules (field arithmetic, the day rule, the DST defaults).
#: Replicas must compute the same instants, so it travels with croniter's version wherever that
#: is compared (joining, restoring, cluster status). 2: fields expanded by schedd (equal ranges
#: spelled two ways, wrapping ranges with steps), the fixed-time/repeating-hour DST split.
RULES = 2

#: DST policies (module doc): the first of each is the fixed-time default.
GAP_POLICIES = ("shift", "skip")
FOLD_POLICIES = ("first", "last", "both")
_MAX_GAP_SKIPS = 10_000  # a skip-gap cron whose every match falls in a gap runs out by then

_FIELD_CHARS = re.compile(r"[0-9a-z*?,/#()\-]+")
_HASH_FIELD = re.compile(r"[hr](?:\(\d+-\d+\))?(?:/\d+)?", re.ASCII)
_HASH_TOKEN = re.compile(r"(?:^|[\s,])[hH](?:$|[\s(/,])")  # an H field anywhere in a spec
_EVERY = re.compile(r"@every(?:\s+(.*))?", re.IGNORECASE | re.DOTALL)
_AT = re.compile(r"at(?:\s+(.*))?", re.IGNORECASE | re.DOTALL)
_DURATION = re.compile(r"(?:\d+(?:ms|s|m|h|d))+", re.ASCII)
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d)", re.ASCII)
_DURATION_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))?",
    re.ASCII,
)


# ------------------------------------------------------------------------------------ zones

@functools.cache
def _tzdata_names() -> frozenset[str] | None:
    """Zone names in the pinned `tzdata` package, or None when it is not installed."""
    try:
        text = importlib.resources.files("tzdata").joinpath("zones").read_text("utf-8")
    except (ModuleNotFoundError, OSError):
        return None
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


@functools.cache
def _zone_names() -> dict[str, str]:
    """Lower-case name -> canonical name of every known zone (error and case-fixing paths).

    From the pinned package, never the host, so error texts are the same on every replica."""
    names = _tzdata_names() or available_timezones()
    return {name.lower(): name for name in sorted(names)}


@functools.cache
def _zone(name: str) -> tzinfo:
    """Load a zone from the pinned `tzdata` package, not the host (see module doc): a name the
    package lacks is unknown even if /usr/share/zoneinfo has it ("localtime", newer zones).

    Only without the package does it fall back to ZoneInfo's own search. The cache is bounded
    by the number of real zone names: a bad name raises and is not cached."""
    names = _tzdata_names()
    try:
        if names is None:
            return ZoneInfo(name)
        if name not in names:
            raise ZoneInfoNotFoundError(name)
        resource = importlib.resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
        with resource.open("rb") as f:
            return ZoneInfo.from_file(f, key=name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"unknown time zone {name!r}") from None


def validate_tz(tz: str | None) -> str:
    """Return the canonical IANA name for `tz` ("" / None -> "UTC") or raise ScheduleError.

    A name that differs only in case ("europe/berlin") is corrected; a misspelt one gets a
    suggestion in the message."""
    name = (tz or "").strip() or "UTC"
    if name in _UTC_NAMES:
        return name
    try:
        _zone(name)
        return name
    except ScheduleError:
        pass
    canonical = _zone_names().get(name.lower())
    if canonical is not None and canonical != name:
        return validate_tz(canonical)
    close = difflib.get_close_matches(name, list(_zone_names().values()), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ScheduleError(f"unknown time zone {name!r}{hint}")


Fields = tuple[int, int, int, int, int, int]     # (year, month, day, hour, minute, second)


def _secs(off: timedelta | None) -> int:
    """A UTC offset in seconds (None, which no zone of ours returns, reads as 0)."""
    return 0 if off is None else off.days * 86400 + off.seconds


def _offset_s(zone: tzinfo, t: int) -> int:
    """UTC offset in seconds in force at instant `t` (epoch seconds)."""
    return _secs(datetime.fromtimestamp(t, zone).utcoffset())


def _transition(zone: tzinfo, lo: int, hi: int) -> int:
    """The instant in (lo, hi] where the offset changes to the one in force at `hi`.

    Only called around a gap or fold, where exactly one transition lies in the window."""
    target = _offset_s(zone, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_s(zone, mid) == target:
            hi = mid
        else:
            lo = mid
    return hi


def _wall_to_utc(zone: tzinfo, wall: int, fields: Fields) -> tuple[int, int]:
    """Map a local wall time to (instant, next wall time worth trying), both in seconds.

    `wall` is the wall time as if it were UTC epoch seconds; `fields` its (y, mo, d, h, mi, s).
    Gap: the transition instant. Fold: the first occurrence, and the next wall time to try is
    the end of the repeated range, so a caller that needs a later instant skips the whole
    second pass at once."""
    naive = datetime(*fields)
    off0 = zone.utcoffset(naive)
    off1 = zone.utcoffset(datetime(*fields, fold=1))
    o0 = _secs(off0)
    if off0 == off1:
        return wall - o0, wall + 1
    o1 = _secs(off1)
    if o0 < o1:  # gap: fold=0 used the earlier (smaller) offset
        return _transition(zone, wall - o1, wall - o0), wall + 1
    first = wall - o0  # fold: first pass before the transition, second pass from it
    return first, _transition(zone, first, wall - o1) + o0


# ------------------------------------------------------------------------------ civil time

def _fields(t: int) -> Fields:
    """(year, month, day, hour, minute, second) of epoch seconds read as UTC."""
    days, sod = divmod(t, 86400)
    d = date.fromordinal(days + _EPOCH_ORDINAL)
    h, rem = divmod(sod, 3600)
    mi, s = divmod(rem, 60)
    return d.year, d.month, d.day, h, mi, s


def _seconds(y: int, mo: int, d: int, h: int, mi: int, s: int) -> int:
    """Inverse of `_fields`."""
    return (date(y, mo, d).toordinal() - _EPOCH_ORDINAL) * 86400 + h * 3600 + mi * 60 + s


def _month_len(y: int, mo: int) -> int:
    if mo == 2 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0):
        return 29
    return _MONTH_LEN[mo]


# --------------------------------------------------------------------------- expanded cron

class _FieldSet:
    """One expanded cron field: its sorted values and a next-value table for the search.

    table[x] is the smallest value >= x, or -1; table[size] is -1 so callers may probe x + 1."""

    __slots__ = ("values", "star", "last", "nth", "table", "first")

    def __init__(self, idx: int, star: bool, values: frozenset[int], last: bool,
                 nth: frozenset[tuple[int, int]]) -> None:
        hi = _FIELD_RANGE[idx][1]
        self.star = star  # written as *, ? or */1 (a full range is NOT star here)
        self.last = last  # day-of-month L
        self.values = tuple(sorted(values))
        self.nth = tuple(sorted(nth))  # (weekday, week 1-5 or 0 = last)
        size = 13 if idx == _MONTH else hi + 1
        table, nxt, chosen = [-1] * (size + 1), -1, set(self.values)
        for x in range(size - 1, -1, -1):
            nxt = x if x in chosen else nxt
            table[x] = nxt
        self.table = tuple(table)
        self.first = self.values[0] if self.values else -1


class _DayRule:
    """Which days of a month match day-of-month and day-of-week (OR when both restricted)."""

    __slots__ = ("dom", "dom_last", "dom_star", "dow", "nth", "dow_star", "_memo")

    def __init__(self, dom: _FieldSet, dom_star: bool, dow: _FieldSet, dow_star: bool) -> None:
        self.dom, self.dom_last, self.dom_star = dom.values, dom.last, dom_star
        self.dow, self.nth, self.dow_star = frozenset(dow.values), dow.nth, dow_star
        self._memo: dict[int, tuple[int, ...]] = {}

    def days(self, y: int, mo: int) -> tuple[int, ...]:
        """Sorted matching days of month `mo` of year `y` (memoized: a few months are hot)."""
        key = y * 16 + mo
        got = self._memo.get(key)
        if got is None:
            got = self._compute(y, mo)
            if len(self._memo) >= 1024:
                self._memo.clear()
            self._memo[key] = got
        return got

    def _compute(self, y: int, mo: int) -> tuple[int, ...]:
        n = _month_len(y, mo)
        if self.dom_star and self.dow_star:
            return _ALL_DAYS[n]
        by_dom = set() if self.dom_star else self._dom_days(n)
        by_dow = set() if self.dow_star else self._dow_days(y, mo, n)
        return tuple(sorted(by_dom | by_dow))

    def _dom_days(self, n: int) -> set[int]:
        days = {d for d in self.dom if d <= n}
        if self.dom_last:
            days.add(n)
        return days

    def _dow_days(self, y: int, mo: int, n: int) -> set[int]:
        first = (date(y, mo, 1).weekday() + 1) % 7  # cron numbering: Sunday = 0
        if not self.nth:
            return {d for d in range(1, n + 1) if (first + d - 1) % 7 in self.dow}
        days = set()
        for wday, k in self.nth:  # k = 1..5, or 0 for "last"
            d = 1 + (wday - first) % 7
            d = d + 7 * ((n - d) // 7) if k == 0 else d + 7 * (k - 1)
            if d <= n:
                days.add(d)
        return days


class _Cron:
    """Expanded cron sets as next-value tables, ready for `_next_wall`."""

    __slots__ = ("nmo", "mo0", "nh", "h0", "nmi", "mi0", "ns", "s0", "days", "rule")

    def __init__(self, sec: _FieldSet, minute: _FieldSet, hour: _FieldSet, month: _FieldSet,
                 rule: _DayRule) -> None:
        self.ns, self.s0 = sec.table, sec.first
        self.nmi, self.mi0 = minute.table, minute.first
        self.nh, self.h0 = hour.table, hour.first
        self.nmo, self.mo0 = month.table, month.first
        self.days = rule.days
        self.rule = rule


def _next_time_of_day(c: _Cron, h: int, mi: int, s: int) -> tuple[int, int, int] | None:
    """First matching (h, mi, s) >= the given one on the same day, or None."""
    h2 = c.nh[h]
    if h2 != h:
        return None if h2 < 0 else (h2, c.mi0, c.s0)
    m2 = c.nmi[mi]
    if m2 == mi:
        s2 = c.ns[s]
        if s2 >= 0:
            return h, mi, s2
        m2 = c.nmi[mi + 1]
    if m2 >= 0:
        return h, m2, c.s0
    h2 = c.nh[h + 1]
    return None if h2 < 0 else (h2, c.mi0, c.s0)


def _next_wall(c: _Cron, wall: int) -> tuple[int, int, int, int, int, int] | None:
    """First wall time >= `wall` (seconds, read as UTC) matching `c`, as fields; None if none
    before the end of year `_MAX_YEAR`. Each step advances at least one day."""
    y, mo, d, h, mi, s = _fields(wall)
    if y > _MAX_YEAR:
        return None
    start_of_day = False
    for _ in range(_MAX_SEARCH_STEPS):
        m2 = c.nmo[mo]
        if m2 != mo:
            if m2 < 0:
                y, m2 = y + 1, c.mo0
                if y > _MAX_YEAR:
                    return None
            mo, d, start_of_day = m2, 1, True
        days = c.days(y, mo)
        i = bisect_left(days, d)
        if i == len(days):
            mo, d, start_of_day = mo + 1, 1, True
            continue
        if days[i] != d:
            d, start_of_day = days[i], True
        if start_of_day:
            return y, mo, d, c.h0, c.mi0, c.s0
        tod = _next_time_of_day(c, h, mi, s)
        if tod is not None:
            return (y, mo, d) + tod
        d, start_of_day = d + 1, True
    return None


# ------------------------------------------------------------------------ cron compilation
#
# Three cache layers keep parse cheap for a million jobs that differ only in their hash key:
# the key-independent checks per field text (`_plain_field`), croniter's expansion per field
# text (`_field_set`), and the compiled sets per resolved expression (`_cron_for`). Only the
# H fields are computed per key, with croniter's own CRC-32 expander.

class _CronError(Exception):
    """A problem in a cron expression: (field index or None, reason). Texts inside the caches
    stay spec-independent; `_compile_cron` adds the spec to the message."""


@functools.lru_cache(maxsize=4096)
def _field_set(idx: int, text: str) -> _FieldSet:
    """Expand one resolved, lower-case field (cached per text: a million hashed jobs share the
    few distinct field texts)."""
    values, last, nth = _expand_field(idx, text)
    return _FieldSet(idx, text in _WILDCARDS, values, last, nth)


@functools.lru_cache(maxsize=4096)
def _plain_field(idx: int, text: str) -> str:
    """Refuse what we do not support, for a field without H; the text is its own resolution."""
    if not _FIELD_CHARS.fullmatch(text):
        bad = next(ch for ch in text if not _FIELD_CHARS.fullmatch(ch))
        raise _CronError(idx, f"unexpected character {bad!r}")
    tokens = text.split(",")
    if len(tokens) > 1 and any(t in ("*", "?") for t in tokens):
        raise _CronError(idx, "'*' and '?' cannot be combined with other values in a list")
    if idx == _DOM and "w" in text:
        raise _CronError(idx, "W (nearest weekday) is not supported")
    _field_set(idx, text)  # validate now, so the error names this field
    return text


def _resolve_field(idx: int, text: str, key: bytes) -> str:
    """The field with H replaced by the value croniter derives from `key`."""
    if not _HASH_FIELD.fullmatch(text):
        return _plain_field(idx, text)
    if text[0] == "r":
        raise _CronError(idx, "R (random) is not allowed: schedules must be deterministic; use H")
    if text == "h":  # the common case; what HashExpander.expand itself does for a bare H
        return str(_HASHER.do(idx, hash_id=key))
    try:
        return _HASHER.expand(text, idx, text, hash_id=key)
    except CroniterError as e:
        raise _CronError(idx, _explain_hash(idx, text) or str(e)) from None


_HASHER = HashExpander(cast(Any, croniter))      # the stubs type the argument as an instance


def _compile_cron(fields: tuple[str, ...], key: bytes, spec: str) -> _Cron:
    """Lower-case cron fields in the user's order -> `_Cron`; raises ScheduleError."""
    raw = dict(zip(_USER_ORDER[len(fields)], fields))
    try:
        resolved = tuple(_resolve_field(i, raw[i], key) if i in raw else "0" for i in range(6))
        return _cron_for(resolved, "*" in raw[_DOW], "*" in raw[_DOM])
    except _CronError as e:
        idx, reason = e.args
        if idx is None:
            raise ScheduleError(f"cron {spec!r} {reason}") from None
        raise ScheduleError(f"bad cron field {_FIELD_NAME[idx]!r} in {spec!r}: {reason}") from None


@functools.lru_cache(maxsize=8192)
def _cron_for(resolved: tuple[str, ...], dow_has_star: bool, dom_has_star: bool) -> _Cron:
    """Compile resolved fields (croniter order). Interned: hashed jobs landing on the same
    values share one object."""
    sets = [_field_set(i, text) for i, text in enumerate(resolved)]
    dom, dow = sets[_DOM], sets[_DOW]
    # The day rule (module doc): a day field is unrestricted if written as *, ? or */1, or if it
    # covers every value while the other day field contains a '*'.
    dom_days = len(set(dom.values) | ({31} if dom.last else set()))
    dom_star = dom.star or (dom_days == 31 and dow_has_star)
    dow_star = not dow.nth and (dow.star or (len(dow.values) == 7 and dom_has_star))
    if dow.nth and not dom_star:
        raise _CronError(_DOM, "an nth or last weekday ('#', 'L' in day-of-week) cannot be "
                               "combined with a day-of-month; use '*' or '?' there")
    rule = _DayRule(dom, dom_star, dow, dow_star)
    _check_fires(rule, sets[_MONTH].values)
    return _Cron(sets[_SECOND], sets[_MINUTE], sets[_HOUR], sets[_MONTH], rule)


def _check_fires(rule: _DayRule, months: tuple[int, ...]) -> None:
    """Refuse an expression that can never fire: only day-of-month can cause that (days that
    do not exist in any chosen month); a weekday always comes around."""
    if not rule.dow_star or rule.dom_star or rule.dom_last:
        return
    longest = max(29 if m == 2 else _MONTH_LEN[m] for m in months)
    if min(rule.dom) > longest:
        names = ",".join(_MONTH_NAMES[m - 1].upper() for m in months)
        raise _CronError(None, f"never fires: day-of-month {','.join(map(str, rule.dom))} "
                               f"does not occur in {names}")


# ------------------------------------------------------------------------ field expansion
#
# schedd expands every field itself, by the arithmetic the module doc states; croniter only
# places H. (croniter 7 reads an equal range spelled two ways, "05-5" or "SUN-0", as the whole
# field, and steps a wrapping range with a step from the wrong place after the wrap.)

#: Texts that leave a field unrestricted (what decides the day-of-month/day-of-week rule).
_WILDCARDS = frozenset({"*", "?", "*/1"})


def _cycle(idx: int) -> tuple[int, int]:
    """The field's values as a cycle, lowest and highest: day-of-week is 0-6 (7 is Sunday)."""
    lo, hi = _FIELD_RANGE[idx]
    return lo, 6 if idx == _DOW else hi


def _expand_field(idx: int, text: str) -> tuple[frozenset[int], bool, frozenset[tuple[int, int]]]:
    """(values, day-of-month L, nth weekdays as (weekday, week 1-5 or 0 = last)) of one field;
    raises _CronError naming the first bad token."""
    values: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last = False
    for token in text.split(","):
        if idx == _DOM and token == "l":
            last = True
        elif idx == _DOW and (token.startswith("l") or "#" in token):
            nth |= _nth_weekdays(token)
        else:
            values |= _token_values(idx, token)
    if nth and values:
        raise _CronError(idx, "plain weekdays cannot be combined with nth or last weekdays "
                              "('#', 'L') in one list")
    return frozenset(values), last, frozenset(nth)


def _token_values(idx: int, token: str) -> set[int]:
    """`*`, `?`, `a`, `a-b` (wrapping when a > b), each with an optional step `/n`; `a/n` is
    `a-<end of field>/n`. A range steps from its start, across the wrap."""
    base, slash, step_text = token.partition("/")
    step = _step(idx, token, step_text) if slash else 1
    lo, hi = _cycle(idx)
    if base in ("*", "?"):
        if base == "?" and idx not in (_DOM, _DOW):
            raise _CronError(idx, "'?' is only allowed in day-of-month and day-of-week")
        return set(range(lo, hi + 1, step))
    first_text, dash, last_text = base.partition("-")
    if "-" in last_text:
        raise _CronError(idx, f"{token.upper()!r} is not a value or a range a-b")
    a = _value(idx, first_text, token)
    if not dash and not slash:
        return {a % 7 if idx == _DOW else a}
    b = _value(idx, last_text, token) if dash else hi
    if idx == _DOW and a == 7 and b < 7:
        a = 0                            # 7 is Sunday: "7-3" is "0-3", "7-0" is Sunday alone
    if a > b:                            # wrap: continue past the end of the cycle
        b += hi - lo + 1
    n = hi - lo + 1
    return {lo + (x - lo) % n for x in range(a, b + 1, step)}


def _step(idx: int, token: str, text: str) -> int:
    if not text.isdigit() or not text.isascii() or int(text) == 0:
        raise _CronError(idx, f"step {text.upper()!r} in {token.upper()!r} must be a whole "
                               "number of at least 1")
    return int(text)


def _value(idx: int, text: str, token: str) -> int:
    """One number or name of field `idx`, range-checked (day-of-week allows 7 for Sunday)."""
    lo, hi = _FIELD_RANGE[idx]
    if text.isdigit() and text.isascii():
        if lo <= int(text) <= hi:
            return int(text)
        raise _CronError(idx, f"{int(text)} is out of range {lo}-{hi}")
    names = {_MONTH: _MONTH_NAMES, _DOW: _DOW_NAMES}.get(idx, ())
    if text in names:
        return names.index(text) + (1 if idx == _MONTH else 0)
    if text == "":
        raise _CronError(idx, f"missing value in {token.upper()!r} (negative numbers are not "
                              "allowed)")
    if text.startswith("h"):
        raise _CronError(idx, "H must be the whole field: H, H/15, H(0-29) or H(0-29)/10")
    if "l" in text and idx in (_DOM, _DOW):
        raise _CronError(idx, f"{token.upper()!r}: 'L' stands alone in day-of-month, or as "
                              "L0-L7 in day-of-week")
    if text in ("*", "?"):
        raise _CronError(idx, f"{token.upper()!r}: '*' and '?' cannot be part of a range")
    kind = {_MONTH: "a number or month name (JAN-DEC)",
            _DOW: "a number or weekday name (SUN-SAT)"}.get(idx, "a number")
    raise _CronError(idx, f"{text.upper()!r} is not {kind}")


def _nth_weekdays(token: str) -> set[tuple[int, int]]:
    """`L5` (the last Friday), `5#3` or `FRI#3` (the third Friday), `MON-FRI#2` (the second of
    each), as (weekday, week) pairs with week 0 for the last."""
    if token.startswith("l"):
        if "#" in token or "/" in token or "-" in token:
            raise _CronError(_DOW, f"{token.upper()!r}: 'L' stands alone in day-of-month, or "
                                   "as L0-L7 in day-of-week")
        return {(_value(_DOW, token[1:], token) % 7, 0)}
    days, _, k = token.partition("#")
    if "/" in token:
        raise _CronError(_DOW, f"{token.upper()!r}: a step cannot be combined with '#'")
    if not k.isdigit() or not k.isascii() or not 1 <= int(k) <= 5:
        raise _CronError(_DOW, f"{token.upper()!r}: the week number after '#' must be 1-5")
    return {(d, int(k)) for d in _token_values(_DOW, days)}


def _explain_hash(idx: int, text: str) -> str | None:
    m = re.fullmatch(r"h\((\d+)-(\d+)\)(?:/(\d+))?", text)
    if not m:
        return "H/0 is not a valid step" if text.endswith("/0") else None
    lo, hi = _FIELD_RANGE[idx]
    a, b = int(m[1]), int(m[2])
    if not (lo <= a <= hi and lo <= b <= hi):
        return f"H range {a}-{b} is out of range {lo}-{hi}"
    if a >= b:
        return f"H range {a}-{b} must have its end above its start"
    if m[3] is not None and int(m[3]) == 0:
        return "H step must be at least 1"
    return None


# --------------------------------------------------------------------------------- Schedule

@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule. Build it with `parse` (cached); compare and hash freely."""

    kind: str  # "cron" | "every" | "at" | "none"
    spec: str  # normalized text as the user should see it
    tz: str = "UTC"  # canonical IANA zone name
    _hash_key: str = field(default="", repr=False)  # "" unless the spec uses H
    _cron: _Cron | None = field(default=None, repr=False, compare=False)
    _tzinfo: tzinfo | None = field(default=None, repr=False, compare=False)  # None: UTC math
    _period_ms: int = field(default=0, repr=False, compare=False)
    _at_ms: int = field(default=0, repr=False, compare=False)
    gap: str = "shift"  # DST policies (module doc); always the defaults unless kind is cron
    fold: str = "first"

    def __reduce__(self) -> tuple[Callable[..., Schedule], tuple[str, str, str, str, str]]:
        """Pickle as the text only: small, and re-parsing re-uses the shared caches."""
        return _restore, (self.spec, self.tz, self._hash_key, self.gap, self.fold)


@dataclass(frozen=True, slots=True)
class CronSets:
    """What a cron schedule matches, as expanded values (H placed, names and ranges resolved):
    for readers that describe a schedule (`schedule_words`) rather than compute its fires."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    days: tuple[int, ...]                   # days of the month (without L)
    last_day: bool                          # L: the last day of the month
    any_day: bool                           # day-of-month unrestricted (the day rule, module doc)
    weekdays: tuple[int, ...]               # 0 = Sunday
    nth_weekdays: tuple[tuple[int, int], ...]   # (weekday, week 1-5 or 0 = last)
    any_weekday: bool                       # day-of-week unrestricted


def cron_sets(s: Schedule) -> CronSets | None:
    """The expanded fields of a cron schedule; None for the other kinds."""
    c = s._cron
    if s.kind != "cron" or c is None:
        return None

    def values(table: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted({v for v in table if v >= 0}))

    r = c.rule
    return CronSets(values(c.ns), values(c.nmi), values(c.nh), values(c.nmo), r.dom, r.dom_last, r.dom_star,
                    tuple(sorted(r.dow)), r.nth, r.dow_star)


def period_ms(s: Schedule) -> int:
    """The period of an ``@every`` schedule (0 for the other kinds)."""
    return s._period_ms if s.kind == "every" else 0


def at_ms(s: Schedule) -> int:
    """The instant of an ``at`` schedule (0 for the other kinds)."""
    return s._at_ms if s.kind == "at" else 0


def _restore(spec: str, tz: str, hash_key: str, gap: str = "", fold: str = "") -> Schedule:
    return parse(spec, tz, hash_key=hash_key, gap=gap, fold=fold)


@functools.lru_cache(maxsize=1 << 16)
def uses_hash(spec: str) -> bool:
    """Whether schedule text has an H field, so that what it means depends on parse's `hash_key`
    (the job's name)."""
    return bool(_HASH_TOKEN.search(spec))


def parse(spec: str | None, tz: str | None = "UTC", *, hash_key: str = "", gap: str = "",
          fold: str = "") -> Schedule:
    """Parse schedule text in time zone `tz`; `hash_key` (the job id) places H fields; `gap`
    (shift | skip) and `fold` (first | last | both) are the DST policies of a cron schedule
    ("" = the default; ignored by the other kinds).

    The normalized `spec` re-parses to an equal Schedule: "none" for on-demand; cron fields
    single-spaced and upper-cased ("*/15 9-17 * * MON-FRI", H kept as written); macros
    lower-cased; "@every 1h30m" in canonical units; "at <RFC 3339 in tz>". `tz` comes back
    canonical ("europe/berlin" -> "Europe/Berlin").

    Raises ScheduleError. Cached on (spec, tz, hash_key, gap, fold), 65536 entries, because
    apply calls it for every fire and registration; the key is dropped when the spec has no H,
    so jobs sharing a plain spec share one Schedule."""
    if spec is not None and not isinstance(spec, str):
        raise ScheduleError(f"schedule must be text, not {type(spec).__name__}")
    if tz is not None and not isinstance(tz, str):
        raise ScheduleError(f"time zone must be text, not {type(tz).__name__}")
    if gap and gap not in GAP_POLICIES:
        raise ScheduleError(f"dst_gap must be one of {', '.join(GAP_POLICIES)}, got {gap!r}")
    if fold and fold not in FOLD_POLICIES:
        raise ScheduleError(f"dst_fold must be one of {', '.join(FOLD_POLICIES)}, got {fold!r}")
    text = (spec or "").strip()
    if not uses_hash(text):
        hash_key = ""
    return _parse_cached(text, tz or "UTC", hash_key, gap, fold)


@functools.lru_cache(maxsize=1 << 16)
def _parse_cached(text: str, tz: str, hash_key: str, gap: str = "", fold: str = "") -> Schedule:
    tz = validate_tz(tz)
    low = text.lower()
    if low in _NONE_SPECS:
        return Schedule("none", "none", tz)
    if low.startswith("@every"):
        return _parse_every(text, tz)
    if _AT.fullmatch(text):
        return _parse_at(text, tz)
    if low.startswith("@"):
        if low not in _MACROS:
            raise ScheduleError(f"unknown schedule macro {text!r}; use one of "
                                f"{', '.join(_MACROS)}, @every <duration> or none")
        return _cron_schedule(low, _MACROS[low].split(), tz, "", gap, fold)
    fields = low.split()
    if len(fields) not in _USER_ORDER:
        raise ScheduleError(
            f"expected 5 cron fields (minute hour day-of-month month day-of-week) or 6 with "
            f"leading seconds, got {len(fields)} in {text!r}")
    normalized = " ".join(f.upper() for f in fields)
    return _cron_schedule(normalized, fields, tz, hash_key, gap, fold)


def _cron_schedule(normalized: str, fields: list[str], tz: str, hash_key: str,
                   gap: str = "", fold: str = "") -> Schedule:
    cron = _compile_cron(tuple(fields), hash_key.encode("utf-8"), normalized)
    zone = None if tz in _UTC_NAMES else _zone(tz)
    auto_gap, auto_fold = default_dst_policy(fields)
    return Schedule("cron", normalized, tz, hash_key, cron, zone, gap=gap or auto_gap,
                    fold=fold or auto_fold)


def default_dst_policy(fields: list[str]) -> tuple[str, str]:
    """The (gap, fold) policy of a cron whose job names none: Vixie cron's split. An hour field
    that is a wildcard or has a step ("*", "*/2", "H/3", "8-18/2") repeats through the day, so
    the job follows real time: a gap's wall times do not exist (skip) and a fold's run in both
    passes. Any other hour field names fixed local times: shift and first."""
    hour = fields[_USER_ORDER[len(fields)].index(_HOUR)] if len(fields) in _USER_ORDER else ""
    if "*" in hour or "?" in hour or "/" in hour:
        return "skip", "both"
    return GAP_POLICIES[0], FOLD_POLICIES[0]


def _parse_every(text: str, tz: str) -> Schedule:
    m = _EVERY.fullmatch(text)
    duration = (m[1] or "").strip() if m else ""
    if not duration:
        raise ScheduleError(f"expected '@every <duration>' like '@every 5m', got {text!r}")
    if not _DURATION.fullmatch(duration):
        raise ScheduleError(f"bad duration {duration!r} in {text!r}: use whole numbers with "
                            "units ms, s, m, h, d, like 30s, 5m or 1h30m")
    period = sum(int(n) * _DURATION_UNIT_MS[u] for n, u in _DURATION_PART.findall(duration))
    if period < _MIN_PERIOD_MS:
        raise ScheduleError(f"bad duration {duration!r} in {text!r}: the period must be at "
                            "least 1s")
    if period > _MAX_PERIOD_MS:
        raise ScheduleError(f"bad duration {duration!r} in {text!r}: the period must be at "
                            "most 3650d")
    return Schedule("every", f"@every {_format_duration(period)}", tz, _period_ms=period)


def _format_duration(ms: int) -> str:
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        n, ms = divmod(ms, _DURATION_UNIT_MS[unit])
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


def _parse_at(text: str, tz: str) -> Schedule:
    m = _AT.fullmatch(text)
    when = (m[1] or "").strip() if m else ""
    if not when:
        raise ScheduleError(f"expected 'at <RFC 3339 time>' like 'at 2026-12-01T10:00:00Z', "
                            f"got {text!r}")
    try:
        at_ms = parse_time(when, tz)
        normalized = f"at {format_ms(at_ms, tz)}"
    except ScheduleError as e:
        raise ScheduleError(f"bad at-time in {text!r}: {e}") from None
    return Schedule("at", normalized, tz, _at_ms=at_ms)


# ------------------------------------------------------------------------------ next fires

def next_after(s: Schedule, after_ms: int) -> int | None:
    """First fire instant strictly after `after_ms` (UTC epoch ms), or None if there is none
    (kind none, an `at` already past, or nothing before the end of year 9998)."""
    kind = s.kind
    if kind == "cron":
        return _next_cron(s, after_ms)
    if kind == "every":
        period = s._period_ms
        return (after_ms // period + 1) * period
    if kind == "at":
        return s._at_ms if s._at_ms > after_ms else None
    return None


def _next_cron(s: Schedule, after_ms: int) -> int | None:
    p = max(after_ms // 1000, _MIN_S - 1)  # the whole second holding after_ms; fire is later
    if p >= _MAX_S:
        return None
    c, zone = s._cron, s._tzinfo
    if c is None:                          # not a cron schedule (callers check s.kind)
        return None
    if zone is None:
        f = _next_wall(c, p + 1)
        return None if f is None else _seconds(*f) * 1000
    wall = p + _offset_s(zone, p) + 1
    gap, fold = s.gap, s.fold
    if fold != "first":
        # Inside a fold's first pass, the second pass (from the start of the repeated range)
        # still lies ahead as instants, though behind as wall times.
        got, wall = _from_first_pass(c, zone, p, wall, fold)
        if got is not None:
            return got * 1000
    if gap == "shift" and fold == "first":
        for _ in range(3):  # the 2nd round only follows a skip over a fold's second pass
            f = _next_wall(c, wall)
            if f is None:
                return None
            w = _seconds(*f)
            u, wall = _wall_to_utc(zone, w, f)
            if u > p:
                return u * 1000
        return None  # unreachable: after one skip the wall time lies beyond the fold
    for _ in range(_MAX_GAP_SKIPS):
        f = _next_wall(c, wall)
        if f is None:
            return None
        instants, wall = _wall_to_instants(zone, _seconds(*f), f, gap, fold)
        for u in instants:
            if u > p:
                return u * 1000
    return None


def _wall_to_instants(zone: tzinfo, wall: int, fields: Fields, gap: str,
                      fold: str) -> tuple[tuple[int, ...], int]:
    """Like `_wall_to_utc` under any policy: (instants for this wall time, ascending, and the
    next wall time worth trying), all in seconds."""
    naive = datetime(*fields)
    off0 = zone.utcoffset(naive)
    off1 = zone.utcoffset(datetime(*fields, fold=1))
    o0 = _secs(off0)
    if off0 == off1:
        return (wall - o0,), wall + 1
    o1 = _secs(off1)
    if o0 < o1:  # gap [T + o0, T + o1) in wall time
        t = _transition(zone, wall - o1, wall - o0)
        return ((), t + o1) if gap == "skip" else ((t,), wall + 1)
    first, second = wall - o0, wall - o1
    if fold == "first":
        return (first,), _transition(zone, first, second) + o0
    return ((second,) if fold == "last" else (first, second)), wall + 1


def _from_first_pass(c: _Cron, zone: tzinfo, p: int, wall: int,
                     fold: str) -> tuple[int | None, int]:
    """For fold "last" or "both" when instant `p` lies in the first pass through a repeated
    range: (the next fire up to the end of the second pass, or None; the wall time from which to
    search on). Otherwise (None, `wall`)."""
    fields = _fields(wall - 1)
    naive = datetime(*fields)
    off0, off1 = zone.utcoffset(naive), zone.utcoffset(datetime(*fields, fold=1))
    o0, o1 = _secs(off0), _secs(off1)
    if o0 <= o1 or _offset_s(zone, p) != o0:
        return None, wall  # no fold here, or p is already in its second pass
    t = _transition(zone, p, wall - 1 - o1)  # the fold's instant; repeated range [t+o1, t+o0)
    end = t + o0
    if fold == "both":  # the rest of the first pass
        f = _next_wall(c, wall)
        if f is not None and _seconds(*f) < end:
            return _seconds(*f) - o0, wall
    f = _next_wall(c, t + o1)  # the second pass
    if f is not None and _seconds(*f) < end:
        return _seconds(*f) - o1, wall
    return None, end


def dst_note(s: Schedule, t_ms: int) -> str:
    """How a daylight saving transition shaped the fire at instant `t_ms` of `s`, for people
    ("" when it did not): "shifted: 02:30 does not exist (clocks jump 02:00 -> 03:00)", or
    "repeated: 02:30 occurs twice, this is the 1st (CEST)". Previews (``schedctl job next``)."""
    zone = s._tzinfo
    if s.kind != "cron" or zone is None:
        return ""
    t = t_ms // 1000
    after, before = _offset_s(zone, t), _offset_s(zone, t - 1)
    if before < after and s._cron is not None:  # t ends a gap: did a wall time inside it land here?
        f = _next_wall(s._cron, t + before)
        if f is not None and _seconds(*f) < t + after:
            jump = f"{_hhmm(t + before)} -> {_hhmm(t + after)}"
            return f"shifted: {_hhmm(_seconds(*f), f[5])} does not exist (clocks jump {jump})"
    wall = t + after
    fields = _fields(wall)
    off1 = zone.utcoffset(datetime(*fields, fold=1))
    o1 = _secs(off1)
    off0 = zone.utcoffset(datetime(*fields))
    o0 = _secs(off0)
    if o0 > o1:
        nth = "1st" if after == o0 else "2nd"
        name = datetime.fromtimestamp(t, zone).tzname()
        return f"repeated: {_hhmm(wall, fields[5])} occurs twice, this is the {nth} ({name})"
    return ""


def _hhmm(wall: int, second: int = 0) -> str:
    h, m = wall % 86400 // 3600, wall % 3600 // 60
    return f"{h:02d}:{m:02d}" + (f":{second:02d}" if second else "")


def hashed_fields(spec: str, hash_key: str) -> tuple[str, ...] | None:
    """The fields of a cron with `H` as `parse` resolves them for `hash_key` (croniter's order),
    or None for any other text (or a bad one). Jobs whose fields resolve alike (and whose text,
    zone and DST policy are the same) have the same instants: grouping by this costs a few
    microseconds a job, where parsing each costs a compile (schedd.core.forecast groups a
    million jobs so)."""
    plan = _hash_plan(spec)
    if plan is None:
        return None
    fields, bare, other = plan
    key = hash_key.encode("utf-8")
    out = list(fields)
    try:
        for i in bare:
            out[i] = str(_HASHER.do(i, hash_id=key))
        for i in other:
            out[i] = _resolve_field(i, fields[i], key)
    except (_CronError, CroniterError):
        return None
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _hash_plan(spec: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]] | None:
    """Per schedule text: its fields (croniter's order, the plain ones resolved), the indexes of
    bare `H` fields and of the other hashed ones; None if it is no cron with H."""
    words = spec.strip().lower().split()
    if len(words) not in _USER_ORDER or not uses_hash(spec):
        return None
    raw = dict(zip(_USER_ORDER[len(words)], words))
    fields: list[str] = []
    bare: list[int] = []
    other: list[int] = []
    for i in range(6):
        text = raw.get(i, "0")
        if _HASH_FIELD.fullmatch(text):
            (bare if text == "h" else other).append(i)
            fields.append(text)
            continue
        try:
            fields.append(_plain_field(i, text))
        except _CronError:
            return None
    return tuple(fields), tuple(bare), tuple(other)


def instant_key(s: Schedule) -> tuple[Any, ...]:
    """A hashable key equal for schedules that name the same instants: the compiled cron tables
    (interned per resolved expression, so `H * * * *` jobs landing on one minute share a key,
    and so do `@hourly` and `0 * * * *`), the zone and the DST policy; the period of `@every`;
    the time of `at`. Different keys may still name the same instants (the key is a grouping
    aid for counting instants once per distinct schedule, schedd.core.forecast, never a proof
    of difference)."""
    if s.kind == "cron":
        return ("cron", s._cron, s.tz, s.gap, s.fold)
    if s.kind == "every":
        return ("every", s._period_ms)
    if s.kind == "at":
        return ("at", s._at_ms)
    return ("none",)


def next_n(s: Schedule, after_ms: int, n: int) -> list[int]:
    """The next `n` fire instants after `after_ms` (fewer if the schedule runs out)."""
    out: list[int] = []
    t = after_ms
    for _ in range(max(n, 0)):
        nxt = next_after(s, t)
        if nxt is None:
            break
        out.append(nxt)
        t = nxt
    return out


# ---------------------------------------------------------------------------- RFC 3339 I/O

def format_ms(ms: int, tz: str = "UTC") -> str:
    """RFC 3339 text for an instant in `tz`: "2026-11-29T02:00:00+01:00", or "...Z" in UTC.

    Milliseconds appear only when non-zero. A historical offset with seconds (local mean
    time), which RFC 3339 cannot write, is shown in UTC instead."""
    name = tz if tz in _UTC_NAMES else validate_tz(tz)
    secs, milli = divmod(int(ms), 1000)
    off = 0 if name in _UTC_NAMES else _safe_offset(_zone(name), secs)
    utc = name in _UTC_NAMES or off % 60 != 0
    if utc:
        off = 0
    try:
        y, mo, d, h, mi, s = _fields(secs + off)
    except (OverflowError, ValueError):
        raise ScheduleError(f"time {ms} ms is out of range") from None
    frac = f".{milli:03d}" if milli else ""
    sign, a = ("+" if off >= 0 else "-"), abs(off)
    suffix = "Z" if utc else f"{sign}{a // 3600:02d}:{a % 3600 // 60:02d}"
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{suffix}"


def _safe_offset(zone: tzinfo, secs: int) -> int:
    try:
        return _offset_s(zone, secs)
    except (OverflowError, ValueError, OSError):
        raise ScheduleError(f"time {secs} s is out of range") from None


def parse_time(text: str, tz: str = "UTC") -> int:
    """RFC 3339 text -> epoch ms. A time without offset is read in `tz` with the DST rules of
    the module doc (a gap time is the transition instant, a repeated time its first
    occurrence). "T", "t" or a space separate date and time; fractions below 1 ms are
    truncated."""
    m = _RFC3339.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ScheduleError(f"{text!r} is not an RFC 3339 time like 2026-12-01T10:00:00Z")
    y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
    fields = (y, mo, d, h, mi, sec)
    try:
        datetime(*fields)
        wall = _seconds(*fields)
    except ValueError as e:
        raise ScheduleError(f"{text!r} is not a valid time: {e}") from None
    milli = int((m[7] or "0").ljust(3, "0")[:3])
    if m[8]:
        return wall * 1000 + milli
    if m[9]:
        hh, mm = int(m[10]), int(m[11])
        if hh > 23 or mm > 59:
            raise ScheduleError(f"{text!r} has a bad UTC offset")
        off = (hh * 3600 + mm * 60) * (1 if m[9] == "+" else -1)
        return (wall - off) * 1000 + milli
    name = validate_tz(tz)
    if name in _UTC_NAMES:
        return wall * 1000 + milli
    try:
        return _wall_to_utc(_zone(name), wall, fields)[0] * 1000 + milli
    except (OverflowError, ValueError, OSError):
        raise ScheduleError(f"{text!r} is out of range in {name}") from None
