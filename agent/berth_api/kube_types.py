"""Kubernetes core/v1 shapes a Registry passes on to its pod as written: scheduling (affinity, tolerations, topology
spread), image pull Secrets and environment variables (docs/decisions/0032-pod-overrides.md).

Full upstream schemas, field for field as k8s.io/api/core/v1 (v1.36) has them, strict like every Berth model: a typo
is refused at admission, naming the field, instead of surfacing later as a Deployment the API server refuses.
Written as models (not copied OpenAPI) because the CRD is generated from the models; descriptions are kept short
(the CRD travels in kubectl's last-applied annotation, limited to 256 KiB: docs/decisions/0032-pod-overrides.md). The
builders dump them with `kube_dump`: camelCase, unset fields left out, as the API server stores them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from .types import INT32_MAX, ApiModel

# Bounds: the API server needs them to cost the CEL rules over these lists, and nothing sensible comes near them.
MAX_TERMS = 32
MAX_VALUES = 256
MAX_NAME = 253
LABEL_KEY_MAX = 317  # a DNS-subdomain prefix (253), '/', a name (63)
ONE_SOURCE_MESSAGE = "set exactly one of secretKeyRef and configMapKeyRef"
# Upstream's own checks of a toleration (k8s.io/kubernetes pkg/apis/core/validation ValidateTolerations).
TOLERATION_RULES = (
    ("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
     "value must be empty when operator is Exists"),
    ("(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
     "an empty key needs operator Exists"),
    ("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
     "tolerationSeconds needs effect NoExecute"),
)

def kube_dump(model: BaseModel | None) -> Any:
    """The model as the Kubernetes API takes it: aliases, and no field the user left unset."""
    return None if model is None else model.model_dump(by_alias=True, exclude_none=True)


class _Requirement(ApiModel):
    @field_validator("values", check_fields=False)
    @classmethod
    def _bounded(cls, values: list[str] | None) -> list[str] | None:
        if values is not None and any(len(value) > MAX_NAME for value in values):
            raise ValueError(f"each value has at most {MAX_NAME} characters")
        return values


class LabelSelectorRequirement(_Requirement):
    key: str = Field(min_length=1, max_length=LABEL_KEY_MAX, description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="In, NotIn, Exists or "
                                                                                   "DoesNotExist.")
    values: list[str] | None = Field(None, max_length=MAX_VALUES, description="Values (In and NotIn).")


class LabelSelector(ApiModel):
    match_labels: dict[str, str] | None = Field(None, alias="matchLabels", description="Labels that must match.")
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        None, alias="matchExpressions", max_length=MAX_TERMS, description="Requirements, ANDed.")


class NodeSelectorRequirement(_Requirement):
    key: str = Field(min_length=1, max_length=LABEL_KEY_MAX, description="The node label key (or field).")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="In, NotIn, Exists, DoesNotExist, Gt or Lt.")
    values: list[str] | None = Field(None, max_length=MAX_VALUES, description="Values (one integer for Gt and Lt).")


class NodeSelectorTerm(ApiModel):
    match_expressions: list[NodeSelectorRequirement] | None = Field(
        None, alias="matchExpressions", max_length=MAX_TERMS, description="Requirements on node labels, ANDed.")
    match_fields: list[NodeSelectorRequirement] | None = Field(
        None, alias="matchFields", max_length=MAX_TERMS, description="Requirements on node fields, ANDed.")


class NodeSelector(ApiModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(
        alias="nodeSelectorTerms", max_length=MAX_TERMS, description="Terms, ORed.")


class PreferredSchedulingTerm(ApiModel):
    weight: int = Field(ge=1, le=100, description="Weight, 1-100.")
    preference: NodeSelectorTerm = Field(description="The node selector term.")


class NodeAffinity(ApiModel):
    required: NodeSelector | None = Field(
        None, alias="requiredDuringSchedulingIgnoredDuringExecution", description="Hard requirement.")
    preferred: list[PreferredSchedulingTerm] | None = Field(
        None, alias="preferredDuringSchedulingIgnoredDuringExecution", max_length=MAX_TERMS,
        description="Soft preferences.")


class PodAffinityTerm(ApiModel):
    label_selector: LabelSelector | None = Field(None, alias="labelSelector", description="Pods to match.")
    namespace_selector: LabelSelector | None = Field(
        None, alias="namespaceSelector", description="Namespaces to match.")
    namespaces: list[str] | None = Field(None, max_length=MAX_TERMS, description="Namespaces to match.")
    topology_key: str = Field(alias="topologyKey", min_length=1, max_length=LABEL_KEY_MAX,
                              description="Node label key of the topology domain.")
    match_label_keys: list[str] | None = Field(
        None, alias="matchLabelKeys", max_length=MAX_TERMS, description="Pod label keys added to labelSelector "
        "with the incoming pod's values.")
    mismatch_label_keys: list[str] | None = Field(
        None, alias="mismatchLabelKeys", max_length=MAX_TERMS, description="Pod label keys added to labelSelector "
        "as NotIn the incoming pod's values.")


class WeightedPodAffinityTerm(ApiModel):
    weight: int = Field(ge=1, le=100, description="Weight, 1-100.")
    pod_affinity_term: PodAffinityTerm = Field(alias="podAffinityTerm", description="The pod affinity term.")


class PodAffinity(ApiModel):
    required: list[PodAffinityTerm] | None = Field(
        None, alias="requiredDuringSchedulingIgnoredDuringExecution", max_length=MAX_TERMS,
        description="Hard requirements.")
    preferred: list[WeightedPodAffinityTerm] | None = Field(
        None, alias="preferredDuringSchedulingIgnoredDuringExecution", max_length=MAX_TERMS,
        description="Soft preferences.")


class Affinity(ApiModel):
    node_affinity: NodeAffinity | None = Field(None, alias="nodeAffinity", description="Node affinity.")
    pod_affinity: PodAffinity | None = Field(None, alias="podAffinity", description="Pod affinity.")
    pod_anti_affinity: PodAffinity | None = Field(None, alias="podAntiAffinity", description="Pod anti-affinity.")


class Toleration(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": {"x-kubernetes-validations": [
        {"rule": rule, "message": message} for rule, message in TOLERATION_RULES]}}

    key: str | None = Field(None, max_length=LABEL_KEY_MAX, description="Taint key (empty with Exists: all).")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Equal (default) or Exists.")
    value: str | None = Field(None, max_length=MAX_NAME, description="Taint value (Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to match (empty: all).")
    toleration_seconds: int | None = Field(
        None, alias="tolerationSeconds", description="How long a NoExecute taint is tolerated.")

    @model_validator(mode="after")
    def _upstream_rules(self) -> Toleration:
        operator = self.operator or "Equal"
        if operator == "Exists" and self.value:
            raise ValueError(TOLERATION_RULES[0][1])
        if not self.key and operator != "Exists":
            raise ValueError(TOLERATION_RULES[1][1])
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError(TOLERATION_RULES[2][1])
        return self


class TopologySpreadConstraint(ApiModel):
    max_skew: int = Field(alias="maxSkew", ge=1, le=INT32_MAX, description="Largest allowed skew.")
    topology_key: str = Field(alias="topologyKey", min_length=1, max_length=LABEL_KEY_MAX,
                              description="Node label key of the topology domain.")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        alias="whenUnsatisfiable", description="DoNotSchedule or ScheduleAnyway.")
    label_selector: LabelSelector | None = Field(
        None, alias="labelSelector", description="Pods counted; Berth's selector when absent.")
    min_domains: int | None = Field(None, alias="minDomains", ge=1, le=INT32_MAX, description="Minimum domains.")
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(
        None, alias="nodeAffinityPolicy", description="Honor or Ignore.")
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(
        None, alias="nodeTaintsPolicy", description="Honor or Ignore.")
    match_label_keys: list[str] | None = Field(
        None, alias="matchLabelKeys", max_length=MAX_TERMS, description="Pod label keys added to labelSelector.")


class LocalObjectReference(ApiModel):
    name: str = Field(min_length=1, max_length=MAX_NAME, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                      r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", description="Name of the Secret.")


class KeySelector(ApiModel):
    name: str = Field(min_length=1, max_length=MAX_NAME, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                      r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", description="Name of the object, in this namespace.")
    key: str = Field(min_length=1, max_length=MAX_NAME, pattern=r"^[-._a-zA-Z0-9]+$", description="The key.")
    optional: bool | None = Field(None, description="Whether the variable may be left out when the key is missing.")


class EnvVarSource(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": {"x-kubernetes-validations": [
        {"rule": "has(self.secretKeyRef) != has(self.configMapKeyRef)",
         "message": ONE_SOURCE_MESSAGE}]}}

    secret_key_ref: KeySelector | None = Field(None, alias="secretKeyRef", description="A key of a Secret.")
    config_map_key_ref: KeySelector | None = Field(None, alias="configMapKeyRef", description="A key of a ConfigMap.")

    @model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        if (self.secret_key_ref is None) == (self.config_map_key_ref is None):
            raise ValueError(ONE_SOURCE_MESSAGE)
        return self


__all__ = ["Affinity", "EnvVarSource", "KeySelector", "LabelSelector", "LocalObjectReference", "Toleration",
           "TopologySpreadConstraint", "kube_dump"]
