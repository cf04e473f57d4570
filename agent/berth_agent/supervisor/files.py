"""Every file the agent and supervise.sh share, by name: the one place the agent spells them.

supervise.sh (a shell script) spells the same names; tests/agent/supervisor/test_files.py holds the two in step.
The config and the handover sit in the config dir (the registry container reads them); the rest sit in the
state dir (BERTH_STATE_DIR), which supervise.sh writes and the agent reads.
"""

from __future__ import annotations

from berth_api.pod import CONFIG_NAME, SUPERVISOR_NAME

# Beside config.yml.
HANDOVER_NAME = "handover"  # "pid start_ticks" of each registry that may be replaced while it drains (SIGUSR1)

# In the state dir.
SUPERVISOR_PID_NAME = "supervisor.pid"  # the script's pid: a missing supervisor told from a quiet one
EXIT_NAME = "registry-exit"  # "pid status seconds-it-ran" of the last registry that exited
OUTPUT_NAME = "registry-output"  # the registry's stdout and stderr since its last start
PREVIOUS_OUTPUT_NAME = OUTPUT_NAME + ".1"  # ... and before it, copied when a registry exits
GC_REQUEST_NAME = "gc-request"  # the agent's "ID [--dry-run] [--delete-untagged]" line, taken on SIGUSR2
GC_PID_NAME = "gc.pid"  # "PID ID" while garbage-collect runs
GC_OUTPUT_NAME = "gc-output"  # what garbage-collect prints
GC_RESULT_NAME = "gc-result"  # "ID STATUS" once it ended
GC_HEARTBEAT_NAME = "gc-heartbeat"  # touched by the agent while it runs: 10 s without and the command is stopped
METRICS_NAME = "registry-metrics"  # "PID PORT" of the current registry's debug (metrics) port, "PID -" without one

# In the environment of each registry the script starts: what the script understands (an older one dies of the
# signal it does not trap).
HANDOVER_MARKER = b"BERTH_SUPERVISE_HANDOVER=1"  # SIGUSR1 starts the successor of a draining registry
GC_MARKER = b"BERTH_SUPERVISE_GC=1"  # SIGUSR2 runs garbage-collect

__all__ = [
    "CONFIG_NAME", "EXIT_NAME", "GC_HEARTBEAT_NAME", "GC_MARKER", "GC_OUTPUT_NAME", "GC_PID_NAME", "GC_REQUEST_NAME",
    "GC_RESULT_NAME", "HANDOVER_MARKER", "HANDOVER_NAME", "METRICS_NAME", "OUTPUT_NAME", "PREVIOUS_OUTPUT_NAME",
    "SUPERVISOR_NAME", "SUPERVISOR_PID_NAME",
]
