"""One registry process as the supervisor keeps it, and the table of the live ones."""

from __future__ import annotations

import os
import socket

from .lines import LineSplitter


class Registry:
    """One registry process (compared by identity; a plain class, as in settings.py)."""

    def __init__(self, pid: int, started: float, debug_port: int | None, pipe: int | None) -> None:
        self.pid = pid
        self.started = started
        self.debug_port = debug_port
        self.pipe = pipe  # the read end of its output pipe, until end of file
        self.splitter = LineSplitter()
        self.lost_debug_port = False  # it said it could not bind its debug port
        self.sock: socket.socket | None = None  # its listening socket (3.x), held by the supervisor too
        # Replaced by a bounded handover (a credential retired, or GC's read-only switch): it waits for no kept-alive
        # client and is gone by its drain timeout after the switch (retire_by), killed if need be
        # (docs/decisions/0001-retirement-bounded-by-drain-timeout.md).
        self.quick = False
        self.drain = 0.0  # http.draintimeout of the config it started on
        self.retire_by: float | None = None


class Registries:
    """The live registry processes by pid: the current one (serving, or starting, on the newest config) and the
    older ones finishing their in-flight requests. A 3.x successor not yet answering is the handover's
    (held_socket.py)."""

    def __init__(self) -> None:
        self.by_pid: dict[int, Registry] = {}
        self.current: Registry | None = None
        self.draining: list[Registry] = []

    def __bool__(self) -> bool:
        return bool(self.by_pid)

    def alive(self, registry: Registry) -> bool:
        return registry.pid in self.by_pid

    def debug_ports(self) -> set[int | None]:
        """The debug ports live registries hold. One that exited and is not reaped yet (the loop takes the
        signals before it reaps) holds none: its sockets closed when it exited."""
        return {r.debug_port for r in self.by_pid.values() if not _exited(r.pid)}

    def hold(self, sock: socket.socket) -> bool:
        """Whether a live registry serves on `sock`."""
        return any(r.sock is sock for r in self.by_pid.values())

    def current_pid(self) -> int | None:
        return self.current.pid if self.current is not None else None


def _exited(pid: int) -> bool:
    """Whether child `pid` has exited, without reaping it (WNOWAIT): the loop's reap still sees its status."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


__all__ = ["Registries", "Registry"]
