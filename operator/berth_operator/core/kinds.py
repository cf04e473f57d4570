"""The one table of the kinds the operator addresses (issue 27; docs/design.md §4.3, "The table of kinds").

Every layer reads it: the client its URL paths (plural, namespaced), the caches which kinds they list and watch
(cached), the apply layer how each is written (applied) and what it prunes (prune), the builders what they make
and in which order (owned kinds, in table order, by `builders`), discovery which kinds a cluster may not serve
(optional), and the name watches which kinds a spec names objects of (named). A new kind is one entry here plus
its builder module.
"""

from __future__ import annotations

from dataclasses import dataclass

COSI = "objectstorage.k8s.io/v1alpha1"
MONITORING = "monitoring.coreos.com/v1"
REGISTRY = "berth.dev/v1alpha1"
GATEWAY = "gateway.networking.k8s.io/v1"
CERT_MANAGER = "cert-manager.io/v1"


@dataclass(frozen=True)
class OptionalApi:
    """An API a cluster may not serve (docs/design.md §4.3, "Optional APIs"): a Registry that needs one of its
    kinds is Degraded with `reason` until the cluster serves it, and says to install `install`."""

    reason: str
    install: str


COSI_API = OptionalApi("MissingCOSI", "install the COSI CRDs and controller")
MONITORING_API = OptionalApi("MissingMonitoringCRD", "install prometheus-operator or its CRDs")
GATEWAY_API = OptionalApi("MissingGatewayAPI", "install the Gateway API CRDs (standard channel) and a controller")
CERT_MANAGER_API = OptionalApi("MissingCertManager", "install cert-manager")

APPLY = "apply"  # server-side apply, only when something differs (engine.apply)
CREATE = "create"  # POSTed once and never patched: the spec is immutable, holds data, or is the agents'


@dataclass(frozen=True)
class Kind:
    """One kind. owned: Berth makes it (its builders, in creation order: `module.function` under builders/);
    applied: how the apply layer writes it (APPLY or CREATE; None: never written there); cached: the caches list
    and watch it (Berth's label); prune: the builders.names function naming the object (or a tuple of the
    objects) a Registry no longer needs, which the apply layer deletes; optional: the API a cluster may not
    serve (None: every cluster does); named: a spec can name an object of it that Berth did not make (a user's
    Secret or claim), whose changes wake the Registries that read it (cluster/named.py); spec_class: a
    cluster-scoped class a spec names (the admin's), cached cluster-wide whole (Caches.of_classes), whose changes
    wake the Registries that read it."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    cached: bool = False
    applied: str | None = None
    builders: tuple[str, ...] = ()
    prune: str | None = None
    optional: OptionalApi | None = None
    named: bool = False
    spec_class: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.api_version, self.kind

    @property
    def owned(self) -> bool:
        return bool(self.builders)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def crd_name(self) -> str:
        """The CustomResourceDefinition that serves it: <plural>.<group> (the API server requires that name)."""
        return f"{self.plural}.{self.group}"


# Owned kinds in creation order: identity and RBAC, then what the pod mounts (the generated HTTP secret, the
# claims), the Services, the pods and their budget, then the two Leases their agents take.
TABLE: tuple[Kind, ...] = (
    Kind("v1", "ServiceAccount", "serviceaccounts", cached=True, applied=APPLY, builders=("service_account.build",)),
    Kind("rbac.authorization.k8s.io/v1", "Role", "roles", cached=True, applied=APPLY, builders=("role.build",)),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", cached=True, applied=APPLY,
         builders=("role_binding.build",)),
    # The generated HTTP secret is never overwritten; the caches hold Berth's Secrets with key names only.
    Kind("v1", "Secret", "secrets", cached=True, applied=CREATE, builders=("http_secret.build",), named=True),
    Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", cached=True, applied=CREATE,
         builders=("pvc.build",), named=True),
    Kind(COSI, "BucketClaim", "bucketclaims", cached=True, applied=CREATE, builders=("bucket_claim.build",),
         optional=COSI_API, named=True),
    Kind(COSI, "BucketAccess", "bucketaccesses", cached=True, applied=CREATE, builders=("bucket_access.build",),
         prune="bucket_access_name", optional=COSI_API, named=True),
    # A Certificate before the pods that mount its Secret; prune names both a Registry may have.
    Kind(CERT_MANAGER, "Certificate", "certificates", cached=True, applied=APPLY,
         builders=("certificate.build", "certificate.build_ingress"), prune="certificate_names",
         optional=CERT_MANAGER_API),
    Kind("v1", "Service", "services", cached=True, applied=APPLY,
         builders=("service.build", "metrics_service.build")),
    Kind("networking.k8s.io/v1", "Ingress", "ingresses", cached=True, applied=APPLY, builders=("ingress.build",),
         prune="ingress_name"),
    Kind(GATEWAY, "HTTPRoute", "httproutes", cached=True, applied=APPLY, builders=("http_route.build",),
         prune="http_route_name", optional=GATEWAY_API),
    Kind(MONITORING, "ServiceMonitor", "servicemonitors", cached=True, applied=APPLY,
         builders=("service_monitor.build",), prune="service_monitor_name", optional=MONITORING_API),
    Kind("apps/v1", "Deployment", "deployments", cached=True, applied=APPLY, builders=("deployment.build",)),
    Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", cached=True, applied=APPLY,
         builders=("pod_disruption_budget.build",), prune="pdb_name"),
    # A Lease's spec belongs to the agents that take it (holderIdentity, renewTime): created, never patched.
    Kind("coordination.k8s.io/v1", "Lease", "leases", cached=True, applied=CREATE,
         builders=("lease.build", "lease.build_gc")),
    # Read, not made: pods (cached for their wakes), what a spec references, Events, the Registry, CRDs.
    Kind("v1", "Pod", "pods", cached=True),
    Kind("v1", "ConfigMap", "configmaps", named=True),
    Kind("v1", "Event", "events"),
    Kind("storage.k8s.io/v1", "StorageClass", "storageclasses", namespaced=False, spec_class=True),
    Kind(COSI, "BucketClass", "bucketclasses", namespaced=False, optional=COSI_API, spec_class=True),
    Kind(COSI, "BucketAccessClass", "bucketaccessclasses", namespaced=False, optional=COSI_API, spec_class=True),
    Kind(REGISTRY, "Registry", "registries"),
    Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False),
)

KINDS: dict[tuple[str, str], Kind] = {kind.key: kind for kind in TABLE}
CACHED_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.cached)
OWNED_KINDS: tuple[Kind, ...] = tuple(kind for kind in TABLE if kind.owned)
CREATE_ONLY_KINDS = frozenset(kind.kind for kind in TABLE if kind.applied == CREATE)
PRUNABLE_KINDS: tuple[Kind, ...] = tuple(kind for kind in TABLE if kind.prune is not None)
OPTIONAL_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.optional is not None)
NAMED_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.named)
CLASS_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.spec_class)


def lookup(api_version: str, kind: str) -> Kind:
    try:
        return KINDS[(api_version, kind)]
    except KeyError:
        raise ValueError(f"unsupported kind {api_version} {kind}") from None


def crd_name(api_version: str, kind: str) -> str:
    return lookup(api_version, kind).crd_name
