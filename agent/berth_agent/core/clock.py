"""The debounce's clock: the event loop's time and `asyncio.timeout`, behind two methods a test can replace.

A burst's gaps are measured on this clock. On a loaded machine a 10 ms sleep can take 100 ms, so a test that
spaces events in real time may open the quiet window by accident; with a stepped clock (tests/support/common/clock.py)
the gaps are exactly what the test says.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager: ...  # raises TimeoutError when it expires


class LoopClock:
    """Real time: the running loop's monotonic clock."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def timeout(self, seconds: float) -> AbstractAsyncContextManager:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that lands as an item
        # arrives, and the agent would not stop.
        return asyncio.timeout(seconds)
