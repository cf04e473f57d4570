"""The node tier's turn (support.clusters.node_berth.node_turn_lock), with real flock locks in three processes: an
exclusive test waiting for a shared one closes the turnstile, so a shared one asked after it waits for it (writer
first); a process holding a shared turn takes another at once."""

from __future__ import annotations

import multiprocessing
import pathlib
import time
import types

from support.clusters.node_berth import node_turn_lock
from support.common.polling import wait_for


def _hold(root: str, exclusive: bool, seconds: float, record: str) -> None:
    node = types.SimpleNamespace(state=types.SimpleNamespace(root=root))
    with node_turn_lock(node, exclusive=exclusive):  # type: ignore[arg-type]
        pathlib.Path(record).write_text(f"{time.monotonic()}")
        time.sleep(seconds)


def _nested(root: str, outer: str, inner: str) -> None:
    """A module fixture's shared turn (outer), then, while an exclusive test waits, its test's (inner)."""
    node = types.SimpleNamespace(state=types.SimpleNamespace(root=root))
    with node_turn_lock(node, exclusive=False):  # type: ignore[arg-type]
        pathlib.Path(outer).write_text(f"{time.monotonic()}")
        time.sleep(1.0)
        with node_turn_lock(node, exclusive=False):  # type: ignore[arg-type]
            pathlib.Path(inner).write_text(f"{time.monotonic()}")


def test_an_exclusive_waiter_goes_before_a_shared_turn_asked_after_it(tmp_path: pathlib.Path) -> None:
    context = multiprocessing.get_context("fork")
    first, exclusive, later = (tmp_path / name for name in ("first", "exclusive", "later"))
    processes = [context.Process(target=_hold, args=(str(tmp_path), False, 1.5, str(first)))]
    processes[0].start()
    wait_for(first.exists, "the first to hold its turn", 30, 0.01)
    processes.append(context.Process(target=_hold, args=(str(tmp_path), True, 0.5, str(exclusive))))
    processes[1].start()
    time.sleep(0.5)  # the exclusive one is waiting for the first
    processes.append(context.Process(target=_hold, args=(str(tmp_path), False, 0.0, str(later))))
    processes[2].start()
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    assert float(first.read_text()) < float(exclusive.read_text()) < float(later.read_text())
    assert float(later.read_text()) - float(exclusive.read_text()) >= 0.5  # it waited out the exclusive turn


def test_a_process_holding_a_shared_turn_takes_another_while_an_exclusive_one_waits(tmp_path: pathlib.Path) -> None:
    context = multiprocessing.get_context("fork")
    outer, inner, exclusive = (tmp_path / name for name in ("outer", "inner", "exclusive"))
    holder = context.Process(target=_nested, args=(str(tmp_path), str(outer), str(inner)))
    holder.start()
    wait_for(outer.exists, "the outer to hold its turn", 30, 0.01)
    waiting = context.Process(target=_hold, args=(str(tmp_path), True, 0.0, str(exclusive)))
    waiting.start()
    for process in (holder, waiting):
        process.join(30)
        assert process.exitcode == 0, "a deadlock: the holder waited on the turnstile the exclusive test closed"
    assert float(outer.read_text()) < float(inner.read_text()) < float(exclusive.read_text())
