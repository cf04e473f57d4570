"""The registry container's supervisor and the agent's side of it (docs/design.md §4.2).

berth-supervise, the registry container's command (supervise/: standard library only, imports nothing else of
the agent), the one door the Applier takes (restarter: `Restarter`), the restart on the socket the supervisor
holds (held) and the overlapped one (overlapped), the supervisor's state files (state) and the names both spell
(files), the registry processes as /proc shows them (procfs), where the registry listens (endpoint), whether a
new one serves (probe), the handover file (handover), the registry's own words from its output (output), its
metrics on a stable port (metrics).
Open this folder to change how the registry is restarted.
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "CONFIG_NAME": ".files",
    "EXIT_NAME": ".files",
    "Endpoint": ".endpoint",
    "HANDOVER_NAME": ".files",
    "RegistryProcess": ".procfs",
    "RestartResult": ".overlapped",
    "Restarter": ".restarter",
    "SupervisorRestarter": ".restarter",
    "SUPERVISOR_PID_NAME": ".files",
    "ServingWait": ".probe",
    "answers": ".probe",
    "find_registry_processes": ".procfs",
    "first_error": ".output",
    "hand_over": ".handover",
    "restart_registry": ".overlapped",
    "scrub": ".output",
    "supervisor_pid": ".output",
    "wait_for_successor": ".probe",
    "wait_until_serving": ".probe",
    "with_registry_error": ".output",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
