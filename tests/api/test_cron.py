"""berth_api.cron: 5-field cron in UTC. Fire times are computed from given instants (no clock, no sleeping)."""

from __future__ import annotations

import datetime

import pytest

from berth_api import cron

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def fires(expression: str, after: str, count: int = 1) -> list[str]:
    parsed = cron.parse(expression)
    found, moment = [], at(after)
    for _ in range(count):
        moment = parsed.next_after(moment)
        found.append(moment.strftime("%Y-%m-%dT%H:%MZ"))
    return found


@pytest.mark.parametrize(("expression", "after", "expected"), [
    ("0 3 * * *", "2026-11-30T02:59:59Z", ["2026-11-30T03:00Z", "2026-12-01T03:00Z"]),
    ("0 3 * * *", "2026-11-30T03:00:00Z", ["2026-12-01T03:00Z", "2026-12-02T03:00Z"]),  # strictly after
    ("*/15 * * * *", "2026-11-30T14:07:30Z", ["2026-11-30T14:15Z", "2026-11-30T14:30Z", "2026-11-30T14:45Z"]),
    ("5-7 0 * * *", "2026-01-01T00:05:00Z", ["2026-01-01T00:06Z", "2026-01-01T00:07Z", "2026-01-02T00:05Z"]),
    ("10-50/20 1 * * *", "2026-01-01T00:00:00Z", ["2026-01-01T01:10Z", "2026-01-01T01:30Z", "2026-01-01T01:50Z"]),
    ("30/15 2 * * *", "2026-01-01T00:00:00Z", ["2026-01-01T02:30Z", "2026-01-01T02:45Z", "2026-01-02T02:30Z"]),
    ("0 0,12 * * *", "2026-01-01T06:00:00Z", ["2026-01-01T12:00Z", "2026-01-02T00:00Z"]),
    ("0 3 * * sun", "2026-11-30T14:00:00Z", ["2026-12-06T03:00Z", "2026-12-13T03:00Z"]),
    ("0 3 * * 7", "2026-11-30T14:00:00Z", ["2026-12-06T03:00Z"]),  # 7 is Sunday too
    ("0 3 * * MON-fri", "2026-12-04T04:00:00Z", ["2026-12-07T03:00Z", "2026-12-08T03:00Z"]),  # Fri after 3 -> Mon
    ("0 0 1 jan,jul *", "2026-02-01T00:00:00Z", ["2026-07-01T00:00Z", "2027-01-01T00:00Z"]),
    ("0 0 29 feb *", "2026-01-01T00:00:00Z", ["2028-02-29T00:00Z", "2032-02-29T00:00Z"]),  # leap years only
    ("59 23 31 dec *", "2026-12-31T23:59:00Z", ["2027-12-31T23:59Z"]),
    ("0 0 31 * *", "2026-01-31T00:00:00Z", ["2026-03-31T00:00Z", "2026-05-31T00:00Z"]),  # months with 31 days
    # Both day fields restricted: either matches (13th of the month OR a Friday).
    ("0 0 13 * fri", "2026-11-30T00:00:00Z", ["2026-12-04T00:00Z", "2026-12-11T00:00Z", "2026-12-13T00:00Z"]),
    # Day of month `*`-led: only the day of week restricts.
    ("0 0 */1 * fri", "2026-11-30T00:00:00Z", ["2026-12-04T00:00Z", "2026-12-11T00:00Z"]),
    ("  0   3 * * *  ", "2026-11-30T00:00:00Z", ["2026-11-30T03:00Z"]),
])
def test_next_fire_times(expression: str, after: str, expected: list[str]) -> None:
    assert fires(expression, after, len(expected)) == expected


def test_an_aware_instant_in_another_zone_is_taken_as_the_same_instant() -> None:
    berlin = datetime.timezone(datetime.timedelta(hours=1))
    # 03:30 in UTC+1 is 02:30 UTC: the 03:00 UTC slot of that day is still ahead.
    moment = datetime.datetime(2026, 11, 30, 3, 30, tzinfo=berlin)
    assert cron.parse("0 3 * * *").next_after(moment) == datetime.datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def test_a_naive_instant_is_utc() -> None:
    assert cron.parse("0 3 * * *").next_after(datetime.datetime(2026, 11, 30, 2, 0)) == at("2026-11-30T03:00:00Z")


@pytest.mark.parametrize(("expression", "detail"), [
    ("0 3 * *", "has 4 fields, a schedule has 5"),
    ("0 3 * * * *", "has 6 fields"),
    ("", "has 0 fields"),
    ("60 * * * *", "minute field '60': 60 is outside 0-59"),
    ("0 24 * * *", "hour field '24': 24 is outside 0-23"),
    ("0 0 0 * *", "day of month field '0': 0 is outside 1-31"),
    ("0 0 * 13 *", "month field '13': 13 is outside 1-12"),
    ("0 0 * * 8", "day of week field '8': 8 is outside 0-7"),
    ("0 0 * * sunday", "'sunday' is not a number or a name"),
    ("0 0 * foo *", "'foo' is not a number or a name (jan, feb"),
    ("x 0 * * *", "minute field 'x': 'x' is not a number"),
    ("*/0 * * * *", "step '0' must be a positive number"),
    ("*/ * * * *", "step '' must be a positive number"),
    ("5-1 * * * *", "range '5-1' runs backwards"),
    ("1,,2 * * * *", "empty list item"),
    ("0 0 30 feb *", "never fires"),
    ("0 0 31 apr,jun *", "never fires"),
])
def test_invalid_expressions_name_the_field_and_the_problem(expression: str, detail: str) -> None:
    with pytest.raises(cron.CronError) as caught:
        cron.parse(expression)
    assert str(caught.value).startswith("spec.garbageCollection.schedule: ")
    assert detail in caught.value.detail


def test_a_non_string_is_refused() -> None:
    with pytest.raises(cron.CronError, match="must be a string"):
        cron.parse(5)  # type: ignore[arg-type]
