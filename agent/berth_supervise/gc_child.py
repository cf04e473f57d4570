"""Garbage collection beside the registry (docs/design.md §4.5): the agent asks with GC_SIGNAL (SIGUSR2).

The request is gc-request in the state dir (protocol.parse_gc_request: compared word by word with the few flags
allowed, never evaluated), removed once read, so a repeated signal starts nothing. The command is
`BIN garbage-collect FLAGS CONFIG`, a child of the supervisor beside the registry (never touched), its output
appended to gc-output; its pid and request go to gc.pid once it has exec'd, and its status to gc-result when it
ends (gc.pid removed first). While it runs the agent touches gc-heartbeat: 10 s without a touch (a dead agent) and
the command is stopped (TERM, KILL 5 s later), so it never outlives the Lease (15 s) of the agent that asked for it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from .protocol import (
    GC_OUTPUT_NAME,
    GC_PID_NAME,
    GC_REQUEST_NAME,
    GC_RESULT_NAME,
    last_beat,
    parse_gc_request,
    remove,
    write_gc_pid,
    write_gc_result,
)
from .spawn import SpawnError, registry_env, spawn

HEARTBEAT_SECONDS = 10.0
KILL_SECONDS = 5.0


class GarbageCollectChild:
    """The `registry garbage-collect` child the supervisor runs for the agent's runner (gc.run.GcRunner): at most
    one at a time; its pid, id, watchdog and stop."""

    def __init__(self, state: Path, registry_bin: str, config: Path, env: Mapping[str, str],
                 log: Callable[[str], None]) -> None:
        self.state, self.registry_bin, self.config, self.env = state, registry_bin, config, env
        self.log = log
        self.pid: int | None = None
        self.run_id = ""
        self.seen_beat: float | None = None  # mtime of gc-heartbeat when last seen changing
        self.beat_at = 0.0  # monotonic time it was seen changing
        self.term_at: float | None = None  # when TERM was sent (KILL follows KILL_SECONDS later)
        self.killed = False

    def take_request(self) -> None:
        path = self.state / GC_REQUEST_NAME
        try:
            raw = path.read_bytes()
        except OSError:
            return
        if self.pid is not None:
            self.log("a garbage-collect still runs: request ignored")
            return
        remove(path)
        run_id, flags, refused = parse_gc_request(raw)
        remove(self.state / GC_RESULT_NAME)
        if refused:
            self.log(f"garbage-collect request {run_id} refused: {refused}")
            write_gc_result(self.state, run_id, 2, refused=True)
            return
        output = os.open(self.state / GC_OUTPUT_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            pid = spawn([self.registry_bin, "garbage-collect", *flags, str(self.config)],
                        registry_env(self.env, self.config), stdout=output)
        except SpawnError as exc:
            self.log(str(exc))
            write_gc_result(self.state, run_id, 127)
            return
        finally:
            os.close(output)
        self.pid, self.run_id = pid, run_id
        self.seen_beat, self.beat_at = last_beat(self.state), time.monotonic()
        self.term_at, self.killed = None, False
        write_gc_pid(self.state, pid, run_id)
        self.log(f"started garbage-collect {' '.join(flags) + ' ' if flags else ''}(pid {pid}, request {run_id})")

    def ended(self, status: int) -> None:
        self.log(f"garbage-collect (pid {self.pid}, request {self.run_id}) exited with status {status}")
        remove(self.state / GC_PID_NAME)  # first: whoever sees the result finds no gc.pid left
        write_gc_result(self.state, self.run_id, status)
        self.pid = None

    def stop(self) -> None:
        """TERM now, KILL KILL_SECONDS later (tick)."""
        if self.pid is not None and self.term_at is None:
            _signal(self.pid, signal.SIGTERM)
            self.term_at = time.monotonic()

    def tick(self, now: float) -> float | None:
        """The watchdog and the KILL after a TERM; the next time it needs a look (None: nothing runs)."""
        if self.pid is None:
            return None
        if self.term_at is not None:
            if not self.killed and now - self.term_at >= KILL_SECONDS:
                _signal(self.pid, signal.SIGKILL)
                self.killed = True
            return None if self.killed else self.term_at + KILL_SECONDS
        beat = last_beat(self.state)
        if beat != self.seen_beat:
            self.seen_beat, self.beat_at = beat, now
        elif now - self.beat_at >= HEARTBEAT_SECONDS:
            self.log(f"no heartbeat from the agent within {HEARTBEAT_SECONDS:g}s: stopping garbage-collect "
                     f"(pid {self.pid})")
            self.stop()
            return self.term_at + KILL_SECONDS if self.term_at else None
        return now + 1.0


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


__all__ = ["GarbageCollectChild"]
