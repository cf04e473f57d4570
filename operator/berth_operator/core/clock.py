"""The operator's wall clock (UTC), behind two methods a test can replace (tests/support/common/clock.py SetClock).

Garbage-collection schedules fire at wall-clock times; a test that waited for 03:00 UTC would take a day, so
the operator reads the time and sleeps until an instant only through this.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Protocol

# A long sleep is taken in slices: a wall clock that jumps (NTP, a suspended VM) is noticed within one.
_SLICE_SECONDS = 60.0


class UtcClock(Protocol):
    def now(self) -> datetime.datetime: ...  # aware, UTC

    async def sleep_until(self, moment: datetime.datetime) -> None: ...


class WallClock:
    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

    async def sleep_until(self, moment: datetime.datetime) -> None:
        while (remaining := (moment - self.now()).total_seconds()) > 0:
            await asyncio.sleep(min(remaining, _SLICE_SECONDS))
