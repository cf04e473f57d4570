"""Run `registry garbage-collect` in the registry container, through its supervisor, and follow it to the end.

The binary lives in the registry container, so the agent asks supervise.sh (docs/design.md §4.2, §4.5 A5): it
writes `gc-request` in the supervisor's state dir ("ID [--dry-run] [--delete-untagged]", atomically) and sends
the supervisor SIGUSR2, only when the registry it runs carries the BERTH_SUPERVISE_GC marker (an older
supervisor would die of SIGUSR2). The supervisor answers in the same dir: `gc.pid` ("PID ID") while the command
runs, its output appended to `gc-output`, and `gc-result` ("ID STATUS", or "ID 2 refused") when it has ended.

While it runs, `GcCommand.run` touches `gc-heartbeat` (the supervisor stops a command whose agent went quiet for
10 s), parses the output as it grows and frees what it has read (the output lives on the pod's small tmp
volume), stops the command at its time bound or when asked, and returns only once the process is gone.
Blocking: the runner calls it from a worker thread.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.write import write_atomic
from ..supervisor.files import (
    CONFIG_NAME,
    GC_HEARTBEAT_NAME,
    GC_OUTPUT_NAME,
    GC_PID_NAME,
    GC_REQUEST_NAME,
    GC_RESULT_NAME,
)
from ..supervisor.output import scrub, supervisor_pid
from ..supervisor.procfs import (
    RegistryProcess,
    find_registry_processes,
    parent_pid,
    runs_gc,
    send_signal,
    start_ticks,
)
from . import report as gc_report

ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
START_TIMEOUT = 10.0  # the supervisor takes a request within milliseconds of SIGUSR2
NUDGE_SECONDS = 0.2  # SIGUSR2 again until it is taken (a signal can land just before the script's wait)
POLL_SECONDS = 0.05
RESULT_GRACE = 2.0  # the command is gone: the supervisor writes gc-result right after reaping it
FREE_AFTER = 1 << 20  # bytes of output read and not yet freed
READ_CHUNK = 256 * 1024
READ_BUDGET = 4 << 20  # per look: the heartbeat must not wait for a fast writer's output to be parsed
MAX_LINE = 64 * 1024  # a longer line is cut (the lines the parser knows are ~100 bytes)
KEEP_DIGESTS = 10_000  # eligible digests kept in the report; the counts are exact beyond that
_ERROR_LINE = re.compile(r"level=(fatal|panic|error)|^panic:|failed to garbage collect|\berror\b", re.I)
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02


class GcCommandError(Exception):
    """The command could not start: no supervisor, an older supervisor, a command still running, a refusal."""


@dataclass
class GcOutcome:
    exit_status: int | None  # as the supervisor's shell saw it (128+N: ended by signal N); None: unknown
    timed_out: bool  # killed at the time bound
    stopped: bool  # killed because `stop` was set (agent stopping, Lease lost)
    report: gc_report.GcReport | None  # parsed; None when the status is unknown or the output is not understood
    error: str | None  # secret-free one-liner when not a clean success
    seconds: float


@dataclass(frozen=True)
class _Running:
    process: RegistryProcess | None  # None: it ended before the agent could look at it
    run_id: str


class GcCommand:
    def __init__(self, state_dir: Path, config_dir: Path, *, heartbeat_seconds: float = 1.0,
                 kill_grace: float = 5.0):
        self.state_dir = Path(state_dir)  # supervise.sh's BERTH_STATE_DIR
        self.config_path = Path(config_dir) / CONFIG_NAME
        self.heartbeat_seconds = heartbeat_seconds
        self.kill_grace = kill_grace

    # ---- the run ---------------------------------------------------------------------------------------------

    def run(self, run_id: str, *, dry_run: bool, delete_untagged: bool,
            stop: threading.Event, timeout_seconds: float) -> GcOutcome:
        """Run garbage-collect with these flags and follow it; returns only when the process is gone."""
        began = time.monotonic()
        if not ID_PATTERN.fullmatch(run_id):
            raise GcCommandError("the request id must be 1 to 64 of A-Z a-z 0-9 . _ -")
        supervisor = self._supervisor()
        if stop.is_set():
            return GcOutcome(exit_status=None, timed_out=False, stopped=True, report=None,
                             error="garbage-collect was stopped before it started", seconds=0.0)
        running = self._running()
        if running is not None:
            raise GcCommandError(f"a garbage-collect (request {running.run_id}) still runs in the registry "
                                 "container")
        self._beat()
        self._remove(GC_RESULT_NAME)
        words = [run_id, *(["--dry-run"] if dry_run else []), *(["--delete-untagged"] if delete_untagged else [])]
        write_atomic(self.state_dir / GC_REQUEST_NAME, (" ".join(words) + "\n").encode())
        started = self._start(run_id, supervisor)
        parser = gc_report.GcReportParser(dry_run=dry_run, keep_digests=KEEP_DIGESTS)
        follower = _OutputFollower(self.state_dir / GC_OUTPUT_NAME, parser)
        try:
            status, timed_out, stopped = self._follow(run_id, started, follower, stop, began, timeout_seconds)
        finally:
            follower.close()
        return self._outcome(status, timed_out, stopped, parser, follower, timeout_seconds,
                             time.monotonic() - began)

    def _start(self, run_id: str, supervisor: int) -> _Running:
        """SIGUSR2 (repeated) until the supervisor has started the command (gc.pid) or answered (gc-result)."""
        deadline = time.monotonic() + START_TIMEOUT
        nudged = 0.0
        while True:
            now = time.monotonic()
            if now - nudged >= NUDGE_SECONDS:
                try:
                    os.kill(supervisor, signal.SIGUSR2)
                except ProcessLookupError:
                    self._remove(GC_REQUEST_NAME)
                    raise GcCommandError("the supervisor (supervise.sh) exited before it took the request") from None
                nudged = now
            result = self._result(run_id)
            if result is not None and result[1]:
                raise GcCommandError(f"the supervisor refused the request {run_id} (gc-request)")
            running = self._running(run_id)
            if running is not None:
                return running
            if result is not None:  # ended already (a config it refuses ends in milliseconds)
                return _Running(None, run_id)
            if now >= deadline:
                self._remove(GC_REQUEST_NAME)
                raise GcCommandError(f"the supervisor (pid {supervisor}) did not start garbage-collect within "
                                     f"{START_TIMEOUT:g}s")
            time.sleep(0.01)

    def _follow(self, run_id: str, started: _Running, follower: _OutputFollower, stop: threading.Event,
                began: float, timeout_seconds: float) -> tuple[int | None, bool, bool]:
        """Heartbeat, read the output, stop the command when due; (exit status, timed out, stopped)."""
        process = started.process
        timed_out = stopped = False
        term_at: float | None = None
        killed = False
        gone_at: float | None = None
        next_beat = 0.0
        while True:
            now = time.monotonic()
            if now >= next_beat:
                self._beat()
                next_beat = now + self.heartbeat_seconds
            pending = follower.read()
            result = self._result(run_id)
            if result is not None:
                follower.read_all()  # written before the result: the rest of the output
                return result[0], timed_out, stopped
            if process is not None and process.alive():
                if term_at is None:
                    stopped = stop.is_set()
                    timed_out = not stopped and now - began >= timeout_seconds
                    if stopped or timed_out:
                        send_signal(process.pid, signal.SIGTERM)
                        term_at = now
                elif not killed and now - term_at >= self.kill_grace:
                    send_signal(process.pid, signal.SIGKILL)
                    killed = True
            elif gone_at is None:
                gone_at = now
            elif now - gone_at >= RESULT_GRACE:
                follower.read_all()
                return None, timed_out, stopped  # nobody recorded its status: the supervisor is gone
            if not pending:
                time.sleep(POLL_SECONDS)

    def _outcome(self, status: int | None, timed_out: bool, stopped: bool, parser: gc_report.GcReportParser,
                 follower: _OutputFollower, timeout_seconds: float, seconds: float) -> GcOutcome:
        report: gc_report.GcReport | None = None
        error: str | None = None
        if status is not None:
            try:
                report = parser.finish(status)
            except gc_report.GcReportError as exc:
                error = str(exc)
        if timed_out:
            error = f"garbage-collect did not finish within {timeout_seconds:g}s and was stopped"
        elif stopped:
            error = "garbage-collect was stopped before it finished"
        elif status is None:
            error = "garbage-collect ended but no exit status was recorded (the supervisor is gone?)"
        elif status > 128:  # the shell's status of a child killed by a signal
            error = _killed(status)
        elif status != 0:
            error = f"garbage-collect exited with status {status}"
            if follower.first_error:
                error += f": {follower.first_error}"
        return GcOutcome(exit_status=status, timed_out=timed_out, stopped=stopped, report=report, error=error,
                         seconds=round(seconds, 3))

    # ---- an orphan ---------------------------------------------------------------------------------------------

    def stop_orphan(self, timeout: float = 15.0) -> str | None:
        """Stop a garbage-collect an earlier agent process left running (gc.pid names a live one): TERM, KILL
        after kill_grace, wait until it is gone. Its request id, or None when none runs. GcCommandError if it
        is still there after `timeout`."""
        running = self._running()
        if running is None or running.process is None:
            return None
        process = running.process
        send_signal(process.pid, signal.SIGTERM)
        began = time.monotonic()
        killed = False
        while process.alive():
            waited = time.monotonic() - began
            if not killed and waited >= self.kill_grace:
                send_signal(process.pid, signal.SIGKILL)
                killed = True
            if waited >= timeout:
                raise GcCommandError(f"the garbage-collect of request {running.run_id} (pid {process.pid}) is "
                                     f"still running {timeout:g}s after it was stopped")
            time.sleep(POLL_SECONDS)
        return running.run_id

    # ---- the supervisor's files --------------------------------------------------------------------------------

    def _supervisor(self) -> int:
        """The supervisor's pid, if it runs garbage-collect on SIGUSR2 (its registry carries the marker)."""
        pid = supervisor_pid(self.state_dir)
        if pid is None:
            raise GcCommandError("no supervisor (supervise.sh, the registry container's command) is running")
        registries = [p for p in find_registry_processes(self.config_path) if parent_pid(p) == pid]
        if not registries:
            raise GcCommandError("the supervisor runs no registry now, so it cannot be told apart from an older "
                                 "one that would die of the request")
        if not any(runs_gc(p) for p in registries):
            raise GcCommandError("the supervisor (supervise.sh) in the registry container is an older one that "
                                 "cannot run garbage-collect (its registry lacks BERTH_SUPERVISE_GC=1)")
        return pid

    def _running(self, run_id: str | None = None) -> _Running | None:
        """The command gc.pid names (of request `run_id`, when given) if it still runs (or just ended)."""
        try:
            words = (self.state_dir / GC_PID_NAME).read_text().split()
            pid, found_id = int(words[0]), words[1]
        except (OSError, ValueError, IndexError):
            return None
        if run_id is not None and found_id != run_id:
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            process = RegistryProcess(pid, start_ticks(pid))
        except (OSError, ValueError, IndexError):
            return _Running(None, found_id) if run_id is not None else None
        if not process.alive() or (b"garbage-collect" not in cmdline and not self._forked_by_wrapper(process)):
            return _Running(None, found_id) if run_id is not None else None  # ended (its pid may be reused)
        return _Running(process, found_id)

    def _forked_by_wrapper(self, process: RegistryProcess) -> bool:
        """The wrapper writes gc.pid right after its fork, so the command can still be the forked shell, before
        its exec (a busy node stretches that to many ms): its parent is the wrapper, the supervisor's child.
        Taken for ended, the run would end while the command goes on, the registry writable again. The start
        ticks stay the same across the exec, so liveness and signals follow it."""
        wrapper = parent_pid(process)
        supervisor = supervisor_pid(self.state_dir)
        # berth-supervise (Python) is the command's parent itself: it writes gc.pid after the exec, but the
        # program exec'd may be a wrapper of its own that execs garbage-collect later.
        return wrapper is not None and supervisor is not None and \
            (wrapper == supervisor or parent_pid(RegistryProcess(wrapper, 0)) == supervisor)

    def _result(self, run_id: str) -> tuple[int, bool] | None:
        """(exit status, refused) from gc-result when it answers `run_id`."""
        try:
            words = (self.state_dir / GC_RESULT_NAME).read_text().split()
        except OSError:
            return None
        if len(words) < 2 or words[0] != run_id or not words[1].isdigit():
            return None
        return int(words[1]), words[2:] == ["refused"]

    def _beat(self) -> None:
        (self.state_dir / GC_HEARTBEAT_NAME).touch()

    def _remove(self, name: str) -> None:
        try:
            (self.state_dir / name).unlink()
        except FileNotFoundError:
            pass


