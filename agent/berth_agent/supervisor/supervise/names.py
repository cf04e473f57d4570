"""The files and environment markers berth-supervise shares with the agent: the one place both spell them.

Standard library only (the supervisor imports it; supervisor/files.py re-exports it for the agent).
"""

from __future__ import annotations

CONFIG_NAME = "config.yml"  # berth_api.pod.CONFIG_NAME (tests/agent/supervisor/test_files.py holds them in step)

# Beside config.yml.
HANDOVER_NAME = "handover"  # "pid start_ticks" of each registry the agent asks to replace
# Temporary S3 credentials (render/paths.py S3_CREDENTIALS_FILE, held in step by tests/agent/supervisor/test_files.py):
# named in each registry's AWS_SHARED_CREDENTIALS_FILE while it is there.
S3_CREDENTIALS_NAME = "s3/credentials"
QUICK_WORD = "quick"  # a line of the handover file: the old registry is bounded by its drainTimeout (3.x, issue 48)

# In the state dir.
SUPERVISOR_PID_NAME = "supervisor.pid"  # the supervisor's pid: a missing supervisor told from a quiet one
EXIT_NAME = "registry-exit"  # "pid status seconds-it-ran" of the last registry that exited
OUTPUT_NAME = "registry-output"  # the registry's stdout and stderr since its last start
PREVIOUS_OUTPUT_NAME = OUTPUT_NAME + ".1"  # ... and before it, copied when a registry exits
GC_REQUEST_NAME = "gc-request"  # the agent's "ID [--dry-run] [--delete-untagged]" line, taken on SIGUSR2
GC_PID_NAME = "gc.pid"  # "PID ID" while garbage-collect runs
GC_OUTPUT_NAME = "gc-output"  # what garbage-collect prints
GC_RESULT_NAME = "gc-result"  # "ID STATUS" once it ended
GC_HEARTBEAT_NAME = "gc-heartbeat"  # touched by the agent while it runs: 10 s without and the command is stopped
METRICS_NAME = "registry-metrics"  # "PID PORT" of the current registry's debug (metrics) port, "PID -" without one
DROPPED_NAME = "notifications-dropped"  # "ENDPOINT COUNT" per line: events old registries still held at their bound

# In the environment of each registry it starts: what its supervisor understands (an older one dies of a signal it
# does not handle, so the agent sends none it has not seen marked).
HANDOVER_MARKER = b"BERTH_SUPERVISE_HANDOVER=1"  # SIGUSR1 starts the successor of a draining registry (2.8)
GC_MARKER = b"BERTH_SUPERVISE_GC=1"  # SIGUSR2 runs garbage-collect
SOCKET_MARKER = b"BERTH_SUPERVISE_SOCKET=1"  # SIGHUP replaces the registry on the held socket (3.x)

__all__ = [
    "CONFIG_NAME", "DROPPED_NAME", "EXIT_NAME", "GC_HEARTBEAT_NAME", "GC_MARKER", "GC_OUTPUT_NAME", "GC_PID_NAME",
    "GC_REQUEST_NAME", "GC_RESULT_NAME", "HANDOVER_MARKER", "HANDOVER_NAME", "METRICS_NAME", "OUTPUT_NAME",
    "PREVIOUS_OUTPUT_NAME", "QUICK_WORD", "S3_CREDENTIALS_NAME", "SOCKET_MARKER", "SUPERVISOR_PID_NAME",
]
