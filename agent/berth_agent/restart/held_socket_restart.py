"""Restart the registry on the socket its supervisor holds (Distribution 3,
docs/decisions/0007-held-socket-handover.md): never a moment
without a listener.

The agent names the registry to replace in the handover file and sends its supervisor (berth-supervise, marked
by SOCKET_MARKER in the registry's environment) HELD_SOCKET_SIGNAL (SIGHUP), once: a repeat would make the
supervisor drop a successor that is still starting. The supervisor starts the successor on a socket of its own in
the same reuseport group, waits until it alone answers (its own debug port), then steers new connections to it,
and once the old socket's accept queue is empty SIGTERMs the old one and names the successor as the current
registry (berth_supervise.steer, protocol.write_current). So the agent's "done" is: the supervisor names a live
process other than the old ones current, and GET / answers. A successor that exits first is the last exit (the
old one serves on, untouched): that restart failed, nothing was refused.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from berth_supervise.protocol import HELD_SOCKET_SIGNAL, SOCKET_MARKER

from .endpoint import Endpoint
from .handover import request_handover
from .overlapped_restart import RestartResult
from .probe import POLL_SECONDS, STOPPED, answers, is_up
from .procfs import PROC, RegistryProcess, parent_pid, send_signal, start_ticks, supervised_with
from .supervisor_state import current_pid, last_exit


def on_held_socket(process: RegistryProcess, proc: Path = PROC) -> bool:
    """Whether this registry serves on a socket its supervisor holds (and so is replaced by HELD_SOCKET_SIGNAL)."""
    return supervised_with(process, SOCKET_MARKER, proc)


def replace_on_held_socket(
    config_path: Path, state_dir: Path, endpoint: Endpoint, old: list[RegistryProcess], *, timeout: float,
    draining: set[RegistryProcess], proc: Path = PROC, stop: threading.Event | None = None, quick: bool = False,
) -> RestartResult:
    """Ask the supervisors of `old` for successors on their held socket; wait until one serves (up to timeout)."""
    began, wall = time.monotonic(), time.time()
    result = RestartResult(ok=False, old=old, new=None, seconds=0.0, started_at=wall, handed_over=True)
    before = last_exit(state_dir)
    request_handover(config_path, draining | set(old), quick=quick)
    for pid in {parent_pid(p, proc) for p in old} - {None}:
        send_signal(pid, HELD_SOCKET_SIGNAL)
    old_pids = {p.pid for p in old}
    deadline = began + timeout
    detail = f"no successor answered on the held socket within {timeout:g}s"
    while True:
        pid = current_pid(state_dir)
        if pid is not None and pid not in old_pids:
            try:
                new = RegistryProcess(pid, start_ticks(pid, proc=proc))
            except (OSError, ValueError, IndexError):
                new = None
            if new is not None and new.alive(proc) and is_up(answers(endpoint, timeout=2.0)):
                draining.update(p for p in old if p.alive(proc))  # SIGTERMed by the supervisor: never again
                result.ok, result.new = True, new
                result.no_listener_seconds = 0.0  # the socket never closed
                break
        exited = last_exit(state_dir)
        if exited is not None and exited != before and exited[0] not in old_pids and exited[1] != 0:
            detail = (f"the registry exited at start with status {exited[1]} on {config_path}; the registry "
                      f"serving before (pid {', '.join(str(p) for p in sorted(old_pids))}) serves on")
            break
        if time.monotonic() >= deadline:
            break
        if stop is not None and stop.wait(POLL_SECONDS):
            detail = STOPPED
            break
        if stop is None:
            time.sleep(POLL_SECONDS)
    if not result.ok:
        result.detail = detail
    result.seconds = time.monotonic() - began
    return result


__all__ = ["on_held_socket", "replace_on_held_socket"]
