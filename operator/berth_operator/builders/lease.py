"""The Registry's two Leases (coordination.k8s.io/v1), both taken by its pods' agents:

- `<registry>-reload`: the agents take it in turn, so replicas restart their registries one at a time
  (docs/design.md §4.2, "Coordination");
- `<registry>-gc`: its holder runs a garbage collection (§4.5, A3). A separate Lease, because the runner
  holds it for the whole run while every replica must still take the reload Lease to turn read-only.

Both are created empty; the agents own their spec from then on (holderIdentity, leaseDurationSeconds,
acquireTime, renewTime): the apply layer creates a Lease and never patches it. Both exist for every Registry
(scaling up, or a first GC request, then needs no new object before the agents use it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from berth_api import Registry

from . import names
from .context import ClusterFacts
from .meta import object_meta


def _empty_lease(reg: Registry, name_of: Callable[[Registry], str]) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": object_meta(reg, name_of(reg), names.AGENT_COMPONENT),
        "spec": {},
    }


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    """The reload Lease."""
    return _empty_lease(reg, names.lease_name)


def build_gc(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    """The garbage collection Lease."""
    return _empty_lease(reg, names.gc_lease_name)
