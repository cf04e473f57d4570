"""Steered-away registries waiting for their clients and notification queues (notify.py) before their SIGTERM:
looked at every WAIT_POLL_SECONDS; at most MAX_WAITING at a time (each is a whole registry process): a newer one
retires the oldest at once. What one still had queued when it goes is counted per endpoint in
notifications-dropped."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from pathlib import Path

from .notify import Waiting
from .protocol import write_dropped
from .registry import Registry
from .steer import accept_queue, client_connections
from .write import send

WAIT_POLL_SECONDS = 0.1
MAX_WAITING = 4


class WaitingRoom:
    def __init__(self, state: Path, debug_host: str, log: Callable[[str], None]) -> None:
        self.state, self.debug_host, self.log = state, debug_host, log
        self.waiting: list[tuple[Waiting, Registry]] = []  # steered away, SIGTERMed once their queues are empty
        self.due = 0.0
        self.dropped: dict[str, int] = {}  # events dropped at the bound, per endpoint, since this supervisor started

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def add(self, registry: Registry, sock: socket.socket, now: float) -> None:
        """`registry` takes no new connection and its accept queue is empty: it waits (its debug port is known)."""
        port = sock.getsockname()[1]
        connections = None if registry.quick else (lambda pid=registry.pid: client_connections(pid, port))
        self.waiting.append((Waiting(registry.pid, self.debug_host, registry.debug_port, registry.drain, now,
                                     connections), registry))
        # Checked at once; a fifth waiting registry stops the oldest there, under the same rule as any other (its
        # accept queue empty).
        self.due = now

    def tick(self, now: float) -> None:
        if self.waiting and now >= self.due:
            self.due = now + WAIT_POLL_SECONDS
            self.check(now)

    def check(self, now: float) -> None:
        for index, (waiting, registry) in enumerate(list(self.waiting)):
            over = len(self.waiting) - MAX_WAITING
            reason = f"more than {MAX_WAITING} registries waiting" if index < over else waiting.check(now)
            if reason is None:
                continue
            try:
                queued = accept_queue(registry.sock) if registry.sock is not None and registry.sock.fileno() >= 0 else 0
            except OSError:
                queued = 0
            if queued:  # it has connections to take first: looked at again
                continue
            self.release(waiting, registry, reason, now)

    def release(self, waiting: Waiting, registry: Registry, reason: str, now: float) -> None:
        """SIGTERM a waiting registry (it drains); what it still had queued is dropped, counted per endpoint."""
        self.waiting.remove((waiting, registry))
        seconds = now - waiting.since
        dropped = {name: count for name, count in waiting.pending.items() if count > 0}
        if dropped:
            for name, count in sorted(dropped.items()):
                self.dropped[name] = self.dropped.get(name, 0) + count
                self.log(f"registry (pid {registry.pid}) still had {count} events queued for notification endpoint "
                         f"{name} after {seconds:.1f}s ({reason}): dropped")
            write_dropped(self.state, self.dropped)
        self.log(f"stopping registry (pid {registry.pid}), which drains: {reason} after {seconds:.1f}s")
        send(registry.pid, signal.SIGTERM)  # its socket stays in the group, steered past, until it has exited

    def forget(self, registry: Registry) -> None:
        """It died while waiting (a crash, a kill -9): its queue went with it."""
        self.waiting = [(w, r) for w, r in self.waiting if r is not registry]

    def stop(self) -> None:
        """The supervisor stops: every registry was SIGTERMed, among the draining ones."""
        for _waiting, registry in self.waiting:
            self.log(f"registry (pid {registry.pid}) stops with its notification queues as they are (the supervisor "
                     "stops)")
        self.waiting = []


__all__ = ["MAX_WAITING", "WAIT_POLL_SECONDS", "WaitingRoom"]
