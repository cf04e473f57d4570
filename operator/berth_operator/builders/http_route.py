"""The HTTPRoute (gateway.networking.k8s.io/v1) of spec.gateway: every request on its hostnames to the registry's
Service. Built only when the cluster serves the Gateway API (build_all skips it otherwise, and engine/facts.py
reports MissingGatewayAPI: needed_by).

No timeouts are set: the standard channel's HTTPRoute timeouts are optional for implementations, and one that
does not support a value refuses the rule; the Gateway's own limits are in docs/guide/exposure.md instead.
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import service
from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import EXPOSURE_COMPONENT, object_meta, registry_name

API_VERSION = "gateway.networking.k8s.io/v1"
KIND = "HTTPRoute"


def name(reg: Registry) -> str:
    return registry_name(reg)


def _parent_ref(ref: Any) -> dict[str, Any]:
    parent: dict[str, Any] = {"group": ref.group, "kind": ref.kind, "name": ref.name}
    for key, value in (("namespace", ref.namespace), ("sectionName", ref.section_name), ("port", ref.port)):
        if value is not None:
            parent[key] = value
    return parent


def needed_by(reg: Registry) -> tuple[str, ...]:
    return ("spec.gateway",) if reg.spec.gateway is not None else ()


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    wanted = reg.spec.gateway
    if wanted is None:
        return None
    spec: dict[str, Any] = {
        "parentRefs": [_parent_ref(ref) for ref in wanted.parent_refs],
        "rules": [{
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [{"group": "", "kind": "Service", "name": service.name(reg),
                             "port": reg.spec.http.port}],
        }],
    }
    if wanted.hostnames:
        spec["hostnames"] = list(wanted.hostnames)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": object_meta(reg, name(reg), EXPOSURE_COMPONENT),
            "spec": spec}


BEHAVIOURS = (Behaviour(API_VERSION, KIND, builders=(build,), prune=name, needed_by=needed_by),)
