"""The Service in front of the registry pods."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names
from .context import ClusterFacts
from .meta import object_meta


def port_name(reg: Registry) -> str:
    return "https" if reg.spec.http.tls is not None else "http"


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    name = port_name(reg)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(reg, names.service_name(reg), names.REGISTRY_COMPONENT),
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector_labels(reg),
            "ports": [
                {"name": name, "port": reg.spec.http.port, "targetPort": name, "protocol": "TCP", "appProtocol": name}
            ],
        },
    }

