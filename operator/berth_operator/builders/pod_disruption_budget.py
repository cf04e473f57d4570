"""A PodDisruptionBudget, only when more than one registry pod runs (with one pod it would block node drains)."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import storage
from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import REGISTRY_COMPONENT, object_meta, registry_name, selector_labels


def name(reg: Registry) -> str:
    return registry_name(reg)


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    # Follows the replica count only (not the BucketAccess wait), so a wait never prunes it.
    if storage.effective_replicas(reg, facts) <= 1:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(reg, name(reg), REGISTRY_COMPONENT),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(reg)}},
    }


BEHAVIOURS = (Behaviour("policy/v1", "PodDisruptionBudget", builders=(build,), prune=name),)
