"""Stopping a service a fixture started: SIGTERM, a bounded wait, then SIGKILL, and close its log file."""

from __future__ import annotations

import signal
import subprocess
from typing import IO


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
