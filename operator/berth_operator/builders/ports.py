"""The registry pod's port names: its containers declare them, the Services, the Ingress and the ServiceMonitor
target them by name."""

from __future__ import annotations

from berth_api import Registry

# The agent serves the registry's own metrics on a port that stays the same across reloads (pod.py, DEBUG_PORTS).
REGISTRY_METRICS_PORT_NAME = "reg-metrics"  # a port name has at most 15 characters
AGENT_METRICS_PORT_NAME = "agent-health"  # the agent's own /metrics sit beside its probes


def port_name(reg: Registry) -> str:
    """The registry container's port, named after the scheme it serves."""
    return "https" if reg.spec.http.tls is not None else "http"
