"""What a source of change hands the pipeline: `Change`, through a thread-safe `Emit`.

Every source is an object with a `name` (used for metrics and liveness) and `async def run(emit)`, which runs
until cancelled and reports what happened as `Change` values through `emit`. Sources that work in threads
(watchdog observers, the blocking kubernetes client) call `emit` from those threads, so `emit` must be
thread-safe: `queue_emitter` builds one that hands each Change to an asyncio queue on the loop's thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Change:
    """Something that may change the rendered config; the pipeline re-reads everything it needs."""

    source: str  # "mount:<dir name>", "pvc", "registry", "resync", "secret:<dir name>"
    # With source "registry": the whole Registry object as read (unvalidated). Excluded from repr so a log line
    # of a Change stays short (the object holds no secret values: Secrets are referenced by name only).
    registry: dict | None = field(default=None, repr=False)
    # With source "registry" or "secret:<dir>": why it could not be read (bad YAML, API error). Secret-free by
    # construction.
    error: str | None = None
    # With source "secret:<dir>": the Secret as the API server shows it (a secret_api.SecretCopy, whose repr
    # names the Secret only); excluded from repr all the same.
    secret: object | None = field(default=None, repr=False)


Emit = Callable[[Change], None]


class Source(Protocol):
    name: str

    async def run(self, emit: Emit) -> None: ...


def queue_emitter(queue: asyncio.Queue[Change], loop: asyncio.AbstractEventLoop | None = None) -> Emit:
    """An Emit, callable from any thread, that puts each Change on `queue` from the loop's own thread."""
    loop = loop or asyncio.get_running_loop()

    def emit(change: Change) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, change)
        except RuntimeError:
            pass  # the loop is closed: the agent is shutting down and nobody is left to act on the change

    return emit


__all__ = ["Change", "Emit", "Source", "queue_emitter"]
