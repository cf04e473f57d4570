"""Pure builders: a Registry (and what the apply layer looked up, ClusterFacts) in, manifests out.

One module per kind of object, each with build(reg, facts) -> dict | None (None: not needed for this spec).
No I/O here; the apply layer creates and patches what build_all returns.
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import (
    bucket_access,
    bucket_claim,
    deployment,
    http_secret,
    lease,
    metrics_service,
    names,
    pod_disruption_budget,
    pvc,
    role,
    role_binding,
    service,
    service_account,
    service_monitor,
    storage,
)
from .context import ClusterFacts
from .problems import problems

__all__ = ["ClusterFacts", "build_all", "problems", "names", "storage"]

# Creation order: identity and RBAC, then what the pod mounts (the HTTP secret goes between these two
# groups), then the pods, then their budget and the two Leases their agents take (reload turns, the GC run).
_IDENTITY_BUILDERS = (service_account.build, role.build, role_binding.build)
_WORKLOAD_BUILDERS = (
    pvc.build,
    bucket_claim.build,
    bucket_access.build,
    service.build,
    metrics_service.build,
    service_monitor.build,  # only when asked and the CRD is installed
    deployment.build,
    pod_disruption_budget.build,
    lease.build,  # every Registry has one (scaling up then needs no new object before the agents use it)
    lease.build_gc,  # likewise: a first GC request needs no new object before an agent takes it
)


def build_all(reg: Registry, facts: ClusterFacts, *, http_secret_value: str | None) -> list[dict[str, Any]]:
    """Every object this Registry needs, in creation order. The HTTP secret is included only when
    spec.http.secret is absent AND a value is given (the apply layer keeps an existing one and passes None)."""
    objects: list[dict[str, Any]] = []
    for build in _IDENTITY_BUILDERS:
        objects.append(build(reg, facts))
    if http_secret_value is not None:
        secret = http_secret.build(reg, facts, http_secret_value)
        if secret is not None:
            objects.append(secret)
    for build in _WORKLOAD_BUILDERS:
        built = build(reg, facts)
        if built is not None:
            objects.append(built)
    return objects
