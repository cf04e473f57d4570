"""The agent's side of supervise.sh, the registry container's command (docs/design.md §4.2).

The one list of the files both share (files), the script itself as package data (supervise.sh, script),
the registry processes as /proc shows them (procfs), where the registry listens (endpoint), whether a new
one serves (probe), the handover protocol (handover), the overlapped restart (restart), and the registry's
own words from its output (output). Open this folder to change how the registry is restarted.
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "CONFIG_NAME": ".files",
    "EXIT_NAME": ".files",
    "Endpoint": ".endpoint",
    "HANDOVER_NAME": ".files",
    "RegistryProcess": ".procfs",
    "RestartResult": ".restart",
    "SUPERVISOR_NAME": ".files",
    "SUPERVISOR_PID_NAME": ".files",
    "answers": ".probe",
    "find_registry_processes": ".procfs",
    "first_error": ".output",
    "hand_over": ".handover",
    "install_supervisor": ".script",
    "restart_registry": ".restart",
    "scrub": ".output",
    "supervisor_pid": ".output",
    "supervisor_script": ".script",
    "wait_until_serving": ".probe",
    "with_registry_error": ".output",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
