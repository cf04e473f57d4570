"""The supervisor's state as its files say, read in one place (through berth_supervise.protocol).

The supervisor (berth-supervise) keeps its pid, the last registry exit, the current registry and the notification
events dropped in the state dir (BERTH_STATE_DIR); the Applier, the registry watch, the garbage-collect command
and the held-socket restart read them through here, and the registry's own output through registry_output.py.
"""

from __future__ import annotations

from pathlib import Path

from berth_supervise import protocol


def supervisor_pid(state_dir: Path) -> int | None:
    """The pid the supervisor wrote at its start, if that process still runs a supervisor (protocol.SUPERVISOR_WORD
    in its command line: berth-supervise, or `python -m berth_supervise`)."""
    pid = protocol.read_supervisor_pid(Path(state_dir))
    if pid is None:
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError, IndexError):
        return None
    if protocol.SUPERVISOR_WORD not in cmdline or stat[stat.rindex(")") + 2] in "ZX":
        return None
    return pid


def supervisor_started(state_dir: Path) -> bool:
    """Whether a supervisor ever wrote its pid (in a pod: the registry container has started)."""
    return (Path(state_dir) / protocol.SUPERVISOR_PID_NAME).exists()


def supervisor_running(state_dir: Path) -> bool:
    """Whether the supervisor that wrote its pid still runs (False also when none ever started)."""
    return supervisor_pid(state_dir) is not None


def supervisor_gone(state_dir: Path) -> bool:
    """A supervisor started once and is gone: nothing would start a registry."""
    return supervisor_started(state_dir) and not supervisor_running(state_dir)


def exit_line(state_dir: Path) -> str:
    """The last registry exit as the supervisor wrote it, "pid status seconds-it-ran"; "" when none."""
    return protocol.read_exit_line(Path(state_dir))


def exit_history(state_dir: Path) -> tuple[tuple[int, int, int, int], ...]:
    """(seq, pid, status, seconds it ran) of the supervisor's last exits, oldest first (protocol.read_exit_history)."""
    return tuple(protocol.read_exit_history(Path(state_dir)))


def last_exit(state_dir: Path) -> tuple[int, int, int] | None:
    """(pid, status, seconds it ran) of the last registry exit; None when none."""
    return protocol.parse_exit(exit_line(state_dir))


def dropped_events(state_dir: Path) -> dict[str, int]:
    """Notification events dropped at the bound so far, per endpoint (counted since the supervisor started)."""
    return protocol.read_dropped(Path(state_dir))


def current_pid(state_dir: Path) -> int | None:
    """The registry the supervisor names current (registry-metrics), if any."""
    current = protocol.read_current(Path(state_dir))
    return current[0] if current is not None else None


__all__ = ["current_pid", "dropped_events", "exit_history", "exit_line", "last_exit", "supervisor_gone",
           "supervisor_pid", "supervisor_running", "supervisor_started"]
