"""Where the registry is reached from outside (status.externalAddress), from the spec's exposure (the Ingress,
the HTTPRoute, the Service's type) and the Service as seen: the builders of those objects know which address
each gives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth_api import Registry


def external_address(reg: Registry, service: Mapping[str, Any] | None) -> str | None:
    """Where the registry is reached from outside, as far as seen: the Ingress's first host (with https:// when
    the Ingress terminates TLS), the HTTPRoute's first hostname, the LoadBalancer's address (once its controller
    wrote one) and port, or NODE:<nodePort> (any node's address; the port as allocated)."""
    spec = reg.spec
    if spec.ingress is not None:
        return f"{'https' if spec.ingress.tls is not None else 'http'}://{spec.ingress.hosts[0]}"
    if spec.gateway is not None and spec.gateway.hostnames:
        return spec.gateway.hostnames[0]
    live = (service or {}).get("spec") or {}
    ports = live.get("ports") or [{}]
    if spec.service.type == "LoadBalancer" and live.get("type") == "LoadBalancer":
        for entry in ((service or {}).get("status") or {}).get("loadBalancer", {}).get("ingress") or ():
            address = entry.get("ip") or entry.get("hostname")
            if address:
                return f"{address}:{ports[0].get('port', spec.http.port)}"
    if spec.service.type in ("NodePort", "LoadBalancer") and ports[0].get("nodePort"):
        return f"NODE:{ports[0]['nodePort']}"
    return None
