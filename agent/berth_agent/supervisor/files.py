"""Every file the agent and the supervisor share, by name: the one place the agent spells them.

berth-supervise spells them in supervise/names.py (imported here: the supervisor imports nothing of the agent);
tests/agent/supervisor/test_files.py holds its CONFIG_NAME in step with the pod contract's.
The config and the handover sit in the config dir (the registry container reads them); the rest sit in the
state dir (BERTH_STATE_DIR), which berth-supervise writes and the agent reads.
"""

from __future__ import annotations

from berth_api.pod import CONFIG_NAME

# Spelled once, in supervise/names.py (berth-supervise imports it and nothing heavier).
from .supervise.names import (  # noqa: E402
    DROPPED_NAME,
    EXIT_NAME,
    GC_HEARTBEAT_NAME,
    GC_MARKER,
    GC_OUTPUT_NAME,
    GC_PID_NAME,
    GC_REQUEST_NAME,
    GC_RESULT_NAME,
    HANDOVER_MARKER,
    HANDOVER_NAME,
    METRICS_NAME,
    OUTPUT_NAME,
    PREVIOUS_OUTPUT_NAME,
    QUICK_WORD,
    SOCKET_MARKER,
    SUPERVISOR_PID_NAME,
)

__all__ = [
    "CONFIG_NAME", "DROPPED_NAME", "EXIT_NAME", "GC_HEARTBEAT_NAME", "GC_MARKER", "GC_OUTPUT_NAME", "GC_PID_NAME",
    "GC_REQUEST_NAME", "GC_RESULT_NAME", "HANDOVER_MARKER", "HANDOVER_NAME", "METRICS_NAME", "OUTPUT_NAME",
    "PREVIOUS_OUTPUT_NAME", "QUICK_WORD", "SOCKET_MARKER", "SUPERVISOR_PID_NAME",
]
