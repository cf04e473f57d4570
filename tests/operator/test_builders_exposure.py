"""The pure builders of exposure (docs/decisions/0031-exposure.md): the Service's spec.service fields, the Ingress's
annotations and TLS, the HTTPRoute, the Certificates, and status.externalAddress from what was seen."""

from __future__ import annotations

from berth_api import Registry
from berth_operator.builders import ClusterFacts, build_all, certificate, http_route, ingress, service
from berth_operator.builders.exposure import external_address
from berth_operator.core.kinds import CERT_MANAGER, GATEWAY

FACTS = ClusterFacts("img")  # every optional API served
NOT_SERVED = ClusterFacts("img", unserved=frozenset({(GATEWAY, "HTTPRoute"), (CERT_MANAGER, "Certificate")}))
ISSUER = {"name": "ca", "kind": "ClusterIssuer"}


def reg(**spec: object) -> Registry:
    return Registry.model_validate({"metadata": {"name": "r", "namespace": "ns", "uid": "u"},
                                    "spec": {"config": {"storage": {"inmemory": {}}}, **spec}})


def test_the_service_takes_type_node_port_annotations_and_labels_berths_labels_winning():
    built = service.build(reg(service={"type": "NodePort", "nodePort": 30500, "externalTrafficPolicy": "Local",
                                       "annotations": {"a.example/x": "1"},
                                       "labels": {"team": "p", "app.kubernetes.io/managed-by": "me"}}), FACTS)
    assert built["spec"]["type"] == "NodePort" and built["spec"]["ports"][0]["nodePort"] == 30500
    assert built["spec"]["externalTrafficPolicy"] == "Local"
    assert built["metadata"]["annotations"] == {"a.example/x": "1"}
    assert built["metadata"]["labels"]["team"] == "p"
    assert built["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth"
    assert service.build(reg(), FACTS)["spec"]["type"] == "ClusterIP"


def test_must_replace_only_for_another_class_on_a_load_balancer():
    live = {"spec": {"type": "LoadBalancer", "loadBalancerClass": "a"}}
    assert service.must_replace(live, {"spec": {"type": "LoadBalancer", "loadBalancerClass": "b"}})
    assert service.must_replace(live, {"spec": {"type": "LoadBalancer"}})
    assert not service.must_replace(live, {"spec": {"type": "LoadBalancer", "loadBalancerClass": "a"}})
    assert not service.must_replace(live, {"spec": {"type": "NodePort"}})
    assert not service.must_replace({"spec": {"type": "ClusterIP"}},
                                    {"spec": {"type": "LoadBalancer", "loadBalancerClass": "b"}})


def test_the_ingress_defaults_upload_settings_the_users_annotations_win():
    built = ingress.build(reg(http={"tls": {"secretName": "own"}}, ingress={
        "hosts": ["a.example.com", "b.example.com"], "className": "nginx",
        "annotations": {"nginx.ingress.kubernetes.io/proxy-read-timeout": "3600"}, "tls": {"issuerRef": ISSUER}}),
        FACTS)
    notes = built["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-body-size"] == "0"
    assert notes["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"
    assert notes["nginx.ingress.kubernetes.io/backend-protocol"] == "HTTPS"
    assert [rule["host"] for rule in built["spec"]["rules"]] == ["a.example.com", "b.example.com"]
    assert built["spec"]["tls"] == [{"hosts": ["a.example.com", "b.example.com"], "secretName": "r-ingress-tls"}]
    assert built["spec"]["ingressClassName"] == "nginx"
    assert ingress.build(reg(), FACTS) is None


def test_optional_kinds_are_built_only_where_served():
    spec = {"http": {"tls": {"issuerRef": ISSUER}}, "gateway": {"parentRefs": [{"name": "g"}]}}
    kinds = {m["kind"] for m in build_all(reg(**spec), FACTS, http_secret_value=None)}
    assert {"Certificate", "HTTPRoute"} <= kinds
    kinds = {m["kind"] for m in build_all(reg(**spec), NOT_SERVED, http_secret_value=None)}
    assert not {"Certificate", "HTTPRoute"} & kinds
    assert certificate.build(reg(http={"tls": {"secretName": "own"}}), FACTS) is None
    route = http_route.build(reg(**spec), FACTS)
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "g"}]
    assert route["spec"]["rules"][0]["backendRefs"][0] == {"group": "", "kind": "Service", "name": "r", "port": 5000}


def test_the_external_address_is_what_was_seen():
    lb = reg(service={"type": "LoadBalancer"})
    pending = {"spec": {"type": "LoadBalancer", "ports": [{"port": 5000, "nodePort": 31000}]}, "status": {}}
    assert external_address(lb, pending) == "NODE:31000"  # no address yet: the node port works already
    served = {**pending, "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}
    assert external_address(lb, served) == "203.0.113.7:5000"
    assert external_address(reg(), {"spec": {"type": "ClusterIP", "ports": [{"port": 5000}]}}) is None
    assert external_address(reg(ingress={"hosts": ["r.example.com"]}), None) == "http://r.example.com"
    assert external_address(reg(ingress={"hosts": ["r.example.com"], "tls": {"secretName": "t"}}), None) \
        == "https://r.example.com"
