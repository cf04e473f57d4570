"""spec.networkPolicy: the NetworkPolicy selects the Registry's pods for ingress only, admits the
registry's port from the peers given (the Registry's namespace when none are) and the metrics ports from
metricsFrom only, by the numbers the pod template serves them on; the model and its CEL rule refuse a peer
that is neither or both kinds, and a bad CIDR."""

from __future__ import annotations

import pydantic
import pytest

from berth_api.network_policy import PEER_MESSAGE
from berth_operator.builders import build_all, metrics_service, network_policy
from berth_operator.builders.kinds import BEHAVIOURS, PRUNABLE_KINDS
from berth_operator.builders.meta import selector_labels
from berth_operator.core.kinds import KINDS

INMEMORY = {"config": {"storage": {"inmemory": {}}}}
MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
INGRESS_NGINX = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}},
                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}}}


def _container_ports(objects: list[dict]) -> dict[str, int]:
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    return {port["name"]: port["containerPort"]
            for container in (*pod["initContainers"], *pod["containers"]) for port in container.get("ports", ())}


def test_absent_builds_nothing(registry_factory, facts_factory):
    reg = registry_factory(INMEMORY)
    assert network_policy.build(reg, facts_factory()) is None
    assert not [o for o in build_all(reg, facts_factory(), http_secret_value=None) if o["kind"] == "NetworkPolicy"]


def test_empty_admits_the_registry_port_from_its_own_namespace_only(registry_factory, facts_factory):
    reg = registry_factory({**INMEMORY, "networkPolicy": {}})
    objects = build_all(reg, facts_factory(), http_secret_value=None)
    [policy] = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policy == network_policy.build(reg, facts_factory())
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["metadata"]["name"] == network_policy.name(reg) == "demo"
    assert policy["metadata"]["namespace"] == "registries"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == reg.metadata["uid"]
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": selector_labels(reg)}
    assert spec["policyTypes"] == ["Ingress"]  # no egress isolation
    assert spec["ingress"] == [{"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 5000}]}]
    assert _container_ports(objects)["http"] == 5000
    # Before the Deployment: a new Registry's pods are isolated from their start.
    kinds = [o["kind"] for o in objects]
    assert kinds.index("NetworkPolicy") < kinds.index("Deployment")


def test_peers_and_metrics_peers_are_passed_on_as_written(registry_factory, facts_factory):
    peers = [INGRESS_NGINX, {"podSelector": {"matchExpressions": [{"key": "role", "operator": "In",
                                                                   "values": ["builder"]}]}},
             {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.9.0/24"]}}, {"ipBlock": {"cidr": "fd00::/64"}}]
    reg = registry_factory({"config": {"storage": {"inmemory": {}}}, "http": {"addr": ":5443",
                                                                            "tls": {"secretName": "tls"}},
                            "networkPolicy": {"from": peers, "metricsFrom": [MONITORING]}})
    objects = build_all(reg, facts_factory(), http_secret_value=None)
    policy = network_policy.build(reg, facts_factory())
    assert policy is not None
    registry_rule, metrics_rule = policy["spec"]["ingress"]
    assert registry_rule == {"from": peers, "ports": [{"protocol": "TCP", "port": 5443}]}
    assert metrics_rule["from"] == [MONITORING]
    ports = _container_ports(objects)
    assert ports["https"] == 5443
    assert metrics_rule["ports"] == [{"protocol": "TCP", "port": ports["agent-health"]},
                                     {"protocol": "TCP", "port": ports["reg-metrics"]}]
    # The metrics Service's ports are those the policy admits.
    [metrics] = [o for o in objects if o["metadata"]["name"] == metrics_service.name(reg)]
    assert sorted(p["port"] for p in metrics["spec"]["ports"]) == sorted(p["port"] for p in metrics_rule["ports"])


def test_an_empty_except_is_left_out_as_the_api_server_stores_it(registry_factory, facts_factory):
    reg = registry_factory({**INMEMORY, "networkPolicy": {"from": [{"ipBlock": {"cidr": "192.168.0.0/24",
                                                                               "except": []}}]}})
    policy = network_policy.build(reg, facts_factory())
    assert policy is not None
    assert policy["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "192.168.0.0/24"}}]


@pytest.mark.parametrize(("peer", "message"), [
    ({}, PEER_MESSAGE),
    ({"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}, PEER_MESSAGE),
    ({"ipBlock": {"cidr": "10.0.0.0/8"}, "namespaceSelector": {}}, PEER_MESSAGE),
    ({"ipBlock": {"cidr": "10.0.0.1/8"}}, "is not a CIDR network"),
    ({"ipBlock": {"cidr": "10.0.0.0/33"}}, "is not a CIDR network"),
    ({"ipBlock": {"cidr": "10.0.0.0"}}, "pattern"),
    ({"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}, "strictly inside"),
    ({"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.0.0/16"]}}, "strictly inside"),
    ({"ipBlock": {"cidr": "10.0.0.0/16", "except": ["fd00::/64"]}}, "strictly inside"),
    ({"podSelector": {"matchLabel": {"a": "b"}}}, "matchLabel"),
])
def test_the_model_refuses_a_peer_that_is_not_one_kind_or_a_bad_cidr(registry_factory, peer, message):
    for field in ("from", "metricsFrom"):
        with pytest.raises(pydantic.ValidationError) as refused:
            registry_factory({**INMEMORY, "networkPolicy": {field: [peer]}})
        assert message in str(refused.value), str(refused.value)


def test_the_kind_is_cached_applied_pruned_and_granted(registry_factory):
    kind = KINDS[("networking.k8s.io/v1", "NetworkPolicy")]
    behaviour = BEHAVIOURS[kind.key]
    assert kind.cached and kind.applied == "apply" and kind.optional is None
    assert behaviour in PRUNABLE_KINDS and behaviour.prune is network_policy.name
    assert set(kind.verbs) == {"get", "list", "watch", "create", "patch", "delete"}
    assert network_policy.build in behaviour.builders
