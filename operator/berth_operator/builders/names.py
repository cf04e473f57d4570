"""Deterministic names, labels and selectors of everything the operator makes for one Registry."""

from __future__ import annotations

from berth_api import Registry, leases, server
from berth_api.pod_template import COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL, NAME_LABEL

# The label keys are the API's (a user's pod label may not collide with them: berth_api.pod_template).
__all__ = ["COMPONENT_LABEL", "INSTANCE_LABEL", "MANAGED_BY_LABEL", "NAME_LABEL"]

# Values of the component label.
REGISTRY_COMPONENT = "registry"
# On the Deployment while a stalled surge goes on by Recreate (builders/storage.py rollout_strategy).
ROLLOUT_FALLBACK_ANNOTATION = "berth.dev/rollout-fallback"
AGENT_COMPONENT = "agent"
STORAGE_COMPONENT = "storage"
HTTP_SECRET_COMPONENT = "http-secret"
METRICS_COMPONENT = "metrics"  # the metrics Service; a ServiceMonitor selects it by this label
EXPOSURE_COMPONENT = "exposure"  # the Ingress and the HTTPRoute
CERTIFICATE_COMPONENT = "certificate"  # the cert-manager Certificates


def registry_name(reg: Registry) -> str:
    try:
        return reg.metadata["name"]
    except KeyError:
        raise ValueError("the Registry has no metadata.name") from None


def namespace(reg: Registry) -> str:
    try:
        return reg.metadata["namespace"]
    except KeyError:
        raise ValueError(f"Registry {registry_name(reg)} has no metadata.namespace") from None


def deployment_name(reg: Registry) -> str:
    return registry_name(reg)


def service_account_name(reg: Registry) -> str:
    return f"{registry_name(reg)}-agent"


def role_name(reg: Registry) -> str:
    return f"{registry_name(reg)}-agent"


def role_binding_name(reg: Registry) -> str:
    return f"{registry_name(reg)}-agent"


def lease_name(reg: Registry) -> str:
    """The reload Lease the agents take in turn (berth_api.leases, which the agent uses too)."""
    return leases.reload_lease_name(registry_name(reg))


def gc_lease_name(reg: Registry) -> str:
    """The garbage collection Lease: its holder runs the Registry's GC (docs/design.md §4.5, A3)."""
    return leases.gc_lease_name(registry_name(reg))


def service_name(reg: Registry) -> str:
    return registry_name(reg)


def service_monitor_name(reg: Registry) -> str:
    return registry_name(reg)


def metrics_service_name(reg: Registry) -> str:
    return f"{registry_name(reg)}-metrics"


def http_secret_name(reg: Registry) -> str:
    """The Secret the operator generates when spec.http.secret is absent (key berth_api.pod.HTTP_SECRET_KEY)."""
    return f"{registry_name(reg)}-http-secret"


def pvc_name(reg: Registry) -> str:
    """The PersistentVolumeClaim the operator creates from spec.config.storage.filesystem.storageClass."""
    return f"{registry_name(reg)}-data"


def bucket_claim_name(reg: Registry) -> str:
    return f"{registry_name(reg)}-bucket"


def bucket_access_name(reg: Registry) -> str:
    return f"{registry_name(reg)}-bucket-access"


def cosi_secret_name(reg: Registry) -> str:
    """credentialsSecretName of the BucketAccess the operator creates."""
    return f"{registry_name(reg)}-cosi-credentials"


def ingress_name(reg: Registry) -> str:
    return registry_name(reg)


def http_route_name(reg: Registry) -> str:
    return registry_name(reg)


def certificate_name(reg: Registry) -> str:
    """The Certificate of spec.http.tls.issuerRef; cert-manager writes its Secret under the same name (the
    agent's messages name it too: berth_api.server.certificate_name)."""
    return server.certificate_name(registry_name(reg))


def ingress_certificate_name(reg: Registry) -> str:
    """The Certificate of spec.ingress.tls.issuerRef, and its Secret (the Ingress's tls secretName)."""
    return f"{registry_name(reg)}-ingress-tls"


def certificate_names(reg: Registry) -> tuple[str, ...]:
    """Both Certificates a Registry may have (prune)."""
    return certificate_name(reg), ingress_certificate_name(reg)


def tls_secret_name(reg: Registry) -> str | None:
    """The Secret the registry serves HTTPS with: spec.http.tls.secretName, or its Certificate's; None: HTTP."""
    tls = reg.spec.http.tls
    if tls is None:
        return None
    return tls.secret_name if tls.secret_name is not None else certificate_name(reg)


def ingress_tls_secret_name(reg: Registry) -> str | None:
    ingress = reg.spec.ingress
    if ingress is None or ingress.tls is None:
        return None
    return ingress.tls.secret_name if ingress.tls.secret_name is not None else ingress_certificate_name(reg)


def pdb_name(reg: Registry) -> str:
    return registry_name(reg)


def network_policy_name(reg: Registry) -> str:
    """The NetworkPolicy of spec.networkPolicy (pruned when the field goes)."""
    return registry_name(reg)


def selector_labels(reg: Registry) -> dict[str, str]:
    """Labels that pick this Registry's pods (Deployment, Service, PodDisruptionBudget). Never change them:
    a Deployment's selector is immutable."""
    return {NAME_LABEL: "registry", INSTANCE_LABEL: registry_name(reg)}


def selector_string(reg: Registry) -> str:
    """selector_labels as a label selector string, for status.selector (the scale subresource)."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector_labels(reg).items()))


def labels(reg: Registry, component: str) -> dict[str, str]:
    return {**selector_labels(reg), MANAGED_BY_LABEL: "berth", COMPONENT_LABEL: component}
