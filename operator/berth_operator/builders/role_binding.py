"""Binds the agent's Role to its ServiceAccount."""

from __future__ import annotations

from typing import Any

from berth_api import Registry

from . import names
from .context import ClusterFacts
from .meta import object_meta


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(reg, names.role_binding_name(reg), names.AGENT_COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.role_name(reg)},
        "subjects": [
            {"kind": "ServiceAccount", "name": names.service_account_name(reg), "namespace": names.namespace(reg)}
        ],
    }
