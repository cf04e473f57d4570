"""Run `registry garbage-collect` in the registry container, through its supervisor, and follow it to the end.

The binary lives in the registry container, so the agent asks its supervisor (docs/design.md §4.3, §4.5);
the request, the answers, the heartbeat file and an orphan's stop are restart/supervised_gc.py, beside the
supervisor they talk to: `gc-request` ("ID [--dry-run] [--delete-untagged]") and SIGUSR2, only when the registry
it runs carries the BERTH_SUPERVISE_GC marker; `gc.pid` ("PID ID") while the command runs, its output appended
to `gc-output`, and `gc-result` ("ID STATUS", or "ID 2 refused") when it has ended.

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

from berth_supervise.protocol import CONFIG_NAME, GC_OUTPUT_NAME

from ..restart.procfs import send_signal
from ..restart.registry_output import scrub
from ..restart.supervised_gc import GcProcess, GcProcessError
from ..restart.supervised_gc import Running as _Running
from . import report as gc_report

ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
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


# The command could not start: no supervisor, an older supervisor, a command still running, a refusal.
GcCommandError = GcProcessError


@dataclass
class GcOutcome:
    exit_status: int | None  # as the supervisor's shell saw it (128+N: ended by signal N); None: unknown
    timed_out: bool  # killed at the time bound
    stopped: bool  # killed because `stop` was set (agent stopping, Lease lost)
    report: gc_report.GcReport | None  # parsed; None when the status is unknown or the output is not understood
    error: str | None  # secret-free one-liner when not a clean success
    seconds: float


class GcCommand:
    def __init__(self, state_dir: Path, config_dir: Path, *, heartbeat_seconds: float = 1.0,
                 kill_grace: float = 5.0):
        self.state_dir = Path(state_dir)  # the supervisor's BERTH_STATE_DIR
        self.config_path = Path(config_dir) / CONFIG_NAME
        self.heartbeat_seconds = heartbeat_seconds
        self.kill_grace = kill_grace
        self.process = GcProcess(self.state_dir, self.config_path)  # the supervisor's side (restart/supervised_gc.py)

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
        self.process.request(run_id, [*(["--dry-run"] if dry_run else []),
                                      *(["--delete-untagged"] if delete_untagged else [])])
        started = self.process.start(run_id, supervisor)
        parser = gc_report.GcReportParser(dry_run=dry_run, keep_digests=KEEP_DIGESTS)
        follower = _OutputFollower(self.state_dir / GC_OUTPUT_NAME, parser)
        try:
            status, timed_out, stopped = self._follow(run_id, started, follower, stop, began, timeout_seconds)
        finally:
            follower.close()
        return self._outcome(status, timed_out, stopped, parser, follower, timeout_seconds,
                             time.monotonic() - began)

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

    # ---- the supervisor's side (restart/supervised_gc.py) ----------------------------------------------------

    def stop_orphan(self, timeout: float = 15.0) -> str | None:
        """Stop a garbage-collect an earlier agent process left running; its request id, or None."""
        return self.process.stop_orphan(self.kill_grace, timeout)

    def _supervisor(self) -> int:
        return self.process.supervisor()

    def _running(self, run_id: str | None = None) -> _Running | None:
        return self.process.running(run_id)

    def _result(self, run_id: str) -> tuple[int, bool] | None:
        return self.process.result(run_id)

    def _beat(self) -> None:
        self.process.beat()


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
