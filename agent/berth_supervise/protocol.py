"""The wire between the agent and berth-supervise: every file, environment marker and signal the two programs share,
and how each file is written and read. Both sides use this module; neither spells a name or a line of its own.

- The config dir (where BERTH_CONFIG is; the registry container reads it): the agent writes config.yml, the
  handover file and the temporary S3 credentials; berth-supervise reads them.
- The state dir (BERTH_STATE_DIR): berth-supervise writes its pid, the last registry exit, the registry's output,
  the current registry with its metrics port, the notification events dropped and the garbage-collect answers;
  the agent reads them, and writes the garbage-collect request and heartbeat.
- The registry's environment carries markers: what its supervisor understands, so the agent sends no signal an
  older supervisor would die of.

A file the agent writes fails loudly (OSError). One berth-supervise writes fails quietly: the agent reads a missing
file as "none yet", and the registry container's command must not die of a full state dir.

Standard library only, and nothing heavy of it (os, re, signal, pathlib): berth-supervise imports it in every
registry pod, and imports nothing of the agent.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (0.4 MiB in every registry pod)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

# ---- the config dir: the agent writes, berth-supervise reads ---------------------------------------------------

CONFIG_NAME = "config.yml"  # berth_api.pod.CONFIG_NAME (tests/supervise/test_protocol.py holds them in step)
DEFAULT_CONFIG = "/etc/berth/" + CONFIG_NAME  # berth_api.pod.CONFIG_DIR
HANDOVER_NAME = "handover"  # "pid start_ticks" of each registry the agent asks to replace
QUICK_WORD = "quick"  # a line of the handover file: the old registry is bounded by its drainTimeout (3.x)
# Temporary S3 credentials (the renderer writes them): named in each registry's AWS_SHARED_CREDENTIALS_FILE while
# they are there.
S3_CREDENTIALS_NAME = "s3/credentials"

# ---- the state dir: berth-supervise writes, the agent reads (but the request and the heartbeat) --------------------

SUPERVISOR_PID_NAME = "supervisor.pid"  # the supervisor's pid: a missing supervisor told from a quiet one
EXIT_NAME = "registry-exit"  # "pid status seconds-it-ran" of the last registry that exited
# "seq pid status seconds-it-ran" of the last EXIT_HISTORY_LINES exits, oldest first: the agent looks once a second,
# and a crash loop (or a kill -9 followed by refused starts) can exit more often than that.
EXIT_HISTORY_NAME = "registry-exits"
EXIT_HISTORY_LINES = 64
OUTPUT_NAME = "registry-output"  # the registry's stdout and stderr since its last start
PREVIOUS_OUTPUT_NAME = OUTPUT_NAME + ".1"  # ... and before it, moved there when a registry exits
GC_REQUEST_NAME = "gc-request"  # the agent's "ID [--dry-run] [--delete-untagged]" line, taken on GC_SIGNAL
GC_PID_NAME = "gc.pid"  # "PID ID" while garbage-collect runs
GC_OUTPUT_NAME = "gc-output"  # what garbage-collect prints
GC_RESULT_NAME = "gc-result"  # "ID STATUS", or "ID 2 refused", once it ended
GC_HEARTBEAT_NAME = "gc-heartbeat"  # touched by the agent while it runs: 10 s without and the command is stopped
METRICS_NAME = "registry-metrics"  # "PID PORT" of the current registry's debug (metrics) port, "PID -" without one
DROPPED_NAME = "notifications-dropped"  # "ENDPOINT COUNT" per line: events old registries still held at their bound

# ---- the registry's environment and the signals ----------------------------------------------------------------

# In the environment of each registry berth-supervise starts: the signals it understands (an older supervisor
# dies of a signal it does not handle, so the agent sends none it has not seen marked).
HANDOVER_MARKER = b"BERTH_SUPERVISE_HANDOVER=1"  # HANDOVER_SIGNAL starts the successor of a draining registry (2.8)
GC_MARKER = b"BERTH_SUPERVISE_GC=1"  # GC_SIGNAL runs garbage-collect
SOCKET_MARKER = b"BERTH_SUPERVISE_SOCKET=1"  # HELD_SOCKET_SIGNAL replaces the registry on the held socket (3.x)

HANDOVER_SIGNAL = signal.SIGUSR1
GC_SIGNAL = signal.SIGUSR2
HELD_SOCKET_SIGNAL = signal.SIGHUP
# In the supervisor's command line (berth-supervise, or `python -m berth_supervise`): the agent signals a process
# only while it still is a supervisor (a pid in supervisor.pid may have been reused).
SUPERVISOR_WORD = b"supervise"


def markers(*, held_socket: bool) -> dict[str, str]:
    """The environment entries that mark a registry berth-supervise started (`held_socket`: on the socket it holds)."""
    marks = (HANDOVER_MARKER, GC_MARKER, SOCKET_MARKER) if held_socket else (HANDOVER_MARKER, GC_MARKER)
    return dict(mark.decode().split("=", 1) for mark in marks)


def split_addr(addr: str, what: str = "BERTH_LISTEN_ADDR") -> tuple[str, int]:
    """("host", port) of "host:port", ":port" or "[v6]:port" (host "": every address); ValueError naming `what`
    for anything else. The form of BERTH_LISTEN_ADDR and of the addresses the agent renders and is given: one
    parser, so both programs agree on what an address is."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{what} must be HOST:PORT or :PORT, not {addr!r}")
    return host.strip("[]"), int(port)


