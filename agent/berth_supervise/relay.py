"""Each registry's output, line by line (lines.py redacts), to the container log and to registry-output; the
output of a registry that exited kept in registry-output.1 for the agent, which quotes it (protocol.record_exit)."""

from __future__ import annotations

import errno
import os
import selectors
from pathlib import Path

from .protocol import OUTPUT_NAME, record_exit
from .registry import Registry
from .write import write_all

DEBUG_BIND_ERROR = b"error listening on debug interface"


class OutputRelay:
    """One selector over the registries' output pipes (and the signal pipe, `wake_fd`, which only wakes it)."""

    def __init__(self, state: Path, wake_fd: int) -> None:
        self.state = state
        self.output_path = state / OUTPUT_NAME
        self.output_fd: int | None = None
        self.selector = selectors.DefaultSelector()
        self.wake_fd = wake_fd
        self.selector.register(wake_fd, selectors.EVENT_READ)

    def watch(self, registry: Registry) -> None:
        if registry.pipe is not None:
            self.selector.register(registry.pipe, selectors.EVENT_READ, registry)

    def wait(self, timeout: float | None) -> None:
        """Relay what arrived until output, a signal or the timeout."""
        for key, _events in self.selector.select(timeout):
            if key.fd != self.wake_fd:
                self.read(key.data)

    def read(self, registry: Registry, *, until_end: bool = False) -> None:
        while registry.pipe is not None:
            try:
                data = os.read(registry.pipe, 65536)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.EINTR:
                    data = b""
                else:
                    continue
            if not data:
                for line in registry.splitter.close():
                    self.emit(registry, line)
                self.selector.unregister(registry.pipe)
                os.close(registry.pipe)
                registry.pipe = None
                return
            for line in registry.splitter.feed(data):
                self.emit(registry, line)
            if not until_end:
                return

    def emit(self, registry: Registry | None, line: bytes) -> None:
        """One redacted line to the container log and to registry-output."""
        if registry is not None and DEBUG_BIND_ERROR in line:
            registry.lost_debug_port = True
        write_all(1, line)
        if self.output_fd is None:
            try:
                self.output_fd = os.open(self.output_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError:
                return  # no state dir: the container log has it all
        try:
            write_all(self.output_fd, line)
        except OSError:
            os.close(self.output_fd)
            self.output_fd = None

    def record_exit(self, registry: Registry, status: int, lived: float) -> None:
        """For the agent, which counts unexpected exits and quotes what the registry said."""
        record_exit(self.state, registry.pid, status, lived)


__all__ = ["DEBUG_BIND_ERROR", "OutputRelay"]
