"""The ServiceMonitor (monitoring.coreos.com/v1) of a Registry that asks for one (spec.monitoring.serviceMonitor),
built only when the prometheus-operator CRD is installed (build_all skips it otherwise, and engine/facts.py
reports MissingMonitoringCRD: needed_by).

A ServiceMonitor, not a PodMonitor: the metrics Service (metrics_service) exists anyway, so that any Prometheus
can find the pods by it, and it publishes not-ready pods (a pod out of its Service for a reload, or failing its
health check, stays a target). Prometheus Operator's defaults select ServiceMonitors (kube-prometheus-stack's
serviceMonitorSelector), as the twuni chart's users expect. Two endpoints: the agent's own metrics and the
registry's, which the agent serves stable across reloads. The labels are the user's, for the Prometheus's
serviceMonitorSelector, on top of Berth's own.
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry
from berth_api.pod_template import COMPONENT_LABEL

from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import METRICS_COMPONENT, namespace, object_meta, registry_name, selector_labels
from .ports import AGENT_METRICS_PORT_NAME, REGISTRY_METRICS_PORT_NAME

API_VERSION = "monitoring.coreos.com/v1"
KIND = "ServiceMonitor"
CRD_NAME = "servicemonitors.monitoring.coreos.com"


def name(reg: Registry) -> str:
    return registry_name(reg)


def needed_by(reg: Registry) -> tuple[str, ...]:
    return ("spec.monitoring.serviceMonitor",) if reg.spec.monitoring.service_monitor is not None else ()


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    wanted = reg.spec.monitoring.service_monitor
    if wanted is None:
        return None
    meta = object_meta(reg, name(reg), METRICS_COMPONENT)
    meta["labels"] = {**wanted.labels, **meta["labels"]}  # Berth's own labels win: the caches and prune use them
    # Every series gets `registry` (the metrics Service's instance label), which the alerts and the dashboard of
    # deploy/monitoring group by; `namespace` and `pod` come from the prometheus-operator's own target labels.
    endpoint = {"path": "/metrics", "scheme": "http", "interval": wanted.interval, "relabelings": [
        {"sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_instance"], "targetLabel": "registry",
         "action": "replace"}]}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": {**selector_labels(reg), COMPONENT_LABEL: METRICS_COMPONENT}},
            "namespaceSelector": {"matchNames": [namespace(reg)]},
            "endpoints": [{"port": AGENT_METRICS_PORT_NAME, **endpoint},
                          {"port": REGISTRY_METRICS_PORT_NAME, **endpoint}],
        },
    }


BEHAVIOURS = (Behaviour(API_VERSION, KIND, builders=(build,), prune=name, needed_by=needed_by),)
