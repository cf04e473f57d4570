"""One timer per Registry: reconcile it again at an instant the last reconcile named (the next scheduled
garbage collection, or the deadline of the run in progress). Runs in the operator's event loop; the periodic
sweep reconciles a Registry whose reconcile failed (handlers: polled), which arms its timer again (an operator
restart re-arms them with the first reconcile).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable

from ..core.clock import UtcClock

logger = logging.getLogger("berth.operator")

Key = tuple[str, str]


class Wakeups:
    def __init__(self, clock: UtcClock) -> None:
        self.clock = clock
        self._timers: dict[Key, tuple[datetime.datetime, asyncio.Task[None]]] = {}

    def at(self, key: Key, moment: datetime.datetime | None, wake: Callable[[], Awaitable[object]]) -> None:
        """Call wake() at moment (replacing this key's timer); None cancels. Called from the loop's thread."""
        current = self._timers.get(key)
        if current is not None:
            when, task = current
            if when == moment and not task.done():
                return
            if task is not asyncio.current_task():  # a timer that fired and reconciles now is not cancelled
                task.cancel()
            del self._timers[key]
        if moment is None:
            return

        async def sleep_then_wake() -> None:
            await self.clock.sleep_until(moment)
            if self._timers.get(key, (None, None))[1] is asyncio.current_task():
                del self._timers[key]
            try:
                await wake()
            except Exception:  # the sweep retries; a timer must not die loudly
                logger.exception("timed reconcile of Registry %s/%s failed", *key)

        self._timers[key] = (moment, asyncio.create_task(sleep_then_wake(), name=f"berth-wake-{key[0]}/{key[1]}"))

    def cancel(self, key: Key) -> None:
        self.at(key, None, lambda: asyncio.sleep(0))

    def pending(self, key: Key) -> datetime.datetime | None:
        current = self._timers.get(key)
        return current[0] if current is not None and not current[1].done() else None

    async def close(self) -> None:
        tasks = [task for _, task in self._timers.values()]
        self._timers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
