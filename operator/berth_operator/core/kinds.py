"""The table of the kinds the operator addresses, as data (docs/decisions/0027-one-table-of-managed-kinds.md): for each
kind the client's URL path (plural, namespaced), whether the caches list and watch it (cached), how the apply layer
writes it (applied; None: Berth makes none), the API a cluster may not serve (optional), whether a spec names objects of
it that Berth did not make (named, spec_class), and what deploy/clusterrole.yaml grants on it (verbs;
tests/deploy/test_cluster_role.py derives the ClusterRole from here).

What Berth does with a kind it makes (its builders, prune, checks, must_replace) is the kind's builder module's
(builders/kinds.py gathers them). A new kind is one row here, its builder module and its ClusterRole rule.
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
    """An API a cluster may not serve (docs/decisions/0025-optional-apis.md): a Registry that needs one of its
    kinds is Degraded with `reason` until the cluster serves it, and says to install `install`."""

    reason: str
    install: str


COSI_API = OptionalApi("MissingCOSI", "install the COSI CRDs and controller")
MONITORING_API = OptionalApi("MissingMonitoringCRD", "install prometheus-operator or its CRDs")
GATEWAY_API = OptionalApi("MissingGatewayAPI", "install the Gateway API CRDs (standard channel) and a controller")
CERT_MANAGER_API = OptionalApi("MissingCertManager", "install cert-manager")

APPLY = "apply"  # server-side apply, only when something differs (engine.apply)
CREATE = "create"  # POSTed once and never patched: the spec is immutable, holds data, or is the agents'

# The verbs of deploy/clusterrole.yaml, by what needs them: reads, the caches, server-side apply (a patch, and a
# create when the object is missing), the prune (delete by uid).
READ = ("get", "list", "watch")
MADE = (*READ, "create")
APPLIED = (*MADE, "patch")
PRUNED = (*APPLIED, "delete")
OWNERSHIP = PRUNED  # the claims: their owner reference is patched, which needs delete (see the claims' rows)


@dataclass(frozen=True)
class Kind:
    """One kind. applied: how the apply layer writes it (APPLY or CREATE; None: Berth makes none, and its builder
    module declares none); cached: the caches list and watch it (Berth's label); optional: the API a cluster may
    not serve (None: every cluster does); named: a spec can name an object of it that Berth did not make (a user's
    Secret or claim), whose changes wake the Registries that read it (cluster/named.py); spec_class: a
    cluster-scoped class a spec names (the admin's), cached cluster-wide whole (Caches.of_classes); verbs: what the
    ClusterRole grants on it."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    cached: bool = False
    applied: str | None = None
    optional: OptionalApi | None = None
    named: bool = False
    spec_class: bool = False
    verbs: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.api_version, self.kind

    @property
    def owned(self) -> bool:
        return self.applied is not None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def crd_name(self) -> str:
        """The CustomResourceDefinition that serves it: <plural>.<group> (the API server requires that name)."""
        return f"{self.plural}.{self.group}"


@dataclass(frozen=True)
class Grant:
    """A ClusterRole rule that is not a kind's own: a subresource, another group's copy, a kind Berth only lists."""

    group: str
    resource: str
    verbs: tuple[str, ...]


# Owned kinds in creation order (build_all's, the prune's): identity and RBAC, then what the pod mounts (the
# generated HTTP secret, the claims and certificates), the Services and their routes, the NetworkPolicy, the pods
# and their budget, then the two Leases their agents take. The kinds with a waiting check report in this order
# (the claim, the certificates, the bucket, its access: the Progressing message has always joined them so).
TABLE: tuple[Kind, ...] = (
    Kind("v1", "ServiceAccount", "serviceaccounts", cached=True, applied=APPLY, verbs=APPLIED),
    Kind("rbac.authorization.k8s.io/v1", "Role", "roles", cached=True, applied=APPLY, verbs=APPLIED),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", cached=True, applied=APPLY, verbs=APPLIED),
    # The generated HTTP secret is never overwritten; the caches hold Berth's Secrets with key names only.
    Kind("v1", "Secret", "secrets", cached=True, applied=CREATE, named=True, verbs=MADE),
    # The claims hold data: their owner reference follows the deletion policy (engine/apply.settle_ownership, a
    # patch; OwnerReferencesPermissionEnforcement admits it only from who may delete the object, hence OWNERSHIP).
    # The claim Berth made is patched to grow it too (builders/pvc_growth.py; engine/expansion.py writes it).
    Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", cached=True, applied=CREATE, named=True,
         verbs=OWNERSHIP),
    # A Certificate before the pods that mount its Secret.
    Kind(CERT_MANAGER, "Certificate", "certificates", cached=True, applied=APPLY, optional=CERT_MANAGER_API,
         verbs=PRUNED),
    Kind(COSI, "BucketClaim", "bucketclaims", cached=True, applied=CREATE, optional=COSI_API, named=True,
         verbs=OWNERSHIP),
    Kind(COSI, "BucketAccess", "bucketaccesses", cached=True, applied=CREATE, optional=COSI_API, named=True,
         verbs=OWNERSHIP),
    # The registry's Service is deleted and created again when Kubernetes refuses a change in place.
    Kind("v1", "Service", "services", cached=True, applied=APPLY, verbs=PRUNED),
    Kind("networking.k8s.io/v1", "Ingress", "ingresses", cached=True, applied=APPLY, verbs=PRUNED),
    Kind(GATEWAY, "HTTPRoute", "httproutes", cached=True, applied=APPLY, optional=GATEWAY_API, verbs=PRUNED),
    Kind(MONITORING, "ServiceMonitor", "servicemonitors", cached=True, applied=APPLY, optional=MONITORING_API,
         verbs=PRUNED),
    # Applied, cached and pruned when spec.networkPolicy goes, as the Ingress is; before the Deployment, so that a
    # new Registry's pods are isolated from their start.
    Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", cached=True, applied=APPLY, verbs=PRUNED),
    Kind("apps/v1", "Deployment", "deployments", cached=True, applied=APPLY, verbs=APPLIED),
    Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", cached=True, applied=APPLY, verbs=PRUNED),
    # A Lease's spec belongs to the agents that take it (holderIdentity, renewTime): created, never patched (get
    # and update: the agent Role grants them, and a Role may only grant what its creator holds).
    Kind("coordination.k8s.io/v1", "Lease", "leases", cached=True, applied=CREATE, verbs=(*MADE, "update")),
    # Read, not made: pods (cached for their wakes), what a spec references, Events, the Registry, CRDs.
    Kind("v1", "Pod", "pods", cached=True, verbs=READ),
    Kind("v1", "ConfigMap", "configmaps", named=True, verbs=READ),
    Kind("v1", "Event", "events", verbs=("create", "patch")),
    Kind("storage.k8s.io/v1", "StorageClass", "storageclasses", namespaced=False, spec_class=True, verbs=READ),
    Kind(COSI, "BucketClass", "bucketclasses", namespaced=False, optional=COSI_API, spec_class=True, verbs=READ),
    Kind(COSI, "BucketAccessClass", "bucketaccessclasses", namespaced=False, optional=COSI_API, spec_class=True,
         verbs=READ),
    # kopf lists and watches Registries and keeps its bookkeeping in annotations (patch).
    Kind(REGISTRY, "Registry", "registries", verbs=("get", "list", "watch", "patch")),
    # Listed and watched (metadata) to see an optional API come or go; the optional kinds' own are read by name.
    Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False,
         verbs=("list", "watch")),
)
# What the ClusterRole grants besides the kinds' own verbs (and the get of each optional kind's CRD, by name).
OTHER_GRANTS: tuple[Grant, ...] = (
    Grant("berth.dev", "registries/status", ("patch",)),
    # Owner references carry blockOwnerDeletion (OwnerReferencesPermissionEnforcement).
    Grant("berth.dev", "registries/finalizers", ("update",)),
    Grant("events.k8s.io", "events", ("create", "patch")),  # the agent Role grants both Event groups
    Grant("", "namespaces", ("list", "watch")),  # kopf, when given namespace names
)

KINDS: dict[tuple[str, str], Kind] = {kind.key: kind for kind in TABLE}
CACHED_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.cached)
OWNED_KINDS: tuple[Kind, ...] = tuple(kind for kind in TABLE if kind.owned)
CREATE_ONLY_KINDS = frozenset(kind.kind for kind in TABLE if kind.applied == CREATE)
OPTIONAL_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.optional is not None)
MISSING_API_REASONS = frozenset(kind.optional.reason for kind in TABLE if kind.optional is not None)
NAMED_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.named)
CLASS_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.spec_class)


def lookup(api_version: str, kind: str) -> Kind:
    try:
        return KINDS[(api_version, kind)]
    except KeyError:
        raise ValueError(f"unsupported kind {api_version} {kind}") from None


def crd_name(api_version: str, kind: str) -> str:
    return lookup(api_version, kind).crd_name
