"""spec.monitoring: a prometheus-operator ServiceMonitor for the Registry's pods (docs/design.md §4.8).

Read by the operator only (the agent renders nothing from it). The ServiceMonitor selects the Registry's metrics
Service (`<registry>-metrics`) and scrapes both its ports: the agent's own metrics and the registry's, which the
agent serves stable across reloads.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from .types import ApiModel, Duration

# Kubernetes label syntax (an optional DNS-subdomain prefix, a name of at most 63; values at most 63).
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


class ServiceMonitorSpec(ApiModel):
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels on the ServiceMonitor, for the Prometheus's serviceMonitorSelector (e.g. release: "
        "kube-prometheus-stack).")
    interval: Duration = Field("30s", description="Scrape interval of both endpoints.")

    @field_validator("labels")
    @classmethod
    def _label_syntax(cls, labels: dict[str, str]) -> dict[str, str]:
        if len(labels) > 32:
            raise ValueError("at most 32 labels")
        for key, value in labels.items():
            if len(key) > 316 or not _LABEL_KEY.match(key):
                raise ValueError(f"label key {key[:80]!r} is not a Kubernetes label key")
            if not _LABEL_VALUE.match(value):
                raise ValueError(f"the value of label {key!r} is not a Kubernetes label value")
        return labels


class Monitoring(ApiModel):
    service_monitor: ServiceMonitorSpec | None = Field(
        None, alias="serviceMonitor",
        description="Create a ServiceMonitor (monitoring.coreos.com/v1) for the registry's and the agent's metrics. "
        "Needs the prometheus-operator CRDs: without them the Registry is Degraded with reason "
        "MissingMonitoringCRD and nothing else changes.")


__all__ = ["Monitoring", "ServiceMonitorSpec"]
