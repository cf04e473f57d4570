"""The pod's notification outbox (docs/decisions/0002-a-notification-outbox-in-the-agent.md, docs/design.md §4.7): the
relay the registry posts to (relay), the log that keeps each event before the relay answers (store), the endpoints as
rendered (endpoints), one delivery per endpoint (delivery), and the service that runs them (service).
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "Outbox": ".service",
    "start_relay": ".relay",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
