"""Restart the registry process in place, overlapped: SIGTERM it, hand over to a new one, wait until it answers.

The registry has no reload (docs/upstream.md#dist-no-reload). SIGTERM makes the registry close its listener at once
and drain its in-flight requests for draintimeout (docs/upstream.md#dist-drain). The agent names the old pid in the
handover file first (handover.py); as soon as the old process no longer holds its listening socket (the inode from
/proc/net/tcp{,6}, watched among /proc/<pid>/fd: no traffic, no guess; procfs.py) it sends the supervisor (the
registry's parent) SIGUSR1, and the supervisor starts the new registry while the old one drains; then it waits until
the new one answers (probe.py).
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .endpoint import Endpoint
from .handover import request_handover, signal_handover
from .probe import (
    CRASHES_AFTER_HANDOVER,
    CRASHES_BEFORE_GIVING_UP,
    LISTENER_POLL_SECONDS,
    ServingWait,
    wait_for_successor,
    wait_until_serving,
)
from .procfs import (
    PROC,
    RegistryProcess,
    find_registry_processes,
    holds_socket,
    listener_inodes,
    parent_pid,
    send_signal,
    takes_handover,
)

LISTENER_CLOSE_TIMEOUT = 5.0  # the registry closes its listener within milliseconds of SIGTERM
# The listening socket inodes of the registry serving now, found after the last restart (agent-wide, one
# registry per agent): the next restart watches the old process's fds for them without a /proc/net/tcp read.
_LISTENERS: dict[RegistryProcess, set[str]] = {}


@dataclass
class RestartResult:
    ok: bool
    old: list[RegistryProcess]
    new: RegistryProcess | None
    seconds: float
    detail: str = ""  # why it failed; names no secret
    statuses: list[int] = field(default_factory=list)
    handed_over: bool = False  # the new registry started while the old one drained (overlapped restart)
    listener_close_seconds: float | None = None  # SIGTERM to the old listener gone
    no_listener_seconds: float | None = None  # old listener gone to the new one listening
    started_at: float = 0.0  # wall clock when the restart began (logs of several pods line up on it)


def restart_registry(
    config_path: Path, endpoint: Endpoint, *, timeout: float, proc: Path = PROC,
    stop: threading.Event | None = None, draining: set[RegistryProcess] | None = None,
    running: list[RegistryProcess] | None = None,
) -> RestartResult:
    """SIGTERM every registry serving config_path, hand over, then wait (up to timeout) for a new one that answers.

    `draining` (kept by the caller across restarts) holds registries handed over earlier that are still
    finishing their requests: they are never signalled again (a second SIGTERM may kill a draining v3) and
    never taken for the new one. With no registry running (the supervisor is pausing after a failed start, or
    has not started one yet), nothing is signalled and the next one the supervisor starts is awaited.
    """
    began, wall = time.monotonic(), time.time()
    draining = draining if draining is not None else set()
    for process in [p for p in draining if not p.alive(proc)]:
        draining.discard(process)
    # `running`: the caller's scan of a moment ago (a /proc scan costs milliseconds on a busy node).
    found = running if running is not None else find_registry_processes(config_path, proc=proc)
    old = [p for p in found if p not in draining and p.alive(proc)]
    supervisors = {parent_pid(p, proc) for p in old if takes_handover(p, proc)}
    supervisors.discard(None)
    overlapped = bool(old) and len(supervisors) == len({parent_pid(p, proc) for p in old})
    inodes: set[str] = set()
    if overlapped:
        request_handover(config_path, draining | set(old))
        cached = [_LISTENERS.get(p) for p in old]
        if all(cached) and all(holds_socket(p, i, proc=proc) for p, i in zip(old, cached)):
            inodes = set().union(*cached)
        else:
            inodes = listener_inodes(endpoint, proc=proc)
    _LISTENERS.clear()
    for process in old:
        send_signal(process.pid, signal.SIGTERM)
    result = RestartResult(ok=False, old=old, new=None, seconds=0.0, started_at=wall)
    closed_at: float | None = None
    nudge = None
    if overlapped:
        # The listener closes within milliseconds of SIGTERM; until it has, a new registry could not bind.
        deadline = time.monotonic() + LISTENER_CLOSE_TIMEOUT
        while any(p.alive(proc) and holds_socket(p, inodes, proc=proc) for p in old):
            if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                break
            time.sleep(LISTENER_POLL_SECONDS)
        closed_at = time.monotonic()
        result.listener_close_seconds = round(closed_at - began, 4)
        alive = [p for p in old if p.alive(proc)]
        if alive:
            draining.update(alive)
            nudge = signal_handover(alive, proc=proc)
            result.handed_over = True
        # else: it exited already (no draintimeout, nothing in flight): the supervisor restarts on the exit.
    timing: dict[str, float] = {}
    # After a handover the old registry no longer listens: whatever answers is the new one.
    wait = wait_for_successor if result.handed_over else wait_until_serving
    crashes = CRASHES_AFTER_HANDOVER if result.handed_over else CRASHES_BEFORE_GIVING_UP
    wanted = ServingWait(config_path, endpoint, timeout, frozenset(old) | draining, proc, crashes)
    new, detail = wait(wanted, stop=stop, nudge=nudge, timing=timing)
    if closed_at is not None and "listening" in timing:
        result.no_listener_seconds = round(max(0.0, timing["listening"] - closed_at), 4)
    result.ok, result.new, result.detail = new is not None, new, detail
    result.seconds = time.monotonic() - began
    if new is not None and takes_handover(new, proc):
        # Found now, while nothing is being restarted, so the next restart need not read /proc/net/tcp.
        _LISTENERS[new] = listener_inodes(endpoint, proc=proc)
    return result


__all__ = ["LISTENER_CLOSE_TIMEOUT", "RestartResult", "restart_registry"]
