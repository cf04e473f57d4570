"""The 2.8 handover (overlapped restart): 2.8 cannot serve on a socket it is handed, so each registry binds its
own listener. The agent SIGTERMs the registry the handover file names (it closes its listener and drains) and
sends SIGUSR1 (protocol.HANDOVER_SIGNAL); the supervisor then starts the successor at once, which binds the port
the old one let go (a lost bind race is retried within milliseconds: backoff.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .backoff import CrashBackoff
from .ports import DebugPorts
from .protocol import handover_names
from .registry import Registries


def take_overlapped_handover(registries: Registries, handover: Path, backoff: CrashBackoff, ports: DebugPorts,
                             log: Callable[[str], None]) -> bool:
    """HANDOVER_SIGNAL: whether the current registry is named (then it drains and its successor is to start now)."""
    current = registries.current
    named, _quick = handover_names(handover, registries.current_pid())
    if not named or current is None:
        return False
    log(f"registry (pid {current.pid}) stopped listening, draining; starting its successor")
    registries.draining.append(current)
    registries.current = None
    backoff.after_handover()
    ports.new_reload()  # a new reload tries every port again
    return True


__all__ = ["take_overlapped_handover"]
