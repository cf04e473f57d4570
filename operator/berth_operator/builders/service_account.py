"""The agent's ServiceAccount."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import AGENT_COMPONENT, object_meta, registry_name


def name(reg: Registry) -> str:
    return f"{registry_name(reg)}-agent"


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    metadata = object_meta(reg, name(reg), AGENT_COMPONENT)
    annotations = reg.spec.service_account.annotations
    if annotations:  # the cloud's webhook or metadata server keys on these (docs/guide/placement-and-identity.md)
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata,
        # The pod template mounts the token into the agent container only.
        "automountServiceAccountToken": False,
    }


BEHAVIOURS = (Behaviour("v1", "ServiceAccount", builders=(build,)),)
