"""spec.networkPolicy on the real API server.

- The NetworkPolicy Berth builds, with every kind of peer, is admitted with strict field validation (dry run)
  against the API server's own networking.k8s.io/v1 schema and its validation (CIDRs, except inside cidr).
- Admission refuses a peer that is neither an ipBlock nor selectors, or both, and a CIDR of the wrong shape,
  naming the field.
- berth-operator (deploy/'s RBAC, its own token, as a process) builds it for a Registry that asks, updates it
  when the selectors change, prunes it when the field is removed, and never changes the Deployment's template
  for it; RBAC refuses it nothing.

Only the object is tested: this API server runs no CNI, and the test node enforces no NetworkPolicy, so what
it admits on the wire is not (docs/guide/exposure.md says so).
"""

from __future__ import annotations

import copy
import json

import pytest

from berth_api import Registry
from berth_api.network_policy import PEER_MESSAGE
from berth_operator.builders import ClusterFacts, network_policy
from berth_operator.builders.meta import selector_labels
from support.clusters.apiserver import ApiError, KubeApiServer
from support.clusters.apiserver_identities import OPERATOR_USER, refused_requests, start_operator
from support.clusters.operator_harness import wait_for

REGISTRIES = "berth.dev/v1alpha1/registries"
POLICIES = "networking.k8s.io/v1/networkpolicies"
MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
INGRESS_NGINX = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}},
                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}}}
NODES = {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.200.0/24"]}}


def registry(namespace: str, **spec: object) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
            "metadata": {"name": "fenced", "namespace": namespace},
            "spec": {"config": {"storage": {"inmemory": {}}}, **spec}}


def model(namespace: str, **spec: object) -> Registry:
    body = registry(namespace, **spec)
    body["metadata"]["uid"] = "u"
    return Registry.model_validate(body)


def test_the_network_policy_is_admitted_strictly(kube_apiserver, apiserver_namespace):
    api, ns = kube_apiserver, apiserver_namespace
    peers = [INGRESS_NGINX, {"podSelector": {}}, {"namespaceSelector": {}},
             {"podSelector": {"matchExpressions": [{"key": "role", "operator": "NotIn", "values": ["x"]}]}},
             NODES, {"ipBlock": {"cidr": "fd00::/64", "except": ["fd00::/96"]}}, {"ipBlock": {"cidr": "0.0.0.0/0"}}]
    for spec in ({}, {"from": peers, "metricsFrom": [MONITORING]}):
        built = network_policy.build(model(ns, networkPolicy=spec), ClusterFacts("img"))
        assert built is not None
        manifest = copy.deepcopy(built)
        manifest["metadata"].pop("ownerReferences")  # the owner does not exist in a dry run
        answer = api.create(manifest, dryRun="All", fieldValidation="Strict")
        assert answer["spec"]["policyTypes"] == ["Ingress"]
        assert answer["spec"]["ingress"] == built["spec"]["ingress"], "the server stores what Berth builds"
    wrong = copy.deepcopy(manifest)
    wrong["spec"]["ingress"][0]["from"][4]["ipBlock"]["except"] = ["10.1.0.0/24"]  # outside the cidr
    with pytest.raises(ApiError) as refused:
        api.create(wrong, dryRun="All", fieldValidation="Strict")
    assert refused.value.status == 422, refused.value.body  # the model refuses it first (test_builders_network_policy)


@pytest.mark.parametrize(("peer", "message"), [
    ({}, PEER_MESSAGE),
    ({"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}, PEER_MESSAGE),
    ({"ipBlock": {"cidr": "10.0.0.0"}}, "should match"),
])
def test_admission_refuses_a_peer_naming_the_field(kube_apiserver, apiserver_namespace, peer, message):
    for field in ("from", "metricsFrom"):
        with pytest.raises(ApiError) as refused:
            kube_apiserver.create(registry(apiserver_namespace, networkPolicy={field: [peer]}))
        body = json.dumps(refused.value.body)
        assert refused.value.status == 422 and f"spec.networkPolicy.{field}[0]" in body and message in body, body


def template(api: KubeApiServer, ns: str) -> str:
    return json.dumps((api.get("apps/v1/deployments", ns, "fenced") or {}).get("spec", {}).get("template"),
                      sort_keys=True)


def test_the_operator_builds_updates_and_prunes_the_network_policy(kube_apiserver, apiserver_namespace, tmp_path):
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns))
    operator, token = start_operator(api, "berth-operator-0", tmp_path, [ns])
    try:
        wait_for(lambda: api.get("apps/v1/deployments", ns, "fenced"), "the Deployment", 90)
        before = template(api, ns)
        assert api.get(POLICIES, ns, "fenced") is None, "off by default"

        api.patch(REGISTRIES, ns, "fenced", {"spec": {"networkPolicy": {}}})
        made = wait_for(lambda: api.get(POLICIES, ns, "fenced"), "the NetworkPolicy", 60)
        reg = model(ns)
        assert made["spec"]["podSelector"] == {"matchLabels": selector_labels(reg)}
        assert made["spec"]["policyTypes"] == ["Ingress"]
        assert made["spec"]["ingress"] == [{"from": [{"podSelector": {}}],
                                            "ports": [{"protocol": "TCP", "port": 5000}]}]
        assert made["metadata"]["ownerReferences"][0]["kind"] == "Registry"

        # Other selectors, and the metrics ports for the monitoring namespace: the object follows.
        api.patch(REGISTRIES, ns, "fenced", {"spec": {"networkPolicy": {"from": [INGRESS_NGINX, NODES],
                                                                        "metricsFrom": [MONITORING]}}})
        updated = wait_for(lambda: (p := api.get(POLICIES, ns, "fenced")) and len(p["spec"]["ingress"]) == 2 and p,
                           "the NetworkPolicy with the metrics rule", 60)
        assert updated["metadata"]["uid"] == made["metadata"]["uid"], "updated in place, not replaced"
        assert updated["spec"]["ingress"] == [
            {"from": [INGRESS_NGINX, NODES], "ports": [{"protocol": "TCP", "port": 5000}]},
            {"from": [MONITORING], "ports": [{"protocol": "TCP", "port": 8081}, {"protocol": "TCP", "port": 8082}]}]
        api.patch(REGISTRIES, ns, "fenced", {"spec": {"networkPolicy": {"from": None, "metricsFrom": [
            {"namespaceSelector": {"matchLabels": {"team": "observability"}}}]}}})  # a merge patch: None removes
        wait_for(lambda: (p := api.get(POLICIES, ns, "fenced")) and p["spec"]["ingress"][0]["from"]
                 == [{"podSelector": {}}] and p["spec"]["ingress"][1]["from"]
                 == [{"namespaceSelector": {"matchLabels": {"team": "observability"}}}],
                 "the NetworkPolicy with the new selectors", 60)

        # Removing the field prunes it.
        api.patch(REGISTRIES, ns, "fenced", {"spec": {"networkPolicy": None}})
        wait_for(lambda: api.get(POLICIES, ns, "fenced") is None, "the NetworkPolicy pruned", 60)
        assert template(api, ns) == before, "spec.networkPolicy changed the pod template"
    finally:
        operator.stop()
    refused = refused_requests(api, token)
    assert refused == [], refused[:3]
    verbs = {e["verb"] for e in api.audit(OPERATOR_USER)
             if (e.get("objectRef") or {}).get("resource") == "networkpolicies"
             and (e.get("objectRef") or {}).get("namespace") == ns}
    assert {"patch", "delete"} <= verbs, verbs
