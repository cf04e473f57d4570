"""Standard 5-field cron expressions, evaluated in UTC: parse, and the next fire time after a given instant.

    minute hour day-of-month month day-of-week
    0      3    *            *     sun            # 03:00 UTC every Sunday

Each field takes `*`, a number, a range `a-b`, a step `*/n` or `a-b/n` or `a/n` (from a to the field's end), and
comma-separated lists of those. Months take jan..dec and days of week sun..sat (case-insensitive); day of week
7 is Sunday too. When both day of month and day of week are restricted, a day matches if EITHER matches (Vixie
cron's rule: a field starting with `*`, like `*/2`, counts as unrestricted). No macros (@daily), no seconds, no
time zones: a Berth schedule is always UTC. Pure and stdlib-only, shared by the API models and the operator.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

SCHEDULE_FIELD = "spec.garbageCollection.schedule"

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names mapped to numbers)
_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {name: index + 1 for index, name in enumerate(_MONTHS)}),
    ("day of week", 0, 7, {name: index for index, name in enumerate(_DAYS)}),
)
# Every fire time repeats within 28 years (the Gregorian calendar's weekday cycle for non-century years, with
# margin): a search that finds nothing in that span never will (e.g. 30 February).
_SEARCH_YEARS = 28


class CronError(ValueError):
    """An invalid expression. str() names the field (spec.garbageCollection.schedule); detail is the reason."""

    def __init__(self, detail: str, field: str = SCHEDULE_FIELD) -> None:
        super().__init__(f"{field}: {detail}")
        self.detail = detail
        self.field = field


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]  # 0 = Sunday
    dom_restricted: bool
    dow_restricted: bool

    def day_matches(self, day: datetime.date) -> bool:
        dom = day.day in self.days_of_month
        dow = (day.isoweekday() % 7) in self.days_of_week
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow

    def next_after(self, after: datetime.datetime) -> datetime.datetime:
        """The first fire time strictly after `after` (an aware datetime; naive means UTC), in UTC."""
        if after.tzinfo is None:
            after = after.replace(tzinfo=datetime.UTC)
        start = after.astimezone(datetime.UTC).replace(second=0, microsecond=0) + datetime.timedelta(
            minutes=1
        )
        day = start.date()
        last_day = datetime.date(min(start.year + _SEARCH_YEARS, 9999), 12, 31)
        while day <= last_day:
            if day.month in self.months and self.day_matches(day):
                first = start if day == start.date() else None
                for hour in sorted(self.hours):
                    if first is not None and hour < first.hour:
                        continue
                    for minute in sorted(self.minutes):
                        if first is not None and hour == first.hour and minute < first.minute:
                            continue
                        return datetime.datetime(day.year, day.month, day.day, hour, minute,
                                                 tzinfo=datetime.UTC)
            day += datetime.timedelta(days=1)
        raise CronError(f"{self.expression!r} never fires (no such date)")


def parse(expression: str, field: str = SCHEDULE_FIELD) -> Cron:
    """The parsed expression, or CronError naming `field` and what is wrong."""
    if not isinstance(expression, str):
        raise CronError("must be a string", field)
    parts = expression.split()
    if len(parts) != 5:
        raise CronError(
            f"{expression!r} has {len(parts)} fields, a schedule has 5 (minute hour day-of-month month day-of-week)",
            field,
        )
    sets = []
    for text, (name, low, high, names) in zip(parts, _FIELDS):
        try:
            sets.append(_field(text, low, high, names))
        except ValueError as exc:
            raise CronError(f"{name} field {text!r}: {exc}", field) from None
    minutes, hours, doms, months, dows = sets
    dows = frozenset(0 if d == 7 else d for d in dows)
    cron = Cron(expression, minutes, hours, doms, months, dows,
                # Vixie cron's rule: a field that starts with `*` (`*`, `*/2`) does not restrict the day.
                dom_restricted=not parts[2].startswith("*"), dow_restricted=not parts[4].startswith("*"))
    cron.next_after(datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC))  # refuses 30 February now
    return cron


def _value(text: str, low: int, high: int, names: dict[str, int]) -> int:
    lowered = text.lower()
    if lowered in names:
        return names[lowered]
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number" + (f" or a name ({', '.join(names)})" if names else ""))
    number = int(text)
    if not low <= number <= high:
        raise ValueError(f"{number} is outside {low}-{high}")
    return number


def _field(text: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise ValueError("empty list item")
        span, _, step_text = item.partition("/")
        step = 1
        if _:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"step {step_text!r} must be a positive number")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, _, b = span.partition("-")
            first, last = _value(a, low, high, names), _value(b, low, high, names)
            if first > last:
                raise ValueError(f"range {span!r} runs backwards")
        else:
            first = _value(span, low, high, names)
            last = high if _ else first  # `a/n`: from a to the field's end
        values.update(range(first, last + 1, step))
    return frozenset(values)
