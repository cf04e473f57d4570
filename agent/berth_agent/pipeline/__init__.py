"""The agent's loop (docs/design.md §4.2): changes in, debounced, rendered under a time bound (guard),
applied, and reported on the Registry's status (report). The coordinator is the only place the layers below
meet.
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "ApiReporter": ".report",
    "BoundedThread": ".guard",
    "LogReporter": ".report",
    "Pipeline": ".coordinator",
    "PipelineSettings": ".coordinator",
    "Reporter": ".report",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