class _OutputFollower:
    """Reads gc-output as it grows, line by line into the parser, and frees what it has read.

    The supervisor appends (O_APPEND), so the file only grows; every FREE_AFTER bytes read, the read part is
    punched out (fallocate PUNCH_HOLE: the blocks are freed, nothing written meanwhile is lost, the offsets
    stay). Where a file system cannot punch holes the file is truncated instead, which can lose the lines
    written between the last read and the truncation.
    """

    def __init__(self, path: Path, parser: gc_report.GcReportParser):
        self.path = path
        self.parser = parser
        self.fd: int | None = None
        self.offset = 0
        self.freed = 0
        self.partial = b""
        self.cutting = False  # inside a line longer than MAX_LINE: dropping until its end
        self.first_error: str | None = None
        self.bytes_read = 0

    def read(self) -> bool:
        """Read what was appended, up to READ_BUDGET bytes; whether more is waiting."""
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDWR)
            except FileNotFoundError:
                return False
        budget = READ_BUDGET
        while True:
            if budget <= 0:
                return True
            chunk = os.pread(self.fd, READ_CHUNK, self.offset)
            if not chunk:
                return False
            budget -= len(chunk)
            self.offset += len(chunk)
            self.bytes_read += len(chunk)
            lines = (self.partial + chunk).split(b"\n")
            self.partial = lines.pop()
            for line in lines:
                if self.cutting:
                    self.cutting = False  # the rest of a cut line
                    continue
                self._line(line)
            if len(self.partial) > MAX_LINE:
                if not self.cutting:
                    self._line(self.partial[:MAX_LINE])
                self.partial, self.cutting = b"", True
            if self.offset - self.freed > FREE_AFTER:
                self._free()

    def read_all(self) -> None:
        while self.read():
            pass

    def _line(self, raw: bytes) -> None:
        line = raw.decode(errors="replace")
        self.parser.feed(line)
        if self.first_error is None and _ERROR_LINE.search(line):
            self.first_error = scrub(line)

    def _free(self) -> None:
        assert self.fd is not None
        upto = self.offset - self.offset % 4096
        try:
            _punch_hole(self.fd, 0, upto)
            self.freed = upto
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            os.ftruncate(self.fd, 0)
            self.offset = self.freed = 0

    def close(self) -> None:
        if self.partial and not self.cutting:
            self._line(self.partial)
        self.partial = b""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _punch_hole(fd: int, offset: int, length: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fallocate = libc.fallocate
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _killed(status: int) -> str:
    """A command ended by a signal nobody in Berth sent (the agent's stops are `stopped`/`timed_out`)."""
    try:
        name = signal.Signals(status - 128).name
    except ValueError:
        name = f"signal {status - 128}"
    message = f"garbage-collect was killed by {name} (exit status {status})"
    if status - 128 == signal.SIGKILL:
        # Mark and sweep keeps every referenced digest in memory, in the registry container, under its limit.
        message += (": the kernel kills so at the container's memory limit; garbage-collect holds every "
                    "manifest and blob digest in memory, so raise spec.resources.limits.memory for a large store")
    return message


__all__ = ["GcCommand", "GcCommandError", "GcOutcome"]
