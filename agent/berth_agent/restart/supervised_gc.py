"""The garbage-collect command the registry container's supervisor runs for the agent (docs/design.md §4.5).

Asked, followed and stopped through berth_supervise.protocol: the request (gc-request + GC_SIGNAL, sent only to a
supervisor whose registry carries GC_MARKER: an older one would die of it), the answers (gc.pid while it runs,
gc-result once it ended), the heartbeat (10 s without a touch and the supervisor stops the command), and stopping
a command an earlier agent left running. gc/command.py follows a run to its end with these and parses its output.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from berth_supervise import protocol

from .procfs import RegistryProcess, find_registry_processes, parent_pid, runs_gc, send_signal, start_ticks
from .supervisor_state import supervisor_pid

START_TIMEOUT = 10.0  # the supervisor takes a request within milliseconds of GC_SIGNAL
NUDGE_SECONDS = 0.2  # GC_SIGNAL again until it is taken (a signal can land just before the supervisor's wait)
POLL_SECONDS = 0.05


class GcProcessError(Exception):
    """The command could not start: no supervisor, an older supervisor, a command still running, a refusal."""


@dataclass(frozen=True)
class Running:
    process: RegistryProcess | None  # None: it ended before the agent could look at it
    run_id: str


class GcProcess:
    """The supervisor's garbage-collect files in `state_dir`, for the registry serving `config_path`."""

    def __init__(self, state_dir: Path, config_path: Path) -> None:
        self.state_dir, self.config_path = Path(state_dir), Path(config_path)

    def supervisor(self) -> int:
        """The supervisor's pid, if it runs garbage-collect on GC_SIGNAL (its registry carries the marker)."""
        pid = supervisor_pid(self.state_dir)
        if pid is None:
            raise GcProcessError("no supervisor (the registry container's command) is running")
        registries = [p for p in find_registry_processes(self.config_path) if parent_pid(p) == pid]
        if not registries:
            raise GcProcessError("the supervisor runs no registry now, so it cannot be told apart from an older "
                                 "one that would die of the request")
        if not any(runs_gc(p) for p in registries):
            raise GcProcessError("the supervisor in the registry container is an older one that cannot run "
                                 f"garbage-collect (its registry lacks {protocol.GC_MARKER.decode()})")
        return pid

    def request(self, run_id: str, flags: list[str]) -> None:
        self.beat()
        self.remove(protocol.GC_RESULT_NAME)
        protocol.write_gc_request(self.state_dir, run_id, flags)

    def start(self, run_id: str, supervisor: int) -> Running:
        """GC_SIGNAL (repeated) until the supervisor has started the command (gc.pid) or answered (gc-result)."""
        deadline = time.monotonic() + START_TIMEOUT
        nudged = 0.0
        while True:
            now = time.monotonic()
            if now - nudged >= NUDGE_SECONDS:
                try:
                    os.kill(supervisor, protocol.GC_SIGNAL)
                except ProcessLookupError:
                    self.remove(protocol.GC_REQUEST_NAME)
                    raise GcProcessError("the supervisor exited before it took the request") from None
                nudged = now
            result = self.result(run_id)
            if result is not None and result[1]:
                raise GcProcessError(f"the supervisor refused the request {run_id} (gc-request)")
            running = self.running(run_id)
            if running is not None:
                return running
            if result is not None:  # ended already (a config it refuses ends in milliseconds)
                return Running(None, run_id)
            if now >= deadline:
                self.remove(protocol.GC_REQUEST_NAME)
                raise GcProcessError(f"the supervisor (pid {supervisor}) did not start garbage-collect within "
                                     f"{START_TIMEOUT:g}s")
            time.sleep(0.01)

    def running(self, run_id: str | None = None) -> Running | None:
        """The command gc.pid names (of request `run_id`, when given) if it still runs (or just ended)."""
        found = protocol.read_gc_pid(self.state_dir)
        if found is None:
            return None
        pid, found_id = found
        if run_id is not None and found_id != run_id:
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            process = RegistryProcess(pid, start_ticks(pid))
        except (OSError, ValueError, IndexError):
            return Running(None, found_id) if run_id is not None else None
        if not process.alive() or (b"garbage-collect" not in cmdline and not self._started_by_supervisor(process)):
            return Running(None, found_id) if run_id is not None else None  # ended (its pid may be reused)
        return Running(process, found_id)

    def _started_by_supervisor(self, process: RegistryProcess) -> bool:
        """berth-supervise writes gc.pid once the command has exec'd, but the program exec'd may be a wrapper in
        the binary's place that execs garbage-collect later (a busy node stretches that to many ms). Taken for
        ended, the run would end while the command goes on, the registry writable again. The start ticks stay
        the same across the exec, so liveness and signals follow it; the supervisor is its parent."""
        parent = parent_pid(process)
        return parent is not None and parent == supervisor_pid(self.state_dir)

    def result(self, run_id: str) -> tuple[int, bool] | None:
        """(exit status, refused) from gc-result when it answers `run_id`."""
        return protocol.read_gc_result(self.state_dir, run_id)

    def beat(self) -> None:
        protocol.beat(self.state_dir)

    def remove(self, name: str) -> None:
        protocol.remove(self.state_dir / name)

    def stop_orphan(self, kill_grace: float, timeout: float = 15.0) -> str | None:
        """Stop a garbage-collect an earlier agent process left running (gc.pid names a live one): TERM, KILL
        after kill_grace, wait until it is gone. Its request id, or None when none runs. GcProcessError if it
        is still there after `timeout`."""
        running = self.running()
        if running is None or running.process is None:
            return None
        process = running.process
        send_signal(process.pid, signal.SIGTERM)
        began = time.monotonic()
        killed = False
        while process.alive():
            waited = time.monotonic() - began
            if not killed and waited >= kill_grace:
                send_signal(process.pid, signal.SIGKILL)
                killed = True
            if waited >= timeout:
                raise GcProcessError(f"the garbage-collect of request {running.run_id} (pid {process.pid}) is "
                                     f"still running {timeout:g}s after it was stopped")
            time.sleep(POLL_SECONDS)
        return running.run_id


__all__ = ["GcProcess", "GcProcessError", "NUDGE_SECONDS", "Running", "START_TIMEOUT"]
