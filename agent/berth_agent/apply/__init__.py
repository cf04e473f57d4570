"""Putting a rendered config into service (docs/design.md §4.2): the applier writes it and restarts the
registry (applier), after pre-flight checks (preflight, preflight_net, preflight_tls, preflight_token,
preflight_proxy, preflight_azure, preflight_gcs, their one HTTP request in preflight_http, redis_wire), keeps the
last config that served (last_good), takes its turn among replicas (turns), and watches the registry it
started (registry_watch).
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "Applier": ".applier",
    "Outcome": ".applier",
    "PreflightWarning": ".preflight",
    "RegistryWatch": ".registry_watch",
    "ReplicaTurn": ".turns",
    "check_config": ".preflight",
    "check_render": ".preflight",
    "load_good": ".last_good",
    "save_good": ".last_good",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
