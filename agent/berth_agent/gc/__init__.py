"""Garbage collection (docs/design.md §4.5): when a Registry is read-only for it (mode), what to do next
(decide, pure), running the command through berth-supervise (command) and reading its output (report),
every replica's acknowledgement (ack), the blob descriptor cache (cache), status and the GC Lease (api),
and the runner that ties them together (run).
"""

from __future__ import annotations

from ..core.exports import lazy_exports

_EXPORTS = {
    "GcAck": ".ack",
    "GcCommand": ".command",
    "GcHold": ".mode",
    "GcOutcome": ".command",
    "GcReadOnly": ".read_only",
    "GcRunner": ".run",
    "GcStatusApi": ".api",
    "read_only_for": ".mode",
    "with_read_only": ".mode",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
