"""Change and queue_emitter: what every source hands the pipeline, from any thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from berth_agent.sources import Change, queue_emitter


def test_change_repr_leaves_the_object_out():
    change = Change("registry", registry={"spec": {"config": {"log": {"level": "debug"}}}})
    assert repr(change) == "Change(source='registry', error=None)"
    assert change == Change("registry", registry={"spec": {"config": {"log": {"level": "debug"}}}})
    assert change != Change("registry", registry={})


@pytest.mark.asyncio
async def test_queue_emitter_delivers_from_other_threads_in_order():
    queue: asyncio.Queue[Change] = asyncio.Queue()
    emit = queue_emitter(queue)
    threads = [
        threading.Thread(target=lambda n=n: [emit(Change(f"mount:{n}")) for _ in range(100)]) for n in range(3)
    ]
    for thread in threads:
        thread.start()
    received = [await asyncio.wait_for(queue.get(), 20) for _ in range(300)]
    for thread in threads:
        thread.join()
    for n in range(3):
        assert sum(1 for c in received if c.source == f"mount:{n}") == 100


def test_emit_after_the_loop_closed_is_silent():
    loop = asyncio.new_event_loop()
    queue: asyncio.Queue[Change] = asyncio.Queue()
    emit = queue_emitter(queue, loop)
    loop.close()
    emit(Change("resync"))  # a watchdog thread outliving the agent's loop must not raise
    assert queue.empty()  # and the change is dropped: nobody is left to act on it
