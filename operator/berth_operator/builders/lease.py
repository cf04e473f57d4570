"""The Registry's two Leases (coordination.k8s.io/v1), both taken by its pods' agents:

- `<registry>-reload`: the agents take it in turn, so replicas restart their registries one at a time
  (docs/decisions/0010-replicas-reload-one-at-a-time.md);
- `<registry>-gc`: its holder runs a garbage collection
  (docs/decisions/0019-garbage-collection-inside-the-pods.md). A separate Lease, because the runner
  holds it for the whole run while every replica must still take the reload Lease to turn read-only.

Both are created empty; the agents own their spec from then on (holderIdentity, leaseDurationSeconds,
acquireTime, renewTime): the apply layer creates a Lease and never patches it. Both exist for every Registry
(scaling up, or a first GC request, then needs no new object before the agents use it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from berth_api import Registry, leases

from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import AGENT_COMPONENT, object_meta, registry_name


def name(reg: Registry) -> str:
    """The reload Lease the agents take in turn (berth_api.leases, which the agent uses too)."""
    return leases.reload_lease_name(registry_name(reg))


def gc_name(reg: Registry) -> str:
    """The garbage collection Lease: its holder runs the Registry's GC
    (docs/decisions/0019-garbage-collection-inside-the-pods.md)."""
    return leases.gc_lease_name(registry_name(reg))


def _empty_lease(reg: Registry, name_of: Callable[[Registry], str]) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": object_meta(reg, name_of(reg), AGENT_COMPONENT),
        "spec": {},
    }


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    """The reload Lease."""
    return _empty_lease(reg, name)


def build_gc(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    """The garbage collection Lease."""
    return _empty_lease(reg, gc_name)


BEHAVIOURS = (Behaviour("coordination.k8s.io/v1", "Lease", builders=(build, build_gc)),)
