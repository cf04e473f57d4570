"""spec.networkPolicy: a NetworkPolicy (networking.k8s.io/v1) that admits the registry's port only from the peers the
user names, and its metrics ports only from the monitoring peers (docs/decisions/0031-exposure.md,
docs/guide/exposure.md, "Restricting who reaches the registry").

Read by the operator only: it makes one object, never reaches the Deployment, and the agent renders nothing from
it. A peer is Kubernetes' own NetworkPolicyPeer (an ipBlock, or a namespaceSelector and/or a podSelector), so what
a peer selects is what Kubernetes documents. Ingress only: egress is not restricted.
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator, model_validator

from .kube_types import LabelSelector
from .types import ApiModel

MAX_PEERS = 32
MAX_EXCEPT = 32
PEER_MESSAGE = "set ipBlock, or namespaceSelector and/or podSelector (not both kinds, not neither)"
# The shape only (the API server's schema checks no more, and CEL's CIDR functions need Kubernetes 1.31); the
# model checks the address (a network, no host bits) and that each except lies inside the cidr.
CIDR_PATTERN = r"^[0-9a-fA-F.:]+/[0-9]{1,3}$"


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(cidr, strict=True)
    except ValueError as exc:
        raise ValueError(f"{cidr[:64]!r} is not a CIDR network ({exc})") from None


class IpBlock(ApiModel):
    """Addresses outside the cluster's pods: the nodes (a NodePort pull), a load balancer's or its clients'."""

    cidr: str = Field(max_length=64, pattern=CIDR_PATTERN,
                      description="A network, IPv4 or IPv6 (10.0.0.0/16, fd00::/64), with no host bits set.")
    except_: list[str] = Field(
        default_factory=list, alias="except", max_length=MAX_EXCEPT,
        description="Networks inside cidr to leave out.",
        json_schema_extra={"items": {"type": "string", "maxLength": 64, "pattern": CIDR_PATTERN}})

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, cidr: str) -> str:
        _network(cidr)
        return cidr

    @model_validator(mode="after")
    def _inside(self) -> IpBlock:
        outer = _network(self.cidr)
        for value in self.except_:
            inner = _network(value)
            if inner.version != outer.version or not inner.subnet_of(outer) or inner == outer:  # type: ignore[arg-type]
                raise ValueError(f"except {value!r} must lie strictly inside cidr {self.cidr!r}")
        return self


class NetworkPolicyPeer(ApiModel):
    """Who is admitted, as a NetworkPolicy peer: pods of the Registry's namespace (podSelector), of the
    namespaces a namespaceSelector picks (both: those pods in those namespaces), or addresses (ipBlock)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {"x-kubernetes-validations": [
            {"rule": "has(self.ipBlock) != (has(self.namespaceSelector) || has(self.podSelector))",
             "message": PEER_MESSAGE}]}
    }

    namespace_selector: LabelSelector | None = Field(
        None, alias="namespaceSelector", description="Namespaces, by label ({}: all; one by name: matchLabels "
        "kubernetes.io/metadata.name: NAME). Alone: every pod in them.")
    pod_selector: LabelSelector | None = Field(
        None, alias="podSelector", description="Pods, by label ({}: all), in the Registry's namespace or, with "
        "namespaceSelector, in the namespaces it picks.")
    ip_block: IpBlock | None = Field(
        None, alias="ipBlock", description="Source addresses: nodes, load balancers, clients outside the cluster.")

    @model_validator(mode="after")
    def _one_kind(self) -> NetworkPolicyPeer:
        if (self.ip_block is not None) == (self.namespace_selector is not None or self.pod_selector is not None):
            raise ValueError(PEER_MESSAGE)
        return self


class NetworkPolicy(ApiModel):
    from_: list[NetworkPolicyPeer] = Field(
        default_factory=list, alias="from", max_length=MAX_PEERS,
        description="Who may reach the registry's port (spec.http.addr). Empty: every pod of the Registry's "
        "namespace, and no one else. Given: exactly these peers (add {podSelector: {}} to keep the Registry's "
        "namespace). An ingress controller's or Gateway's pods, and for a NodePort or LoadBalancer Service the "
        "nodes' or clients' addresses (ipBlock), must be listed here.")
    metrics_from: list[NetworkPolicyPeer] = Field(
        default_factory=list, alias="metricsFrom", max_length=MAX_PEERS,
        description="Who may scrape the metrics ports (agent-health 8081, reg-metrics 8082), e.g. the "
        "monitoring namespace. Empty: no one (the kubelet's probes come from the node, which NetworkPolicy "
        "admits).")


__all__ = ["IpBlock", "NetworkPolicy", "NetworkPolicyPeer"]
