"""The agent's side of the registry container: restarting the registry through berth-supervise (docs/design.md §4.3).

The one door the Applier takes (restarter: `Restarter`), the restart on the socket the supervisor holds
(held_socket_restart) and the overlapped one (overlapped_restart), the handover request both start with
(handover), the garbage-collect the supervisor runs for the agent (supervised_gc), the supervisor's state as its
files say (supervisor_state), the registry's own words from its output (registry_output), its metrics on a stable
port (metrics_proxy), the registry processes as /proc shows them (procfs), where the registry listens (endpoint)
and whether a new one serves (probe).
Every file, marker and signal shared with berth-supervise is berth_supervise.protocol's: the one module of that
program the agent imports.
Open this folder to change how the agent restarts the registry.
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "Endpoint": ".endpoint",
    "RegistryProcess": ".procfs",
    "RestartResult": ".overlapped_restart",
    "Restarter": ".restarter",
    "SupervisorRestarter": ".restarter",
    "ServingWait": ".probe",
    "answers": ".probe",
    "find_registry_processes": ".procfs",
    "first_error": ".registry_output",
    "hand_over": ".handover",
    "restart_registry": ".overlapped_restart",
    "scrub": ".registry_output",
    "supervisor_pid": ".supervisor_state",
    "wait_for_successor": ".probe",
    "wait_until_serving": ".probe",
    "with_registry_error": ".registry_output",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
