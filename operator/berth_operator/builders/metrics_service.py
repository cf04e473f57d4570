"""The metrics Service: a headless Service of its own for each Registry's pods, with the agent's metrics port and
the registry's (proxied by the agent, stable across reloads), for a ServiceMonitor or any Prometheus to scrape.

Its own Service, not two more ports on the registry's: it publishes not-ready addresses, so a pod stays a scrape
target while it leaves its Service for a reload or while the registry fails its health check (when its metrics
matter most); headless, because each pod is scraped on its own, never through a balancer; and the client-facing
Service keeps exactly the registry's port.
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry
from berth_api.pod import AGENT_HEALTH_PORT, REGISTRY_METRICS_PORT

from .context import ClusterFacts
from .meta import METRICS_COMPONENT, object_meta, registry_name, selector_labels
from .ports import AGENT_METRICS_PORT_NAME, REGISTRY_METRICS_PORT_NAME


def name(reg: Registry) -> str:
    return f"{registry_name(reg)}-metrics"


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(reg, name(reg), METRICS_COMPONENT),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(reg),
            "ports": [
                {"name": AGENT_METRICS_PORT_NAME, "port": AGENT_HEALTH_PORT, "targetPort": AGENT_METRICS_PORT_NAME,
                 "protocol": "TCP"},
                {"name": REGISTRY_METRICS_PORT_NAME, "port": REGISTRY_METRICS_PORT,
                 "targetPort": REGISTRY_METRICS_PORT_NAME, "protocol": "TCP"},
            ],
        },
    }
