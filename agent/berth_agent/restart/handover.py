"""The agent's handover request: it names the registries that may be replaced while they drain (the handover file
beside config.yml, protocol.write_handover) and sends their supervisor HANDOVER_SIGNAL (SIGUSR1), which starts the
successor.

A supervisor without the handover marker in its registry's environment (an older supervisor) is never sent the
signal (it would die of it): it starts the new registry when the old one exits, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from berth_supervise import protocol

from .procfs import PROC, RegistryProcess, parent_pid, send_signal, takes_handover


def still_draining(config_path: Path, proc: Path = PROC) -> set[RegistryProcess]:
    """Registries handed over earlier that still drain (after an agent restart: never signal them again)."""
    found = protocol.read_handover(protocol.handover_path(config_path))
    named = found[0] if found is not None else set()
    return {process for process in (RegistryProcess(pid, ticks) for pid, ticks in named) if process.alive(proc)}


def request_handover(config_path: Path, processes: set[RegistryProcess], *, quick: bool = False) -> None:
    """The handover file names the registries that may be replaced while they drain. `quick` (3.x): the old
    registry waits for no kept-alive client (GC's read-only switch: a writable registry must not linger), only for
    its in-flight requests and notification queues. Written before the SIGTERM, so nothing but a signal stands
    between the old listener closing and the new registry starting."""
    protocol.write_handover(protocol.handover_path(config_path), ((p.pid, p.start_ticks) for p in processes),
                            quick=quick)


def signal_handover(processes: list[RegistryProcess], *, proc: Path = PROC) -> Callable[[], None]:
    """HANDOVER_SIGNAL to the supervisor of each process; returns the function that repeats it (the supervisor
    ignores a repeat once the successor runs; a supervisor that is not yet handling signals may have missed the
    first)."""
    supervisors = {parent_pid(p, proc) for p in processes if takes_handover(p, proc)} - {None}

    def nudge() -> None:
        for pid in supervisors:
            send_signal(pid, protocol.HANDOVER_SIGNAL)

    nudge()
    return nudge


def hand_over(config_path: Path, processes: list[RegistryProcess], draining: set[RegistryProcess], *,
              proc: Path = PROC) -> Callable[[], None]:
    """Tell the supervisors of `processes` (SIGTERMed, no longer listening) to start their successors now."""
    draining.update(processes)
    request_handover(config_path, draining)
    return signal_handover(processes, proc=proc)


__all__ = ["hand_over", "request_handover", "signal_handover", "still_draining"]
