"""The one table of the kinds the operator addresses (issue 27, issue 40; docs/design.md §4.3, "The table of kinds").

Each entry is everything Berth knows about a kind: the client's URL path (plural, namespaced), whether the caches
list and watch it (cached), how the apply layer writes it (applied), its builders (function objects, called in
table order by build_all), what the apply layer prunes (prune: the names function), the API a cluster may not
serve (optional) with the spec fields that need it (needed_by), whether a spec names objects of it that Berth did
not make (named, spec_class), what deploy/clusterrole.yaml grants on it (verbs; tests/deploy/
test_cluster_role.py derives the ClusterRole from here), and how the engine checks its objects in the cluster
(checks: what the spec references and is missing, what is not ready yet, what grows in place). A new kind is one
entry here, its builder module and its ClusterRole line.

It sits among the builders because it holds them; core.kinds re-exports it (the client, the caches, discovery
and the reactor read it there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from berth_api import Registry

from . import (
    bucket_access,
    bucket_claim,
    certificate,
    deployment,
    http_route,
    http_secret,
    ingress,
    lease,
    metrics_service,
    names,
    network_policy,
    pod_disruption_budget,
    pvc,
    pvc_growth,
    role,
    role_binding,
    service,
    service_account,
    service_monitor,
    storage,
)
from .checks import Checks

COSI = "objectstorage.k8s.io/v1alpha1"
MONITORING = "monitoring.coreos.com/v1"
REGISTRY = "berth.dev/v1alpha1"
GATEWAY = "gateway.networking.k8s.io/v1"
CERT_MANAGER = "cert-manager.io/v1"

Builder = Callable[..., "dict[str, Any] | None"]
Names = Callable[[Registry], "str | tuple[str, ...]"]
Fields = Callable[[Registry], "tuple[str, ...]"]
Refusal = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


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

# The verbs of deploy/clusterrole.yaml, by what needs them: reads, the caches, server-side apply (a patch, and a
# create when the object is missing), the prune (delete by uid).
READ = ("get", "list", "watch")
MADE = (*READ, "create")
APPLIED = (*MADE, "patch")
PRUNED = (*APPLIED, "delete")
OWNERSHIP = PRUNED  # the claims: their owner reference is patched, which needs delete (see the claims' entries)


@dataclass(frozen=True)
class Kind:
    """One kind. builders: what makes it, in creation order (empty: Berth does not make it); applied: how the
    apply layer writes it (APPLY or CREATE; None: never written there); cached: the caches list and watch it
    (Berth's label); prune: the names function of the object (or the objects) a Registry no longer needs, which
    the apply layer deletes; optional: the API a cluster may not serve (None: every cluster does); needed_by: the
    spec fields of a Registry that need this optional kind (none: it needs no object of it); named: a spec can
    name an object of it that Berth did not make (a user's Secret or claim), whose changes wake the Registries
    that read it (cluster/named.py); spec_class: a cluster-scoped class a spec names (the admin's), cached
    cluster-wide whole (Caches.of_classes); verbs: what the ClusterRole grants on it; must_replace(live, wanted):
    the API server refuses that change in place, so the apply layer deletes the object and creates it again;
    checks: its missing and waiting checks (checks.py), which engine/facts.py runs (none: nothing to look up), and
    its grow hook (the one field a create-only object changes in place), which engine/expansion.py runs."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    cached: bool = False
    applied: str | None = None
    builders: tuple[Builder, ...] = ()
    prune: Names | None = None
    optional: OptionalApi | None = None
    needed_by: Fields | None = None
    named: bool = False
    spec_class: bool = False
    verbs: tuple[str, ...] = ()
    must_replace: Refusal | None = None
    checks: Checks | None = None

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


@dataclass(frozen=True)
class Grant:
    """A ClusterRole rule that is not a kind's own: a subresource, another group's copy, a kind Berth only lists."""

    group: str
    resource: str
    verbs: tuple[str, ...]


# Owned kinds in creation order: identity and RBAC, then what the pod mounts (the generated HTTP secret, the
# claims), the Services and their routes, the NetworkPolicy, the pods and their budget, then the two Leases their
# agents take.
TABLE: tuple[Kind, ...] = (
    Kind("v1", "ServiceAccount", "serviceaccounts", cached=True, applied=APPLY, builders=(service_account.build,),
         verbs=APPLIED),
    Kind("rbac.authorization.k8s.io/v1", "Role", "roles", cached=True, applied=APPLY, builders=(role.build,),
         verbs=APPLIED),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", cached=True, applied=APPLY,
         builders=(role_binding.build,), verbs=APPLIED),
    # The generated HTTP secret is never overwritten; the caches hold Berth's Secrets with key names only.
    Kind("v1", "Secret", "secrets", cached=True, applied=CREATE, builders=(http_secret.build,), named=True,
         verbs=MADE),
    # The claims hold data: their owner reference follows the deletion policy (engine/apply.settle_ownership, a
    # patch; OwnerReferencesPermissionEnforcement admits it only from who may delete the object, hence OWNERSHIP).
    # The claim Berth made is patched to grow it too (pvc_growth.py; engine/expansion.py writes the patch).
    Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", cached=True, applied=CREATE,
         builders=(pvc.build,), named=True, verbs=OWNERSHIP, checks=Checks(pvc.missing, pvc.waiting, pvc_growth.GROW)),
    Kind(COSI, "BucketClaim", "bucketclaims", cached=True, applied=CREATE, builders=(bucket_claim.build,),
         optional=COSI_API, needed_by=storage.object_storage_fields, named=True, verbs=OWNERSHIP,
         checks=Checks(bucket_claim.missing, bucket_claim.waiting)),
    Kind(COSI, "BucketAccess", "bucketaccesses", cached=True, applied=CREATE, builders=(bucket_access.build,),
         prune=names.bucket_access_name, optional=COSI_API, needed_by=storage.object_storage_fields, named=True,
         verbs=OWNERSHIP, checks=Checks(bucket_access.missing, bucket_access.waiting)),
    # A Certificate before the pods that mount its Secret; prune names both a Registry may have.
    Kind(CERT_MANAGER, "Certificate", "certificates", cached=True, applied=APPLY,
         builders=(certificate.build, certificate.build_ingress), prune=names.certificate_names,
         optional=CERT_MANAGER_API, needed_by=certificate.needed_by, verbs=PRUNED,
         checks=Checks(waiting=certificate.waiting)),
    # The registry's Service is deleted and created again when Kubernetes refuses a change in place (service.py).
    Kind("v1", "Service", "services", cached=True, applied=APPLY,
         builders=(service.build, metrics_service.build), verbs=PRUNED, must_replace=service.must_replace),
    Kind("networking.k8s.io/v1", "Ingress", "ingresses", cached=True, applied=APPLY, builders=(ingress.build,),
         prune=names.ingress_name, verbs=PRUNED),
    Kind(GATEWAY, "HTTPRoute", "httproutes", cached=True, applied=APPLY, builders=(http_route.build,),
         prune=names.http_route_name, optional=GATEWAY_API, needed_by=http_route.needed_by, verbs=PRUNED),
    Kind(MONITORING, "ServiceMonitor", "servicemonitors", cached=True, applied=APPLY,
         builders=(service_monitor.build,), prune=names.service_monitor_name, optional=MONITORING_API,
         needed_by=service_monitor.needed_by, verbs=PRUNED),
    # spec.networkPolicy (issue 50): applied, cached and pruned when the field goes, as the Ingress is; before
    # the Deployment, so that a new Registry's pods are isolated from their start.
    Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", cached=True, applied=APPLY,
         builders=(network_policy.build,), prune=names.network_policy_name, verbs=PRUNED),
    Kind("apps/v1", "Deployment", "deployments", cached=True, applied=APPLY, builders=(deployment.build,),
         verbs=APPLIED),
    Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", cached=True, applied=APPLY,
         builders=(pod_disruption_budget.build,), prune=names.pdb_name, verbs=PRUNED),
    # A Lease's spec belongs to the agents that take it (holderIdentity, renewTime): created, never patched (get
    # and update: the agent Role grants them, and a Role may only grant what its creator holds).
    Kind("coordination.k8s.io/v1", "Lease", "leases", cached=True, applied=CREATE,
         builders=(lease.build, lease.build_gc), verbs=(*MADE, "update")),
    # Read, not made: pods (cached for their wakes), what a spec references, Events, the Registry, CRDs.
    Kind("v1", "Pod", "pods", cached=True, verbs=READ),
    Kind("v1", "ConfigMap", "configmaps", named=True, verbs=READ),
    Kind("v1", "Event", "events", verbs=("create", "patch")),
    Kind("storage.k8s.io/v1", "StorageClass", "storageclasses", namespaced=False, spec_class=True, verbs=READ),
    Kind(COSI, "BucketClass", "bucketclasses", namespaced=False, optional=COSI_API,
         needed_by=storage.bucket_class_fields, spec_class=True, verbs=READ),
    Kind(COSI, "BucketAccessClass", "bucketaccessclasses", namespaced=False, optional=COSI_API,
         needed_by=storage.bucket_access_class_fields, spec_class=True, verbs=READ),
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
PRUNABLE_KINDS: tuple[Kind, ...] = tuple(kind for kind in TABLE if kind.prune is not None)
OPTIONAL_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.optional is not None)
MISSING_API_REASONS = frozenset(kind.optional.reason for kind in TABLE if kind.optional is not None)
NAMED_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.named)
CLASS_KINDS: tuple[tuple[str, str], ...] = tuple(kind.key for kind in TABLE if kind.spec_class)
# The kinds with a missing check, in table order (engine/facts.look_up runs those every cluster serves before
# the missing APIs, the served optional ones after).
MISSING_CHECKED: tuple[Kind, ...] = tuple(kind for kind in TABLE if kind.checks and kind.checks.missing)
# The kinds that grow in place, in table order (engine/expansion.expand).
GROWN: tuple[Kind, ...] = tuple(kind for kind in TABLE if kind.checks and kind.checks.grow)
# The kinds with a waiting check, in the order the Progressing message has always joined their waits (status.py
# joins findings in order): the claim, the certificates, the bucket and its access. tests/operator/test_kinds.py
# checks it holds every kind with one.
WAITING_CHECKED: tuple[Kind, ...] = tuple(KINDS[key] for key in (
    ("v1", "PersistentVolumeClaim"), (CERT_MANAGER, "Certificate"), (COSI, "BucketClaim"), (COSI, "BucketAccess")))


def lookup(api_version: str, kind: str) -> Kind:
    try:
        return KINDS[(api_version, kind)]
    except KeyError:
        raise ValueError(f"unsupported kind {api_version} {kind}") from None


def crd_name(api_version: str, kind: str) -> str:
    return lookup(api_version, kind).crd_name
