"""Talking to the Kubernetes API, whatever the object: describing a failed call without its body (api), a
Lease taken and renewed by one agent at a time (lease), and loading the official client lazily (lazy).
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "LeaseError": ".lease",
    "MERGE_PATCH": ".api",
    "ReloadLease": ".lease",
    "WatchErrorEvent": ".api",
    "describe_api_error": ".api",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
