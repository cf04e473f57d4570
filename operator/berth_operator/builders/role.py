"""The agent's Role: its own Registry (read, and patch status), Events, and its Registry's reload Lease (get and
update, that one object by name). Nothing on Secrets: those reach the agent as volumes."""

from __future__ import annotations

from typing import Any

from berth_api import GROUP, PLURAL, Registry

from . import names
from .context import ClusterFacts
from .meta import object_meta


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    own = [names.registry_name(reg)]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(reg, names.role_name(reg), names.AGENT_COMPONENT),
        "rules": [
            # list and watch with fieldSelector metadata.name=<name> are authorized per name (field-notes
            # section 3), so resourceNames scopes them too.
            {"apiGroups": [GROUP], "resources": [PLURAL], "resourceNames": own, "verbs": ["get", "list", "watch"]},
            {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "resourceNames": own, "verbs": ["patch"]},
            # patch: repeated events are coalesced by bumping the count of the existing one.
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            # Replicas restart one at a time: the agents take the reload Lease in turn (read, then an update
            # guarded by resourceVersion). The operator creates it; no agent may create, delete or list Leases.
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": [names.lease_name(reg)], "verbs": ["get", "update"]},
        ],
    }
