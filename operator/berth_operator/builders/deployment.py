"""The registry Deployment."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names, storage
from .context import ClusterFacts
from .meta import object_meta
from .pod import pod_template


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    """None while the pod cannot be described: the credentials Secret of an existing BucketAccess is unknown
    (problems() says so)."""
    if storage.waiting_for_credentials(reg, facts):
        return None
    metadata = object_meta(reg, names.deployment_name(reg), names.REGISTRY_COMPONENT)
    if facts.rollout_fallback:
        # Read back by the apply layer (engine/facts.py): this roll goes on by Recreate until it is done.
        metadata.setdefault("annotations", {})[names.ROLLOUT_FALLBACK_ANNOTATION] = "true"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": storage.effective_replicas(reg, facts),
            "selector": {"matchLabels": names.selector_labels(reg)},
            # Outside the template: a change of either never rolls the pods.
            "strategy": storage.rollout_strategy(reg, facts),
            "progressDeadlineSeconds": reg.spec.rollout.progress_deadline_seconds,
            "template": pod_template(reg, facts),
        },
    }
