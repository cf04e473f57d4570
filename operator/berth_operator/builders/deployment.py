"""The registry Deployment."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import storage
from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import REGISTRY_COMPONENT, object_meta, registry_name, selector_labels
from .pod import pod_template

# On the Deployment while a stalled surge goes on by Recreate (storage.rollout_strategy; engine/facts.py reads it).
ROLLOUT_FALLBACK_ANNOTATION = "berth.dev/rollout-fallback"


def name(reg: Registry) -> str:
    return registry_name(reg)


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    """None while the pod cannot be described: the credentials Secret of an existing BucketAccess is unknown
    (problems() says so)."""
    if storage.waiting_for_credentials(reg, facts):
        return None
    metadata = object_meta(reg, name(reg), REGISTRY_COMPONENT)
    if facts.rollout_fallback:
        # Read back by the apply layer (engine/facts.py): this roll goes on by Recreate until it is done.
        metadata.setdefault("annotations", {})[ROLLOUT_FALLBACK_ANNOTATION] = "true"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": storage.effective_replicas(reg, facts),
            "selector": {"matchLabels": selector_labels(reg)},
            # Outside the template: a change of either never rolls the pods.
            "strategy": storage.rollout_strategy(reg, facts),
            "progressDeadlineSeconds": reg.spec.rollout.progress_deadline_seconds,
            "template": pod_template(reg, facts),
        },
    }


BEHAVIOURS = (Behaviour("apps/v1", "Deployment", builders=(build,)),)
