"""The Registry's reload Lease (coordination.k8s.io/v1): its pods' agents take it in turn, so replicas restart
their registries one at a time (docs/design.md §4.2, "Coordination").

Created empty; the agents own its spec from then on (holderIdentity, leaseDurationSeconds, acquireTime,
renewTime): the apply layer creates a Lease and never patches it.
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names
from .context import ClusterFacts
from .meta import object_meta


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": object_meta(reg, names.lease_name(reg), names.AGENT_COMPONENT),
        "spec": {},
    }
