"""A brute-force reference for cron expressions, written from the documented semantics (the
module doc of schedd.core.schedule) and nothing of its code: each field is expanded by walking
its values one by one, and a wall time matches iff every field matches under the day rule.

Slow and plain on purpose; the tests compare schedd's compiled search with it. H fields are
placed by croniter's CRC-32 expander, which is part of the documented semantics.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, cast

from croniter import croniter
from croniter.croniter import HashExpander

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# croniter's field numbers, which the hash expander takes
_HASH_INDEX = {"minute": 0, "hour": 1, "dom": 2, "month": 3, "dow": 4, "second": 5}
# (lowest, highest value written, highest value of the cycle)
BOUNDS = {"second": (0, 59, 59), "minute": (0, 59, 59), "hour": (0, 23, 23),
          "dom": (1, 31, 31), "month": (1, 12, 12), "dow": (0, 7, 6)}
ORDER5 = ("minute", "hour", "dom", "month", "dow")
ORDER6 = ("second",) + ORDER5


def _number(field: str, text: str) -> int:
    if field == "month" and text in MONTHS:
        return MONTHS.index(text) + 1
    if field == "dow" and text in DAYS:
        return DAYS.index(text)
    value = int(text)
    lo, hi, _ = BOUNDS[field]
    assert lo <= value <= hi, (field, text)
    return value


def _walk(field: str, a: int, b: int) -> list[int]:
    """The values from a to b, one at a time, going round the end of the cycle when a > b."""
    lo, _, top = BOUNDS[field]
    if field == "dow" and a == 7 and b < 7:
        a = 0
    if a <= b:
        return list(range(a, b + 1))
    out, x = [a], a
    while x != b:
        x = lo if x >= top else x + 1
        out.append(x)
    return out


def _token(field: str, token: str) -> set[int]:
    base, _, step_text = token.partition("/")
    step = int(step_text) if step_text else 1
    lo, _, top = BOUNDS[field]
    if base in ("*", "?"):
        seq = list(range(lo, top + 1))
    elif "-" in base:
        a, b = base.split("-")
        seq = _walk(field, _number(field, a), _number(field, b))
    elif step_text:
        seq = _walk(field, _number(field, base), top)
    else:
        seq = [_number(field, base)]
    picked = seq[::step]
    return {v % 7 for v in picked} if field == "dow" else set(picked)


@dataclass(slots=True)
class Field:
    text: str
    values: set[int]
    last: bool = False                      # day-of-month L
    nth: frozenset[tuple[int, int]] = frozenset()   # (weekday, week 1-5 or 0 = last)


def expand(field: str, text: str, key: str = "") -> Field:
    text = text.lower()
    if text.startswith("h"):
        text = str(HashExpander(cast(Any, croniter)).expand(text, _HASH_INDEX[field], text,
                                                             hash_id=key.encode()))
    out = Field(text, set())
    nth: set[tuple[int, int]] = set()
    for token in text.split(","):
        if field == "dom" and token == "l":
            out.last = True
        elif field == "dow" and token.startswith("l"):
            nth.add((_number("dow", token[1:]) % 7, 0))
        elif field == "dow" and "#" in token:
            days, _, k = token.partition("#")
            nth.update((d, int(k)) for d in _token("dow", days))
        else:
            out.values |= _token(field, token)
    out.nth = frozenset(nth)
    return out


@dataclass(slots=True)
class Cron:
    fields: dict[str, Field]
    raw: dict[str, str]

    def unrestricted(self, which: str) -> bool:
        """The day rule: written *, ? or */1, or every value while the other has a '*'."""
        f = self.fields[which]
        other = self.raw["dow" if which == "dom" else "dom"]
        if which == "dow" and f.nth:
            return False
        if f.text in ("*", "?", "*/1"):
            return True
        every = set(range(1, 32)) if which == "dom" else set(range(7))
        have = f.values | ({31} if f.last else set())
        return have >= every and "*" in other

    def day_matches(self, d: date) -> bool:
        if d.month not in self.fields["month"].values:
            return False
        dom_free, dow_free = self.unrestricted("dom"), self.unrestricted("dow")
        if dom_free and dow_free:
            return True
        by_dom = self._dom(d)
        by_dow = self._dow(d)
        if dom_free:
            return by_dow
        if dow_free:
            return by_dom
        return by_dom or by_dow

    def _dom(self, d: date) -> bool:
        f = self.fields["dom"]
        last_day = calendar.monthrange(d.year, d.month)[1]
        return d.day in f.values or (f.last and d.day == last_day)

    def _dow(self, d: date) -> bool:
        f = self.fields["dow"]
        wday = (d.weekday() + 1) % 7
        if not f.nth:
            return wday in f.values
        last_day = calendar.monthrange(d.year, d.month)[1]
        week = (d.day - 1) // 7 + 1
        is_last = d.day + 7 > last_day
        return any(w == wday and (k == week or (k == 0 and is_last)) for w, k in f.nth)

    def next_wall(self, after: datetime, limit_days: int = 366 * 30) -> datetime | None:
        """The first matching wall time strictly after `after` (naive), day by day."""
        start = after + timedelta(seconds=1)
        day = start.date()
        hours = sorted(self.fields["hour"].values)
        minutes = sorted(self.fields["minute"].values)
        seconds = sorted(self.fields["second"].values)
        for _ in range(limit_days):
            if day.year > 9998:
                return None
            if self.day_matches(day):
                for h in (h for h in hours if h >= start.hour):
                    for m in (m for m in minutes if (h, m) >= (start.hour, start.minute)):
                        for s in seconds:
                            t = datetime(day.year, day.month, day.day, h, m, s)
                            if t >= start:
                                return t
            day += timedelta(days=1)
            start = datetime(day.year, day.month, day.day)
        return None


def compile_cron(expr: str, key: str = "") -> Cron:
    parts = expr.lower().split()
    order = ORDER6 if len(parts) == 6 else ORDER5
    raw = dict(zip(order, parts))
    raw.setdefault("second", "0")
    return Cron({name: expand(name, text, key) for name, text in raw.items()}, raw)


def default_policy(expr: str) -> tuple[str, str]:
    """The documented default DST policy: an hour field with a wildcard or a step follows real
    time (skip, both); any other names fixed local times (shift, first)."""
    parts = expr.lower().split()
    hour = parts[2] if len(parts) == 6 else parts[1]
    return ("skip", "both") if any(c in hour for c in "*?/") else ("shift", "first")
