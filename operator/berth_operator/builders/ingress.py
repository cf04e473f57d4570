"""The Ingress (networking.k8s.io/v1) of spec.ingress: every host routed whole to the registry's Service, TLS
from the user's Secret or from the Certificate Berth makes (certificate.build_ingress).

A registry behind an ingress needs uploads to pass: layers are gigabytes, sent in one request or in chunks, and a
push can wait minutes on storage. ingress-nginx limits request bodies to 1 MiB, buffers them, and times out
after 60 s by default; its annotations below lift that. They are set on every Ingress (another controller ignores
annotations of ingress-nginx, so they are safe anywhere) and the user's own annotations win.
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import certificate, service
from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import EXPOSURE_COMPONENT, object_meta, registry_name
from .ports import port_name

NGINX = "nginx.ingress.kubernetes.io/"
UPLOAD_ANNOTATIONS = {
    f"{NGINX}proxy-body-size": "0",  # no limit: a layer is as large as it is
    f"{NGINX}proxy-request-buffering": "off",  # stream uploads to the registry, not to the controller's disk
    f"{NGINX}proxy-read-timeout": "600",
    f"{NGINX}proxy-send-timeout": "600",
}
HTTPS_BACKEND = {f"{NGINX}backend-protocol": "HTTPS"}  # the registry serves TLS itself (spec.http.tls)


def name(reg: Registry) -> str:
    return registry_name(reg)


def tls_secret_name(reg: Registry) -> str | None:
    """The Secret the Ingress terminates TLS with: spec.ingress.tls.secretName, or its Certificate's; None: no TLS."""
    ingress = reg.spec.ingress
    if ingress is None or ingress.tls is None:
        return None
    return ingress.tls.secret_name if ingress.tls.secret_name is not None else certificate.ingress_name(reg)


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    wanted = reg.spec.ingress
    if wanted is None:
        return None
    meta = object_meta(reg, name(reg), EXPOSURE_COMPONENT)
    backend_tls = HTTPS_BACKEND if reg.spec.http.tls is not None else {}
    meta["annotations"] = {**UPLOAD_ANNOTATIONS, **backend_tls, **wanted.annotations}
    backend = {"service": {"name": service.name(reg), "port": {"name": port_name(reg)}}}
    spec: dict[str, Any] = {"rules": [
        {"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
        for host in wanted.hosts]}
    if wanted.class_name is not None:
        spec["ingressClassName"] = wanted.class_name
    secret = tls_secret_name(reg)
    if secret is not None:
        spec["tls"] = [{"hosts": list(wanted.hosts), "secretName": secret}]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": spec}


BEHAVIOURS = (Behaviour("networking.k8s.io/v1", "Ingress", builders=(build,), prune=name),)
