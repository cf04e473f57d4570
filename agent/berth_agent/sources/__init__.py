"""Sources of change for the agent pipeline: mounted Secret dirs (mount_watch, over observer), the PVC (pvc),
the Registry from a file (registry_file) or the API (registry_api), and Secrets over the API (secret_api,
api_secrets), the API ones over one generic list-and-watch loop (kube_watch).

Every source is an object with a `name` (used for metrics and liveness) and `async def run(emit)`, which runs
until cancelled and reports what happened as `Change` values (change) through `emit`.
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "ApiSecrets": ".api_secrets",
    "Backoff": ".kube_watch",
    "Change": ".change",
    "Emit": ".change",
    "MountWatcher": ".mount_watch",
    "PvcProbe": ".pvc",
    "PvcState": ".pvc",
    "RegistryApiWatcher": ".registry_api",
    "RegistryFileWatcher": ".registry_file",
    "SecretApiWatcher": ".secret_api",
    "SingleObjectWatcher": ".kube_watch",
    "Source": ".change",
    "queue_emitter": ".change",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
