"""A PodDisruptionBudget, only when more than one registry pod runs (with one pod it would block node drains)."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names, storage
from .context import ClusterFacts
from .meta import object_meta


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    # Follows the replica count only (not the BucketAccess wait), so a wait never prunes it.
    if storage.effective_replicas(reg, facts) <= 1:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(reg, names.pdb_name(reg), names.REGISTRY_COMPONENT),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": names.selector_labels(reg)}},
    }
