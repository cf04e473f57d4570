"""The supervisor's few writes: its log line, the one-line state files the agent reads, a whole buffer to a fd."""

from __future__ import annotations

import os
import time
from pathlib import Path


def log(message: str) -> None:
    write_all(2, f"berth-supervise: {message}\n".encode(errors="replace"))


def put(path: Path, text: str) -> None:
    """A one-line state file, replaced whole (the agent never reads half of it)."""
    try:
        write_replacing(path, (text + "\n").encode())
    except OSError:
        pass


def write_replacing(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_bytes(data)
    os.replace(temp, path)


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


__all__ = ["log", "put", "send", "write_all", "write_replacing"]