# ---- writing and reading ---------------------------------------------------------------------------------------


def _replace(path: Path, data: bytes, mode: int | None = None) -> None:
    """`path` replaced whole (the reader never sees half of it); OSError if it cannot be."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_bytes(data)
    if mode is not None:
        os.chmod(temp, mode)
    os.replace(temp, path)


def _put(path: Path, text: str) -> None:
    """berth-supervise's one-line file, replaced whole; quiet when the state dir cannot be written."""
    try:
        _replace(path, (text + "\n").encode())
    except OSError:
        pass


def _words(path: Path) -> list[str] | None:
    try:
        return path.read_text().split()
    except OSError:
        return None


def remove(path: Path) -> None:
    """A file gone, whether it was there or not."""
    try:
        path.unlink()
    except OSError:
        pass


# The handover file (beside config.yml, or BERTH_HANDOVER): the agent's, read by both.


def handover_path(config: Path) -> Path:
    return Path(config).parent / HANDOVER_NAME


def write_handover(path: Path, registries: Iterable[tuple[int, int]], *, quick: bool = False) -> None:
    """The agent's: the registries (pid, start ticks) that may be replaced while they drain, and `quick` (3.x: the
    old registry waits for no kept-alive client, only for its in-flight requests and notification queues).

    Written before the signal, so nothing but the signal stands between it and the successor. Not fsynced: it
    only matters while both processes run (a restart of the pod clears it)."""
    lines = "".join(f"{pid} {ticks}\n" for pid, ticks in sorted(registries))
    _replace(Path(path), (lines + (QUICK_WORD + "\n" if quick else "")).encode(), 0o644)


