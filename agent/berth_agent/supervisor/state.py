"""The supervisor's state files, read in one place (the agent's side of supervise/names.py).

The supervisor (berth-supervise) keeps its pid, the last registry exit and the current
registry in the state dir (BERTH_STATE_DIR); the Applier, the registry watch and the held-socket restart read
them through here, and the registry's own output through output.py.
"""

from __future__ import annotations

from pathlib import Path

from .output import supervisor_pid
from .supervise.names import DROPPED_NAME, EXIT_NAME, METRICS_NAME, SUPERVISOR_PID_NAME


def supervisor_started(state_dir: Path) -> bool:
    """Whether a supervisor ever wrote its pid (in a pod: the registry container has started)."""
    return (Path(state_dir) / SUPERVISOR_PID_NAME).exists()


def supervisor_running(state_dir: Path) -> bool:
    """Whether the supervisor that wrote its pid still runs (False also when none ever started)."""
    return supervisor_pid(Path(state_dir)) is not None


def supervisor_gone(state_dir: Path) -> bool:
    """A supervisor started once and is gone: nothing would start a registry."""
    return supervisor_started(state_dir) and not supervisor_running(state_dir)


def exit_line(state_dir: Path) -> str:
    """The last registry exit, "pid status seconds-it-ran"; "" when none."""
    try:
        return (Path(state_dir) / EXIT_NAME).read_text().strip()
    except OSError:
        return ""


def dropped_events(state_dir: Path) -> dict[str, int]:
    """Notification events dropped at the bound so far, per endpoint (notifications-dropped: "NAME COUNT" lines,
    counted since the supervisor started)."""
    try:
        lines = (Path(state_dir) / DROPPED_NAME).read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        name, _, count = line.rpartition(" ")
        if name and count.isdigit():
            found[name] = int(count)
    return found


def current_pid(state_dir: Path) -> int | None:
    """The registry the supervisor names current (registry-metrics: "PID PORT" or "PID -"), if any."""
    try:
        return int((Path(state_dir) / METRICS_NAME).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


__all__ = ["current_pid", "dropped_events", "exit_line", "supervisor_gone", "supervisor_running", "supervisor_started"]
