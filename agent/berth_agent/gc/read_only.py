"""The pipeline's part in garbage collection (API mode, docs/design.md §4.5): render read-only while a request
stands (mode.py), acknowledge on status once that render serves (ack.py), go writable again by itself at the
request's deadline, and tell the runner (run.py) of every Registry read.

One object, so the pipeline keeps no GC state of its own and a file-mode agent carries none at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..sources.change import Change
from .ack import GcAck
from .mode import GcHold, read_only_for


class GcReadOnly:
    def __init__(self, ack: GcAck, *, on_registry: Callable[[dict], None] | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.ack = ack
        self.on_registry = on_registry  # the runner hears of every Registry read
        self.wall = wall  # the deadline's clock (a test sets it)
        self.hold: GcHold | None = None  # the hold the latest render was made under
        self._timer: tuple[float, asyncio.TimerHandle] | None = None  # (deadline, timer) back to writable

    def read(self, registry: dict) -> None:
        if self.on_registry is not None:
            self.on_registry(registry)

    def hold_for(self, registry: dict | None) -> GcHold | None:
        """The hold to render under now (None: writable); remembered for served()."""
        self.hold = read_only_for(registry, self.wall())
        return self.hold

    def served(self, registry: dict | None, serving_config: bytes) -> None:
        """The registry serves the latest render: acknowledge the request it is read-only for, or clear it."""
        self.ack.observe(registry, self.hold.request_id if self.hold else None, serving_config)

    def arm_deadline(self, queue: asyncio.Queue[Change] | None) -> None:
        """A timer at the hold's deadline: the pod renders writable again by itself, even with the operator
        and the runner gone (a Change like any other; the render then finds the hold over)."""
        hold = self.hold
        if hold is None or queue is None:
            return
        if self._timer is not None:
            if self._timer[0] == hold.deadline:
                return
            self._timer[1].cancel()
        delay = max(0.0, hold.deadline - self.wall()) + 0.01
        handle = asyncio.get_running_loop().call_later(delay, lambda: queue.put_nowait(Change("gc-deadline")))
        self._timer = (hold.deadline, handle)

    def close(self) -> None:
        if self._timer is not None:
            self._timer[1].cancel()
        self.ack.close()


__all__ = ["GcReadOnly"]
