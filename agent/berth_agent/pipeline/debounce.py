"""The pipeline's debounce: a trailing quiet window with a maximum wait (docs/design.md §4.2).

A kubelet Secret swap is ~9 file events within a few milliseconds (docs/upstream.md#watchdog-events); a quiet window
of 30 ms coalesces it, and the maximum wait (2 s, longer than a burst of a second) keeps a stream of events from
postponing the apply for ever."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..core.clock import Clock
from ..sources import Change


class Debounce:
    def __init__(self, clock: Clock, quiet_seconds: float, max_wait_seconds: float) -> None:
        self.clock = clock  # a test steps it
        self.quiet_seconds, self.max_wait_seconds = quiet_seconds, max_wait_seconds

    async def gather(self, queue: asyncio.Queue[Change], absorb: Callable[[Change], None]) -> None:
        """Absorb the Changes that follow within the quiet window; return once it stays quiet, or at the maximum."""
        clock = self.clock
        deadline = clock.now() + self.max_wait_seconds
        while True:
            wait = min(self.quiet_seconds, deadline - clock.now())
            if wait <= 0:
                return
            try:
                async with clock.timeout(wait):
                    change = await queue.get()
            except TimeoutError:
                return
            absorb(change)
