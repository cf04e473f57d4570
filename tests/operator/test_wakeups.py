"""berth_operator.reactor.wakeups on a clock the test sets: one timer per Registry, replaced, cancelled, re-armed from
inside its own wake-up, closed."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from berth_operator.reactor.wakeups import Wakeups
from support.common.clock import SetClock
from support.common.polling import until

T0 = datetime.datetime(2026, 11, 30, 3, 0, tzinfo=datetime.UTC)
KEY = ("ns", "reg")


def later(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


async def settle() -> None:
    """Give sleepers a chance to (wrongly) fire: SetClock's sleepers poll every 10 ms of real time."""
    for _ in range(20):
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_a_timer_fires_when_the_clock_reaches_it_and_only_then():
    clock, woken = SetClock(T0), []
    wakeups = Wakeups(clock)
    wakeups.at(KEY, later(5), lambda: asyncio.sleep(0, result=woken.append("five")))
    clock.set(later(4))
    await settle()
    assert woken == [] and wakeups.pending(KEY) == later(5)
    clock.set(later(5))
    await until(lambda: woken == ["five"], "the timer")
    assert wakeups.pending(KEY) is None
    await wakeups.close()


@pytest.mark.asyncio
async def test_a_new_instant_replaces_the_timer_and_none_cancels_it():
    clock, woken = SetClock(T0), []
    wakeups = Wakeups(clock)
    wakeups.at(KEY, later(5), lambda: asyncio.sleep(0, result=woken.append("five")))
    wakeups.at(KEY, later(10), lambda: asyncio.sleep(0, result=woken.append("ten")))
    wakeups.at(("ns", "other"), later(1), lambda: asyncio.sleep(0, result=woken.append("other")))
    wakeups.cancel(("ns", "other"))
    clock.set(later(10))
    await until(lambda: woken, "the timer")
    await settle()
    assert woken == ["ten"]
    await wakeups.close()


@pytest.mark.asyncio
async def test_a_wake_up_may_arm_the_next_timer_for_its_own_key():
    clock, woken = SetClock(T0), []
    wakeups = Wakeups(clock)

    async def wake(n: int) -> None:
        woken.append(n)
        wakeups.at(KEY, later(n + 1), lambda: wake(n + 1))  # what a reconcile from the timer does

    wakeups.at(KEY, later(1), lambda: wake(1))
    for minute in (1, 2, 3):
        clock.set(later(minute))
        await until(lambda minute=minute: woken[-1:] == [minute] and wakeups.pending(KEY) == later(minute + 1),
                    f"wake {minute}")
    assert woken == [1, 2, 3]
    await wakeups.close()
    assert wakeups.pending(KEY) is None


@pytest.mark.asyncio
async def test_a_failing_wake_up_is_logged_not_raised(caplog):
    clock = SetClock(T0)
    wakeups = Wakeups(clock)

    async def fail() -> None:
        raise RuntimeError("boom")

    wakeups.at(KEY, later(1), fail)
    clock.set(later(1))
    await until(lambda: "timed reconcile of Registry ns/reg failed" in caplog.text, "the logged failure")
    # Logged, not raised: the wake-ups go on, and the next timer fires.
    woken = []
    wakeups.at(KEY, later(2), lambda: asyncio.sleep(0, result=woken.append("two")))
    clock.set(later(2))
    await until(lambda: woken == ["two"], "the next timer")
    assert wakeups.pending(KEY) is None
    await wakeups.close()
