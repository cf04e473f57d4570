"""The supervisor's few writes: its log line, a whole buffer to a fd, a signal (the state files the agent reads
are protocol.py's)."""

from __future__ import annotations

import os
import time


def log(message: str) -> None:
    write_all(2, f"berth-supervise: {message}\n".encode(errors="replace"))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            time.sleep(0.001)


def send(pid: int, sig: int) -> None:
    """A signal to a process that may have exited meanwhile."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


__all__ = ["log", "send", "write_all"]
