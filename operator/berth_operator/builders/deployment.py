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
    if storage.single_writer(reg, facts):
        # The old pod must let go of the ReadWriteOnce claim before the new one can mount it.
        strategy: dict[str, Any] = {"type": "Recreate"}
    else:
        strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(reg, names.deployment_name(reg), names.REGISTRY_COMPONENT),
        "spec": {
            "replicas": storage.effective_replicas(reg, facts),
            "selector": {"matchLabels": names.selector_labels(reg)},
            "strategy": strategy,
            "template": pod_template(reg, facts),
        },
    }
