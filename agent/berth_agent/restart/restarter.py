"""The one door from the agent to the registry container's processes: a Restarter (docs/design.md §4.3).

`Restarter` is what the Applier takes. `SupervisorRestarter` looks at the registries running now and picks the
way their supervisor restarts them: on the socket it holds (Distribution 3 under berth-supervise:
held_socket_restart.py, no moment without a listener) or overlapped (2.8, or any supervisor without a held socket:
overlapped_restart.py, the old listener closes, then the successor binds).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from .endpoint import Endpoint
from .held_socket_restart import on_held_socket, replace_on_held_socket
from .overlapped_restart import RestartResult, restart_registry
from .procfs import PROC, RegistryProcess, find_registry_processes


class Restarter(Protocol):
    def restart(self, endpoint: Endpoint, *, timeout: float, stop: threading.Event | None = None,
                draining: set[RegistryProcess] | None = None,
                running: list[RegistryProcess] | None = None, quick: bool = False) -> RestartResult:
        """Replace the registry serving the config by a new one on the config as it is now; wait until it
        answers (up to timeout). `draining`: registries handed over earlier, never signalled again. `quick`:
        the old one waits for no kept-alive client (GC's read-only switch)."""
        ...

    def holds_socket(self, running: list[RegistryProcess] | None = None) -> bool:
        """Whether a restart now keeps the socket listening throughout (then a replica need not leave its
        Service to restart)."""
        ...


class SupervisorRestarter:
    def __init__(self, config_path: Path, state_dir: Path, *, proc: Path = PROC) -> None:
        self.config_path, self.state_dir, self.proc = Path(config_path), Path(state_dir), proc

    def _running(self, draining: set[RegistryProcess]) -> list[RegistryProcess]:
        return [p for p in find_registry_processes(self.config_path, proc=self.proc)
                if p not in draining and p.alive(self.proc)]

    def holds_socket(self, running: list[RegistryProcess] | None = None) -> bool:
        found = running if running is not None else self._running(set())
        return bool(found) and all(on_held_socket(p, self.proc) for p in found)

    def restart(self, endpoint: Endpoint, *, timeout: float, stop: threading.Event | None = None,
                draining: set[RegistryProcess] | None = None,
                running: list[RegistryProcess] | None = None, quick: bool = False) -> RestartResult:
        draining = draining if draining is not None else set()
        for process in [p for p in draining if not p.alive(self.proc)]:
            draining.discard(process)
        old = [p for p in (running or []) if p not in draining and p.alive(self.proc)]
        if not old or len(old) < len(running or []):
            # Scanned before config.yml was written: a registry that the supervisor started meanwhile (it came
            # back after a kill -9, or restarted a crashed one) read the config before the write, and would pass
            # for the new one. Looked for again now, it is replaced like any other: whatever starts after this
            # scan reads the config as written.
            old = self._running(draining)
        if self.holds_socket(old):
            return replace_on_held_socket(self.config_path, self.state_dir, endpoint, old, timeout=timeout,
                                          draining=draining, proc=self.proc, stop=stop, quick=quick)
        return restart_registry(self.config_path, endpoint, timeout=timeout, proc=self.proc, stop=stop,
                                draining=draining, running=old)


__all__ = ["Restarter", "SupervisorRestarter"]
