"""spec.service, spec.ingress, spec.gateway and cert-manager issuers on the real API server, with the
Gateway API and cert-manager CRDs vendored from their releases (tests/fixtures, Apache-2.0).

- Berth's NodePort and LoadBalancer Services, Ingress, HTTPRoute and Certificates are admitted with strict field
  validation (dry run) against the API server's own schemas and the vendored CRDs.
- Admission refuses the invalid combinations, naming the field: a nodePort without NodePort, TLS both from a
  Secret and from an issuer, an ingress without hosts.
- berth-operator (deploy/'s RBAC, its own token) makes the Ingress and shapes the Service, reports
  status.externalAddress; removing the field prunes the object, the Deployment's template unchanged. Each field
  edited alone, and the Service replaced for another load balancer class: test_exposure_edits.py.
"""

from __future__ import annotations

import copy
import json

import pytest

from berth_api import Registry
from berth_operator.builders import ClusterFacts, certificate, http_route, ingress, service
from support.clusters.apiserver import (
    ApiError,
    KubeApiServer,
    install_cert_manager_crds,
    install_gateway_api_crds,
)
from support.clusters.apiserver_identities import refused_requests, start_operator
from support.common.polling import wait_for

REGISTRIES = "berth.dev/v1alpha1/registries"
ISSUER = {"name": "ca", "kind": "ClusterIssuer"}


def registry(namespace: str, **spec: object) -> dict:
    return {"apiVersion": "berth.dev/v1alpha1", "kind": "Registry",
            "metadata": {"name": "outside", "namespace": namespace},
            "spec": {"config": {"storage": {"inmemory": {}}}, **spec}}


def model(namespace: str, **spec: object) -> Registry:
    body = registry(namespace, **spec)
    body["metadata"]["uid"] = "u"
    return Registry.model_validate(body)


def dry_run(api: KubeApiServer, manifest: dict) -> dict:
    manifest = copy.deepcopy(manifest)
    manifest["metadata"].pop("ownerReferences", None)  # the owner does not exist in a dry run
    return api.create(manifest, dryRun="All", fieldValidation="Strict")


def test_berths_objects_are_admitted_strictly(kube_apiserver, apiserver_namespace):
    api, ns = kube_apiserver, apiserver_namespace
    install_gateway_api_crds(api)
    install_cert_manager_crds(api)
    facts = ClusterFacts("img")
    for shape in ({"type": "NodePort", "nodePort": 30555, "externalTrafficPolicy": "Local",
                   "annotations": {"a.example.com/b": "c"}, "labels": {"team": "platform"}},
                  {"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"}, {"type": "NodePort"}):
        answer = dry_run(api, service.build(model(ns, service=shape), facts))
        assert answer["spec"]["type"] == shape["type"]
        assert answer["spec"]["ports"][0]["nodePort"] >= 30000  # allocated, or the one asked for
        if shape["type"] == "LoadBalancer":
            assert answer["status"] == {"loadBalancer": {}}  # no controller: an empty load balancer status
    reg = model(ns, http={"tls": {"issuerRef": ISSUER}},
                ingress={"className": "nginx", "hosts": ["registry.example.com"], "tls": {"issuerRef": ISSUER}},
                gateway={"parentRefs": [{"name": "public", "sectionName": "https"}],
                         "hostnames": ["registry.example.com"]})
    built = [ingress.build(reg, facts), http_route.build(reg, facts), certificate.build(reg, facts),
             certificate.build_ingress(reg, facts)]
    for manifest in built:
        assert manifest is not None
        dry_run(api, manifest)
    assert built[0]["spec"]["tls"] == [{"hosts": ["registry.example.com"], "secretName": "outside-ingress-tls"}]
    assert built[2]["spec"]["dnsNames"] == ["outside", f"outside.{ns}", f"outside.{ns}.svc",
                                            f"outside.{ns}.svc.cluster.local"]
    wrong = copy.deepcopy(built[1])
    wrong["spec"]["rules"][0]["backendRefs"][0]["weigth"] = 1
    with pytest.raises(ApiError) as refused:
        dry_run(api, wrong)
    assert "weigth" in str(refused.value.body)


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({"service": {"nodePort": 30500}}, "spec.service", "service.nodePort needs service.type NodePort"),
    ({"http": {"tls": {"secretName": "t", "issuerRef": ISSUER}}}, "spec.http.tls",
     "set exactly one of secretName and issuerRef"),
    ({"ingress": {"hosts": []}}, "spec.ingress.hosts", "should have at least 1 items"),
    ({"ingress": {"hosts": ["r.example.com"], "tls": {"secretName": "t", "issuerRef": ISSUER}}},
     "spec.ingress.tls", "set exactly one of secretName and issuerRef"),
])
def test_admission_refuses_invalid_combinations_naming_the_field(kube_apiserver, apiserver_namespace, spec, field,
                                                                 message):
    with pytest.raises(ApiError) as refused:
        kube_apiserver.create(registry(apiserver_namespace, **spec))
    body = json.dumps(refused.value.body)
    assert refused.value.status == 422 and field in body and message in body, body


