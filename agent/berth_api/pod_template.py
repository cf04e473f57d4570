"""spec.pod, spec.env and spec.serviceAccount: what a user sets on the registry pod, its registry container and its
ServiceAccount (docs/decisions/0032-pod-overrides.md, docs/design.md §4.8).

Read by the operator only; every field here shapes the Deployment (or the ServiceAccount), so an edit rolls the
pods. Berth's own labels, annotations and environment are reserved: a user's that would collide with them is
refused at admission (a CEL rule on the field) and by the model, naming the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from .kube_types import (
    LABEL_KEY_MAX,
    Affinity,
    EnvVarSource,
    LocalObjectReference,
    Toleration,
    TopologySpreadConstraint,
)
from .monitoring import _LABEL_KEY, _LABEL_VALUE
from .types import ApiModel, Quantity

# The labels Berth puts on every object it makes, and selects its pods by. The operator's names module uses these.
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
COMPONENT_LABEL = "app.kubernetes.io/component"
BERTH_LABELS = (NAME_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL, COMPONENT_LABEL)
# The Deployment controller's own pod label: a user's would break the ReplicaSets' selection.
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
RESERVED_LABELS = (*BERTH_LABELS, POD_TEMPLATE_HASH_LABEL)
# Berth's annotations (berth.dev/gc-requested-at, ...) and any it may add later.
RESERVED_PREFIX = "berth.dev/"
# Distribution reads REGISTRY_* as config overrides (docs/upstream.md#dist-env-overrides), and berth-supervise reads
# BERTH_*: either would bypass the config the agent renders. OTEL_TRACES_EXPORTER is set by Berth
# (docs/upstream.md#dist-otel).
RESERVED_ENV_PREFIXES = ("REGISTRY_", "BERTH_")
# AWS_CA_BUNDLE: Distribution 2.8 panics at start with it set, and 3.1.1 then trusts that file alone
# (docs/decisions/0035-s3-credentials-and-ca.md): storage.s3.ca is the way.
RESERVED_ENV = ("OTEL_TRACES_EXPORTER", "AWS_CA_BUNDLE")
# An egress proxy's variables: Go's net/http (golang.org/x/net/http/httpproxy FromEnvironment) reads each in upper
# case, else lower case; the agent's pre-flights are given the same (agent/berth_agent/apply/preflight_http.py).
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
MAX_LABELS = 64
MAX_ENV = 64
MAX_ENV_VALUE = 32768
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"

LABELS_MESSAGE = (f"collides with Berth's own labels ({', '.join(RESERVED_LABELS)}, {RESERVED_PREFIX}*): "
                  "Berth sets and selects by them")
ANNOTATIONS_MESSAGE = f"collides with Berth's own annotations ({RESERVED_PREFIX}*)"
ENV_MESSAGE = ("names a variable reserved by Berth: REGISTRY_* would override the config the agent renders "
               "(Distribution reads them as config), BERTH_* and OTEL_TRACES_EXPORTER are Berth's own, "
               "AWS_CA_BUNDLE panics Distribution 2.8 (give an S3 endpoint's CA in config.storage.s3.ca)")


def _cel_not_reserved_key(reserved: tuple[str, ...]) -> str:
    listed = ", ".join(f"'{key}'" for key in reserved)
    return f"self.all(k, !(k in [{listed}]) && !k.startsWith('{RESERVED_PREFIX}'))"


def _check_keys(values: dict[str, str], what: str, *, label_values: bool) -> None:
    if len(values) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} {what}")
    for key, value in values.items():
        if len(key) > LABEL_KEY_MAX or not _LABEL_KEY.match(key):
            raise ValueError(f"{key[:80]!r} is not a Kubernetes {what[:-1]} key")
        if label_values and not _LABEL_VALUE.match(value):
            raise ValueError(f"the value of {key!r} is not a Kubernetes label value")


def _not_berths(values: dict[str, str], what: str, reserved: tuple[str, ...], message: str) -> dict[str, str]:
    """Kubernetes label (or annotation) keys, none of them `reserved` or under berth.dev/ (the CEL rule's check)."""
    _check_keys(values, what, label_values=what == "labels")
    clashing = sorted(key for key in values if key in reserved or key.startswith(RESERVED_PREFIX))
    if clashing:
        raise ValueError(f"{', '.join(clashing)} {message}")
    return values


def _labels(values: dict[str, str]) -> dict[str, str]:
    return _not_berths(values, "labels", RESERVED_LABELS, LABELS_MESSAGE)


def _annotations(values: dict[str, str]) -> dict[str, str]:
    return _not_berths(values, "annotations", (), ANNOTATIONS_MESSAGE)


def _keys_schema(description: str, reserved: tuple[str, ...], message: str) -> dict[str, Any]:
    return {"description": description, "maxProperties": MAX_LABELS, "x-kubernetes-validations": [
        {"rule": _cel_not_reserved_key(reserved), "message": message}]}


def _labels_schema(description: str) -> dict[str, Any]:
    return _keys_schema(description, RESERVED_LABELS, LABELS_MESSAGE)


def _annotations_schema(description: str) -> dict[str, Any]:
    return _keys_schema(description, (), ANNOTATIONS_MESSAGE)


def reserved_env(name: str) -> bool:
    return name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV


class EnvVar(ApiModel):
    """One environment variable of the registry container: a value, or a key of a Secret or ConfigMap."""

    model_config = ApiModel.model_config | {"json_schema_extra": {"x-kubernetes-validations": [
        {"rule": "has(self.value) != has(self.valueFrom)", "message": "set exactly one of value and valueFrom"},
        {"rule": " && ".join([*(f"!self.name.startsWith('{p}')" for p in RESERVED_ENV_PREFIXES),
                              *(f"self.name != '{n}'" for n in RESERVED_ENV)]),
         "message": ENV_MESSAGE}]}}

    name: str = Field(min_length=1, max_length=253, pattern=ENV_NAME_PATTERN, description="Variable name.")
    value: str | None = Field(None, max_length=MAX_ENV_VALUE, description="The value.")
    value_from: EnvVarSource | None = Field(None, alias="valueFrom", description="The value from a Secret or "
                                            "ConfigMap key (read by the kubelet when the container starts).")

    @model_validator(mode="after")
    def _not_reserved(self) -> EnvVar:  # on the item, where the CEL rule is: both name spec.env.N
        if reserved_env(self.name):
            raise ValueError(ENV_MESSAGE)
        if (self.value is None) == (self.value_from is None):
            raise ValueError("set exactly one of value and valueFrom")
        return self


class Resources(ApiModel):
    requests: dict[str, Quantity] = Field(default_factory=dict, description="Resources requested.")
    limits: dict[str, Quantity] = Field(default_factory=dict, description="Resource limits.")

    def kube(self) -> dict[str, dict[str, str]]:
        """As a container's `resources`: empty parts left out."""
        return {key: dict(value) for key, value in self.model_dump().items() if value}


class PodOverrides(ApiModel):
    """What a user may set on the registry pod. Berth's own settings stay (PSS restricted, a read-only root
    filesystem, its selector labels, its hostname spread): docs/decisions/0032-pod-overrides.md."""

    labels: dict[str, str] = Field(
        default_factory=dict, json_schema_extra=_labels_schema(
            "Labels on the registry pods (e.g. azure.workload.identity/use). Berth's own are refused."))
    annotations: dict[str, str] = Field(
        default_factory=dict, json_schema_extra=_annotations_schema(
            "Annotations on the registry pods. berth.dev/* are refused."))
    node_selector: dict[str, str] = Field(
        default_factory=dict, alias="nodeSelector", description="Node labels the pods must run on.")
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=64, description="Taints the pods tolerate.")
    affinity: Affinity | None = Field(None, description="Node affinity, pod affinity and anti-affinity.")
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(
        default_factory=list, alias="topologySpreadConstraints", max_length=16,
        description="Spread constraints, added to Berth's hostname spread (which a constraint on "
        "kubernetes.io/hostname replaces); labelSelector defaults to the registry's pods.")
    priority_class_name: str | None = Field(
        None, alias="priorityClassName", min_length=1, max_length=253, description="PriorityClass of the pods.")
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, alias="imagePullSecrets", max_length=16,
        description="Secrets (kubernetes.io/dockerconfigjson) for pulling every image of the pod: spec.image and "
        "the Berth image.")
    agent_resources: Resources | None = Field(
        None, alias="agentResources", description="Resources of the agent container; Berth's defaults (requests "
        "10m CPU and 96Mi, limit 256Mi) when absent.")

    @field_validator("labels")
    @classmethod
    def _labels_not_reserved(cls, values: dict[str, str]) -> dict[str, str]:
        return _labels(values)

    @field_validator("annotations")
    @classmethod
    def _annotations_not_reserved(cls, values: dict[str, str]) -> dict[str, str]:
        return _annotations(values)

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, values: dict[str, str]) -> dict[str, str]:
        _check_keys(values, "labels", label_values=True)
        return values


class ServiceAccountSettings(ApiModel):
    annotations: dict[str, str] = Field(
        default_factory=dict, json_schema_extra=_annotations_schema(
            "Annotations on the registry's ServiceAccount, for workload identity (eks.amazonaws.com/role-arn, "
            "iam.gke.io/gcp-service-account, azure.workload.identity/client-id). berth.dev/* are refused."))

    @field_validator("annotations")
    @classmethod
    def _annotations_not_reserved(cls, values: dict[str, str]) -> dict[str, str]:
        return _annotations(values)


def env_names(env: list[EnvVar]) -> list[EnvVar]:
    seen: set[str] = set()
    for var in env:
        if var.name in seen:
            raise ValueError(f"{var.name} is set twice")
        seen.add(var.name)
    return env


__all__ = ["BERTH_LABELS", "PROXY_ENV", "EnvVar", "PodOverrides", "Resources", "ServiceAccountSettings", "env_names",
           "reserved_env"]
