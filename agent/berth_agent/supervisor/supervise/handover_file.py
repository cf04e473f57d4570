"""The handover file the agent writes before its signal: the pid of the registry to replace, and the word QUICK
when the old registry must be gone within its drainTimeout (a credential retired, or GC's read-only switch). A
late or repeated signal, naming a registry that is no longer the current one, changes nothing."""

from __future__ import annotations

from pathlib import Path

from .names import QUICK_WORD


def read_handover(path: Path, current_pid: int | None) -> tuple[bool, bool | None]:
    """(it names `current_pid`, it says QUICK); (False, None) when there is no current registry or no file."""
    if current_pid is None:
        return False, None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return False, None
    return any(line.split()[:1] == [str(current_pid)] for line in lines), QUICK_WORD in lines


__all__ = ["read_handover"]