def read_handover(path: Path) -> tuple[set[tuple[int, int]], bool] | None:
    """(the registries it names, as (pid, start ticks), whether it says QUICK); None without a file."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    named = set()
    for line in lines:
        words = line.split()
        if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
            named.add((int(words[0]), int(words[1])))
    return named, QUICK_WORD in lines


def handover_names(path: Path, pid: int | None) -> tuple[bool, bool | None]:
    """berth-supervise's look: (the file names registry `pid`, it says QUICK); (False, None) without a registry
    or a file. A late or repeated signal, naming a registry that is no longer the current one, changes nothing."""
    found = read_handover(path) if pid is not None else None
    if found is None:
        return False, None
    named, quick = found
    return any(named_pid == pid for named_pid, _ticks in named), quick


# The supervisor's pid, the last exit, the registry's output: berth-supervise's, read by the agent.


def write_supervisor_pid(state: Path, pid: int) -> None:
    """At its start (OSError raised: the supervisor says once that it cannot write to its state dir)."""
    (Path(state) / SUPERVISOR_PID_NAME).write_text(f"{pid}\n")


def read_supervisor_pid(state: Path) -> int | None:
    """The pid a supervisor wrote at its start (it may have exited since)."""
    words = _words(Path(state) / SUPERVISOR_PID_NAME)
    return int(words[0]) if words and words[0].isdigit() else None


def record_exit(state: Path, pid: int, status: int, seconds: float) -> None:
    """A registry exited: "pid status seconds" in registry-exit, and what it said moved to registry-output.1 (the
    next start begins on an empty registry-output)."""
    state = Path(state)
    _put(state / EXIT_NAME, f"{pid} {status} {int(seconds)}")
    history = read_exit_history(state)[-(EXIT_HISTORY_LINES - 1):]
    seq = history[-1][0] + 1 if history else 1
    _put(state / EXIT_HISTORY_NAME, "\n".join(" ".join(map(str, record)) for record in
                                                [*history, (seq, pid, status, int(seconds))]))
    try:
        _replace(state / PREVIOUS_OUTPUT_NAME, (state / OUTPUT_NAME).read_bytes())
        os.truncate(state / OUTPUT_NAME, 0)
    except OSError:
        pass


def read_exit_history(state: Path) -> list[tuple[int, int, int, int]]:
    """(seq, pid, status, seconds it ran) of the last exits, oldest first; seq counts every exit the supervisor
    recorded in this state dir. Lines that do not parse are skipped."""
    try:
        lines = (Path(state) / EXIT_HISTORY_NAME).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        words = line.split()
        if len(words) == 4 and all(word.isdigit() for word in words):
            found.append((int(words[0]), int(words[1]), int(words[2]), int(words[3])))
    return found


def read_exit_line(state: Path) -> str:
    """The last registry exit as written, "pid status seconds"; "" when none."""
    try:
        return (Path(state) / EXIT_NAME).read_text().strip()
    except OSError:
        return ""


def parse_exit(line: str) -> tuple[int, int, int] | None:
    """(pid, status, seconds it ran) of an exit line; None for "" or anything else."""
    words = line.split()
    if len(words) != 3 or not all(word.isdigit() for word in words):
        return None
    return int(words[0]), int(words[1]), int(words[2])


# The current registry and its metrics port; the notification events dropped.


def write_current(state: Path, pid: int, port: int | None) -> None:
    """The registry serving now and its debug (metrics) port, "-" when it has none."""
    _put(Path(state) / METRICS_NAME, f"{pid} {'-' if port is None else port}")


def read_current(state: Path) -> tuple[int, int | None] | None:
    """(pid, metrics port or None) of the registry serving now; None while none is named (or unreadable)."""
    words = _words(Path(state) / METRICS_NAME)
    if not words or len(words) != 2 or not words[0].isdigit():
        return None
    pid, port = int(words[0]), words[1]
    if port == "-":
        return pid, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return pid, int(port)


def write_dropped(state: Path, counts: Mapping[str, int]) -> None:
    """Events dropped at the bound since the supervisor started, per notification endpoint."""
    _put(Path(state) / DROPPED_NAME, "\n".join(f"{name} {count}" for name, count in sorted(counts.items())))


def read_dropped(state: Path) -> dict[str, int]:
    try:
        lines = (Path(state) / DROPPED_NAME).read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        name, _, count = line.rpartition(" ")
        if name and count.isdigit():
            found[name] = int(count)
    return found


# Garbage collection: the agent's request and heartbeat, berth-supervise's answers.

GC_FLAGS = ("--dry-run", "--delete-untagged")
_GC_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def write_gc_request(state: Path, run_id: str, flags: Iterable[str]) -> None:
    """The agent's request, taken on GC_SIGNAL: "ID [--dry-run] [--delete-untagged]"."""
    _replace(Path(state) / GC_REQUEST_NAME, (" ".join([run_id, *flags]) + "\n").encode())


