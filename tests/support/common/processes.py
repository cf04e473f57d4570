"""Stopping a service a fixture started: SIGTERM, a bounded wait, then SIGKILL, and close its log file; the
start every such service shares: wait until it listens, or stop it and say why; and whether a child has exited
while its parent has not reaped it yet."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol, TypeVar

from support.common.ports import wait_listening


class Stoppable(Protocol):
    def stop(self) -> object: ...


Service = TypeVar("Service", bound=Stoppable)


def exited_unreaped(pid: int) -> bool:
    """Whether `pid` is a zombie its parent can reap: its sockets are closed and waitid reports it. The leader of a
    multi-threaded process (a Go registry) shows Z while its other threads still exit and hold its files, so the
    threads are counted too."""
    try:
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":\t" in line)
    except OSError:
        return False
    return status["State"].startswith("Z") and status["Threads"].strip() == "1"


def stop_process(process: subprocess.Popen, log_file: IO[bytes] | None, *, timeout: float = 10.0) -> int:
    """Stop `process` (if still running) and close `log_file`; return the exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if log_file is not None:
        log_file.close()
    return process.returncode


def started(service: Service, process: subprocess.Popen, port: int, what: str, *, timeout: float,
            log: Callable[[], str], host: str = "127.0.0.1") -> Service:
    """`service` once `process` listens on host:port (ports.wait_listening). Otherwise `service` is stopped first,
    so that no failed start leaves a process behind, and the error raised again: a RuntimeError (it exited) with
    the end of log() appended, a TimeoutError or an interrupt as it was."""
    try:
        wait_listening(process, port, what, timeout=timeout, host=host)
    except RuntimeError as error:
        service.stop()
        raise RuntimeError(f"{error}: {log()[-2000:]}") from None
    except BaseException:
        service.stop()
        raise
    return service
