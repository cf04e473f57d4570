"""The Service in front of the registry pods, shaped by spec.service (type, node port, annotations, labels, load
balancer class, external traffic policy). Nothing of spec.service reaches the Deployment.

Kubernetes changes a Service's type in place (ClusterIP, NodePort and LoadBalancer into each other: the API
server drops the node ports and the class a new type has no use for), but refuses to change or set
spec.loadBalancerClass on a Service that is a LoadBalancer already. must_replace() says when: the apply layer
then deletes the Service and creates it at once (docs/decisions/0031-exposure.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth_api import Registry

from . import metrics_service
from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import REGISTRY_COMPONENT, object_meta, registry_name, selector_labels
from .ports import port_name


def name(reg: Registry) -> str:
    return registry_name(reg)


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    wanted = reg.spec.service
    port_named = port_name(reg)
    meta = object_meta(reg, name(reg), REGISTRY_COMPONENT)
    meta["labels"] = {**wanted.labels, **meta["labels"]}  # Berth's own labels win: the caches and prune use them
    if wanted.annotations:
        meta["annotations"] = dict(wanted.annotations)
    port: dict[str, Any] = {"name": port_named, "port": reg.spec.http.port, "targetPort": port_named,
                            "protocol": "TCP", "appProtocol": port_named}
    if wanted.node_port is not None:
        port["nodePort"] = wanted.node_port
    spec: dict[str, Any] = {"type": wanted.type, "selector": selector_labels(reg), "ports": [port]}
    if wanted.load_balancer_class is not None:
        spec["loadBalancerClass"] = wanted.load_balancer_class
    if wanted.external_traffic_policy is not None:
        spec["externalTrafficPolicy"] = wanted.external_traffic_policy
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def must_replace(live: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether Kubernetes refuses to make the live Service the wanted one in place: a LoadBalancer staying one
    with another spec.loadBalancerClass (immutable once the Service is a LoadBalancer)."""
    live_spec, wanted_spec = live.get("spec") or {}, wanted.get("spec") or {}
    return (live_spec.get("type") == "LoadBalancer" and wanted_spec.get("type") == "LoadBalancer"
            and live_spec.get("loadBalancerClass") != wanted_spec.get("loadBalancerClass"))


# The metrics Service (metrics_service.py) is a Service too: built after the registry's, never replaced.
BEHAVIOURS = (Behaviour("v1", "Service", builders=(build, metrics_service.build), must_replace=must_replace),)
