"""Binds the agent's Role to its ServiceAccount."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import role, service_account
from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import AGENT_COMPONENT, namespace, object_meta, registry_name


def name(reg: Registry) -> str:
    return f"{registry_name(reg)}-agent"


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(reg, name(reg), AGENT_COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role.name(reg)},
        "subjects": [{"kind": "ServiceAccount", "name": service_account.name(reg), "namespace": namespace(reg)}],
    }


BEHAVIOURS = (Behaviour("rbac.authorization.k8s.io/v1", "RoleBinding", builders=(build,)),)
