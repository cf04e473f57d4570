"""spec.pod, spec.env and spec.serviceAccount in the objects the builders make: each field lands where
Kubernetes reads it, Berth's own settings stay, and the user's spread and labels combine with Berth's as
docs/decisions/0032-pod-overrides.md says."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from berth_operator.builders import build_all
from berth_operator.builders.pod import SERVICE_ACCOUNT_ANNOTATION
from support.clusters.pss import restricted_violations

from .test_builders_deployment import built, containers

SELECTOR = {"app.kubernetes.io/name": "registry", "app.kubernetes.io/instance": "demo"}
BERTH_SPREAD = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": SELECTOR}}
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "node-role.kubernetes.io/infra", "operator": "Exists"}]}]}},
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"app": "gpu-job"}}, "topologyKey": "kubernetes.io/hostname"}}]}}
TOLERATIONS = [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
PROXY_ENV = [{"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"},
             {"name": "NO_PROXY", "valueFrom": {"configMapKeyRef": {"name": "egress", "key": "no-proxy"}}},
             {"name": "http_proxy", "valueFrom": {"secretKeyRef": {"name": "egress", "key": "url", "optional": True}}},
             {"name": "GODEBUG", "value": "http2client=0"}]


def spec(**fields):
    return {"config": {"storage": {"inmemory": {}}}, **fields}


def pod_of(reg, facts):
    return built(reg, facts)["Deployment"]["spec"]["template"]


def test_placement_and_pull_secrets_land_on_the_pod_as_written(registry_factory, facts_factory):
    reg = registry_factory(spec(pod={
        "nodeSelector": {"kubernetes.io/os": "linux"}, "tolerations": TOLERATIONS, "affinity": AFFINITY,
        "priorityClassName": "infra-critical", "imagePullSecrets": [{"name": "mirror-pull"}]}))
    template = pod_of(reg, facts_factory())
    pod = template["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"] == TOLERATIONS
    assert pod["affinity"] == AFFINITY
    assert pod["priorityClassName"] == "infra-critical"
    # Pod level: the kubelet uses them for every image of the pod, spec.image and the Berth image alike.
    assert pod["imagePullSecrets"] == [{"name": "mirror-pull"}]
    images = {c["name"]: c["image"] for c in (*pod["initContainers"], *pod["containers"])}
    assert images["registry-binary"] == reg.spec.image and images["agent"] == images["registry"]
    assert restricted_violations(template) == []  # Berth's PSS restricted settings stay


def test_without_overrides_the_pod_has_none_of_the_fields(registry_factory, facts_factory):
    pod = pod_of(registry_factory(spec()), facts_factory())["spec"]
    assert not {"nodeSelector", "tolerations", "affinity", "priorityClassName", "imagePullSecrets"} & set(pod)
    assert pod["topologySpreadConstraints"] == [BERTH_SPREAD]


def test_a_users_spread_is_added_to_berths_and_counts_this_registrys_pods_by_default(registry_factory,
                                                                                    facts_factory):
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    pod = pod_of(registry_factory(spec(pod={"topologySpreadConstraints": [zone]})), facts_factory())["spec"]
    assert pod["topologySpreadConstraints"] == [BERTH_SPREAD, {**zone, "labelSelector": {"matchLabels": SELECTOR}}]


def test_a_users_hostname_spread_replaces_berths(registry_factory, facts_factory):
    own = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"tier": "registry"}}}
    pod = pod_of(registry_factory(spec(pod={"topologySpreadConstraints": [own]})), facts_factory())["spec"]
    assert pod["topologySpreadConstraints"] == [own]


def test_labels_and_annotations_sit_beside_berths(registry_factory, facts_factory):
    reg = registry_factory(spec(pod={"labels": {"azure.workload.identity/use": "true", "team": "platform"},
                                     "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}}))
    objects = built(reg, facts_factory())
    metadata = objects["Deployment"]["spec"]["template"]["metadata"]
    assert metadata["labels"] == {**SELECTOR, "app.kubernetes.io/managed-by": "berth",
                                  "app.kubernetes.io/component": "registry",
                                  "azure.workload.identity/use": "true", "team": "platform"}
    assert metadata["annotations"] == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}
    # The Deployment's selector and the Service's are Berth's alone.
    assert objects["Deployment"]["spec"]["selector"] == {"matchLabels": SELECTOR}
    assert objects["Service"]["spec"]["selector"] == SELECTOR


@pytest.mark.parametrize("key", ["app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "pod-template-hash",
                                 "berth.dev/x"])
def test_a_colliding_label_is_refused_naming_the_field(registry_factory, key):
    with pytest.raises(ValidationError) as refused:
        registry_factory(spec(pod={"labels": {key: "other"}}))
    assert refused.value.errors()[0]["loc"] == ("spec", "pod", "labels")


def test_agent_resources(registry_factory, facts_factory):
    default_agent, _ = containers(built(registry_factory(spec()), facts_factory())["Deployment"])
    assert default_agent["resources"] == {"requests": {"cpu": "10m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}}
    wanted = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
    agent, registry = containers(built(registry_factory(spec(pod={"agentResources": wanted})),
                                       facts_factory())["Deployment"])
    assert agent["resources"] == wanted and registry["resources"] == {}


def test_env_goes_to_the_registry_after_berths_and_the_proxy_to_the_agents_preflights(registry_factory,
                                                                                       facts_factory):
    agent, registry = containers(built(registry_factory(spec(env=PROXY_ENV)), facts_factory())["Deployment"])
    names = [e["name"] for e in registry["env"]]
    assert names[-len(PROXY_ENV):] == [e["name"] for e in PROXY_ENV]
    assert registry["env"][-len(PROXY_ENV):] == PROXY_ENV  # values and key references as written
    assert len(set(names)) == len(names)
    # The agent: the proxy variables only, renamed so that its own API client does not take them up.
    assert agent["env"][2:] == [{**e, "name": f"BERTH_PREFLIGHT_{e['name']}"} for e in PROXY_ENV[:3]]


def test_service_account_annotations_and_the_pods_digest_of_them(registry_factory, facts_factory):
    irsa = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/berth-registry"}
    objects = built(registry_factory(spec(serviceAccount={"annotations": irsa})), facts_factory())
    assert objects["ServiceAccount"]["metadata"]["annotations"] == irsa
    digest = objects["Deployment"]["spec"]["template"]["metadata"]["annotations"][SERVICE_ACCOUNT_ANNOTATION]
    other = copy.deepcopy(irsa)
    other["eks.amazonaws.com/role-arn"] += "-2"
    again = built(registry_factory(spec(serviceAccount={"annotations": other})), facts_factory())
    assert again["Deployment"]["spec"]["template"]["metadata"]["annotations"][SERVICE_ACCOUNT_ANNOTATION] != digest
    plain = built(registry_factory(spec()), facts_factory())
    assert "annotations" not in plain["ServiceAccount"]["metadata"]
    assert "annotations" not in plain["Deployment"]["spec"]["template"]["metadata"]


def test_nothing_else_is_built_differently(registry_factory, facts_factory):
    """The overrides touch the pod template and the ServiceAccount only."""
    plain = {(o["kind"], o["metadata"]["name"]): o for o in build_all(registry_factory(spec()), facts_factory(),
                                                                       http_secret_value="v")}
    full = spec(pod={"labels": {"team": "a"}, "nodeSelector": {"a": "b"}, "imagePullSecrets": [{"name": "p"}]},
                env=PROXY_ENV,
                serviceAccount={"annotations": {"iam.gke.io/gcp-service-account": "r@p.iam.gserviceaccount.com"}})
    for obj in build_all(registry_factory(full), facts_factory(), http_secret_value="v"):
        if obj["kind"] not in ("Deployment", "ServiceAccount"):
            assert obj == plain[(obj["kind"], obj["metadata"]["name"])], obj["kind"]
