"""Dates said in English, resolved against when they were said.

``find_date(text, now)`` finds the first date phrase of a clause and resolves
it against ``now`` (the time of the message that says it): an ISO date
("2024-05-05", "2024-05-05 10:00"), a calendar day ("May 5", "5th of May
2024"), a day relative to now ("tomorrow", "the day before yesterday", "last
night"), a shift ("in two weeks", "3 days ago"), a named period ("next week",
"this weekend", "last Friday", "in June", "since 2019"), with a time when one
follows ("tomorrow at 9:30 pm"). ``When`` is the resolved date and how
precise the phrase was. Pure: no I/O, no clock (``now`` is given).
"""

from __future__ import annotations

import re
from calendar import monthrange
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

__all__ = ["Precision", "When", "find_date"]

Precision = Literal["day", "week", "month", "year"]


@dataclass(frozen=True)
class When:
    """A resolved date: midnight of the day (or the time, when one was said)
    in the message's time zone, and how precise the phrase was."""

    at: datetime
    precision: Precision = "day"
    timed: bool = False

    def phrase(self) -> str:
        """The date for a standalone sentence: "on Sunday 5 May 2024"."""
        d = self.at
        if self.precision == "year":
            return f"in {d.year}"
        if self.precision == "month":
            return f"in {d:%B} {d.year}"
        if self.precision == "week":
            return f"in the week of {d.day} {d:%B} {d.year}"
        text = f"on {d:%A} {d.day} {d:%B} {d.year}"
        return f"{text} at {d:%H:%M}" if self.timed else text


_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_NUM = r"\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True))
_UNIT = r"days?|weeks?|months?|years?"
_PRE = r"(?:\b(?:on|by|until|till|before|from|for|in|at|during|since)\s+)?"

#: Date phrases, each with its resolver ``(match, now, future) -> When | None``.
#: ``future`` says which way an ambiguous phrase ("Friday", "May 5") points.
_Resolver = Callable[[re.Match[str], datetime, bool], "When | None"]


def _midnight(now: datetime, days: int = 0) -> datetime:
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return start + timedelta(days=days)


def _add_months(day: datetime, months: int) -> datetime:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return day.replace(year=year, month=month + 1, day=min(day.day, monthrange(year, month + 1)[1]))


