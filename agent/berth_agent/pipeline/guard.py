"""Guards around the pipeline's render step (docs/design.md §4.2): a time bound, and the input fingerprints that
tell a stale render from a current one.

A render reads the mounted Secrets (and probes the PVC) in a worker thread. Bounded inputs take milliseconds,
so a step that runs past its bound is stuck on a hung volume; a thread cannot be stopped, so `BoundedThread`
leaves it to finish, starts no other meanwhile, and keeps a `render` liveness entry registered for it, which
turns /livez red and gets the agent restarted. `inputs_fingerprint` identifies what the Secret volumes hold by
stat alone (never a read, so a FIFO cannot block it): a render whose inputs moved while it ran is stale.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from berth_api.pod import INPUT_VOLUMES

from ..core.health import Health
from ..mounted.secret_volume import volume_fingerprint
from ..sources import Change

LIVENESS_NAME = "render"


class Overrun(str):
    """The message returned instead of a result when the work did not finish within its bound."""


class BoundedThread:
    def __init__(self, health: Health, limit_seconds: float) -> None:
        self.health = health
        self.limit = limit_seconds
        self._overrun: asyncio.Future | None = None

    async def run(self, work: Callable[[], Any]) -> Any:
        """work() in a thread; its result, or an Overrun when it is (still) running past the bound."""
        if self._overrun is not None and not self._overrun.done():
            return Overrun(f"reading the inputs and rendering has not finished after {self.limit:g}s; "
                           "last good config kept")
        self.health.register(LIVENESS_NAME, max_silence_seconds=self.limit)
        future = asyncio.ensure_future(asyncio.to_thread(work))
        future.add_done_callback(lambda _: self.health.unregister(LIVENESS_NAME))
        done, _ = await asyncio.wait({future}, timeout=self.limit)
        if not done:
            self._overrun = future
            future.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no asyncio warning
            return Overrun(f"reading the inputs and rendering did not finish within {self.limit:g}s; "
                           "last good config kept")
        self._overrun = None
        return future.result()


def inputs_fingerprint(mount_root: Path) -> tuple:
    """What every Secret volume under the mount root holds, by identity (see volume_fingerprint)."""
    return tuple(volume_fingerprint(Path(mount_root) / source) for source in INPUT_VOLUMES)


def newer_input_pending(queue: asyncio.Queue[Change] | None) -> bool:
    """Whether a Registry Change or a Secret read over the API (`secret:<dir>`) waits in the queue: a render
    made meanwhile is older than it. Looked at by taking everything and putting it back in order; the loop's
    thread is the only one that touches the queue directly. (Mounted files are covered by the fingerprint.)"""
    if queue is None or queue.empty():
        return False
    waiting = [queue.get_nowait() for _ in range(queue.qsize())]
    for change in waiting:
        queue.put_nowait(change)
    return any(change.source == "registry" or change.source.startswith("secret:") for change in waiting)


__all__ = ["BoundedThread", "Overrun", "inputs_fingerprint", "newer_input_pending"]
