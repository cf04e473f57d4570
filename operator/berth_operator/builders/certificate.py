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

from berth_api import Registry
from berth_api.exposure import IssuerRef

from . import names
from .checks import Reader
from .context import ClusterFacts
from .meta import object_meta
from .problems import Problem


def service_dns_names(reg: Registry) -> list[str]:
    """The names a client in the cluster reaches the registry's Service by."""
    service, namespace = names.service_name(reg), names.namespace(reg)
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _certificate(reg: Registry, name: str, issuer: IssuerRef, dns_names: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": object_meta(reg, name, names.CERTIFICATE_COMPONENT),
        "spec": {
            "secretName": name,
            "dnsNames": dns_names,
            "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
            # Berth's labels on the Secret too: the operator's caches hold Berth's Secrets, so its watch sees a
            # renewal and the Secret's arrival (key names only).
            "secretTemplate": {"labels": names.labels(reg, names.CERTIFICATE_COMPONENT)},
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
    return _certificate(reg, names.certificate_name(reg), tls.issuer_ref, list(tls.dns_names) or service_dns_names(reg))


def build_ingress(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    ingress = reg.spec.ingress
    if ingress is None or ingress.tls is None or ingress.tls.issuer_ref is None:
        return None
    return _certificate(reg, names.ingress_certificate_name(reg), ingress.tls.issuer_ref, list(ingress.hosts))


def waiting(reader: Reader, reg: Registry) -> list[Problem]:
    """A Certificate Berth made whose Secret cert-manager has not written yet (the pod cannot mount it before)."""
    namespace = names.namespace(reg)
    found = []
    tls, ingress = reg.spec.http.tls, reg.spec.ingress
    for where, wanted, name in (
            ("spec.http.tls.issuerRef", tls is not None and tls.issuer_ref is not None, names.certificate_name(reg)),
            ("spec.ingress.tls.issuerRef", ingress is not None and ingress.tls is not None
             and ingress.tls.issuer_ref is not None, names.ingress_certificate_name(reg))):
        if wanted and reader.get("v1", "Secret", namespace, name) is None:
            found.append(Problem("WaitingForCertificate",
                                 f"Certificate {name} ({where}): cert-manager has not written Secret {name} yet"))
    return found