def parse_gc_request(raw: bytes) -> tuple[str, list[str], str]:
    """(id, flags, why refused): "" when the request is good; the id is "?" when it is not one. Compared word by
    word with the few allowed, never evaluated."""
    line, _, rest = raw.partition(b"\n")
    words = [word for word in line.decode(errors="replace").split(" ") if word]
    if not words or not _GC_ID.fullmatch(words[0]):
        return "?", [], "a bad request id"
    run_id, flags = words[0], words[1:]
    if rest:
        return run_id, [], "more than one line"
    for flag in flags:
        if flag not in GC_FLAGS:
            return run_id, [], "an unknown word"
    if len(set(flags)) != len(flags):
        return run_id, [], "a repeated flag"
    return run_id, [flag for flag in GC_FLAGS if flag in flags], ""


def beat(state: Path) -> None:
    """The agent's heartbeat while its garbage-collect runs."""
    (Path(state) / GC_HEARTBEAT_NAME).touch()


def last_beat(state: Path) -> float | None:
    """When the agent last beat (mtime), None if it never did."""
    try:
        return os.stat(Path(state) / GC_HEARTBEAT_NAME).st_mtime
    except OSError:
        return None


def write_gc_pid(state: Path, pid: int, run_id: str) -> None:
    """The command of request `run_id` runs as `pid` (written once it has exec'd)."""
    _put(Path(state) / GC_PID_NAME, f"{pid} {run_id}")


def read_gc_pid(state: Path) -> tuple[int, str] | None:
    words = _words(Path(state) / GC_PID_NAME)
    if not words or len(words) < 2 or not words[0].isdigit():
        return None
    return int(words[0]), words[1]


def write_gc_result(state: Path, run_id: str, status: int, *, refused: bool = False) -> None:
    """Request `run_id` ended with `status` (`refused`: never started, the request was not one it runs)."""
    _put(Path(state) / GC_RESULT_NAME, f"{run_id} {status}{' refused' if refused else ''}")


def read_gc_result(state: Path, run_id: str) -> tuple[int, bool] | None:
    """(exit status, refused) when gc-result answers `run_id`."""
    words = _words(Path(state) / GC_RESULT_NAME)
    if not words or len(words) < 2 or words[0] != run_id or not words[1].isdigit():
        return None
    return int(words[1]), words[2:] == ["refused"]


__all__ = [
    "CONFIG_NAME", "DEFAULT_CONFIG", "DROPPED_NAME", "EXIT_HISTORY_LINES", "EXIT_HISTORY_NAME", "EXIT_NAME", "GC_FLAGS",
    "GC_HEARTBEAT_NAME", "GC_MARKER", "GC_OUTPUT_NAME", "GC_PID_NAME", "GC_REQUEST_NAME", "GC_RESULT_NAME", "GC_SIGNAL",
    "HANDOVER_MARKER", "HANDOVER_NAME", "HANDOVER_SIGNAL", "HELD_SOCKET_SIGNAL", "METRICS_NAME", "OUTPUT_NAME",
    "PREVIOUS_OUTPUT_NAME", "QUICK_WORD", "S3_CREDENTIALS_NAME", "SOCKET_MARKER", "SUPERVISOR_PID_NAME",
    "SUPERVISOR_WORD", "beat", "handover_names", "handover_path", "last_beat", "markers", "parse_exit",
    "parse_gc_request", "read_current", "read_dropped", "read_exit_history", "read_exit_line", "read_gc_pid",
    "read_gc_result", "read_handover", "read_supervisor_pid", "record_exit", "remove", "split_addr", "write_current",
    "write_dropped", "write_gc_pid", "write_gc_request", "write_gc_result", "write_handover", "write_supervisor_pid",
]
