"""A debounce clock that moves only when the test steps it (agent `Pipeline(clock=...)`).

    clock = SteppedClock()
    pipeline = Pipeline(settings, reporter, health, clock=clock)
    queue.put_nowait(change); await clock.handed_over(queue)   # the pipeline has taken it
    clock.step(0.01)                                            # 10 ms pass, exactly

Timeouts opened with `timeout()` are real `asyncio.timeout`s with no deadline; `step` makes the ones whose
stepped deadline has come expire (raising TimeoutError in their task, as a real one does).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from support.common.polling import until


class SteppedClock:
    def __init__(self) -> None:
        self._now = 0.0
        self._pending: list[tuple[float, asyncio.Timeout]] = []

    def now(self) -> float:
        return self._now

    @contextlib.asynccontextmanager
    async def timeout(self, seconds: float) -> AsyncIterator[None]:
        async with asyncio.timeout(None) as timer:
            entry = (self._now + seconds, timer)
            self._pending.append(entry)
            try:
                yield
            finally:
                self._pending.remove(entry)

    def waiting(self) -> bool:
        """Someone is inside a timeout() now."""
        return bool(self._pending)

    def step(self, seconds: float) -> None:
        self._now += seconds
        loop = asyncio.get_running_loop()
        for deadline, timer in list(self._pending):
            if deadline <= self._now + 1e-9:
                timer.reschedule(loop.time())  # expires on the loop's next turn

    async def handed_over(self, queue: asyncio.Queue, timeout: float = 60.0) -> None:
        """Yield to the loop until every queued item has been taken (the taker has run up to its next wait).
        The taker may be busy in a thread (an apply): then this waits, up to a generous real-time bound."""
        await until(queue.empty, "the queue to be drained", timeout, interval=0.005)

    async def step_when_waiting(self, seconds: float, timeout: float = 60.0) -> None:
        """Step once a timeout() is open (the debounce has started waiting)."""
        await until(self.waiting, "a timeout to be opened", timeout, interval=0.005)
        self.step(seconds)


class SetClock:
    """A UTC wall clock the test sets (berth_operator.core.clock.UtcClock), for the operator in its own thread.

    `sleep_until` returns once the test has moved the clock to or past the instant; it polls (the operator's
    loop runs in another thread), so a sleeper notices a move within a few milliseconds of real time.
    """

    def __init__(self, start) -> None:
        import threading

        self._lock = threading.Lock()
        self._now = start

    def now(self):
        with self._lock:
            return self._now

    def set(self, moment) -> None:
        with self._lock:
            if moment < self._now:
                raise ValueError("the clock only moves forward")
            self._now = moment

    def advance(self, delta) -> None:
        self.set(self.now() + delta)

    async def sleep_until(self, moment) -> None:
        while self.now() < moment:
            await asyncio.sleep(0.01)
