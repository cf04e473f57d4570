"""The signals the supervisor acts on, through a pipe: the C handler writes each one's number to it
(signal.set_wakeup_fd), so the loop sees them in order and idles in select otherwise, using no CPU."""

from __future__ import annotations

import os
import signal

from .protocol import GC_SIGNAL, HANDOVER_SIGNAL, HELD_SOCKET_SIGNAL

# The stop (the kubelet's SIGTERM, a terminal's SIGINT), the agent's three requests, and a child's exit.
WATCHED = (signal.SIGTERM, signal.SIGINT, HANDOVER_SIGNAL, GC_SIGNAL, HELD_SOCKET_SIGNAL, signal.SIGCHLD)


class SignalPipe:
    def __init__(self) -> None:
        self.fd, wake_write = os.pipe()  # the read end, for the loop's selector
        os.set_blocking(self.fd, False)
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        for sig in WATCHED:
            signal.signal(sig, _noted)

    def take(self) -> list[int]:
        """The signals received since the last look, in order."""
        signals = []
        while True:
            try:
                data = os.read(self.fd, 256)
            except BlockingIOError:
                return signals
            if not data:
                return signals
            signals.extend(data)


def _noted(_signum: int, _frame: object) -> None:
    """The signal's number is in the signal pipe (set_wakeup_fd): the loop acts on it."""


__all__ = ["WATCHED", "SignalPipe"]