def _count(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBERS[word]


def _shift(now: datetime, amount: int, unit: str) -> When:
    unit = unit.lower().rstrip("s")
    if unit == "day":
        return When(_midnight(now, amount))
    if unit == "week":
        return When(_midnight(now, 7 * amount), "week")
    if unit == "month":
        return When(_add_months(_midnight(now), amount), "month")
    return When(_add_months(_midnight(now), 12 * amount), "year")


def _calendar(year: int | None, month: int, day: int, now: datetime, future: bool) -> When | None:
    """A calendar date; without a year, the one nearest ``now`` in ``future``'s direction."""
    try:
        if year is not None:
            return When(_midnight(now).replace(year=year, month=month, day=day))
        candidate = _midnight(now).replace(month=month, day=day)
        if future and candidate < _midnight(now):
            candidate = candidate.replace(year=now.year + 1)
        elif not future and candidate > _midnight(now):
            candidate = candidate.replace(year=now.year - 1)
        return When(candidate)
    except ValueError:  # 30 February, 29 February of a common year
        return None


def _iso(m: re.Match[str], now: datetime, future: bool) -> When | None:
    year, month, day, hour, minute = m.groups()
    when = _calendar(int(year), int(month), int(day), now, future)
    if when is None or hour is None:
        return when
    try:
        return When(when.at.replace(hour=int(hour), minute=int(minute)), timed=True)
    except ValueError:
        return when


def _month_day(m: re.Match[str], now: datetime, future: bool) -> When | None:
    month, day, year = m.group("month"), m.group("day"), m.group("year")
    return _calendar(int(year) if year else None, _MONTHS[month.lower()], int(day), now, future)


def _relative_day(m: re.Match[str], now: datetime, future: bool) -> When:
    word = " ".join(m.group(1).lower().split())
    for start, offset in (
        ("the day after", 2),
        ("the day before", -2),
        ("tomorrow", 1),
        ("yesterday", -1),
        ("last night", -1),
    ):
        if word.startswith(start):
            return When(_midnight(now, offset))
    return When(_midnight(now))  # today, tonight, this morning


def _in_units(m: re.Match[str], now: datetime, future: bool) -> When:
    return _shift(now, _count(m.group(1)), m.group(2))


def _units_ago(m: re.Match[str], now: datetime, future: bool) -> When:
    return _shift(now, -_count(m.group(1)), m.group(2))


def _next_last(m: re.Match[str], now: datetime, future: bool) -> When:
    which, unit = m.group(1).lower(), m.group(2).lower()
    step = {"next": 1, "last": -1, "this": 0}[which]
    if unit == "weekend":
        saturday = _midnight(now, (5 - now.weekday()) % 7)
        return When(saturday + timedelta(days=7 * step))
    shifted = _shift(now, step, unit)
    return shifted if step else When(_midnight(now), shifted.precision)


def _weekday(m: re.Match[str], now: datetime, future: bool) -> When:
    which = (m.group(1) or "").lower()
    target = _WEEKDAYS.index(m.group(2).lower().rstrip("s"))
    today = now.weekday()
    if which == "last" or (not which and not future):
        back = (today - target) % 7 or 7
        return When(_midnight(now, -back))
    if which == "this" and target == today:
        return When(_midnight(now))
    return When(_midnight(now, (target - today) % 7 or 7))


def _month_only(m: re.Match[str], now: datetime, future: bool) -> When | None:
    which = (m.group(1) or "").lower()
    when = _calendar(None, _MONTHS[m.group(2).lower()], 1, now, which != "last" and future)
    return None if when is None else When(when.at, "month")


def _year(m: re.Match[str], now: datetime, future: bool) -> When:
    return When(_midnight(now).replace(year=int(m.group(1)), month=1, day=1), "year")


_DATE_PATTERNS: tuple[tuple[re.Pattern[str], _Resolver], ...] = tuple(
    (re.compile(_PRE + pattern, re.IGNORECASE), resolver)
    for pattern, resolver in (
        (r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::\d{2})?)?\b", _iso),
        (
            rf"\b(?P<month>{_MONTH})\.?\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b"
            rf"(?:,?\s+(?P<year>\d{{4}})\b)?",
            _month_day,
        ),
        (
            rf"\b(?:the\s+)?(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<month>{_MONTH})\b"
            rf"\.?(?:,?\s+(?P<year>\d{{4}})\b)?",
            _month_day,
        ),
        (
            r"\b(the day after tomorrow|the day before yesterday|tomorrow(?:\s+(?:morning|"
            r"afternoon|evening|night))?|yesterday(?:\s+(?:morning|afternoon|evening))?|"
            r"today|tonight|last night|this (?:morning|afternoon|evening))\b",
            _relative_day,
        ),
        (rf"\b(?:in|within)\s+({_NUM})\s+({_UNIT})\b", _in_units),
        (rf"\b({_NUM})\s+({_UNIT})\s+ago\b", _units_ago),
        (r"\b(next|last|this)\s+(week|weekend|month|year)\b", _next_last),
        (rf"\b(?:(next|last|this|coming)\s+)?({'|'.join(_WEEKDAYS)})s?\b", _weekday),
        (rf"\b(?:(next|last|this)\s+|in\s+)(?-i:({_MONTH.title()}))\b", _month_only),
        (r"\b(?:in|since)\s+((?:19|20)\d{2})\b", _year),
    )
)
_TIME = re.compile(r"\s*\bat\s+(\d{1,2})(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?(?=\W|$)", re.I)


def find_date(text: str, now: datetime, *, future: bool = True) -> tuple[str, When | None, str]:
    """The first date phrase of ``text`` resolved against ``now``: ``(text
    without the phrase, the date, the phrase as written)``; ``(text, None,
    "")`` when there is none. ``future`` resolves "Friday" / "May 5" to the
    next such day (else the last one); "next"/"last" always win. Weeks,
    months and years resolve to a day in them with that ``precision``."""
    best: tuple[re.Match[str], _Resolver] | None = None
    for pattern, resolver in _DATE_PATTERNS:
        m = pattern.search(text)
        if m and (best is None or m.start() < best[0].start()):
            best = (m, resolver)
    if best is None:
        return text, None, ""
    m, resolver = best
    when = resolver(m, now, future)
    if when is None:
        return text, None, ""
    rest = text[: m.start()] + " " + text[m.end() :]
    phrase = m.group(0).strip()
    time = _TIME.search(rest)
    if time and when.precision == "day" and not when.timed:
        hour, minute = int(time.group(1)), int(time.group(2) or 0)
        meridiem = (time.group(3) or "").lower().replace(".", "")
        hour += 12 if meridiem == "pm" and hour < 12 else 0
        hour -= 12 if meridiem == "am" and hour == 12 else 0
        if hour < 24 and minute < 60:
            when = When(when.at.replace(hour=hour, minute=minute), timed=True)
            rest = rest[: time.start()] + " " + rest[time.end() :]
    return " ".join(rest.split()), when, phrase
