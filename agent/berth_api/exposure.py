"""spec.service, spec.ingress, spec.gateway and the cert-manager issuer of a TLS certificate: how a Registry is reached
from outside its namespace, and by the cluster's own nodes (docs/decisions/0031-exposure.md).

Read by the operator only: each makes one object (the Service's fields, an Ingress, an HTTPRoute, a cert-manager
Certificate); none reaches the Deployment, and the agent renders nothing from them.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .monitoring import _LABEL_KEY, _LABEL_VALUE
from .types import ApiModel, ObjectName

CERT_MANAGER_GROUP = "cert-manager.io"
GATEWAY_GROUP = "gateway.networking.k8s.io"
# RFC 1123 host names, with an optional leading wildcard label (as Ingress and HTTPRoute take them).
HOSTNAME_PATTERN = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Annotation keys are label keys; values are free text.
_MAX_ANNOTATIONS = 64

NODE_PORT_MESSAGE = "service.nodePort needs service.type NodePort or LoadBalancer"
LB_CLASS_MESSAGE = "service.loadBalancerClass needs service.type LoadBalancer"
TRAFFIC_POLICY_MESSAGE = "service.externalTrafficPolicy needs service.type NodePort or LoadBalancer"
TLS_SOURCE_MESSAGE = "set exactly one of secretName and issuerRef"
DNS_NAMES_MESSAGE = "dnsNames needs issuerRef (a Secret's certificate names what it names)"


def _check_labels(values: dict[str, str], what: str, *, check_values: bool) -> dict[str, str]:
    if len(values) > _MAX_ANNOTATIONS:
        raise ValueError(f"at most {_MAX_ANNOTATIONS} {what}")
    for key, value in values.items():
        if len(key) > 316 or not _LABEL_KEY.match(key):
            raise ValueError(f"{what[:-1]} key {key[:80]!r} is not a Kubernetes {what[:-1]} key")
        if check_values and not _LABEL_VALUE.match(value):
            raise ValueError(f"the value of {what[:-1]} {key!r} is not a Kubernetes label value")
    return values


class IssuerRef(ApiModel):
    """A cert-manager issuer (cert-manager.io/v1 Certificate.spec.issuerRef)."""

    name: ObjectName = Field(description="Name of the Issuer (this namespace) or ClusterIssuer.")
    kind: Literal["Issuer", "ClusterIssuer"] = Field("Issuer", description="Issuer or ClusterIssuer.")
    group: str = Field(CERT_MANAGER_GROUP, min_length=1, max_length=253,
                       description="API group of the issuer: cert-manager.io, or an external issuer's.")


class Service(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "!has(self.nodePort) || self.type in ['NodePort', 'LoadBalancer']",
                 "message": NODE_PORT_MESSAGE},
                {"rule": "!has(self.loadBalancerClass) || self.type == 'LoadBalancer'", "message": LB_CLASS_MESSAGE},
                {"rule": "!has(self.externalTrafficPolicy) || self.type in ['NodePort', 'LoadBalancer']",
                 "message": TRAFFIC_POLICY_MESSAGE},
            ]
        }
    }

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP", description="Service type of the registry's Service.")
    node_port: int | None = Field(
        None, alias="nodePort", ge=1, le=65535,
        description="Node port of the registry's port (NodePort or LoadBalancer; the cluster's node port range, "
        "30000-32767 by default). Absent: Kubernetes picks one.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations on the Service.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels on the Service (Berth's own win).")
    load_balancer_class: str | None = Field(
        None, alias="loadBalancerClass", min_length=1, max_length=316,
        description="The load balancer implementation (LoadBalancer only). Kubernetes refuses to change it in "
        "place: Berth then replaces the Service.")
    external_traffic_policy: Literal["Cluster", "Local"] | None = Field(
        None, alias="externalTrafficPolicy", description="Cluster or Local (NodePort or LoadBalancer only).")

    @field_validator("annotations")
    @classmethod
    def _annotation_keys(cls, values: dict[str, str]) -> dict[str, str]:
        return _check_labels(values, "annotations", check_values=False)

    @field_validator("labels")
    @classmethod
    def _label_syntax(cls, values: dict[str, str]) -> dict[str, str]:
        return _check_labels(values, "labels", check_values=True)

    @model_validator(mode="after")
    def _type_fields(self) -> Service:
        if self.node_port is not None and self.type == "ClusterIP":
            raise ValueError(NODE_PORT_MESSAGE)
        if self.load_balancer_class is not None and self.type != "LoadBalancer":
            raise ValueError(LB_CLASS_MESSAGE)
        if self.external_traffic_policy is not None and self.type == "ClusterIP":
            raise ValueError(TRAFFIC_POLICY_MESSAGE)
        return self


class IngressTls(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": {"x-kubernetes-validations": [
            {"rule": "has(self.secretName) != has(self.issuerRef)", "message": TLS_SOURCE_MESSAGE}]}
    }

    secret_name: ObjectName | None = Field(
        None, alias="secretName", description="A kubernetes.io/tls Secret for the hosts, made by you.")
    issuer_ref: IssuerRef | None = Field(
        None, alias="issuerRef", description="A cert-manager issuer: Berth makes a Certificate for the hosts "
        "(Secret <registry>-ingress-tls).")

    @model_validator(mode="after")
    def _one_source(self) -> IngressTls:
        if (self.secret_name is None) == (self.issuer_ref is None):
            raise ValueError(TLS_SOURCE_MESSAGE)
        return self


def check_hostnames(hosts: list[str]) -> list[str]:
    for host in hosts:
        if len(host) > 253 or not re.match(HOSTNAME_PATTERN, host):
            raise ValueError(f"{host[:80]!r} is not a DNS host name")
    if len(set(hosts)) != len(hosts):
        raise ValueError("each host once")
    return hosts


class Ingress(ApiModel):
    class_name: str | None = Field(
        None, alias="className", min_length=1, max_length=253, description="IngressClass; absent: the default.")
    hosts: list[str] = Field(
        min_length=1, max_length=16, description="Host names the registry is served at (at least one).",
        json_schema_extra={"items": {"type": "string", "maxLength": 253, "pattern": HOSTNAME_PATTERN}})
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations on the Ingress. Berth adds ingress-nginx's for uploads "
        "(no body-size limit, no request buffering, 10-minute timeouts) unless you set them.")
    tls: IngressTls | None = Field(None, description="TLS at the ingress, from a Secret or from cert-manager.")

    @field_validator("hosts")
    @classmethod
    def _host_names(cls, hosts: list[str]) -> list[str]:
        return check_hostnames(hosts)

    @field_validator("annotations")
    @classmethod
    def _annotation_keys(cls, values: dict[str, str]) -> dict[str, str]:
        return _check_labels(values, "annotations", check_values=False)


class ParentRef(ApiModel):
    """A Gateway (or another parent) the HTTPRoute attaches to (gateway.networking.k8s.io/v1 ParentReference)."""

    name: ObjectName = Field(description="Name of the Gateway.")
    namespace: ObjectName | None = Field(None, description="Namespace of the Gateway; absent: the Registry's.")
    section_name: str | None = Field(
        None, alias="sectionName", min_length=1, max_length=253, description="A listener of the Gateway.")
    port: int | None = Field(None, ge=1, le=65535, description="A port of the Gateway.")
    group: str = Field(GATEWAY_GROUP, max_length=253, description="API group of the parent.")
    kind: str = Field("Gateway", min_length=1, max_length=63, description="Kind of the parent.")


class Gateway(ApiModel):
    parent_refs: list[ParentRef] = Field(
        alias="parentRefs", min_length=1, max_length=32, description="Gateways the HTTPRoute attaches to.")
    hostnames: list[str] = Field(
        default_factory=list, max_length=16, description="Host names of the HTTPRoute; absent: the listeners'.",
        json_schema_extra={"items": {"type": "string", "maxLength": 253, "pattern": HOSTNAME_PATTERN}})

    @field_validator("hostnames")
    @classmethod
    def _host_names(cls, hosts: list[str]) -> list[str]:
        return check_hostnames(hosts)


__all__ = ["Gateway", "Ingress", "IngressTls", "IssuerRef", "ParentRef", "Service"]
