"""When the pipeline looks again (docs/decisions/0014-last-good-config-and-rollback.md): one pending retry at a time,
the backoff of a config the registry refused, and that refusal, so it is tried again on the backoff and on every resync,
not on every event."""

from __future__ import annotations

import asyncio

from ..sources import Change

MAX_BACKOFF_SECONDS = 300.0  # the retry of a failed config doubles from the base up to this


class Retries:
    def __init__(self, base_seconds: float) -> None:
        self.base = base_seconds
        self.backoff = base_seconds  # the next retry of a failed config; reset by a success
        self.refused: tuple[str, str] | None = None  # a render the registry refused (its identity) and why
        self.forced = False  # this round was asked for by a retry, a resync or the registry watch
        self._queue: asyncio.Queue[Change] | None = None
        self._handle: asyncio.TimerHandle | None = None

    def attach(self, queue: asyncio.Queue[Change]) -> None:
        """The queue a retry's Change goes to (the pipeline's, once it runs)."""
        self._queue = queue

    def schedule(self, delay: float | None = None) -> None:
        """A Change("retry") after `delay` (default: the base), unless one is pending already."""
        if self._queue is None or (self._handle is not None and not self._handle.cancelled()):
            return
        queue = self._queue

        def fire() -> None:
            self._handle = None
            queue.put_nowait(Change("retry"))

        self._handle = asyncio.get_running_loop().call_later(self.base if delay is None else delay, fire)

    def back_off(self) -> None:
        """A config failed: retried after the backoff, which doubles for the next failure."""
        self.schedule(self.backoff)
        self.backoff = min(self.backoff * 2, MAX_BACKOFF_SECONDS)

    def succeeded(self) -> None:
        self.refused, self.backoff = None, self.base

    def take_forced(self) -> bool:
        """Whether this round was asked for by a retry, a resync or the registry watch (and clear it)."""
        forced, self.forced = self.forced, False
        return forced

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
