"""Running an agent source (anything with `async run(emit)`) for the length of a test block."""

from __future__ import annotations

import asyncio
import contextlib


@contextlib.asynccontextmanager
async def running(source, emit):
    """Start `source.run(emit)` as a task, yield it, and cancel it (and wait for it) on the way out."""
    task = asyncio.create_task(source.run(emit))
    try:
        await asyncio.sleep(0)
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
