"""cert-manager Certificates (cert-manager.io/v1): one for the registry's own HTTPS (spec.http.tls.issuerRef,
Secret <registry>-tls, mounted by the pod as any TLS Secret) and one for the Ingress (spec.ingress.tls.issuerRef,
Secret <registry>-ingress-tls). Built only when the cluster serves cert-manager's API (build_all skips
them otherwise, and engine/facts.py reports MissingCertManager: needed_by).

Berth makes the Certificate rather than annotating the Ingress for cert-manager's ingress-shim: one way for both
uses (the registry's own TLS has no Ingress to annotate), the Certificate's name and Secret are Berth's and
pruned with the field, and it works where ingress-shim is turned off. cert-manager renews by rewriting the
Secret in place; the agent applies a rotated Secret hot, so a renewal restarts no pod. Until cert-manager has
written the Secret, the pod cannot mount it (waiting).
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry, server
from berth_api.exposure import IssuerRef

from . import service
from .behaviour import Behaviour
from .checks import Checks, Problem, Reader
from .context import ClusterFacts
from .meta import CERTIFICATE_COMPONENT, labels, namespace, object_meta, registry_name

API_VERSION = "cert-manager.io/v1"
KIND = "Certificate"


def name(reg: Registry) -> str:
    """The Certificate of spec.http.tls.issuerRef; cert-manager writes its Secret under the same name (the
    agent's messages name it too: berth_api.server.certificate_name)."""
    return server.certificate_name(registry_name(reg))


def ingress_name(reg: Registry) -> str:
    """The Certificate of spec.ingress.tls.issuerRef, and its Secret (the Ingress's tls secretName)."""
    return f"{registry_name(reg)}-ingress-tls"


def names(reg: Registry) -> tuple[str, ...]:
    """Both Certificates a Registry may have (prune)."""
    return name(reg), ingress_name(reg)


def tls_secret_name(reg: Registry) -> str | None:
    """The Secret the registry serves HTTPS with: spec.http.tls.secretName, or its Certificate's; None: HTTP."""
    tls = reg.spec.http.tls
    if tls is None:
        return None
    return tls.secret_name if tls.secret_name is not None else name(reg)


def service_dns_names(reg: Registry) -> list[str]:
    """The names a client in the cluster reaches the registry's Service by."""
    host, ns = service.name(reg), namespace(reg)
    return [host, f"{host}.{ns}", f"{host}.{ns}.svc", f"{host}.{ns}.svc.cluster.local"]


def _certificate(reg: Registry, named: str, issuer: IssuerRef, dns_names: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": object_meta(reg, named, CERTIFICATE_COMPONENT),
        "spec": {
            "secretName": named,
            "dnsNames": dns_names,
            "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
            # Berth's labels on the Secret too: the operator's caches hold Berth's Secrets, so its watch sees a
            # renewal and the Secret's arrival (key names only).
            "secretTemplate": {"labels": labels(reg, CERTIFICATE_COMPONENT)},
        },
    }


def needed_by(reg: Registry) -> tuple[str, ...]:
    """The issuerRefs that need cert-manager's API."""
    ingress = reg.spec.ingress
    return tuple(where for where, tls in (("spec.http.tls.issuerRef", reg.spec.http.tls),
                                          ("spec.ingress.tls.issuerRef", ingress.tls if ingress else None))
                 if tls is not None and tls.issuer_ref is not None)


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    tls = reg.spec.http.tls
    if tls is None or tls.issuer_ref is None:
        return None
    return _certificate(reg, name(reg), tls.issuer_ref, list(tls.dns_names) or service_dns_names(reg))


def build_ingress(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    ingress = reg.spec.ingress
    if ingress is None or ingress.tls is None or ingress.tls.issuer_ref is None:
        return None
    return _certificate(reg, ingress_name(reg), ingress.tls.issuer_ref, list(ingress.hosts))


def waiting(reader: Reader, reg: Registry) -> list[Problem]:
    """A Certificate Berth made whose Secret cert-manager has not written yet (the pod cannot mount it before)."""
    found = []
    tls, ingress = reg.spec.http.tls, reg.spec.ingress
    for where, wanted, named in (
            ("spec.http.tls.issuerRef", tls is not None and tls.issuer_ref is not None, name(reg)),
            ("spec.ingress.tls.issuerRef", ingress is not None and ingress.tls is not None
             and ingress.tls.issuer_ref is not None, ingress_name(reg))):
        if wanted and reader.get("v1", "Secret", namespace(reg), named) is None:
            found.append(Problem("WaitingForCertificate",
                                 f"Certificate {named} ({where}): cert-manager has not written Secret {named} yet"))
    return found


# prune names both Certificates a Registry may have.
BEHAVIOURS = (Behaviour(API_VERSION, KIND, builders=(build, build_ingress), prune=names, needed_by=needed_by,
                        checks=Checks(waiting=waiting)),)
