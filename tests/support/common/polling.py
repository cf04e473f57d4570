"""Waiting for a condition: the one polling loop of the tests and benchmarks, in a thread (`wait_for`) and on an
event loop (`until`). The timeout only turns a hang into a failure that names what was awaited; it is never a
timing claim.

`what` may be a callable, asked only at the timeout (logs read then, not when the wait began).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
What = str | Callable[[], str]
# Bare turns of the event loop before `until` sleeps: a condition another task meets on its next turn is seen at
# once (a stepped clock's waits take microseconds), one a thread meets is polled without spinning.
YIELDS_BEFORE_SLEEPING = 100


def timed_out(what: What, timeout: float) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")


def wait_for(predicate: Callable[[], T], what: What, timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll until predicate() is truthy and return its value; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise timed_out(what, timeout)
        time.sleep(interval)
    return value


async def until(predicate: Callable[[], T], what: What, timeout: float = 30.0, interval: float = 0.05) -> T:
    """wait_for on the running event loop: other tasks run while it waits."""
    deadline = time.monotonic() + timeout
    turns = 0
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise timed_out(what, timeout)
        turns += 1
        await asyncio.sleep(0 if turns <= YIELDS_BEFORE_SLEEPING else interval)
    return value

