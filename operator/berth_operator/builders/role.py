"""The agent's Role: its own Registry (read, and patch status), Events, its Registry's reload and garbage
collection Leases (get and update, those two objects by name), and read access to exactly the Secrets its pod
mounts (by name), which it also watches over the API so a rotation applies before the kubelet updates the volume;
the same for the ConfigMaps it mounts (token auth's trust), only when there are any."""

from __future__ import annotations

from typing import Any

from berth_api import GROUP, PLURAL, Registry

from . import lease
from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import AGENT_COMPONENT, object_meta, registry_name
from .pod import config_map_sources, secret_sources


def name(reg: Registry) -> str:
    return f"{registry_name(reg)}-agent"


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    own = [registry_name(reg)]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(reg, name(reg), AGENT_COMPONENT),
        "rules": [
            # list and watch with fieldSelector metadata.name=<name> are authorized per name
            # (docs/upstream.md#k8s-rbac-resource-names), so resourceNames scopes them too.
            {"apiGroups": [GROUP], "resources": [PLURAL], "resourceNames": own, "verbs": ["get", "list", "watch"]},
            {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "resourceNames": own, "verbs": ["patch"]},
            # patch: repeated events are coalesced by bumping the count of the existing one.
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            # Replicas restart one at a time: the agents take the reload Lease in turn (read, then an update
            # guarded by resourceVersion). The operator creates it; no agent may create, delete or list Leases.
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": [lease.name(reg)], "verbs": ["get", "update"]},
            # One agent runs a garbage collection: the holder of the GC Lease (same read-then-guarded-update, renewed
            # for the whole run; docs/decisions/0019-garbage-collection-inside-the-pods.md). Created by the operator
            # too.
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": [lease.gc_name(reg)], "verbs": ["get", "update"]},
            secrets_rule(reg, facts),
            *config_maps_rule(reg),
        ],
    }


def config_maps_rule(reg: Registry) -> list[dict[str, Any]]:
    """get/list/watch on the ConfigMaps the pod mounts, by name; no rule at all when it mounts none (an empty
    resourceNames would mean every ConfigMap in the namespace)."""
    mounted = sorted(set(config_map_sources(reg).values()))
    if not mounted:
        return []
    return [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": mounted,
             "verbs": ["get", "list", "watch"]}]


def secrets_rule(reg: Registry, facts: ClusterFacts) -> dict[str, Any]:
    """get/list/watch on the Secrets the pod mounts, by name. Never empty: an empty resourceNames would mean
    every Secret in the namespace, and the http secret (given or generated) is always mounted."""
    mounted = sorted(set(secret_sources(reg, facts).values()))
    if not mounted:
        raise AssertionError("the registry pod mounts no Secret")  # unreachable: the http secret always is
    return {"apiGroups": [""], "resources": ["secrets"], "resourceNames": mounted, "verbs": ["get", "list", "watch"]}


BEHAVIOURS = (Behaviour("rbac.authorization.k8s.io/v1", "Role", builders=(build,)),)
