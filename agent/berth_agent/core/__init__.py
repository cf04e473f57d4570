"""The ground floor: what every layer of the agent may use and that uses nothing of the agent.

Errors that name their source (errors), the debounce clock (clock), liveness and the health server (health),
the Prometheus series (metrics), JSON logs (logs), atomic file writes (write), and the lazy re-export of
each package's public names (exports).
"""

from __future__ import annotations

from .exports import lazy_exports

_EXPORTS = {
    "Clock": ".clock",
    "Health": ".health",
    "InputError": ".errors",
    "LoopClock": ".clock",
    "PreflightError": ".errors",
    "describe_internal_error": ".errors",
    "lazy_exports": ".exports",
    "local_http_secret": ".write",
    "remove_stale": ".write",
    "setup_json_logging": ".logs",
    "start_health_server": ".health",
    "write_atomic": ".write",
    "write_tree": ".write",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
