"""The NetworkPolicy (networking.k8s.io/v1) of a Registry that asks for one (spec.networkPolicy; pruned when the
field goes).

It selects the Registry's pods and isolates them for ingress only (policyTypes [Ingress]): the registry's port
(spec.http.addr's, as the container serves it) is admitted from spec.networkPolicy.from, or, when that is empty,
from every pod of the Registry's namespace; the metrics ports (the agent's, with its probes, and the registry's
through the agent) from spec.networkPolicy.metricsFrom, when given. Nothing else: the outbox's relay and the
registry's debug ports listen on the pod's loopback. Ports by number, not by name: not every CNI resolves named
ports in a policy. The kubelet's probes come from the pod's node, which NetworkPolicy always admits.

Egress is not restricted (the storage's endpoints, notifications, the pull-through cache's upstream, the API
server): the policy has no Egress type, so it adds no egress isolation. Nothing of it reaches the Deployment.
"""

from __future__ import annotations

from typing import Any

from berth_api import Registry
from berth_api.kube_types import kube_dump
from berth_api.network_policy import NetworkPolicyPeer
from berth_api.pod import AGENT_HEALTH_PORT, REGISTRY_METRICS_PORT

from .behaviour import Behaviour
from .context import ClusterFacts
from .meta import REGISTRY_COMPONENT, object_meta, registry_name, selector_labels

API_VERSION = "networking.k8s.io/v1"
KIND = "NetworkPolicy"
# Every pod of the Registry's namespace: what an empty spec.networkPolicy.from admits.
OWN_NAMESPACE: list[dict[str, Any]] = [{"podSelector": {}}]


def name(reg: Registry) -> str:
    return registry_name(reg)


def _peer(peer: NetworkPolicyPeer) -> dict[str, Any]:
    """The peer as the API server stores it: an empty except list left out (omitempty), selectors as written
    (an empty one, {}, selects all and is kept)."""
    dumped = kube_dump(peer)
    if not dumped.get("ipBlock", {}).get("except", True):
        del dumped["ipBlock"]["except"]
    return dumped


def _peers(peers: list[NetworkPolicyPeer]) -> list[dict[str, Any]]:
    return [_peer(peer) for peer in peers]


def _ports(*numbers: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": number} for number in numbers]


def build(reg: Registry, facts: ClusterFacts) -> dict[str, Any] | None:
    wanted = reg.spec.network_policy
    if wanted is None:
        return None
    ingress = [{"from": _peers(wanted.from_) or [dict(peer) for peer in OWN_NAMESPACE],
                "ports": _ports(reg.spec.http.port)}]
    if wanted.metrics_from:
        ingress.append({"from": _peers(wanted.metrics_from), "ports": _ports(AGENT_HEALTH_PORT, REGISTRY_METRICS_PORT)})
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": object_meta(reg, name(reg), REGISTRY_COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(reg)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


BEHAVIOURS = (Behaviour(API_VERSION, KIND, builders=(build,), prune=name),)