def template(api: KubeApiServer, ns: str) -> str:
    return json.dumps((api.get("apps/v1/deployments", ns, "outside") or {}).get("spec", {}).get("template"),
                      sort_keys=True)


def test_the_operator_shapes_the_service_makes_and_prunes_the_ingress(kube_apiserver, apiserver_namespace,
                                                                      tmp_path):
    api, ns = kube_apiserver, apiserver_namespace
    api.create(registry(ns))
    operator, token = start_operator(api, "berth-operator-0", tmp_path, [ns])
    try:
        wait_for(lambda: api.get("apps/v1/deployments", ns, "outside"), "the Deployment", 90)
        before = template(api, ns)
        api.patch(REGISTRIES, ns, "outside", {"spec": {"service": {"type": "NodePort", "nodePort": 30577}}})
        svc = wait_for(lambda: (s := api.get("v1/services", ns, "outside")) and s["spec"]["type"] == "NodePort"
                       and s, "the NodePort Service", 60)
        assert svc["spec"]["ports"][0]["nodePort"] == 30577
        wait_for(lambda: (api.get(REGISTRIES, ns, "outside").get("status") or {}).get("externalAddress")
                 == "NODE:30577", "status.externalAddress NODE:30577", 60)
        api.patch(REGISTRIES, ns, "outside", {"spec": {"ingress": {"hosts": ["registry.example.com"],
                                                                   "tls": {"secretName": "edge"}}}})
        made = wait_for(lambda: api.get("networking.k8s.io/v1/ingresses", ns, "outside"), "the Ingress", 60)
        assert made["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"] == "0"
        assert made["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"] == {
            "name": "outside", "port": {"name": "http"}}
        wait_for(lambda: (api.get(REGISTRIES, ns, "outside").get("status") or {}).get("externalAddress")
                 == "https://registry.example.com", "status.externalAddress of the Ingress", 60)
        # Back to ClusterIP in place (the API server drops the node port), the Ingress removed: pruned.
        api.patch(REGISTRIES, ns, "outside", {"spec": {"service": None, "ingress": None}})
        wait_for(lambda: api.get("networking.k8s.io/v1/ingresses", ns, "outside") is None, "the Ingress pruned", 60)
        svc = wait_for(lambda: (s := api.get("v1/services", ns, "outside")) and s["spec"]["type"] == "ClusterIP"
                       and s, "the ClusterIP Service", 60)
        assert "nodePort" not in svc["spec"]["ports"][0]
        wait_for(lambda: "externalAddress" not in (api.get(REGISTRIES, ns, "outside").get("status") or {}),
                 "status.externalAddress gone", 60)
        assert template(api, ns) == before, "a Service or Ingress edit changed the pod template"
    finally:
        operator.stop()
    refused = refused_requests(api, token)
    assert refused == [], refused[:3]


def test_a_load_balancer_class_change_is_refused_in_place_and_must_replace_says_so(kube_apiserver,
                                                                                  apiserver_namespace):
    """What builders.service.must_replace is for: the API server refuses another loadBalancerClass on a
    LoadBalancer, and changes the type in place (ClusterIP to NodePort to LoadBalancer and back)."""
    api, ns = kube_apiserver, apiserver_namespace
    facts = ClusterFacts("img")
    first = service.build(model(ns, service={"type": "LoadBalancer", "loadBalancerClass": "example.com/a"}), facts)
    first["metadata"].pop("ownerReferences")
    live = api.create(first)
    other = service.build(model(ns, service={"type": "LoadBalancer", "loadBalancerClass": "example.com/b"}), facts)
    with pytest.raises(ApiError) as refused:
        api.patch("v1/services", ns, "outside", {"spec": {"loadBalancerClass": "example.com/b"}})
    assert refused.value.status == 422 and "loadBalancerClass" in json.dumps(refused.value.body)
    assert service.must_replace(live, other)
    for kind in ("NodePort", "ClusterIP"):
        wanted = service.build(model(ns, service={"type": kind}), facts)
        assert not service.must_replace(live, wanted)
        live = api.patch("v1/services", ns, "outside", {"spec": {"type": kind}})  # the rest dropped by the server
        assert live["spec"]["type"] == kind and "loadBalancerClass" not in live["spec"]
