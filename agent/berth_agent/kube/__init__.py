"""Talking to the Kubernetes API, whatever the object: the agent's own small client on the standard library
(client: requests and watch streams; config: in-cluster, kubeconfig or a plain host), what every call shares
(api: the patch type, the Registry's path, describing a failed call without its body), and a Lease taken and
renewed by one agent at a time (lease).
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "ApiClient": ".client",
    "ApiError": ".client",
    "ConfigError": ".config",
    "KubeConfig": ".config",
    "LeaseError": ".lease",
    "MERGE_PATCH": ".api",
    "ReloadLease": ".lease",
    "WatchErrorEvent": ".api",
    "describe_api_error": ".api",
    "registry_path": ".api",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
