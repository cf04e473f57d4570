"""The handover protocol with berth-supervise: the agent names the registries that may be replaced while they
drain (the handover file beside config.yml) and sends their supervisor SIGUSR1, which starts the successor.

A supervisor without the handover marker in its registry's environment (an older supervisor) is never sent
SIGUSR1 (it would die of it): it starts the new registry when the old one exits, as before.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from .files import HANDOVER_NAME, QUICK_WORD
from .procfs import PROC, RegistryProcess, parent_pid, send_signal, takes_handover


def read_handover(config_path: Path, proc: Path = PROC) -> set[RegistryProcess]:
    """Registries handed over earlier that still drain (after an agent restart: never signal them again)."""
    try:
        lines = (config_path.parent / HANDOVER_NAME).read_text().splitlines()
    except OSError:
        return set()
    found = set()
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            process = RegistryProcess(int(parts[0]), int(parts[1]))
            if process.alive(proc):
                found.add(process)
    return found


def write_handover(config_path: Path, processes: set[RegistryProcess], *, quick: bool = False) -> None:
    """The handover file names the registries that may be replaced while they drain ("pid start_ticks" lines).
    `quick` (a line of its own, 3.x): the old registry waits for no kept-alive client (GC's read-only switch: a
    writable registry must not linger), only for its in-flight requests and notification queues.

    Written before the SIGTERM, so nothing but a signal stands between the old listener closing and the new
    registry starting. Not fsynced: it only matters while both processes run (a restart of the pod clears it).
    """
    lines = "".join(f"{p.pid} {p.start_ticks}\n" for p in sorted(processes, key=lambda p: p.pid))
    lines += QUICK_WORD + "\n" if quick else ""
    target = config_path.parent / HANDOVER_NAME
    temp = target.with_name(f".{HANDOVER_NAME}.{os.getpid()}.tmp")
    temp.write_text(lines)
    os.chmod(temp, 0o644)
    os.replace(temp, target)


def signal_handover(processes: list[RegistryProcess], *, proc: Path = PROC) -> Callable[[], None]:
    """SIGUSR1 to the supervisor of each process; returns the function that repeats it (the supervisor ignores
    a repeat once the successor runs; a supervisor that is not yet handling signals may have missed the first)."""
    supervisors = {parent_pid(p, proc) for p in processes if takes_handover(p, proc)} - {None}

    def nudge() -> None:
        for pid in supervisors:
            send_signal(pid, signal.SIGUSR1)

    nudge()
    return nudge


def hand_over(config_path: Path, processes: list[RegistryProcess], draining: set[RegistryProcess], *,
              proc: Path = PROC) -> Callable[[], None]:
    """Tell the supervisors of `processes` (SIGTERMed, no longer listening) to start their successors now."""
    draining.update(processes)
    write_handover(config_path, draining)
    return signal_handover(processes, proc=proc)


__all__ = ["hand_over", "read_handover", "signal_handover", "write_handover"]
